"""Timing and depth scaling shared by both profiler backends (kit.decide.profile.profiler and
kit.decide.profile.synthetic_step).

A step is timed plainly (the fastest of its eager runs) or as CUDA graph replays; a model built with `n`
layers is timed at `n` and at a lower depth `n'`, and the difference scales it to the full `N`:
`T_full = T(n) + (N - n) (T(n) - T(n')) / (n - n')`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from typing import Any

import pandas as pd

from kit.arch import ModelArch
from kit.errors import CostModelError


def config_hash(arch: ModelArch) -> str:
    """Short stable hash of the model's shape (what the step time depends on), not its weights; a
    vision tower does not take part in decoding text."""
    skip = ("extra", "architectures", "max_positions", "vision_params")
    fields = {k: v for k, v in asdict(arch).items() if k not in skip}
    blob = json.dumps(fields, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _nothing() -> None:
    return None


def time_eager(step: Any, reps: int, sync: Any, after: Any = _nothing) -> float:
    """The shortest wall time of `reps` steps after one warm-up; `after` runs between steps, untimed.
    The shortest, not the median: what another process takes from a step only ever adds to it (a
    2-core CPU beside a second test run put three steps' median 67% off the calibrated model)."""
    times = []
    for _ in range(reps + 1):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
        after()
    return min(times[1:])


def time_cuda_graph(step: Any, reps: int, after_warmup: Any = _nothing) -> float:
    """Capture one step in a CUDA graph (after a warm-up on a side stream) and time its replays
    with CUDA events, so launch overhead does not pollute the figure."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    after_warmup()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def lower_depth(arch: ModelArch, n: int) -> int:
    """Second depth for the scaling: about n / 2, a whole number of hybrid layer periods."""
    period = arch.layer_types.index("full_attention") + 1 if "full_attention" in arch.layer_types else 1
    lower = max(period, (n // 2) // period * period)
    if lower >= n:
        raise CostModelError(
            f"profile at least {2 * period} layers of this model to scale to full depth (got {n})"
        )
    return lower


def depth_scaled_rows(
    times: dict, depths: list[int], full: int, device: str, chash: str, dtype_bytes: int
) -> pd.DataFrame:
    """One profile row per (B, q, L): the step at the deepest profiled depth scaled to `full` layers.

    `times[depth][(B, q, L)] = (seconds, cuda_graph_used)`; `step_s_per_layer` is the slope the
    scaling used (0 when the full model was profiled)."""
    n = depths[-1]
    rows = []
    for key, (t_n, graph) in times[n].items():
        per_layer = 0.0
        if len(depths) == 2:
            per_layer = max(t_n - times[depths[0]][key][0], 0.0) / (n - depths[0])
        B, q, L = key
        rows.append(
            {
                "B": B,
                "q": q,
                "L": L,
                "step_s": t_n + (full - n) * per_layer,
                "device": device,
                "config_hash": chash,
                "n_layers_profiled": n,
                "n_layers_full": full,
                "step_s_profiled": t_n,
                "step_s_per_layer": per_layer,
                "cuda_graph": graph,
                "dtype_bytes": dtype_bytes,
            }
        )
    return pd.DataFrame(rows)
