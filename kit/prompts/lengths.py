"""Predicted output tokens per prompt, from its source and prompt length: what stage 3 sends first
(kit.generate.order), how many tokens the job will make (kit.decide.forecast.job) and how long is left
(the live ETA). Read from what is on disk, so the same on every resume.

Each source's mean output length, by prompt-length quartile, over the rows the run already made
(`MIN_ROWS` at least); a source with too few rows yet, from stage 2's answers
(`sweep_answers.parquet`: the pilot's, sampled as the run samples with its own output budget, else
the sweep's greedy ones, `MIN_ANSWERS` at least per source; an answer cut by its `max_tokens` counts
as reaching the source's cap, its true length being unknown but longer), else its cap (its
`max_tokens`, or the run's). Each source also keeps the lengths it was fitted on (`draws`), so a
forecast can draw lengths as the source spreads them, not only its mean.

    model = LengthModel.fit(done_lengths(folder.shard_paths()), caps, default_cap, answers, answers_cap)
    model.predict(sources, prompt_tokens)      # mean output tokens per prompt, capped
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kit.artifacts.manifest_sections import CapBasis, FittedBasis, SourceBasis
from kit.params import RunParams
from kit.runfolder import RunFolder

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
    draws: np.ndarray = field(default_factory=lambda: np.array([]))
    """The output lengths it was fitted on (a cut answer at its cap)."""
    cut: int = 0
    """How many of them were cut by their `max_tokens` (true length unknown, longer)."""

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
            piloted = g[g["pilot"].fillna(False).astype(bool)] if "pilot" in g else g.iloc[:0]
            if len(piloted) >= MIN_ANSWERS:  # sampled as the run samples, at its budget: only these
                g = piloted
            if str(name) in model.sources or len(g) < MIN_ANSWERS:
                continue
            cut = g.finish_reason.eq("length")
            asked = g["max_tokens"] if "max_tokens" in g else pd.Series(answers_cap, index=g.index)
            if answers_cap is not None or "max_tokens" in g:
                cut |= g.completion_tokens >= asked.fillna(answers_cap if answers_cap else np.inf)
            cap = model.cap(str(name))  # a cut answer reached the sweep's budget: its true length is longer
            lengths = g.completion_tokens.where(~cut, cap) if np.isfinite(cap) else g.completion_tokens
            model.sources[str(name)] = _source_lengths(g.assign(completion_tokens=lengths), int(cut.sum()))
            pilot = "pilot" in g and bool(g["pilot"].fillna(False).all())
            model.basis[str(name)] = "pilot answers" if pilot else "sweep answers"
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

    def fitted_on(self, source: str) -> str:
        """What a source's prediction rests on: made rows, pilot answers, sweep answers or max_tokens."""
        return self.basis.get(source, "made rows") if source in self.sources else "max_tokens"

    def describe(self) -> dict[str, SourceBasis]:
        """For the manifest: what each source's prediction rests on."""
        return {name: self._basis(name) for name in sorted(set(self.sources) | set(self.caps))}

    def _basis(self, name: str) -> FittedBasis | CapBasis:
        if s := self.sources.get(name):
            return {"from": self.fitted_on(name), "rows": s.rows, "mean_tokens": round(s.mean, 1)}
        cap = self.cap(name)
        return {"from": "max_tokens", "cap": None if cap == np.inf else int(cap)}


def _source_lengths(g: pd.DataFrame, cut: int = 0) -> SourceLengths:
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
    return SourceLengths(mean, len(g), edges, means, out, cut)


def run_length_model(params: RunParams, folder: RunFolder, made: bool = True) -> LengthModel:
    """A run's predicted output lengths: from the rows it made (`made`), else stage 2's answers (the
    pilot's, else the sweep's cut at `decide.max_tokens`), else each source's max_tokens."""
    caps = {src.name: src.max_tokens for src in params.data.sources if src.max_tokens}
    answers = pd.read_parquet(folder.sweep_answers) if folder.sweep_answers.exists() else None
    done = done_lengths(folder.shard_paths()) if made else pd.DataFrame(columns=LENGTH_COLUMNS)
    return LengthModel.fit(done, caps, params.generate.sampling.max_tokens, answers, params.decide.max_tokens)
