"""The measured sweep: the real engine, once per arm, driven at a ladder of concurrencies.

Each arm (plain; speculative with draft length k) is a fresh server launched with that arm's
flags, warmed up, then sent a fixed prompt sample with a fixed output budget at each
concurrency. An arm the engine cannot run is a row with status `skipped` and the reason; one
whose server would not start, or whose requests failed, is `failed` with the error. Accept length
comes from the responses where the engine puts it there (SGLang), else from the change of its
`/metrics` counters over the level (vLLM), per draft position too.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import pandas as pd

from kit.asyncrun import run_coroutine
from kit.engines import start_server
from kit.engines.client import EngineClient
from kit.engines.settings import (
    Arm,
    arm_engine,
    engine_unavailable_reason,
    run_request_fields,
    sweep_arms,
    tool_request_fields,
)
from kit.engines.spec_metrics import SpecCounters, gauge_accept_length
from kit.errors import EngineError
from kit.params import RunParams
from kit.progress import progress
from kit.runfolder import RunFolder

COLUMNS = [
    "arm",
    "algorithm",
    "spec_k",
    "concurrency",
    "requests",
    "errors",
    "output_tokens",
    "duration_s",
    "output_tok_s",
    "req_s",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
    "ttft_p50_s",
    "accept_length",
    "accept_source",
    "position_acceptance",
    "status",
    "reason",
]
MAX_ERROR_SHARE = 0.1
"""A level where more than this share of requests failed is not a measurement of the arm."""


def arm_params(params: RunParams, arm: Arm, hybrid: bool) -> RunParams:
    """The run's params with the engine of one arm (see `kit.engines.settings.arm_engine`)."""
    return params.model_copy(update={"engine": arm_engine(params, arm, hybrid)})


def skip_reason(params: RunParams, arm: Arm, mtp_status: str | None) -> str | None:
    """Why `arm` cannot run here, or None when it can."""
    return None if not arm.speculative else engine_unavailable_reason(params.engine, mtp_status)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def _level(
    client: EngineClient,
    prompts: list[dict],
    n: int,
    c: int,
    max_tokens: int,
    fields: dict[str, Any] | None = None,
    tool_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Send `n` requests with at most `c` in flight (greedy; `fields`: the run's chat-template
    switches, so the sweep thinks as stage 3 will); tokens/s over the successful ones."""
    sem = asyncio.Semaphore(c)
    results: list[Any] = []
    errors: list[str] = []

    async def one(i: int) -> None:
        p = prompts[i % len(prompts)]
        async with sem:
            try:
                results.append(
                    await client.chat(
                        p["messages"],
                        tools=p.get("tools_list"),
                        max_tokens=max_tokens,
                        temperature=0.0,
                        top_p=1.0,
                        fields={**(fields or {}), **(tool_fields or {})} if p.get("tools_list") else fields,
                    )
                )
            except EngineError as e:
                errors.append(str(e))

    before = await _spec_scrape(client)
    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    dt = time.perf_counter() - t0
    after = await _spec_scrape(client)
    lat = [r.latency_s for r in results]
    tokens = sum(r.completion_tokens or 0 for r in results)
    accept, source, positions = _accept(results, before, after)
    bad = len(errors) > MAX_ERROR_SHARE * n
    return {
        "concurrency": c,
        "requests": n,
        "errors": len(errors),
        "output_tokens": tokens,
        "duration_s": dt,
        "output_tok_s": tokens / dt if not bad else None,
        "req_s": len(results) / dt,
        "latency_p50_s": _pct(lat, 0.5),
        "latency_p90_s": _pct(lat, 0.9),
        "latency_p99_s": _pct(lat, 0.99),
        "ttft_p50_s": _pct([r.ttft_s for r in results if r.ttft_s is not None], 0.5),
        "accept_length": accept,
        "accept_source": source,
        "position_acceptance": positions,
        "status": "failed" if bad else "ok",
        "reason": f"{len(errors)} of {n} requests failed; first: {errors[0][:400]}" if errors else "",
    }


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


async def _measure_arm(params: RunParams, server: Any, prompts: list[dict], bar: Any) -> list[dict[str, Any]]:
    d = params.decide
    rows = []
    template = {k: v for k, v in run_request_fields(params).items() if k == "chat_template_kwargs"}
    tools = tool_request_fields(params)
    async with EngineClient(
        server.base_url,
        params.engine.flavor,
        params.model.served_name,
        timeout_s=params.generate.request_timeout_s,
    ) as client:
        warm = min(4, max(d.concurrencies))
        await _level(client, prompts, min(4, len(prompts)), warm, d.max_tokens, template, tools)  # warm-up
        for c in d.concurrencies:
            n = d.requests_per_level or max(d.num_prompts, 2 * c)
            rows.append(await _level(client, prompts, n, c, d.max_tokens, template, tools))
            bar.update(1)
    return rows


def run_sweep(
    params: RunParams, folder: RunFolder, prompts: list[dict], mtp_status: str | None, hybrid: bool = False
) -> pd.DataFrame:
    """Measure every arm; write `sweep.parquet`; return the table (columns `COLUMNS`)."""
    d = params.decide
    arms = sweep_arms(params)
    rows: list[dict[str, Any]] = []
    bar = progress(total=len(arms) * len(d.concurrencies), desc="sweep", unit="level")
    for arm in arms:
        head = {"arm": arm.name, "algorithm": arm.algorithm, "spec_k": arm.k}
        reason = skip_reason(params, arm, mtp_status)
        if reason:
            skipped = {"status": "skipped", "reason": reason}
            rows += [{**head, "concurrency": c, **skipped} for c in d.concurrencies]
            bar.update(len(d.concurrencies))
            continue
        p = arm_params(params, arm, hybrid)
        try:
            with start_server(p, folder.logs, name=f"sweep-{arm.name}") as server:
                measured = run_coroutine(_measure_arm(p, server, prompts, bar))
            rows += [{**head, **m} for m in measured]
        except EngineError as e:
            failed = {"status": "failed", "reason": str(e)[:2000]}
            rows += [{**head, "concurrency": c, **failed} for c in d.concurrencies]
            bar.update(len(d.concurrencies))
    bar.close()
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    table.to_parquet(folder.sweep, index=False)
    return table
