"""The prompt plan's records: what kit.prompts hands the rest of the kit, each defined once.

`TypedDict`s, so what is written stays the JSON (or parquet row) it was:

    PromptRecord     one row of prompts.parquet (plan.PROMPTS_SCHEMA), as a source keeps it
    SourceOrigin     where a source's rows came from (plan.json's `origins`, the dataset card)

A row of a user's dataset, as `datasets` yields it, stays a dict: its columns are the user's.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


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


class OriginFile(TypedDict):
    """A local data file a source read, with the sha256 of its bytes (None: the file is missing)."""

    path: str
    sha256: str | None


class FilesOrigin(TypedDict):
    """A source read from local files by a `datasets` builder (json, parquet, text...)."""

    builder: str
    files: list[OriginFile]


class HubOrigin(TypedDict):
    """A source read from the Hub: its id, config, split (its data files, where given) and the commit."""

    hub: str
    config: str | None
    split: str
    data_files: NotRequired[list[str]]
    revision: str | None
    """The dataset commit that was loaded (None: not known)."""


SourceOrigin = HubOrigin | FilesOrigin
"""Where a source's rows came from (kit.prompts.origin.source_origin): plan.json's `origins`, the card."""
