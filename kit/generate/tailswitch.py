"""Speculation for the tail (`generate.tail_speculation`): when the requests left per replica fall
below the decision's crossover, the replicas are restarted one at a time with the speculative arm.

    plan, note = tail_plan(params, decision, base)   # None and why not, or what to switch to
    switch = TailSwitch(plan, drain_s)               # the loop calls switch.due(...) every sample

A replica that switches first stops taking requests (the pool skips it) and waits up to `drain_s`
for the requests it has out to finish; requests still out then are cut by the restart and sent
again (the pool's `recover`: a restart is never the request's fault), so no row is lost or made
twice. The rows it makes afterwards carry the speculative engine settings in their `engine`
column. Only a decision with a win outside its noise switches (kit.decide.choose.tailarm).
Stage 4 measures the tail the run had (kit/analyse/tail.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Required, TypedDict

from kit.artifacts import Decision
from kit.artifacts.manifest_sections import RunIdentity
from kit.decide.choose.tailarm import TailArm, tail_arm
from kit.engines.arms import Arm
from kit.engines.flavors import flavor
from kit.engines.settings import speculative_params
from kit.params import RunParams, SpeculativeParams

if TYPE_CHECKING:
    from kit.engines.flavors.base import SpeculativeJson

log = logging.getLogger(__name__)


class SwitchReport(TypedDict):
    """What a running switch did (`TailSwitch.report`), merged into its plan's note by the run."""

    switched: bool
    replicas_switched: list[str]
    left_at_switch: int | None
    started_at_s: float | None
    finished_at_s: float | None
    requests_cut_and_resent: int
    skipped: str | None


class TailPlanNote(TypedDict, total=False):
    """manifest.json's `tail_speculation` as `tail_plan` writes it (kit.artifacts.TailNote reads it):
    whether the tail switches and why; where it does, the arm's figures (kit.decide.choose.tailarm
    TailArmFigures' keys) and the speculative section it switches to; once the switch ran, the run
    adds its SwitchReport."""

    enabled: Required[bool]
    why: str | None
    k: int
    crossover: int
    evidence: str
    ratio: float
    speculative: SpeculativeJson


@dataclass(frozen=True)
class TailPlan:
    arm: TailArm
    params: RunParams
    """The run's params with the speculative arm (replica_params applies per replica)."""


def tail_plan(
    params: RunParams, decision: Decision | None, base: SpeculativeParams | None
) -> tuple[TailPlan | None, TailPlanNote]:
    """What the tail switches to, or None; and the manifest's note saying so and why."""
    if not params.generate.tail_speculation:
        return None, {"enabled": False, "why": "generate.tail_speculation is off"}
    eng = params.engine
    fl = flavor(eng.flavor)
    if not fl.started:
        why = f"the kit does not start the {fl.name} server, so it cannot restart it"
        return None, {"enabled": False, "why": why}
    if fl.no_speculation:
        return None, {"enabled": False, "why": fl.no_speculation}
    if eng.speculative.algorithm:
        return None, {"enabled": False, "why": "the run already decodes speculatively"}
    arm, why = tail_arm(decision)
    if arm is None:
        return None, {"enabled": False, "why": why}
    base = base or SpeculativeParams()
    spec = speculative_params(Arm(arm.k, base.algorithm), fl, base)
    switched = params.model_copy(update={"engine": eng.model_copy(update={"speculative": spec})})
    note: TailPlanNote = {
        "enabled": True,
        "why": why,
        **arm.as_dict(),
        "speculative": spec.model_dump(exclude_none=True),
    }
    return TailPlan(arm, switched), note


@dataclass
class TailSwitch:
    """The switch in a running loop: when it is due, its progress, and what it did (`report`)."""

    plan: TailPlan
    drain_s: float
    engine_json: str
    """The `engine` column of rows made by a switched replica."""
    replica_params: Callable[[RunParams, int], RunParams]
    """Params of replica i (its GPUs) from the run's: kit.generate.session.replica_params."""
    started_at_s: float | None = None
    finished_at_s: float | None = None
    left_at_switch: int | None = None
    switched: list[str] = field(default_factory=list)
    skipped: str | None = None
    restarting: bool = False
    cut: int = 0
    """Requests still out on a replica when it restarted (sent again)."""
    _t0: float = field(default_factory=time.monotonic)
    _task: asyncio.Task | None = None

    def due(self, left: int, replicas: int) -> bool:
        """Whether to switch now: `left` requests (unsent and in flight) are fewer than the crossover
        per replica, and some remain."""
        return self._task is None and 0 < left <= self.plan.arm.crossover * max(replicas, 1)

    def start(self, pool: Any, left: int, still_left: Callable[[], int]) -> None:
        """Switch the pool's replicas one at a time, in the background; `still_left()` says how many
        requests remain (a replica whose drain ended the job is not restarted)."""
        self.left_at_switch = left
        self.started_at_s = time.monotonic() - self._t0
        log.warning(
            "the tail: %d requests left, below the crossover of %d per replica: switching %d replica(s) "
            "to %s one at a time",
            left,
            self.plan.arm.crossover,
            len(pool.replicas),
            self.plan.arm.sentence(),
        )
        self._task = asyncio.create_task(self._switch_all(pool, still_left))

    async def _switch_all(self, pool: Any, still_left: Callable[[], int]) -> None:
        for i, replica in enumerate(pool.replicas):
            if not await self._switch(replica, self.replica_params(self.plan.params, i), still_left):
                self.skipped = "the job ended while a replica drained: nothing left to switch for"
                break
        self.finished_at_s = time.monotonic() - self._t0

    async def _switch(self, replica: Any, params: RunParams, still_left: Callable[[], int]) -> bool:
        async with replica.lock:
            replica.ready.clear()  # the pool gives it no new request
            deadline = time.monotonic() + self.drain_s
            while replica.outstanding and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            if not still_left():
                replica.ready.set()
                return False
            self.cut += replica.outstanding
            replica.server.params = params
            self.restarting = True
            try:
                await asyncio.to_thread(replica.server.restart)
            finally:
                self.restarting = False
            replica.engine_json = self.engine_json
            replica.generation += 1  # requests cut by the restart see it and are sent again
            await replica.open()
        self.switched.append(replica.name)
        log.warning("replica '%s' now decodes speculatively (k=%d)", replica.name, self.plan.arm.k)
        return True

    async def stop(self) -> None:
        """At the run's end: a switch still draining is cancelled; one restarting a server is waited
        for, so no server starts after the run has stopped its servers."""
        task = self._task
        if task is None or task.done():
            return
        if not self.restarting:
            task.cancel()
        await asyncio.wait([task])
        if task.cancelled():
            self.skipped = self.skipped or (
                "the job ended while a replica drained (generate.tail_drain_s): its last requests "
                "finished on the arm it had"
            )
        else:
            task.exception()  # retrieved: a failed restart is logged by the run, not again at exit

    def report(self) -> SwitchReport:
        return {
            "switched": bool(self.switched),
            "replicas_switched": list(self.switched),
            "left_at_switch": self.left_at_switch,
            "started_at_s": None if self.started_at_s is None else round(self.started_at_s, 2),
            "finished_at_s": None if self.finished_at_s is None else round(self.finished_at_s, 2),
            "requests_cut_and_resent": self.cut,
            "skipped": self.skipped,
        }


def switched_identity(identity: RunIdentity, plan: TailPlan) -> str:
    """The `engine` JSON of rows a switched replica makes: the run's, with its speculative section."""
    spec = plan.params.engine.speculative.model_dump(mode="json", exclude_none=True)
    return json.dumps({**identity, "speculative": spec or None}, sort_keys=True)
