"""decision.json's `reasons`: why the arm, in sentences. Arms not measured and why, the best plain
and speculative arms side by side (when nothing was measured), where the verify step turns compute-bound
and the predicted crossover, the predicted ratio by concurrency, what the decision does to stage 3's
batch, where the prediction still misses a measurement by more than the cost model's known error, and
the arms' servers that memory capped (kit.decide.sweep.setup adds that one).
kit/decide/choose/decision.py chooses the arm and calls these; the measured choice's own sentences
(with intervals) are kit/decide/choose/measured.py's, a crashed or unmeasured arm's
kit/decide/measure/arm_status.py's.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from kit.artifacts import EngineSettings, Forecast, SweepCost
from kit.decide.costmodel import MODEL_ERROR, Scenario, Workload, crossover, iteration_shares, with_ratio
from kit.display import hours

PREDICTION_ERROR = MODEL_ERROR
"""The cost model's known error on published tables it was not fitted to (docs/costmodel.md): a
predicted margin smaller than this never turns speculation on."""


def is_number(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def best_of(table: pd.DataFrame, col: str, spec: bool) -> pd.Series | None:
    rows = table[(table.spec_k > 0) == spec]
    rows = rows[rows[col].map(is_number)]
    return rows.loc[rows[col].astype(float).idxmax()] if len(rows) else None


def skipped_reasons(table: pd.DataFrame, unavailable: str | None) -> list[str]:
    """Why speculation or its arms were not measured, each reason once with the arms it kept out
    ("spec_k1 was not measured: X" three times over was three lines of the same sentence)."""
    out = [f"speculation is unavailable: {unavailable}"] if unavailable else []
    skipped = table[table.status == "skipped"].drop_duplicates("arm")
    skipped = skipped.assign(reason=skipped["reason"].fillna("no reason recorded"))
    for reason, arms in skipped.groupby("reason", sort=False)["arm"]:
        names = list(arms)
        listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        if reason == unavailable:
            out[0] += f" (so {listed} {'were' if len(names) > 1 else 'was'} not measured)"
        else:
            out.append(f"{listed} {'were' if len(names) > 1 else 'was'} not measured: {reason}")
    return out


def reason_sentences(
    table: pd.DataFrame,
    predicted: pd.DataFrame,
    unavailable: str | None,
    work: Workload,
    ks: list[int],
    measured: bool,
    name: str = "MTP",
) -> list[str]:
    out = skipped_reasons(table, unavailable)  # failed and crashed arms: kit.decide.measure.arm_status
    col, how = ("measured_tok_s", "measured") if measured else ("predicted_tok_s", "predicted")
    p, s = best_of(table, col, False), best_of(table, col, True)
    if (
        p is not None and s is not None and not measured
    ):  # measured: kit.decide.choose.measured says it, with intervals
        pv, sv = float(p[col]), float(s[col])
        lead, lag, lv, gv = (p, s, pv, sv) if pv >= sv else (s, p, sv, pv)
        hypo = "would beat" if unavailable and int(lead.spec_k) > 0 else "beats"
        out.append(
            f"{arm_label(lead, name)} at {int(lead.concurrency)} concurrent {hypo} {arm_label(lag, name)} "
            f"(best at {int(lag.concurrency)}) by {100 * (lv / gv - 1):.0f}% "
            f"({how}: {lv:.0f} vs {gv:.0f} tok/s)"
        )
    out += bound_sentences(predicted, ks, work, name)
    ratios = with_ratio(predicted)
    for k in ks:
        r = ratios[(ratios.spec_k == k) & ratios.ratio_vs_plain.notna()]
        if len(r):
            pairs = ", ".join(
                f"{int(c)}: {v:.2f}x" for c, v in zip(r.concurrency, r.ratio_vs_plain, strict=True)
            )
            worth = " (what it would be worth if it were available)" if unavailable else ""
            out.append(f"predicted {name} k={k} / plain tokens/s by concurrency{worth}: {pairs}")
    return out


def batch_sentence(settings: EngineSettings, fall: tuple[int, str] | None) -> str:
    """What the decision does to stage 3's batch: nothing (the engine's capacity), or why it sets it."""
    if fall is not None:
        return fall[1]
    if settings.max_running_requests is None:
        return (
            "stage 3 runs the engine at its full capacity (its own max running requests); the "
            "sweep's levels only compare the arms"
        )
    running, why = settings.max_running_requests, settings.max_running_requests_source
    return f"max_running_requests is set to {running} per replica: {why}"


def arm_label(row: pd.Series, name: str = "MTP") -> str:
    return "plain decoding" if int(row.spec_k) == 0 else f"{name} k={int(row.spec_k)}"


def bound_sentences(predicted: pd.DataFrame, ks: list[int], work: Workload, name: str = "MTP") -> list[str]:
    out = []
    ratios = with_ratio(predicted)
    for k in ks:
        rows = ratios[(ratios.spec_k == k) & (ratios.compute_bound == True)]  # noqa: E712
        if len(rows):
            first = rows.loc[rows.concurrency.idxmin()]
            c, b = int(first.concurrency), int(first.running)
            ratio = f"{first.ratio_vs_plain:.2f}x" if is_number(first.ratio_vs_plain) else "not predicted"
            out.append(
                f"from concurrency {c} the k={k} verify step ({b} x {k + 1} = {b * (k + 1)} tokens per "
                f"replica) is predicted compute-bound: each drafted token then costs compute, and the "
                f"predicted {name} k={k} / plain ratio there is {ratio}"
            )
        x = crossover(predicted, k)
        out.append(
            f"predicted crossover for k={k}: plain decoding matches or beats it from concurrency {x}"
            if x
            else f"predicted: {name} k={k} stays ahead of plain decoding wherever both fit in memory"
        )
    for r in predicted[~predicted.feasible].drop_duplicates("arm").itertuples():
        out.append(
            f"{r.arm}: memory holds only {r.mem_max_running} running sequences per replica at context "
            f"{work.input_len + work.output_len}; "
            f"concurrencies above {r.mem_max_running * work.dp_size} are not predicted"
        )
    return out


def gap_sentences(table: pd.DataFrame, s: Scenario, name: str = "MTP") -> list[str]:
    """Where the prediction (calibrated on the sweep when it could be) still misses a measured point
    by more than the model's known error: the worst point per arm, and the term the predicted step
    rests on most there (the one to distrust first)."""
    out = []
    off = table[table.error_pct.map(is_number)]
    off = off[off.error_pct.astype(float).abs() > 100 * PREDICTION_ERROR]
    for _, g in off.groupby("arm", sort=False):
        r = g.loc[g.error_pct.astype(float).abs().idxmax()]
        shares = iteration_shares(s, int(r.running), int(r.spec_k))
        term, share = max(shares.items(), key=lambda kv: kv[1])
        side = "above" if float(r.error_pct) > 0 else "below"
        out.append(
            f"the prediction for {arm_label(r, name)} at {int(r.concurrency)} concurrent is "
            f"{abs(float(r.error_pct)):.0f}% {side} the measurement, beyond the model's ±"
            f"{100 * PREDICTION_ERROR:.0f}% ({s.eff.source}): its predicted step is {100 * share:.0f}% "
            f"{term}, the term to distrust first there"
        )
    return out


def sweep_cost_sentence(cost: SweepCost, forecast: Forecast | None = None) -> str:
    """What the sweep took beside what the decision is worth on this job (the forecast's chosen arm
    against the next fastest): 'the sweep took 14 min (5 server starts, 20 measurements, 12 left
    out by racing); plain decoding saves 3 h 10 min over MTP k=1 here (by the forecast)'."""
    racing = f", {cost.skipped} left out by racing" if cost.skipped else ""
    head = (
        f"the sweep took {hours(cost.wall_s)} ({cost.server_starts} server start(s) of "
        f"{hours(cost.server_start_s)} together, {cost.measurements} measurements{racing})"
    )
    chosen = forecast.arm(forecast.chosen) if forecast is not None else None
    others = [a for a in forecast.arms if a.arm != forecast.chosen] if forecast is not None else []
    if chosen is None or not others:
        return head
    nearest = min(others, key=lambda a: a.wall_s)
    saves = nearest.wall_s - chosen.wall_s
    if saves <= 0:
        return f"{head}; by the forecast, {nearest.label} would take {hours(-saves)} less than {chosen.label}"
    return f"{head}; {chosen.label} saves {hours(saves)} over {nearest.label} on this job (by the forecast)"


def racing_sentences(cost: SweepCost) -> list[str]:
    """Decision.json's reasons on racing and the budget: what was left out and why, in a line, and
    where the budget came from."""
    out = [f"the sweep's time budget: {cost.budget_rule}"] if cost.budget_rule else []
    if not cost.skipped:
        return out
    by_level: dict[tuple[str, int], int] = {}
    for m in cost.skipped_measurements:
        by_level[(m.arm, m.concurrency)] = by_level.get((m.arm, m.concurrency), 0) + 1
    where = "; ".join(
        f"{arm} at {c}" + (f" x{n}" if n > 1 else "") for (arm, c), n in sorted(by_level.items())
    )
    first = cost.skipped_measurements[0]
    out.append(
        f"racing: {cost.skipped} measurement(s) were not made, their (arm, level) already ruled out "
        f"outside the noise by an earlier round ({where}; e.g. {first.why})"
    )
    return out
