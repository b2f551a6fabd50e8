"""The order work is sent in: longest predicted output first, so the longest requests do not start
last and hold the job's tail (`generate.order: longest_first`; `plan` keeps the plan's order).

    model = LengthModel.fit(done_lengths(folder.shard_paths()), caps, default_cap)
    work = longest_first(todo, work, model)      # the same items, longest predicted first

A batch job's wall time is decided at its end as well as at full load: once fewer requests remain
than the engine runs at once, the GPUs run a shrinking batch, and a long request sent last keeps
them nearly idle until it ends. Sending the longest first lets the short ones fill the end.

The prediction is a pure function of what is on disk, so the order is the same on every resume:
each source's mean output length, by prompt-length quartile, over the rows this run already made
(`MIN_ROWS` at least), capped by the source's `max_tokens`. A source with too few rows yet is
predicted from stage 2's sweep answers (`sweep_answers.parquet`: one greedy answer per sampled
prompt, `MIN_ANSWERS` at least; an answer the sweep's own `max_tokens` cut counts as reaching the
source's cap, its true length being unknown but longer), else at its cap (its `max_tokens`, or the
run's). Where every prediction is equal (one cap, no answers), the order is the plan's. Ties keep
the plan's order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)
MIN_ROWS = 8
"""Rows of a source the run must have made before its own lengths predict its others."""
BUCKETS = 4
"""Prompt-length buckets (quantiles of the made rows' prompt tokens) per source."""
MIN_BUCKET_ROWS = 4
"""A bucket with fewer made rows is predicted by its source's mean."""
MIN_ANSWERS = 4
"""Sweep answers of a source that predict it while the run has too few rows of it."""
LENGTH_COLUMNS = ["source", "prompt_tokens", "completion_tokens"]


def done_lengths(paths: list[Path]) -> pd.DataFrame:
    """Source, prompt and completion tokens of every row already made (three columns read per
    shard; a shard without them, or unreadable, is skipped: the prediction only loses its rows)."""
    frames = []
    for path in paths:
        try:
            table = pq.read_table(path, columns=LENGTH_COLUMNS)
        except (OSError, pa.ArrowException, KeyError):
            continue
        frames.append(table.to_pandas())
    if not frames:
        return pd.DataFrame(columns=LENGTH_COLUMNS)
    return pd.concat(frames, ignore_index=True)


@dataclass
class SourceLengths:
    """One source's made rows: its mean output length, and per prompt-length bucket."""

    mean: float
    rows: int
    edges: np.ndarray = field(default_factory=lambda: np.array([]))
    """Inner edges of the prompt-length buckets (ascending)."""
    bucket_means: np.ndarray = field(default_factory=lambda: np.array([]))

    def predict(self, prompt_tokens: np.ndarray) -> np.ndarray:
        if not len(self.edges):
            return np.full(len(prompt_tokens), self.mean)
        return self.bucket_means[np.searchsorted(self.edges, prompt_tokens, side="right")]


@dataclass
class LengthModel:
    """Predicted output tokens of a prompt from its source and prompt length."""

    sources: dict[str, SourceLengths]
    caps: dict[str, int]
    """Output budgets of the sources that set their own (`data.sources[].max_tokens`)."""
    default_cap: int | None
    """The run's `max_tokens`."""

    basis: dict[str, str] = field(default_factory=dict)
    """Per fitted source: 'made rows' or 'sweep answers'."""

    @classmethod
    def fit(
        cls,
        done: pd.DataFrame,
        caps: dict[str, int],
        default_cap: int | None,
        answers: pd.DataFrame | None = None,
        answers_cap: int | None = None,
    ) -> LengthModel:
        """From the rows made (`done`), else the sweep's `answers` (cut at `answers_cap` tokens)."""
        model = cls({}, caps, default_cap)
        done = done.dropna(subset=["completion_tokens"])
        for name, g in done.groupby("source", sort=True):
            if len(g) >= MIN_ROWS:
                model.sources[str(name)] = _source_lengths(g)
                model.basis[str(name)] = "made rows"
        if answers is None or not len(answers):
            return model
        answers = answers.dropna(subset=["completion_tokens", "source"])
        for name, g in answers.groupby("source", sort=True):
            if str(name) in model.sources or len(g) < MIN_ANSWERS:
                continue
            cut = g.finish_reason.eq("length")
            if answers_cap is not None:
                cut |= g.completion_tokens >= answers_cap
            cap = model.cap(str(name))  # a cut answer reached the sweep's budget: its true length is longer
            lengths = g.completion_tokens.where(~cut, cap) if np.isfinite(cap) else g.completion_tokens
            model.sources[str(name)] = _source_lengths(g.assign(completion_tokens=lengths))
            model.basis[str(name)] = "sweep answers"
        return model

    def cap(self, source: str) -> float:
        cap = self.caps.get(source, self.default_cap)
        return float(cap) if cap else np.inf

    def predict(self, sources: np.ndarray, prompt_tokens: np.ndarray) -> np.ndarray:
        """Predicted output tokens per prompt (a source with no made rows: its cap)."""
        out = np.empty(len(sources), dtype=float)
        prompt_tokens = np.nan_to_num(prompt_tokens.astype(float), nan=0.0)
        for name in np.unique(sources):
            at = sources == name
            cap = self.cap(str(name))
            fitted = self.sources.get(str(name))
            guess = fitted.predict(prompt_tokens[at]) if fitted else np.full(at.sum(), cap)
            out[at] = np.minimum(guess, cap)
        return out

    def describe(self) -> dict[str, Any]:
        """For the manifest: what each source's prediction rests on."""
        return {
            name: (
                {"from": self.basis.get(name, "made rows"), "rows": s.rows, "mean_tokens": round(s.mean, 1)}
                if (s := self.sources.get(name))
                else {"from": "max_tokens", "cap": None if self.cap(name) == np.inf else int(self.cap(name))}
            )
            for name in sorted(set(self.sources) | set(self.caps))
        }


def _source_lengths(g: pd.DataFrame) -> SourceLengths:
    out = g.completion_tokens.to_numpy(dtype=float)
    prompt = np.nan_to_num(g.prompt_tokens.to_numpy(dtype=float), nan=0.0)
    edges = np.unique(np.quantile(prompt, np.linspace(0, 1, BUCKETS + 1)[1:-1]))
    bucket = np.searchsorted(edges, prompt, side="right")
    mean = float(out.mean())
    means = np.array(
        [
            out[bucket == b].mean() if (bucket == b).sum() >= MIN_BUCKET_ROWS else mean
            for b in range(len(edges) + 1)
        ]
    )
    return SourceLengths(mean, len(g), edges, means)


def longest_first(
    todo: pa.Table, work: list[tuple[int, int]], model: LengthModel
) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """`work` (row of `todo`, sample index) ordered by predicted output length, longest first, ties
    in the given order; and a summary of the order for the manifest."""
    if not work:
        return work, {"order": "longest_first", "items": 0}
    rows = np.fromiter((r for r, _ in work), dtype=np.int64, count=len(work))
    sources = np.asarray(todo.column("source").to_numpy(zero_copy_only=False), dtype=object)
    prompt = todo.column("prompt_tokens").to_numpy(zero_copy_only=False)
    predicted = model.predict(sources.astype(str), np.asarray(prompt, dtype=float))[rows]
    order = np.argsort(-predicted, kind="stable")  # stable: equal predictions keep the plan's order
    finite = predicted[np.isfinite(predicted)]
    summary = {
        "order": "longest_first",
        "items": len(work),
        "predicted_tokens_first": _num(predicted[order[0]]),
        "predicted_tokens_last": _num(predicted[order[-1]]),
        "predicted_tokens_mean": _num(finite.mean()) if len(finite) else None,
        "changed": bool((order != np.arange(len(order))).any()),
        "by_source": model.describe(),
    }
    return [work[i] for i in order.tolist()], summary


def _num(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 1)
