"""What a row is made of: its reasoning (thinking) and its answer, with their lengths.

The reasoning comes from the `reasoning` column where the engine's reasoning parser split it out,
else from a `<think>...</think>` block left in `completion` (no parser ran). The answer is the
completion without that block. Token lengths come from the engine: `reasoning_tokens` where it
reports them (vLLM), the answer's as `completion_tokens - reasoning_tokens`, or all of
`completion_tokens` for a row that did not think.

`unterminated_think` marks a row whose thinking never closed: a `<think>` opened in the completion
and never closed, or (parser on) reasoning with no answer and no tool call, whether max_tokens cut
it or the model stopped while thinking (transformers serve's parser then keeps the end-of-turn
token in the reasoning: the demo's 8 rows of that shape were counted `empty`). The parser's output
cannot tell such a row from one that closed its thinking on nothing, which has no answer either.
A chat template that opens `<think>` in the prompt leaves no opening tag in the completion; such a
row cut while thinking, without a parser, looks like a plain answer and is not flagged.

The answer never holds a think tag: thinking closed twice leaves what came before the last close
in the reasoning, and the thinking a parser left in the completion before its `</think>` (the demo
with transformers serve: 1 row of 104) joins the parser's reasoning instead of being lost.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kit.analyse.toolcalls import call_table, column_or_nulls

OPEN, CLOSE = "<think>", "</think>"
PART_COLUMNS = (
    "reasoning_text",
    "reasoning_from",
    "answer_text",
    "reasoning_chars",
    "answer_chars",
    "reasoning_tokens",
    "answer_tokens",
    "text_unterminated",
)


def split_think(completion: str) -> tuple[str | None, str, bool]:
    """(reasoning or None, answer, unterminated) of a completion that may hold a `<think>` block.

    A `</think>` with no `<think>` before it closes a block the chat template opened in the prompt.
    """
    start, end = completion.find(OPEN), completion.find(CLOSE)
    if end >= 0 and (start < 0 or start > end):
        reasoning, answer = completion[:end], completion[end + len(CLOSE) :]
    elif start < 0:
        return None, completion.strip(), False
    else:
        end = completion.find(CLOSE, start)
        if end < 0:
            return completion[start + len(OPEN) :].strip(), completion[:start].strip(), True
        reasoning = completion[start + len(OPEN) : end]
        answer = completion[:start] + completion[end + len(CLOSE) :]
    last = answer.rfind(CLOSE)
    if last >= 0:  # closed again: what came before the last close was thinking too
        before = answer[:last].replace(OPEN, "\n").strip()
        reasoning = f"{reasoning.strip()}\n{before}"
        answer = answer[last + len(CLOSE) :]
    return reasoning.strip(), answer.strip(), False


def _present(text: Any) -> bool:
    return isinstance(text, str) and bool(text.strip())


def split_row(reasoning: Any, completion: str) -> tuple[str | None, str | None, str, bool]:
    """(reasoning text, where it came from, answer text, unterminated in the text) of one row; the
    thinking a parser left in the completion before a `</think>` is added to the parser's."""
    think, answer, unterminated = split_think(completion)
    if _present(reasoning):
        more = f"\n{think}" if _present(think) else ""
        return str(reasoning).strip() + more, "parser", answer, unterminated
    if _present(think):
        return think, "text", answer, unterminated
    return None, None, answer, unterminated


def nullable_int(values: pd.Series) -> pd.Series:
    """Numbers as pandas' nullable Int64 (rounded); anything not a number becomes <NA>."""
    return pd.to_numeric(values, errors="coerce").astype("Float64").round().astype("Int64")


def _answer_tokens(completion: pd.Series, reasoning: pd.Series, thought: pd.Series) -> pd.Series:
    """completion - reasoning tokens where the engine counted the reasoning; all completion tokens
    where nothing was thought; null otherwise."""
    answer = (completion - reasoning).clip(lower=0)
    return answer.where(reasoning.notna(), completion.where(~thought)).astype("Int64")


def reasoning_parts(df: pd.DataFrame) -> pd.DataFrame:
    """Per row (aligned with `df`): reasoning and answer text, their lengths in chars and tokens.

    Columns: PART_COLUMNS. `reasoning_from` is 'parser', 'text' or None; `reasoning_chars` is null
    where the row did not think, `reasoning_tokens` where no parser split the reasoning out.
    """
    reasoning, completion = column_or_nulls(df, "reasoning").tolist(), df["completion"].tolist()
    rows = [split_row(r, c) for r, c in zip(reasoning, completion, strict=True)]
    text, source, answer, unterminated = (list(col) for col in zip(*rows, strict=True)) if rows else ([],) * 4
    parts = pd.DataFrame(
        {  # object columns keep None (pandas 3 would infer a string dtype holding NaN)
            "reasoning_text": pd.Series(text, index=df.index, dtype=object),
            "reasoning_from": pd.Series(source, index=df.index, dtype=object),
            "answer_text": pd.Series(answer, index=df.index, dtype=object),
            "text_unterminated": pd.Series(unterminated, index=df.index, dtype=bool),
        }
    )
    has_reasoning = parts["reasoning_text"].notna()
    parts["reasoning_chars"] = parts["reasoning_text"].str.len().where(has_reasoning).astype("Int64")
    parts["answer_chars"] = parts["answer_text"].str.len().astype("Int64")
    from_parser = parts["reasoning_from"].eq(
        "parser"
    )  # an engine's count of text it did not split is no count
    parts["reasoning_tokens"] = nullable_int(column_or_nulls(df, "reasoning_tokens")).where(from_parser)
    completion_tokens = nullable_int(column_or_nulls(df, "completion_tokens"))
    parts["answer_tokens"] = _answer_tokens(completion_tokens, parts["reasoning_tokens"], has_reasoning)
    return parts[list(PART_COLUMNS)]


def flag_unterminated_think(df: pd.DataFrame, parts: pd.DataFrame) -> pd.Series:
    """True where the row's thinking never closed (`parts`: row_parts(df)).

    Either a `<think>` opened in the completion and never closed, or the parser's reasoning is
    present with an empty answer and no parsed tool call (cut by max_tokens, or stopped while
    thinking: see the module's docstring).
    """
    stopped_while_thinking = (  # an empty completion: no `</think>` in it either
        parts["reasoning_from"].eq("parser") & df["completion"].str.strip().eq("") & ~parts["parsed_calls"]
    )
    return (parts["text_unterminated"] | stopped_while_thinking).astype(bool)


def row_parts(df: pd.DataFrame) -> pd.DataFrame:
    """`reasoning_parts` beside the tool calls of each row (toolcalls.call_table)."""
    parts = reasoning_parts(df)
    return parts.join(call_table(df, parts["answer_text"]))
