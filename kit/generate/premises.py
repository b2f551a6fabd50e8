"""Stage 2's premises, re-checked live in stage 3: does the job run as the sweep measured it?

Stage 2 decides on a sweep of the real engine (kit.decide); stage 3 then runs for hours on other
prompts, other lengths, other sampling. `PremiseCheck` reads each timeline sample (the
`TimelineSample` `kit.generate.metrics.Timeline` records) beside decision.json and says, once per
premise, when the job contradicts what the decision rests on:

- accept length: the engine's (speculative arm) within the sweep's range for that arm;
- capacity: the engine kept at the capacity the run uses while work remains beyond it;
- throughput: tokens/s at steady state within the sweep's interval at the nearest level.

Samples are split into warm-up (the first `WARMUP_S` seconds and `WARMUP_SAMPLES` samples of a
session, or after a server restart where the sample says so), the tail (fewer rows left than the
engine runs at once: it drains) and steady state in between; only steady samples are judged.
`report()` is for the manifest; `check_timeline` re-checks a finished run's saved timeline. The
premises themselves, and the windows they judge, are in kit.generate.premise_kinds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.artifacts import Decision
from kit.artifacts.manifest_sections import PremiseReport, PremiseSamples
from kit.display import finite
from kit.engines.arms import arm_label, arm_name, resolve_algorithm
from kit.engines.flavors import flavor
from kit.generate.premise_kinds import AcceptPremise, CapacityPremise, Phase, Premise, ThroughputPremise
from kit.generate.timeline_sample import SESSION, T_S, TimelineSample

if TYPE_CHECKING:
    import pandas as pd

    from kit.engines.capacity import Capacity
    from kit.params import RunParams

WARMUP_S = 30.0
"""Seconds of a session (or after a restart) not judged: the engine admits its first requests."""
WARMUP_SAMPLES = 3
"""... and at least this many samples, whatever the sampling interval."""


@dataclass
class PremiseCheck:
    """Stage 2's premises checked against stage 3's timeline, one sample at a time.

    `decision`: decision.json's content (None or partial: what cannot be checked says why);
    `capacity`: requests the run's engines hold running at once (`Capacity.total`); `spec_k`: the
    arm run (0 plain, None a speculative k the engine chose); `total`: rows of this session (tells
    the tail); `replicas`: servers the run spreads over (the sweep measured one); `accept_length_ranks`:
    how many engines' accept-length gauges a sample adds up (SGLang: dp_size x replicas; vLLM: 1).
    """

    decision: Decision | None = field(repr=False)
    capacity: int | None
    spec_k: int | None
    total: int | None = None
    replicas: int = 1
    algorithm: str | None = None
    capacity_source: str = ""
    accept_length_ranks: int = 1
    warnings: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        decided = self.decision.arm if self.decision is not None else None
        name = self.algorithm or (decided.algorithm if decided else None)
        spec = resolve_algorithm(name, False).label if name or self.spec_k else ""
        self.label = arm_label(self.spec_k, spec) if self.spec_k is not None else f"{spec} (default k)"
        self.accept = AcceptPremise(self.decision, self.spec_k, self.label, self.accept_length_ranks)
        self.running = CapacityPremise(self.capacity, self.capacity_source)
        self.throughput = ThroughputPremise(
            self.decision, self.spec_k, self.label, self.capacity, self.replicas
        )
        self._session: Any = None
        self._start, self._n, self._restarts, self._most_in_flight = 0.0, 0, None, 0.0
        self.phases: PremiseSamples = {"samples": 0, "warm_up": 0, "tail": 0, "steady": 0}

    @classmethod
    def for_run(
        cls, decision: Decision | None, params: RunParams, capacity: Capacity, total: int
    ) -> PremiseCheck:
        """The check of a stage 3 session: its arm, replicas and gauges from the run's params."""
        eng = params.engine
        spec = eng.speculative
        k = (spec.num_steps if spec.num_steps else None) if spec.algorithm else 0
        ranks = flavor(eng.flavor).accept_gauge_ranks(eng)
        return cls(
            decision,
            capacity.total,
            k,
            total=total,
            replicas=eng.replicas,
            algorithm=spec.algorithm,
            capacity_source=capacity.source,
            accept_length_ranks=ranks,
        )

    @property
    def premises(self) -> list[Premise]:
        return [self.accept, self.running, self.throughput]

    @property
    def unchecked(self) -> list[str]:
        """Sentences for the premises that cannot be checked at all in this run: debug lines (a
        healthy run on an engine without speculation has three; the manifest keeps each why_not)."""
        return [f"premise {p.name} is not checked because {p.why_not}" for p in self.premises if p.why_not]

    def observe(
        self, s: TimelineSample, servers_restarting: float | None = None, server_restarts: float | None = None
    ) -> list[str]:
        """Judge one timeline sample; the warnings it raises for the first time in this run.
        `servers_restarting`: replicas not ready now; `server_restarts`: restarts so far (the loop's)."""
        if finite(s.t_s) is None:
            return []
        self._enter(s, finite(servers_restarting), finite(server_restarts))
        phase = self._phase(s)
        self.phases["samples"] += 1
        self.phases["warm_up" if phase.warm else "tail" if phase.tail else "steady"] += 1
        new = [w for w in (p.observe(s, phase) for p in self.premises) if w]
        self.warnings += new
        return new

    def _enter(self, s: TimelineSample, restarting: float | None, restarts: float | None) -> None:
        """A new session, or a server restarting (`restarting`, `restarts`: see observe): warm up
        again once it is back."""
        fresh = s.session != self._session or self._n == 0
        down = (restarting or 0) > 0
        down = down or (restarts is not None and self._restarts is not None and restarts > self._restarts)
        if fresh or down:
            self._session, self._start, self._n = s.session, float(s.t_s), 0
            if fresh:
                self._most_in_flight = 0.0
            for p in self.premises:
                p.reset()
        self._restarts = restarts if restarts is not None else self._restarts
        self._n += 1
        self._most_in_flight = max(self._most_in_flight, finite(s.in_flight) or 0.0)

    def _phase(self, s: TimelineSample) -> Phase:
        warm = s.t_s - self._start < WARMUP_S or self._n <= WARMUP_SAMPLES
        done, failed, in_flight = finite(s.rows_done), finite(s.failures) or 0.0, finite(s.in_flight) or 0.0
        remaining = None
        if self.total is not None and done is not None:
            remaining = max(int(self.total - done - failed), 0)
        if remaining is not None:
            tail = remaining < self.capacity if self.capacity else remaining <= in_flight
        else:  # the loop keeps twice the capacity in flight until nothing is left to send
            tail = bool(self.capacity) and in_flight < self.capacity
        wave = max(int(min(self.capacity or self._most_in_flight, self.total or math.inf)), 1)
        return Phase(warm, tail, remaining, wave, done is not None and done >= wave)

    def report(self) -> PremiseReport:
        """For the manifest: each premise checked or not (and why), its status, evidence, first
        contradiction; the warnings given; how the samples split into warm-up, tail and steady."""
        decided = self.decision.arm if self.decision is not None else None
        chosen = decided.name if decided else None
        arm = arm_name(self.spec_k) if self.spec_k is not None else None
        return {
            "arm": arm,
            "arm_label": self.label,
            "decision_arm": chosen,
            "arm_is_decision": None if chosen is None or arm is None else arm == chosen,
            "engine_capacity": self.capacity,
            "replicas": self.replicas,
            "samples": PremiseSamples(**self.phases),
            "premises": {p.name: p.as_dict() for p in self.premises},
            "warnings": list(self.warnings),
        }


def session_total(samples: pd.DataFrame) -> int | None:
    """A session's rows, from its last sample: those finished, failed and still in flight. Exact for
    a session that ran to its end; short for one interrupted (the tail then starts earlier)."""
    last = TimelineSample.from_row(samples.iloc[-1])
    return last.rows_done + last.failures + last.in_flight


def check_timeline(
    timeline: pd.DataFrame,
    decision: Decision | None,
    capacity: int | None,
    spec_k: int | None,
    *,
    totals: dict[int, int] | None = None,
    **options: Any,
) -> PremiseReport:
    """Re-check a saved timeline (`kit.generate.metrics.load_timeline`), session by session, as the
    live run would have: the report, its warnings included. `totals`: rows per session where known
    (else `session_total`); `options`: PremiseCheck's (replicas, algorithm, ...)."""
    check = PremiseCheck(decision, capacity, spec_k, **options)
    if timeline is None or not len(timeline) or T_S not in timeline:
        return check.report()
    frame = timeline.dropna(subset=[T_S]).sort_values([SESSION, T_S])
    for session, samples in frame.groupby(SESSION, sort=True):
        check.total = (totals or {}).get(session) or session_total(samples)
        for row in samples.to_dict("records"):
            check.observe(TimelineSample.from_row(row))
    return check.report()
