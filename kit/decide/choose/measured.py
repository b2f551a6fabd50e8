"""What the measured sweep decides, with its noise: the arm to run, a fall to stop at, the drift.

The rule (kit.decide.measure.noise for the statistics): take every arm at its best level (the median of its
repetitions); the arm with the highest median leads; the arm chosen is the simplest one (plain,
then the smallest k) that the leader does not beat outside the noise. A lead inside the noise, or
one read off measurements the machine disturbed, keeps the simpler arm, which needs no draft weights
and no speculative buffers, and the reasons say so with the figures.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pandas as pd

from kit.columns import OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO
from kit.decide.measure.noise import INTERVAL, UNMEASURED_NOISE, Drift, Interval, Lead, lead, sweep_noise
from kit.decide.measure.tables import arm_lead, flags


class BestLevel(TypedDict):
    """An arm at its best measured level as decision.json's `measured` keeps it (by the arm's name)."""

    concurrency: int
    output_tok_s: float
    output_tok_s_lo: float
    output_tok_s_hi: float
    repetitions: int


class DisturbedRun(TypedDict):
    """One disturbed measurement among decision.json's `noise.disturbed`: where it ran and what
    the machine did meanwhile (kit.decide.machine.watch)."""

    round: int
    arm: str
    concurrency: int
    phase: str
    foreign_cpu_pct: float
    neighbour_cpu_pct: float
    slowdown: float | None
    output_tok_s: float | None
    why: str | None


class NoiseFigures(TypedDict, total=False):
    """decision.json's `noise` as `noise_section` makes it and `noise_sentences` reads it (the
    record: kit.artifacts.Noise). kit.decide.run adds how the servers ran (`servers_*`)."""

    noise_pct: float | None
    repetitions: int
    repetitions_min: int
    drift: dict[str, object] | None
    """kit.decide.measure.noise.Drift.as_dict."""
    disturbed: list[DisturbedRun]
    comparison: dict[str, object] | None
    """The best speculative arm against plain decoding: its name, lead and
    kit.decide.measure.noise.Lead.as_dict."""
    servers_held: bool
    servers_idle_cpu_pct: float


@dataclass(frozen=True)
class ArmBest:
    """One arm at its best measured level."""

    arm: str
    spec_k: int
    concurrency: int
    median: float
    lo: float
    hi: float
    repetitions: int

    def figure(self) -> str:
        """'2275 tok/s (2100-2400, 3 repetitions)'."""
        if self.repetitions < 2:
            return f"{self.median:.0f} tok/s (measured once: no interval)"
        return f"{self.median:.0f} tok/s ({self.lo:.0f}-{self.hi:.0f}, {self.repetitions} repetitions)"

    def as_dict(self) -> BestLevel:
        return BestLevel(
            concurrency=self.concurrency,
            output_tok_s=self.median,
            output_tok_s_lo=self.lo,
            output_tok_s_hi=self.hi,
            repetitions=self.repetitions,
        )


@dataclass
class MeasuredChoice:
    """The arm the measurements choose, how it compares, and why."""

    chosen: ArmBest
    leader: ArmBest
    bests: list[ArmBest]
    lead_over_chosen: Lead | None
    """The leader's lead over the chosen arm (None when the leader is chosen)."""
    spec_vs_plain: Lead | None
    """The best speculative arm against plain decoding (None when one of them was not measured)."""
    notes: list[str] = field(default_factory=list)

    @property
    def measurable(self) -> bool | None:
        """Whether speculation and plain decoding differ outside the noise (None: not both measured)."""
        return None if self.spec_vs_plain is None else self.spec_vs_plain.counts


def arm_bests(sweep: pd.DataFrame, latency_bound_s: float | None = None) -> list[ArmBest]:
    """Each measured arm at its best level (within the latency bound when there is one)."""
    ok = sweep[(sweep.status == "ok") & sweep.output_tok_s.notna()]
    if latency_bound_s is not None:
        ok = ok[ok.latency_p50_s <= latency_bound_s]
    out = []
    for arm, g in ok.groupby("arm"):
        r = g.loc[g.output_tok_s.astype(float).idxmax()]
        reps = int(r.repetitions) if "repetitions" in r and pd.notna(r.repetitions) else 1
        lo = (
            float(r.output_tok_s_lo)
            if OUTPUT_TOK_S_LO in r and pd.notna(r.output_tok_s_lo)
            else r.output_tok_s
        )
        hi = (
            float(r.output_tok_s_hi)
            if OUTPUT_TOK_S_HI in r and pd.notna(r.output_tok_s_hi)
            else r.output_tok_s
        )
        out.append(
            ArmBest(
                str(arm), int(r.spec_k), int(r.concurrency), float(r.output_tok_s), float(lo), float(hi), reps
            )
        )
    return sorted(out, key=lambda a: a.spec_k)


def _lead(runs: pd.DataFrame | None, a: ArmBest, b: ArmBest) -> Lead:
    """A's lead over B, paired by round when the sweep's runs are at hand."""
    if runs is None or runs.empty:
        return lead({0: a.median}, {0: b.median})
    return arm_lead(runs, a.arm, a.concurrency, b.arm, b.concurrency)


ON_DISTURBED = (
    "read off disturbed measurements (fewer than two undisturbed repetitions were left; see the "
    "sweep's noise below, and run `kit decide` again on a quieter machine)"
)


def choose(
    sweep: pd.DataFrame, runs: pd.DataFrame | None, latency_bound_s: float | None, label: Any
) -> MeasuredChoice | None:
    """The simplest arm the leader does not beat outside the noise; None when nothing was measured.
    `label(k)` names an arm in sentences."""
    bests = arm_bests(sweep, latency_bound_s)
    if not bests:
        return None
    leader = max(bests, key=lambda a: a.median)
    chosen, over = leader, None
    for arm in bests:  # simplest first
        if arm is leader:
            break
        candidate = _lead(runs, leader, arm)
        if not candidate.counts:
            chosen, over = arm, candidate
            break
    plain = next((a for a in bests if a.spec_k == 0), None)
    spec = max((a for a in bests if a.spec_k > 0), key=lambda a: a.median, default=None)
    versus = _lead(runs, spec, plain) if plain and spec else None
    notes = []
    if versus is not None:
        verdict = "outside the noise" if versus.counts else "no measurable difference"
        if versus.disturbed:
            verdict = f"not counted: {ON_DISTURBED}"
        notes.append(
            f"measured, each arm at its best level: {label(spec.spec_k)} at {spec.concurrency} concurrent "
            f"{spec.figure()}, plain decoding at {plain.concurrency} {plain.figure()}; "
            f"{label(spec.spec_k)} / plain = {versus.ratio.median:.2f}x ({_interval_pct(versus)}; pooled "
            f"noise ±{100 * versus.pooled_noise:.0f}%): {verdict}"
        )
    if over is not None:
        notes.append(
            f"{label(leader.spec_k)} measured {over.pct:+.0f}% against {label(chosen.spec_k)} "
            f"({_interval_pct(over)}), "
            + (ON_DISTURBED if over.disturbed else f"inside the noise (pooled ±{over.pooled_noise:.0%})")
            + f": the simpler arm, {label(chosen.spec_k)}, is kept"
        )
    return MeasuredChoice(chosen, leader, bests, over, versus, notes)


def _interval_pct(x: Lead) -> str:
    if x.ratio.n < 2:
        return "measured once: no interval"
    return (
        f"interval {100 * (x.ratio.lo - 1):+.0f}% to {100 * (x.ratio.hi - 1):+.0f}% over {x.ratio.n} rounds"
    )


def measured_fall(sweep: pd.DataFrame, runs: pd.DataFrame | None, arm: str) -> tuple[int, str] | None:
    """(level, sentence) when the arm's throughput falls, outside the noise, from its best level to
    its top one: stage 3 should not run the engine beyond that level. None otherwise."""
    bests = arm_bests(sweep[sweep.arm == arm])
    top_rows = sweep[(sweep.arm == arm) & (sweep.status == "ok") & sweep.output_tok_s.notna()]
    if not bests or top_rows.empty:
        return None
    best = bests[0]
    top = top_rows.loc[top_rows.concurrency.idxmax()]
    if int(top.concurrency) <= best.concurrency:
        return None
    at_top = ArmBest(arm, best.spec_k, int(top.concurrency), float(top.output_tok_s), 0, 0, 1)
    drop = _lead(runs, best, at_top)
    if not drop.counts:
        return None
    return best.concurrency, (
        f"{arm} measured {drop.pct:.0f}% more at {best.concurrency} concurrent than at {at_top.concurrency} "
        f"({_interval_pct(drop)}, outside the noise): stage 3 runs at most {best.concurrency} at once"
    )


def noise_section(
    sweep: pd.DataFrame, runs: pd.DataFrame | None, choice: MeasuredChoice | None
) -> NoiseFigures:
    """decision.json's `noise`: the sweep's noise figure, repetitions, drift, set-aside measurements
    and the comparison of speculation with plain decoding."""
    ok = (
        sweep[(sweep.status == "ok") & sweep.output_tok_s.notna()]
        if "repetitions" in sweep
        else sweep.iloc[:0]
    )
    noise = sweep_noise([_interval(r) for r in ok.itertuples()])
    out = NoiseFigures(
        noise_pct=None if noise is None else 100 * noise,
        repetitions=int(ok.repetitions.max()) if len(ok) else 1,
        repetitions_min=int(ok.repetitions.min()) if len(ok) else 1,
        drift=None,
        disturbed=[],
        comparison=None,
    )
    if runs is not None and not runs.empty:
        drift = drift_check(runs, sweep)
        out["drift"] = drift.as_dict() if drift else None
        bad = runs[flags(runs.disturbed)]
        out["disturbed"] = [
            DisturbedRun(
                round=int(r["round"]),
                arm=r.arm,
                concurrency=int(r.concurrency),
                phase=r.phase,
                foreign_cpu_pct=round(100 * float(r.foreign_cpu), 1),
                neighbour_cpu_pct=round(100 * _or_zero(r.get("neighbour_cpu")), 1),
                slowdown=None if pd.isna(r.get("slowdown")) else round(float(r.slowdown), 2),
                output_tok_s=None if pd.isna(r.output_tok_s) else float(r.output_tok_s),
                why=r.get("why") if isinstance(r.get("why"), str) and r.get("why") else None,
            )
            for _, r in bad.iterrows()
        ]
    if choice is not None and choice.spec_vs_plain is not None:
        v = choice.spec_vs_plain
        spec = max((a for a in choice.bests if a.spec_k > 0), key=lambda a: a.median)
        out["comparison"] = {"speculative_arm": spec.arm, "lead_pct": v.pct, **v.as_dict()}
    return out


def _or_zero(x: Any) -> float:
    return 0.0 if x is None or pd.isna(x) else float(x)


def _interval(r: Any) -> Interval:
    """A sweep.parquet row's interval of its median."""
    n = int(r.repetitions) if pd.notna(r.repetitions) else 1
    return Interval(float(r.output_tok_s), float(r.output_tok_s_lo), float(r.output_tok_s_hi), n)


def drift_check(runs: pd.DataFrame, sweep: pd.DataFrame) -> Drift | None:
    """Plain decoding at the top level, at the sweep's start against its end, beside that level's noise."""
    start = runs[(runs.phase == "start") & (runs.status == "ok")]
    end = runs[(runs.phase == "end") & (runs.status == "ok")]
    if start.empty or end.empty:
        return None
    c = int(start.concurrency.iloc[0])
    level = sweep[(sweep.arm == start.arm.iloc[0]) & (sweep.concurrency == c)]
    noise = float(level.noise_pct.iloc[0]) / 100 if len(level) and pd.notna(level.noise_pct.iloc[0]) else 0.0
    once = bool(len(level) and int(level.repetitions.iloc[0]) < 2)
    if once:  # measured once: its noise is the assumed one
        noise = max(noise, UNMEASURED_NOISE)
    seen = bool(flags(pd.concat([start, end]).disturbed).any())
    start_tok_s, end_tok_s = float(start.output_tok_s.iloc[0]), float(end.output_tok_s.iloc[0])
    return Drift(c, start_tok_s, end_tok_s, noise, seen, assumed=once and noise == UNMEASURED_NOISE)


def noise_sentences(noise: NoiseFigures | None, planned: int | None = None) -> list[str]:
    """The reasons that say what the sweep's noise was: its figure, the drift, what was set aside
    (`planned`: the rounds the params asked for; fewer measured were left out by racing or the
    sweep's time budget, which decision.json's `sweep_cost` says)."""
    if not noise:
        return []
    reps = noise["repetitions"]
    fewest = noise.get("repetitions_min", reps)
    per_level = f"{fewest}-{reps}" if fewest != reps else f"{reps}"
    if noise["noise_pct"] is None:
        pooled = 100 * math.hypot(UNMEASURED_NOISE, UNMEASURED_NOISE)
        advice = "(set decide.repetitions to 3 or more)"
        if planned is not None and planned > reps:
            advice = f"(of the {planned} rounds planned, racing or the time budget left the rest out)"
        out = [
            f"each level was measured {reps} time(s): the noise could not be measured, so a lead must "
            f"exceed ±{100 * UNMEASURED_NOISE:.0f}% on each arm (±{pooled:.0f}% pooled) to count {advice}"
        ]
    else:
        out = [
            f"the sweep's noise: ±{noise['noise_pct']:.1f}% (the median half-width of its levels' "
            f"{100 * INTERVAL:.0f}% intervals, {per_level} interleaved repetitions per level)"
        ]
    if noise.get("servers_held"):
        out.append(
            f"the arms' servers ran side by side, but idle they took {noise['servers_idle_cpu_pct']:.0f}% "
            "of the CPU between them: each was paused (SIGSTOP) while another arm was measured"
        )
    drift = noise.get("drift")
    if drift:
        keys = ("concurrency", "start", "end", "noise", "disturbed", "assumed")
        out.append(Drift(**{k: drift[k] for k in keys if k in drift}).sentence())
    disturbed = noise.get("disturbed") or []
    sweep = [d for d in disturbed if d["phase"] == "sweep"]
    drift_check = [d for d in disturbed if d["phase"] != "sweep"]
    if drift_check:  # its start and its end, said once
        phases = " and ".join(dict.fromkeys(str(d["phase"]) for d in drift_check))
        levels = "/".join(str(c) for c in sorted({int(d["concurrency"]) for d in drift_check}))
        out.append(f"the drift check ({phases}) at {levels} concurrent ran while {_disturbance(drift_check)}")
    if len(sweep) == 1:
        d = sweep[0]
        out.append(
            f"round {d['round']} of {d['arm']} at {d['concurrency']} concurrent ran while "
            f"{_disturbance(sweep)}: {SET_ASIDE}"
        )
    elif sweep:
        out.append(f"{len(sweep)} repetitions ({_where(sweep)}) ran while {_disturbance(sweep)}: {SET_ASIDE}")
    return out


SET_ASIDE = "set aside where two undisturbed repetitions remain"


def _span(values: list[float], unit: str) -> str:
    """'40%', or '12-60%' over several measurements."""
    lo, hi = min(values), max(values)
    return f"{lo:.0f}{unit}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}{unit}"


def _disturbance(disturbed: list[DisturbedRun]) -> str:
    """What disturbed these measurements, each cause with its range over them: one line for a
    sweep of 25 disturbed rounds, not 25 (a shared machine's reasons list read ~40 bullets)."""
    foreign = [d["foreign_cpu_pct"] for d in disturbed if d["foreign_cpu_pct"] > 1]
    neighbour = [d["neighbour_cpu_pct"] for d in disturbed if (d.get("neighbour_cpu_pct") or 0) > 1]
    slow = [d["slowdown"] for d in disturbed if (d.get("slowdown") or 1) > 1.05]
    why = [f"other processes took {_span(foreign, '%')} of the CPU"] if foreign else []
    if neighbour:
        why.append(f"the other arms' servers took {_span(neighbour, '%')} of the CPU")
    if slow:
        why.append(f"the CPU ran up to {max(slow):.1f}x slower than usual (a canary of fixed work)")
    said = (d.get("why") or "" for d in disturbed)  # the signals kit.decide.machine.watch.judge named
    why += dict.fromkeys(part for w in said for part in w.split(" and ") if "GPU" in part)
    return " and ".join(why or ["the machine was busy"])


def _where(disturbed: list[DisturbedRun]) -> str:
    """Arms and levels of the disturbed repetitions: 'plain at 4 x2, 16; spec_k1 at 16'."""
    by_arm: dict[str, Counter[int]] = {}
    for d in disturbed:
        by_arm.setdefault(str(d["arm"]), Counter())[int(d["concurrency"])] += 1
    return "; ".join(
        f"{arm} at " + ", ".join(f"{c} x{n}" if n > 1 else f"{c}" for c, n in sorted(levels.items()))
        for arm, levels in by_arm.items()
    )
