"""Dataset adapters: one small function per source schema, picked by name from a registry.

An adapter turns one dataset row into the prompt side of a chat request: messages
(`[{role, content}]`), tools (a JSON string or None) and metadata (category, language, the
reference answer...). The registry names feed the params (`data.sources[].adapter`) and the CLI.
The schemas, one per adapter, are in the docstrings of kit/prompts/sources.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.errors import DataError
from kit.prompts.records import PromptMessage

SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "function_call": "assistant",
    "observation": "tool",
}
"""ShareGPT `from` values mapped to chat roles (Infinity-Instruct, Hermes, AgentInstruct)."""

ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True)
class PromptRow:
    """The prompt side of one planned request, before it gets a stable id."""

    messages: list[PromptMessage]
    tools: str | None
    source_row_id: str
    metadata: str
    id: str | None = None
    """The row's own id, kept as the prompt id (an OpenAI batch line's `custom_id`); None: the
    kit's hash (`kit.prompts.dedup.prompt_id`)."""


@dataclass(frozen=True)
class Adapted:
    """What an adapter function returns for one row (the registry adds id and JSON encoding)."""

    messages: list[PromptMessage]
    tools: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    """Written as sorted JSON (the prompt's `metadata`): each adapter's own keys (`reference`, `lang`...)
    and, for the generic schemas, the user's own columns (`scalar_meta`): free-form, so a dict."""
    row_id: str | None = None
    """The source's own id of the row, where the row function reads it (an OpenAI batch line's
    `custom_id`); else the adapter's `id_column`, else the row's position."""


@dataclass(frozen=True)
class Adapter:
    """A registered adapter: its row function and the columns it needs."""

    name: str
    fn: Callable[[Mapping[str, Any]], Adapted]
    columns: tuple[str, ...]
    id_column: str | None = None
    language_columns: tuple[str, ...] = ()
    doc: str = ""
    lines: bool = False
    """Rows are the lines of a file (`dataset: text`): errors name the file and line."""
    own_ids: bool = False
    """The row function's `row_id` is the prompt id itself (unique in the plan), not hashed."""

    def check_columns(self, source: str, found: Sequence[str]) -> None:
        """Raise `DataError` when the dataset lacks a column this adapter needs."""
        missing = [c for c in self.columns if c not in found]
        if missing:
            raise DataError(
                f"source '{source}': adapter '{self.name}' expects columns [{', '.join(self.columns)}] "
                f"but the dataset has [{', '.join(found)}] (missing: {', '.join(missing)}). "
                f"Pick the adapter that matches this dataset (one of: {', '.join(adapter_names())}) "
                "or check the dataset id, config and split."
            )

    def language_column(self, found: Sequence[str]) -> str | None:
        """The column this source's language is read from, if the dataset has one."""
        return next((c for c in self.language_columns if c in found), None)

    def __call__(
        self, row: Mapping[str, Any], index: int, source: str = "?", where: str | None = None
    ) -> PromptRow:
        """Adapt one row; `index` is its position in the loaded split (the id when it has none);
        `where`: the file and line it came from, for a file of lines (kept in its metadata as `line`)."""
        where = where or (f"line {index + 1}" if self.lines else f"row {index}")
        try:
            out = self.fn(row)
        except DataError as e:
            raise DataError(f"source '{source}' {where}: {e}") from None
        row_id = out.row_id if out.row_id is not None else row.get(self.id_column) if self.id_column else None
        meta = {**out.meta, "line": where} if self.lines else out.meta
        return PromptRow(
            messages=out.messages,
            tools=out.tools,
            source_row_id=str(index if row_id is None else row_id),
            metadata=_META_JSON.encode(meta),
            id=str(row_id) if self.own_ids and row_id is not None else None,
        )


_REGISTRY: dict[str, Adapter] = {}
_META_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str)
"""`json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)`, without a new encoder per row."""


def adapter(
    name: str,
    *,
    columns: Sequence[str],
    id_column: str | None = None,
    language: Sequence[str] = (),
    lines: bool = False,
    own_ids: bool = False,
) -> Callable[[Callable[[Mapping[str, Any]], Adapted]], Callable[[Mapping[str, Any]], Adapted]]:
    """Register `fn` as the adapter `name` for datasets with `columns`."""

    def register(fn: Callable[[Mapping[str, Any]], Adapted]) -> Callable[[Mapping[str, Any]], Adapted]:
        if name in _REGISTRY:
            raise ValueError(f"adapter '{name}' is registered twice")
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        _REGISTRY[name] = Adapter(name, fn, tuple(columns), id_column, tuple(language), doc, lines, own_ids)
        return fn

    return register


def adapter_names() -> list[str]:
    """Names of every registered adapter, sorted."""
    return sorted(_REGISTRY)


def get_adapter(name: str) -> Adapter:
    """The adapter registered as `name`; `DataError` listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise DataError(f"unknown adapter '{name}': use one of {', '.join(adapter_names())}") from None


# --- shared pieces -------------------------------------------------------------------------------


def sharegpt_prompt(
    turns: Any, keys: tuple[str, str] = ("from", "value")
) -> tuple[list[PromptMessage], str | None]:
    """Messages up to (not including) the last assistant turn, and that turn's text (the reference)."""
    if not isinstance(turns, list) or not turns:
        raise DataError(f"expected a non-empty list of {{{keys[0]}, {keys[1]}}} turns, found {_short(turns)}")
    messages = [_turn(t, keys) for t in turns]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    reference = None
    if last is not None:
        reference = messages[last]["content"]
        messages = messages[:last]
    if not any(m["role"] == "user" for m in messages):
        raise DataError(f"no user turn before the last assistant turn in {_short(turns)}")
    return messages, reference


def _turn(turn: Any, keys: tuple[str, str]) -> PromptMessage:
    role_key, text_key = keys
    if not isinstance(turn, Mapping) or role_key not in turn or text_key not in turn:
        raise DataError(f"expected a turn with keys {{{role_key}, {text_key}}}, found {_short(turn)}")
    raw_role, text = turn[role_key], turn[text_key]
    role = SHAREGPT_ROLES.get(str(raw_role).lower()) if role_key == "from" else str(raw_role)
    if role not in ROLES:
        raise DataError(f"unknown role {raw_role!r} (expected one of {', '.join(sorted(SHAREGPT_ROLES))})")
    if not isinstance(text, str):
        raise DataError(f"turn content must be text, found {_short(text)}")
    return {"role": role, "content": text}


def tools_json(value: Any) -> str | None:
    """Tools as a compact JSON string of a list, or None; accepts a JSON string or a list."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"tools is not valid JSON ({e}): {_short(value)}") from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise DataError(f"tools must be a JSON list of tool schemas, found {_short(value)}")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


TOOL_LISTING = re.compile(r"<tools>(?!\s*</tools>).*?</tools>", re.DOTALL)
"""A `<tools>...</tools>` block that lists tool schemas (`<tools></tools>` alone, as a sentence names
the tags, is no listing)."""


def tools_in_one_place(messages: list[PromptMessage], tools: str | None) -> list[PromptMessage]:
    """`messages` with the tool listing taken out of the system prompt when the row passes `tools`:
    the chat template renders `tools` (with its own instructions), so a listing left in the system
    prompt would show every schema twice, to the engine and to a trainer. A system prompt that held
    nothing else is dropped; without `tools`, the messages are returned as they are."""
    if not tools:
        return messages
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "system" and isinstance(content, str) and TOOL_LISTING.search(content):
            content = re.sub(r"\n{3,}", "\n\n", TOOL_LISTING.sub("", content)).strip()
            if not content:
                continue
            m = {**m, "content": content}
        out.append(m)
    return out


def user_prompt(text: Any, column: str) -> list[PromptMessage]:
    """A single user message from a text column."""
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"column '{column}' must hold non-empty text, found {_short(text)}")
    return [{"role": "user", "content": text}]


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def scalar_meta(row: Mapping[str, Any], skip: Sequence[str]) -> dict[str, str | int | float | bool | None]:
    """The row's other columns that are plain values (for generic adapters' metadata): keyed by the
    user's column names, so a dict, its values the scalars kept."""
    return {
        k: v
        for k, v in row.items()
        if k not in skip and (v is None or isinstance(v, (str, int, float, bool)))
    }
