"""The params file's sections: one frozen pydantic model per top-level key (`model`, `engine`, `probe`,
`decide`, `data`, `generate`, `analyse`, `export`, `report`) and `RunParams`, the whole file. Unknown keys
are errors, values are frozen once read; each section's validators check what one section can.

Reading a file into these (paths resolved, every bad key named, YAML's duplicate keys refused) is
kit/params.py, which re-exports every name here: import them from `kit.params`. The engine flavors'
names come from kit/engines/flavor_names.py, not the flavor registry, whose modules name these types.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kit.engines.flavor_names import BACKEND_SETTINGS, FLAVOR_NAMES, KV_CAP_FLAGS, NOT_STARTED
from kit.errors import ParamsError


class _Strict(BaseModel):
    """Base for every params section: unknown keys are errors, values are frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelParams(_Strict):
    path: Path
    """A local Hugging Face model directory (config.json, weights, tokenizer)."""
    demo: bool = False
    """Build the embedded demo model at `path` when it is absent (no download, a few MB)."""
    served_name: str | None = None
    """The model name sent in requests; defaults to what the server lists at /v1/models."""


class SpeculativeParams(_Strict):
    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "MTP"] | None = None
    num_steps: int | None = Field(default=None, ge=1, le=16)
    eagle_topk: int | None = Field(default=None, ge=1, le=16)
    num_draft_tokens: int | None = Field(default=None, ge=1, le=64)
    draft_model_path: Path | None = None
    adaptive: bool | None = None
    """The engine's own adaptive speculation, num_steps its ceiling (the sweep's `decide.adaptive_k` arm
    sets it; SGLang `--speculative-adaptive`, vLLM a batch-size schedule: docs/decision.md)."""


SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"}
"""Words of an environment variable's name (split at `_`) that mark it as a secret."""


FlavorName = Literal[FLAVOR_NAMES]  # type: ignore[valid-type]
"""An engine flavor's name: one per module of kit/engines/flavors/ (kit/engines/flavor_names.py, which
its registry `FLAVORS` checks itself against)."""


class EngineParams(_Strict):
    flavor: FlavorName = "transformers"
    python: Path | None = None
    """Interpreter of the engine's own environment (often another venv); default: this one."""
    base_url: str | None = None
    """For `external`: the URL of a server someone else runs, e.g. http://10.0.0.5:30000."""
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port to bind; default: a free port chosen at start."""
    startup_timeout_s: float = Field(default=600.0, gt=0)
    device: str = "cpu"
    """transformers flavor only: the torch device (`cpu`, `cuda`)."""
    tp_size: int = Field(default=1, ge=1)
    dp_size: int = Field(default=1, ge=1)
    mem_fraction_static: float | None = Field(default=None, gt=0, lt=1)
    max_running_requests: int | None = Field(default=None, ge=1)
    cuda_graph_max_bs: int | None = Field(default=None, ge=1)
    context_length: int | None = Field(default=None, ge=1)
    attention_backend: str | None = None
    sampling_backend: str | None = None
    """SGLang's `--sampling-backend` (flashinfer, pytorch); unset: the engine's own choice."""
    mamba_strategy: Literal["no_buffer", "extra_buffer", "extra_buffer_lazy"] | None = None
    enable_metrics: bool = True
    tool_call_parser: str | None = "auto"
    """The engine's tool-call parser (sglang, vllm): `auto` picks it from the model's chat template
    (docs/engines.md), null launches without one, any other name is passed as it is."""
    reasoning_parser: str | None = "auto"
    """The engine's reasoning parser, which splits the `<think>` block out of the answer: `auto`
    picks it when the chat template can think, null keeps the thinking inside the completion."""
    replicas: int = Field(default=1, ge=1)
    """Independent servers to start, one per GPU group, balanced by the client (SGLang's own
    `dp_size` is usually simpler: one server, N replicas behind one port)."""
    gpus_per_replica: int | None = Field(default=None, ge=1)
    """With `replicas > 1`: GPUs each server gets through CUDA_VISIBLE_DEVICES (default tp_size)."""
    replica_gpus: list[str] | None = None
    """With `replicas > 1`: each server's CUDA_VISIBLE_DEVICES, one entry per replica, where the
    contiguous groups of `gpus_per_replica` do not fit: `["0,1", "4,5"]` skips busy GPUs, `["0", "0"]`
    puts two servers on one GPU (each then needs a KV cache of its own size in `extra_args`, e.g.
    SGLang's `--max-total-tokens`: an engine sizes its cache from the memory free at its start).
    The local executor only: on Ray each actor is given its GPUs by Ray."""
    speculative: SpeculativeParams = SpeculativeParams()
    extra_args: list[str] = []
    """Flags passed through verbatim to the launcher, after the kit's own."""
    env: dict[str, str] = {}
    """Extra environment variables for the server process (saved in params.yaml: no secrets here;
    the server inherits the kit's own environment)."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the key of a server started with `--api-key`
    (sent as `Authorization: Bearer`). The key itself is never written to the run folder."""

    @model_validator(mode="after")
    def _external_needs_url(self) -> EngineParams:
        if self.flavor in NOT_STARTED and not self.base_url:
            raise ValueError(f"flavor {self.flavor!r} needs engine.base_url (the server's URL)")
        return self

    @model_validator(mode="after")
    def _spelt_by_the_flavor(self) -> EngineParams:
        if self.sampling_backend and "sampling_backend" not in BACKEND_SETTINGS[self.flavor]:
            raise ValueError(
                f"engine.sampling_backend is set, but {self.flavor} has no sampling backend to choose: "
                "remove it (only flavor sglang takes --sampling-backend)"
            )
        return self

    @model_validator(mode="after")
    def _one_gpu_group_per_replica(self) -> EngineParams:
        groups = self.replica_gpus
        if groups is None:
            return self
        if len(groups) != self.replicas:
            raise ValueError(
                f"engine.replica_gpus names {len(groups)} GPU group(s) for {self.replicas} replica(s): "
                "give one CUDA_VISIBLE_DEVICES value per replica, or set engine.replicas to match"
            )
        seen = [g.strip() for group in groups for g in group.split(",")]
        cap = KV_CAP_FLAGS.get(self.flavor)
        if len(seen) != len(set(seen)) and cap and cap not in self.extra_args:
            raise ValueError(
                f"engine.replica_gpus puts two servers on one GPU ({groups}), and {self.flavor} sizes its KV "
                f"cache from the memory free when it starts, so the later one would find none: add "
                f"{cap} N to engine.extra_args (N tokens of KV cache each, small enough for all to fit)"
            )
        return self

    @model_validator(mode="after")
    def _no_secret_in_the_run_folder(self) -> EngineParams:
        if any(a == "--api-key" or a.startswith("--api-key=") for a in self.extra_args):
            raise ValueError(
                "engine.extra_args holds --api-key: it would be saved in params.yaml and the server's "
                "log. Export the key in an environment variable and name it in engine.api_key_env"
            )
        secret = [k for k in self.env if SECRET_WORDS & set(k.upper().split("_"))]
        if secret:
            raise ValueError(
                f"engine.env sets {', '.join(secret)}: params.yaml keeps engine.env, so a secret there "
                "lands in the run folder. Export it in the shell instead (the server inherits the kit's "
                "environment); a server key goes in a variable named by engine.api_key_env"
            )
        return self

    def api_key(self) -> str | None:
        """The key named by `api_key_env`, read from the environment now (None without one)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ParamsError(
                f"engine.api_key_env is {self.api_key_env}, but no such environment variable is set: "
                f"export {self.api_key_env}=<the server's key> before running the kit"
            )
        return key


class ProbeParams(_Strict):
    measure_gpu: bool = False
    """Time a device-to-device copy and a bf16 matmul (< 10 s) when a GPU is present."""
    context_length: int = Field(default=4096, ge=1)
    """Context per sequence assumed by the memory plan."""
    mem_fraction: float = Field(default=0.85, gt=0, lt=1)


class DecideParams(_Strict):
    concurrencies: list[int] = [1, 4, 16]
    num_prompts: int = Field(default=32, ge=1)
    """Prompts in the fixed sweep sample (cycled when a concurrency needs more)."""
    requests_per_level: int | None = Field(default=None, ge=1)
    """Requests sent at each concurrency at least; default: two waves (2 x concurrency). Each level
    also lasts at least `level_s`."""
    max_tokens: int = Field(default=32, ge=1)
    pilot_per_source: int = Field(default=8, ge=0)
    """Prompts of each source the plain arm's server answers once after the sweep, sampled as stage 3
    samples and with its output budget (`generate.sampling`, each source's `max_tokens`): their
    lengths predict the job's output tokens (kit.decide.forecast.job) and stage 3's order; 0: no pilot
    (the forecast then rests on the sweep's greedy answers, cut at `max_tokens`, or on the budgets)."""
    level_s: float = Field(default=5.0, ge=0)
    """Seconds each measurement lasts at least (requests keep coming until then): a level of a
    fraction of a second is one hiccup of a shared machine away from a 3x error."""
    repetitions: int = Field(default=3, ge=1)
    """Rounds of the sweep: each (arm, level) is measured this many times, the arms interleaved,
    and the decision compares the intervals of their medians (kit.decide.measure.noise)."""
    time_budget_s: float | None = Field(default=None, gt=0)
    """Seconds the sweep may take: rounds that would overrun it are left out (at least one runs).
    Unset: `budget_share` of the job's forecast hours on the plain arm (kit.decide.sweep.budget)."""
    budget_share: float = Field(default=0.02, ge=0, le=1)
    """Without `time_budget_s`, the sweep may take this share of the job it decides for (the plan's
    output tokens at plain decoding's measured rate, read after the first round), never less than
    one round: a 2,000-prompt job is not preceded by half an hour of sweep, a 2-million-prompt job
    gets its repetitions. 0: no budget (every round runs)."""
    racing: bool = True
    """After each round, leave out the (arm, level) measurements already ruled out outside the
    noise (kit.decide.sweep.racing): the rounds that remain go to the close calls. False: every round
    measures every arm at every level."""
    crash_restarts: int = Field(default=2, ge=0)
    """Times an arm's server that dies while measured is restarted (and its level measured again)
    over the whole sweep; one more crash and the arm is `crashed`, named in the decision with the
    engine's own error, and not chosen."""
    servers: Literal["auto", "together", "one_at_a_time"] = "auto"
    """Keep every arm's server up side by side (a round costs requests, not restarts), or start each
    arm's server in turn every round. auto: together on a CPU when they fit in memory, else one at
    a time (on a GPU each server takes the GPUs' memory)."""
    spec_steps: list[int] = [1, 2, 3]
    """Draft lengths k to try for the speculative arms."""
    adaptive_k: int | None = Field(default=None, ge=1, le=7)
    """Also measure the engine's own adaptive speculation with this ceiling (SGLang, vLLM): compared
    with plain and the arm the decision picks per level (kit.decide.measure.adaptive), never chosen."""
    answers_check: bool = True
    """Before stage 3 samples with the speculative arm the decision picked, answer the pilot's prompts
    four times with it and four times with plain decoding, as stage 3 samples, and compare
    (kit.decide.checks.answers): an arm whose speculation changes the answers is set aside. Costs two
    more server starts (plain's and the arm's), outside `time_budget_s`."""
    accept_lengths: dict[int, float] = {}
    """Expected accept length per k for the prediction (e.g. {3: 3.2}); from the sweep when measured."""
    objective: Literal["throughput", "latency_bound"] = "throughput"
    latency_bound_s: float | None = Field(default=None, gt=0)
    profile: Path | None = None
    """A step-time profile (parquet) measured on this device for this model's config."""
    draft: Literal["mtp", "eagle", "eagle3", "draft_model", "self_spec", "ngram"] | None = None
    """What the speculative arms draft with, for the prediction (kit.decide.costmodel.drafts); default from
    engine.speculative.algorithm: NGRAM -> ngram, EAGLE3 -> eagle3, STANDALONE -> draft_model,
    EAGLE with a draft model -> eagle, otherwise the model's own MTP heads."""
    draft_config: Path | None = None
    """config.json (or its directory) of the draft model or EAGLE head; default
    engine.speculative.draft_model_path."""
    draft_kv_budget: int | None = Field(default=None, ge=1)
    """self_spec: tokens of KV cache the draft attends to (MagicDec's StreamingLLM budget)."""
    backends: dict[Literal["attention_backend", "sampling_backend"], list[str]] = {}
    """Engine settings to measure against the params' own after the speculation sweep, e.g.
    `{attention_backend: [triton, flashinfer], sampling_backend: [pytorch]}`: one server per value, the
    chosen arm at the top level, sampled as stage 3 samples (kit.decide.checks.settings_sweep); a value
    that beats the params' own outside the noise goes to stage 3. {}: nothing more is measured."""

    @field_validator("backends")
    @classmethod
    def _values_named(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        if any(not values or not all(x.strip() for x in values) for values in v.values()):
            raise ValueError(
                "each setting needs a non-empty list of values, e.g. {attention_backend: [triton]}"
            )
        return {k: list(dict.fromkeys(values)) for k, values in v.items()}

    @field_validator("concurrencies", "spec_steps")
    @classmethod
    def _positive_sorted(cls, v: list[int]) -> list[int]:
        if not v or any(x < 1 for x in v):
            raise ValueError("must be a non-empty list of positive integers")
        return sorted(set(v))

    @model_validator(mode="after")
    def _draft_needs_what_it_costs(self) -> DecideParams:
        if self.draft == "self_spec" and self.draft_kv_budget is None:
            raise ValueError("draft 'self_spec' needs decide.draft_kv_budget (tokens of KV it attends to)")
        if self.draft != "self_spec" and self.draft_kv_budget is not None:
            raise ValueError("decide.draft_kv_budget applies only to draft: self_spec")
        return self


class SourceParams(_Strict):
    name: str
    """Name of this source in the outputs (the `source` column)."""
    adapter: str
    """Adapter from the registry that turns a row into chat messages (see `kit adapters`)."""
    dataset: str
    """Hugging Face dataset id, or a builder for local files: json, parquet, csv."""
    config: str | None = None
    split: str = "train"
    data_files: list[Path] | None = None
    count: int | None = Field(default=None, ge=0)
    """Target number of prompts; default: all rows."""
    weight: float | None = Field(default=None, gt=0)
    """Share of `data.total` when `count` is not given."""
    language: str | None = None
    """Keep rows in this language where the source says (e.g. Infinity-Instruct `langdetect`)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Output budget for this source's prompts (default: generate.sampling.max_tokens)."""


class DataParams(_Strict):
    seed: int = 0
    demo_fixtures: Path | None = None
    """Write the bundled fixture files (all six source schemas) to this folder when absent."""
    sources: list[SourceParams] = []
    total: int | None = Field(default=None, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    dedup: bool = True


class SamplingParams(_Strict):
    """What each request asks of the engine. Unset fields (None) are not sent, so the engine's and
    the model's defaults apply; the kit refuses, before the run, a field the engine would reject."""

    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    """Keep the k most likely tokens (Qwen recommends 20); -1 or None: off."""
    min_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    stop: list[str] = []
    seed: int | None = None
    """Base seed: sample i of a prompt is sent seed + i."""
    n: int = Field(default=1, ge=1)
    """Samples per prompt (sent as separate requests: not every engine honours `n`)."""
    thinking: bool | None = None
    """Thinking on or off, for models whose chat template has the switch (Qwen3 `enable_thinking`,
    DeepSeek-V3.1 `thinking`); None leaves the template's default. Part of the run's identity."""
    chat_template_kwargs: dict[str, Any] = {}
    """Extra variables for the chat template, sent as they are."""
    extra_body: dict[str, Any] = {}
    """Engine-specific request fields (e.g. SGLang's `ignore_eos`), sent as they are."""


class RayParams(_Strict):
    """Stage 3 on a Ray cluster (`generate.executor: ray`): one engine replica per Ray actor."""

    address: str | None = None
    """The cluster to join (`ray://host:10001`, `host:6379`, `auto`); default: `RAY_ADDRESS`, else
    the cluster `ray start` made on this machine, else a Ray instance started for the job (Ray's
    own `ray.init()` rules)."""
    actors: int | None = Field(default=None, ge=1)
    """Engine replicas (one per actor); default: as many as the cluster's GPUs hold (GPUs per
    replica: engine.gpus_per_replica or tp_size), on a cluster without GPUs engine.replicas."""
    cpus_per_actor: float = Field(default=1.0, gt=0)
    """CPUs each actor asks Ray for (its client loop; a CPU engine's threads need more)."""
    block_rows: int | None = Field(default=None, ge=1)
    """Work items per block (the unit handed to an actor, and re-handed when it dies); default:
    enough for about 8 blocks per actor, at least 4 times its requests in flight, at most 20,000."""
    max_actor_restarts: int = Field(default=3, ge=0)
    """Actors started in place of ones that died, before the job gives up on them (their blocks
    always go to the actors left)."""


class GenerateParams(_Strict):
    sampling: SamplingParams = SamplingParams()
    executor: Literal["local", "ray"] = "local"
    """`local`: this process and its servers (engine.replicas); `ray`: engine replicas as Ray
    actors across a cluster (`generate.ray`; `pip install kit[ray]`)."""
    ray: RayParams = RayParams()
    concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight; default: sized from the engine's capacity."""
    shard_rows: int | None = Field(default=None, ge=1)
    """Rows per shard; default 1,000, or 0.5% of a large run's rows (at most 20,000): 2M rows
    make 200 shards, not 2,000."""
    shard_mb: float = Field(default=256.0, gt=0)
    """A shard is also closed once its rows' text (completions, reasoning, prompts) reaches this."""
    shard_seconds: float = Field(default=60.0, gt=0)
    """...and at least this often, so a crash loses at most this much generation."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    retries: int = Field(default=3, ge=0)
    """Attempts after the first for a request that failed by its own fault (an error status, a
    timeout while the server answered others, an answer that is no completion). A restart of its
    server does not count."""
    max_server_restarts: int = Field(default=3, ge=0)
    """Restarts of one server in a row, with no good answer between them, before the run ends."""
    hang_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds a server may show no life (no answer, no healthy /health) before it counts as hung
    and is restarted; at most half of request_timeout_s is used. Before each start of a server has
    made its first token, `engine.startup_timeout_s` applies instead (a first-use compile)."""
    limit: int | None = Field(default=None, ge=1)
    """Generate only the first N planned prompts (a smoke run)."""
    use_decision: bool = True
    """Apply stage 2's decision.json: speculation on or off (and k), and the engine settings
    the params leave unset (max running requests, CUDA-graph batch, memory fraction, dp/tp,
    attention and sampling backends)."""
    order: Literal["longest_first", "plan"] = "longest_first"
    """The order prompts are sent in: `longest_first` by predicted output length (from the rows
    this run already made, per source and prompt length, and each source's max_tokens), so the
    longest requests do not start last and hold the job's tail; `plan`: the plan's order."""
    tail_speculation: bool = False
    """When the requests left per replica fall below the decision's crossover (where speculative
    decoding wins, measured or predicted outside its noise), restart the replicas one at a time
    with the speculative arm for the tail. Off by default; a decision without such a win leaves it off."""
    tail_drain_s: float = Field(default=30.0, ge=0)
    """Seconds a replica switching to speculation waits for its requests in flight to finish before
    it restarts (requests still out then are sent again, never lost or doubled)."""


class AnalyseParams(_Strict):
    refusal_patterns: list[str] = [
        r"^\s*(I'm sorry|I am sorry|I cannot|I can't|As an AI)",
    ]
    samples: int = Field(default=20, ge=0)
    near_duplicates: bool = True
    """Find near-duplicate prompts and answers (MinHash LSH, kit/analyse/neardup.py)."""
    near_duplicate_threshold: float = Field(default=0.85, gt=0, lt=1)
    """Jaccard similarity of word n-grams above which two texts count as near copies (docs/neardup.md)."""
    near_duplicate_ngram: int = Field(default=5, ge=1, le=32)
    near_duplicate_num_perm: int = Field(default=128, ge=16, le=1024)


class ExportParams(_Strict):
    license: str | None = None
    """The dataset card's `license` (a Hub license id such as apache-2.0); unset: `unknown`."""
    pretty_name: str | None = None


class ReportParams(_Strict):
    hide_code: bool = True


class RunParams(_Strict):
    run: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """Run name: outputs go to `<output_dir>/<run>/`."""
    output_dir: Path = Path("../outputs")
    model: ModelParams
    engine: EngineParams = EngineParams()
    probe: ProbeParams = ProbeParams()
    decide: DecideParams = DecideParams()
    data: DataParams = DataParams()
    generate: GenerateParams = GenerateParams()
    analyse: AnalyseParams = AnalyseParams()
    export: ExportParams = ExportParams()
    report: ReportParams = ReportParams()
    source_file: Path | None = None
    """Where these params were read from (set by `load_params`)."""

    @model_validator(mode="after")
    def _backends_spelt_by_the_flavor(self) -> RunParams:
        spelt = BACKEND_SETTINGS[self.engine.flavor]
        unknown = [k for k in self.decide.backends if k not in spelt]
        if unknown:
            can = f"it can measure {', '.join(spelt)}" if spelt else "it measures none"
            raise ValueError(
                f"decide.backends names {', '.join(unknown)}, which {self.engine.flavor} cannot be "
                f"launched with ({can}): remove it from decide.backends, or use flavor sglang"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return self.output_dir / self.run

    @property
    def engine_python(self) -> Path:
        return self.engine.python or Path(sys.executable)
