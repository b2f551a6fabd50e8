"""One async client for the OpenAI-compatible API of every engine flavor, plus SGLang's extras.

    async with EngineClient(srv.base_url, "transformers") as c:
        r = await c.chat([{"role": "user", "content": "hi"}], max_tokens=32)
        print(r.text, r.completion_tokens, r.latency_s)

Errors: `RequestRejected` (4xx: this request is wrong, retrying will not help) and
`TransientEngineError` (connection refused or dropped, 5xx, 408/429, timeout: retry, maybe after a
server restart).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import httpx

from kit.engines.metrics import Sample, parse_prometheus, parse_samples
from kit.errors import EngineError

# Request fields each flavor accepts; `transformers serve` answers 422 to any field outside its schema.
_BASE_FIELDS = frozenset(
    {"model", "messages", "max_tokens", "temperature", "top_p", "stop", "seed", "tools", "stream"}
)
_STREAM_USAGE_FLAVORS = frozenset({"sglang", "vllm", "external"})


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


def is_loopback(url: str) -> bool:
    """Whether `url` points at this machine (then proxies from the environment are bypassed)."""
    return (urlparse(url).hostname or "") in {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


@contextlib.contextmanager
def _transport_errors(what: str) -> Iterator[None]:
    """Turn httpx's connection and timeout errors into TransientEngineError."""
    try:
        yield
    except httpx.TimeoutException as e:
        raise TransientEngineError(f"{what}: timed out ({type(e).__name__})") from e
    except httpx.TransportError as e:
        raise TransientEngineError(f"{what}: connection failed ({type(e).__name__}: {e})") from e


def _check_status(r: httpx.Response, what: str) -> None:
    if r.status_code < 400:
        return
    body = r.text[:2000]
    msg = f"{what}: HTTP {r.status_code}: {body}"
    if r.status_code >= 500 or r.status_code in (408, 429):
        raise TransientEngineError(msg, r.status_code, body)
    raise RequestRejected(msg, r.status_code, body)


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


class EngineClient:
    """Async client of one server; use as `async with EngineClient(url, flavor) as c:`."""

    def __init__(
        self,
        base_url: str,
        flavor: str,
        model: str | None = None,
        timeout_s: float = 600,
        max_connections: int = 1024,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.flavor = flavor
        self.model = model
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            trust_env=not is_loopback(self.base_url),
            timeout=httpx.Timeout(timeout_s, connect=min(30.0, timeout_s)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def __aenter__(self) -> EngineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get(self, path: str) -> httpx.Response:
        with _transport_errors(f"GET {self.base_url}{path}"):
            return await self._http.get(path)

    async def model_name(self) -> str:
        """The model name to send: the one given, else the first one the server lists at /v1/models."""
        if self.model is None:
            r = await self._get("/v1/models")
            _check_status(r, "GET /v1/models")
            models = r.json().get("data") or []
            if not models:
                raise EngineError(
                    f"{self.base_url}/v1/models lists no model; set model.served_name in the params"
                )
            self.model = str(models[0]["id"])
        return self.model

    async def health(self) -> bool:
        """Whether the server answers GET /health (or /v1/models where /health does not exist) with 200."""
        for path in ("/health", "/v1/models"):
            try:
                r = await self._get(path)
            except TransientEngineError:
                return False
            if r.status_code != 404:
                return r.status_code == 200
        return False

    async def server_info(self) -> dict[str, Any] | None:
        """SGLang's server arguments and state (/server_info, older /get_server_info); None elsewhere."""
        if self.flavor not in ("sglang", "external"):
            return None
        for path in ("/server_info", "/get_server_info"):
            r = await self._get(path)
            if r.status_code == 200:
                return r.json()
            if r.status_code != 404:
                _check_status(r, f"GET {path}")
        return None

    async def metrics_text(self) -> str | None:
        """GET /metrics as text; None when the server has no /metrics."""
        r = await self._get("/metrics")
        if r.status_code == 404:
            return None
        _check_status(r, "GET /metrics")
        return r.text

    async def prometheus(self) -> dict[str, float] | None:
        """GET /metrics as {name: value} (summed over label sets); None when the server has no /metrics."""
        text = await self.metrics_text()
        return None if text is None else parse_prometheus(text)

    async def prometheus_samples(self) -> list[Sample] | None:
        """GET /metrics as samples with their labels; None when the server has no /metrics."""
        text = await self.metrics_text()
        return None if text is None else parse_samples(text)

    def _chat_body(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None,
        sampling: dict[str, Any],
        stream: bool,
        extra_body: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": list(messages), "stream": stream, **sampling}
        if tools is not None:
            body["tools"] = list(tools)
        body = {k: v for k, v in body.items() if v is not None and k in _BASE_FIELDS}
        if stream and self.flavor in _STREAM_USAGE_FLAVORS:
            body["stream_options"] = {"include_usage": True}
        return {**body, **(extra_body or {})}

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.7,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        extra_body: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """One chat completion. `extra_body` adds engine-specific fields (e.g. SGLang's `ignore_eos`)."""
        sampling = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "stop": list(stop) if stop else None,
            "seed": seed,
        }
        body = self._chat_body(await self.model_name(), messages, tools, sampling, stream, extra_body)
        what = f"POST {self.base_url}/v1/chat/completions"
        t0 = time.perf_counter()
        with _transport_errors(what):
            if stream:
                return await self._chat_stream(body, what, t0)
            r = await self._http.post("/v1/chat/completions", json=body)
        _check_status(r, what)
        return _result_from_json(_json(r, what), time.perf_counter() - t0)

    async def _chat_stream(self, body: dict[str, Any], what: str, t0: float) -> ChatResult:
        acc = _StreamAccumulator()
        async with self._http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code >= 400:
                await r.aread()
                _check_status(r, what)
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError as e:
                    raise TransientEngineError(f"{what}: a streamed chunk is not JSON: {data[:300]!r}") from e
                acc.add(chunk, time.perf_counter() - t0)
        return acc.result(time.perf_counter() - t0)


def _json(r: httpx.Response, what: str) -> dict[str, Any]:
    try:
        return r.json()
    except ValueError as e:
        raise TransientEngineError(f"{what}: the answer is not JSON: {r.text[:300]!r}", r.status_code) from e


def _result_from_json(data: Mapping[str, Any], latency_s: float) -> ChatResult:
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = data.get("usage") or {}
    return ChatResult(
        text=message.get("content") or "",
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_s=latency_s,
        accept_length=_accept_length(data, choice, usage),
        raw_usage=usage or None,
        tool_calls=message.get("tool_calls") or None,
    )


class _StreamAccumulator:
    """Collects SSE chunks of a streamed chat completion into one ChatResult."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.ttft_s: float | None = None
        self.accept_length: float | None = None

    def add(self, chunk: Mapping[str, Any], elapsed_s: float) -> None:
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                self.parts.append(content)
                self.ttft_s = elapsed_s if self.ttft_s is None else self.ttft_s
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            self.accept_length = _accept_length(choice) or self.accept_length
        if chunk.get("usage"):
            self.usage = dict(chunk["usage"])
        self.accept_length = _accept_length(chunk, self.usage) or self.accept_length

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
