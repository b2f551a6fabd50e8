"""Tool calls of a row: the ones the engine parsed (`tool_calls`, OpenAI shape, JSON text) and the
`<tool_call>{...}</tool_call>` blocks left in the answer text when no tool-call parser ran.

A call is broken when its JSON does not parse, its `arguments` is not a JSON object, or its name
is not among the tools the prompt offered (`tools`, a JSON list of tool schemas).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pandas as pd

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA


def is_function_calling(tools: Any) -> bool:
    """A row is function-calling when its `tools` field is a non-empty JSON list or string."""
    if _missing(tools):
        return False
    text = str(tools).strip()
    return text not in ("", "[]", "null", "None")


def tool_names(tools: Any) -> frozenset[str] | None:
    """Names of the tools a prompt offered: an empty set for none, None when `tools` is not readable JSON."""
    if not is_function_calling(tools):
        return frozenset()
    return _names_of(tools) if isinstance(tools, str) else _names_of_schemas(tools)


@functools.lru_cache(maxsize=4096)
def _names_of(tools: str) -> frozenset[str] | None:
    """tool_names of a JSON text (cached: a source offers a few tool sets over many rows)."""
    try:
        schemas = json.loads(tools)
    except json.JSONDecodeError:
        return None
    return _names_of_schemas(schemas)


def _names_of_schemas(schemas: Any) -> frozenset[str] | None:
    if isinstance(schemas, dict):
        schemas = [schemas]
    if not isinstance(schemas, list):
        return None
    names = set()
    for s in schemas:
        fn = s.get("function", s) if isinstance(s, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            names.add(str(fn["name"]))
    return frozenset(names) if names else None  # schemas of a shape without names: names unknown


def load_calls(value: Any) -> tuple[list[Any] | None, str | None]:
    """The engine's parsed calls as a list (None when there are none), and why they are unreadable."""
    if _missing(value):
        return None, None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            return None, f"tool_calls is not valid JSON: {e.msg}"
    if hasattr(value, "tolist"):
        value = value.tolist()
    if value is None or value == []:
        return None, None
    if not isinstance(value, list):
        return None, f"tool_calls is not a list but {type(value).__name__}"
    return value, None


def call_problem(call: Any, names: frozenset[str] | None) -> str | None:
    """Why one call ({"function": {name, arguments}} or {name, arguments}) is broken, or None."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not fn.get("name"):
        return "a call without a function name"
    name = str(fn["name"])
    if names is not None and name not in names:
        offered = ", ".join(sorted(names)) or "none"
        return f"call to '{name}', not among the prompt's tools ({offered})"
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return f"'{name}': arguments are not valid JSON ({e.msg})"
    if args is not None and not isinstance(args, dict):
        return f"'{name}': arguments are not a JSON object"
    return None


def text_call_problem(answer: str, names: frozenset[str] | None = None) -> str | None:
    """Why the `<tool_call>` blocks of an answer text are broken, or None when all are sound."""
    if answer.count("<tool_call>") != answer.count("</tool_call>"):
        return "unclosed <tool_call>"
    for body in TOOL_CALL.findall(answer):
        try:
            call = json.loads(body)
        except json.JSONDecodeError as e:
            return f"invalid JSON: {e.msg}"
        problem = call_problem(call, names)
        if problem:
            return problem
    return None


def _calls_problem(tools: Any, calls: list[Any] | None, answer: str, function_calling: bool) -> str | None:
    """The parsed calls judged first (any row), then the answer's `<tool_call>` blocks
    (function-calling rows only, as a plain answer may quote the tag)."""
    names = tool_names(tools)
    for call in calls or []:
        problem = call_problem(call, names)
        if problem:
            return problem
    return text_call_problem(answer, names) if function_calling else None


def row_calls(tools: Any, tool_calls: Any, answer: str) -> tuple[bool, bool, bool, str | None]:
    """(function-calling, engine parsed a call, `<tool_call>` in the answer, why broken or None) of a row."""
    function_calling, in_text = is_function_calling(tools), "<tool_call>" in answer
    if _missing(tool_calls) and not in_text:
        return function_calling, False, False, None
    calls, unreadable = load_calls(tool_calls)
    problem = unreadable or _calls_problem(tools, calls, answer, function_calling)
    return function_calling, bool(calls), in_text, problem


def column_or_nulls(df: pd.DataFrame, name: str) -> pd.Series:
    """A column of `df`, or nulls where a hand-made frame lacks it."""
    return df[name] if name in df else pd.Series(None, index=df.index, dtype=object)


def call_table(df: pd.DataFrame, answers: pd.Series) -> pd.DataFrame:
    """Per row (answers: the completion without its think block): `function_calling` (tools
    offered), `parsed_calls` (the engine parsed a call), `text_calls` (a `<tool_call>` block in the
    answer), `has_call` (either), `call_problem` (why the calls are broken, or None)."""
    tools, calls = column_or_nulls(df, "tools").tolist(), column_or_nulls(df, "tool_calls").tolist()
    rows = [row_calls(t, c, a) for t, c, a in zip(tools, calls, answers.tolist(), strict=True)]
    fc, parsed, text, problems = (list(col) for col in zip(*rows, strict=True)) if rows else ([],) * 4
    out = pd.DataFrame(
        {
            "function_calling": pd.Series(fc, index=df.index, dtype=bool),
            "parsed_calls": pd.Series(parsed, index=df.index, dtype=bool),
            "text_calls": pd.Series(text, index=df.index, dtype=bool),
        }
    )
    out["has_call"] = out["parsed_calls"] | out["text_calls"]
    out["call_problem"] = pd.Series(problems, index=df.index, dtype=object)
    return out
