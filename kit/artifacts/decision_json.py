"""decision.json (stage 2): the decision, its table of measured and predicted levels, the noise, the
forecast, the crashes of arms' servers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kit.artifacts.record import JSONObject, Record, optional
from kit.columns import SPEC_K
from kit.engines.arms import Arm, arm_k


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
    """One arm's line of decision.json's `forecast` (kit.decide.forecast.job): stage 3 in hours."""

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
    """How the pilot went (kit.decide.measure.pilot): sent, answered, cut, tokens, seconds."""
    calibration: float | None = None
    """The pilot's speed over what the sweep's ladder gives for it (speeds are multiplied by it)."""
    notes: list[str] = field(default_factory=list)
    sentence: str = ""
    interval_from: str | None = optional()
    """What the intervals' width rests on: the sweep's noise, and judged runs' errors where enough
    comparable ones were found (kit.decide.forecast.history)."""
    history: JSONObject | None = optional()
    """The comparable judged runs found (`judged_runs`, `runs`), how many widen the interval
    (`needed`), the error that bounds it (`error_pct`, the `rank`-th smallest; None: too few)."""

    @property
    def on_gpu(self) -> bool:
        """Whether the job runs on GPUs (kit.decide.run names the hardware of a run without one "cpu"):
        GPU-hours are said only then."""
        return (self.gpu_name or "").lower() != "cpu"

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
    servers ran (kit.decide.choose.measured.noise_section)."""

    noise_pct: float | None = None
    """The median half-width of the levels' 90% intervals, in % (None: measured once each)."""
    repetitions: int = 1
    repetitions_min: int | None = None
    drift: JSONObject | None = None
    disturbed: list[JSONObject] = field(default_factory=list)
    comparison: JSONObject | None = None
    servers_together: bool | None = optional()
    servers_why: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class SkippedMeasurement(Record):
    """One measurement the sweep did not make because racing had settled it (kit.decide.sweep.limits): the
    arm at that level in that round, and why."""

    arm: str = ""
    concurrency: int = 0
    round: int = 0
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class SweepCost(Record):
    """decision.json's `sweep_cost`: what the sweep took (kit.decide.sweep), beside what the decision
    is worth on this job (the forecast)."""

    wall_s: float = 0.0
    """From the sweep's first server start to its last measurement (the pilot included), over every
    run of it: a sweep stopped part way and resumed adds what each stopped run had cost (its line in
    the sweep's journal; a run killed outright leaves none)."""
    server_starts: int = 0
    server_start_s: float = 0.0
    """The starts' seconds together, launch to ready with the warm-up."""
    server_start_parts: dict[str, float] = field(default_factory=dict)
    """Of those seconds, what the servers' logs say took how long, summed over the starts
    (kit.engines.start_parts: weights, graphs, compile ...); empty where the logs say nothing."""
    measurements: int = 0
    """Measurements made by this run (the drift check's and the redone ones included)."""
    skipped: int = 0
    """Measurements racing left out (`skipped_measurements` says which and why)."""
    skipped_measurements: list[SkippedMeasurement] = field(default_factory=list)
    rounds: int = 0
    """The rounds of `decide.repetitions` that measured anything (racing or the budget may leave
    later ones out; a disturbed level's round measured again is not counted here)."""
    budget_s: float | None = None
    """The time budget the sweep ran under (None: none)."""
    budget_rule: str = ""
    """Where the budget came from: the params' decide.time_budget_s, or a share of the job's
    forecast hours (kit.decide.sweep.limits)."""
    runs: int = 1
    """The `kit decide` runs the sweep took (more than one: stopped part way and resumed)."""
    compile_cache: str | None = optional()
    """The folder the engine's compile caches were kept in across the sweep's starts."""


@dataclass(frozen=True, kw_only=True)
class BackendResult(Record):
    """decision.json's `backends`: one server of the settings sweep (kit.decide.checks.settings_sweep),
    the chosen arm at the sweep's top level with one engine setting changed from the params' own (the
    baseline)."""

    setting: str | None = None
    """attention_backend or sampling_backend; None: the baseline (the params' own settings)."""
    value: str | None = None
    """The value measured; None: the engine's own default (the baseline's, where the params set none)."""
    concurrency: int = 0
    output_tok_s: float | None = None
    """The median of its rounds (None: not measured, see `status`)."""
    output_tok_s_lo: float | None = None
    output_tok_s_hi: float | None = None
    repetitions: int = 0
    ratio: float | None = None
    """Over the baseline: the median of the per-round ratios."""
    ratio_lo: float | None = None
    ratio_hi: float | None = None
    start_s: float | None = None
    """Its server's first start, launch to ready with the warm-up (a first-use compile shows here)."""
    status: str = ""
    """baseline, chosen, not chosen, set in params (it won, the params' own value is kept), failed,
    crashed."""
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class AdaptiveLevel(Record):
    """One level of decision.json's `adaptive` (kit.decide.measure.adaptive): the engine's adaptive arm beside
    plain decoding and the kit's pick there (the fastest arm measured at that level). Ratios are the
    median of the per-round ratios with their 90% interval, over `*_rounds` paired rounds."""

    concurrency: int = 0
    output_tok_s: float = 0.0
    output_tok_s_lo: float | None = None
    output_tok_s_hi: float | None = None
    repetitions: int = 0
    plain_tok_s: float | None = None
    kit_arm: str | None = None
    """plain, spec_k2, ...: the fastest arm measured at this level."""
    kit_label: str | None = None
    kit_tok_s: float | None = None
    vs_plain: float | None = None
    vs_plain_lo: float | None = None
    vs_plain_hi: float | None = None
    vs_plain_rounds: int = 0
    vs_kit: float | None = None
    vs_kit_lo: float | None = None
    vs_kit_hi: float | None = None
    vs_kit_rounds: int = 0
    kit_leads: bool = False
    """The kit's pick leads the adaptive arm outside the noise (kit.decide.measure.noise.Lead.counts)."""
    adaptive_leads: bool = False
    """The adaptive arm leads the kit's pick outside the noise."""


@dataclass(frozen=True, kw_only=True)
class AdaptiveComparison(Record):
    """decision.json's `adaptive` (`decide.adaptive_k`): the engine's own adaptive speculation,
    measured beside the arms and never chosen, against what the kit decides per level."""

    arm: str = ""
    """adaptive_k3: its name in the sweep's tables."""
    ceiling: int = 0
    """The most draft tokens the engine may use (the tables' spec_k of its rows)."""
    label: str = ""
    status: str = "ok"
    """ok, or why it has no figures: skipped, failed, crashed."""
    reason: str | None = None
    levels: list[AdaptiveLevel] = field(default_factory=list)
    matches_kit: bool | None = None
    """Whether the kit's pick leads it outside the noise at no level (None: nothing to compare)."""
    cost_pct: float | None = None
    """Its largest shortfall against the kit's pick, in % of the pick (the median ratio's; 0: none)."""
    cost_at: int | None = None
    """The level of that shortfall (its lowest ratio to the kit's pick)."""
    sentence: str = ""


EARLIER_ARM_KEYS = ("speculative", SPEC_K, "algorithm", "num_steps", "eagle_topk", "num_draft_tokens")
"""How an earlier kit spelled the arm among decision.json's `engine_settings` (this kit stores the arm
once, as `arm`): read into `EngineSettings.extra`, the arm by `EngineSettings.earlier_arm`."""


@dataclass(frozen=True, kw_only=True)
class EngineSettings(Record):
    """decision.json's `engine_settings`: the engine settings stage 2 hands stage 3 beside the arm,
    keyed as the engine params are (built by `kit.engines.settings.decided_settings`, applied by
    `kit.engines.settings.apply_settings`: each fills only what the params leave unset)."""

    max_running_requests: int | None = None
    """Per replica; None: the engine's own capacity (the decision sets no limit)."""
    max_running_requests_source: str | None = None
    """Why it is set (or not): the engine's capacity, what memory holds under speculation, a measured
    fall in throughput, the latency bound. An earlier kit wrote none (see `older_plain_cap`)."""
    mem_fraction_static: float | None = None
    dp_size: int | None = None
    tp_size: int | None = None
    attention_backend: str | None = None
    sampling_backend: str | None = optional()
    """SGLang's sampling backend, when the settings sweep measured one better than the params' own."""
    mamba_strategy: str | None = optional()
    """A hybrid model's speculative arm: extra_buffer."""
    measured_at_concurrency: int | None = optional()
    """The sweep's level the chosen arm was best at."""
    cuda_graph_max_bs: int | None = optional()
    """An earlier kit's: it set the CUDA graph batch beside max running requests."""
    client_concurrency: int | None = optional()
    """An earlier kit's name for `measured_at_concurrency`."""

    @property
    def measured_at(self) -> int | None:
        """The sweep's level the chosen arm was best at (under either kit's name)."""
        return self.measured_at_concurrency or self.client_concurrency

    @property
    def older_plain_cap(self) -> bool:
        """Whether these settings come from an earlier kit, which wrote no `max_running_requests_source`
        and capped plain decoding at the sweep's level (stage 3 no longer takes that cap)."""
        return "max_running_requests_source" not in self

    def earlier_arm(self) -> Arm | None:
        """The arm an earlier kit spelled here (`speculative`, `spec_k`, `algorithm`), or None."""
        s = self.extra
        if SPEC_K not in s and "speculative" not in s:
            return None
        k = int(s.get(SPEC_K) or 0) if s.get("speculative", True) else 0
        return Arm(k, s.get("algorithm") if k else None)

    def shown(self) -> list[tuple[str, Any]]:
        """(key, JSON value) in the file's order, less an earlier kit's spelling of the arm."""
        return [(k, v) for k, v in self.to_json().items() if k not in EARLIER_ARM_KEYS]


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
    engine_settings: EngineSettings = field(default_factory=EngineSettings)
    """Stage 3's engine settings beside the arm, keyed as the engine params are (kit.decide.choose.apply)."""
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
    """Stage 3 in hours per arm, with an interval (kit.decide.forecast.job)."""
    backends: list[BackendResult] | None = optional()
    """The settings sweep (`decide.backends`): the baseline first, then each alternative."""
    adaptive: AdaptiveComparison | None = optional()
    """The engine's own adaptive speculation against the kit's pick per level (`decide.adaptive_k`)."""
    sweep_cost: SweepCost | None = optional()
    """What the sweep took: its wall time, server starts, measurements and those racing skipped."""
    answers_check: dict[str, JSONObject] | None = optional()
    """Per speculative arm the decision picked: its sampled answers against plain decoding's
    (kit.decide.checks.answers); an arm that changed them was set aside and the decision made again."""

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
        return self.engine_settings.measured_at

    def table_rows(self) -> list[dict[str, Any]]:
        """The table as JSON rows (for a DataFrame)."""
        return [row.to_json() for row in self.table]


def _legacy_arm(decision: Decision) -> Arm | None:
    """The arm of an earlier kit's decision.json, which spelled it as `chosen_arm` (the name) and as
    `engine_settings`' `speculative`, `spec_k` and `algorithm`; None when it names none."""
    arm = decision.engine_settings.earlier_arm()
    if arm is not None:
        return arm
    name = decision.extra.get("chosen_arm")
    k = arm_k(name) if isinstance(name, str) else None
    return None if k is None else Arm(k)
