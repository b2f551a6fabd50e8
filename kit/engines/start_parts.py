"""What a server's start spent its time on, read from its log: the pieces each flavor's
`Flavor.start_parts` assembles (durations the engine logs, summed over its lines, and spans between
two of its timestamped lines). Only parts the log shows come back; the caller has the total.

    FLAVORS["sglang"].start_parts(log)   # {"weights_s": 0.32, "graphs_s": 62.07, "warmup_s": 29.0}
    server.start_parts()                 # the same over a ServerProcess's latest start
"""

from __future__ import annotations

import datetime as dt
import re

NUMBER = r"(\d+(?:\.\d+)?)"
"""A duration as the engines print it (`%.2f`, `%.0f`, `%.6f`)."""
TIME = "%Y-%m-%d %H:%M:%S"
"""A log line's timestamp, to the second."""


def summed(log: str, pattern: re.Pattern[str]) -> float | None:
    """The sum of `pattern`'s first group over every line it matches (None when none does)."""
    found = [float(m.group(1)) for m in pattern.finditer(log)]
    return round(sum(found), 3) if found else None


def stamped(
    log: str, line: re.Pattern[str], stamp: re.Pattern[str], fmt: str = TIME, year: str = ""
) -> list[dt.datetime]:
    """The timestamps (`stamp`'s first group, read with `fmt`) of the lines that match `line`;
    `year` ("2000-") goes in front of a stamp that has none (vLLM's)."""
    out = []
    for text in log.splitlines():
        if line.search(text) and (m := stamp.search(text)):
            try:
                out.append(dt.datetime.strptime(year + m.group(1), fmt))
            except ValueError:
                continue
    return out


def span(starts: list[dt.datetime], ends: list[dt.datetime]) -> float | None:
    """Seconds from the last of `starts` to the first of `ends` after it (None when either is
    missing); to the second, as the engines stamp their lines."""
    if not starts:
        return None
    later = [e for e in ends if e >= starts[-1]]
    return (later[0] - starts[-1]).total_seconds() if later else None


def parts(**found: float | None) -> dict[str, float]:
    """The parts the log showed, without those it did not."""
    return {name: value for name, value in found.items() if value is not None}
