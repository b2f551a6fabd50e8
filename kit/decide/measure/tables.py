"""The sweep's tables and how they are read: the columns of `sweep_runs.parquet` (every measurement,
one `SweepRow`) and `sweep.parquet` (one row per arm and level), the figure of a level (the median of its
repetitions, disturbed ones set aside while two undisturbed remain), and the rounds a lead between
two arms pairs (kit.decide.measure.noise). Written by kit.decide.sweep.sweep (`write_tables`: also
sweep_answers.parquet, and an adaptive arm's rows marked), read by kit.decide.choose.measured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import pandas as pd

from kit.columns import ADAPTIVE, OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO, SPEC_K
from kit.decide.machine.disturbance import Disturbance
from kit.decide.machine.watch import judge_runs
from kit.decide.measure.noise import Lead, lead, median_interval
from kit.decide.measure.pilot import ANSWER_COLUMNS, Answer, PilotFigures
from kit.engines.arms import adaptive_ceiling

if TYPE_CHECKING:
    from kit.engines.crashes import Crash


class CrashFields(TypedDict, total=False):
    """Of a measurement whose server died (`CRASH_COLUMNS` but the requests out, which the level
    says): what the engine said (kit.engines.crashes.Crash) and whether the server was restarted."""

    crash_exit_code: int | None
    crash_error: str | None
    crash_where: str | None
    crash_running: int | None
    restarted: bool


def crash_fields(crash: Crash | None) -> CrashFields:
    """The `CRASH_COLUMNS` of a crash (None: a server with no log)."""
    if crash is None:
        return CrashFields()
    return CrashFields(
        crash_exit_code=crash.exit_code,
        crash_error=crash.error,
        crash_where=crash.where,
        crash_running=crash.running,
    )


class LevelFigures(TypedDict, total=False):
    """What one level measured (kit.decide.measure.level): the `LEVEL_COLUMNS` it knows, its answers
    (for sweep_answers.parquet, never a column) and, when the server died, the requests out then.
    A level that failed has only its concurrency, status and reason."""

    concurrency: int
    clients: int
    """Requests kept out at once: the concurrency, or twice the server's running cap where that is
    fewer (kit.decide.measure.level.measure_level)."""
    requests: int
    errors: int
    output_tokens: int
    duration_s: float
    output_tok_s: float | None
    """None: not a measurement (its server died, or too many of its requests failed)."""
    req_s: float
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    ttft_p50_s: float | None
    accept_length: float | None
    accept_source: str | None
    """responses, metrics counters or metrics gauge (None: the engine said nothing)."""
    position_acceptance: list[float] | None
    status: str
    """ok, failed or crashed (the sweep adds skipped)."""
    reason: str
    crash_in_flight: int
    """The requests out when the level saw its server gone."""
    answers: list[Answer]


class SweepRow(LevelFigures, CrashFields, Disturbance, total=False):
    """One measurement as the sweep hands it on (kit.decide.sweep.sweep): a row of sweep_runs.parquet
    (`RUN_COLUMNS`) and a line of the sweep's journal (kit.decide.measure.journal), which a resumed
    sweep reads back as it was written. An arm that never ran has only its head and the reason.
    What else the machine did meanwhile: its `Disturbance` keys (kit.decide.machine.disturbance)."""

    round: int
    phase: str
    """sweep, or start / end: the drift check."""
    arm: str
    algorithm: str | None
    spec_k: int
    started_s: float
    """Seconds into the sweep it started (a resumed sweep's earlier rows: on that run's clock)."""


class SweepNotes(TypedDict, total=False):
    """What the sweep says of how it ran, beside its tables: filled by kit.decide.run (the servers'
    flags) and kit.decide.sweep.sweep.run_sweep; the pilot's figures and the server starts go to the
    forecast, the rest into decision.json's `noise`."""

    servers_kv_cap_args: list[str]
    """The flags that capped each server's KV cache when the arms' servers shared a GPU."""
    sweep_extra_args: list[str]
    running_caps: dict[str, int]
    """Requests an arm's server was capped at, by k (0: plain decoding; memory holds no more)."""
    running_lowered: dict[str, list[int]]
    """Per arm started again with fewer running requests after a start without memory for them: the
    running requests of each start, in order."""
    pilot: PilotFigures
    server_start_s: list[float]
    sweep_resumed: int
    """Measurements of an earlier, stopped run of the sweep kept."""
    servers_idle_cpu_pct: float
    servers_held: bool
    """Whether each idle server was paused while another arm was measured."""


CRASH_COLUMNS = [
    "crash_exit_code",
    "crash_error",
    "crash_where",
    "crash_running",
    "crash_in_flight",
    "restarted",
]
"""Of a measurement whose server died (kit.engines.crashes.Crash), and whether the server was then
restarted to measure the level again."""
LEVEL_COLUMNS = [
    "arm",
    "algorithm",
    SPEC_K,
    "concurrency",
    "clients",
    "requests",
    "errors",
    "output_tokens",
    "duration_s",
    OUTPUT_TOK_S,
    "req_s",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
    "ttft_p50_s",
    "accept_length",
    "accept_source",
    "position_acceptance",
    "status",
    "reason",
]
RUN_COLUMNS = [
    "round",
    "phase",
    *LEVEL_COLUMNS,
    "started_s",
    "foreign_cpu",
    "load_1m",
    "cpu_mhz",
    "gpu_foreign_processes",
    "canary_ms",
    "neighbour_cpu",
    "slowdown",
    "disturbed",
    "why",
    "engine_cores",
    "engine_core_foreign_cpu",
    "gpus",
    "gpu_foreign_seen",
    "gpu_throttle",
    "gpu_throttle_s",
    "gpu_sm_mhz",
    *CRASH_COLUMNS,
]
"""sweep_runs.parquet: every measurement (`phase` sweep, or start / end for the drift check); one
whose server died is `crashed`, with what the engine said (`CRASH_COLUMNS`)."""
assert {*RUN_COLUMNS} - {"slowdown"} <= SweepRow.__optional_keys__, "RUN_COLUMNS are SweepRow's keys"
COLUMNS = [*LEVEL_COLUMNS, OUTPUT_TOK_S_LO, OUTPUT_TOK_S_HI, "repetitions", "set_aside", "noise_pct"]
"""sweep.parquet: per (arm, level) the median of its repetitions and the interval of that median."""


def flags(column: pd.Series) -> pd.Series:
    """A column of true / false / missing as booleans (missing: false)."""
    return column.map(lambda v: bool(v) if pd.notna(v) else False).astype(bool)


def flag_slow(runs: pd.DataFrame) -> pd.DataFrame:
    """Judge every measurement by its signals, the CPU canary's `slowdown` over the sweep's median
    among them (kit.decide.machine.watch.judge_runs): `disturbed`, and `why` names the signals that
    said so."""
    return judge_runs(runs)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, level): the median of its repetitions (disturbed ones set aside while two
    others remain), the interval of that median, and the level's other figures from the
    repetition nearest the median."""
    out = []
    for _, g in runs[runs.phase == "sweep"].groupby(["arm", "concurrency"], sort=False):
        ok = g[(g.status == "ok") & g.output_tok_s.notna()]
        if ok.empty:
            first = g.iloc[0].to_dict()
            out.append({**{k: first.get(k) for k in LEVEL_COLUMNS}, "repetitions": 0, "set_aside": 0})
            continue
        calm = ok[~flags(ok.disturbed)]
        used = calm if len(calm) >= 2 else ok
        iv = median_interval(used.output_tok_s.astype(float).tolist())
        nearest = used.iloc[(used.output_tok_s.astype(float) - iv.median).abs().argsort().iloc[0]].to_dict()
        accept = used.accept_length.dropna()
        row = {k: nearest.get(k) for k in LEVEL_COLUMNS}
        row.update(
            output_tok_s=iv.median,
            output_tok_s_lo=iv.lo,
            output_tok_s_hi=iv.hi,
            repetitions=iv.n,
            set_aside=len(ok) - len(used),
            noise_pct=100 * iv.half_width if iv.n >= 2 else None,
            accept_length=float(accept.median()) if len(accept) else None,
        )
        out.append(row)
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def _used(runs: pd.DataFrame, arm: str, concurrency: int) -> pd.DataFrame:
    """The measurements of one arm at one level that its figure uses: the undisturbed ones while two
    remain, else every one that answered."""
    g = runs[(runs.phase == "sweep") & (runs.arm == arm) & (runs.concurrency == concurrency)]
    ok = g[(g.status == "ok") & g.output_tok_s.notna()]
    calm = ok[~flags(ok.disturbed)]
    return calm if len(calm) >= 2 else ok


def cell_float(v: object) -> float | None:
    """A cell of the sweep's tables as a float, None where it is empty (None or NaN)."""
    return None if v is None or pd.isna(v) else float(v)  # type: ignore[arg-type]


def per_round(runs: pd.DataFrame, arm: str, concurrency: int) -> dict[int, float]:
    """{round: tok/s} of one arm at one level, over the measurements the summary used."""
    used = _used(runs, arm, concurrency)
    return {int(r): float(v) for r, v in zip(used["round"], used.output_tok_s, strict=True)}


def rests_on_disturbed(runs: pd.DataFrame, arm: str, concurrency: int) -> bool:
    """Whether the figure of one arm at one level uses a disturbed measurement (too few calm ones)."""
    return bool(flags(_used(runs, arm, concurrency).disturbed).any())


def arm_lead(runs: pd.DataFrame, a: str, a_level: int, b: str, b_level: int) -> Lead:
    """Arm A's lead at its level over arm B at its level, paired by round over the measurements each
    figure used (kit.decide.measure.noise.lead), disturbed where either figure rests on a disturbed one."""
    disturbed = rests_on_disturbed(runs, a, a_level) or rests_on_disturbed(runs, b, b_level)
    return lead(per_round(runs, a, a_level), per_round(runs, b, b_level), disturbed)


def mark(frame: pd.DataFrame) -> pd.DataFrame:
    """A sweep table with its `adaptive` column, when it has an adaptive arm (else as it is: a sweep
    without one writes the files it always wrote)."""
    if "arm" not in frame or not frame.arm.map(_is_adaptive).any():
        return frame
    return frame.assign(**{ADAPTIVE: frame.arm.map(_is_adaptive).astype(bool)})


def _is_adaptive(name: object) -> bool:
    return isinstance(name, str) and adaptive_ceiling(name) is not None


def save_answers(rows: list[SweepRow], path: Any, pilot: list[Answer] | None = None) -> None:
    """One answer per prompt: the pilot's (sampled as stage 3 samples, at its output budget), else
    the plain arm's in the sweep (greedy: every level answers a prompt alike, cut at
    `decide.max_tokens`)."""
    seen: dict[str | None, Answer] = {a["id"]: a for a in pilot or []}
    for row in rows:
        if row.get(SPEC_K) == 0:
            for a in row.get("answers") or []:
                seen.setdefault(a["id"], a)
    pd.DataFrame(list(seen.values()), columns=ANSWER_COLUMNS).to_parquet(path, index=False)


def given_up(table: pd.DataFrame, crashed: dict[str, str]) -> pd.DataFrame:
    """The per-level table with every level of an arm whose server kept dying marked `crashed` (its
    reason: the last crash and what to try) and no figure: such an arm is never chosen, whatever
    levels it ran before it died, since stage 3 would meet the same crash at full load (what those
    levels measured stays in sweep_runs.parquet)."""
    table = table.copy()
    for name, why in crashed.items():
        mine = table.arm == name
        table.loc[mine, "status"] = "crashed"
        table.loc[mine, "reason"] = why
        table.loc[mine, [OUTPUT_TOK_S, OUTPUT_TOK_S_LO, OUTPUT_TOK_S_HI]] = None
    return table


def write_tables(
    rows: list[SweepRow], folder: Any, crashed: dict[str, str], piloted: list[Answer] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write the sweep's files from its measurements: sweep_answers.parquet (the pilot's answers,
    then the plain arm's), sweep_runs.parquet (every measurement, judged for disturbance) and
    sweep.parquet (per arm and level); return (the per-level table, the measurements as every later
    reader of the file sees them). An adaptive arm's rows are marked (`mark`)."""
    save_answers(rows, folder.sweep_answers, piloted)
    measured = mark(flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS)))
    measured.to_parquet(folder.sweep_runs, index=False)
    runs = pd.read_parquet(folder.sweep_runs)
    table = mark(given_up(summarise(runs), crashed))
    table.to_parquet(folder.sweep, index=False)
    return table, runs
