"""The measured sweep: the real engine, once per arm, driven at a ladder of concurrencies.

Each arm (plain; speculative with draft length k) is a fresh server launched with that arm's
flags, warmed up, then sent a fixed prompt sample with a fixed output budget at each
concurrency. An arm the engine cannot run is a row with status `skipped` and the reason.
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
from kit.errors import EngineError
from kit.params import RunParams
from kit.progress import progress
from kit.runfolder import RunFolder

COLUMNS = [
    "arm",
    "spec_k",
    "concurrency",
    "requests",
    "output_tokens",
    "duration_s",
    "output_tok_s",
    "req_s",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
    "ttft_p50_s",
    "accept_length",
    "status",
    "reason",
]
NO_SPEC_FLAVORS = {
    "transformers": "transformers serve has no speculative decoding",
    "external": "an external server cannot be relaunched with other flags by the kit",
}


def arm_params(params: RunParams, k: int, hybrid: bool) -> RunParams:
    """Engine settings of one arm. Max running requests is always explicit: SGLang lowers it to
    48 under speculation when it is unset, which would cap the ladder silently."""
    eng = params.engine
    top = max(params.decide.concurrencies)
    update: dict[str, Any] = {
        "max_running_requests": eng.max_running_requests or top,
        "cuda_graph_max_bs": eng.cuda_graph_max_bs or min(top, 512),
    }
    if k == 0:
        update["speculative"] = eng.speculative.model_copy(
            update={"algorithm": None, "num_steps": None, "eagle_topk": None, "num_draft_tokens": None}
        )
    else:
        update["speculative"] = eng.speculative.model_copy(
            update={
                "algorithm": eng.speculative.algorithm or "EAGLE",
                "num_steps": k,
                "eagle_topk": 1,
                "num_draft_tokens": k + 1,
            }
        )
        if hybrid:
            update["mamba_strategy"] = eng.mamba_strategy or "extra_buffer"
    if eng.flavor in NO_SPEC_FLAVORS:
        update = {}
    return params.model_copy(update={"engine": eng.model_copy(update=update)})


def skip_reason(params: RunParams, k: int, mtp_status: str | None) -> str | None:
    """Why the arm with draft length k cannot run here, or None when it can."""
    if k == 0:
        return None
    if params.engine.flavor in NO_SPEC_FLAVORS:
        return NO_SPEC_FLAVORS[params.engine.flavor]
    spec = params.engine.speculative
    needs_heads = (spec.algorithm or "EAGLE") in {"EAGLE", "NEXTN", "MTP"} and spec.draft_model_path is None
    if needs_heads and mtp_status == "declared_missing":
        return "the config declares MTP layers but their weights are missing from the model directory"
    if needs_heads and mtp_status not in (None, "present"):
        return "this model has no MTP heads and no draft model is given (engine.speculative.draft_model_path)"
    return None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def _level(
    client: EngineClient, prompts: list[dict], n: int, c: int, max_tokens: int
) -> dict[str, Any]:
    sem = asyncio.Semaphore(c)
    results: list[Any] = []

    async def one(i: int) -> None:
        p = prompts[i % len(prompts)]
        async with sem:
            results.append(
                await client.chat(
                    p["messages"],
                    tools=p.get("tools_list"),
                    max_tokens=max_tokens,
                    temperature=0.0,
                    top_p=1.0,
                )
            )

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    dt = time.perf_counter() - t0
    lat = [r.latency_s for r in results]
    tokens = sum(r.completion_tokens or 0 for r in results)
    acc = [r.accept_length for r in results if r.accept_length]
    ttft = [r.ttft_s for r in results if r.ttft_s is not None]
    return {
        "concurrency": c,
        "requests": n,
        "output_tokens": tokens,
        "duration_s": dt,
        "output_tok_s": tokens / dt,
        "req_s": n / dt,
        "latency_p50_s": _pct(lat, 0.5),
        "latency_p90_s": _pct(lat, 0.9),
        "latency_p99_s": _pct(lat, 0.99),
        "ttft_p50_s": _pct(ttft, 0.5),
        "accept_length": statistics.fmean(acc) if acc else None,
        "status": "ok",
        "reason": "",
    }


async def _measure_arm(params: RunParams, server: Any, prompts: list[dict], bar: Any) -> list[dict[str, Any]]:
    d = params.decide
    rows = []
    async with EngineClient(
        server.base_url,
        params.engine.flavor,
        params.model.served_name,
        timeout_s=params.generate.request_timeout_s,
    ) as client:
        await _level(
            client, prompts, min(4, len(prompts)), min(4, max(d.concurrencies)), d.max_tokens
        )  # warm-up
        for c in d.concurrencies:
            n = d.requests_per_level or max(d.num_prompts, 2 * c)
            rows.append(await _level(client, prompts, n, c, d.max_tokens))
            bar.update(1)
    return rows


def run_sweep(
    params: RunParams, folder: RunFolder, prompts: list[dict], mtp_status: str | None, hybrid: bool = False
) -> pd.DataFrame:
    """Measure every arm; write `sweep.parquet`; return the table (columns `COLUMNS`)."""
    d = params.decide
    arms = [0, *d.spec_steps]
    rows: list[dict[str, Any]] = []
    bar = progress(total=len(arms) * len(d.concurrencies), desc="sweep", unit="level")
    for k in arms:
        name = "plain" if k == 0 else f"spec_k{k}"
        reason = skip_reason(params, k, mtp_status)
        if reason:
            rows += [
                {"arm": name, "spec_k": k, "concurrency": c, "status": "skipped", "reason": reason}
                for c in d.concurrencies
            ]
            bar.update(len(d.concurrencies))
            continue
        p = arm_params(params, k, hybrid)
        try:
            with start_server(p, folder.logs, name=f"sweep-{name}") as server:
                measured = run_coroutine(_measure_arm(p, server, prompts, bar))
            rows += [{"arm": name, "spec_k": k, **m} for m in measured]
        except EngineError as e:
            rows += [
                {"arm": name, "spec_k": k, "concurrency": c, "status": "failed", "reason": str(e)[:500]}
                for c in d.concurrencies
            ]
            bar.update(len(d.concurrencies))
    bar.close()
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    table.to_parquet(folder.sweep, index=False)
    return table
