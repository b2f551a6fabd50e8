"""The run's timeline (`metrics.parquet`): rows, tokens/s, requests in flight, engine gauges.

One sample every `interval_s` (cheap: counters the loop keeps, and the engine's gauges fetched
and parsed off the event loop); a resumed run appends a new `session` to the samples already
saved, so throughput over time covers the whole job across interruptions. Saving happens in the
shard writer's thread. A timeline that cannot be read is set aside
(`metrics.parquet.unreadable-<time>`) rather than stopping the run.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kit.engines.spec_metrics import VLLM_ACCEPTED, VLLM_DRAFTS
from kit.generate.store import now_utc
from kit.runfolder import atomic_path, unreadable_copy

log = logging.getLogger(__name__)

ENGINE_GAUGES = {
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "num_running_reqs",
    "sglang:num_queue_reqs": "num_queue_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:spec_accept_length": "accept_length",
    "sglang:cache_hit_rate": "cache_hit_rate",
    "vllm:num_requests_running": "num_running_reqs",
    "vllm:num_requests_waiting": "num_queue_reqs",
}


def load_timeline(path: Path) -> pd.DataFrame:
    """The samples saved so far; an unreadable file is set aside with a warning, never fatal."""
    if not path.exists():
        return pd.DataFrame()
    try:
        frame = pq.read_table(path).to_pandas()
        if len(frame) and not {"session", "t_s"} <= set(frame.columns):
            raise ValueError("it has no session / t_s columns")
        return frame
    except (pa.ArrowException, OSError, ValueError) as e:
        aside = unreadable_copy(path)
        path.rename(aside)
        log.warning("%s is not a readable timeline (%s); moved to %s, a new one starts", path, e, aside)
        return pd.DataFrame()


class Timeline:
    def __init__(self, path: Path, interval_s: float = 2.0) -> None:
        self.path = path
        self.interval_s = interval_s
        self.previous = load_timeline(path)
        self.session = int(self.previous["session"].max()) + 1 if len(self.previous) else 1
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self._last = (self.t0, 0, 0)
        self._spec: tuple[float, float] | None = None

    def sample(self, stats: Any, engine: dict[str, float]) -> None:
        now = time.monotonic()
        t_prev, rows_prev, tok_prev = self._last
        dt = max(now - t_prev, 1e-9)
        row = {
            "session": self.session,
            "at": now_utc(),
            "t_s": now - self.t0,
            "rows_done": stats.rows,
            "output_tokens_done": stats.output_tokens,
            "rows_s": (stats.rows - rows_prev) / dt,
            "tok_s": (stats.output_tokens - tok_prev) / dt,
            "in_flight": stats.in_flight,
            "failures": stats.failures,
        }
        for key, name in ENGINE_GAUGES.items():
            if key in engine:
                row[name] = engine[key]
        accept = self._counter_accept_length(engine)
        if accept is not None:
            row["accept_length"] = accept
        self.samples.append(row)
        self._last = (now, stats.rows, stats.output_tokens)

    def _counter_accept_length(self, engine: dict[str, float]) -> float | None:
        """vLLM's accept length since the previous sample, from its draft / accepted counters."""
        if VLLM_DRAFTS not in engine or VLLM_ACCEPTED not in engine:
            return None
        now = (engine[VLLM_DRAFTS], engine[VLLM_ACCEPTED])
        before, self._spec = self._spec, now
        if before is None or now[0] <= before[0]:
            return None
        return 1.0 + (now[1] - before[1]) / (now[0] - before[0])

    def last(self) -> dict[str, Any]:
        return self.samples[-1] if self.samples else {"tok_s": 0.0}

    def save(self) -> None:
        """Rewrite metrics.parquet atomically; safe to call from the shard writer's thread."""
        samples = list(self.samples)  # a snapshot: the event loop may append while this runs
        if not samples:
            return
        frame = pd.DataFrame(samples)
        if len(self.previous):
            frame = pd.concat([self.previous, frame], ignore_index=True)
        with atomic_path(self.path) as tmp:
            frame.to_parquet(tmp, index=False)
