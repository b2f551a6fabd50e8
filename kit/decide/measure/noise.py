"""What a measured sweep can and cannot tell apart: intervals, paired leads, drift.

A shared machine measures the same level differently from one minute to the next (up to 2x was seen
here), so the sweep measures every (arm, level) several times, in interleaved rounds, and the
decision compares intervals, not single numbers:

- a level's figure is the median of its repetitions, with a bootstrap interval of that median
  (`INTERVAL` of the resamples; with three repetitions it is their range);
- a lead of one arm over another is the median of their per-round ratios (each round measures both
  arms minutes apart at most, so a slow machine slows both), with its own bootstrap interval; it
  counts only over three rounds or more, when that interval excludes 1 and the lead is larger than
  the two arms' pooled noise, and only where it rests on undisturbed measurements (a lead read off
  repetitions that other processes disturbed, because too few calm ones remained, keeps the simpler
  arm: a sweep beside a second test run chose n-gram k=1 at 3.1x, every repetition disturbed);
- the sweep's noise is the median half-width of its levels' intervals, as a share of their medians;
- drift: plain decoding measured at the start and at the end of the sweep; when the two differ by
  more than that level's interval, the machine changed under the sweep; within an interval wider than
  `DRIFT_SEEN`, the sweep cannot tell (not "no drift").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

INTERVAL = 0.90
"""Coverage of the intervals the kit reports (a 90% bootstrap percentile interval)."""
RESAMPLES = 2000
SEED = 0
UNMEASURED_NOISE = 0.10
"""The noise assumed when a level was measured once (no spread to measure): a lead must be larger."""
DRIFT_SEEN = 0.10
"""A drift check whose level is noisier than this cannot say "no drift": a change that matters (more
than this) would hide in its noise. Within the noise it then says the sweep cannot tell."""
MIN_PAIRS = 3
"""Rounds that measured both arms a lead needs before it can count: two agreeing rounds of a
machine that swings 2x are no evidence."""


@dataclass(frozen=True)
class Interval:
    """A median and its interval (lo, hi) over `n` values."""

    median: float
    lo: float
    hi: float
    n: int

    @property
    def half_width(self) -> float:
        """Half the interval's width as a share of the median (the level's relative noise)."""
        if self.n < 2 or not self.median:
            return UNMEASURED_NOISE
        return (self.hi - self.lo) / 2 / abs(self.median)

    def excludes(self, value: float) -> bool:
        return self.n >= 2 and (self.lo > value or self.hi < value)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def median_interval(values: Sequence[float], coverage: float = INTERVAL) -> Interval:
    """The median of `values` and a percentile bootstrap interval of it (seeded: reproducible)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    med = float(np.median(x))
    if x.size == 1:
        return Interval(med, med, med, 1)
    rng = np.random.default_rng(SEED)
    boot = np.median(rng.choice(x, size=(RESAMPLES, x.size), replace=True), axis=1)
    tail = (1 - coverage) / 2
    lo, hi = np.quantile(boot, [tail, 1 - tail], method="inverted_cdf")
    return Interval(med, float(lo), float(hi), int(x.size))


@dataclass(frozen=True)
class Lead:
    """How much arm A out-measures arm B, from rounds that measured both."""

    ratio: Interval
    """A / B per round: its median and interval."""
    pooled_noise: float
    """The two arms' relative noise combined (root of the sum of squares)."""
    disturbed: bool = False
    """Whether either arm's figure rests on a disturbed measurement (fewer than two calm ones were
    left to use): such a lead never counts."""

    @property
    def pct(self) -> float:
        return 100 * (self.ratio.median - 1)

    @property
    def counts(self) -> bool:
        """A lead outside the noise: over `MIN_PAIRS` rounds or more, the ratio's interval excludes 1
        and the lead exceeds the pooled noise. Over fewer rounds (a time budget that allowed one) there
        is no interval to read: the lead must then exceed both the pooled noise and the noise assumed
        of two arms measured once (`UNMEASURED_NOISE` each), as the decision's reasons say. A 0.34x
        measured once on the H200 (docs/lab/h200/sglang) is a difference; a 0.88x is not."""
        lead = abs(self.ratio.median - 1)
        if self.disturbed:
            return False
        if self.ratio.n >= MIN_PAIRS:
            return self.ratio.excludes(1.0) and lead > self.pooled_noise
        return self.ratio.n >= 1 and lead > max(
            self.pooled_noise, math.hypot(UNMEASURED_NOISE, UNMEASURED_NOISE)
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "ratio": self.ratio.as_dict(),
            "pooled_noise_pct": 100 * self.pooled_noise,
            "counts": self.counts,
            "disturbed": self.disturbed,
        }


def lead(a: dict[int, float], b: dict[int, float], disturbed: bool = False) -> Lead:
    """The lead of A over B from their values per round (`{round: tok/s}`), paired by round
    (`disturbed`: either side's values include a disturbed measurement)."""
    rounds = sorted(set(a) & set(b))
    ratios = [a[r] / b[r] for r in rounds if b[r]]
    pooled = math.hypot(
        median_interval(list(a.values())).half_width, median_interval(list(b.values())).half_width
    )
    return Lead(median_interval(ratios), pooled, disturbed)


def sweep_noise(intervals: Sequence[Interval]) -> float | None:
    """The sweep's noise: the median relative half-width of its levels' intervals (None: nothing
    was measured twice)."""
    widths = [i.half_width for i in intervals if i.n >= 2]
    return float(np.median(widths)) if widths else None


def _pct(fraction: float) -> str:
    """A relative figure as a percentage that never reads 0% for a noise that is not zero."""
    pct = 100 * fraction
    return f"{pct:.0f}%" if pct >= 1 or pct == 0 else f"{pct:.1g}%"


@dataclass(frozen=True)
class Drift:
    """Plain decoding at one level, measured at the sweep's start and at its end."""

    concurrency: int
    start: float
    end: float
    noise: float
    """That level's relative noise over the sweep's rounds."""
    disturbed: bool = False
    """Whether the start or the end measurement ran while others disturbed the machine."""
    assumed: bool = False
    """Whether `noise` is the one assumed for a level measured once (its noise was not measured)."""

    @property
    def change(self) -> float:
        return self.end / self.start - 1 if self.start else 0.0

    @property
    def drifted(self) -> bool:
        return abs(self.change) > max(self.noise, 0.0)

    def sentence(self) -> str:
        head = (
            f"plain decoding at {self.concurrency} concurrent measured {self.start:.0f} tok/s at the "
            f"start of the sweep and {self.end:.0f} at its end ({100 * self.change:+.0f}%"
        )
        seen = "; other processes were seen at the start or the end" if self.disturbed else ""
        noise = f"±{_pct(self.noise)} " + (
            "assumed: the level was measured once" if self.assumed else "noise"
        )
        its = "the" if self.assumed else "its"
        if self.drifted:
            changed = "the machine changed under the sweep"
            return f"{head}, beyond {its} {noise}{seen}): {changed}"
        if self.noise > DRIFT_SEEN:
            unseen = f"cannot tell at this noise (a drift of up to ±{_pct(self.noise)} would not show)"
            return f"{head}, within {its} {noise}{seen}): {unseen}"
        return f"{head}, within {its} {noise}{seen}): no drift"

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "change_pct": 100 * self.change, "drifted": self.drifted}
