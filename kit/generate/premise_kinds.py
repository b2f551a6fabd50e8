"""The three premises of stage 2's decision that stage 3 checks, one class each, and what they share:
where a sample falls in its session (`Phase`), a premise's findings (`Premise`), windows of samples.
`kit.generate.premises.PremiseCheck` feeds them the timeline's samples; what each checks:

- accept length (`AcceptPremise`): the engine's, for a speculative arm, within the sweep's range;
- capacity (`CapacityPremise`): the engine kept at the capacity the run uses while work remains;
- throughput (`ThroughputPremise`): tokens/s at steady state within the sweep's interval at the
  nearest level.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

from kit.artifacts import Decision, LadderPoint
from kit.artifacts import manifest_sections as sections
from kit.decide.measure.noise import UNMEASURED_NOISE
from kit.display import finite
from kit.engines.arms import arm_name
from kit.generate.timeline_sample import IN_FLIGHT, TimelineSample

ACCEPT_WINDOW_S = 60.0
"""Accept length is judged over the latest steady samples spanning this long (a median of them)."""
THROUGHPUT_WINDOW_S = 300.0
"""Tokens/s is judged over the latest steady samples spanning this long: a sweep level's interval
is that of a median over repetitions, so the run's figure must be steadier than one reading; over
5 minutes a stall of a few seconds (a shard written, a collection) moves it by about 1%."""
MIN_WINDOW_SAMPLES = 5
"""A window has at least this many samples (one odd reading is not a trend)."""
GRACE_S = 30.0
"""Capacity: running below it must last this long... (the loop itself sends more after 2 samples)."""
GRACE_SAMPLES = 3
"""... and this many samples in a row before the premise counts as contradicted."""
RUNNING_SHARE = 0.9
"""Running requests below this share of the capacity count as below it (a slot that frees is
refilled at the engine's next step, so a gauge read between two steps shows a few short)."""
CONCURRENCY_FACTOR = 2.0
"""A sweep level is compared with the run only when their concurrencies differ by at most this."""
ACCEPT_MARGIN = 0.05
"""Tolerance on the sweep's accept-length range, a share of each bound: chosen, not measured, for
the different averaging of the sweep (per response, or counters over a level) and of the run
(the engine's gauge, or counters, over one sampling interval)."""


@dataclass(frozen=True)
class Phase:
    """Where a sample falls in its session."""

    warm: bool
    tail: bool
    remaining: int | None
    """Rows of the session not finished (queued in the kit, in flight, or not yet sent)."""
    wave: int
    """Rows the engine runs at once (its capacity, else the most the kit had in flight), at most the
    session's total: a window of throughput holds at least this many finished rows."""
    first_wave_done: bool
    """Whether a wave of rows has finished since the session started (throughput is then steady)."""

    @property
    def steady(self) -> bool:
        return not self.warm and not self.tail


@dataclass
class Premise:
    """One premise: whether it can be checked, and what the checks found (for the manifest)."""

    name: str
    rule: str
    why_not: str | None = None
    checks: int = 0
    contradicted_checks: int = 0
    first: sections.Evidence | None = None
    """Evidence of the first contradiction (with `t_s` and `session`)."""
    last: sections.Evidence | None = None
    """Evidence of the latest check."""
    warning: str | None = None
    note: str | None = None
    """Why no check was made yet although the premise is checkable (set as samples arrive)."""

    def judge(self, evidence: sections.Evidence, contradicted: bool, sentence: str) -> str | None:
        """Record one check; the warning sentence the first time the premise is contradicted."""
        self.checks += 1
        self.last = {**evidence, "contradicted": contradicted}
        if not contradicted:
            return None
        self.contradicted_checks += 1
        if self.first is not None:
            return None
        self.first, self.warning = dict(self.last), sentence
        return sentence

    def judge_range(
        self, evidence: sections.Evidence, seen: float, lo: float, hi: float, below: str, above: str
    ) -> str | None:
        """`judge` for a figure against its expected range: `below` or `above` is the warning."""
        return self.judge(evidence, not lo <= seen <= hi, below if seen < lo else above)

    def observe(self, s: TimelineSample, phase: Phase) -> str | None:
        """Judge one sample; a warning the first time it contradicts."""
        raise NotImplementedError

    def reset(self) -> None:
        """A new session or a restarted server: windows start again (findings are kept)."""

    def as_dict(self) -> sections.PremiseFindings:
        checked = self.why_not is None and self.checks > 0
        status = "not checked" if not checked else "contradicted" if self.first else "ok"
        why = self.why_not or (None if checked else self.note or "no sample qualified")
        return {
            "checked": checked,
            "status": status,
            "why_not": None if checked else f"not checked because {why}",
            "rule": self.rule,
            "checks": self.checks,
            "contradicted_checks": self.contradicted_checks,
            "first_contradicted_t_s": self.first["t_s"] if self.first else None,
            "first_contradicted_session": self.first["session"] if self.first else None,
            "first_contradicted_at": self.first["at"] if self.first else None,
            "first_contradiction": self.first,
            "last": self.last,
            "warning": self.warning,
        }


def _when(s: TimelineSample) -> sections.When:
    """When a check was made: seconds into the session, the session, the time of day (UTC, ISO text)."""
    at = s.at
    text = at.isoformat() if hasattr(at, "isoformat") else at if isinstance(at, str) else None
    return {"t_s": finite(s.t_s), "session": s.session, "at": text}


def _window(d: deque, enough: Any) -> bool:
    """Keep the shortest suffix of `d` (items whose [0] is t_s) that `enough(d)` still accepts;
    whether the window now suffices."""
    while len(d) > 1 and enough(list(d)[1:]):
        d.popleft()
    return enough(list(d))


def _spans(items: list[tuple], t_min: float) -> bool:
    """Whether samples (t_s first) are enough for a window of `t_min` seconds."""
    return len(items) >= MIN_WINDOW_SAMPLES and items[-1][0] - items[0][0] >= t_min


def _sweep_rows(decision: Decision | None, arm: str) -> tuple[list[LadderPoint], str | None]:
    """decision.json's measured table rows of `arm` (status ok), or why there are none."""
    if decision is None:
        return [], "there is no decision.json (stage 2 did not run, or its file was not given)"
    if not decision.table:
        return [], "decision.json has no table of measured levels (an older kit wrote it)"
    if decision.decided_by == "predicted":
        return [], "stage 2 decided on predictions: the sweep measured nothing to compare with"
    rows = [r for r in decision.table if r.arm == arm and r.status == "ok"]
    if not rows:
        return [], f"the sweep did not measure {arm} (decision.json's table has no ok level of it)"
    return rows, None


def _rule(premise: Premise) -> str:
    """The rule a premise checks: its class docstring, on one line."""
    return " ".join((type(premise).__doc__ or "").split())


class AcceptPremise(Premise):
    """(a) The engine's accept length within the sweep's range for the arm the run uses.

    The range is the lowest to the highest accept length the sweep measured for that arm over its
    levels (each the median of the level's repetitions: decision.json's `table`,
    `measured_accept_length`), widened by `ACCEPT_MARGIN` of each bound and by nothing else. The run's
    figure is the median of the engine's accept length over the latest `ACCEPT_WINDOW_S` of steady samples
    (divided by `ranks` where the timeline sums a gauge over engines); values outside 1..k+1 cannot
    be accept lengths and are left out (counted in the evidence).
    """

    def __init__(self, decision: Decision | None, k: int | None, label: str, ranks: int) -> None:
        super().__init__("accept_length", _rule(self))
        self.k, self.label, self.ranks = k, label, max(ranks, 1)
        self.window: deque[tuple[float, float]] = deque()
        self.implausible = 0
        self.lo = self.hi = None
        self.levels: dict[int, float] = {}
        if k == 0:
            self.why_not = "the run decodes without speculation (plain decoding has no accept length)"
            return
        if k is None:
            self.why_not = "the run's draft length k is the engine's default, not a sweep arm"
            return
        rows, self.why_not = _sweep_rows(decision, arm_name(k))
        accepts = {int(r.concurrency): finite(r.measured_accept_length) for r in rows}
        self.levels = {c: v for c, v in accepts.items() if v is not None}
        if rows and not self.levels:
            known = {str(k): v for k, v in decision.accept_lengths.items()} if decision is not None else {}
            self.why_not = (
                f"the sweep measured no accept length for {label} (decision.json's accept_lengths "
                f"{known} may be the params' assumed values, not measurements)"
            )
        if self.levels:
            self.lo, self.hi = min(self.levels.values()), max(self.levels.values())
        self.note = "the engine reported no accept length in a steady sample"

    def reset(self) -> None:
        self.window.clear()

    def observe(self, s: TimelineSample, phase: Phase) -> str | None:
        raw = finite(s.accept_length)
        if self.why_not or not phase.steady or raw is None or raw <= 0:
            return None
        v = raw / self.ranks
        if not 1.0 <= v <= self.k + 1 + 1e-9:
            self.implausible += 1
            self.note = (
                f"every accept length the engine reported was outside 1-{self.k + 1}, what k={self.k} "
                f"allows (e.g. {v:.2f}): a gauge summed over engines? (ranks={self.ranks})"
            )
            return None
        self.window.append((float(s.t_s), v))
        if not _window(self.window, lambda w: _spans(w, ACCEPT_WINDOW_S)):
            self.note = f"no {ACCEPT_WINDOW_S:.0f} s of steady samples with an accept length yet"
            return None
        seen = statistics.median(v for _, v in self.window)
        lo, hi = self.lo * (1 - ACCEPT_MARGIN), self.hi * (1 + ACCEPT_MARGIN)
        span = self.window[-1][0] - self.window[0][0]
        evidence: sections.AcceptEvidence = {**_when(s), "accept_length": seen, "window_s": span,
                    "samples": len(self.window), "sweep_lo": self.lo, "sweep_hi": self.hi,
                    "expected_lo": lo, "expected_hi": hi, "sweep_levels": self.levels,
                    "implausible_samples": self.implausible}  # fmt: skip
        head = (
            f"accept length {seen:.2f} (median over the last {span:.0f} s) is SIDE the sweep's "
            f"{self.lo:.2f}-{self.hi:.2f} for {self.label} (±{100 * ACCEPT_MARGIN:.0f}%)"
        )
        below = head.replace("SIDE", "below") + (
            ": this data differs from the sweep's prompts, the sampling differs (the sweep decoded "
            "greedily), or the draft weights changed; stage 2's decision may not hold: rerun kit "
            "decide on a sample of this data"
        )
        above = head.replace("SIDE", "above") + (
            ": speculation pays more on this data than the sweep measured; the arm still holds, but a "
            "longer draft might pay more: rerun kit decide on a sample of this data with larger "
            "decide.spec_steps"
        )
        return self.judge_range(evidence, seen, lo, hi, below, above)


class CapacityPremise(Premise):
    """(b) The engine kept at the run's capacity while work remains beyond it.

    Contradicted when, outside warm-up and the tail, with more rows left than the capacity (or,
    the session's total unknown, more in flight than the capacity or some queued in the engine),
    the engine's running requests stay below `RUNNING_SHARE` of the capacity for `GRACE_SAMPLES`
    samples in a row spanning `GRACE_S` seconds. Its queue then says who starved it: requests
    waiting in the engine (its memory or scheduler admits fewer), or none (the client sent too few).
    """

    def __init__(self, capacity: int | None, source: str) -> None:
        super().__init__("capacity", _rule(self))
        self.capacity, self.source = capacity, source
        self.streak: list[sections.StreakPoint] = []
        if not capacity:
            self.why_not = f"the engine's capacity is unknown ({source or 'not given'})"
        self.note = "the engine served no running-requests gauge in a steady sample"

    def reset(self) -> None:
        self.streak = []

    def observe(self, s: TimelineSample, phase: Phase) -> str | None:
        running, queued = finite(s.num_running_reqs), finite(s.num_queue_reqs)
        in_flight = finite(s.in_flight) or 0.0
        if self.why_not or not phase.steady:
            return None
        if running is None:
            self.streak = []
            return None
        cap = self.capacity
        if phase.remaining is not None:
            beyond = phase.remaining > cap
        else:
            beyond = in_flight > cap or (queued or 0) > 0
        if not beyond:
            self.streak = []
            self.note = "no steady sample had more work left than the engine's capacity"
            return None
        point = sections.StreakPoint(t_s=float(s.t_s), running=running, queued=queued, in_flight=in_flight)
        self.streak = [*self.streak, point] if running < RUNNING_SHARE * cap else []
        evidence: sections.CapacityEvidence = {**_when(s), "capacity": cap, "running": running,
                    "queued": queued, IN_FLIGHT: in_flight, "remaining": phase.remaining,
                    "token_usage": finite(s.token_usage)}  # fmt: skip
        lasted = self.streak[-1]["t_s"] - self.streak[0]["t_s"] if self.streak else 0.0
        if len(self.streak) < GRACE_SAMPLES or lasted < GRACE_S:
            return self.judge(evidence, False, "")
        evidence |= {"below_for_s": lasted, "below_samples": len(self.streak),
                     **{f"{k}_median": statistics.median(p[k] or 0 for p in self.streak)
                        for k in ("running", "queued", IN_FLIGHT)}}  # fmt: skip
        return self.judge(evidence, True, self._sentence(evidence))

    def _sentence(self, e: sections.CapacityEvidence) -> str:
        cap, run = e["capacity"], e["running_median"]
        head = (
            f"the engine ran {run:.0f} requests for {e['below_for_s']:.0f} s while its capacity is "
            f"{cap}{f' ({self.source})' if self.source else ''} and {_rows(e['remaining'])} remain"
        )
        if e["queued_median"] >= 1:
            return (
                f"{head}, with {e['queued_median']:.0f} waiting in it: the engine admits fewer than the "
                "capacity the run counts on (its KV cache is full at these lengths, or its scheduler "
                "limits it); stage 2's figures at that capacity may not hold: lower "
                f"engine.max_running_requests to about {run:.0f}, or give the KV cache more memory"
            )
        if e["in_flight_median"] < cap:
            return (
                f"{head}, with only {e['in_flight_median']:.0f} in flight from the kit: the client "
                "starved the engine; unset generate.concurrency (the kit then keeps twice the "
                "capacity in flight), or raise it"
            )
        return (
            f"{head}, with {e['in_flight_median']:.0f} in flight from the kit but none waiting in the "
            "engine: requests wait in the client (its CPU, its connections, a replica restarting); "
            "check the kit's CPU use and logs/"
        )


def _rows(n: int | None) -> str:
    return "more rows than that" if n is None else f"{n} rows"


@dataclass(frozen=True)
class Level:
    """One measured sweep level of the run's arm: tokens/s and its interval."""

    concurrency: int
    median: float
    lo: float
    hi: float
    widened: str | None
    """How lo-hi was made when the level has no interval of its own (measured once)."""


def _levels(rows: list[LadderPoint], noise_pct: float | None) -> list[Level]:
    """The measured levels of decision.json's table rows, each with its interval: its own, or (a level
    measured once) ± the sweep's noise, or ±`UNMEASURED_NOISE` when the sweep measured none."""
    out = []
    for r in rows:
        med = finite(r.measured_tok_s)
        if med is None:
            continue
        lo, hi, widened = finite(r.measured_lo), finite(r.measured_hi), None
        if lo is None or hi is None or (finite(r.repetitions) or 1) < 2:
            share = noise_pct / 100 if noise_pct else UNMEASURED_NOISE
            widened = f"measured once: ±{100 * share:.0f}% ({'the sweep' if noise_pct else 'assumed'} noise)"
            lo, hi = med * (1 - share), med * (1 + share)
        out.append(Level(int(r.concurrency), med, lo, hi, widened))
    return out


class ThroughputPremise(Premise):
    """(c) Tokens/s at steady state within the sweep's interval at the nearest level.

    The run's tokens/s is per server (`replicas`) over the latest window of steady samples, after
    the first wave of rows has finished, spanning `THROUGHPUT_WINDOW_S` seconds and as many finished rows as
    the engine runs at once: tokens over time, not a median of samples, since a sample counts the
    tokens of the rows that finished in it (long rows finish in waves, and a median of such samples
    can be 0 at full speed). Its concurrency is the median running requests per server (the engine's
    gauge; without it, what the kit had in flight up to the capacity). The level is the arm's measured
    level nearest in ratio, compared only within `CONCURRENCY_FACTOR`; its interval is decision.json's
    `table` (`measured_lo`-`measured_hi`); a level measured once gets ± the sweep's noise
    (`noise.noise_pct`), or ±10% when that was not measured. When the concurrencies differ by r, the
    bound on the run's side is scaled by r (tokens/s grows at most in proportion to running
    requests, and does not fall with them unless the sweep measured a fall, which caps the batch).
    """

    def __init__(
        self, decision: Decision | None, k: int | None, label: str, capacity: int | None, replicas: int
    ) -> None:
        super().__init__("throughput", _rule(self))
        self.label, self.capacity, self.replicas = label, capacity, max(replicas, 1)
        self.window: deque[tuple[float, float, float, float]] = deque()
        self.levels: list[Level] = []
        if k is None:
            self.why_not = "the run's draft length k is the engine's default, not a sweep arm"
            return
        rows, self.why_not = _sweep_rows(decision, arm_name(k))
        noise = decision.noise if decision is not None else None
        self.levels = _levels(rows, finite(noise.noise_pct) if noise is not None else None)
        if rows and not self.levels:
            self.why_not = f"the sweep measured no tokens/s for {label}"
        self.note = f"no steady window of {THROUGHPUT_WINDOW_S:.0f} s holding a full wave of finished rows"

    def reset(self) -> None:
        self.window.clear()

    def observe(self, s: TimelineSample, phase: Phase) -> str | None:
        tokens, rows = finite(s.output_tokens_done), finite(s.rows_done)
        if self.why_not or not phase.steady or not phase.first_wave_done or tokens is None or rows is None:
            return None
        running = finite(s.num_running_reqs)
        if running is None:
            in_flight = finite(s.in_flight) or 0.0
            running = min(in_flight, self.capacity) if self.capacity else in_flight
        self.window.append((float(s.t_s), tokens, rows, running))
        if not _window(
            self.window, lambda w: _spans(w, THROUGHPUT_WINDOW_S) and w[-1][2] - w[0][2] >= phase.wave
        ):
            return None
        (t0, tok0, rows0, _), (t1, tok1, rows1, _) = self.window[0], self.window[-1]
        seen = (tok1 - tok0) / (t1 - t0) / self.replicas
        conc = statistics.median(w[3] for w in self.window) / self.replicas
        level = min(self.levels, key=lambda lv: abs(math.log(max(conc, 1e-9) / lv.concurrency)))
        ratio = max(conc, 1e-9) / level.concurrency
        if not 1 / CONCURRENCY_FACTOR <= ratio <= CONCURRENCY_FACTOR:
            self.note = (
                f"the run held about {conc:.0f} running per server, and the sweep's nearest level of "
                f"{self.label} is {level.concurrency} ({max(ratio, 1 / ratio):.1f}x off), beyond the "
                f"{CONCURRENCY_FACTOR:g}x within which a level is compared: let decide.concurrencies "
                "reach the engine's capacity"
            )
            return None
        lo, hi = level.lo * min(1.0, ratio), level.hi * max(1.0, ratio)
        evidence: sections.ThroughputEvidence = {**_when(s), "tok_s": seen, "concurrency": conc,
                    "window_s": t1 - t0, "rows_in_window": rows1 - rows0,
                    "sweep_concurrency": level.concurrency, "sweep_tok_s": level.median,
                    "sweep_lo": level.lo, "sweep_hi": level.hi, "sweep_widened": level.widened,
                    "expected_lo": lo, "expected_hi": hi,
                    "gen_throughput": finite(s.gen_throughput)}  # fmt: skip
        scaled = "" if ratio == 1 else f", scaled to {lo:.0f}-{hi:.0f} for the run's {ratio:.2f}x concurrency"
        head = (
            f"throughput {seen:.0f} tok/s per server (last {t1 - t0:.0f} s, about {conc:.0f} running) is "
            f"SIDE the sweep's {level.lo:.0f}-{level.hi:.0f} for {self.label} at {level.concurrency} "
            f"concurrent{scaled}"
        )
        below = head.replace("SIDE", "below") + (
            ": the run's outputs are longer or its sampling differs from the sweep's (decide.max_tokens, "
            "greedy), or the machine is slower now (other processes, clocks); the measured lead between "
            "the arms may not hold: compare the sweep's settings with this run's, and rerun kit decide "
            "on a sample of this data"
        )
        above = head.replace("SIDE", "above") + (
            ": the sweep measured this arm slower than it runs now (a busier machine, or other "
            "prompts); the margin between the arms it measured may not hold: rerun kit decide if the "
            "choice was close"
        )
        return self.judge_range(evidence, seen, lo, hi, below, above)
