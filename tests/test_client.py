"""The async engine client: against a real `transformers serve`, and SGLang-shaped answers."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from packaging.version import Version

from kit.engines import EngineClient, RequestRejected, ServerProcess, TransientEngineError, start_server
from kit.engines.metrics import parse_prometheus, parse_samples
from kit.engines.process import free_port
from kit.params import RunParams

REPO = Path(__file__).resolve().parents[1]
HELLO = [{"role": "user", "content": "hello, who are you?"}]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# --- SGLang-shaped answers from a small aiohttp server on loopback (no SGLang on this machine) ------

SGLANG_METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",dp_rank="0"} 30.0
sglang:num_running_reqs{engine_type="unified",model_name="qwen",dp_rank="1"} 12.0
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="qwen"} 3.25
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{model_name="qwen"} 123456.0
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="0.5",model_name="qwen"} 3.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="qwen"} 10.0
sglang:e2e_request_latency_seconds_sum{model_name="qwen"} 21.5
sglang:e2e_request_latency_seconds_count{model_name="qwen"} 10.0
sglang:cache_hit_rate{model_name="qwen"} NaN
"""


def sse(*chunks: dict[str, Any], sep: str = "\n") -> bytes:
    events = [f"data: {json.dumps(c)}{sep}{sep}" for c in chunks]
    return "".join([": keep-alive comment" + sep + sep, *events, f"data: [DONE]{sep}{sep}"]).encode()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FakeSGLang:
    """Answers like SGLang 0.5 (old endpoint names); records the request bodies it gets.

    `split` sends a streamed answer in pieces of that many bytes, each written (and so read by the
    client) on its own, so SSE events are cut across network reads; `sep` is the line ending.
    """

    def __init__(self, split: int = 0, sep: str = "\n") -> None:
        self.bodies: list[dict[str, Any]] = []
        self.split, self.sep = split, sep

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/v1/models":
            return web.json_response({"data": [{"id": "qwen"}]})
        if path == "/get_server_info":
            return web.json_response({"max_running_requests": 48, "speculative_algorithm": "EAGLE"})
        if path == "/metrics":
            return web.Response(text=SGLANG_METRICS)
        if path == "/v1/chat/completions":
            body = await request.json()
            self.bodies.append(body)
            return await self.chat(request, body)
        return web.json_response({"detail": "Not Found"}, status=404)

    async def chat(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        usage = {"prompt_tokens": 7, "completion_tokens": 12, "total_tokens": 19}
        meta = {"spec_verify_ct": 4, "completion_tokens": 12}
        if not body.get("stream"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello"},
                "finish_reason": "stop",
            }
            return web.json_response({"choices": [choice], "usage": usage, "meta_info": meta})
        payload = sse(
            {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
            {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
            {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
            {"choices": [], "usage": usage, "meta_info": meta},
            sep=self.sep,
        )
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        step = self.split or len(payload)
        for i in range(0, len(payload), step):
            await r.write(payload[i : i + step])
            await asyncio.sleep(0.002)  # a separate network read on the client's side
        await r.write_eof()
        return r


async def serve(handler: Handler) -> web.AppRunner:
    async def route(request: web.Request) -> web.StreamResponse:
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", route)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def url_of(runner: web.AppRunner) -> str:
    host, port = runner.addresses[0][:2]
    return f"http://{host}:{port}"


def against(
    handler: Handler, flavor: str, test: Callable[[EngineClient], Awaitable[None]], **kw: Any
) -> None:
    """Run `test` with an EngineClient of `flavor` talking to `handler` on a loopback port."""

    async def go() -> None:
        runner = await serve(handler)
        try:
            async with EngineClient(url_of(runner), flavor, **kw) as c:
                await test(c)
        finally:
            await runner.cleanup()

    run(go())


@pytest.mark.parametrize(("split", "sep"), [(0, "\n"), (7, "\n"), (1, "\r\n")])
def test_sglang_answers_give_accept_length_server_info_and_metrics(split: int, sep: str) -> None:
    """Also with SSE events cut across network reads (7 bytes, 1 byte at a time) and CRLF endings."""
    fake = FakeSGLang(split, sep)

    async def test(c: EngineClient) -> None:
        r = await c.chat(HELLO, max_tokens=12, temperature=0, seed=1)
        assert (r.text, r.finish_reason, r.prompt_tokens, r.completion_tokens) == ("Hello", "stop", 7, 12)
        assert r.accept_length == 3.0 and r.ttft_s is None
        s = await c.chat(HELLO, max_tokens=12, stream=True)
        assert (s.text, s.finish_reason, s.completion_tokens, s.accept_length) == ("Hello", "stop", 12, 3.0)
        assert s.ttft_s is not None and 0 <= s.ttft_s <= s.latency_s
        if split:
            assert s.latency_s - s.ttft_s > 0.002, "ttft is when the first content arrived, not the end"
        assert (await c.server_info() or {})["max_running_requests"] == 48, "falls back to /get_server_info"
        metrics = await c.prometheus() or {}
        assert metrics["sglang:num_running_reqs"] == 42.0, "summed over data-parallel ranks"
        assert metrics["sglang:spec_accept_length"] == 3.25

    against(fake, "sglang", test)
    assert fake.bodies[0] == {"model": "qwen", "messages": HELLO, "stream": False, "max_tokens": 12,
                              "temperature": 0, "top_p": 1.0, "seed": 1}  # fmt: skip
    assert fake.bodies[1]["stream_options"] == {"include_usage": True}


CALL_ARGS = '{"city": "Paris", "unit": "celsius"}'


class ThinkingToolAnswers(FakeSGLang):
    """Answers as an engine with its reasoning and tool-call parsers on: vLLM 0.32 names the
    reasoning `reasoning`, SGLang and transformers serve `reasoning_content`; streamed tool calls
    come as fragments (id and name once, the arguments in pieces)."""

    def __init__(self, key: str, split: int = 0) -> None:
        super().__init__(split)
        self.key = key

    async def chat(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        usage = {
            "prompt_tokens": 9,
            "completion_tokens": 20,
            "completion_tokens_details": {"reasoning_tokens": 6},
        }
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": CALL_ARGS},
        }
        if not body.get("stream"):
            message = {"role": "assistant", "content": None, self.key: "The user wants weather.",
                       "tool_calls": [call]}  # fmt: skip
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            return web.json_response({"choices": [choice], "usage": usage})
        pieces = [{"index": 0, "function": {"arguments": a}} for a in (CALL_ARGS[:9], CALL_ARGS[9:])]
        first = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        payload = sse(
            {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
            {"choices": [{"index": 0, "delta": {self.key: "The user "}}]},
            {"choices": [{"index": 0, "delta": {self.key: "wants weather."}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]},
            *({"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]} for piece in pieces),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            {"choices": [], "usage": usage},
        )  # fmt: skip
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        step = self.split or len(payload)
        for i in range(0, len(payload), step):
            await r.write(payload[i : i + step])
        await r.write_eof()
        return r


@pytest.mark.parametrize(("key", "split"), [("reasoning", 0), ("reasoning_content", 11)])
def test_reasoning_and_tool_calls_are_kept_from_plain_and_streamed_answers(key: str, split: int) -> None:
    async def test(c: EngineClient) -> None:
        for stream in (False, True):
            r = await c.chat(HELLO, max_tokens=20, stream=stream, tools=[{"type": "function"}])
            assert r.text == "" and r.finish_reason == "tool_calls"
            assert r.reasoning == "The user wants weather." and r.reasoning_tokens == 6
            assert r.tool_calls == [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": CALL_ARGS},
                }
            ]
            if stream:
                assert r.ttft_s is not None, "the first reasoning chunk is the first token"

    against(ThinkingToolAnswers(key, split), "vllm", test)


def test_request_fields_are_sent_as_given() -> None:
    """Sampling fields beyond the OpenAI set reach the engine (vLLM / SGLang take them)."""
    fake = FakeSGLang()
    fields = {"temperature": 0.6, "top_k": 20, "min_p": 0.0, "presence_penalty": 1.5,
              "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip

    async def test(c: EngineClient) -> None:
        await c.chat(HELLO, max_tokens=7, fields=fields)

    against(fake, "vllm", test)
    assert fake.bodies[0] == {"model": "qwen", "messages": HELLO, "stream": False, "max_tokens": 7,
                              "top_p": 1.0, **fields}  # fmt: skip


def test_proxies_from_the_environment_are_bypassed_for_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def test(c: EngineClient) -> None:
        assert (await c.chat(HELLO, max_tokens=4)).text == "Hello"

    against(FakeSGLang(), "sglang", test)


def test_transformers_requests_carry_only_fields_it_accepts() -> None:
    fake = FakeSGLang()

    async def test(c: EngineClient) -> None:
        await c.chat(HELLO, max_tokens=5, stream=True, stop=["\n"], tools=[{"type": "function"}])

    against(fake, "transformers", test)
    sent = set(fake.bodies[0])
    # stream_options: transformers serve 5.25 sends a streamed answer's usage only when asked; 5.5-5.24
    # ignore it (a warning in its log) and send it anyway
    assert sent == {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
    }


REJECTED, TRANSIENT = (
    [(s, RequestRejected) for s in (400, 422)],
    [(s, TransientEngineError) for s in (408, 429, 500, 503)],
)


@pytest.mark.parametrize(("status", "error"), REJECTED + TRANSIENT)
@pytest.mark.parametrize("stream", [False, True])
def test_http_errors_are_split_into_rejected_and_transient(
    status: int, error: type[Exception], stream: bool
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"detail": f"status {status}"}, status=status)

    async def test(c: EngineClient) -> None:
        await c.chat(HELLO, max_tokens=4, stream=stream)

    with pytest.raises(error, match=str(status)) as info:
        against(handler, "sglang", test, model="m")
    assert info.value.status == status and f"status {status}" in info.value.body  # type: ignore[attr-defined]


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_is_not_json_or_cut_short_is_transient(stream: bool) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        if not stream:
            return web.Response(text="<html>proxy error</html>")
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        await r.write(b'data: {"choices": []}\n\ndata: {"choices": [tru\n\n')
        return r

    async def test(c: EngineClient) -> None:
        await c.chat(HELLO, max_tokens=4, stream=stream)

    with pytest.raises(TransientEngineError, match="not JSON"):
        against(handler, "sglang", test, model="m")


def test_a_server_that_stops_answering_times_out_as_transient() -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response({})

    async def test(c: EngineClient) -> None:
        await c.chat(HELLO, max_tokens=4)

    with pytest.raises(TransientEngineError, match="timed out"):
        against(handler, "sglang", test, model="m", timeout_s=0.3)


def test_a_server_that_is_not_there_is_transient() -> None:
    async def go() -> None:
        async with EngineClient(
            f"http://127.0.0.1:{free_port()}", "transformers", model="m", timeout_s=5
        ) as c:
            assert await c.health() is False
            await c.chat(HELLO, max_tokens=4)

    with pytest.raises(TransientEngineError, match="connection failed"):
        run(go())


def test_parse_prometheus_keeps_counters_gauges_and_histogram_totals() -> None:
    values = parse_prometheus(SGLANG_METRICS)
    assert values == {
        "sglang:num_running_reqs": 42.0, "sglang:spec_accept_length": 3.25,
        "sglang:generation_tokens_total": 123456.0, "sglang:e2e_request_latency_seconds_sum": 21.5,
        "sglang:e2e_request_latency_seconds_count": 10.0,
    }  # fmt: skip
    ranks = [
        s.labels["dp_rank"] for s in parse_samples(SGLANG_METRICS) if s.name == "sglang:num_running_reqs"
    ]
    assert ranks == ["0", "1"]


# --- a real transformers serve ------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from kit.demo.model import ensure_demo_model

    model = ensure_demo_model(REPO / ".cache" / "demo" / "model", quiet=True)
    p = RunParams.model_validate({"run": "client", "model": {"path": str(model)}})
    srv = start_server(p, tmp_path_factory.mktemp("logs"))
    assert isinstance(srv, ServerProcess)
    with srv:
        yield srv


@pytest.mark.slow
def test_chat_returns_text_and_usage(server: ServerProcess) -> None:
    async def go() -> None:
        async with EngineClient(server.base_url, "transformers") as c:
            assert await c.model_name() == str(server.params.model.path)
            assert await c.health() is True
            assert await c.prometheus() is None and await c.server_info() is None
            r = await c.chat(HELLO, max_tokens=12, temperature=0)
            s = await c.chat(HELLO, max_tokens=12, temperature=0, stream=True)
            # the demo model thinks first: 12 tokens may end inside its <think> block
            assert (r.text.strip() or r.reasoning) and r.finish_reason in ("length", "stop")
            assert 0 < r.completion_tokens <= 12 and r.prompt_tokens > 5  # type: ignore[operator]
            assert r.raw_usage and r.raw_usage["total_tokens"] == r.prompt_tokens + r.completion_tokens
            # transformers serve strips the plain answer's reasoning, not the streamed one's
            assert (s.text, (s.reasoning or "").strip(), s.completion_tokens, s.prompt_tokens) == (
                r.text,
                (r.reasoning or "").strip(),
                r.completion_tokens,
                r.prompt_tokens,
            )
            assert s.ttft_s is not None and 0 < s.ttft_s <= s.latency_s

    run(go())


@pytest.mark.slow
def test_concurrent_requests_all_come_back(server: ServerProcess) -> None:
    async def go() -> list[int]:
        async with EngineClient(server.base_url, "transformers") as c:
            prompts = [[{"role": "user", "content": f"question number {i}?"}] for i in range(16)]
            results = await asyncio.gather(*(c.chat(m, max_tokens=8, temperature=0.7) for m in prompts))
            return [r.completion_tokens or 0 for r in results]

    tokens = run(go())
    assert len(tokens) == 16 and all(0 < t <= 8 for t in tokens)


@pytest.mark.slow
def test_unknown_fields_are_rejected_and_overlong_prompts_are_not(server: ServerProcess) -> None:
    """transformers serve answers 422 to fields outside its schema. A prompt longer than the model's
    max_position_embeddings (2048 for the demo model) it served before 5.25 and refuses with a 400 from
    5.25: the kit filters those itself (kit.generate.loop), whichever it is."""
    max_pos = json.loads((server.params.model.path / "config.json").read_text())["max_position_embeddings"]
    refuses_long = Version(importlib.metadata.version("transformers")) >= Version("5.25")

    async def go() -> None:
        async with EngineClient(server.base_url, "transformers") as c:
            with pytest.raises(RequestRejected) as info:
                await c.chat(HELLO, max_tokens=4, extra_body={"ignore_eos": True})
            assert info.value.status == 422 and "ignore_eos" in info.value.body
            long = [{"role": "user", "content": "the cat sat on the mat " * 600}]
            if refuses_long:
                with pytest.raises(RequestRejected) as info:
                    await c.chat(long, max_tokens=4, temperature=0)
                assert info.value.status == 400 and f"at most {max_pos}" in info.value.body
            else:
                r = await c.chat(long, max_tokens=4, temperature=0)
                assert r.prompt_tokens > max_pos and r.completion_tokens == 4  # type: ignore[operator]

    run(go())


@pytest.mark.slow
def test_restart_keeps_the_address_and_requests_in_between_are_transient(server: ServerProcess) -> None:
    url = server.base_url
    server.stop()

    async def one() -> int:
        async with EngineClient(url, "transformers") as c:
            return (await c.chat(HELLO, max_tokens=3, temperature=0)).completion_tokens or 0

    with pytest.raises(TransientEngineError):
        run(one())
    server.restart()
    assert server.base_url == url and run(one()) == 3
    assert server.log_path.read_text().count("==== kit ") == 2, "one header line per start"


class CountingModels(FakeSGLang):
    """Counts GET /v1/models and answers it slowly, so that concurrent first requests overlap it."""

    def __init__(self) -> None:
        super().__init__()
        self.model_lookups = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/v1/models":
            self.model_lookups += 1
            await asyncio.sleep(0.05)
        return await super().__call__(request)


def test_the_served_model_name_is_asked_once_however_many_requests_start_together() -> None:
    """64 requests sent at once by a client that was given no model name: one GET /v1/models."""
    fake = CountingModels()

    async def test(c: EngineClient) -> None:
        answers = await asyncio.gather(*(c.chat(HELLO, max_tokens=4) for _ in range(64)))
        assert all(a.text == "Hello" for a in answers)

    against(fake, "vllm", test)
    assert fake.model_lookups == 1
    assert {b["model"] for b in fake.bodies} == {"qwen"} and len(fake.bodies) == 64


def test_a_request_without_tools_carries_no_tools_field() -> None:
    """A function-calling row whose tools list is empty: vLLM answers 400 to `"tools": []`, and the
    rejection would be retried on every rerun; the field is left out instead."""
    fake = FakeSGLang()

    async def test(c: EngineClient) -> None:
        await c.chat(HELLO, tools=[], max_tokens=4)
        await c.chat(HELLO, tools=[{"type": "function", "function": {"name": "f"}}], max_tokens=4)

    against(fake, "vllm", test, model="qwen")
    assert "tools" not in fake.bodies[0] and fake.bodies[1]["tools"][0]["function"]["name"] == "f"
