"""Time left in stage 3, counted in output tokens, not rows: the rows of one job differ tenfold in
length across sources, so a bar that counts rows says "10 minutes" at the start of a job whose long
answers were sent first (stage 3's order) and "1 minute" an hour later.

    eta = TokenEta.for_work(model, sources, prompt_tokens)   # kit.prompts.lengths predicts each
    eta.answered(item, completion_tokens)                      # as each answer lands (None: failed)
    eta.seconds(tok_s)                                          # at each tick of the timeline

The tokens left are the predicted output tokens of the work not answered yet, corrected by what the
answered work made against what it was predicted to make; over the recent output tokens/s, smoothed
(`SMOOTHING`). No time is said before `MIN_ANSWERED` answers have landed: before them both halves
are guesses (the lengths predicted, not made; the rate of a loop still filling its batch), and the
demo's first time left said 31 min for a job that took 45 s. Shown in the progress bar and kept in the
timeline (`eta_s`, `tokens_left`), which notebook 03's view reads while a run is going.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.generate.work_item import WorkItem
from kit.prompts.lengths import LengthModel

MIN_ANSWERED = 16
"""Answers before their made / predicted tokens correct the rest's prediction."""
SMOOTHING = 0.3
"""Weight of the newest tokens/s in the moving average."""


@dataclass
class TokenEta:
    model: LengthModel
    left_predicted: float
    done_predicted: float = 0.0
    done_made: float = 0.0
    answered_n: int = 0
    tok_s: float | None = None

    @classmethod
    def for_work(cls, model: LengthModel, sources: Iterable[str], prompt_tokens: Iterable[Any]) -> TokenEta:
        """For the work items of these sources and prompt lengths (one entry per item)."""
        src = np.asarray(list(sources), dtype=object).astype(str)
        tok = np.asarray([np.nan if t is None else t for t in prompt_tokens], dtype=float)
        predicted = model.predict(src, tok) if len(src) else np.array([])
        return cls(model, float(np.nan_to_num(predicted, posinf=0.0).sum()))

    def predicted(self, item: WorkItem) -> float:
        p = self.model.predict(
            np.array([str(item.get("source"))]), np.array([item.get("prompt_tokens") or 0.0])
        )
        return float(p[0]) if np.isfinite(p[0]) else 0.0

    def answered(self, item: WorkItem, made: int | None) -> None:
        """One item answered (`made`: its output tokens; None: it failed, its tokens are not owed)."""
        p = self.predicted(item)
        self.left_predicted = max(0.0, self.left_predicted - p)
        if made is not None:
            self.done_predicted += p
            self.done_made += made
            self.answered_n += 1

    def tokens_left(self) -> float:
        if self.answered_n >= MIN_ANSWERED and self.done_predicted > 0:
            return self.left_predicted * self.done_made / self.done_predicted
        return self.left_predicted

    def seconds(self, tok_s: float | None) -> float | None:
        """Seconds left at the recent tokens/s (`tok_s`: the newest sample's); None while unknown and
        before `MIN_ANSWERED` answers (the rate is smoothed from then on)."""
        if self.answered_n < MIN_ANSWERED:
            return None
        if tok_s is not None and tok_s > 0:
            self.tok_s = tok_s if self.tok_s is None else SMOOTHING * tok_s + (1 - SMOOTHING) * self.tok_s
        if not self.tok_s:
            return None
        return self.tokens_left() / self.tok_s
