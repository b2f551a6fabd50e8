"""The params sections of the stages (`probe`, `decide`, `data` and its sources, `generate` with its
sampling and Ray, `analyse`, `export`, `report`): one frozen section per key, each checking what it
can alone. Those of the model and engine are kit/params/engine.py; the whole file kit/params/run_params.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kit.params.section import Section


class ProbeParams(Section):
    measure_gpu: bool = False
    """Time a device-to-device copy and a bf16 matmul (< 10 s) when a GPU is present."""
    context_length: int = Field(default=4096, ge=1)
    """Context per sequence assumed by the memory plan."""
    mem_fraction: float = Field(default=0.85, gt=0, lt=1)


class DecideParams(Section):
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
    Unset: `budget_share` of the job's forecast hours on the plain arm (kit.decide.sweep.limits)."""
    budget_share: float = Field(default=0.02, ge=0, le=1)
    """Without `time_budget_s`, the sweep may take this share of the job it decides for (the plan's
    output tokens at plain decoding's measured rate, read after the first round), never less than
    one round: a 2,000-prompt job is not preceded by half an hour of sweep, a 2-million-prompt job
    gets its repetitions. 0: no budget (every round runs)."""
    racing: bool = True
    """After each round, leave out the (arm, level) measurements already ruled out outside the
    noise (kit.decide.sweep.limits): the rounds that remain go to the close calls. False: every round
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


class SourceParams(Section):
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


class DataParams(Section):
    seed: int = 0
    demo_fixtures: Path | None = None
    """Write the bundled fixture files (all six source schemas) to this folder when absent."""
    sources: list[SourceParams] = []
    total: int | None = Field(default=None, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    dedup: bool = True


class SamplingParams(Section):
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


class RayParams(Section):
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


class GenerateParams(Section):
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


class AnalyseParams(Section):
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


class ExportParams(Section):
    license: str | None = None
    """The dataset card's `license` (a Hub license id such as apache-2.0); unset: `unknown`."""
    pretty_name: str | None = None


class ReportParams(Section):
    hide_code: bool = True
