"""Quality flags on generated rows: one boolean column per flag, True where the row looks wrong.

The answer is the completion without its `<think>` block (kit.analyse.reasoning); text flags are
judged on it, so a run with a reasoning parser and one without flag the same rows.

- `empty`: no answer: the answer text is empty or whitespace, and the engine parsed no tool call.
- `duplicate`: the completion (non-empty) is exactly the same as another row's; every copy is flagged.
- `repeats_prompt`: the answer contains the last user message verbatim (after folding case and
  whitespace), i.e. the model echoed its input instead of answering.
- `refusal`: the answer matches one of `AnalyseParams.refusal_patterns` (case-insensitive).
- `tool_call_broken`: a parsed call (`tool_calls`) or, on a function-calling row, a `<tool_call>`
  block in the answer whose JSON does not parse, whose arguments are not a JSON object, whose name
  is not among the prompt's `tools`, or a block opened and never closed (kit.analyse.toolcalls).
- `unterminated_think`: the row's thinking never closed (kit.analyse.reasoning).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from kit.analyse.reasoning import flag_unterminated_think, reasoning_parts, row_parts
from kit.analyse.toolcalls import is_function_calling
from kit.errors import ParamsError
from kit.params import AnalyseParams

FLAGS = ("empty", "duplicate", "repeats_prompt", "refusal", "tool_call_broken", "unterminated_think")
MIN_ECHO_CHARS = 16
"""A prompt shorter than this counts as repeated only when the answer equals it."""


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def last_user_text(messages: Any) -> str:
    """The content of the last user message in a chat (list of {role, content}), or ''."""
    if messages is None:
        return ""
    for m in reversed(list(messages)):
        if isinstance(m, dict) and m.get("role") == "user":
            return str(m.get("content") or "")
    return ""


def _answers(df: pd.DataFrame, parts: pd.DataFrame | None) -> pd.Series:
    return (parts if parts is not None else reasoning_parts(df))["answer_text"]


def flag_empty(df: pd.DataFrame, parts: pd.DataFrame | None = None) -> pd.Series:
    """True where the answer is empty or whitespace and the engine parsed no tool call."""
    parts = parts if parts is not None else row_parts(df)
    return parts["answer_text"].str.strip().eq("") & ~parts["parsed_calls"]


def flag_duplicate(df: pd.DataFrame) -> pd.Series:
    """True for every row whose non-empty completion also appears in another row."""
    nonempty = df["completion"].str.strip().ne("")
    return df["completion"].duplicated(keep=False) & nonempty


def _echoes(prompt: str, answer: str) -> bool:
    # a cheap first test: an echo holds every word of the prompt, so one word the answer lacks rules
    # it out without folding both texts (most rows)
    probe = max(prompt[:256].lower().split(), key=len, default="")
    if probe and probe not in answer.lower():
        return False
    p, c = _fold(prompt), _fold(answer)
    if not p or not c:
        return False
    return p == c if len(p) < MIN_ECHO_CHARS else p in c


def flag_repeats_prompt(df: pd.DataFrame, parts: pd.DataFrame | None = None) -> pd.Series:
    """True where the answer contains the last user message verbatim (case and spaces folded)."""
    answers = _answers(df, parts)
    pairs = zip(df["messages"].tolist(), answers.tolist(), strict=True)
    values = [_echoes(last_user_text(m), a) for m, a in pairs]
    return pd.Series(values, index=df.index, dtype=bool)


def compile_patterns(patterns: list[str]) -> list[re.Pattern[str]]:
    """Compile refusal patterns; a bad one is a ParamsError naming it."""
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as e:
            raise ParamsError(f"analyse.refusal_patterns: {p!r} is not a valid regex ({e}); fix it") from None
    return out


def flag_refusal(df: pd.DataFrame, patterns: list[str], parts: pd.DataFrame | None = None) -> pd.Series:
    """True where the answer matches any refusal pattern (re.search, case-insensitive)."""
    compiled = compile_patterns(patterns)
    if not compiled:
        return pd.Series(False, index=df.index, dtype=bool)
    try:  # one pass a row; a pattern with inline global flags cannot join an alternation
        compiled = [re.compile("|".join(f"(?:{p.pattern})" for p in compiled), re.IGNORECASE)]
    except re.error:
        pass
    values = [any(p.search(a) for p in compiled) for a in _answers(df, parts).tolist()]
    return pd.Series(values, index=df.index, dtype=bool)


def flag_tool_call_broken(df: pd.DataFrame, parts: pd.DataFrame | None = None) -> pd.Series:
    """True where a parsed call, or a `<tool_call>` block of a function-calling row, is broken."""
    parts = parts if parts is not None and "call_problem" in parts else row_parts(df)
    return parts["call_problem"].notna()


def compute_flags(
    df: pd.DataFrame, params: AnalyseParams | None = None, parts: pd.DataFrame | None = None
) -> pd.DataFrame:
    """All flags as a boolean DataFrame aligned with `df` (columns: FLAGS).

    `parts` is `row_parts(df)` when the caller has it already (computed otherwise).
    """
    params = params or AnalyseParams()
    parts = parts if parts is not None else row_parts(df)
    return pd.DataFrame(
        {
            "empty": flag_empty(df, parts),
            "duplicate": flag_duplicate(df),
            "repeats_prompt": flag_repeats_prompt(df, parts),
            "refusal": flag_refusal(df, params.refusal_patterns, parts),
            "tool_call_broken": flag_tool_call_broken(df, parts),
            "unterminated_think": flag_unterminated_think(df, parts),
        },
        index=df.index,
    )


def flag_counts(df: pd.DataFrame, flags: pd.DataFrame, parts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Flagged rows per source (rows: sources, columns: FLAGS, plus 'function_calling' rows);
    function-calling rows from `parts` (row_parts) when given, else from `df["tools"]`."""
    counts = flags.astype(int).groupby(df["source"]).sum()
    if parts is not None and "function_calling" in parts:
        fc = parts["function_calling"].astype(int)
    else:
        fc = pd.Series([is_function_calling(t) for t in df["tools"]], index=df.index).astype(int)
    counts["function_calling"] = fc.groupby(df["source"]).sum()
    return counts.reindex(columns=[*FLAGS, "function_calling"], fill_value=0)
