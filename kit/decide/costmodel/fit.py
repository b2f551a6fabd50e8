"""Fit the cost model's free constants (fields of `Efficiency`) to measurements.

Least squares on log(predicted / measured) (scipy's `least_squares`, trust-region with bounds), so
every point weighs by its relative error. Two sources of measurements:

- a measured sweep of the real engine (`fit_to_sweep`): columns arm, spec_k, concurrency,
  output_tok_s, accept_length; predicted tokens/s by kit.decide.costmodel.predict.throughput;
- a step profile (kit.decide.profile.profiler.calibrate): predicted step times by
  kit.decide.costmodel.step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from kit.columns import OUTPUT_TOK_S, SPEC_K
from kit.decide.costmodel.hardware import DEFAULT_EFFICIENCY, Efficiency
from kit.decide.costmodel.predict import throughput
from kit.decide.costmodel.scenario import Scenario
from kit.errors import CostModelError

BOUNDS = {
    "bw": (0.02, 4.0),
    "flops": (1e-3, 4.0),
    "gemm_half_tokens": (0.0, 4096.0),
    "attn_flops": (1e-3, 4.0),
    "attn_half_rows": (0.0, 4096.0),
    "sharpness": (1.0, 32.0),
    "overhead_s": (0.0, 1.0),
    "layer_s": (0.0, 0.05),
    "allreduce_s": (0.0, 0.01),
    "spec_seq_s": (0.0, 0.01),
    "spec_iter_s": (0.0, 0.05),
    "moe_layer_s": (0.0, 0.01),
    "ngram_seq_s": (0.0, 0.01),
    "draft_pass_s": (0.0, 0.01),
    "expert_s": (0.0, 1e-4),
    "verify_kv_bw": (0.1, 1.0),
}
"""Physical range of each constant a fit may move (fractions of the datasheet, seconds, tokens)."""

SWEEP_FREE = ("overhead_s", "layer_s", "bw", "flops")
"""What a sweep of tokens/s at a few concurrencies can pin down: fixed costs and the two rates."""


def fit_efficiency(
    predict: Callable[[Efficiency], np.ndarray],
    measured: np.ndarray,
    free: Sequence[str],
    start: Efficiency = DEFAULT_EFFICIENCY,
    source: str = "fit",
) -> Efficiency:
    """The `Efficiency` whose `free` fields minimise sum(log(predict(eff) / measured)^2)."""
    from scipy.optimize import least_squares

    measured = np.asarray(measured, dtype=float)
    if len(measured) == 0 or (measured <= 0).any() or not np.isfinite(measured).all():
        raise CostModelError("a fit needs at least one positive, finite measurement")
    unknown = [f for f in free if f not in BOUNDS]
    if unknown:
        raise CostModelError(f"cannot fit {unknown}: free constants are {', '.join(BOUNDS)}")
    lo = np.array([BOUNDS[f][0] for f in free])
    hi = np.array([BOUNDS[f][1] for f in free])
    span = hi - lo
    x0 = np.clip([getattr(start, f) for f in free], lo + 1e-6 * span, hi - 1e-6 * span)

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = replace(start, **dict(zip(free, map(float, x), strict=True)))
        return np.log(predict(eff) / measured)

    result = least_squares(residuals, x0, bounds=(lo, hi), x_scale=np.maximum(np.abs(x0), 1e-4 * span))
    return replace(start, **dict(zip(free, map(float, result.x), strict=True)), source=source)


def _sweep_points(sweep: pd.DataFrame, measured: bool = True) -> pd.DataFrame:
    need = {"arm", SPEC_K, "concurrency", *([OUTPUT_TOK_S] if measured else [])}
    missing = need - set(sweep.columns)
    if missing:
        raise CostModelError(f"sweep table lacks columns {sorted(missing)}; it needs {sorted(need)}")
    ok = sweep[sweep.output_tok_s.notna() & (sweep.output_tok_s > 0)] if measured else sweep
    if "status" in ok:
        ok = ok[ok.status == "ok"]
    spec = ok.spec_k > 0
    if "accept_length" in ok:
        ok = ok[~spec | ok.accept_length.notna()]
    else:
        ok = ok[~spec]
    if ok.empty:
        raise CostModelError("the sweep has no measured point to calibrate on (no ok rows with tokens/s)")
    return ok


def predict_sweep(sweep: pd.DataFrame, s: Scenario) -> np.ndarray:
    """Predicted output tokens/s of the scenario at each sweep row (its arm, concurrency, measured
    accept length)."""
    dp = s.work.dp_size
    out = []
    for r in _sweep_points(sweep, measured=False).itertuples():
        k, C = int(r.spec_k), int(r.concurrency)
        B = math.ceil(C / dp)
        E = float(r.accept_length) if k else 1.0
        out.append(min(C, dp * B) * throughput(s, B, k, E) / B)
    return np.array(out)


def fit_to_sweep(sweep: pd.DataFrame, s: Scenario, free: Sequence[str] = SWEEP_FREE) -> Efficiency:
    """The scenario's efficiency (its `eff` the start) fitted to a measured sweep (columns arm, spec_k,
    concurrency, output_tok_s, accept_length; rows with a `status` other than ok are skipped)."""
    points = _sweep_points(sweep)
    measured = points.output_tok_s.to_numpy(dtype=float)
    return fit_efficiency(
        lambda eff: predict_sweep(points, replace(s, eff=eff)),
        measured,
        free,
        s.eff,
        source=f"fit to {len(points)} measured sweep points",
    )
