"""The records stage 3 hands from module to module: a work item (one request to send).

    item = next(iter_items(prompts, work))   # kit.generate.work: a `WorkItem` per request to send

A dict at run time (a TypedDict). A leaf: it imports nothing of the kit, so the loop, the ETA and
the Ray actor all take it without an import circle.
"""

from __future__ import annotations

from typing import Any, TypedDict


class Message(TypedDict):
    """One turn of a planned prompt's conversation (the `messages` column's struct)."""

    role: str
    content: str | None


class WorkItem(TypedDict):
    """One request to send: a prompt and the index of its sample (kit.generate.work `iter_items`).

    Taken by the loop's workers (from an iterator, or a Ray actor's `BlockFeed`), predicted by the
    ETA, and given back to `answered` once its row or failure is recorded."""

    id: str
    """The row's id (kit.generate.store `row_id`: the prompt's id, `.k` for a sample k beyond 0)."""
    prompt_id: str
    sample_index: int
    source: str
    messages: list[Message]
    tools: str | None
    """The prompt's tools as the JSON text of the plan (kept as such in the row)."""
    tools_list: list[dict[str, Any]] | None
    """The same parsed for the client (kit.prompts.plan `tools_list`): the user's own tool schemas,
    free-form JSON sent as they are; None for a prompt without tools."""
    prompt_tokens: int | None
    sampling: str | None
    """A batch line's own sampling settings as sorted JSON (kit.generate.rowsampling), or None."""
