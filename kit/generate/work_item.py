"""The records stage 3 hands from module to module: a work item, a generated row, a failure record.

    item = next(iter_items(prompts, work))   # kit.generate.work: a `WorkItem` per request to send
    row = loop._row(item, answer, engine)     # kit.generate.loop: a `GeneratedRow`, one parquet row
    failures.append(record)                   # kit.generate.store: a `FailureRecord`, one JSON line

They are dicts at run time (TypedDicts): a row goes to `pa.Table.from_pylist` under `ROW_SCHEMA`
(kit.generate.store), whose column names are `GeneratedRow`'s keys in order (tests/test_store.py
pins it), and a failure record to `failures.jsonl` as it is, `at` added. It imports only the leaf
kit.prompts.records (a prompt's turns), so the loop, the store, the ETA and the Ray actor all take
it without an import circle.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypedDict

from kit.prompts.records import PromptMessage


class PromptKeys(TypedDict):
    """What a request and its row both carry of the prompt, in the row's column order (its first
    columns): a `WorkItem` hands them to the `GeneratedRow` made from it."""

    id: str
    """The row's id (kit.generate.store `row_id`: the prompt's id, `.k` for a sample k beyond 0)."""
    prompt_id: str
    sample_index: int
    source: str
    messages: list[PromptMessage]
    tools: str | None
    """The prompt's tools as the JSON text of the plan (kept as such in the row)."""


class WorkItem(PromptKeys):
    """One request to send: a prompt and the index of its sample (kit.generate.work `iter_items`).

    Taken by the loop's workers (from an iterator, or a Ray actor's `BlockFeed`), predicted by the
    ETA, and given back to `answered` once its row or failure is recorded."""

    tools_list: list[dict[str, Any]] | None
    """The same parsed for the client (kit.prompts.plan `tools_list`): the user's own tool schemas,
    free-form JSON sent as they are; None for a prompt without tools."""
    prompt_tokens: int | None
    sampling: str | None
    """A batch line's own sampling settings as sorted JSON (kit.generate.rowsampling), or None."""


class SamplingColumns(TypedDict):
    """A row's `sampling` (the settings' JSON) and `sampling_hash` (kit.generate.rowsampling `identity`)."""

    sampling: str
    sampling_hash: str


class GeneratedRow(PromptKeys):
    """One generated row, keyed and ordered as `ROW_SCHEMA`'s columns (kit.generate.store)."""

    completion: str
    reasoning: str | None
    tool_calls: str | None
    """The parsed tool calls as JSON text (OpenAI shape), None where there are none."""
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    latency_s: float
    ttft_s: float | None
    accept_length: float | None
    engine: str
    """The engine's identity as JSON (the run's, or a replica's own)."""
    sampling: str
    sampling_hash: str
    finished_at: datetime


FailureReason = Literal["context_overflow", "rejected", "transient", "bad_answer"]
"""Why a request failed (kit.generate.loop; kit.generate.verdict words each)."""


class FailureRecord(TypedDict):
    """One failed request as the loop reports it (kit.generate.loop `_fail`)."""

    id: str
    prompt_id: str
    sample_index: int
    source: str
    reason: FailureReason
    error: str
    """What the engine or the kit said, cut at 2,000 characters."""
    attempts: int
    permanent: bool
    """The engine refuses it for good: not retried on resume (unless failures are retried)."""


class LoggedFailure(FailureRecord):
    """A line of `failures.jsonl` (kit.generate.store `FailureLog`): the record and when it was logged."""

    at: str
    """ISO 8601 time, UTC."""
