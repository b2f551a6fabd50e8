"""The run's timeline (`metrics.parquet`): rows, tokens/s, requests in flight, engine gauges.

Each sample is a `kit.generate.timeline_sample.TimelineSample`, saved as its `to_row()`.

One sample every `interval_s` (cheap: counters the loop keeps, and the engine's gauges fetched
and parsed off the event loop); a resumed run appends a new `session` to the samples already
saved, so throughput over time covers the whole job across interruptions.

Saving appends: during a session the new samples since the last save go to `metrics.jsonl` (in
the shard writer's thread, after each shard), so a long run writes each sample once, not the whole
timeline after every shard; at the session's end (and at the start of the next one, for a session
that crashed) that log is folded into `metrics.parquet`, one rewrite per session. Readers
(`load_timeline`) see both. A timeline that cannot be read is set aside
(`metrics.parquet.unreadable-<time>`) rather than stopping the run.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kit.engines.spec_metrics import VLLM_ACCEPTED, VLLM_DRAFTS
from kit.generate.eta import TokenEta
from kit.generate.store import now_utc
from kit.generate.timeline_sample import SESSION, T_S, TimelineSample
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


def read_log(log: Path) -> pd.DataFrame:
    """The samples appended to a session's log; a line cut short by a crash is skipped."""
    if not log.exists():
        return pd.DataFrame()
    rows = []
    for line in log.read_bytes().splitlines():
        try:
            rows.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    frame = pd.DataFrame(rows)
    if "at" in frame.columns:
        frame["at"] = pd.to_datetime(frame["at"], utc=True, errors="coerce")
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    """The folded samples; an unreadable file is set aside with a warning, never fatal."""
    if not path.exists():
        return pd.DataFrame()
    try:
        frame = pq.read_table(path).to_pandas()
        if len(frame) and not {SESSION, T_S} <= set(frame.columns):
            raise ValueError("it has no session / t_s columns")
        return frame
    except (pa.ArrowException, OSError, ValueError) as e:
        aside = unreadable_copy(path)
        path.rename(aside)
        log.warning("%s is not a readable timeline (%s); moved to %s, a new one starts", path, e, aside)
        return pd.DataFrame()


def load_timeline(path: Path, log_path: Path | None = None) -> pd.DataFrame:
    """Every sample saved so far: `metrics.parquet` and the samples still in a session's log."""
    frames = [f for f in (_read_parquet(path), read_log(log_path) if log_path else None) if f is not None]
    return merge_samples(frames)


def merge_samples(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Timeline samples from several places (metrics.parquet, a session's log) as one frame, each
    sample once: a crash between folding a log and removing it leaves samples in both."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if not {SESSION, T_S} <= set(frame.columns):
        return frame
    return frame.drop_duplicates(subset=[SESSION, T_S], keep="first", ignore_index=True)


def fold_log(path: Path, log_path: Path) -> None:
    """Fold a session's appended samples into `metrics.parquet` (atomically), then drop the log.

    A crash between the two leaves samples in both; load_timeline counts them once.
    """
    if not log_path.exists():
        return
    frame = load_timeline(path, log_path)
    if len(frame):
        with atomic_path(path) as tmp:
            frame.to_parquet(tmp, index=False)
    log_path.unlink()


class Timeline:
    def __init__(self, path: Path, log_path: Path, interval_s: float = 2.0) -> None:
        self.path = path
        self.log_path = log_path
        self.interval_s = interval_s
        fold_log(path, log_path)  # a session that crashed left its samples in the log
        previous = load_timeline(path)
        self.session = int(previous[SESSION].max()) + 1 if len(previous) else 1
        self.samples: list[TimelineSample] = []
        self._saved = 0
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self._last = (self.t0, 0, 0)
        self._spec: tuple[float, float] | None = None

    def sample(
        self, stats: Any, engine: dict[str, float], closing: bool = False, eta: TokenEta | None = None
    ) -> TimelineSample:
        """Take one sample (and return it); `closing`: the session's last, taken when the loop stops,
        whatever the time since the previous one (see `_rates`); `eta`: the time left in output
        tokens at this sample's tokens/s (`eta_s`, `tokens_left`)."""
        now = time.monotonic()
        t_prev, rows_prev, tok_prev = self._last
        rows_s, tok_s = self._rates(
            now - t_prev, stats.rows - rows_prev, stats.output_tokens - tok_prev, closing
        )
        gauges = {name: engine[key] for key, name in ENGINE_GAUGES.items() if key in engine}
        accept = self._counter_accept_length(engine)
        if accept is not None:
            gauges["accept_length"] = accept
        if eta is not None:
            gauges["eta_s"], gauges["tokens_left"] = eta.seconds(tok_s), round(eta.tokens_left())
        sample = TimelineSample(
            session=self.session,
            at=now_utc(),
            t_s=now - self.t0,
            rows_done=stats.rows,
            output_tokens_done=stats.output_tokens,
            rows_s=rows_s,
            tok_s=tok_s,
            in_flight=stats.in_flight,
            failures=stats.failures,
            **gauges,
        )
        self.samples.append(sample)
        self._last = (now, stats.rows, stats.output_tokens)
        return sample

    def _rates(self, dt: float, rows: int, tokens: int, closing: bool) -> tuple[float | None, float | None]:
        """rows/s and tokens/s since the previous sample. A closing sample less than half an interval
        after the previous one has no rates (None): rows and their tokens count when a row finishes,
        so a few rows finishing in a split second read as a spike (1,123 tok/s beside a mean of 84)
        that the throughput plot drew and summary.json called the peak. Its counters are kept."""
        if closing and dt < self.interval_s / 2:
            return None, None
        dt = max(dt, 1e-9)
        return rows / dt, tokens / dt

    def _counter_accept_length(self, engine: dict[str, float]) -> float | None:
        """vLLM's accept length since the previous sample, from its draft / accepted counters."""
        if VLLM_DRAFTS not in engine or VLLM_ACCEPTED not in engine:
            return None
        now = (engine[VLLM_DRAFTS], engine[VLLM_ACCEPTED])
        before, self._spec = self._spec, now
        if before is None or now[0] <= before[0]:
            return None
        return 1.0 + (now[1] - before[1]) / (now[0] - before[0])

    def save(self) -> None:
        """Append the samples taken since the last save to the session's log; safe to call from
        the shard writer's thread (the event loop may append samples while this runs)."""
        with self._lock:
            end = len(self.samples)
            lines = [
                orjson.dumps(r.to_row(), option=orjson.OPT_APPEND_NEWLINE)
                for r in self.samples[self._saved : end]
            ]
            if lines:
                with open(self.log_path, "ab") as f:
                    f.write(b"".join(lines))
            self._saved = end

    def close(self) -> None:
        """Save what is left and fold the session's log into metrics.parquet."""
        self.save()
        with self._lock:
            fold_log(self.path, self.log_path)
