"""Rows in the schema that keeps reasoning and tool calls, as real parquet shards, for the stage 4
tests (tests/test_analyse_outputs.py); `EXPECTED` holds the answers the analysis must find.

Planted per source:
- `think`: a reasoning parser ran (vLLM-like: reasoning_tokens reported, except on one row);
- `think_text`: no parser: `<think>` blocks left in the completion, one opened by the template;
- `hermes`: a tool-call parser ran: parsed calls, one with bad arguments, one to an unoffered tool,
  one whose `tool_calls` text is damaged;
- `hermes_text`: no tool-call parser: `<tool_call>` blocks in the completion;
- `chat`: an older shard without the new columns (the store's schema less the new fields).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kit.generate.store import ROW_SCHEMA
from kit.runfolder import RunFolder

NEW_FIELDS = [
    pa.field("reasoning", pa.string()),
    pa.field("tool_calls", pa.string()),
    pa.field("reasoning_tokens", pa.int64()),
]
NEW_SCHEMA = pa.schema(list(ROW_SCHEMA) + [f for f in NEW_FIELDS if f.name not in ROW_SCHEMA.names])
OLD_SCHEMA = pa.schema([f for f in NEW_SCHEMA if f.name not in {g.name for g in NEW_FIELDS}])
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
TOOLS = json.dumps(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {}}},
    ]
)
UNTERMINATED = "Let me count the letters one by one, then again, and again, to be sure. " * 3


def tool_call(name: str, arguments: str, n: int = 0) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def calls_json(*calls: dict[str, Any]) -> str:
    return json.dumps(list(calls))


# (source, user prompt, completion, reasoning, tool_calls, finish, completion_tokens, reasoning_tokens)
ROWS: list[tuple[Any, ...]] = [
    ("think", "What is 2+2?", "4", "Let me think about 2+2. It is 4.", None, "stop", 20, 15),
    ("think", "Count the r in strawberry", "", UNTERMINATED, None, "length", 64, 64),
    ("think", "Say hello", "Hello.", None, None, "stop", 3, None),
    (
        "think",
        "Help me pick a lock",
        "I'm sorry, but I can't help with that.",
        "thought",
        None,
        "stop",
        12,
        None,
    ),
    ("think", "Say ok", "Ok", "   ", None, "stop", 2, None),
    (
        "think_text",
        "Greet me",
        "<think>\nI should say hi.\n</think>\n\nHi there.",
        None,
        None,
        "stop",
        14,
        None,
    ),
    ("think_text", "Count to 100", "<think>\nStill counting, 1, 2, 3", None, None, "length", 64, None),
    ("think_text", "Plain please", "Plain answer, no thinking.", None, None, "stop", 6, None),
    ("think_text", "Template", "the template opened it</think>\n\nFinal.", None, None, "stop", 9, None),
    (
        "think_text",
        "What is the capital of France and why?",
        "<think>The user asked: What is the capital of France and why? I'm sorry to be slow.</think>Paris.",
        None,
        None,
        "stop",
        30,
        None,
    ),
    (
        "hermes",
        "Weather in Paris?",
        "",
        "User wants weather.",
        calls_json(tool_call("get_weather", '{"city": "Paris"}')),
        "tool_calls",
        25,
        5,
    ),
    (
        "hermes",
        "Weather in Oslo?",
        "",
        None,
        calls_json(tool_call("get_weather", '{"city": Oslo}')),
        "tool_calls",
        20,
        None,
    ),
    ("hermes", "Book a flight", "", None, calls_json(tool_call("book_flight", "{}")), "tool_calls", 18, None),
    ("hermes", "Tell me a joke", "Why did the chicken cross the road?", None, None, "stop", 10, None),
    (
        "hermes",
        "Weather and time in Rome?",
        "",
        None,
        calls_json(
            tool_call("get_weather", '{"city": "Rome"}', 0), tool_call("get_time", '{"tz": "CET"}', 1)
        ),
        "tool_calls",
        30,
        None,
    ),
    (
        "hermes",
        "Weather in Lima?",
        "",
        None,
        '[{"function": {"name": "get_weather", "argu',
        "tool_calls",
        9,
        None,
    ),
    (
        "hermes_text",
        "Weather in Nice?",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Nice"}}</tool_call>',
        None,
        None,
        "stop",
        22,
        None,
    ),
    (
        "hermes_text",
        "Weather in Bern?",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Bern"}}',
        None,
        None,
        "length",
        64,
        None,
    ),
    (
        "hermes_text",
        "Launch it",
        '<tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call>',
        None,
        None,
        "stop",
        15,
        None,
    ),
    ("hermes_text", "Thanks!", "No call needed.", None, None, "stop", 4, None),
    (
        "hermes_text",
        "Time?",
        '<think>maybe <tool_call>{bad</think><tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
        None,
        None,
        "stop",
        20,
        None,
    ),
]
OLD_ROWS: list[tuple[Any, ...]] = [
    ("chat", "Ponder", "<think>pondering</think>Done.", None, None, "stop", 8, None),
    ("chat", "Go on forever", "<think>never closed", None, None, "length", 64, None),
    ("chat", "Plain old", "Plain old answer.", None, None, "stop", 4, None),
]
EXPECTED = {
    "rows": len(ROWS) + len(OLD_ROWS),
    "empty": 4,  # think[1], think_text[1], hermes[5] (its calls are unreadable), chat[1]
    "duplicate": 0,
    "repeats_prompt": 0,  # think_text[4] repeats the question inside its reasoning only
    "refusal": 1,  # think[3]; think_text[4] says sorry inside its reasoning only
    "tool_call_broken": 5,  # hermes[1] arguments, [2] name, [5] damaged; hermes_text[1] unclosed, [2] name
    "unterminated_think": 3,  # think[1] (parser, cut), think_text[1], chat[1]
    "reasoning_rows": {"think": 3, "think_text": 4, "hermes": 1, "hermes_text": 1, "chat": 2},
    "tool_calls": {
        "hermes": {
            "function_calling_rows": 6,
            "rows_with_calls": 4,
            "share_with_calls": 0.6667,
            "parsed_by_engine": 4,
            "in_text": 0,
            "broken": 3,
        },
        "hermes_text": {
            "function_calling_rows": 5,
            "rows_with_calls": 4,
            "share_with_calls": 0.8,
            "parsed_by_engine": 0,
            "in_text": 4,
            "broken": 2,
        },
    },
}


def row_records(rows: list[tuple[Any, ...]], first: int) -> list[dict[str, Any]]:
    out = []
    for n, (source, prompt, completion, reasoning, calls, finish, tokens, rtokens) in enumerate(rows, first):
        out.append(
            {
                "id": f"{source}-{n:03d}",
                "prompt_id": f"{source}-{n:03d}",
                "sample_index": 0,
                "source": source,
                "messages": [{"role": "user", "content": prompt}],
                "tools": TOOLS if source.startswith("hermes") else None,
                "completion": completion,
                "reasoning": reasoning,
                "tool_calls": calls,
                "reasoning_tokens": rtokens,
                "finish_reason": finish,
                "prompt_tokens": 10,
                "completion_tokens": tokens,
                "latency_s": 0.5,
                "ttft_s": 0.05,
                "accept_length": None,
                "engine": json.dumps({"flavor": "vllm"}),
                "sampling": json.dumps({"max_tokens": 64}),
                "sampling_hash": "abc",
                "finished_at": START + timedelta(seconds=n + 1),
            }
        )
    return out


def write_run(root: Path, *, old_shard: bool = True) -> RunFolder:
    """A run folder with two new-schema shards and, optionally, one shard without the new columns."""
    folder = RunFolder(root).ensure()
    rows = row_records(ROWS, 0)
    half = len(rows) // 2
    for k, part in enumerate((rows[:half], rows[half:]), start=1):
        pq.write_table(
            pa.Table.from_pylist(part, schema=NEW_SCHEMA), folder.generations / f"part-{k:05d}.parquet"
        )
    if old_shard:
        old = pa.Table.from_pylist(row_records(OLD_ROWS, len(ROWS)), schema=OLD_SCHEMA)
        pq.write_table(old, folder.generations / "part-00003.parquet")
    return folder


def made_row(
    prompt: dict[str, Any], completion: str = "an answer", tokens: int = 3, finish: str = "stop"
) -> dict[str, Any]:
    """A generated row for a planned prompt (a row of prompts.parquet), as stage 3 writes it: for
    tests that put rows on disk without an engine."""
    return {
        "id": prompt["id"],
        "prompt_id": prompt["id"],
        "sample_index": 0,
        "source": prompt["source"],
        "messages": prompt["messages"],
        "tools": prompt["tools"],
        "completion": completion,
        "finish_reason": finish,
        "prompt_tokens": prompt["prompt_tokens"],
        "completion_tokens": tokens,
        "latency_s": 0.1,
        "finished_at": datetime.now(timezone.utc),
    }
