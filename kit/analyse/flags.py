"""Quality flags on generated rows: one boolean column per flag, True where the row looks wrong.

- `empty`: the completion is empty or only whitespace.
- `duplicate`: the completion (non-empty) is exactly the same as another row's; every copy is flagged.
- `repeats_prompt`: the completion contains the last user message verbatim (after folding case and
  whitespace), i.e. the model echoed its input instead of answering.
- `refusal`: the completion matches one of `AnalyseParams.refusal_patterns` (case-insensitive).
- `tool_call_broken`: a function-calling row (`tools` set) has a `<tool_call>` block whose body is
  not JSON, or a block that is opened and never closed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd

from kit.errors import ParamsError
from kit.params import AnalyseParams

FLAGS = ("empty", "duplicate", "repeats_prompt", "refusal", "tool_call_broken")
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
MIN_ECHO_CHARS = 16
"""A prompt shorter than this counts as repeated only when the completion equals it."""


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


def flag_empty(df: pd.DataFrame) -> pd.Series:
    """True where the completion is empty or whitespace only."""
    return df["completion"].str.strip().eq("")


def flag_duplicate(df: pd.DataFrame) -> pd.Series:
    """True for every row whose non-empty completion also appears in another row."""
    nonempty = ~flag_empty(df)
    return df["completion"].duplicated(keep=False) & nonempty


def _echoes(prompt: str, completion: str) -> bool:
    p, c = _fold(prompt), _fold(completion)
    if not p or not c:
        return False
    return p == c if len(p) < MIN_ECHO_CHARS else p in c


def flag_repeats_prompt(df: pd.DataFrame) -> pd.Series:
    """True where the completion contains the last user message verbatim (case and spaces folded)."""
    values = [_echoes(last_user_text(m), c) for m, c in zip(df["messages"], df["completion"], strict=True)]
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


def flag_refusal(df: pd.DataFrame, patterns: list[str]) -> pd.Series:
    """True where the completion matches any refusal pattern (re.search, case-insensitive)."""
    compiled = compile_patterns(patterns)
    values = [any(p.search(c) for p in compiled) for c in df["completion"]]
    return pd.Series(values, index=df.index, dtype=bool)


def tool_call_problem(completion: str) -> str | None:
    """Why the `<tool_call>` blocks of a completion are broken, or None when all parse as JSON."""
    if completion.count("<tool_call>") != completion.count("</tool_call>"):
        return "unclosed <tool_call>"
    for body in TOOL_CALL.findall(completion):
        try:
            json.loads(body)
        except json.JSONDecodeError as e:
            return f"invalid JSON: {e.msg}"
    return None


def is_function_calling(tools: Any) -> bool:
    """A row is function-calling when its `tools` field is a non-empty JSON list or string."""
    if tools is None or (isinstance(tools, float) and pd.isna(tools)):
        return False
    text = str(tools).strip()
    return text not in ("", "[]", "null", "None")


def flag_tool_call_broken(df: pd.DataFrame) -> pd.Series:
    """True on function-calling rows whose `<tool_call>` blocks do not parse."""
    values = [
        is_function_calling(t) and tool_call_problem(c) is not None
        for t, c in zip(df["tools"], df["completion"], strict=True)
    ]
    return pd.Series(values, index=df.index, dtype=bool)


def compute_flags(df: pd.DataFrame, params: AnalyseParams | None = None) -> pd.DataFrame:
    """All flags as a boolean DataFrame aligned with `df` (columns: FLAGS)."""
    params = params or AnalyseParams()
    return pd.DataFrame(
        {
            "empty": flag_empty(df),
            "duplicate": flag_duplicate(df),
            "repeats_prompt": flag_repeats_prompt(df),
            "refusal": flag_refusal(df, params.refusal_patterns),
            "tool_call_broken": flag_tool_call_broken(df),
        },
        index=df.index,
    )


def flag_counts(df: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Flagged rows per source (rows: sources, columns: FLAGS, plus 'function_calling' rows)."""
    counts = flags.astype(int).groupby(df["source"]).sum()
    fc = pd.Series([is_function_calling(t) for t in df["tools"]], index=df.index).astype(int)
    counts["function_calling"] = fc.groupby(df["source"]).sum()
    return counts.reindex(columns=[*FLAGS, "function_calling"], fill_value=0)
