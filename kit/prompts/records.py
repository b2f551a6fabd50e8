"""The prompt plan's records: what kit.prompts hands the rest of the kit, each defined once.

`TypedDict`s, so what is written stays the JSON (or parquet row) it was:

    PromptRecord      one row of prompts.parquet (plan.PROMPTS_SCHEMA), as a source keeps it
    SourceOrigin      where a source's rows came from (plan.json's `origins`, the dataset card)
    SourcePlanSummary one source's line of the plan table and of plan.json's `sources`
    PlanReport        plan.json: the plan's settings, each source's summary, dropped examples, origins
    LineSampling      an OpenAI batch line's own sampling settings (its metadata's `body_sampling`)
    BatchRequest      one line of an OpenAI batch file, checked (kit.prompts.openai_batch.parse_line)

A row of a user's dataset, as `datasets` yields it, stays a dict: its columns are the user's.
"""

from __future__ import annotations

from typing import Any, NotRequired, Required, TypedDict


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


class SourcePlanSummary(TypedDict):
    """One source of the plan (`SourcePlan.summary`): a row of the plan table and of plan.json's
    `sources`; `dropped_<reason>` for each of `kit.prompts.sampling.REASONS`, in that order."""

    source: str
    adapter: str
    dataset: str
    config: str | None
    split: str
    requested: int | None
    """The source's target (None: all its rows)."""
    available: int
    examined: int
    kept: int
    dropped_language: int
    dropped_malformed: int
    dropped_duplicate: int
    dropped_too_long: int
    dropped_template_error: int


class DroppedExample(TypedDict):
    """One of the first rows a filter dropped, for plan.json's `dropped_examples`."""

    source_row_id: str
    detail: str


class PlanReport(TypedDict):
    """plan.json, as `build_plan` writes it (and the analysis and the export read it back): the data
    settings, what was kept, each source."""

    seed: int
    total: int | None
    max_prompt_tokens: int | None
    dedup: bool
    tokenizer: str | None
    prompts: int
    ids_sha256: str
    """The sha256 of the kept ids, in order, joined by newlines."""
    sources: list[SourcePlanSummary]
    dropped_examples: dict[str, dict[str, list[DroppedExample]]]
    """Per source, per reason: the first few rows dropped."""
    origins: NotRequired[dict[str, SourceOrigin]]
    """Absent from a plan.json written before origins were recorded (kit.export.run.source_origins)."""
    warnings: NotRequired[list[str]]
    """Sources that gave fewer prompts than planned, and why (absent from an older plan.json)."""


class LineSampling(TypedDict, total=False):
    """An OpenAI batch line's own sampling settings, in `generate.sampling`'s terms and checked against
    its ranges (kit.prompts.openai_batch.line_sampling): only the fields the line sets. Kept in the
    prompt's metadata as `body_sampling`, sent by stage 3 over `generate.sampling`
    (kit.generate.rowsampling)."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    seed: int
    stop: list[str]
    max_tokens: int
    """The line's `max_tokens`, or its `max_completion_tokens`."""


class BatchBody(TypedDict, total=False):
    """A batch line's `body`: a chat-completion request, its keys those `parse_line` lets through
    (`openai_batch.KNOWN`), its values as the file holds them (the messages are read by `_message`,
    the tools by `tools_json`, the sampling fields by `line_sampling`; the rest is refused or left
    aside)."""

    messages: Required[list[Any]]
    tools: Any
    temperature: Any
    top_p: Any
    top_k: Any
    min_p: Any
    presence_penalty: Any
    frequency_penalty: Any
    repetition_penalty: Any
    seed: Any
    stop: Any
    max_tokens: Any
    max_completion_tokens: Any
    stream: Any
    logprobs: Any
    top_logprobs: Any
    response_format: Any
    audio: Any
    modalities: Any
    n: Any
    model: Any
    user: Any
    metadata: Any
    store: Any
    tool_choice: Any
    parallel_tool_calls: Any


class BatchRequest(TypedDict):
    """One line of an OpenAI batch file, as `parse_line` checked it: a text `custom_id`, POST (where
    given), a chat endpoint (where given) and a body with messages."""

    custom_id: str
    method: NotRequired[str]
    url: NotRequired[str]
    body: BatchBody
