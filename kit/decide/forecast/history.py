"""A forecast's interval widened by how far the forecasts of earlier, comparable runs were off: split
conformal, on the wall-time errors the kit judged at the end of each (summary.json's
`forecast_check`, kit.decide.forecast.check).

    past = judged_history(params, folder, decision)   # kit.decide.forecast.inputs reads it
    f = with_history(forecast, past)                   # the interval at least as wide as the past's errors

The interval the simulation gives carries the sweep's noise (kit.decide.forecast.job.speed_spread); a
job's own run-to-run spread can be larger (on a 2-CPU machine, 8-17 s jobs of vLLM's CPU build erred
-22% to +33% where the sweep's intervals said a few percent: docs/lab/forecast.md). So, where the
outputs root holds at least `MIN_RUNS` judged runs comparable to this one (`Comparable`: the same
engine flavor, model (its config.json's hash), GPU (or `cpu`), GPUs in all and host CPU count), the
generating part of each arm's interval is widened to hold every time T with |forecast - T| / T <= q,
q the ceil((n+1) * `COVERAGE`)-th smallest of the n past |errors| (so that, the runs exchangeable, a
new actual falls inside with probability at least `COVERAGE`): [f / (1 + q), f / (1 - q)], never
narrowed. With fewer, the interval stays as it is and the forecast says so and how many would widen
it. The past runs are read once, when the forecast is made; their errors are of whichever forecast
the kit of their day made.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kit.artifacts import ArmForecast, Decision
from kit.params import RunParams
from kit.runfolder import RunFolder

COVERAGE = 0.8
"""The share of actuals the interval should hold: the simulation's own interval is its 10th-90th."""


def rank_of(n: int) -> int:
    """Which smallest of n past errors bounds the interval: ceil((n+1) * COVERAGE)."""
    return math.ceil(round((n + 1) * COVERAGE, 9))


MIN_RUNS = next(n for n in range(1, 1000) if rank_of(n) <= n)
"""The fewest past errors whose ceil((n+1) * COVERAGE)-th smallest exists (4 at 0.8)."""
HIGHEST = 10.0
"""An upper bound at most this many times the forecast (q >= 0.9: the past allows any slowness)."""


@dataclass(frozen=True)
class Comparable:
    """What makes another run's forecast error a sample of this one's: engine flavor, model, the GPU
    (decision.json's hardware name, `cpu` without one), GPUs in all, the host's logical CPUs."""

    flavor: str | None
    model: str | None
    """The model's config.json hash (16 digits of sha256), else its folder."""
    hardware: str | None
    gpus: int
    cpus: int | None

    def matches(self, other: Comparable) -> bool:
        cpus = self.cpus is None or other.cpus is None or self.cpus == other.cpus
        return cpus and (self.flavor, self.model, self.hardware, self.gpus) == (
            other.flavor,
            other.model,
            other.hardware,
            other.gpus,
        )

    def said(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "model": self.model,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "cpus": self.cpus,
        }


@dataclass(frozen=True)
class History:
    """The comparable judged runs found: their names and |wall-time errors| (%), in name order."""

    like: Comparable
    runs: list[str] = field(default_factory=list)
    errors_pct: list[float] = field(default_factory=list)

    @property
    def rank(self) -> int:
        """Which smallest error bounds the interval: ceil((n+1) * COVERAGE)."""
        return rank_of(len(self.errors_pct))

    def quantile(self) -> float | None:
        """The `rank`-th smallest |error| as a share, or None with fewer than `MIN_RUNS` runs."""
        if len(self.errors_pct) < MIN_RUNS or self.rank > len(self.errors_pct):
            return None
        return sorted(self.errors_pct)[self.rank - 1] / 100

    def said(self) -> dict[str, Any]:
        """decision.json's `forecast.history`."""
        q = self.quantile()
        return {
            "comparable": self.like.said(),
            "judged_runs": len(self.runs),
            "runs": self.runs,
            "needed": MIN_RUNS,
            "rank": self.rank if q is not None else None,
            "error_pct": round(100 * q, 1) if q is not None else None,
        }


def model_identity(model_path: str | Path) -> str:
    """The model's config.json hash as a run's manifest records it, else its folder as text."""
    cfg = Path(model_path) / "config.json"
    return hashlib.sha256(cfg.read_bytes()).hexdigest()[:16] if cfg.is_file() else str(model_path)


def run_comparable(folder: RunFolder) -> Comparable | None:
    """What a finished run was: from its manifest (engine, model), decision (GPU, layout), probe."""
    manifest = folder.read_manifest(lenient=True)
    decision = folder.read_decision(lenient=True)
    if manifest is None or decision is None or decision.forecast is None:
        return None
    probe = folder.read_probe(lenient=True)
    engine = manifest.engine or {}
    f = decision.forecast
    return Comparable(
        flavor=engine.get("flavor") or decision.engine_flavor,
        model=engine.get("model_config_hash") or engine.get("model"),
        hardware=decision.hardware.get("name"),
        gpus=f.replicas * f.gpus_per_replica,
        cpus=probe.host.get("cpu_logical") if probe is not None else None,
    )


def this_run(params: RunParams, folder: RunFolder, decision: Decision) -> Comparable:
    eng = params.engine
    probe = folder.read_probe(lenient=True)
    return Comparable(
        flavor=eng.flavor,
        model=model_identity(params.model.path),
        hardware=decision.hardware.get("name"),
        gpus=eng.replicas * max(1, eng.tp_size * eng.dp_size),
        cpus=probe.host.get("cpu_logical") if probe is not None else None,
    )


def judged_history(params: RunParams, folder: RunFolder, decision: Decision) -> History:
    """The judged runs beside this one under its outputs root comparable to it (never itself)."""
    like = this_run(params, folder, decision)
    runs, errors = [], []
    root = folder.root.resolve().parent
    for summary_path in sorted(root.glob("*/summary.json")):
        other = RunFolder(summary_path.parent)
        if other.root.resolve() == folder.root.resolve():
            continue
        summary = other.read_summary(lenient=True)
        check = summary.forecast_check if summary is not None else None
        if check is None or not check.judged or check.wall_error_pct is None:
            continue
        seen = run_comparable(other)
        if seen is not None and like.matches(seen):
            runs.append(other.root.name)
            errors.append(abs(float(check.wall_error_pct)))
    return History(like, runs, errors)


def widened_arm(arm: ArmForecast, q: float, gpus: int) -> ArmForecast:
    """The arm with its generating time's interval at least [f / (1 + q), f / (1 - q)]."""
    start = arm.startup_s
    f = arm.wall_s - start
    lo = min(arm.wall_lo_s - start, f / (1 + q))
    hi = max(arm.wall_hi_s - start, f / (1 - q) if q < 1 - 1 / HIGHEST else f * HIGHEST)
    lo_s, hi_s = round(lo + start, 1), round(hi + start, 1)
    return replace(
        arm,
        wall_lo_s=lo_s,
        wall_hi_s=hi_s,
        gpu_hours_lo=round(lo_s * gpus / 3600, 3),
        gpu_hours_hi=round(hi_s * gpus / 3600, 3),
    )


def interval_words(history: Mapping[str, Any] | None) -> str:
    """What the intervals carry, for the forecast's sentence: '' where no history was read."""
    if not history:
        return ""
    n = history.get("judged_runs", 0)
    if history.get("error_pct") is None:  # short: the index page's first screen holds it
        return f"; interval: the sweep's noise only ({n} of {history.get('needed')} judged runs)"
    return f"; interval widened by {n} judged runs' errors (±{history['error_pct']:.0f}%)"
