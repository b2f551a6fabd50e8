"""summary.json (stage 4): each source's figures, the run's health, the tail, the forecast judged,
the data's fitness."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.artifacts.record import Distribution, JSONObject, Record, optional


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
    """The highest tokens/s sustained over `output_tok_s_peak_window_s` (None: the run was shorter)."""
    output_tok_s_peak_window_s: float | None = optional()
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
    """What `generate.tail_speculation` would switch to (kit.decide.choose.tailarm)."""


@dataclass(frozen=True, kw_only=True)
class ForecastCheck(Record):
    """summary.json's `forecast_check`: stage 2's forecast against what stage 3 took
    (kit.decide.forecast.check); errors are (forecast - actual) / actual in %."""

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
    tok_s_from: str | None = optional()
    """rows' lives (each row's tokens spread over its life: kit.analyse.generated) or finishes (the
    timeline's counter, which takes a row's tokens when it finishes); absent: finishes (earlier kits)."""
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
    """Stage 2's forecast against what stage 3 took (kit.decide.forecast.check)."""
