"""Output tokens generated over a span of time, each row's tokens spread evenly over its life (from its
finish less its latency to its finish).

A counter of tokens taken as rows finish (the timeline's `output_tokens_done`) puts a request's whole
answer at its last moment: over a phase shorter than a request's life it reads as a burst or a lull.
The demo's tail of 11 s, beside requests of 30-90 s, read 77 tok/s against 24 at full load (316% of
"full"): the rows that finished in it had been generated mostly before it. Spread over their lives,
the tail's tokens are what was generated in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

NEEDS = ("finished_at", "latency_s", "completion_tokens")
"""The row facts the spreading needs (stage 4's frame holds them)."""


def tokens_in_spans(
    rows: pd.DataFrame, t0: pd.Timestamp, spans: Sequence[tuple[float, float]]
) -> list[float] | None:
    """Tokens generated in each span (seconds after `t0`, the spans' clock), each row's tokens spread
    evenly over its life; a row of no duration counts where it finished. None where the rows lack a
    finish time, a latency or a token count (nothing to spread)."""
    if not set(NEEDS) <= set(rows.columns):
        return None
    r = rows.dropna(subset=list(NEEDS))
    if r.empty:
        return None
    end = (pd.to_datetime(r["finished_at"], utc=True) - t0).dt.total_seconds().to_numpy(float)
    life = np.clip(pd.to_numeric(r["latency_s"], errors="coerce").to_numpy(float), 0.0, None)
    tokens = pd.to_numeric(r["completion_tokens"], errors="coerce").to_numpy(float)
    start, lasted = end - life, life > 0
    out = []
    for a, b in spans:
        overlap = np.clip(np.minimum(end, b) - np.maximum(start, a), 0.0, None)
        share = np.where(lasted, overlap / np.where(lasted, life, 1.0), (end > a) & (end <= b))
        out.append(float(np.nansum(tokens * share)))
    return out


AGREE = 0.9
"""Rows finishing within a session over those its counter counted, below which the two clocks are
taken to disagree (the rows are then not used)."""


def _same_rows(rows: pd.DataFrame, t0: pd.Timestamp, frame: pd.DataFrame) -> bool:
    """Whether the rows that finished within the session's span are, within `AGREE`, the rows its
    counter (`rows_done`) counted: the rows and the timeline then tell of the same requests."""
    counted = frame["rows_done"].to_numpy(float)
    if "finished_at" not in rows.columns or not len(counted) or np.isnan(counted[-1] - counted[0]):
        return False
    t = frame["t_s"].to_numpy(float)
    end = (pd.to_datetime(rows["finished_at"], utc=True) - t0).dt.total_seconds()
    within = float(((end >= t[0]) & (end <= t[-1])).sum())
    expected = counted[-1] - counted[0]
    return expected > 0 and min(within, expected) / max(within, expected) >= AGREE


def _rate(amount: float, span: float) -> float | None:
    return round(float(amount / span), 3) if span > 0 and not math.isnan(amount) else None


def phase_rates(
    frame: pd.DataFrame, t0: pd.Timestamp | None, rows: pd.DataFrame | None, i: int
) -> tuple[float | None, float | None, str]:
    """Tokens/s before and after point `i` of a session's load (`frame`: t_s, tokens_done): full load,
    then the tail. Each row's tokens spread over its life where the rows say when they ran (`t0`: the
    clock at t_s 0) and agree with the counter on how many finished in it, else as the counter took
    them, when rows finished; and which of the two."""
    t = frame["t_s"].to_numpy(float)
    start, end = t[i], t[-1]
    spans = [(t[0], start), (start, end)]
    agree = rows is not None and t0 is not None and _same_rows(rows, t0, frame)
    spread = tokens_in_spans(rows, t0, spans) if agree else None
    if spread is not None:
        return _rate(spread[0], start - t[0]), _rate(spread[1], end - start), "rows' lives"
    tok = frame["tokens_done"].to_numpy(float)
    return _rate(tok[i] - tok[0], start - t[0]), _rate(tok[-1] - tok[i], end - start), "finishes"
