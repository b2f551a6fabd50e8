"""One async client for the OpenAI-compatible API of every engine flavor, plus SGLang's extras.

    async with EngineClient(srv.base_url, "transformers") as c:
        r = await c.chat([{"role": "user", "content": "hi"}], max_tokens=32)
        print(r.text, r.completion_tokens, r.latency_s)

Errors: `RequestRejected` (4xx: this request is wrong, retrying will not help) and
`TransientEngineError` (connection refused or dropped, 5xx, 408/429, timeout: retry, maybe after a
server restart).

Built on aiohttp (keep-alive pool, C HTTP parser) and orjson: URLs and headers are made once, a
request costs one body encode and one answer decode, and a streamed answer is parsed a network
read at a time (all the events of one read in one `orjson.loads`), not line by line. The request
body is built in `_chat_body`; answers become `ChatResult`s in `kit.engines.answers`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlparse

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from kit.engines.answers import (
    ChatResult,
    RequestRejected,
    StreamAccumulator,
    TransientEngineError,
    parse_json,
    result_from_json,
)
from kit.engines.capacity import ServerInfo
from kit.engines.flavors import flavor as flavor_named
from kit.engines.flavors.base import RequestFields
from kit.engines.metrics import Sample, parse_prometheus, parse_samples
from kit.errors import EngineError

_JSON_HEADERS = CIMultiDict({"Content-Type": "application/json"})


class ChatRequest(RequestFields, total=False):
    """A chat completion request's body as `EngineClient.chat` sends it (`_chat_body`): model, messages
    and stream, then max_tokens and the sampling fields (the keyword defaults with the caller's
    `fields` over them; those None are not sent), the tools where there are any, the usage asked
    for when streamed, and `extra_body` over the whole (keys of its own, sent as given)."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    stream: bool
    max_tokens: int
    tools: Sequence[Any]
    stream_options: dict[str, bool]


def is_loopback(url: str) -> bool:
    """Whether `url` points at this machine (then proxies from the environment are bypassed)."""
    return (urlparse(url).hostname or "") in {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def _transport_error(what: str, e: BaseException) -> TransientEngineError:
    """aiohttp's connection and timeout errors as a TransientEngineError."""
    if isinstance(e, asyncio.TimeoutError):
        return TransientEngineError(f"{what}: timed out ({type(e).__name__})")
    return TransientEngineError(f"{what}: connection failed ({type(e).__name__}: {e})")


_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def _check_status(status: int, raw: bytes, what: str, keyed: bool = False) -> None:
    if status < 400:
        return
    body = raw[:2000].decode("utf-8", "replace")
    msg = f"{what}: HTTP {status}: {body}"
    if status in (401, 403):  # no row is to blame: the whole run needs the key
        raise key_refused(msg, keyed)
    if status >= 500 or status in (408, 429):
        raise TransientEngineError(msg, status, body)
    raise RequestRejected(msg, status, body)


def key_refused(what: str, keyed: bool) -> EngineError:
    """A 401 / 403 (`what`: the request and its answer) as one message saying what to set."""
    return EngineError(
        f"{what}\nThe server refused the API key the kit sent (engine.api_key_env): check the "
        "variable holds the key the server was started with."
        if keyed
        else f"{what}\nThe server wants an API key (it was started with --api-key): export the key "
        "in an environment variable and name that variable in engine.api_key_env."
    )


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header that carries a server's API key (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class EngineClient:
    """Async client of one server; use as `async with EngineClient(url, flavor) as c:`."""

    def __init__(
        self,
        base_url: str,
        flavor: str,
        model: str | None = None,
        timeout_s: float = 600,
        max_connections: int = 0,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = auth_headers(api_key)
        self.flavor = flavor
        self._kind = flavor_named(flavor)
        self.model = model
        self._chat_url = URL(f"{self.base_url}/v1/chat/completions")
        self._chat_what = f"POST {self.base_url}/v1/chat/completions"
        # sock_connect, not connect: aiohttp's `connect` also counts the wait for a free pooled
        # connection, which at concurrency above max_connections is legitimately long.
        # max_connections 0: no limit of the client's own; its callers bound what they send at once
        # (a limit here would silently cap stage 3's requests in flight below the engine's capacity).
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(30.0, timeout_s))
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._model_lock = asyncio.Lock()

    async def __aenter__(self) -> EngineClient:
        self._http()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        """The keep-alive session, made on first use (aiohttp wants a running event loop for it)."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trust_env=not is_loopback(self.base_url),  # proxies from the environment, never for loopback
                skip_auto_headers=("User-Agent",),
                headers=self._headers,
            )
        return self._session

    async def _get(self, path: str) -> tuple[int, bytes]:
        what = f"GET {self.base_url}{path}"
        try:
            async with self._http().get(URL(self.base_url + path)) as r:
                return r.status, await r.read()
        except _TRANSPORT_ERRORS as e:
            raise _transport_error(what, e) from e

    async def model_name(self) -> str:
        """The model name to send: the one given, else the first one the server lists at /v1/models
        (asked once: concurrent first requests wait for that one answer)."""
        if self.model is not None:
            return self.model
        async with self._model_lock:
            if self.model is not None:
                return self.model
            status, raw = await self._get("/v1/models")
            _check_status(status, raw, "GET /v1/models", bool(self._headers))
            models = parse_json(raw, "GET /v1/models", status).get("data") or []
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
                status, _ = await self._get(path)
            except TransientEngineError:
                return False
            if status != 404:
                return status == 200
        return False

    async def server_info(self) -> ServerInfo | None:
        """SGLang's server arguments and state (/server_info, older /get_server_info); None from a
        flavor without that route."""
        if not self._kind.server_info:
            return None
        for path in ("/server_info", "/get_server_info"):
            status, raw = await self._get(path)
            if status == 200:
                return cast(ServerInfo, parse_json(raw, f"GET {path}", status))
            if status != 404:
                _check_status(status, raw, f"GET {path}", bool(self._headers))
        return None

    async def metrics_text(self) -> str | None:
        """GET /metrics as text; None when the server has no /metrics."""
        status, raw = await self._get("/metrics")
        if status == 404:
            return None
        _check_status(status, raw, "GET /metrics", bool(self._headers))
        return raw.decode("utf-8", "replace")

    async def prometheus(self) -> dict[str, float] | None:
        """GET /metrics as {name: value} (summed over label sets); None when the server has no /metrics.

        The text (tens of KB on SGLang) is parsed in a worker thread, off the event loop.
        """
        text = await self.metrics_text()
        return None if text is None else await asyncio.to_thread(parse_prometheus, text)

    async def prometheus_samples(self) -> list[Sample] | None:
        """GET /metrics as samples with their labels (parsed off the event loop); None without /metrics."""
        text = await self.metrics_text()
        return None if text is None else await asyncio.to_thread(parse_samples, text)

    def _chat_body(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None,
        sampling: dict[str, Any],
        stream: bool,
        extra_body: Mapping[str, Any] | None,
    ) -> ChatRequest:
        body = ChatRequest(model=model, messages=messages, stream=stream)
        body.update((k, v) for k, v in sampling.items() if v is not None)
        if tools:  # vLLM answers 400 to `"tools": []`: no tools means no field
            body["tools"] = tools
        if stream:  # transformers serve sends the usage only when asked from 5.25 (5.5-5.24 ignore this)
            body["stream_options"] = {"include_usage": True}
        return cast(ChatRequest, {**body, **extra_body}) if extra_body else body

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
        fields: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """One chat completion.

        `fields`: request fields for this engine, as `kit.engines.request_fields.request_fields` makes
        them from the params (they replace the keyword defaults); `extra_body` adds engine-specific
        fields (e.g. SGLang's `ignore_eos`). Fields are sent as given: what an engine would reject
        is refused before the run (`Flavor.sampling_problems`), not filtered here.
        """
        sampling: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "stop": list(stop) if stop else None,
            "seed": seed,
        }
        if fields:
            sampling.update(fields)
        body = self._chat_body(
            self.model or await self.model_name(), messages, tools, sampling, stream, extra_body
        )
        data = orjson.dumps(body)
        what = self._chat_what
        t0 = time.perf_counter()
        try:
            async with self._http().post(self._chat_url, data=data, headers=_JSON_HEADERS) as r:
                if r.status >= 400:
                    _check_status(r.status, await r.read(), what, bool(self._headers))
                if stream:
                    return await _read_stream(r, what, t0)
                raw = await r.read()
        except _TRANSPORT_ERRORS as e:
            raise _transport_error(what, e) from e
        return result_from_json(parse_json(raw, what, r.status), time.perf_counter() - t0)


async def _read_stream(r: aiohttp.ClientResponse, what: str, t0: float) -> ChatResult:
    """Read a streamed (SSE) answer one network read at a time into a ChatResult."""
    acc = StreamAccumulator(what)
    done = False
    async for block in r.content.iter_any():
        if done := acc.feed(block, time.perf_counter() - t0):
            break
    if not done and acc.carry.strip():  # the last event came without its blank line
        acc.feed(b"\n\n", time.perf_counter() - t0)
    return acc.result(time.perf_counter() - t0)
