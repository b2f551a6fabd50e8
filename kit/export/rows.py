"""A generated row in the shape a trainer reads: `messages` (the prompt with the assistant turn
appended, OpenAI's chat format, which TRL's SFT trainer reads as it is) or `raw` (the run's own
row schema, kit/generate/store.py).

The assistant turn: the answer as `content`; the reasoning as `reasoning_content` (the field vLLM
and SGLang answer with), or inline as a `<think>` block before the answer (`reasoning="inline"`,
for chat templates that render thinking from the text); tool calls in the OpenAI shape
(`{id, type: function, function: {name, arguments}}`, arguments as JSON text), from the engine's
parser or, where none ran, from the `<tool_call>` blocks of a function-calling row's answer (taken
out of the content). The prompt's earlier turns of a function-calling row take the same shape: an
assistant turn's `<tool_call>` blocks become its `tool_calls`, a tool turn loses its `<tool_response>`
wrapper (the chat template writes both tags), so a row holds one format. `tools` stays JSON text:
the schemas of different rows have different fields, which one Arrow type cannot hold. The tools
are in `tools` only: a `<tools>` listing of them in the system prompt is taken out, as the adapters
do for the prompt sent (kit.prompts.adapters), so a chat template that renders `tools` shows each
schema once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from kit.analyse.reasoning import split_row
from kit.analyse.toolcalls import TOOL_CALL, is_function_calling, load_calls
from kit.engines.openai_json import ToolCall, ToolFunction
from kit.generate.store import ROW_SCHEMA
from kit.prompts.adapters import tools_in_one_place

Format = Literal["messages", "raw"]
Reasoning = Literal["field", "inline"]

REASON_COLUMN = "drop_reason"
"""Why a row is in the `rejected` split (null in `train`): the first drop rule it met."""
FUNCTION = pa.struct([("name", pa.string()), ("arguments", pa.string())])
TOOL_CALL_TYPE = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", FUNCTION)])
KEPT = [
    ("id", pa.string()),
    ("source", pa.string()),
    ("finish_reason", pa.string()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
]


class _TurnReasoning(TypedDict, total=False):
    reasoning_content: str | None
    """The reasoning, as a field (`reasoning="field"` only; None in the prompt's turns)."""


class ChatTurn(_TurnReasoning):
    """One message of a `messages` row (`message_type`): a prompt's turn, or the assistant's."""

    role: str | None
    content: str | None
    tool_calls: list[ToolCall] | None


class MessageRow(TypedDict):
    """One row of the `messages` format (`export_schema`): the KEPT columns, the conversation, the
    tools as JSON text and why the row was dropped (None: it is in `train`)."""

    id: str | None
    source: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    messages: list[ChatTurn]
    tools: str | None
    drop_reason: str | None


def message_type(reasoning: Reasoning) -> pa.DataType:
    """One chat message: role, content, and the assistant turn's reasoning and tool calls."""
    fields = [("role", pa.string()), ("content", pa.string())]
    if reasoning == "field":
        fields.append(("reasoning_content", pa.string()))
    return pa.struct([*fields, ("tool_calls", pa.list_(TOOL_CALL_TYPE))])


def export_schema(fmt: Format, reasoning: Reasoning = "field") -> pa.Schema:
    """The Arrow schema of both splits (`train` and `rejected` share it, so one config loads both)."""
    if fmt == "raw":
        return pa.schema([*ROW_SCHEMA, (REASON_COLUMN, pa.string())])
    return pa.schema(
        [
            KEPT[0],
            KEPT[1],
            ("messages", pa.list_(message_type(reasoning))),
            ("tools", pa.string()),
            *KEPT[2:],
            (REASON_COLUMN, pa.string()),
        ]
    )


def openai_calls(tool_calls: Any, answer: str, tools: Any, row_id: str) -> tuple[list[ToolCall] | None, str]:
    """(calls in the OpenAI shape or None, the answer without the `<tool_call>` blocks they came from)."""
    calls, _ = load_calls(tool_calls)
    if calls:
        return [_openai_call(c, f"call_{row_id}_{i}") for i, c in enumerate(calls)], answer
    if not is_function_calling(tools) or "<tool_call>" not in answer:
        return None, answer
    found = []
    for i, body in enumerate(TOOL_CALL.findall(answer)):
        try:
            found.append(_openai_call(json.loads(body), f"call_{row_id}_{i}"))
        except (json.JSONDecodeError, AttributeError, TypeError):
            return None, answer  # a broken block stays in the text (the row is flagged tool_call_broken)
    return (found or None), TOOL_CALL.sub("", answer).strip() if found else answer


def _openai_call(call: Any, default_id: str) -> ToolCall:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    return ToolCall(
        id=str(call.get("id") or default_id),
        type="function",
        function=ToolFunction(
            name=str(fn.get("name")),
            arguments=args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
        ),
    )


def assistant_turn(row: dict[str, Any], reasoning: Reasoning) -> ChatTurn:
    """The assistant message of one generated row."""
    thought, _, answer, _ = split_row(row.get("reasoning"), str(row.get("completion") or ""))
    calls, answer = openai_calls(row.get("tool_calls"), answer, row.get("tools"), str(row["id"]))
    if reasoning == "field":
        return ChatTurn(role="assistant", content=answer, reasoning_content=thought, tool_calls=calls)
    content = answer if thought is None else f"<think>\n{thought}\n</think>\n\n{answer}"
    return ChatTurn(role="assistant", content=content, tool_calls=calls)


def prompt_turns(
    messages: Any, reasoning: Reasoning, tools: str | None = None, row_id: str = ""
) -> list[ChatTurn]:
    """The prompt's messages with the fields the assistant turn adds, empty; with `tools`, the tool
    listing out of the system prompt (a run planned before the adapters took it out held both), and
    the earlier turns of a function-calling conversation in the shape of the generated one
    (`earlier_turn`)."""
    out = []
    for i, m in enumerate(tools_in_one_place(list(messages) if messages is not None else [], tools)):
        turn = earlier_turn(m, tools, f"{row_id}_t{i}")
        if reasoning == "field":
            turn["reasoning_content"] = None
        out.append(turn)
    return out


TOOL_RESPONSE = re.compile(r"\A\s*<tool_response>\s*(.*?)\s*</tool_response>\s*\Z", re.DOTALL)
"""A tool turn that is one `<tool_response>` block, as Hermes-style data writes it."""


def earlier_turn(m: Any, tools: str | None, turn_id: str) -> ChatTurn:
    """One prompt message as a chat turn. In a function-calling row (`tools`) an assistant turn's
    `<tool_call>` blocks become `tool_calls` and a tool turn's `<tool_response>` wrapper is taken off,
    as the generated turn and OpenAI's format have them: a chat template renders both tags itself
    (Qwen's and Hermes' do), so text left in the content would be one row in two formats."""
    role, content = m.get("role"), m.get("content")
    if not is_function_calling(tools) or not isinstance(content, str):
        return ChatTurn(role=role, content=content, tool_calls=None)
    if role == "assistant":
        calls, content = openai_calls(None, content, tools, turn_id)
        return ChatTurn(role=role, content=content, tool_calls=calls)
    wrapped = TOOL_RESPONSE.match(content) if role == "tool" else None
    return ChatTurn(role=role, content=wrapped[1] if wrapped else content, tool_calls=None)


def message_row(row: dict[str, Any], reasoning: Reasoning, reason: str | None) -> MessageRow:
    """One row in the `messages` format; a row without a completion (a failed request) keeps the
    prompt alone."""
    messages = prompt_turns(row.get("messages"), reasoning, row.get("tools"), str(row.get("id")))
    if row.get("completion") is not None or row.get("tool_calls") is not None:
        messages.append(assistant_turn(row, reasoning))
    return MessageRow(
        id=row.get("id"),
        source=row.get("source"),
        finish_reason=row.get("finish_reason"),
        prompt_tokens=row.get("prompt_tokens"),
        completion_tokens=row.get("completion_tokens"),
        messages=messages,
        tools=row.get("tools"),
        drop_reason=reason,
    )


def raw_row(row: dict[str, Any], reason: str | None) -> dict[str, Any]:
    """One row of the run's own schema (columns an older shard lacks as null)."""
    return {**{name: row.get(name) for name in ROW_SCHEMA.names}, REASON_COLUMN: reason}


def convert(
    rows: list[dict[str, Any]], reasons: list[str | None], fmt: Format, reasoning: Reasoning
) -> pa.Table:
    """Rows (dicts of the run's schema) and their drop reasons as a table of `export_schema`."""
    if fmt == "raw":
        out = [raw_row(r, why) for r, why in zip(rows, reasons, strict=True)]
    else:
        out = [message_row(r, reasoning, why) for r, why in zip(rows, reasons, strict=True)]
    return pa.Table.from_pylist(out, schema=export_schema(fmt, reasoning))


BATCH_ROWS = 1024


def shard_batches(path: Path) -> Iterator[list[dict[str, Any]]]:
    """The rows of one shard, a batch at a time, as dicts of the run's row schema."""
    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[c for c in ROW_SCHEMA.names if c in names]):
        yield batch.to_pylist()
