"""The four stage artifacts as typed records, read and written through `RunFolder`:

    ProbeReport   probe.json      stage 1   folder.read_probe()     folder.write_probe(report)
    Decision      decision.json   stage 2   folder.read_decision()  folder.write_decision(decision)
    Manifest      manifest.json   stage 3   folder.read_manifest()  files.write_manifest(manifest)
                  (manifest-s<i>of<N>.json for `--shard i/N`: folder.shard(i, N).read_manifest())
    Summary       summary.json    stage 4   folder.read_summary()   folder.write_summary(summary)

Frozen dataclasses of the standard library, not pydantic models: `RunFolder` reads and writes them,
and the probe's GPU-box script (benchmarks/probe_gpu.py) imports RunFolder and builds a ProbeReport
without the kit's dependencies.

A record reads any JSON object of its kind, from any kit: a key it does not name is kept in `extra`
and written back; a key it names that the file lacks takes its default. One read from a file writes
back exactly the keys it was read with, in their order; one a stage builds writes its fields in the
order declared here (a field made with `optional()` only when it is set), which is the order the
files always had. `record["key"]` and `record.get("key")` read the JSON form, for notebook code
written against the dicts the stages returned before; the kit reads attributes.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar, Union

from kit.engines.arms import Arm

R = TypeVar("R", bound="Record")
OMIT_NONE = "omit_if_none"
Distribution = dict[str, float | int | None]
"""total, mean, p50, p90, max of a column (kit.analyse.tables.distribution)."""
JSONObject = dict[str, Any]
"""A JSON object whose keys belong to another part of the kit (engine settings, an engine's
identity, a probe section of facts): passed through as it is."""


def optional(default: Any = None) -> Any:
    """A field written only when set (not None): a key an artifact holds in some runs only."""
    return field(default=default, metadata={OMIT_NONE: True})


def _hints(cls: type) -> list[tuple[Field[Any], Any]]:
    cached = cls.__dict__.get("_fields_cache")
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = [(f, hints[f.name]) for f in fields(cls) if f.name not in ("extra", "read_keys")]
        cls._fields_cache = cached  # type: ignore[attr-defined]
    return cached


def _int_key(key: Any) -> Any:
    try:
        return int(key)
    except (TypeError, ValueError):
        return key


def _load(hint: Any, value: Any) -> Any:
    """`value` from JSON as the type `hint` names: records, arms, lists and dicts of them; anything
    else (or a value of an unexpected shape) as it is."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _load(args[0], value) if len(args) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json(value) if isinstance(value, Mapping) else value
    if hint is Arm:
        return arm_from_json(value) if isinstance(value, Mapping) else value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint)
        return [_load(item, v) for v in value]
    if origin is dict and isinstance(value, Mapping):
        key, item = typing.get_args(hint)
        return {(_int_key(k) if key is int else k): _load(item, v) for k, v in value.items()}
    return value


def _dump(value: Any) -> Any:
    """`value` as JSON data (records and arms as objects)."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, Arm):
        return arm_json(value)
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def arm_json(arm: Arm) -> dict[str, int | str | None]:
    """decision.json's `arm`: the draft length k (0: plain decoding) and the speculative algorithm."""
    return {"k": arm.k, "algorithm": arm.algorithm}


def arm_from_json(data: Mapping[str, Any]) -> Arm:
    k = int(data.get("k") or 0)
    return Arm(k, data.get("algorithm") if k else None)


@dataclass(frozen=True, kw_only=True)
class Record:
    """Base of the artifacts and their typed sections (see the module's docstring)."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """Keys this kit does not name (a later kit's, or a section's open-ended part), written back."""
    read_keys: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)
    """The keys of the JSON object this record was read from, in order (None: built by the kit)."""

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any] | None) -> R:
        """The record of a JSON object (None or {}: every field at its default)."""
        if isinstance(data, cls):
            return data
        data = dict(data or {})
        order = tuple(data)
        known = {}
        for f, hint in _hints(cls):
            if f.name in data:
                known[f.name] = _load(hint, data.pop(f.name))
            elif isinstance(hint, type) and issubclass(hint, Record):
                known[f.name] = hint.from_json({})  # a section the file lacks: read, with no keys
        record = cls(**known, extra=data)
        object.__setattr__(record, "read_keys", order)
        return record

    def _entries(self) -> Iterator[tuple[str, Any]]:
        """(key, value) in the order written: the keys read, or the declared fields then `extra`."""
        declared = {f.name: f for f, _ in _hints(type(self))}
        if self.read_keys is not None:
            for key in self.read_keys:
                if key in declared:
                    yield key, getattr(self, key)
                elif key in self.extra:
                    yield key, self.extra[key]
            return
        for name, f in declared.items():
            value = getattr(self, name)
            if value is None and f.metadata.get(OMIT_NONE):
                continue
            yield name, value
        yield from ((k, v) for k, v in self.extra.items() if k not in declared)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record, as its file holds it."""
        return {key: _dump(value) for key, value in self._entries()}

    # read-only access to the JSON form, as the stages' dicts gave it
    def __getitem__(self, key: str) -> Any:
        for k, value in self._entries():
            if k == key:
                return _dump(value)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self._entries())

    def keys(self) -> list[str]:
        return [k for k, _ in self._entries()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


# ---- probe.json ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Finding(Record):
    """One checked fact of the probe with a status a person can act on (kit.probe.findings.finding)."""

    section: str = ""
    name: str = ""
    status: str = "ok"
    """ok, warn or fail; warn and fail carry an `action`."""
    value: Any = None
    reason: str = ""
    action: str = ""

    @property
    def key(self) -> str:
        """`section/name`, as the summary lists it."""
        return f"{self.section}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class ProbeSummary(Record):
    go: bool = False
    """Go when nothing failed."""
    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class GpuSection(Record):
    devices: list[JSONObject] = field(default_factory=list)
    """One object per GPU (kit.probe.gpu.GpuFacts.to_dict): name, memory_total_bytes, sm, ..."""
    torch: JSONObject | None = None
    """What torch said in a child process (its `measured` copy bandwidth and matmul, when asked)."""
    topology: Any = None
    datasheet: JSONObject | None = None
    """The first GPU's datasheet entry (kit/probe/datasheet.yaml), when it is known."""

    @property
    def measured(self) -> JSONObject:
        """The copy bandwidth and bf16 matmul torch measured ({} when not measured)."""
        measured = self.torch.get("measured") if self.torch else None
        return measured if isinstance(measured, dict) else {}


@dataclass(frozen=True, kw_only=True)
class ProbeSpeculation(Record):
    """Whether speculative decoding can run with this model directory, and why (plus the flavor's
    spelling of the recommended arm in `extra`)."""

    available: bool | None = None
    """True, False, or None where the probe cannot tell (a separate draft model)."""
    why: str = "unknown"
    algorithm: str | None = None


@dataclass(frozen=True, kw_only=True)
class Recommended(Record):
    """The probe's recommended engine settings; None where it cannot tell (no GPU, unreadable model)."""

    attention_backend: str | None = None
    attention_backend_reason: str | None = None
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_running_requests_speculative: int | None = None
    max_running_requests_note: str | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_max_bs_speculative: int | None = None
    mamba_strategy: str | None = None
    mamba_strategy_speculative: str | None = None
    mamba_flag: str | None = None
    speculative: ProbeSpeculation = field(default_factory=ProbeSpeculation)
    context_length: int | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    parsers_reason: str = "unknown"
    thinking_switch: str | None = None
    thinking_note: str | None = None
    commands: dict[str, list[str]] | None = optional()
    """Launch commands with these settings, plain and speculative (`kit probe` adds them)."""


@dataclass(frozen=True, kw_only=True)
class ProbeReport(Record):
    """probe.json: every finding, the GPUs, the model directory, the engine's environment, the memory
    plan, the attention backends, the host, and the recommended settings."""

    version: int = 1
    run: str | None = None
    created_at: str | None = None
    inputs: JSONObject = field(default_factory=dict)
    summary: ProbeSummary = field(default_factory=ProbeSummary)
    recommended: Recommended = field(default_factory=Recommended)
    findings: list[Finding] = field(default_factory=list)
    gpus: GpuSection = field(default_factory=GpuSection)
    model: JSONObject = field(default_factory=dict)
    """The model directory's facts (kit.probe.model_dir): config, shards, tokenizer, `mtp`."""
    engine_env: JSONObject = field(default_factory=dict)
    """The engine's interpreter, packages and launcher (kit.probe.engine_env)."""
    memory: JSONObject | None = None
    """The memory plan (kit.memoryplan.MemoryPlan.to_dict), None without a GPU."""
    backends: list[JSONObject] = field(default_factory=list)
    host: JSONObject = field(default_factory=dict)
    """Cores, RAM, disk, /dev/shm, OS and Python (kit.probe.host)."""
    command: str | None = optional()
    """The command that made it, when benchmarks/probe_gpu.py did."""

    @property
    def mtp_status(self) -> str | None:
        """present / declared_missing / absent_from_architecture, or None (the model was unreadable)."""
        mtp = self.model.get("mtp")
        return mtp.get("status") if isinstance(mtp, dict) else None

    @property
    def ram_total_bytes(self) -> int | None:
        return self.host.get("ram_total_bytes")

    @property
    def launcher_help(self) -> str | None:
        """The file that caches the engine launcher's --help (None when it was not read)."""
        launcher = self.engine_env.get("launcher")
        return launcher.get("cached") if isinstance(launcher, dict) else None


# ---- decision.json ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LadderPoint(Record):
    """One row of decision.json's `table`: an arm at one concurrency, predicted beside measured."""

    arm: str = ""
    """plain, spec_k1, ... (`Arm.name`)."""
    spec_k: int = 0
    concurrency: int = 0
    running: int | None = None
    predicted_accept_length: float | None = None
    mem_max_running: int | None = None
    feasible: bool | None = None
    """Whether memory holds this concurrency (None: not said, taken as yes)."""
    compute_bound: bool | None = None
    predicted_tok_s: float | None = None
    predicted_before_tok_s: float | None = None
    """The prediction before it was calibrated on the sweep."""
    measured_tok_s: float | None = None
    """The median of the level's repetitions."""
    measured_lo: float | None = None
    measured_hi: float | None = None
    """The 90% interval of that median."""
    repetitions: int | None = None
    measured_accept_length: float | None = None
    latency_p50_s: float | None = None
    status: str = "not measured"
    """ok, skipped, failed or not measured."""
    reason: str | None = None
    error_pct: float | None = None
    """(predicted - measured) / measured, in %."""

    def value(self, column: str) -> Any:
        """The field (or an extra column) named `column`."""
        return getattr(self, column) if column in self.__dataclass_fields__ else self.extra.get(column)


@dataclass(frozen=True, kw_only=True)
class ArmForecast(Record):
    """One arm's line of decision.json's `forecast` (kit.decide.forecast): stage 3 in hours."""

    arm: str = ""
    label: str = ""
    wall_s: float = 0.0
    """The median simulation: start-up, full load, tail."""
    wall_lo_s: float = 0.0
    wall_hi_s: float = 0.0
    """The 10th and 90th percentiles of the simulations."""
    gpu_hours: float = 0.0
    gpu_hours_lo: float = 0.0
    gpu_hours_hi: float = 0.0
    tail_s: float = 0.0
    """Of the wall time, the part below full load (the queue empty, the batch draining)."""
    startup_s: float = 0.0
    capacity: int = 0
    """Sequences running at once per replica."""
    full_load_tok_s: float = 0.0
    throughput_from: str = "measured"
    requests_per_replica: int = 0


@dataclass(frozen=True, kw_only=True)
class Forecast(Record):
    """decision.json's `forecast`: the whole plan's stage 3 in hours per arm, with an interval."""

    requests: int = 0
    replicas: int = 1
    gpus_per_replica: int = 1
    gpu_name: str | None = None
    output_tokens: int = 0
    output_tokens_lo: int = 0
    output_tokens_hi: int = 0
    lengths_from: dict[str, str] = field(default_factory=dict)
    """Per source: pilot answers, sweep answers, made rows or max_tokens (a bound, not a measure)."""
    arms: list[ArmForecast] = field(default_factory=list)
    """Fastest first."""
    chosen: str | None = None
    pilot: JSONObject | None = None
    """How the pilot went (kit.decide.pilot): sent, answered, cut, tokens, seconds."""
    calibration: float | None = None
    """The pilot's speed over what the sweep's ladder gives for it (speeds are multiplied by it)."""
    notes: list[str] = field(default_factory=list)
    sentence: str = ""

    def arm(self, name: str | None) -> ArmForecast | None:
        return next((a for a in self.arms if a.arm == name), None)


@dataclass(frozen=True, kw_only=True)
class ArmCrash(Record):
    """decision.json's `crashes`: one measurement whose server died (kit.engines.crashes)."""

    arm: str = ""
    concurrency: int = 0
    round: int = 0
    exit_code: int | None = None
    error: str | None = None
    """The engine's own exception line, 'RuntimeError: ...' (None: it logged none)."""
    where: str | None = None
    """The file, line and function it was raised in."""
    running: int | None = None
    """The requests the engine last said it ran."""
    in_flight: int | None = None
    """The sweep's requests out when it saw the server gone."""
    restarted: bool = False
    """Whether the server was restarted and the level measured again (else the arm was given up)."""
    reason: str = ""
    """The whole sentence (kit.engines.crashes.Crash.sentence)."""


@dataclass(frozen=True, kw_only=True)
class Noise(Record):
    """decision.json's `noise`: the sweep's noise, repetitions, drift, what was set aside, how the arms'
    servers ran (kit.decide.measured.noise_section)."""

    noise_pct: float | None = None
    """The median half-width of the levels' 90% intervals, in % (None: measured once each)."""
    repetitions: int = 1
    repetitions_min: int | None = None
    drift: JSONObject | None = None
    disturbed: list[JSONObject] = field(default_factory=list)
    comparison: JSONObject | None = None
    servers_together: bool | None = optional()
    servers_why: str | None = optional()


MEASURED = ("measured", "measured in part")
"""`Decision.decided_by` when measured figures chose the arm."""


@dataclass(frozen=True, kw_only=True)
class Decision(Record):
    """decision.json: the arm chosen, measured or predicted, the engine settings stage 3 takes, the
    reasons, the scenario the prediction rests on and the table of predicted beside measured."""

    arm: Arm | None = None
    """The arm chosen, stored once ({k, algorithm}); read from an earlier kit's spelling too."""
    decided_by: str | None = None
    """measured, measured in part (some arm that could run was not measured: its server would not
    start or kept dying, `unmeasured`), or predicted."""
    unmeasured: dict[str, str] = field(default_factory=dict)
    """Each arm the sweep could not measure, and why (skipped, failed to start, crashed)."""
    crashes: list[ArmCrash] = field(default_factory=list)
    """Every measurement whose server died, with the engine's own error."""
    measured_difference: bool | None = None
    measured: dict[str, JSONObject] = field(default_factory=dict)
    """Each measured arm's best level: concurrency, median and interval, repetitions."""
    noise: Noise | None = None
    objective: str = "throughput"
    speculation_available: bool = True
    speculation_unavailable_reason: str | None = None
    engine_settings: JSONObject = field(default_factory=dict)
    """Stage 3's engine settings beside the arm, keyed as the engine params are (kit.decide.apply)."""
    reasons: list[str] = field(default_factory=list)
    hardware: JSONObject = field(default_factory=dict)
    """The cost model's Hardware (kit.decide.costmodel.hardware)."""
    efficiency: JSONObject = field(default_factory=dict)
    """The cost model's Efficiency, `source` saying what it was calibrated on."""
    workload: JSONObject = field(default_factory=dict)
    """The cost model's Workload: request shape, memory settings, layout."""
    accept_lengths: dict[int, float] = field(default_factory=dict)
    table: list[LadderPoint] = field(default_factory=list)
    engine_flavor: str | None = None
    warnings: list[str] = field(default_factory=list)
    cpu_profile: JSONObject | None = optional()
    """What the CPU step profile was (kit.decide.profile.budget.ProfilePlan), when one was planned."""
    mtp_status: str | None = None
    forecast: Forecast | None = optional()
    """Stage 3 in hours per arm, with an interval (kit.decide.forecast)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Decision:
        decision = super().from_json(data)
        if decision.arm is None and decision.read_keys:
            object.__setattr__(decision, "arm", _legacy_arm(decision))
        return decision

    @property
    def by_measurement(self) -> bool:
        """Whether the arm was chosen on measured figures (wholly or in part)."""
        return self.decided_by in MEASURED

    @property
    def measured_at_concurrency(self) -> int | None:
        """The sweep's level the chosen arm was best at (an earlier kit's `client_concurrency`)."""
        s = self.engine_settings
        return s.get("measured_at_concurrency") or s.get("client_concurrency")

    def table_rows(self) -> list[dict[str, Any]]:
        """The table as JSON rows (for a DataFrame)."""
        return [row.to_json() for row in self.table]


def _legacy_arm(decision: Decision) -> Arm | None:
    """The arm of an earlier kit's decision.json, which spelled it as `chosen_arm` (the name) and as
    `engine_settings`' `speculative`, `spec_k` and `algorithm`; None when it names none."""
    settings = decision.engine_settings
    if "spec_k" in settings or "speculative" in settings:
        k = int(settings.get("spec_k") or 0) if settings.get("speculative", True) else 0
        return Arm(k, settings.get("algorithm") if k else None)
    name = decision.extra.get("chosen_arm")
    if name == "plain":
        return Arm(0)
    if isinstance(name, str) and name.startswith("spec_k") and name[len("spec_k") :].isdigit():
        return Arm(int(name[len("spec_k") :]))
    return None


# ---- manifest.json ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TailNote(Record):
    """manifest.json's `tail_speculation`: whether the tail switches to speculation, why, and what the
    switch did (kit.generate.tailswitch)."""

    enabled: bool = False
    why: str | None = None
    switched: bool | None = optional()
    k: int | None = optional()


@dataclass(frozen=True, kw_only=True)
class Manifest(Record):
    """manifest.json, written last by a `kit generate` session: complete or not and its exit code,
    rows, failures, restarts, the identity the rows were made with, the order sent, the tail's
    switch, the decision's premises checked live, a Ray job's actors."""

    run: str | None = None
    complete: bool | None = None
    status: str | None = None
    """complete or incomplete."""
    exit_code: int | None = None
    rows: int = 0
    left: int = 0
    planned_prompts: int | None = None
    samples_per_prompt: int = 1
    rows_this_session: int = 0
    failures: int = 0
    never_generated: dict[str, int] = field(default_factory=dict)
    """Rows the engine refuses for good (too long for the context, rejected), by reason."""
    rows_by_source: dict[str, int] = field(default_factory=dict)
    shards: int = 0
    corrupt_shards_set_aside: list[Any] = field(default_factory=list)
    duplicate_shards_set_aside: list[Any] = field(default_factory=list)
    shard: str = "0/1"
    engine: JSONObject = field(default_factory=dict)
    """The identity the rows were made with (kit.generate.work.engine_identity, `_run.json`)."""
    sampling: JSONObject = field(default_factory=dict)
    server_restarts: int = 0
    concurrency: int | None = None
    concurrency_start: int | None = None
    engine_capacity: int | None = None
    capacity_source: str | None = None
    premises: JSONObject | None = None
    """The decision's premises checked live (kit.generate.premises.PremiseCheck.report)."""
    ray: JSONObject | None = None
    """A Ray job's blocks and actors (kit.generate.raydriver)."""
    settings_from_decision: JSONObject | None = None
    """The engine settings stage 3 took from decision.json."""
    order: JSONObject = field(default_factory=dict)
    """The order sent and what its prediction rested on (kit.generate.order)."""
    tail_speculation: TailNote = field(default_factory=TailNote)
    executor: str = "local"
    generating_s: float | None = None
    """Seconds spent generating, over every session of the run."""
    session_started_at: str | None = None
    finished_at: str | None = None
    started_at: str | None = optional()
    """An earlier kit's start of the run."""

    @property
    def speculative(self) -> JSONObject | None:
        """The speculative section the rows were made with (None: plain decoding)."""
        spec = self.engine.get("speculative")
        return spec if isinstance(spec, dict) and spec.get("algorithm") else None


# ---- summary.json ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SourceSummary(Record):
    """summary.json's entry of one source: counts, token distributions, finish reasons, flags, and
    (where it has rows) reasoning and answer lengths, thinking and tool-call counts."""

    requested: int | None = None
    planned: int | None = None
    generated: int | None = None
    failed: int | None = None
    unique_ids: int | None = None
    prompt_tokens: Distribution = field(default_factory=dict)
    completion_tokens: Distribution = field(default_factory=dict)
    finish_reasons: dict[str, float] = field(default_factory=dict)
    flags: dict[str, int] = field(default_factory=dict)
    reasoning_chars: Distribution | None = optional()
    answer_chars: Distribution | None = optional()
    reasoning_tokens: Distribution | None = optional()
    answer_tokens: Distribution | None = optional()
    reasoning: dict[str, int] | None = optional()
    tool_calls: dict[str, int | float | None] | None = optional()


@dataclass(frozen=True, kw_only=True)
class Health(Record):
    """summary.json's `health`: time generating, rows/s, tokens/s, latency, failures, accept length."""

    complete: bool = False
    duration_s: float | None = None
    rows_s: float | None = None
    output_tok_s: float | None = None
    output_tok_s_peak: float | None = None
    latency_s: Distribution = field(default_factory=dict)
    ttft_s: Distribution = field(default_factory=dict)
    failures: int = 0
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    duplicate_ids: int = 0
    accept_length_mean: float | None = None
    timeline_from: str | None = None
    """metrics.parquet or rows."""


@dataclass(frozen=True, kw_only=True)
class TailSpeculation(Record):
    """What speculation would have saved in the tail (kit.analyse.tail.speculation_entry); which
    fields it holds depends on `status`: saves, no win, already speculating, switched, no decision,
    no ladder."""

    status: str | None = None
    reason: str | None = optional()
    name: str | None = optional()
    spec_k: int | None = optional()
    crossover: int | None = None
    ladder_concurrencies: list[int] | None = optional()
    servers: int | None = optional()
    saved_s: float | None = optional()
    saved_low_s: float | None = optional()
    saved_high_s: float | None = optional()
    model_error: float | None = optional()
    available: bool = True
    unavailable_reason: str | None = None
    switch_rule: JSONObject | None = optional()
    """What `generate.tail_speculation` would switch to (kit.decide.tailarm)."""


@dataclass(frozen=True, kw_only=True)
class ForecastCheck(Record):
    """summary.json's `forecast_check`: stage 2's forecast against what stage 3 took
    (kit.decide.forecast_check); errors are (forecast - actual) / actual in %."""

    arm: str | None = None
    judged: bool = False
    why: str | None = optional()
    generating_s: float | None = None
    forecast_s: float | None = None
    forecast_lo_s: float | None = None
    forecast_hi_s: float | None = None
    wall_error_pct: float | None = None
    inside_interval: bool | None = None
    output_tokens: int | None = None
    forecast_output_tokens: int | None = None
    tokens_error_pct: float | None = None
    output_tok_s: float | None = None
    forecast_output_tok_s: float | None = None
    speed_error_pct: float | None = None
    tail_s: float | None = None
    forecast_tail_s: float | None = None
    missed: list[str] = field(default_factory=list)
    """The inputs off by more than 15%: output lengths, speed."""
    sentence: str = ""


@dataclass(frozen=True, kw_only=True)
class TailSummary(Record):
    """summary.json's `tail`: the job's last session below full load (kit.analyse.tail), or why it is
    unknown (`known` false: `reason`); `sentence` says it in words."""

    known: bool = False
    reason: str | None = optional()
    session: int | None = None
    sessions: int | None = None
    measured_from: str | None = None
    """timeline or rows."""
    full_load_in_flight: float | None = None
    full_load_source: str | None = None
    engine_capacity: int | None = None
    start_s: float | None = None
    end_s: float | None = None
    duration_s: float = 0.0
    session_s: float | None = None
    share: float | None = None
    in_flight_at_end: float | None = None
    tok_s_tail: float | None = None
    tok_s_full_load: float | None = None
    rows_in_tail: int | None = None
    idle_minutes: float | None = None
    devices: int | None = None
    device_unit: str | None = None
    """GPU or replica."""
    devices_source: str | None = None
    speculation: TailSpeculation | None = optional()
    """What speculation would have saved there (a tail of some length only)."""
    sentence: str = ""


@dataclass(frozen=True, kw_only=True)
class Fitness(Record):
    """summary.json's `fitness`: the rows `kit export` keeps in `train` with its default rules,
    against the rows made, and what left the others out (kit.export.fitness)."""

    rules: list[str] = field(default_factory=list)
    """The drop rules judged (kit.export.drops.DEFAULT_DROP), in judging order."""
    rows: int = 0
    """Rows made (each id once)."""
    usable: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """Rows per drop rule that dropped any, most first."""
    means: dict[str, str] = field(default_factory=dict)
    """What each of those rules means (kit.export.drops.RULES)."""
    failed: int = 0
    """Requests that failed for good (no row): `rejected` as well, beside the rows made."""

    @property
    def share(self) -> float | None:
        """Usable rows over rows made (None: no row made)."""
        return self.usable / self.rows if self.rows else None


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    """summary.json: stage 4's figures of a run, per source and in all (kit.analyse.run)."""

    run: str | None = None
    analysed_at: str | None = None
    rows: int = 0
    sources: dict[str, SourceSummary] = field(default_factory=dict)
    prompt_tokens: Distribution = field(default_factory=dict)
    completion_tokens: Distribution = field(default_factory=dict)
    reasoning_chars: Distribution = field(default_factory=dict)
    answer_chars: Distribution = field(default_factory=dict)
    reasoning_tokens: Distribution = field(default_factory=dict)
    answer_tokens: Distribution = field(default_factory=dict)
    reasoning: dict[str, int] = field(default_factory=dict)
    tool_calls: dict[str, int | float | None] = field(default_factory=dict)
    finish_reasons: dict[str, float] = field(default_factory=dict)
    flags: dict[str, int] = field(default_factory=dict)
    health: Health = field(default_factory=Health)
    tail: TailSummary | None = None
    near_duplicates: JSONObject | None = None
    """Near-duplicate prompts and answers (kit.analyse.neardup): settings, clusters, rows, per source."""
    gaps: list[str] = field(default_factory=list)
    """Parts of the run that could not be read."""
    figures: list[str] = field(default_factory=list)
    fitness: Fitness | None = optional()
    """The rows fit to train on (kit.export.fitness): written by stage 4 through kit.stages."""
    forecast_check: ForecastCheck | None = optional()
    """Stage 2's forecast against what stage 3 took (kit.decide.forecast_check)."""
