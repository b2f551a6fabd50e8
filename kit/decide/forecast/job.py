"""The job in hours: stage 3's wall time and GPU-hours per arm, with an interval, from the plan, the
pilot's output lengths and the sweep's throughput ladder (decision.json's `forecast`).

    f = forecast_inputs(params, folder, decision, spec_label, pilot, start_s).forecast()
    # forecast_inputs: kit.decide.forecast.inputs (what the run holds); called by kit.decide.run
    f.sentence    # "plain decoding: 2 h 10 min (1 h 55 min to 2 h 30 min) for 193,000 requests ..."

The model, in three parts:

- **Output tokens.** Each planned request's length is drawn from its source's answers (the pilot's,
  sampled as stage 3 samples with its output budget; else the sweep's greedy ones, cut answers at
  the source's cap; else the cap itself, said as such: kit.prompts.lengths). Requests are sent in
  stage 3's order (longest predicted first).
- **Throughput.** An engine running n sequences makes f(n) tokens/s: the arm's measured ladder
  (the sweep's median at each level; the cost model's prediction where a level was not measured),
  straight lines between levels and through (0, 0), flat above the top level (the kit never
  assumes more than it measured). Each running sequence advances at f(n) / n tokens/s.
- **The job**, simulated request by request: `capacity` sequences run at once per replica (what
  stage 3 will hold: the decided cap, else what memory holds, else the top level measured), a
  finished one is replaced by the next in the queue; once the queue is empty the batch shrinks
  and the last requests run below full load (the tail). Server start-up is added once (replicas
  start side by side); the work splits evenly over replicas.

The interval: `DRAWS` simulations, each with every source's answers resampled (the uncertainty of
a source's mean from its few answers) and the ladder scaled within the top level's measured
interval (half the draws either side of its median, `speed_scale`) widened by what else moves the
speed (`speed_spread`: plain decoding's drift over the sweep, and the sweep's noise once more when
the pilot's single timing calibrates it); the 10th and 90th percentiles, widened where earlier
comparable runs were off by more (kit.decide.forecast.history, through kit.decide.forecast.inputs).
What the interval does not hold is said in `notes` (lengths bounded by `max_tokens` only, a ladder
predicted rather than measured, greedy accept lengths for speculative arms).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kit.artifacts import ArmForecast, Forecast, LadderPoint, Noise
from kit.decide.forecast.history import interval_words
from kit.decide.measure.pilot import MIN_PILOT_S
from kit.display import hours
from kit.engines.arms import arm_label
from kit.prompts.lengths import LengthModel

DRAWS = 16
"""Simulations per arm for the interval."""
LOW, HIGH = 10, 90
"""Percentiles of the simulations that bound the interval."""
CANNOT_RUN = ("skipped", "failed", "crashed")


@dataclass(frozen=True)
class PlanLengths:
    """What the forecast needs of the plan: each request's source and prompt tokens, in plan order."""

    sources: np.ndarray
    prompt_tokens: np.ndarray

    @classmethod
    def of(cls, sources: Iterable[str], prompt_tokens: Iterable[float], samples: int = 1) -> PlanLengths:
        src = np.asarray(list(sources), dtype=object).astype(str)
        tok = np.nan_to_num(np.asarray(list(prompt_tokens), dtype=float), nan=0.0)
        return cls(np.repeat(src, samples), np.repeat(tok, samples))

    def __len__(self) -> int:
        return len(self.sources)

    def scaled(self, requests: int, seed: int = 0) -> PlanLengths:
        """`requests` requests with this plan's mix of sources and prompt lengths (drawn with
        replacement when more, without when fewer): the what-if of a bigger or smaller job."""
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(self), size=requests, replace=requests > len(self))
        return PlanLengths(self.sources[pick], self.prompt_tokens[pick])


@dataclass(frozen=True)
class Ladder:
    """An arm's tokens/s over sequences running: f(n) through (0, 0) and the levels, flat above."""

    levels: np.ndarray
    tok_s: np.ndarray
    lo_ratio: float = 1.0
    hi_ratio: float = 1.0
    """The top level's measured interval over its median (1.0: none)."""
    measured: bool = True
    calibration: float = 1.0
    """The pilot's measured speed over what this ladder predicts for it (1.0: no pilot)."""
    spread: float = 0.0
    """What else moves the speed, as a share either side of the top level's interval (speed_spread)."""
    top: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "top", int(self.levels[-1]))

    @classmethod
    def of(cls, rows: Iterable[LadderPoint]) -> Ladder | None:
        """From an arm's table rows: measured levels (status ok) where there are any, else predicted."""
        rows = sorted(rows, key=lambda r: r.concurrency)
        measured = [r for r in rows if r.status == "ok" and r.measured_tok_s]
        if measured:
            top = measured[-1]
            mid = float(top.measured_tok_s)
            lo = float(top.measured_lo or mid) / mid
            hi = float(top.measured_hi or mid) / mid
            return cls(
                np.array([r.running or r.concurrency for r in measured], dtype=float),
                np.array([r.measured_tok_s for r in measured], dtype=float),
                lo,
                hi,
            )
        if any(r.status in CANNOT_RUN for r in rows):
            return None  # an arm that cannot run here (skipped, would not start, kept dying) has no job
        predicted = [r for r in rows if r.predicted_tok_s and r.feasible is not False]
        if not predicted:
            return None
        return cls(
            np.array([r.running or r.concurrency for r in predicted], dtype=float),
            np.array([r.predicted_tok_s for r in predicted], dtype=float),
            measured=False,
        )

    def rate(self, n: int) -> float:
        """Tokens/s of each of `n` running sequences."""
        total = float(np.interp(n, np.r_[0.0, self.levels], np.r_[0.0, self.tok_s]))
        return self.calibration * total / n


def simulate(lengths: np.ndarray, capacity: int, ladder: Ladder, scale: float = 1.0) -> tuple[float, float]:
    """(seconds, tail seconds) for requests of `lengths` tokens sent in that order to one engine that
    runs `capacity` at once, each at `ladder.rate(running) * scale` tokens/s. The tail: from the
    moment the queue is empty and the batch starts to shrink, to the end."""
    n = len(lengths)
    if n == 0:
        return 0.0, 0.0
    capacity = max(1, min(capacity, n))
    rates = {}
    progress = t = 0.0
    running = list(np.maximum(lengths[:capacity], 1.0))
    heapq.heapify(running)
    i = capacity
    if i < n:  # while the queue holds work the batch is full: one rate, so time follows progress
        progress = _fill(running, lengths, i)
        t = progress / (ladder.rate(capacity) * scale)
    tail_start = t
    while running:
        k = len(running)
        rate = rates.get(k)
        if rate is None:
            rate = rates[k] = ladder.rate(k) * scale
        done = heapq.heappop(running)
        t += (done - progress) / rate
        progress = done
    return t, t - tail_start


def _fill(running: list[float], lengths: np.ndarray, i: int) -> float:
    """Send the queue from `i` on into the full batch `running` (a heap of the progress at which each
    running request ends): each next request takes the place of the first to end. Returns the
    progress at which the last one was sent (the queue is empty from then on)."""
    at = 0.0
    for length in lengths[i:].tolist():
        at = running[0]
        heapq.heapreplace(running, at + max(length, 1.0))
    return at


def calibration(ladder: Ladder, pilot: Mapping[str, Any] | None, lengths: np.ndarray) -> float | None:
    """The pilot's speed over what `ladder` predicts for it: its answers' lengths in the order sent,
    as many at once as it sent, against the seconds it took. The sweep measures greedy answers cut
    at `decide.max_tokens`; the pilot samples as stage 3 will, at its lengths (longer sequences,
    another sampler, less prefill per token): on the CPU demo it ran at 0.6x the sweep's ladder,
    and stage 3 then at the pilot's speed. None without a pilot that can be timed (`timed`)."""
    if not pilot or not timed(pilot):
        return None
    return pilot_ratio(ladder, pilot, lengths)


def pilot_ratio(ladder: Ladder, pilot: Mapping[str, Any] | None, lengths: np.ndarray) -> float | None:
    """The pilot's speed over what `ladder` predicts for it, timed or not (None: no answers)."""
    if not pilot or not len(lengths) or not float(pilot.get("seconds") or 0):
        return None
    predicted, _ = simulate(lengths, int(pilot.get("concurrency") or 1), ladder)
    return predicted / float(pilot["seconds"]) if predicted > 0 else None


def timed(pilot: Mapping[str, Any]) -> bool:
    """Whether the pilot's time can calibrate: it lasted `MIN_PILOT_S` and was stopped by that rule,
    not by running out of planned prompts (`queued`; a pilot of an earlier kit has none). A pilot
    whose prompts run out near `MIN_PILOT_S` lasts that long only when it runs slow, so timing it
    then picks its slow draws: on vLLM's CPU build, every prompt of the plan sent, sixteen pilots ran
    at 0.60-1.10x the sweep's ladder, the four that lasted past 5 s at 0.60-0.85x, and the three of
    them timed forecast 11-22% too slow (docs/lab/forecast.md)."""
    if float(pilot.get("seconds") or 0) < MIN_PILOT_S:
        return False
    queued = pilot.get("queued")
    return queued is None or int(pilot.get("sent") or 0) < int(queued)


def speed_spread(noise: Noise | None, calibrated: bool) -> float:
    """The share either side by which stage 3's speed may differ beyond the top level's interval:
    plain decoding's drift from the sweep's start to its end (the machine a job runs on moves as
    much), and, when a single timing of the pilot calibrates the ladder, the sweep's noise (the
    median half-width of its levels' intervals) once more; the two added in quadrature."""
    if noise is None:
        return 0.0
    drift = noise.drift or {}
    start, end = float(drift.get("start") or 0), float(drift.get("end") or 0)
    moved = abs(end / start - 1) if start and end else 0.0
    timing = (noise.noise_pct or 0.0) / 100 if calibrated else 0.0
    return math.hypot(moved, timing)


@dataclass(frozen=True)
class JobSettings:
    """How stage 3 will run: per replica, the sequences at once; replicas; GPUs each; start-up."""

    capacity: Mapping[str, int]
    """Per arm name: sequences running at once in one replica."""
    replicas: int = 1
    gpus_per_replica: int = 1
    startup_s: float = 0.0
    gpu_name: str | None = None


def draws_for(model: LengthModel, plan: PlanLengths, rng: np.random.Generator) -> np.ndarray:
    """One draw of every request's output length: from its source's answers resampled as a whole
    (so each draw also moves the source's mean as its few answers allow), scaled by the request's
    prompt-length bucket over the source's mean; a source without answers at its cap."""
    out = np.empty(len(plan), dtype=float)
    for name in np.unique(plan.sources):
        at = plan.sources == name
        fitted = model.sources.get(str(name))
        cap = model.cap(str(name))
        if fitted is None or not len(fitted.draws):
            out[at] = cap if np.isfinite(cap) else 0.0
            continue
        population = rng.choice(fitted.draws, size=len(fitted.draws), replace=True)
        shape = fitted.predict(plan.prompt_tokens[at]) / max(fitted.mean, 1e-9)
        picked = rng.choice(population, size=int(at.sum()), replace=True) * shape
        out[at] = np.minimum(picked, cap)
    return np.round(out)


def speed_scale(rng: np.random.Generator, lo: float, hi: float) -> float:
    """One draw of the ladder's speed over its measured median, between `lo` and `hi`: uniform on
    each side of 1 with half the draws on each, so the median draw is the measured median however
    lopsided the interval (a uniform draw over [lo, hi] centred the forecast on the interval's middle:
    a top level measured 0.5-1.02x its median forecast the job 1.3x slower than measured)."""
    lo, hi = min(max(lo, 0.05), 1.0), max(hi, 1.0)
    u = float(rng.random())  # one draw, as rng.uniform(lo, hi) took: a symmetric interval draws as before
    return lo + 2 * u * (1.0 - lo) if u < 0.5 else 1.0 + (2 * u - 1) * (hi - 1.0)


def arm_forecast(
    name: str,
    label: str,
    ladder: Ladder,
    model: LengthModel,
    plan: PlanLengths,
    job: JobSettings,
    draws: int = DRAWS,
    seed: int = 0,
) -> tuple[ArmForecast, np.ndarray]:
    """One arm's forecast; also the output tokens of each draw."""
    capacity = int(job.capacity.get(name) or ladder.top)
    per_replica = math.ceil(len(plan) / max(job.replicas, 1))
    rng = np.random.default_rng(seed)
    order = np.argsort(-model.predict(plan.sources, plan.prompt_tokens), kind="stable")
    walls, tails, tokens = [], [], []
    for d in range(draws):
        lengths = draws_for(model, plan, rng)[order]
        mine = lengths[d % max(job.replicas, 1) :: max(job.replicas, 1)][:per_replica]
        lo, hi = ladder.lo_ratio * (1 - ladder.spread), ladder.hi_ratio * (1 + ladder.spread)
        scale = speed_scale(rng, lo, hi) if draws > 1 else 1.0
        wall, tail = simulate(mine, capacity, ladder, scale)
        walls.append(wall + job.startup_s)
        tails.append(tail)
        tokens.append(float(lengths.sum()))
    walls_a = np.array(walls)
    mid, lo, hi = (float(np.percentile(walls_a, q)) for q in (50, LOW, HIGH))
    gpus = job.replicas * job.gpus_per_replica
    return (
        ArmForecast(
            arm=name,
            label=label,
            wall_s=round(mid, 1),
            wall_lo_s=round(lo, 1),
            wall_hi_s=round(hi, 1),
            gpu_hours=round(mid * gpus / 3600, 3),
            gpu_hours_lo=round(lo * gpus / 3600, 3),
            gpu_hours_hi=round(hi * gpus / 3600, 3),
            tail_s=round(float(np.median(tails)), 1),
            startup_s=round(job.startup_s, 1),
            capacity=capacity,
            full_load_tok_s=round(ladder.rate(capacity) * capacity, 1),
            throughput_from="measured" if ladder.measured else "predicted by the cost model",
            requests_per_replica=per_replica,
        ),
        np.array(tokens),
    )


def forecast_job(
    plan: PlanLengths,
    model: LengthModel,
    table: list[LadderPoint],
    job: JobSettings,
    chosen: str | None,
    spec_label: str = "MTP",
    pilot: Mapping[str, Any] | None = None,
    pilot_lengths: np.ndarray | None = None,
    noise: Noise | None = None,
) -> Forecast | None:
    """The forecast of every arm the table measured (or predicted) for the whole plan, its speed
    calibrated on the pilot (`pilot`: its figures, `pilot_lengths`: its answers' lengths as sent),
    its interval widened by the sweep's `noise` (speed_spread); None when no arm has a ladder."""
    by_arm: dict[str, list[LadderPoint]] = {}
    for row in table:
        by_arm.setdefault(row.arm, []).append(row)
    ladders = {name: ladder for name, rows in by_arm.items() if (ladder := Ladder.of(rows)) is not None}
    plain = ladders.get("plain")
    factor = (
        calibration(plain, pilot, pilot_lengths if pilot_lengths is not None else np.array([]))
        if plain
        else None
    )
    ratio = pilot_ratio(plain, pilot, pilot_lengths) if plain and pilot_lengths is not None else None
    if pilot and ratio:  # recorded timed or not: what a calibration would have been
        pilot = {**pilot, "speed_over_sweep": round(ratio, 3)}
    arms, tokens = [], None
    spread = speed_spread(noise, bool(factor))
    for name, ladder in ladders.items():
        ladder = replace(ladder, calibration=factor or 1.0, spread=spread)
        label = arm_label(by_arm[name][0].spec_k, spec_label)
        f, arm_tokens = arm_forecast(name, label, ladder, model, plan, job)
        arms.append(f)
        tokens = arm_tokens if tokens is None else tokens
    if not arms or tokens is None:
        return None
    arms.sort(key=lambda a: a.wall_s)
    lengths_from = {str(s): model.fitted_on(str(s)) for s in np.unique(plan.sources)}
    f = Forecast(
        requests=len(plan),
        replicas=job.replicas,
        gpus_per_replica=job.gpus_per_replica,
        gpu_name=job.gpu_name,
        output_tokens=round(float(np.median(tokens))),
        output_tokens_lo=round(float(np.percentile(tokens, LOW))),
        output_tokens_hi=round(float(np.percentile(tokens, HIGH))),
        lengths_from=lengths_from,
        arms=arms,
        chosen=chosen,
        pilot=dict(pilot) if pilot else None,
        calibration=round(factor, 3) if factor else None,
        notes=_notes(lengths_from, arms, factor, pilot, spread) + _above_the_sweep(arms, ladders),
    )
    return replace(f, sentence=sentence(f))


def _notes(
    lengths_from: Mapping[str, str],
    arms: list[ArmForecast],
    factor: float | None,
    pilot: Mapping[str, Any] | None,
    spread: float = 0.0,
) -> list[str]:
    notes = []
    if factor and pilot:
        notes.append(
            f"speeds are the sweep's x{factor:.2f}: the pilot ({pilot.get('answered')} requests sampled as "
            f"stage 3 samples, at its lengths, {pilot.get('concurrency')} at once) ran at that share of what "
            "the sweep's ladder gives for it (for every arm: the pilot ran on plain decoding)"
        )
    elif pilot and pilot.get("seconds") and float(pilot["seconds"]) >= MIN_PILOT_S and not timed(pilot):
        notes.append(
            f"the pilot sent all {pilot.get('sent')} planned prompts it had and took "
            f"{float(pilot['seconds']):.1f} s: it lasted past the minimum only by running slow, so its "
            "time is not taken (speeds as the sweep measured them, not calibrated)"
        )
    elif pilot and pilot.get("seconds") and float(pilot["seconds"]) < MIN_PILOT_S:
        notes.append(
            f"the pilot took {float(pilot['seconds']):.1f} s, too short to time (under {MIN_PILOT_S:.0f} s): "
            "speeds as the sweep measured them (greedy, its max_tokens), not calibrated"
        )
    elif any(a.arm == "plain" for a in arms):
        notes.append("no pilot: speeds as the sweep measured them (greedy, its max_tokens), not calibrated")
    if spread:
        notes.append(
            f"the interval allows the speed ±{100 * spread:.0f}% beyond the top level's own interval "
            "(plain decoding's drift over the sweep, and its noise when the pilot calibrates it)"
        )
    bound = sorted(s for s, b in lengths_from.items() if b == "max_tokens")
    if bound:
        notes.append(
            f"{', '.join(bound)}: no answers to measure, so every request is taken at its max_tokens: "
            "the forecast is an upper bound for them (set decide.pilot_per_source to measure them)"
        )
    greedy = sorted(s for s, b in lengths_from.items() if b == "sweep answers")
    if greedy:
        notes.append(
            f"{', '.join(greedy)}: lengths from the sweep's greedy answers (cut answers at the source's "
            "max_tokens), not sampled as stage 3 samples"
        )
    predicted = [a.label for a in arms if a.throughput_from != "measured"]
    if predicted:
        notes.append(f"{', '.join(predicted)}: throughput predicted by the cost model, not measured")
    if any(a.arm != "plain" for a in arms):
        notes.append(
            "speculative arms at the accept length the sweep measured (greedy); sampled at a temperature "
            "it is usually lower, and their forecast optimistic"
        )
    return notes


def _above_the_sweep(arms: list[ArmForecast], ladders: Mapping[str, Ladder]) -> list[str]:
    """A note for each arm stage 3 will run above the top level the sweep measured."""
    notes = []
    for a in arms:
        top = ladders[a.arm].top
        if a.capacity > top:
            notes.append(
                f"{a.label}: stage 3 runs {a.capacity:,} at once, the sweep's top level is {top:,}: the "
                f"speed above it is taken as at {top:,} (an engine usually gains more), so this forecast is "
                f"slow by what it gains: add {a.capacity} to decide.concurrencies to measure it"
            )
    return notes


def sentence(f: Forecast) -> str:
    """'193,000 requests, ~96,500,000 output tokens: plain decoding: 2 h 10 min (1 h 55 min to 2 h 30 min)
    with the server's start (1 min 10 s), 2.17 GPU-hours; n-gram k=2: ...; plain decoding saves 30 min over
    n-gram k=2'. The wall time counts the server's start (stage 4's check judges the time generating,
    without it); no GPU-hours for a run on a CPU."""
    where = f" on {f.replicas} replica(s) x {f.gpus_per_replica} GPU" if f.replicas > 1 else ""
    parts = [
        f"{a.label}: {hours(a.wall_s)} ({hours(a.wall_lo_s)} to {hours(a.wall_hi_s)})"
        + (f" with the server's start ({hours(a.startup_s)})" if a.startup_s else "")
        + (f", {a.gpu_hours:.2f} GPU-hours" if f.on_gpu else "")
        for a in f.arms
    ]
    text = f"{f.requests:,} requests, ~{f.output_tokens:,} output tokens{where}: " + "; ".join(parts)
    if len(f.arms) > 1:
        best, next_ = f.arms[0], f.arms[1]
        if best.wall_hi_s >= next_.wall_lo_s:  # the intervals overlap: no difference, not a saving
            text += f"; no difference between {best.label} and {next_.label} within their intervals"
        else:
            text += f"; {best.label} saves {hours(next_.wall_s - best.wall_s)} over {next_.label}"
    return text + interval_words(f.history)
