"""Which engine setting the settings sweep (kit.decide.checks.settings_sweep) hands to stage 3, and why.

The rule is the arms' (kit.decide.measure.noise): an alternative wins only when its lead over the baseline,
the median of their per-round ratios, counts (an interval that excludes 1 and a lead past the two
servers' pooled noise; over fewer than three rounds, past the noise of two levels measured once; never
when read off disturbed measurements). Of the winners of one setting the fastest is chosen; with none,
the params' own value is kept. A setting the params set explicitly is measured too, but kept: the
reasons say what the sweep found. decision.json's `backends` holds one row per server, with its
first start (launch to ready, warm-up included: a first-use compile shows there).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

import pandas as pd

from kit.artifacts import BackendResult, Decision
from kit.columns import OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO
from kit.decide.checks.settings_sweep import BASELINE, Alternative, BackendSweep, run_backends
from kit.decide.measure.noise import Lead
from kit.decide.measure.tables import RUN_COLUMNS, arm_lead, cell_float, summarise
from kit.decide.sweep.setup import SweepSetup


def judge_backends(
    runs: pd.DataFrame,
    alts: list[Alternative],
    concurrency: int,
    own: Mapping[str, str | None],
    explicit: Collection[str] = (),
    starts: Mapping[str, list[float]] | None = None,
    why_not: Mapping[str, tuple[str, str]] | None = None,
) -> list[BackendResult]:
    """One row per server, the baseline first: its figure, its ratio to the baseline and whether it
    is chosen. `runs`: the settings sweep's measurements (judged: `disturbed`); `own`: the params'
    value of each setting (None: the engine's default); `explicit`: the settings the params set;
    `why_not`: the servers that would not start or kept dying: (failed or crashed, why)."""
    runs = runs.reindex(columns=list(dict.fromkeys([*RUN_COLUMNS, *runs.columns])))
    table = summarise(runs) if len(runs) else pd.DataFrame(columns=["arm"])
    rows = {str(r.arm): r for r in table.itertuples()}
    starts, why_not = starts or {}, why_not or {}
    base = rows.get(BASELINE)
    base_ok = base is not None and cell_float(base.output_tok_s) is not None
    leads: dict[str, Lead] = {}
    for alt in alts[1:]:
        r = rows.get(alt.name)
        if base_ok and r is not None and cell_float(r.output_tok_s) is not None:
            leads[alt.name] = arm_lead(runs, alt.name, concurrency, BASELINE, concurrency)
    winners: dict[str, Alternative] = {}
    for alt in alts[1:]:
        x = leads.get(alt.name)
        if x is not None and x.counts and x.ratio.median > 1:
            best = winners.get(str(alt.setting))
            if best is None or x.ratio.median > leads[best.name].ratio.median:
                winners[str(alt.setting)] = alt
    out = []
    for alt in alts:
        r = rows.get(alt.name)
        x = leads.get(alt.name)
        status, reason = _verdict(alt, x, base_ok, winners, own, explicit, why_not)
        first = starts.get(alt.name)
        out.append(
            BackendResult(
                setting=alt.setting,
                value=alt.value if alt.setting else None,
                concurrency=concurrency,
                output_tok_s=cell_float(getattr(r, OUTPUT_TOK_S, None)),
                output_tok_s_lo=cell_float(getattr(r, OUTPUT_TOK_S_LO, None)),
                output_tok_s_hi=cell_float(getattr(r, OUTPUT_TOK_S_HI, None)),
                repetitions=int(cell_float(getattr(r, "repetitions", None)) or 0),
                ratio=x.ratio.median if x else None,
                ratio_lo=x.ratio.lo if x else None,
                ratio_hi=x.ratio.hi if x else None,
                start_s=round(first[0], 1) if first else None,
                status=status,
                reason=reason,
            )
        )
    return out


def _verdict(
    alt: Alternative,
    x: Lead | None,
    base_ok: bool,
    winners: Mapping[str, Alternative],
    own: Mapping[str, str | None],
    explicit: Collection[str],
    why_not: Mapping[str, tuple[str, str]],
) -> tuple[str, str]:
    """(status, reason) of one server."""
    if alt.name in why_not:
        return why_not[alt.name]
    if alt.setting is None:
        if not base_ok:
            return "failed", "the baseline was not measured: no alternative can be compared"
        return "baseline", "the params' own engine settings"
    base = own_label(alt.setting, own)
    if x is None:
        why = "it was not measured" if base_ok else "the baseline was not measured"
        return "not chosen", f"{why}: nothing to compare"
    if winners.get(alt.setting) is alt:
        if alt.setting in explicit:
            return "set in params", (
                f"beats {base} outside the noise, but engine.{alt.setting} is set in the params: kept "
                f"{base} (remove it from the params to take {alt.value})"
            )
        return "chosen", f"beats {base} outside the noise"
    if x.disturbed:
        return "not chosen", "its lead is read off disturbed measurements: not counted"
    if x.counts and x.ratio.median > 1:
        return "not chosen", "beats the baseline outside the noise, but another value beats it by more"
    if x.counts:
        return "not chosen", f"slower than {base} outside the noise"
    return "not chosen", f"inside the noise (pooled ±{100 * x.pooled_noise:.0f}%)"


def own_label(setting: str, own: Mapping[str, str | None]) -> str:
    """The baseline's value of `setting` in words."""
    value = own.get(setting)
    return value if value else "the engine's default"


def backend_reasons(results: list[BackendResult], own: Mapping[str, str | None]) -> list[str]:
    """One line per setting ("sampling_backend pytorch: 0.81x flashinfer (0.79-0.83), kept
    flashinfer"), then the servers' first starts."""
    lines = []
    base = results[0] if results else None
    settings = list(dict.fromkeys(r.setting for r in results[1:] if r.setting))
    for setting in settings:
        mine = [r for r in results[1:] if r.setting == setting]
        label = own_label(setting, own)
        parts = []
        for r in mine:
            if r.ratio is None:
                parts.append(f"{r.value} not measured ({r.status}: {r.reason[:300]})")
            else:
                ratio = f"{r.ratio:.2f}x {label} ({r.ratio_lo:.2f}-{r.ratio_hi:.2f})"
                parts.append(f"{r.value}: {ratio}, {r.reason}")
        chosen = next((r for r in mine if r.status == "chosen"), None)
        verdict = f"chose {chosen.value}" if chosen else f"kept {label}"
        lines.append(f"{setting} {'; '.join(parts)}; {verdict}")
    started = [r for r in results if r.start_s is not None]
    if started and base is not None:
        said = ", ".join(f"{_server(r)} {r.start_s:.0f} s" for r in started)
        lines.append(
            f"settings sweep at {base.concurrency} concurrent, sampled as stage 3; first start of each "
            f"server (launch to ready, warm-up included; a first-use compile shows here): {said}"
        )
    return lines


def _server(r: BackendResult) -> str:
    return "baseline" if r.setting is None else f"{r.setting} {r.value}"


def decide_backends(
    decision: Decision,
    sweep: BackendSweep,
    own: Mapping[str, str | None],
    explicit: Collection[str],
) -> Decision:
    """`decision` with the settings sweep's `backends` section, its reasons, and the winners in its
    `engine_settings` (a measured setting with no winner: the params' own value, what was measured;
    one the params set is left to them, apply_settings keeps it)."""
    why_not = {
        **{n: ("failed", f"its server did not start: {w}") for n, w in sweep.failed.items()},
        **{n: ("crashed", w) for n, w in sweep.crashed.items()},
    }
    results = judge_backends(
        sweep.runs, sweep.alternatives, sweep.concurrency, own, explicit, sweep.starts, why_not
    )
    settings = decision.engine_settings
    for setting in dict.fromkeys(a.setting for a in sweep.alternatives[1:] if a.setting):
        if setting in explicit:
            continue
        chosen = next((r for r in results if r.setting == setting and r.status == "chosen"), None)
        settings = replace(settings, **{setting: chosen.value if chosen else own.get(setting)})
    reasons = [*decision.reasons, *backend_reasons(results, own)]
    return replace(decision, backends=results, engine_settings=settings, reasons=reasons)


def settings_sweep(setup: SweepSetup, decision: Decision) -> Decision:
    """Run the settings sweep for the decision's arm (on the speculation sweep's servers' params) and
    fold its verdict into the decision; `decision` as it is without `decide.backends`."""
    params = setup.params
    wanted = params.decide.backends
    if not wanted or decision.arm is None:
        return decision
    eng = params.engine
    own = {s: getattr(eng, s) for s in wanted}
    explicit = {s for s in wanted if s in eng.model_fields_set and getattr(eng, s) is not None}
    sweep = run_backends(setup, decision.arm)
    return decide_backends(decision, sweep, own, explicit)
