"""Answers of the OpenAI-compatible chat API as `ChatResult`s: the one place they are read.

`result_from_json` reads a whole answer, `StreamAccumulator` the events of a streamed one (all the
events of one network read parsed in one `orjson.loads`). A new field (reasoning, tool calls, ...)
is added to `ChatResult` and read in these two places.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

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
    """Seconds to the first content chunk (streamed requests only)."""
    accept_length: float | None = None
    """Tokens per verify step under speculative decoding, where the engine reports it (SGLang)."""
    raw_usage: dict[str, Any] | None = None
    tool_calls: list[dict[str, Any]] | None = None


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
        tool_calls=message.get("tool_calls") or None,
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
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
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
            content = delta.get("content") if delta else None
            if content:
                self.parts.append(content)
                if self.ttft_s is None:
                    self.ttft_s = elapsed_s
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            if "meta_info" in choice or "spec_accept_length" in choice:
                self.accept_length = _accept_length(choice) or self.accept_length
        if chunk.get("usage"):
            self.usage = dict(chunk["usage"])
            self.accept_length = _accept_length(chunk, self.usage) or self.accept_length
        elif "meta_info" in chunk:
            self.accept_length = _accept_length(chunk) or self.accept_length

    def result(self, latency_s: float) -> ChatResult:
        return ChatResult(
            text="".join(self.parts),
            finish_reason=self.finish_reason,
            prompt_tokens=self.usage.get("prompt_tokens"),
            completion_tokens=self.usage.get("completion_tokens"),
            latency_s=latency_s,
            ttft_s=self.ttft_s,
            accept_length=self.accept_length,
            raw_usage=self.usage or None,
        )


def _data_lines(event: bytes) -> list[bytes]:
    """The `data:` payloads of one SSE event (usually one line; comments and other fields skipped)."""
    if event.startswith(b"data:") and b"\n" not in event:
        return [event[5:]]
    return [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
