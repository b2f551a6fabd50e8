"""probe.json's sections of facts (`model`, `engine_env`, `host`, the GPUs, the attention backends),
spelled once: the probe's checks build them, the report holds them, the findings and the other
stages read them.

TypedDicts, not records: a section is written to probe.json as the dict itself, so the file keeps
its keys and their order, and a probe.json of an earlier kit reads as it is. A section whose keys
depend on how far the probe got (a model directory that does not exist has only `path` and `exists`)
is `total=False`. Standard library only, as the rest of kit.artifacts.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


# ---- inputs (kit.probe.checks.ProbeInputs) -------------------------------------
class InputsSection(TypedDict, total=False):
    """probe.json's `inputs`: what the probe was asked to check, paths as text (ProbeInputs.to_json)."""

    model_path: str
    output_dir: str
    engine_python: str
    flavor: str
    cache_dir: str | None
    engine_env: dict[str, str]
    context_len: int
    mem_fraction: float
    measure_gpu: bool
    tp_size: int
    dp_size: int
    spec_algorithm: str | None
    spec_topk: int | None
    spec_draft_tokens: int | None
    requested_backend: str | None
    device: str
    planned_command: list[str] | None
    run: str | None


# ---- model (kit.probe.model_dir) ----------------------------------------------
class ArchFacts(TypedDict):
    """The config facts a person checks, the hybrid layer pattern spelled out (`model.config`)."""

    architectures: list[str]
    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_embeddings: bool
    dtype: str
    max_positions: int | None
    is_mla: bool
    is_moe: bool
    is_hybrid: bool
    full_attention_layers: list[int]
    linear_attention_layers: list[int]
    mtp_layers: int
    params_from_config: int
    active_params_from_config: int
    kv_bytes_per_token: int
    state_bytes_per_seq: int


TokenizerLoad = TypedDict(
    "TokenizerLoad",
    {"loaded": bool, "class": str, "vocab_size": int, "template_error": str, "error": str},
    total=False,
)
"""What loading the tokenizer in a child process said (kit.probe.tokenizer_check): `loaded`, with
`class` and `vocab_size` (and `template_error` when the chat template does not render), or the
loader's `error`."""


class TokenizerFacts(TypedDict):
    """`model.tokenizer`: the tokenizer and chat-template files present, and whether they load."""

    files: list[str]
    tokenizer_config: bool
    chat_template: bool
    chat_template_in: list[str]
    """The files that hold a chat template."""
    load: TokenizerLoad | None
    """None when there is nothing to load or loading was not asked."""


class IndexSummary(TypedDict):
    """`model.index`: model.safetensors.index.json summarized (its weight map counted, not listed)."""

    error: NotRequired[str]
    """The index is unreadable; shards and missing are then empty."""
    total_size: NotRequired[int | None]
    shards: list[str]
    missing: list[str]
    """Shards the index lists that are not on disk."""
    tensors: int


class SafetensorsFacts(TypedDict):
    """`model.safetensors`: parameters, bytes and dtypes over the *.safetensors headers, main weights
    and MTP apart (kit.probe.weights.summarize_headers)."""

    files: list[str]
    params_main: int
    params_mtp: int
    bytes_main: int
    bytes_mtp: int
    dtypes: dict[str, int]
    """dtype -> parameters."""
    tensors: int
    errors: dict[str, str]
    """File -> why its header could not be read."""
    params_total: int
    dtype: str | None
    """The dtype of most parameters."""


class MtpFacts(TypedDict):
    """`model.mtp`: whether the MTP weights are there, with the evidence for it."""

    status: str
    """present, declared_missing or absent_from_architecture."""
    declared_layers: int
    config_key: str | None
    tensors_in_index: int
    tensors_in_headers: int
    separate_files: list[str]
    unindexed_files: list[str]
    evidence: list[str]


class ShapeMarker(TypedDict, total=False):
    """A shape-only folder's kit_shape.json (written by kit.demo.shape_model, read by
    kit.modelshape.shape_of), or the `error` that it is not valid JSON."""

    shape: str
    source: str | None
    weights: str
    meaning: str
    error: str


class ModelFacts(TypedDict, total=False):
    """probe.json's `model`: what the probe read from the model directory, without loading a tensor
    (kit.probe.model_dir.inspect_model_dir). Only `path` and `exists` when the directory does not
    exist; `path` and `error` when inspecting it raised."""

    path: str
    exists: bool
    error: str
    config_error: str | None
    config: ArchFacts | None
    index: IndexSummary | None
    safetensors: SafetensorsFacts
    other_weights: list[str]
    tokenizer: TokenizerFacts
    generation_config: dict[str, Any] | None
    """generation_config.json as read (its keys are the model's), or an `error`."""
    shape_only: ShapeMarker | None
    """The shape-only marker (kit.modelshape.shape_of), None for a real checkpoint."""
    mtp: MtpFacts


# ---- engine_env (kit.probe.engine_env) ----------------------------------------
class InterpreterFacts(TypedDict, total=False):
    """`engine_env.interpreter`: what the engine's interpreter said of itself, or an `error`."""

    version: str
    executable: str
    prefix: str
    base_prefix: str
    packages: dict[str, str | None]
    """Distribution -> installed version (None: not installed)."""
    modules: dict[str, bool]
    """Module -> importable (`Flavor.speculative_modules`)."""
    files: dict[str, bool | None]
    """`package/glob` -> found in the package (None: no such package; `Flavor.backend_files`)."""
    pins: dict[str, dict[str, list[str]]]
    """Engine -> its exact pins that this environment does not hold: name -> [wanted, installed]."""
    error: str


class PipCheck(TypedDict):
    """`engine_env.pip`: whether `python -m pip --version` works, with its output or the error."""

    ok: bool
    output: str


class LauncherFacts(TypedDict, total=False):
    """`engine_env.launcher`: the flags and choices of the launcher's --help, or an `error`."""

    cached: str | None
    """The file that caches the --help text."""
    flags: list[str]
    choices: dict[str, list[str]]
    """Choices of the parser and backend flags."""
    from_cache: bool
    error: str


class MissingFlag(TypedDict):
    """A flag of the planned server command the launcher does not accept, and the one it does."""

    flag: str
    use: str | None


class EngineEnvFacts(TypedDict, total=False):
    """probe.json's `engine_env`: the engine's interpreter, packages and launcher, against the planned
    command. Only `flavor` for a server the kit does not start; no `pip` or `launcher` when the
    interpreter does not run."""

    python: str
    flavor: str
    uv: str | None
    env: list[str]
    """The names of the variables the server is started with beside the environment."""
    interpreter: InterpreterFacts
    pip: PipCheck
    launcher: LauncherFacts
    planned_algorithm: str
    planned_flags: list[str]
    missing_flags: list[MissingFlag]


# ---- host (kit.probe.host) ----------------------------------------------------
class HostFacts(TypedDict, total=False):
    """probe.json's `host`; kit.probe.host.host_facts writes every key."""

    hostname: str
    cpu_logical: int | None
    cpu_physical: int | None
    ram_total_bytes: int
    ram_available_bytes: int
    output_dir: str
    disk_free_bytes: int
    """On the filesystem that holds output_dir."""
    shm_total_bytes: int | None
    shm_free_bytes: int | None
    os: str
    python: str
    python_executable: str


# ---- gpus (kit.probe.gpu) -----------------------------------------------------
class GpuDevice(TypedDict, total=False):
    """One of `gpus.devices` (kit.probe.gpu.GpuFacts.to_dict); GpuFacts.from_dict reads it back."""

    name: str
    arch: str | None
    memory_total_bytes: int | None
    memory_free_bytes: int | None
    index: int
    sm_count: int | None
    smem_per_block_optin: int | None
    clock_sm_max_mhz: int | None
    clock_mem_max_mhz: int | None
    driver_version: str | None
    cuda_driver_version: str | None


class TorchDevice(TypedDict):
    """A device as torch describes it (kit/probe/torch_query.py)."""

    index: int
    name: str
    arch: str
    memory_total_bytes: int
    sm_count: int
    smem_per_block_optin: int | None


class TorchMeasured(TypedDict):
    """Copy bandwidth (read + write) and dense bf16 matmul rate on device 0 (torch_query.py --measure)."""

    copy_bytes: int
    copy_bandwidth_bytes_s: float
    matmul_n: int
    bf16_flops: float
    seconds: float


class TorchInfo(TypedDict, total=False):
    """`gpus.torch`: what torch said in a child process, or an `error`, or why it was `skipped`."""

    torch_version: str | None
    cuda_available: bool
    devices: list[TorchDevice]
    error: str
    torch_cuda_version: str | None
    measured: TorchMeasured
    skipped: str


class DatasheetFigures(TypedDict):
    """A GPU's figures as kit/probe/datasheet.yaml gives them (TB/s, TFLOP/s, GB, KiB)."""

    name: str
    arch: str
    memory_gb: float
    bandwidth_tbs: float
    bf16_tflops: float
    fp8_tflops: float | None
    smem_per_block_kb: float
    gemm_efficiency: NotRequired[float]


class DatasheetEntry(DatasheetFigures):
    """`gpus.datasheet`: a GPU's entry of the datasheet with its figures in SI units besides."""

    bandwidth_bytes_s: float
    bf16_flops: float
    fp8_flops: float | None
    memory_bytes: int
    smem_per_block_bytes: int


# ---- backends (kit.probe.backends) --------------------------------------------
class BackendVerdict(TypedDict):
    """One of probe.json's `backends`: whether an attention backend runs here (ok / warn / fail), and why."""

    backend: str
    status: str
    reason: str


class BackendChoice(TypedDict):
    """The `--attention-backend` value the probe recommends (None: no CUDA GPU), and why."""

    backend: str | None
    reason: str
