"""The prompt plan's records: what kit.prompts hands the rest of the kit, each defined once.

`TypedDict`s, so what is written stays the JSON (or parquet row) it was:

    PromptRecord     one row of prompts.parquet (plan.PROMPTS_SCHEMA), as a source keeps it

A row of a user's dataset, as `datasets` yields it, stays a dict: its columns are the user's.
"""

from __future__ import annotations

from typing import TypedDict


class PromptMessage(TypedDict):
    """One turn of a planned prompt: prompts.parquet's `messages` struct."""

    role: str
    content: str


class PromptRecord(TypedDict):
    """One planned prompt, a row of prompts.parquet in its column order (`PROMPTS_SCHEMA`)."""

    id: str
    source: str
    source_row_id: str
    messages: list[PromptMessage]
    tools: str | None
    """The tool schemas as compact JSON text (None: no tools)."""
    metadata: str
    """The adapter's metadata as sorted JSON text (kit.prompts.adapters)."""
    prompt_tokens: int | None
