"""Racing: after each round of the sweep, the (arm, level) pairs its measurements already settle are
not measured again, so the rounds that remain go to the close calls.

At each level the arm with the highest figure so far (the median of its repetitions, as the
decision reads it: kit.decide.measure.tables.summarise) leads; another arm there is ruled out when the
leader's lead over it counts by the decision's own noise rule (kit.decide.measure.noise.Lead.counts: paired
by round, over three rounds its interval excludes 1 and it exceeds the pooled noise; over fewer, it
exceeds the noise assumed of arms measured once, ±10% each). A level where every other arm is ruled
out has nothing left to compare, so its leader is not measured there again either; an arm with no
level left is not started again (one server at a time: a start is most of a round's cost on a big
model). A lead that rests on a disturbed measurement never counts (kit.decide.measure.tables.arm_lead), so a
disturbed level stays open.

The engine's own adaptive arm (`decide.adaptive_k`) never leads a level: the decision never chooses
it, and an arm ruled out only against it would leave the decision's own comparison there unmeasured.
It is ruled out where its comparison with the level's leader counts, either way.

    closed = settle(runs, adaptive={"adaptive_k3"})   # after a round: what not to measure again
    left, skipped = race(next_round_slots, closed)    # the slots that still decide something
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd

from kit.columns import OUTPUT_TOK_S
from kit.decide.measure.tables import arm_lead, summarise

S = TypeVar("S")


@dataclass(frozen=True)
class Settled:
    """An (arm, level) the sweep measures no more: `leader` out-measures it outside the noise there
    (`arm == leader`: every other arm at the level is settled, nothing is left to compare)."""

    arm: str
    concurrency: int
    leader: str
    ratio: float
    """The leader's figure over the arm's (1.0 for the leader itself)."""
    rounds: int
    """Rounds that measured both when it was settled."""

    def sentence(self) -> str:
        if self.arm == self.leader:
            return f"{self.arm} at {self.concurrency}: every other arm there was ruled out"
        return (
            f"{self.arm} at {self.concurrency}: {self.leader} measured {self.ratio:.2f}x of it over "
            f"{self.rounds} round(s), outside the noise"
        )


def settle(runs: pd.DataFrame, adaptive: Iterable[str] = ()) -> list[Settled]:
    """The (arm, level) pairs the measurements so far settle (module docstring); `runs` are the
    sweep's measurements as sweep_runs.parquet keeps them, `adaptive` names the engine's own
    adaptive arms."""
    adaptive = set(adaptive)
    if runs.empty:
        return []
    table = summarise(runs)
    table = table[(table.status == "ok") & table[OUTPUT_TOK_S].notna()]
    out: list[Settled] = []
    for c, g in table.groupby("concurrency", sort=True):
        core = g[~g.arm.isin(adaptive)]
        if core.empty:
            continue
        level = int(c)  # type: ignore[call-overload]
        leader = str(core.loc[core[OUTPUT_TOK_S].astype(float).idxmax(), "arm"])
        here = []
        for arm in g.arm.astype(str):
            if arm == leader:
                continue
            lead = arm_lead(runs, leader, level, arm, level)
            if lead.counts:
                here.append(Settled(arm, level, leader, lead.ratio.median, lead.ratio.n))
        out += here
        if len(here) == len(g) - 1 and len(g) > 1:
            out.append(Settled(leader, level, leader, 1.0, min(s.rounds for s in here)))
    return out


def race(slots: Iterable[S], closed: Iterable[Settled]) -> tuple[list[S], list[S]]:
    """(the slots still to measure, those skipped): a sweep slot of a settled (arm, level) is
    skipped; the drift check's start and end are always kept. A slot is anything with `phase`,
    `arm.name` and `concurrency` (kit.decide.measure.servers.Slot)."""
    done = {(s.arm, s.concurrency) for s in closed}
    keep: list[S] = []
    skip: list[S] = []
    for slot in slots:
        key = (slot.arm.name, slot.concurrency)  # type: ignore[attr-defined]
        (skip if slot.phase == "sweep" and key in done else keep).append(slot)  # type: ignore[attr-defined]
    return keep, skip


def replay(runs: pd.DataFrame, adaptive: Iterable[str] = ()) -> pd.DataFrame:
    """A recorded sweep (sweep_runs.parquet) as racing would have measured it: round by round, the
    measurements of every (arm, level) settled by the rounds before are dropped (the drift check's
    start and end are kept). The decision read off the result is the one racing reaches; the rows
    dropped are the measurements it saves (docs/decision.md, benchmarks/racing_replay.py)."""
    adaptive = list(adaptive)
    sweep = runs[runs.phase == "sweep"]
    kept = runs[runs.phase != "sweep"]
    closed: set[tuple[str, int]] = set()
    for r in sorted(int(x) for x in sweep["round"].dropna().unique()):
        here = sweep[sweep["round"] == r]
        here = here[[(str(a), int(c)) not in closed for a, c in zip(here.arm, here.concurrency, strict=True)]]
        kept = pd.concat([kept, here], ignore_index=True)
        closed |= {(s.arm, s.concurrency) for s in settle(kept, adaptive)}
    return kept
