"""The speculative arm for a batch job's tail: where the decision says speculation wins when few
requests remain, and up to how many.

    arm, why = tail_arm(decision)      # a Decision: folder.read_decision()
    arm.k, arm.crossover, arm.evidence # draft length, requests per server below which spec wins

At full load plain decoding usually wins (the decision's choice); in the tail, once fewer requests
remain than the crossover, the same decision's table says speculation is faster. Only a win
outside the decision's own noise counts: at a concurrency the sweep measured both arms, the
speculative arm's interval must lie above plain's (`measured_lo` > plain's `measured_hi`); where
it did not measure them, the predicted ratio must exceed 1 + the cost model's error
(`costmodel.MODEL_ERROR`). A measured level without such a win is no win, whatever the prediction.
The crossover of an arm is the largest concurrency (requests per server, as the sweep sent them)
at which it wins; the arm with the largest crossover is the tail's (ties: the larger ratio at the
lowest concurrency).

The tail in the other stages: stage 3 switches to this arm when the work left falls below its
crossover (kit/generate/tailswitch.py); stage 4 measures the tail a run had and what speculation
would have saved there (kit/analyse/tail.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from kit.artifacts import Decision, LadderPoint
from kit.decide.costmodel import MODEL_ERROR
from kit.display import finite


class TailArmFigures(TypedDict):
    """A `TailArm` as summary.json's tail speculation keeps it, in its `switch_rule` (kit.analyse.tail)."""

    k: int
    crossover: int
    evidence: str
    ratio: float


@dataclass(frozen=True)
class TailArm:
    k: int
    crossover: int
    """Requests per server at or below which this arm wins."""
    evidence: str
    """'measured' when the win at the crossover was measured outside the noise, else 'predicted'."""
    ratio: float
    """Speculative / plain tokens/s at the lowest concurrency of the table."""

    def sentence(self) -> str:
        return (
            f"speculation k={self.k} wins at {self.crossover} requests per server or fewer "
            f"({self.evidence}, x{self.ratio:.2f} at the lowest level)"
        )

    def as_dict(self) -> TailArmFigures:
        return TailArmFigures(k=self.k, crossover=self.crossover, evidence=self.evidence, ratio=self.ratio)


def _wins(spec: LadderPoint, plain: LadderPoint) -> tuple[bool, str, float | None]:
    """(wins outside the noise, 'measured' or 'predicted', predicted ratio) at one concurrency."""
    s_lo, p_hi = finite(spec.measured_lo), finite(plain.measured_hi)
    ratio = None
    s_pred, p_pred = finite(spec.predicted_tok_s), finite(plain.predicted_tok_s)
    if s_pred is not None and p_pred:
        ratio = s_pred / p_pred
    if s_lo is not None and p_hi is not None:
        return s_lo > p_hi, "measured", ratio
    feasible = spec.feasible is not False
    return bool(feasible and ratio is not None and ratio > 1 + MODEL_ERROR), "predicted", ratio


def tail_arm(decision: Decision | None) -> tuple[TailArm | None, str]:
    """The tail's speculative arm from decision.json's table, or None and why not."""
    if decision is None:
        return None, "no decision.json: run stage 2 (kit decide) first"
    if decision.speculation_available is False:
        why = decision.speculation_unavailable_reason or "speculation is not available"
        return None, f"the decision found no speculative arm to run ({why})"
    rows = decision.table
    plain = {int(r.concurrency): r for r in rows if int(r.spec_k or 0) == 0}
    # an arm whose sampled answers differed from plain's (kit.decide.checks.answers): never run
    set_aside = {int(r.spec_k or 0) for r in rows if r.status == "answers_differ"}
    best: TailArm | None = None
    for k in sorted({int(r.spec_k or 0) for r in rows} - {0} - set_aside):
        levels = sorted(
            ((int(r.concurrency), r) for r in rows if int(r.spec_k or 0) == k), key=lambda x: x[0]
        )
        wins = [(c, *_wins(r, plain[c])) for c, r in levels if c in plain]
        won = [(c, how) for c, ok, how, _ in wins if ok]
        if not won:
            continue
        crossover, how = max(won)
        ratio = next((r for _, _, _, r in wins if r is not None), 1.0)
        arm = TailArm(k, crossover, how, round(float(ratio), 3))
        if best is None or (arm.crossover, arm.ratio) > (best.crossover, best.ratio):
            best = arm
    if best is None:
        return None, (
            "the decision shows no concurrency where speculation wins outside its noise "
            f"(measured intervals apart, or predicted by more than the model's ±{MODEL_ERROR:.0%})"
        )
    return best, best.sentence()
