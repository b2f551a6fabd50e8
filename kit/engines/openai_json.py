"""The OpenAI chat API's JSON shapes that the kit builds: a tool call, the token usage, an assistant
message, a chat completion. `TypedDict`s, so that what is sent or written stays the JSON it was.

`kit.engines.answers` builds the tool calls of a `ChatResult` and keeps the usage the engine sent;
`kit.export` writes the tool calls of a trainer's row (kit.export.rows) and a whole completion per
line of an OpenAI batch output (kit.export.openai_batch). An answer as it comes off the wire is read
as a `Mapping` (kit.engines.answers is the one place it is read): an engine may leave out any key.
"""

from __future__ import annotations

from typing import Literal, TypedDict


class ToolFunction(TypedDict):
    """The function a tool call names, and its arguments as JSON text."""

    name: str | None
    arguments: str | None


class ToolCall(TypedDict):
    """One tool call, OpenAI shape: `{id, type: function, function: {name, arguments}}`."""

    id: str | None
    type: str
    function: ToolFunction


class TokenDetails(TypedDict, total=False):
    """`usage.completion_tokens_details`: the reasoning tokens, where the engine counts them."""

    reasoning_tokens: int


class Usage(TypedDict, total=False):
    """A chat completion's `usage` (an engine may add keys of its own: SGLang's `meta_info`...)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: TokenDetails


class _MessageExtras(TypedDict, total=False):
    reasoning_content: str
    """The reasoning split out of the answer (the key vLLM and SGLang answer with)."""
    tool_calls: list[ToolCall]


class AssistantMessage(_MessageExtras):
    """The assistant turn of a completion: the answer, and the reasoning and the calls where there
    are any."""

    role: Literal["assistant"]
    content: str


class Choice(TypedDict):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: None


class ChatCompletion(TypedDict):
    """A whole (not streamed) chat completion object."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
