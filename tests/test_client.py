"""The async engine client: against a real `transformers serve`, and SGLang-shaped answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from kit.engines import EngineClient, RequestRejected, ServerProcess, TransientEngineError, start_server
from kit.engines.metrics import parse_prometheus, parse_samples
from kit.engines.process import free_port
from kit.params import RunParams

REPO = Path(__file__).resolve().parents[1]
HELLO = [{"role": "user", "content": "hello, who are you?"}]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# --- SGLang-shaped answers through httpx's mock transport (no SGLang on this machine) ------------

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


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


class FakeSGLang:
    """Answers like SGLang 0.5 (old endpoint names); records the request bodies it gets."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "qwen"}]})
        if path == "/get_server_info":
            return httpx.Response(200, json={"max_running_requests": 48, "speculative_algorithm": "EAGLE"})
        if path == "/metrics":
            return httpx.Response(200, text=SGLANG_METRICS)
        if path == "/v1/chat/completions":
            body = json.loads(request.content)
            self.bodies.append(body)
            return self.chat(body)
        return httpx.Response(404, json={"detail": "Not Found"})

    def chat(self, body: dict[str, Any]) -> httpx.Response:
        usage = {"prompt_tokens": 7, "completion_tokens": 12, "total_tokens": 19}
        meta = {"spec_verify_ct": 4, "completion_tokens": 12}
        if body.get("stream"):
            return httpx.Response(200, content=sse(
                {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
                {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
                {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
                {"choices": [], "usage": usage, "meta_info": meta},
            ), headers={"content-type": "text/event-stream"})  # fmt: skip
        choice = {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": usage, "meta_info": meta})


def fake_client(handler: Callable[[httpx.Request], httpx.Response], flavor: str = "sglang") -> EngineClient:
    return EngineClient("http://127.0.0.1:30000", flavor, transport=httpx.MockTransport(handler))


def test_sglang_answers_give_accept_length_server_info_and_metrics() -> None:
    fake = FakeSGLang()

    async def go() -> None:
        async with fake_client(fake) as c:
            r = await c.chat(HELLO, max_tokens=12, temperature=0, seed=1)
            assert (r.text, r.finish_reason, r.prompt_tokens, r.completion_tokens) == ("Hello", "stop", 7, 12)
            assert r.accept_length == 3.0 and r.ttft_s is None
            s = await c.chat(HELLO, max_tokens=12, stream=True)
            assert (s.text, s.finish_reason, s.completion_tokens, s.accept_length) == (
                "Hello",
                "stop",
                12,
                3.0,
            )
            assert s.ttft_s is not None and 0 <= s.ttft_s <= s.latency_s
            assert (await c.server_info() or {})["max_running_requests"] == 48, (
                "falls back to /get_server_info"
            )
            metrics = await c.prometheus() or {}
            assert metrics["sglang:num_running_reqs"] == 42.0, "summed over data-parallel ranks"
            assert metrics["sglang:spec_accept_length"] == 3.25

    run(go())
    assert fake.bodies[0] == {"model": "qwen", "messages": HELLO, "stream": False, "max_tokens": 12,
                              "temperature": 0, "top_p": 1.0, "seed": 1}  # fmt: skip
    assert fake.bodies[1]["stream_options"] == {"include_usage": True}


def test_transformers_requests_carry_only_fields_it_accepts() -> None:
    fake = FakeSGLang()

    async def go() -> None:
        async with fake_client(fake, flavor="transformers") as c:
            await c.chat(HELLO, max_tokens=5, stream=True, stop=["\n"], tools=[{"type": "function"}])

    run(go())
    sent = set(fake.bodies[0])
    assert sent == {"model", "messages", "stream", "max_tokens", "temperature", "top_p", "stop", "tools"}


@pytest.mark.parametrize(("status", "error"), [(400, RequestRejected), (422, RequestRejected),
                                               (429, TransientEngineError), (500, TransientEngineError),
                                               (503, TransientEngineError)])  # fmt: skip
def test_http_errors_are_split_into_rejected_and_transient(status: int, error: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"detail": f"status {status}"})

    async def go() -> None:
        async with EngineClient(
            "http://x:1", "sglang", model="m", transport=httpx.MockTransport(handler)
        ) as c:
            await c.chat(HELLO, max_tokens=4)

    with pytest.raises(error, match=str(status)) as info:
        run(go())
    assert info.value.status == status and f"status {status}" in info.value.body  # type: ignore[attr-defined]


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
            assert r.text.strip() and r.finish_reason in ("length", "stop")
            assert 0 < r.completion_tokens <= 12 and r.prompt_tokens > 5  # type: ignore[operator]
            assert r.raw_usage and r.raw_usage["total_tokens"] == r.prompt_tokens + r.completion_tokens
            assert (s.text, s.completion_tokens, s.prompt_tokens) == (
                r.text,
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
    """transformers serve answers 422 to fields outside its schema, but serves a prompt longer than the
    model's max_position_embeddings (2048 for the demo model): the kit must filter those itself."""
    max_pos = json.loads((server.params.model.path / "config.json").read_text())["max_position_embeddings"]

    async def go() -> None:
        async with EngineClient(server.base_url, "transformers") as c:
            with pytest.raises(RequestRejected) as info:
                await c.chat(HELLO, max_tokens=4, extra_body={"ignore_eos": True})
            assert info.value.status == 422 and "ignore_eos" in info.value.body
            long = [{"role": "user", "content": "the cat sat on the mat " * 600}]
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
