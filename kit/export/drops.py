"""Which rows leave the `train` split, and why: the drop rules of `kit export --drop`.

A row takes the first rule it meets, in the order of `RULES`; `duplicate` and the near-duplicate
rules keep one row of each group (the first not dropped by an earlier rule) and drop the others.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from kit.analyse.neardup import extra_in_clusters
from kit.errors import ExportError

RULES = {
    "failed": "the request failed (no completion: failures.jsonl)",
    "unterminated_think": "its thinking never closed (cut by max_tokens, or it stopped while thinking)",
    "empty": "no answer text and no tool call",
    "truncated": "cut by max_tokens (finish_reason length)",
    "tool_call_broken": "a tool call that does not parse or names no offered tool",
    "duplicate": "the same completion as a row kept (exact)",
    "refusal": "the answer matches analyse.refusal_patterns",
    "repeats_prompt": "the answer repeats the prompt",
    "near_duplicate": "an answer that is a near copy of a row kept (MinHash LSH)",
    "near_duplicate_prompt": "a prompt that is a near copy of a row kept's (MinHash LSH)",
}
"""Every drop rule, in the order a row is judged, with what it means. `unterminated_think` comes
before `empty` and `truncated`, which such a row meets too (no answer, cut by max_tokens): its
thinking never closing is the cause to count."""
DEFAULT_DROP = ("failed", "unterminated_think", "empty", "truncated", "tool_call_broken", "duplicate")
NEAR_RULES = {"near_duplicate": "answer_cluster", "near_duplicate_prompt": "prompt_cluster"}


def parse_drop(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """The drop rules named (comma-separated, or `default`, or `none`), in judging order."""
    if text is None:
        return DEFAULT_DROP
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if names == ["none"]:
        return ()
    expanded = [r for n in names for r in (DEFAULT_DROP if n == "default" else (n,))]
    unknown = [n for n in expanded if n not in RULES]
    if unknown:
        raise ExportError(
            f"--drop: unknown rule {', '.join(map(repr, unknown))}: use a comma-separated list of "
            f"{', '.join(RULES)} (or `default`, or `none`)"
        )
    return tuple(r for r in RULES if r in expanded)


def drop_reasons(df: pd.DataFrame, flags: pd.DataFrame, rules: tuple[str, ...]) -> np.ndarray:
    """The drop reason of each row of stage 4's facts (None: it stays in `train`).

    `failed` concerns requests without a row, so it marks none of these."""
    reason = np.full(len(df), None, dtype=object)
    for rule in rules:
        free = pd.isna(reason)
        if rule == "truncated":
            hit = df["finish_reason"].astype(str).eq("length").to_numpy()
        elif rule == "duplicate":
            hit = _repeated(df["completion_hash"].to_numpy(dtype=np.uint64), free)
        elif rule in NEAR_RULES:
            hit = extra_in_clusters(df[NEAR_RULES[rule]].to_numpy(), free)
        elif rule in flags.columns:
            hit = flags[rule].to_numpy(dtype=bool)
        else:
            continue
        reason[free & hit] = rule
    return reason


def _repeated(hashes: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """True for each eligible row whose non-zero hash an earlier eligible row has."""
    rows = np.flatnonzero(eligible & (hashes != 0))
    out = np.zeros(len(hashes), dtype=bool)
    out[rows[pd.Series(hashes[rows]).duplicated(keep="first").to_numpy()]] = True
    return out


def reason_counts(reasons: Iterable[str | None]) -> dict[str, int]:
    """Rows per drop reason (the rows kept left out)."""
    counts = pd.Series([r for r in reasons if r is not None], dtype=object).value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def kept_flag_counts(df: pd.DataFrame, flags: pd.DataFrame, rules: tuple[str, ...]) -> dict[str, int | None]:
    """Of the rows kept (`df` and `flags` of those alone), how many meet each rule not in `rules`
    (for `duplicate` and the near-duplicate ones: rows beyond the first of a group); None for a
    near-duplicate rule whose clusters stage 4 did not make."""
    out: dict[str, int | None] = {}
    for rule in (r for r in RULES if r not in rules and r != "failed"):
        if rule in NEAR_RULES and NEAR_RULES[rule] not in df.columns:
            out[rule] = None
        else:
            out[rule] = int(pd.notna(drop_reasons(df, flags, (rule,))).sum())
    return out
