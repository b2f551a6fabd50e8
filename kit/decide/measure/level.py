"""One level of the sweep measured: a closed loop of clients at one concurrency against one arm's
server, for at least `decide.level_s` and two waves of requests, watching the server's process
(a dead server stops the level at once); its tokens/s, latencies and accept length (from the
responses where the engine puts it there, else from its `/metrics` counters). Driven by
kit.decide.sweep.sweep."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from kit.decide.measure.pilot import Answer, SweepPrompt, answer_of
from kit.decide.measure.tables import LevelFigures
from kit.engines.answers import TransientEngineError
from kit.engines.client import EngineClient
from kit.engines.flavors.base import RequestFields, ToolFields
from kit.engines.request_fields import run_request_fields, tool_request_fields
from kit.engines.spec_metrics import SpecCounters, gauge_accept_length
from kit.errors import EngineError
from kit.params import RunParams

WATCH_S = 0.5
"""How often a level looks at its server's process: a dead server stops the level at once."""


class Sampling(TypedDict, total=False):
    """How a level's requests sample: the chat request's own fields (kit.engines.client.EngineClient.chat)."""

    temperature: float
    top_p: float
    seed: int | None


GREEDY = Sampling(temperature=0.0, top_p=1.0)
"""How the speculation sweep asks: every arm answers a prompt alike, so they compare on equal work."""
MAX_ERROR_SHARE = 0.1
"""A level where more than this share of requests failed is not a measurement of the arm."""


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def _level(
    client: EngineClient,
    prompts: list[SweepPrompt],
    n: int,
    c: int,
    max_tokens: int,
    fields: RequestFields | None = None,
    tool_fields: ToolFields | None = None,
    min_s: float = 0.0,
    serving: Callable[[], bool] | None = None,
    sampling: Sampling | None = None,
    clients: int | None = None,
) -> LevelFigures:
    """A closed loop of `clients` clients (default `c`, the level's concurrency; greedy; `fields`:
    the run's chat-template switches, so the sweep thinks as stage 3 will) that sends at least `n`
    requests and keeps sending until `min_s` seconds have passed; tokens/s over the successful
    ones. A level of a fraction of a second is one hiccup of a shared machine away from a 3x error
    (docs/decision.md, `decide.level_s`).

    `serving()` says whether the server's process still runs: looked at every `WATCH_S` and after
    each failed request, so a server that dies stops the level at once (status `crashed`, with the
    requests that were out, `crash_in_flight`) rather than after thousands of refused connections
    (on the H200 a dead MTP server was sent 21,612 of them in one level). `sampling`: temperature,
    top_p and seed in place of greedy decoding (the settings sweep samples as stage 3 does)."""
    clients = clients or c
    results: list[Any] = []
    errors: list[str] = []
    answers: dict[str, Answer] = {}
    sent = out = 0
    died: list[int] = []  # the requests out when the server was seen gone

    def dead() -> bool:
        if not died and serving is not None and not serving():
            died.append(out)
        return bool(died)

    async def one(i: int) -> None:
        nonlocal out
        p = prompts[i % len(prompts)]
        out += 1
        try:
            r = await client.chat(
                p["messages"],
                tools=p.get("tools_list"),
                max_tokens=max_tokens,
                **(sampling or GREEDY),
                fields={**(fields or {}), **(tool_fields or {})} if p.get("tools_list") else fields,
            )
        except EngineError as e:
            errors.append(str(e))
            if not dead() and isinstance(e, TransientEngineError) and e.status is None:
                # no answer at all: a dying server refuses connections a moment before its process is
                # gone (seen: 12 refusals in 0.2 s at concurrency 1), so wait for the watch, not send on
                await asyncio.sleep(WATCH_S)
                dead()
            return
        finally:
            out -= 1
        results.append(r)
        if "id" in p:
            answers.setdefault(p["id"], answer_of(p, r, max_tokens))

    async def worker() -> None:
        nonlocal sent
        while (sent < n or time.perf_counter() - t0 < min_s) and not dead():
            sent += 1
            await one(sent - 1)

    async def watch() -> None:
        while not dead():
            await asyncio.sleep(WATCH_S)

    before = await _spec_scrape(client)
    t0 = time.perf_counter()
    await _until_done_or_dead([asyncio.ensure_future(worker()) for _ in range(clients)], watch)
    dt = time.perf_counter() - t0
    if died:
        return LevelFigures(
            concurrency=c,
            clients=clients,
            requests=sent,
            errors=len(errors),
            output_tokens=sum(r.completion_tokens or 0 for r in results),
            duration_s=dt,
            output_tok_s=None,
            status="crashed",
            crash_in_flight=died[0],
            answers=[],
        )
    after = await _spec_scrape(client)
    lat = [r.latency_s for r in results]
    tokens = sum(r.completion_tokens or 0 for r in results)
    accept, source, positions = _accept(results, before, after)
    bad = len(errors) > MAX_ERROR_SHARE * sent
    return LevelFigures(
        concurrency=c,
        clients=clients,
        requests=sent,
        errors=len(errors),
        output_tokens=tokens,
        duration_s=dt,
        output_tok_s=tokens / dt if not bad else None,
        req_s=len(results) / dt,
        latency_p50_s=_pct(lat, 0.5),
        latency_p90_s=_pct(lat, 0.9),
        latency_p99_s=_pct(lat, 0.99),
        ttft_p50_s=_pct([r.ttft_s for r in results if r.ttft_s is not None], 0.5),
        accept_length=accept,
        accept_source=source,
        position_acceptance=positions,
        status="failed" if bad else "ok",
        reason=f"{len(errors)} of {sent} requests failed; first: {errors[0][:400]}" if errors else "",
        answers=list(answers.values()),
    )


async def _until_done_or_dead(workers: list[asyncio.Future], watch: Callable[[], Any]) -> None:
    """Wait for the workers, or stop them the moment `watch()` returns (their server died)."""
    watcher = asyncio.ensure_future(watch())
    everyone = asyncio.gather(*workers)
    try:
        await asyncio.wait([everyone, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (*workers, watcher):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await everyone
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _spec_scrape(client: EngineClient) -> tuple[SpecCounters | None, float | None]:
    """(vLLM's speculative counters, SGLang's accept-length gauge) now; Nones where not served."""
    try:
        samples = await client.prometheus_samples()
    except EngineError:
        return None, None
    samples = samples or []
    return SpecCounters.from_samples(samples), gauge_accept_length(samples)


def _accept(
    results: list[Any], before: tuple, after: tuple
) -> tuple[float | None, str | None, list[float] | None]:
    """(accept length, where it came from, per-position acceptance) for one level.

    Per-response values (SGLang's meta info) first; else the delta of vLLM's /metrics counters
    over the level; else SGLang's gauge.
    """
    per_request = [r.accept_length for r in results if r.accept_length]
    if per_request:
        return statistics.fmean(per_request), "responses", None
    if after[0] is not None:
        delta = after[0].since(before[0])
        if delta.accept_length is not None:
            return delta.accept_length, "metrics counters", delta.position_acceptance or None
    if after[1] is not None:
        return after[1], "metrics gauge", None
    return None, None, None


@dataclass(frozen=True)
class LevelAsk:
    """What one arm's levels send and how, read from the arm's params once (`level_ask`): the
    client's settings, the run's chat-template switches and tool fields (so the sweep thinks and
    calls tools as stage 3 will), the sweep's answer length, how long a level lasts, and what the
    arm's server runs at once (its `max_running_requests`: a memory cap of the sweep's or the user's)."""

    flavor: str
    served_name: str | None
    timeout_s: float
    api_key: str | None
    max_tokens: int
    level_s: float
    requests_per_level: int | None
    cap: int | None
    template: RequestFields
    tools: ToolFields
    stage3: Sampling
    """The run's own sampling (`stage3_sampling`), for a level sampled as stage 3 samples."""


def level_ask(params: RunParams) -> LevelAsk:
    """An arm's `LevelAsk` from its params (kit.decide.measure.servers keeps one per arm)."""
    d = params.decide
    stage3 = stage3_sampling(params)
    run = run_request_fields(params)
    template = (
        RequestFields(chat_template_kwargs=run["chat_template_kwargs"])
        if "chat_template_kwargs" in run
        else RequestFields()
    )
    return LevelAsk(
        flavor=params.engine.flavor,
        served_name=params.model.served_name,
        timeout_s=params.generate.request_timeout_s,
        api_key=params.engine.api_key(),
        max_tokens=d.max_tokens,
        level_s=d.level_s,
        requests_per_level=d.requests_per_level,
        cap=params.engine.max_running_requests,
        template=template,
        tools=tool_request_fields(params),
        stage3=stage3,
    )


def arm_client(ask: LevelAsk, server: Any) -> EngineClient:
    """A client of the arm's `server`, as its levels ask."""
    return EngineClient(server.base_url, ask.flavor, ask.served_name, ask.timeout_s, api_key=ask.api_key)


def stage3_sampling(params: RunParams) -> Sampling:
    """The run's own temperature, top_p and seed (`generate.sampling`), as the settings sweep sends them."""
    s = params.generate.sampling
    return Sampling(temperature=s.temperature, top_p=s.top_p, seed=s.seed)


async def measure_level(
    ask: LevelAsk, server: Any, prompts: list[SweepPrompt], c: int, sampled: bool = False
) -> LevelFigures:
    """One level on `server`, as the arm asks (`LevelAsk`): greedy, or sampled as stage 3 samples
    (`sampled`, `stage3_sampling`).

    Twice the level's requests, or twice what the server runs at once where that is fewer (its
    `max_running_requests`: a memory cap of the sweep's or the user's own): two waves of what it
    runs either way. Above its cap a level measures the same running batch as at the cap, so it
    keeps twice the cap out at once (`clients`: the cap running, as many queued), not the level's
    concurrency: each client sends at least once while the level lasts `decide.level_s`, so on the
    Qwen3.6-27B shape capped at 8 on an H100 the level at 256 sent 264 requests for 135 s
    (2026-12-06 night) for the figure 16 give. Its latencies are then those of twice the cap out."""
    how = ask.stage3 if sampled else None
    cap = ask.cap
    clients = min(c, 2 * cap) if cap else c
    n = ask.requests_per_level or 2 * min(c, cap or c)
    async with arm_client(ask, server) as client:
        return await _level(
            client,
            prompts,
            n,
            c,
            ask.max_tokens,
            ask.template,
            ask.tools,
            ask.level_s,
            _serving(server),
            how,
            clients,
        )


def _serving(server: Any) -> Callable[[], bool] | None:
    """How to see that a server the kit runs has died (None for one it does not run: an external
    server's process is not ours to watch, and its requests' errors say enough)."""
    if not getattr(server, "restartable", False):
        return None
    return getattr(server, "serving", None) or server.alive
