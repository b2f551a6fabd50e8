"""The engine's own adaptive speculation beside the kit's decision (`decide.adaptive_k`).

SGLang (`--speculative-adaptive`) and vLLM (`num_speculative_tokens_per_batch_size`) can change the
draft length by batch size themselves: the closest thing to this kit's decision an engine offers. The
sweep measures such an arm (`adaptive_k3`: the engine picks k per batch, up to 3) at every level,
in the same interleaved rounds as the fixed arms (kit.decide.sweep.sweep); the decision never chooses it.
Its rows are taken out of the frames the decision's core reads (which key arms by their draft
length) and compared here, per level, with plain decoding and with the arm the kit's measurements
pick at that level (the fastest measured there), as paired per-round ratios with the intervals the
decision uses for its own leads (kit.decide.measure.noise.lead):

    core, runs, frames = split(sweep, runs)     # the decision reads `core` and `runs` as before
    comparison = compare(frames, core, runs, label, spec_label)   # decision.json's `adaptive`
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from kit.artifacts import AdaptiveComparison, AdaptiveLevel, Decision
from kit.columns import ADAPTIVE, OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO, SPEC_K
from kit.decide.measure.arm_status import crashes
from kit.decide.measure.noise import Lead, lead
from kit.decide.measure.tables import arm_lead, cell_float
from kit.engines.arms import adaptive_label, arm_label, arm_name
from kit.engines.flavors import flavor
from kit.errors import ParamsError
from kit.params import RunParams


def check_adaptive(params: RunParams) -> None:
    """Refuse, before any server starts, an adaptive arm the engine cannot run as asked."""
    eng = params.engine
    if params.decide.adaptive_k is None:
        return
    problem = flavor(eng.flavor).adaptive_problem(eng)
    if problem:
        raise ParamsError(
            f"decide.adaptive_k {params.decide.adaptive_k}: {problem}; or remove decide.adaptive_k "
            "(then run kit decide again)"
        )


@dataclass(frozen=True)
class AdaptiveFrames:
    """The adaptive arm's rows of the sweep's tables (per level; every measurement)."""

    sweep: pd.DataFrame
    runs: pd.DataFrame | None


def split(
    sweep: pd.DataFrame, runs: pd.DataFrame | None
) -> tuple[pd.DataFrame, pd.DataFrame | None, AdaptiveFrames | None]:
    """(the sweep's table and measurements without the adaptive arm's rows and column, as the
    decision's core reads them; the adaptive rows, None when the sweep had none)."""
    if ADAPTIVE not in sweep:
        return sweep, runs, None
    mine = sweep[ADAPTIVE].astype(bool)
    core = sweep[~mine].drop(columns=ADAPTIVE).reset_index(drop=True)
    if runs is None or ADAPTIVE not in runs:
        return core, runs, AdaptiveFrames(sweep[mine], None)
    theirs = runs[ADAPTIVE].astype(bool)
    core_runs = runs[~theirs].drop(columns=ADAPTIVE).reset_index(drop=True)
    return core, core_runs, AdaptiveFrames(sweep[mine], runs[theirs])


def compare(
    frames: AdaptiveFrames, core: pd.DataFrame, runs: pd.DataFrame | None, engine: str, spec_label: str
) -> AdaptiveComparison:
    """decision.json's `adaptive`: per level, the adaptive arm against plain decoding and against the
    fastest arm measured there, and the verdict sentence (`engine`: the flavor's title)."""
    rows = frames.sweep
    name = str(rows.arm.iloc[0])
    ceiling = int(rows[SPEC_K].iloc[0])
    label = adaptive_label(ceiling, spec_label, engine)
    measured = rows[(rows.status == "ok") & rows[OUTPUT_TOK_S].notna()]
    if measured.empty:
        status = str(rows.status.iloc[0])
        why = next((str(r) for r in rows.reason if isinstance(r, str) and r), "no level was measured")
        sentence = f"{label} could not be measured ({status}): {why}"
        return AdaptiveComparison(
            arm=name, ceiling=ceiling, label=label, status=status, reason=why, sentence=sentence
        )
    every = runs if frames.runs is None or runs is None else pd.concat([runs, frames.runs])
    levels = [
        _level(name, r, core, every, spec_label) for _, r in measured.sort_values("concurrency").iterrows()
    ]
    return _verdict(AdaptiveComparison(arm=name, ceiling=ceiling, label=label, levels=levels))


def _level(
    name: str, r: pd.Series, core: pd.DataFrame, runs: pd.DataFrame | None, spec_label: str
) -> AdaptiveLevel:
    """The adaptive arm at one level beside plain and the fastest arm measured there."""
    c = int(r.concurrency)
    here = core[(core.concurrency == c) & (core.status == "ok") & core[OUTPUT_TOK_S].notna()]
    plain = here[here[SPEC_K] == 0]
    best = here.loc[here[OUTPUT_TOK_S].astype(float).idxmax()] if len(here) else None
    vs_plain = _lead(runs, name, r, plain.iloc[0] if len(plain) else None)
    vs_kit = _lead(runs, name, r, best)
    return AdaptiveLevel(
        concurrency=c,
        output_tok_s=float(r[OUTPUT_TOK_S]),
        output_tok_s_lo=cell_float(r.get(OUTPUT_TOK_S_LO)),
        output_tok_s_hi=cell_float(r.get(OUTPUT_TOK_S_HI)),
        repetitions=int(r.repetitions) if pd.notna(r.get("repetitions")) else 1,
        plain_tok_s=float(plain[OUTPUT_TOK_S].iloc[0]) if len(plain) else None,
        kit_arm=None if best is None else arm_name(int(best[SPEC_K])),
        kit_label=None if best is None else arm_label(int(best[SPEC_K]), spec_label),
        kit_tok_s=None if best is None else float(best[OUTPUT_TOK_S]),
        **_ratio("vs_plain", vs_plain),
        **_ratio("vs_kit", vs_kit),
        kit_leads=bool(vs_kit is not None and vs_kit.counts and vs_kit.ratio.median < 1),
        adaptive_leads=bool(vs_kit is not None and vs_kit.counts and vs_kit.ratio.median > 1),
    )


def _lead(runs: pd.DataFrame | None, name: str, mine: pd.Series, other: pd.Series | None) -> Lead | None:
    """The adaptive arm's lead over `other` at its level, paired by round (kit.decide.measure.noise.lead); the
    ratio of the two medians, measured once, where the measurements are not at hand."""
    if other is None:
        return None
    c = int(mine.concurrency)
    if runs is None:
        return lead({0: float(mine[OUTPUT_TOK_S])}, {0: float(other[OUTPUT_TOK_S])})
    return arm_lead(runs, name, c, str(other.arm), c)


def _ratio(key: str, x: Lead | None) -> dict[str, float | int | None]:
    if x is None or not x.ratio.n:
        return {key: None, f"{key}_lo": None, f"{key}_hi": None, f"{key}_rounds": 0}
    r = x.ratio
    return {key: r.median, f"{key}_lo": r.lo, f"{key}_hi": r.hi, f"{key}_rounds": r.n}


def _x(level: AdaptiveLevel, key: str) -> str:
    """'0.97x (0.95-0.99)' of one ratio; 'measured once' where its rounds give no interval."""
    r, lo, hi, n = (getattr(level, k) for k in (key, f"{key}_lo", f"{key}_hi", f"{key}_rounds"))
    return f"{r:.2f}x ({lo:.2f}-{hi:.2f})" if n >= 2 else f"{r:.2f}x (measured once)"


def _verdict(cmp: AdaptiveComparison) -> AdaptiveComparison:
    """The comparison with its verdict: whether the engine's switch gets what the kit's pick gets at
    every level (the pick leads it outside the noise nowhere), and its largest shortfall."""
    levels = [lv for lv in cmp.levels if lv.vs_kit is not None]
    top, low = cmp.levels[-1], cmp.levels[0]
    if top.vs_kit is not None:
        head = [f"{_x(top, 'vs_kit')} of the kit's pick ({top.kit_label}) at {top.concurrency}"]
    else:
        head = [f"{top.output_tok_s:.0f} tok/s at {top.concurrency}"]
    if low.vs_plain is not None:
        head.append(f"{_x(low, 'vs_plain')} plain at {low.concurrency}")
    behind = [str(lv.concurrency) for lv in levels if lv.kit_leads]
    ahead = [str(lv.concurrency) for lv in levels if lv.adaptive_leads]
    matches = None if not levels else not behind
    if matches is None:
        verdict = "no arm of the kit's was measured beside it"
    elif behind:
        verdict = (
            "it does not already get what the kit decides: the kit's pick leads it outside the noise "
            f"at {', '.join(behind)}"
        )
    else:
        verdict = "it already gets what the kit decides: the kit's pick leads it outside the noise nowhere"
    if ahead:
        verdict += f"; it leads the kit's pick outside the noise at {', '.join(ahead)}"
    worst = min(levels, key=lambda lv: lv.vs_kit or 0.0) if levels else None
    cost = None if worst is None or worst.vs_kit is None else max(0.0, 100 * (1 - worst.vs_kit))
    if worst is not None and cost:
        verdict += f"; cost {cost:.0f}% at {worst.concurrency} ({_x(worst, 'vs_kit')} of {worst.kit_label})"
    elif worst is not None:
        verdict += f"; no cost: its lowest, {_x(worst, 'vs_kit')} of the kit's pick at {worst.concurrency}"
    return replace(
        cmp,
        matches_kit=matches,
        cost_pct=cost,
        cost_at=None if worst is None else worst.concurrency,
        sentence=f"{cmp.label}: {', '.join(head)}; {verdict}",
    )


def with_adaptive(
    decision: Decision,
    frames: AdaptiveFrames | None,
    core: pd.DataFrame,
    runs: pd.DataFrame | None,
    engine: str,
    spec_label: str,
) -> Decision:
    """The decision with its `adaptive` section, its sentence among the reasons and every death of
    its server among the `crashes` (as it is when the sweep measured no adaptive arm)."""
    if frames is None or frames.sweep.empty:
        return decision
    cmp = compare(frames, core, runs, engine, spec_label)
    dead = [*decision.crashes, *crashes(frames.runs)]
    return replace(decision, adaptive=cmp, reasons=[*decision.reasons, cmp.sentence], crashes=dead)
