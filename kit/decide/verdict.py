"""The decision in sentences, for notebook 02 and the report's index: the chosen arm, measured or
predicted, its lead over the best arm of the other kind, why speculation was not measured."""

from __future__ import annotations

from typing import Any

from kit.decide.decision import decision_arm
from kit.display import Answer, is_number, number
from kit.engines.arms import Arm


def arm_label(spec_k: int, name: str) -> str:
    """`plain decoding` or `MTP k=2` (name: the speculative algorithm's label)."""
    return "plain decoding" if spec_k == 0 else f"{name} k={spec_k}"


def _best(rows: list[dict[str, Any]], col: str, spec: bool) -> dict[str, Any] | None:
    rows = [r for r in rows if (int(r.get("spec_k") or 0) > 0) == spec and is_number(r.get(col))]
    return max(rows, key=lambda r: float(r[col])) if rows else None


def _not_measured(decision: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    """Why no speculative arm was measured, or None when one was."""
    spec = [r for r in rows if int(r.get("spec_k") or 0) > 0]
    if not spec or any(r.get("status") == "ok" and is_number(r.get("measured_tok_s")) for r in spec):
        return None
    why = decision.get("speculation_unavailable_reason")
    if not why:
        failed = [str(r.get("reason") or "").splitlines() for r in spec if r.get("reason")]
        why = failed[0][0] if failed and failed[0] else "the sweep did not run its arms"
    return f"Speculation could not be measured: {why}."


def _chosen_row(decision: dict[str, Any], rows: list[dict[str, Any]], col: str) -> dict[str, Any] | None:
    """The table row of the chosen arm at the chosen concurrency (else that arm's best)."""
    arm = (decision_arm(decision) or Arm(0)).name
    settings = decision.get("engine_settings") or {}
    level = settings.get("measured_at_concurrency") or settings.get("client_concurrency")  # older files
    mine = [r for r in rows if r.get("arm") == arm and is_number(r.get(col))]
    at_level = [r for r in mine if r.get("concurrency") == level]
    return at_level[0] if at_level else max(mine, key=lambda r: float(r[col]), default=None)


def _lead(
    win: dict[str, Any], other: dict[str, Any] | None, col: str, label: str, name: str, runs: bool
) -> str:
    """How far the chosen arm is ahead of the best arm of the other kind, or why it is kept if behind
    (`runs`: whether speculation can run with this engine and model)."""
    if other is None:
        return ""
    other_label = arm_label(int(other["spec_k"]), name)
    theirs = f"{number(float(other[col]), 0)} tok/s at concurrency {int(other['concurrency'])}"
    ratio = float(win[col]) / float(other[col])
    if ratio >= 1:
        return f"That is {100 * (ratio - 1):.0f}% more than the best of {other_label} ({theirs})."
    ahead = f"{other_label} would give {100 * (1 / ratio - 1):.0f}% more ({theirs})"
    if not runs and int(other["spec_k"]) > 0:
        return f"{ahead}, but it cannot run here."
    return (
        f"{ahead}, but {label} is kept: the margin is within the run-to-run noise or the cost model's "
        "error (see the decision page)."
    )


def decision_answer(decision: dict[str, Any] | None, name: str = "MTP", worth: str | None = None) -> Answer:
    """The chosen arm, measured or predicted, and its lead over the best arm of the other kind;
    why speculation was not measured, and what MTP would be worth (`worth`) when given."""
    arm = decision_arm(decision)
    if arm is None:
        why = "decision.json is missing: stage 2 has not run (`kit decide PARAMS` writes it)."
        return Answer("Decision", "not decided", why, "missing")
    rows = decision.get("table") or []
    measured = decision.get("decided_by") == "measured"
    col = "measured_tok_s" if measured else "predicted_tok_s"
    k = arm.k
    label = arm_label(k, name)
    win = _chosen_row(decision, rows, col)
    text = ""
    if win:
        how = "Measured by the sweep" if measured else "Predicted, nothing measured"
        text = f"{how}: {number(float(win[col]), 0)} output tok/s at concurrency {int(win['concurrency'])}. "
        runs = not decision.get("speculation_unavailable_reason")
        text += _lead(win, _best(rows, col, k == 0), col, label, name, runs)
    text = " ".join(t for t in (text.strip(), _not_measured(decision, rows), worth) if t)
    headline = f"{label} ({'measured' if measured else 'predicted only'})"
    return Answer("Decision", headline, text, "ok" if measured else "warn")
