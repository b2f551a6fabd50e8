"""The sweep's tables and how they are read: the columns of `sweep_runs.parquet` (every measurement)
and `sweep.parquet` (one row per arm and level), the figure of a level (the median of its
repetitions, disturbed ones set aside while two undisturbed remain), and the rounds a lead between
two arms pairs (kit.decide.noise). Written by kit.decide.sweep, read by kit.decide.measured."""

from __future__ import annotations

import pandas as pd

from kit.columns import OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO, SPEC_K
from kit.decide.machine import judge_runs
from kit.decide.noise import median_interval

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
COLUMNS = [*LEVEL_COLUMNS, OUTPUT_TOK_S_LO, OUTPUT_TOK_S_HI, "repetitions", "set_aside", "noise_pct"]
"""sweep.parquet: per (arm, level) the median of its repetitions and the interval of that median."""


def flags(column: pd.Series) -> pd.Series:
    """A column of true / false / missing as booleans (missing: false)."""
    return column.map(lambda v: bool(v) if pd.notna(v) else False).astype(bool)


def flag_slow(runs: pd.DataFrame) -> pd.DataFrame:
    """Judge every measurement by its signals, the CPU canary's `slowdown` over the sweep's median
    among them (kit.decide.machine.judge_runs): `disturbed`, and `why` names the signals that said so."""
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


def per_round(runs: pd.DataFrame, arm: str, concurrency: int) -> dict[int, float]:
    """{round: tok/s} of one arm at one level, over the measurements the summary used."""
    used = _used(runs, arm, concurrency)
    return {int(r): float(v) for r, v in zip(used["round"], used.output_tok_s, strict=True)}


def rests_on_disturbed(runs: pd.DataFrame, arm: str, concurrency: int) -> bool:
    """Whether the figure of one arm at one level uses a disturbed measurement (too few calm ones)."""
    return bool(flags(_used(runs, arm, concurrency).disturbed).any())
