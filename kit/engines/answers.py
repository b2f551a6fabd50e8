"""Answers of the OpenAI-compatible chat API as `ChatResult`s: the one place they are read.

`result_from_json` reads a whole answer, `StreamAccumulator` the events of a streamed one (all the
events of one network read parsed in one `orjson.loads`). A new field is added to `ChatResult` and
read in these two places.

What the engines return beside the content, where their parsers are on:
- reasoning split out of a `<think>` block: `reasoning_content` (SGLang, `transformers serve`,
  older vLLM) or `reasoning` (vLLM 0.32); streamed as the same key in each `delta`;
- tool calls: `message.tool_calls` (OpenAI shape), streamed as `delta.tool_calls` fragments
  (`index`, then `id` / `function.name` once and `function.arguments` in pieces);
- `usage.completion_tokens_details.reasoning_tokens` where the engine counts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import orjson

from kit.engines.openai_json import ToolCall, ToolFunction, Usage
from kit.errors import EngineError


class RequestRejected(EngineError):
    """The server refused this request (4xx: bad request, context overflow): do not retry it."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class TransientEngineError(EngineError):
    """Connection error, timeout, 5xx, 408 or 429: the caller may retry (after a restart if it died)."""

    def __init__(self, message: str, status: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ChatResult:
    """One chat completion with what the engine reported about it."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    ttft_s: float | None = None
    """Seconds to the first generated chunk: content, reasoning or a tool call (streamed requests only)."""
    accept_length: float | None = None
    """Tokens per verify step under speculative decoding, where the engine reports it (SGLang)."""
    raw_usage: Usage | None = None
    tool_calls: list[ToolCall] | None = None
    """Calls the engine's tool-call parser found, OpenAI shape: {id, type, function: {name, arguments}}."""
    reasoning: str | None = None
    """The reasoning the engine's reasoning parser split out of the answer (None: not split)."""
    reasoning_tokens: int | None = None
    """Tokens of that reasoning, where the engine counts them."""


REASONING_KEYS = ("reasoning_content", "reasoning")
"""Where engines put the parsed reasoning, in a message or a streamed delta."""


def _reasoning_of(part: Mapping[str, Any]) -> str | None:
    for key in REASONING_KEYS:
        value = part.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _reasoning_tokens(usage: Mapping[str, Any]) -> int | None:
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return int(value) if isinstance(value, int | float) else None


def _tool_calls(calls: Any) -> list[ToolCall] | None:
    """The calls as plain OpenAI-shaped dicts (None when there are none)."""
    if not isinstance(calls, list) or not calls:
        return None
    out: list[ToolCall] = []
    for call in calls:
        fn = call.get("function") or {}
        out.append(
            ToolCall(
                id=call.get("id"),
                type=call.get("type") or "function",
                function=ToolFunction(name=fn.get("name"), arguments=fn.get("arguments")),
            )
        )
    return out


class _FunctionDelta(TypedDict, total=False):
    name: str | None
    arguments: str | None


class ToolCallDelta(TypedDict, total=False):
    """A streamed fragment of a tool call (`delta.tool_calls[]`): `index` says which call it adds to;
    `id`, `type` and the function's name come once, its arguments in pieces."""

    index: int
    id: str | None
    type: str | None
    function: _FunctionDelta


@dataclass(slots=True)
class _StreamedCall:
    """One tool call as its fragments arrive."""

    id: str | None = None
    type: str = "function"
    name: str | None = None
    args: list[str] = field(default_factory=list)

    def call(self) -> ToolCall:
        return ToolCall(
            id=self.id, type=self.type, function=ToolFunction(name=self.name, arguments="".join(self.args))
        )


def _accept_length(*parts: Mapping[str, Any] | None) -> float | None:
    """SGLang's accept length from wherever this version puts it (meta_info, usage), else None."""
    for part in parts:
        if not part:
            continue
        meta = part.get("meta_info") if isinstance(part.get("meta_info"), Mapping) else part
        if meta.get("spec_accept_length") is not None:
            return float(meta["spec_accept_length"])
        verify, tokens = meta.get("spec_verify_ct"), meta.get("completion_tokens")
        if verify and tokens:
            return float(tokens) / float(verify)
    return None


_SPEC_KEYS = frozenset({"meta_info", "spec_accept_length", "spec_verify_ct"})


def _has_spec_info(data: Mapping[str, Any], choice: Mapping[str, Any], usage: Mapping[str, Any]) -> bool:
    """Whether an answer carries speculative-decoding counters at all (most answers do not)."""
    return not (
        _SPEC_KEYS.isdisjoint(data) and _SPEC_KEYS.isdisjoint(choice) and _SPEC_KEYS.isdisjoint(usage)
    )


def parse_json(raw: bytes, what: str, status: int) -> dict[str, Any]:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise TransientEngineError(f"{what}: the answer is not JSON: {raw[:300]!r}", status) from e


def result_from_json(data: Mapping[str, Any], latency_s: float) -> ChatResult:
    """The one place a non-streamed answer becomes a ChatResult."""
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = data.get("usage") or {}
    return ChatResult(
        text=message.get("content") or "",
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_s=latency_s,
        accept_length=_accept_length(data, choice, usage) if _has_spec_info(data, choice, usage) else None,
        raw_usage=usage or None,
        tool_calls=_tool_calls(message.get("tool_calls")),
        reasoning=_reasoning_of(message),
        reasoning_tokens=_reasoning_tokens(usage),
    )


class StreamAccumulator:
    """Collects the SSE events of a streamed chat completion into one ChatResult.

    `feed` takes raw bytes as they arrive: the events complete in them are parsed together in one
    `orjson.loads` of a JSON array; an event cut by the read boundary waits for the next read.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.carry = b""
        self.parts: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _StreamedCall] = {}
        self.finish_reason: str | None = None
        self.usage: Usage = {}
        self.ttft_s: float | None = None
        self.accept_length: float | None = None

    def feed(self, block: bytes, elapsed_s: float) -> bool:
        """Parse the complete events in `block`; True once `data: [DONE]` arrived."""
        data = self.carry + block if self.carry else block
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        events = data.split(b"\n\n")
        self.carry = events.pop()
        payloads = [p for e in events for p in _data_lines(e)]
        done = bool(payloads) and payloads[-1].strip() == b"[DONE]"
        if done:
            payloads = [p for p in payloads if p.strip() != b"[DONE]"]
        if payloads:
            for chunk in self._parse(payloads):
                self.add(chunk, elapsed_s)
        return done

    def _parse(self, payloads: list[bytes]) -> list[dict[str, Any]]:
        try:
            return orjson.loads(b"[" + b",".join(payloads) + b"]")
        except orjson.JSONDecodeError:
            for p in payloads:  # name the chunk that is not JSON
                try:
                    orjson.loads(p)
                except orjson.JSONDecodeError as e:
                    raise TransientEngineError(
                        f"{self.what}: a streamed chunk is not JSON: {p[:300]!r}"
                    ) from e
            raise

    def add(self, chunk: Mapping[str, Any], elapsed_s: float) -> None:
        """The one place a streamed chunk is read."""
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta:
                content = delta.get("content")
                if content:
                    self.parts.append(content)
                thought = _reasoning_of(delta)
                if thought:
                    self.reasoning.append(thought)
                if delta.get("tool_calls"):
                    self._add_calls(delta["tool_calls"])
                if self.ttft_s is None and (content or thought or delta.get("tool_calls")):
                    self.ttft_s = elapsed_s
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            if "meta_info" in choice or "spec_accept_length" in choice:
                self.accept_length = _accept_length(choice) or self.accept_length
        if chunk.get("usage"):
            self.usage = Usage(**chunk["usage"])
            self.accept_length = _accept_length(chunk, self.usage) or self.accept_length
        elif "meta_info" in chunk:
            self.accept_length = _accept_length(chunk) or self.accept_length

    def _add_calls(self, fragments: list[ToolCallDelta]) -> None:
        """Assemble streamed tool-call fragments: by `index`, name once, arguments in pieces."""
        for frag in fragments:
            index = frag.get("index")
            if not isinstance(index, int):
                index = len(self.calls)
            call = self.calls.setdefault(index, _StreamedCall())
            call.id = frag.get("id") or call.id
            call.type = frag.get("type") or call.type
            fn = frag.get("function") or _FunctionDelta()
            call.name = fn.get("name") or call.name
            if arguments := fn.get("arguments"):
                call.args.append(arguments)

    def result(self, latency_s: float) -> ChatResult:
        calls = [c.call() for _, c in sorted(self.calls.items())]
        return ChatResult(
            text="".join(self.parts),
            finish_reason=self.finish_reason,
            prompt_tokens=self.usage.get("prompt_tokens"),
            completion_tokens=self.usage.get("completion_tokens"),
            latency_s=latency_s,
            ttft_s=self.ttft_s,
            accept_length=self.accept_length,
            raw_usage=self.usage or None,
            tool_calls=calls or None,
            reasoning="".join(self.reasoning) or None,
            reasoning_tokens=_reasoning_tokens(self.usage),
        )


def _data_lines(event: bytes) -> list[bytes]:
    """The `data:` payloads of one SSE event (usually one line; comments and other fields skipped)."""
    if event.startswith(b"data:") and b"\n" not in event:
        return [event[5:]]
    return [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
