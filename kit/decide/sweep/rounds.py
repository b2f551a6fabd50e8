"""The sweep's rounds: the drift check's start, then each round of interleaved measurements, the
rounds after the first racing (only the (arm, level) pairs still open are measured: kit.decide.sweep.limits)
while the time budget allows (kit.decide.sweep.limits: the user's, else a share of the job, sized after
the first round). What was left out, and why, and what the sweep cost (decision.json's `sweep_cost`)
are kept here.

    race = Race(setup, arms, done, sweep_log)
    new = race.rounds(plan, measured, servers, bar, journal)   # every measurement made
    cost = race.cost(wall_s, measurements, rounds, servers, journal.spent)
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kit.artifacts import SkippedMeasurement, SweepCost
from kit.decide.measure.journal import SlotKey, Spent, SweepJournal
from kit.decide.measure.servers import ArmServers, Slot
from kit.decide.measure.slots import SweepLog, run_slots, slot_of
from kit.decide.measure.tables import SweepRow
from kit.decide.sweep.limits import (
    Settled,
    SweepBudget,
    params_budget,
    race,
    round_budget,
    runs_frame,
    settle,
)
from kit.decide.sweep.setup import SweepSetup
from kit.engines.settings import Arm

log = logging.getLogger(__name__)


class Race:
    """The rounds of one sweep, what racing left out and the budget they ran under."""

    def __init__(self, setup: SweepSetup, arms: list[Arm], done: set[SlotKey], sweep_log: SweepLog) -> None:
        self.setup, self.arms, self.done, self.log = setup, arms, done, sweep_log
        self.adaptive = {a.name for a in arms if a.adaptive}
        self.t0 = time.monotonic()
        self.budget: SweepBudget = params_budget(setup.params) or SweepBudget(None, "")
        """The user's, or (empty rule) sized after the first round from the job (`round_budget`)."""
        self.skipped: list[tuple[Slot, Settled]] = []

    def rounds(
        self,
        plan: list[Slot],
        measured: list[SweepRow],
        servers: ArmServers,
        bar: Any,
        journal: SweepJournal,
    ) -> list[SweepRow]:
        """Measure the drift check's start and the rounds of `plan` that are still open and fit the
        budget (`measured`: rows kept from a stopped run of this sweep); the measurements made."""
        d = self.setup.params.decide
        prompts = self.setup.prompts
        todo = [s for s in plan if s.phase == "start" and slot_of(s) not in self.done]
        new = run_slots(todo, servers, prompts, bar, self.log, self.t0, journal)
        end = [s for s in plan if s.phase == "end"]
        for r in range(d.repetitions):
            slots = [s for s in plan if s.phase == "sweep" and s.round == r]
            if r > 0:
                if not self.budget.rule:
                    self.budget = round_budget(self.setup, measured + new, self.adaptive)
                    self.log.line(f"time budget: {self.budget.rule}")
                slots, skipped = self.drop_settled(slots, measured + new)
                bar.total -= len(skipped)
                if skipped:
                    self.log.line(f"round {r}: {len(skipped)} measurement(s) already settled, left out")
            todo = [s for s in slots if slot_of(s) not in self.done]
            if not slots:
                self.log.line(f"round {r}: nothing left open")
                continue
            stop = f"stopping after {r} round(s)"
            if (
                r > 0
                and todo
                and not fits(new, self.budget.seconds, self.t0, todo, end, servers, self.log, stop)
            ):
                bar.total -= len(todo) + len([s for s in plan if s.phase == "sweep" and s.round > r])
                log.warning("the sweep's time budget (%s) allows %d round(s)", self.budget.rule, r)
                break
            new += run_slots(todo, servers, prompts, bar, self.log, self.t0, journal)
        return new

    def fits(
        self, rows: list[SweepRow], slots: list[Slot], end: list[Slot], servers: ArmServers, what: str
    ) -> bool:
        """Whether measuring `slots`, then the end check, fits in the budget at the pace so far
        (kit.decide.sweep.limits.fits)."""
        return fits(rows, self.budget.seconds, self.t0, slots, end, servers, self.log, what)

    def drop_settled(self, slots: list[Slot], rows: list[SweepRow]) -> tuple[list[Slot], list[Slot]]:
        """(the slots still open, those racing leaves out) after the measurements `rows`; every slot
        is open when `decide.racing` is off."""
        if not self.setup.params.decide.racing or not slots:
            return slots, []
        closed = settle(runs_frame(rows), self.adaptive)
        keep, skip = race(slots, closed)
        why = {(s.arm, s.concurrency): s for s in closed}
        self.skipped += [(s, why[(s.arm.name, s.concurrency)]) for s in skip]
        return keep, skip

    def spent(self, measurements: int, servers: ArmServers) -> Spent:
        """What this run of the sweep has cost so far (a stopped run's line in the journal)."""
        return Spent(
            wall_s=round(time.monotonic() - self.t0, 1),
            server_starts=servers.launched,
            server_start_s=round(sum(servers.start_s), 1),
            measurements=measurements,
        )

    def cost(
        self, wall_s: float, measurements: int, rounds: int, servers: ArmServers, before: list[Spent]
    ) -> SweepCost:
        """decision.json's `sweep_cost`: this run of the sweep and the stopped runs `before` it
        (`rounds`: the planned rounds that measured anything, over every run)."""
        parts: dict[str, float] = {}
        for start in servers.start_parts:
            for name, seconds in start.items():
                parts[name] = round(parts.get(name, 0.0) + seconds, 1)
        return SweepCost(
            wall_s=round(wall_s + sum(b["wall_s"] for b in before), 1),
            server_starts=servers.launched + sum(b["server_starts"] for b in before),
            server_start_s=round(sum(servers.start_s) + sum(b["server_start_s"] for b in before), 1),
            server_start_parts=parts,
            measurements=measurements + sum(b["measurements"] for b in before),
            skipped=len(self.skipped),
            skipped_measurements=[
                SkippedMeasurement(
                    arm=slot.arm.name, concurrency=slot.concurrency, round=slot.round, why=s.sentence()
                )
                for slot, s in self.skipped
            ],
            rounds=rounds,
            budget_s=None if self.budget.seconds is None else round(self.budget.seconds, 1),
            budget_rule=self.budget.rule or "no budget",
            runs=1 + len(before),
            compile_cache=str(servers.compile_cache) if servers.compile_cache else None,
        )


def fits(
    rows: list[SweepRow],
    budget: float | None,
    t0: float,
    slots: list[Slot],
    end: list[Slot],
    servers: ArmServers,
    sweep_log: SweepLog,
    what: str,
) -> bool:
    """Whether measuring `slots`, then the end check, fits in the time budget, at the sweep's pace so
    far: its levels' mean time, plus a server start (their mean so far) for each change of arm when
    the servers run one at a time (`what`: the log's word on what is left out when it does not
    fit). On the H200 a Qwen3-32B server took ~95 s to start and a level
    ~11 s: two disturbed levels cost three restarts, not two levels' time; and three servers side
    by side took 170 s to come up, once, before rounds of ~110 s (the first start is paid once)."""
    if budget is None or not rows:
        return True
    elapsed = time.monotonic() - t0
    starting = sum(servers.start_s)
    per_level = max(elapsed - starting, 0.0) / len(rows)
    per_start = starting / len(servers.start_s) if servers.start_s else 0.0
    more = (len(slots) + len(end)) * per_level + servers.starts_for(slots + end) * per_start
    if elapsed + more <= budget:
        return True
    spent = f"about {more:.0f} s more with the end check, {elapsed:.0f} s spent"
    sweep_log.line(f"time budget {budget:g} s: {what} ({spent})")
    return False
