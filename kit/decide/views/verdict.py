"""The decision in sentences, for notebook 02 and the report's index: the chosen arm, measured or
predicted, its lead over the best arm of the other kind, why speculation was not measured."""

from __future__ import annotations

from kit.artifacts import Decision, LadderPoint
from kit.decide.measure.noise import INTERVAL
from kit.display import Answer, is_number, number
from kit.engines.arms import Arm, arm_label

__all__ = ["against_sweep", "arm_label", "decision_answer", "interval_words", "measured_level"]


def _best(rows: list[LadderPoint], col: str, spec: bool) -> LadderPoint | None:
    rows = [r for r in rows if (r.spec_k > 0) == spec and is_number(r.value(col))]
    return max(rows, key=lambda r: float(r.value(col))) if rows else None


def _not_measured(decision: Decision) -> str | None:
    """Why no speculative arm was measured, or None when one was."""
    spec = [r for r in decision.table if r.spec_k > 0]
    if not spec or any(r.status == "ok" and is_number(r.measured_tok_s) for r in spec):
        return None
    why = decision.speculation_unavailable_reason
    if not why and any(r.status == "answers_differ" for r in spec):
        return "Speculation was measured and set aside: it changed the sampled answers (see the reasons)."
    if not why and any(r.status == "crashed" for r in spec):
        return None  # `_crashed` names the engine's error
    if not why:
        failed = [str(r.reason).splitlines() for r in spec if r.reason]
        why = failed[0][0] if failed and failed[0] else "the sweep did not run its arms"
    return f"Speculation could not be measured: {why}."


def _crashed(decision: Decision) -> str | None:
    """The arms whose server kept dying, with the engine's own error (the decision page says what to
    try), or None when none did."""
    dead = [arm for arm, why in decision.unmeasured.items() if why.startswith("crashed")]
    if not dead:
        return None
    said = []
    for arm in dead:
        last = [c for c in decision.crashes if c.arm == arm][-1:]
        error = last[0].error if last and last[0].error else "no error in its log"
        where = f" in {last[0].where}" if last and last[0].where else ""
        said.append(f"{arm} ({error}{where})")
    return (
        f"The engine crashed on {', '.join(said)}: not chosen, and not measured; see the decision's reasons."
    )


def _chosen_row(decision: Decision, col: str) -> LadderPoint | None:
    """The table row of the chosen arm at the chosen concurrency (else that arm's best)."""
    arm = (decision.arm or Arm(0)).name
    level = decision.measured_at_concurrency
    mine = [r for r in decision.table if r.arm == arm and is_number(r.value(col))]
    at_level = [r for r in mine if r.concurrency == level]
    return at_level[0] if at_level else max(mine, key=lambda r: float(r.value(col)), default=None)


def interval_words(row: LadderPoint) -> str:
    """The interval of a measured level, as the sweep measured it: '90% interval 180-310 over 3
    repetitions', or 'measured once: no interval'."""
    lo, hi, n = row.measured_lo, row.measured_hi, row.repetitions or 1
    if n < 2 or not (is_number(lo) and is_number(hi)):
        return "measured once: no interval"
    return f"{100 * INTERVAL:.0f}% interval {number(float(lo), 0)}-{number(float(hi), 0)}, {n} repetitions"


def _measured_row(decision: Decision | None) -> LadderPoint | None:
    if decision is None or decision.decided_by != "measured":
        return None
    return _chosen_row(decision, "measured_tok_s")


def measured_level(decision: Decision | None, name: str = "MTP") -> str | None:
    """What the sweep measured for the chosen arm where stage 3 runs it, as a baseline for the run's
    own tokens/s: '141 tok/s (90% interval 120-160, 3 repetitions) for plain decoding at
    concurrency 16'; None when nothing was measured."""
    row = _measured_row(decision)
    if row is None:
        return None
    label = arm_label((decision.arm or Arm(0)).k, name)
    figure = f"{number(float(row.measured_tok_s), 0)} tok/s ({interval_words(row)})"
    return f"{figure} for {label} at concurrency {int(row.concurrency)}"


def against_sweep(decision: Decision | None, tok_s: float | None, name: str = "MTP") -> str | None:
    """The run's own tokens/s against the interval the sweep measured for its arm, without restating
    that figure (the decision's answer beside it says it): 'below the sweep's 90% interval for plain
    decoding at 16 (the decision)'; None when nothing was measured."""
    row = _measured_row(decision)
    if row is None or not is_number(tok_s):
        return None
    label = f"{arm_label((decision.arm or Arm(0)).k, name)} at {int(row.concurrency)}"
    lo, hi = row.measured_lo, row.measured_hi
    if (row.repetitions or 1) < 2 or not (is_number(lo) and is_number(hi)):
        lo = hi = float(row.measured_tok_s)
        where = "below" if tok_s < lo else "above" if tok_s > hi else "at"
        return f"{where} the sweep's one measurement of {label} (the decision)"
    where = "below" if tok_s < lo else "above" if tok_s > hi else "within"
    return f"{where} the sweep's {100 * INTERVAL:.0f}% interval for {label} (the decision)"


def _lead(win: LadderPoint, other: LadderPoint | None, col: str, label: str, name: str, runs: bool) -> str:
    """How far the chosen arm is ahead of the best arm of the other kind, or why it is kept if behind
    (`runs`: whether speculation can run with this engine and model)."""
    if other is None:
        return ""
    other_label = arm_label(other.spec_k, name)
    theirs = f"{number(float(other.value(col)), 0)} tok/s at concurrency {int(other.concurrency)}"
    ratio = float(win.value(col)) / float(other.value(col))
    if ratio >= 1:
        return f"That is {100 * (ratio - 1):.0f}% more than the best of {other_label} ({theirs})."
    ahead = f"{other_label} would give {100 * (1 / ratio - 1):.0f}% more ({theirs})"
    if not runs and other.spec_k > 0:
        return f"{ahead}, but it cannot run here."
    return (
        f"{ahead}, but {label} is kept: the margin is within the run-to-run noise or the cost model's "
        "error (see the decision page)."
    )


def decision_answer(decision: Decision | None, name: str = "MTP", worth: str | None = None) -> Answer:
    """The chosen arm, measured or predicted, and its lead over the best arm of the other kind;
    why speculation was not measured, and what MTP would be worth (`worth`) when given."""
    arm = decision.arm if decision is not None else None
    if decision is None or arm is None:
        why = "decision.json is missing: stage 2 has not run (`kit decide PARAMS` writes it)."
        return Answer("Decision", "not decided", why, "missing")
    measured = decision.by_measurement
    col = "measured_tok_s" if measured else "predicted_tok_s"
    k = arm.k
    label = arm_label(k, name)
    win = _chosen_row(decision, col)
    text = ""
    if win:
        how = "Measured by the sweep" if measured else "Predicted, nothing measured"
        tok_s = number(float(win.value(col)), 0)
        spread = f" ({interval_words(win)})" if measured else ""
        text = f"{how}: {tok_s} output tok/s at concurrency {int(win.concurrency)}{spread}. "
        runs = not decision.speculation_unavailable_reason
        text += _lead(win, _best(decision.table, col, k == 0), col, label, name, runs)
    crashed = _crashed(decision)
    text = " ".join(t for t in (text.strip(), _not_measured(decision), crashed, worth) if t)
    headline = f"{label} ({decision.decided_by if measured else 'predicted only'})"
    return Answer("Decision", headline, text, "ok" if measured and not crashed else "warn")
