"""One sample of stage 3's timeline as a typed record: `TimelineSample`.

`kit.generate.metrics.Timeline` takes one every few seconds; in the process the loop (growing what it
sends, the tail switch), the decision's premises checked live (kit.generate.premises) and the Ray
driver read its fields. Saved, a sample is a row of `metrics.jsonl` / `metrics.parquet`: `to_row()`
writes it and `from_row()` reads one back. The columns are the fields' names, as every earlier kit
wrote them (an older run folder opens as it did); a gauge the engine did not serve, and the time left
where it was not forecast, is no key of the row (a saved frame gives it back as NaN). Stage 4 reads
the saved frame by these names (`IN_FLIGHT`, `T_S`, `SESSION`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from kit.display import finite

SESSION = "session"
T_S = "t_s"
IN_FLIGHT = "in_flight"
ROWS_DONE = "rows_done"
OUTPUT_TOKENS_DONE = "output_tokens_done"
"""Column names stage 4 (and the timeline's own files) read a saved frame by: fields of TimelineSample."""


@dataclass(frozen=True)
class TimelineSample:
    """What the run did up to one moment of a session, and the engine's gauges then."""

    session: int
    """The run's session (a resumed run appends a new one)."""
    at: datetime | None
    """When it was taken (UTC)."""
    t_s: float
    """Seconds since the session's timeline started."""
    rows_done: int
    output_tokens_done: int
    rows_s: float | None
    """Rows/s since the previous sample; None in a closing sample too close to it (Timeline._rates)."""
    tok_s: float | None
    """Output tokens/s since the previous sample (None as rows_s)."""
    in_flight: int
    """Requests the kit had out (sent, not answered)."""
    failures: int
    gen_throughput: float | None = None
    """The engine's gauges (kit.generate.metrics.ENGINE_GAUGES) summed over replicas; None: not served."""
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    token_usage: float | None = None
    accept_length: float | None = None
    """The engine's accept length: SGLang's gauge, or vLLM's counters since the previous sample."""
    cache_hit_rate: float | None = None
    eta_s: float | None = None
    """Seconds left at this sample's tokens/s (kit.generate.eta), where the run forecasts them."""
    tokens_left: int | None = None

    def to_row(self) -> dict[str, object]:
        """The saved row (a line of metrics.jsonl), keyed by these fields' names in their order:
        every column up to `failures`, a gauge where served, `eta_s` and `tokens_left` where the run
        forecasts (eta_s then even when None: no tokens/s yet)."""
        forecast = self.tokens_left is not None
        row: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None or f.name in _ALWAYS or (forecast and f.name == "eta_s"):
                row[f.name] = value
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TimelineSample:
        """A saved row (a dict of metrics.jsonl, a record of a loaded frame): NaN and missing
        values as None; a row without the columns every kit wrote raises KeyError."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = row.get(f.name)
            if f.name == "at":
                values[f.name] = value
                continue
            number = finite(value)
            if number is None and f.name in _ALWAYS and f.name not in _RATES:
                raise KeyError(f"a timeline row without {f.name}")
            values[f.name] = int(number) if number is not None and f.name in _INTS else number
        return cls(**values)


_ALWAYS = {f.name for f in fields(TimelineSample) if f.default is not None}
"""The columns every sample has (those without a default)."""
_RATES = {"rows_s", "tok_s"}
_INTS = {SESSION, ROWS_DONE, OUTPUT_TOKENS_DONE, IN_FLIGHT, "failures", "tokens_left"}
assert {SESSION, T_S, IN_FLIGHT, ROWS_DONE, OUTPUT_TOKENS_DONE} <= _ALWAYS, "names of TimelineSample's fields"
