"""Prometheus text exposition (`GET /metrics`) parsed into plain numbers.

SGLang (`--enable-metrics`) and vLLM expose counters and gauges such as `sglang:num_running_reqs`,
`sglang:gen_throughput`, `sglang:spec_accept_length`, `vllm:num_requests_running`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_SAMPLE_RE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    """One line of a Prometheus exposition: a metric name, its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float


def parse_samples(text: str) -> list[Sample]:
    """Every sample line of `text` (comments and malformed lines skipped)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if m is None:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        labels = dict(_LABEL_RE.findall(m["labels"] or ""))
        samples.append(Sample(m["name"], labels, value))
    return samples


def parse_prometheus(text: str) -> dict[str, float]:
    """Counters, gauges and histogram `_sum` / `_count` by name, summed over label sets.

    Summing adds up data-parallel ranks (running requests, tokens); for ratios such as
    `token_usage` with several ranks, use `parse_samples` and average yourself. Histogram buckets
    and summary quantiles are left out; NaN values are skipped.
    """
    out: dict[str, float] = {}
    for s in parse_samples(text):
        if s.name.endswith("_bucket") or "quantile" in s.labels or math.isnan(s.value):
            continue
        out[s.name] = out.get(s.name, 0.0) + s.value
    return out
