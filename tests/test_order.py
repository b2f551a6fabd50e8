"""Longest first: the prediction of output lengths, the order it gives, that the order is a pure
function of the plan and what is on disk, and that the loop sends work in that order."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml
from aiohttp import web
from fixtures_outputs import made_row

from kit.engines.process import free_port
from kit.generate.order import longest_first
from kit.generate.run import run_generation
from kit.generate.store import ShardWriter
from kit.params import load_params
from kit.prompts.lengths import LENGTH_COLUMNS, LengthModel, run_length_model
from kit.prompts.prompt_set import ensure_prompts
from kit.runfolder import RunFolder

NONE = pd.DataFrame(columns=LENGTH_COLUMNS)
"""No row made yet."""


def _made(source: str, prompt: list[int], completion: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"source": source, "prompt_tokens": prompt, "completion_tokens": completion})


def test_made_rows_predict_by_source_and_prompt_length_capped() -> None:
    short = _made("a", [10] * 8 + [100] * 8, [20] * 8 + [60] * 8)  # longer prompts, longer answers
    few = _made("b", [10] * 3, [500] * 3)  # too few rows: predicted at its cap
    model = LengthModel.fit(pd.concat([short, few]), caps={"b": 64}, default_cap=256)
    got = model.predict(np.array(["a", "a", "b", "c"]), np.array([10, 100, 10, 10]))
    assert got.tolist() == [20, 60, 64, 256]  # c: no rows, no cap of its own: the run's max_tokens
    capped = LengthModel.fit(short, caps={"a": 40}, default_cap=256)
    assert capped.predict(np.array(["a"]), np.array([100])).tolist() == [40]
    assert model.describe()["a"] == {"from": "made rows", "rows": 16, "mean_tokens": 40.0}
    assert model.describe()["b"] == {"from": "max_tokens", "cap": 64}


def _todo(sources: list[str], prompt: list[int]) -> pa.Table:
    return pa.table({"source": sources, "prompt_tokens": prompt})


def test_longest_first_is_a_stable_permutation() -> None:
    todo = _todo(["a", "b", "a", "b", "c"], [1, 1, 1, 1, 1])
    work = [(i, k) for i in range(5) for k in range(2)]
    model = LengthModel.fit(NONE, {"b": 99}, 16)
    ordered, summary = longest_first(todo, work, model)
    assert sorted(ordered) == sorted(work)
    assert ordered[:4] == [(1, 0), (1, 1), (3, 0), (3, 1)]  # b's cap is the longest; ties keep plan order
    assert ordered[4:] == [w for w in work if w[0] != 1 and w[0] != 3]
    assert summary["changed"] and summary["predicted_tokens_first"] == 99
    same, summary = longest_first(todo, work, LengthModel.fit(NONE, {}, 16))
    assert same == work and not summary["changed"]  # one cap for all: the plan's order


def test_the_order_is_a_function_of_the_plan_and_the_rows_on_disk(write_params) -> None:
    """Made rows say one source answers long: its prompts left go first, the same on every resume."""
    params = load_params(
        write_params(
            counts={"metamathqa": 12, "codefeedback": 12},
            engine={"flavor": "external", "base_url": "http://127.0.0.1:9"},
        )
    )
    folder = RunFolder(params.run_dir).ensure()
    prompts = ensure_prompts(params, folder)
    rows = prompts.to_pylist()
    writer = ShardWriter(folder.generations)
    made = [r for r in rows if r["source"] == "metamathqa"][:8] + [
        r for r in rows if r["source"] == "codefeedback"
    ][:8]
    for r in made:
        writer.add(made_row(r, tokens=200 if r["source"] == "codefeedback" else 5))
    writer.flush()
    left = [(i, 0) for i, r in enumerate(rows) if r["id"] not in {m["id"] for m in made}]
    first, _ = longest_first(prompts, left, run_length_model(params, folder))
    again, _ = longest_first(prompts, left, run_length_model(params, folder))
    assert first == again
    assert [rows[i]["source"] for i, _ in first] == ["codefeedback"] * 4 + ["metamathqa"] * 4


@contextmanager
def recording_server() -> Iterator[tuple[str, list[dict]]]:
    """An OpenAI-shaped server on loopback that answers at once and records each request's
    source-telling fields (max_tokens), in the order received: what the kit sent, and when."""
    seen: list[dict] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"max_tokens": body.get("max_tokens")})
        n = int(body.get("max_tokens") or 1)
        answer = {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok " * n}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
        }
        return web.json_response(answer)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    loop = asyncio.new_event_loop()
    port = free_port()
    app = web.Application()
    app.add_routes(
        [web.post("/v1/chat/completions", chat), web.get("/health", health), web.get("/v1/models", models)]
    )
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@pytest.mark.parametrize("order", ["longest_first", "plan"])
def test_the_loop_sends_the_longest_budget_first(write_params, order: str) -> None:
    """Two sources, one with a larger output budget: longest_first sends all of its prompts first
    (one at a time here, so the server sees the send order); `plan` interleaves them by id."""
    with recording_server() as (url, seen):
        path = write_params(
            counts={"metamathqa": 6, "webinstructsub": 6},
            engine={"flavor": "external", "base_url": url, "startup_timeout_s": 30},
            generate={"concurrency": 1, "order": order},
        )
        raw = yaml.safe_load(path.read_text())
        for s in raw["data"]["sources"]:
            s["max_tokens"] = 12 if s["name"] == "webinstructsub" else 3
        path.write_text(yaml.safe_dump(raw))
        params = load_params(path)
        manifest = run_generation(params, RunFolder(params.run_dir))
    budgets = [r["max_tokens"] for r in seen]
    assert manifest["complete"] and sorted(budgets) == [3] * 6 + [12] * 6
    assert manifest["order"]["order"] == order
    if order == "longest_first":
        assert budgets == [12] * 6 + [3] * 6
        assert manifest["order"]["by_source"]["webinstructsub"] == {"from": "max_tokens", "cap": 12}
    else:
        assert budgets != [12] * 6 + [3] * 6


def test_sweep_answers_predict_a_source_the_run_has_not_made_yet() -> None:
    """Before its own rows, a source is predicted from stage 2's answers: an answer the sweep's
    budget cut (finish_reason length) counts as reaching the source's cap; made rows take over."""
    answers = pd.DataFrame(
        {
            "source": ["a"] * 4 + ["b"] * 4 + ["c"] * 2,
            "prompt_tokens": [10] * 10,
            "completion_tokens": [32, 32, 32, 32, 5, 7, 6, 6, 9, 9],
            "finish_reason": ["length"] * 4 + ["stop"] * 6,
        }
    )
    model = LengthModel.fit(NONE, {"a": 1000}, 256, answers, answers_cap=32)
    got = model.predict(np.array(["a", "b", "c"]), np.array([10, 10, 10]))
    assert got.tolist() == [1000, 6, 256]  # c: too few answers, its cap
    assert model.describe()["b"] == {"from": "sweep answers", "rows": 4, "mean_tokens": 6.0}
    made = _made("b", [10] * 8, [100] * 8)
    assert LengthModel.fit(made, {}, 256, answers, 32).predict(np.array(["b"]), np.array([10])).tolist() == [
        100
    ]
