"""Fabricate a run folder with known answers for the stage 4 tests (no engine needed).

Planted per source (`chat` and `tools`): truncations (finish_reason 'length'), exact duplicate
completions, empty / whitespace rows, completions that repeat the prompt, refusals, and broken
`<tool_call>` JSON. `EXPECTED` holds the answers the analysis must find.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd

from kit.runfolder import RunFolder, write_json_atomic

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
TOOLS = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])
GOOD_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'

EXPECTED = {
    "rows": 20,
    "sources": {"chat": 12, "tools": 8},
    "length": {"chat": 3, "tools": 1},
    "empty": 2,
    "duplicate": 3,
    "repeats_prompt": 1,
    "refusal": 2,
    "tool_call_broken": 2,
    "failures": {"timeout": 2, "server_error": 1},
    "completion_tokens_total": 0,  # filled below
}


def _chat_rows() -> list[dict]:
    rows = []
    for i in range(12):
        rows.append(
            {
                "prompt": f"Write a short poem about number {i} and the sea.",
                "completion": f"Poem {i}: waves.",
                "finish": "stop",
                "tokens": 10 + i,
            }
        )
    rows[0].update(completion="Poem 0: waves, cut", finish="length", tokens=64)
    rows[1].update(completion="Poem 1: waves, cut", finish="length", tokens=64)
    rows[2].update(completion="Poem 2: also cut", finish="length", tokens=64)
    rows[3].update(completion="   \n ", tokens=0)
    rows[4].update(completion="", tokens=0)
    rows[5].update(completion="The same answer.")
    rows[6].update(completion="The same answer.")
    rows[7].update(completion="The same answer.")
    rows[8].update(completion="Sure. write a SHORT poem about number 8   and the sea. Here it is.")
    rows[9].update(completion="I'm sorry, but I can't help with that.")
    rows[10].update(completion="  As an AI language model, I have no feelings.")
    return rows


def _tool_rows() -> list[dict]:
    rows = []
    for i in range(8):
        rows.append(
            {
                "prompt": f"What is the weather in city {i}?",
                "completion": GOOD_CALL,
                "finish": "stop",
                "tokens": 20 + i,
                "tools": TOOLS,
            }
        )
    rows[0].update(completion='<tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call>')
    rows[1].update(completion='<tool_call>{"name": "get_weather", "argu', finish="length", tokens=64)
    rows[2].update(completion="It is sunny, no tool needed.")
    rows[3].update(tools=None, completion="<tool_call>not json</tool_call>")  # not a function-calling row
    for i, r in enumerate(rows[4:], start=4):
        r["completion"] = GOOD_CALL.replace("Paris", f"City{i}")
    return rows


def generation_frame() -> pd.DataFrame:
    """The 20 planted rows as a generations DataFrame (finished one per second from START)."""
    raw = [("chat", r) for r in _chat_rows()] + [("tools", r) for r in _tool_rows()]
    rows = []
    for n, (source, r) in enumerate(raw):
        rows.append(
            {
                "id": f"{source}-{n:03d}",
                "source": source,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": r["prompt"]},
                ],
                "tools": r.get("tools"),
                "completion": r["completion"],
                "reasoning": None,
                "tool_calls": None,
                "finish_reason": r["finish"],
                "prompt_tokens": 12 + n % 5,
                "completion_tokens": r["tokens"],
                "reasoning_tokens": None,
                "latency_s": 0.5 + 0.1 * n,
                "ttft_s": 0.05,
                "engine": json.dumps({"flavor": "transformers", "model": "demo", "speculative": None}),
                "sampling": json.dumps({"max_tokens": 64}),
                "sampling_hash": "abc",
                "sample_index": 0,
                "finished_at": START + timedelta(seconds=n + 1),
                "accept_length": 2.0 + (n % 3) * 0.5,
            }
        )
    return pd.DataFrame(rows)


def metrics_frame(n: int = 20) -> pd.DataFrame:
    t = list(range(0, n + 1, 2))
    return pd.DataFrame(
        {
            "t_s": [float(x) for x in t],
            "rows_done": t,
            "output_tokens_done": [x * 25 for x in t],
            "tok_s": [25.0] * len(t),
            "rows_s": [1.0] * len(t),
            "in_flight": [4] * len(t),
            "failures": [0] * len(t),
            "accept_length": [2.5] * len(t),
        }
    )


def build_run(
    root: Path,
    *,
    shards: int = 2,
    metrics: bool = True,
    failures: bool = True,
    manifest: bool = True,
    frame: pd.DataFrame | None = None,
) -> RunFolder:
    """Write a complete fixture run folder at `root` and return it."""
    folder = RunFolder(root).ensure()
    df = generation_frame() if frame is None else frame
    for k in range(shards):
        df.iloc[k::shards].to_parquet(folder.generations / f"part-{k:05d}.parquet", index=False)
    prompts = df[["id", "source", "messages", "tools", "prompt_tokens"]].assign(
        source_row_id="r", metadata="{}"
    )
    prompts.to_parquet(folder.prompts, index=False)
    write_json_atomic(
        folder.plan,
        {  # the shape kit.prompts.plan writes
            "seed": 0,
            "sources": [
                {"source": "chat", "requested": 15, "available": 100, "kept": 13, "dropped_duplicate": 2},
                {"source": "tools", "requested": 10, "available": 10, "kept": 10, "dropped_duplicate": 0},
            ],
            "dropped_examples": {"chat": {"duplicate": ["a", "b"]}},
        },
    )
    if metrics:
        metrics_frame().to_parquet(folder.metrics, index=False)
    if failures:
        lines = [
            {"id": "chat-x", "source": "chat", "reason": "timeout", "error": "t", "attempts": 3, "at": "x"},
            {"id": "tools-x", "source": "tools", "reason": "timeout", "error": "t", "attempts": 3, "at": "x"},
            {"id": "tools-y", "source": "tools", "reason": "server_error", "error": "500", "attempts": 3},
            {"id": "tools-y", "source": "tools", "reason": "server_error", "error": "500", "attempts": 3},
            {"id": "chat-000", "source": "chat", "reason": "timeout", "error": "retried, then done"},
        ]
        folder.failures.write_text("".join(json.dumps(x) + "\n" for x in lines))
    if manifest:
        write_json_atomic(
            folder.manifest,
            {
                "rows": len(df),
                "failures": 3,
                "shards": shards,
                "started_at": START.isoformat(),
                "finished_at": (START + timedelta(seconds=20)).isoformat(),
                "engine": {"flavor": "transformers"},
                "sampling": {},
                "complete": True,
            },
        )
    return folder
