"""The measured sweep: the real engine per arm, at a ladder of concurrencies, in interleaved rounds.

Each arm (plain; speculative with draft length k) runs on a server launched with that arm's flags
and warmed up; each (arm, level) is then measured `decide.repetitions` times, in rounds that
interleave the arms (plain, k1, k2, ... then k2, k1, plain, ...: a slow minute slows every arm
alike), and plain decoding at the top level is measured once more at the very start and the very
end, to see whether the machine drifted (kit.decide.noise). Where the arms' servers fit in memory
together (a CPU engine with a small model) they stay up side by side and a round costs requests;
otherwise each round starts each arm's server in turn (`decide.servers`).

Every measurement is bracketed by readings of what else the machine did (kit.decide.machine); a
level where one was disturbed is measured once more, every arm again, and the disturbed
measurement is set aside while two undisturbed repetitions of its level remain (where fewer remain,
a lead read off it does not count: kit.decide.noise). `sweep_runs.parquet` keeps every measurement;
`sweep.parquet` one row per (arm, level): the median, its interval and how many repetitions back
it. An arm the engine cannot run is a row with status `skipped` and the reason; one whose server
would not start, or whose requests failed, is `failed` with the error. Accept length comes from the
responses where the engine puts it there (SGLang), else from the change of its `/metrics` counters
over the level (vLLM).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kit.asyncrun import run_coroutine
from kit.decide.machine import (
    DISTURBED_CPU,
    MachineReading,
    idle_cpu,
    interference,
    judge_runs,
    pause,
)
from kit.decide.noise import median_interval
from kit.decide.pilot import ANSWER_COLUMNS, pilot
from kit.engines import start_server
from kit.engines.answers import TransientEngineError
from kit.engines.client import EngineClient
from kit.engines.request_fields import run_request_fields, tool_request_fields
from kit.engines.settings import Arm, arm_engine, engine_unavailable_reason, sweep_arms
from kit.engines.spec_metrics import SpecCounters, gauge_accept_length
from kit.errors import EngineError
from kit.params import RunParams
from kit.progress import progress
from kit.runfolder import RunFolder

log = logging.getLogger(__name__)

CRASH_COLUMNS = [
    "crash_exit_code",
    "crash_error",
    "crash_where",
    "crash_running",
    "crash_in_flight",
    "restarted",
]
"""Of a measurement whose server died (kit.engines.crashes.Crash), and whether the server was then
restarted to measure the level again."""
WATCH_S = 0.5
"""How often a level looks at its server's process: a dead server stops the level at once."""
LEVEL_COLUMNS = [
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
RUN_COLUMNS = [
    "round",
    "phase",
    *LEVEL_COLUMNS,
    "started_s",
    "foreign_cpu",
    "load_1m",
    "cpu_mhz",
    "gpu_foreign_processes",
    "canary_ms",
    "neighbour_cpu",
    "slowdown",
    "disturbed",
    "why",
    "engine_cores",
    "engine_core_foreign_cpu",
    "gpus",
    "gpu_foreign_seen",
    "gpu_throttle",
    "gpu_throttle_s",
    "gpu_sm_mhz",
    *CRASH_COLUMNS,
]
"""sweep_runs.parquet: every measurement (`phase` sweep, or start / end for the drift check); one
whose server died is `crashed`, with what the engine said (`CRASH_COLUMNS`)."""
COLUMNS = [*LEVEL_COLUMNS, "output_tok_s_lo", "output_tok_s_hi", "repetitions", "set_aside", "noise_pct"]
"""sweep.parquet: per (arm, level) the median of its repetitions and the interval of that median."""
MAX_ERROR_SHARE = 0.1
"""A level where more than this share of requests failed is not a measurement of the arm."""
WARMUP_REQUESTS = 4
WARMUP_BURST_TOKENS = 2
"""Tokens each request of the warm-up burst asks for: the burst is for the prefill of the top level's
prompts all at once (full chunks: kernels an engine compiles or captures at first use; on the H200,
FlashInfer's first 8,192-token prefill chunk took 8 s), and its first large-batch decode steps."""


@dataclass(frozen=True)
class Slot:
    """One measurement of the sweep: in a round, an arm at a level (`phase`: sweep, start or end)."""

    round: int
    arm: Arm
    concurrency: int
    phase: str = "sweep"


def schedule(arms: list[Arm], levels: list[int], rounds: int, together: bool) -> list[Slot]:
    """The order of measurements: a drift check first and last (plain at the top level), and
    rounds that interleave the arms, reversing their order every other round (ABBA), so a steady
    drift weighs on every arm alike. Servers side by side: arms alternate at each level; one
    server at a time: each arm measures all its levels before the next one starts."""
    top = max(levels)
    plain = next((a for a in arms if not a.speculative), arms[0])
    slots = [Slot(0, plain, top, "start")]
    for r in range(rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        if together:
            slots += [Slot(r, arm, c) for c in levels for arm in order]
        else:
            slots += [Slot(r, arm, c) for arm in order for c in levels]
    return [*slots, Slot(rounds - 1, plain, top, "end")]


def arm_params(params: RunParams, arm: Arm, hybrid: bool, running_cap: int | None = None) -> RunParams:
    """The run's params with the engine of one arm (see `kit.engines.settings.arm_engine`)."""
    return params.model_copy(update={"engine": arm_engine(params, arm, hybrid, running_cap)})


def skip_reason(params: RunParams, arm: Arm, mtp_status: str | None) -> str | None:
    """Why `arm` cannot run here, or None when it can."""
    return None if not arm.speculative else engine_unavailable_reason(params.engine, mtp_status)


def _answer(prompt: dict[str, Any], r: Any, max_tokens: int) -> dict[str, Any]:
    return {
        "id": prompt["id"],
        "source": prompt.get("source"),
        "prompt_tokens": prompt.get("prompt_tokens"),
        "completion_tokens": r.completion_tokens,
        "finish_reason": r.finish_reason,
        "max_tokens": max_tokens,
        "pilot": False,
    }


def save_answers(rows: list[dict[str, Any]], path: Any, pilot: list[dict[str, Any]] | None = None) -> None:
    """One answer per prompt: the pilot's (sampled as stage 3 samples, at its output budget), else
    the plain arm's in the sweep (greedy: every level answers a prompt alike, cut at
    `decide.max_tokens`)."""
    seen: dict[str, dict[str, Any]] = {a["id"]: a for a in pilot or []}
    for row in rows:
        if row.get("spec_k") == 0:
            for a in row.get("answers") or []:
                seen.setdefault(a["id"], a)
    pd.DataFrame(list(seen.values()), columns=ANSWER_COLUMNS).to_parquet(path, index=False)


def _pilot(
    params: RunParams, servers: ArmServers, arms: list[Arm], prompts: list[dict], sweep_log: SweepLog
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pilot on the plain arm's server (kit.decide.pilot); nothing when it will not serve."""
    plain = next((a for a in arms if not a.speculative), None)
    server = servers.get(plain) if plain is not None else None
    if server is None:
        return [], {"sent": 0, "why": "the plain arm's server was not up"}
    sweep_log.line(f"pilot: {len(prompts)} prompts as stage 3 samples them, on {plain.name}")

    async def go() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with _client(servers.arm_params[plain.name], server) as client:
            return await pilot(params, client, prompts)

    answers, figures = run_coroutine(go())
    sweep_log.line(
        f"pilot: {figures['answered']} answered ({figures['cut']} cut at their max_tokens), "
        f"{figures['output_tokens']} tokens in {figures['seconds']:.1f} s"
    )
    return answers, figures


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
    min_s: float = 0.0,
    serving: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """A closed loop of `c` clients (greedy; `fields`: the run's chat-template switches, so the sweep
    thinks as stage 3 will) that sends at least `n` requests and keeps sending until `min_s`
    seconds have passed; tokens/s over the successful ones. A level of a fraction of a second is
    one hiccup of a shared machine away from a 3x error (docs/decision.md, `decide.level_s`).

    `serving()` says whether the server's process still runs: looked at every `WATCH_S` and after
    each failed request, so a server that dies stops the level at once (status `crashed`, with the
    requests that were out, `crash_in_flight`) rather than after thousands of refused connections
    (on the H200 a dead MTP server was sent 21,612 of them in one level)."""
    results: list[Any] = []
    errors: list[str] = []
    answers: dict[str, dict[str, Any]] = {}
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
                temperature=0.0,
                top_p=1.0,
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
            answers.setdefault(p["id"], _answer(p, r, max_tokens))

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
    await _until_done_or_dead([asyncio.ensure_future(worker()) for _ in range(c)], watch)
    dt = time.perf_counter() - t0
    if died:
        return {
            "concurrency": c,
            "requests": sent,
            "errors": len(errors),
            "output_tokens": sum(r.completion_tokens or 0 for r in results),
            "duration_s": dt,
            "output_tok_s": None,
            "status": "crashed",
            "crash_in_flight": died[0],
            "answers": [],
        }
    after = await _spec_scrape(client)
    lat = [r.latency_s for r in results]
    tokens = sum(r.completion_tokens or 0 for r in results)
    accept, source, positions = _accept(results, before, after)
    bad = len(errors) > MAX_ERROR_SHARE * sent
    return {
        "concurrency": c,
        "requests": sent,
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
        "reason": f"{len(errors)} of {sent} requests failed; first: {errors[0][:400]}" if errors else "",
        "answers": list(answers.values()),
    }


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


class ArmServers:
    """The arms' servers: all up side by side (`together`), or one at a time, each started when its
    arm is next measured. A server that will not start is remembered as the arm's failure.

    Side by side, idle servers are not always idle: vLLM's CPU build spins at about a quarter of a
    core each, which on a small machine takes from the arm being measured what it gives to none.
    When the idle servers take more than `DISTURBED_CPU` of the machine between them (`idle_cpu`,
    read once all are up), the others are paused (SIGSTOP) while one arm is measured (`held`)."""

    def __init__(
        self,
        params: RunParams,
        folder: RunFolder,
        arms: list[Arm],
        hybrid: bool,
        together: bool,
        prompts: list[dict] | None = None,
        running_caps: dict[int, int] | None = None,
    ):
        self.params, self.folder, self.hybrid, self.together = params, folder, hybrid, together
        self.prompts = prompts or []
        """The sweep's prompts: the warm-up sends the top level's worth of them at once."""
        self.up: dict[str, Any] = {}
        self.failed: dict[str, str] = {}
        self.crashed: dict[str, str] = {}
        """Arms whose server kept dying: the last crash, in a sentence with what to try."""
        self.crashes: dict[str, int] = {}
        """Crashes seen per arm."""
        caps = running_caps or {}
        self.arm_params = {a.name: arm_params(params, a, hybrid, caps.get(a.k)) for a in arms}
        self.idle_cpu: float | None = None
        """Share of the machine the servers took between them while idle, side by side."""
        self.held = False
        self.start_s: list[float] = []
        """Seconds each server start took (launch to answering, warm-up included)."""

    def start_all(self, arms: list[Arm]) -> None:
        """Start every arm's server at once, then wait for each (they load side by side)."""
        started = time.monotonic()
        starting = {}
        for arm in arms:
            server = start_server(self.arm_params[arm.name], self.folder.logs, name=f"sweep-{arm.name}")
            try:
                starting[arm.name] = server.start()
            except EngineError as e:
                self._failed(arm.name, e)
        for name, server in starting.items():
            try:
                self.up[name] = server.wait_ready()
                self._warm(name)
            except EngineError as e:
                server.stop()
                self._failed(name, e)
        self.start_s.append(time.monotonic() - started)
        if len(self.up) > 1:
            self.idle_cpu = idle_cpu(self.pids())
            self.held = self.idle_cpu > DISTURBED_CPU

    def get(self, arm: Arm) -> Any | None:
        """The arm's running server (started now when servers run one at a time, or after a crash);
        None if it failed to start or kept crashing."""
        if arm.name in self.failed or arm.name in self.crashed:
            return None
        if self.held and arm.name in self.up:  # the others rest while this one is measured
            pause([getattr(self.up[arm.name], "pid", None)], paused=False, roots_too=False)
            pause(self.neighbours(arm), paused=True, roots_too=False)  # their reapers stay awake
        if arm.name not in self.up:
            if not self.together:
                self.stop_all()
            server = start_server(self.arm_params[arm.name], self.folder.logs, name=f"sweep-{arm.name}")
            started = time.monotonic()
            try:
                self.up[arm.name] = server.__enter__()
                self._warm(arm.name)
            except EngineError as e:
                self._failed(arm.name, e)
                return None
            self.start_s.append(time.monotonic() - started)
        return self.up[arm.name]

    def crash(self, arm: Arm, in_flight: int | None) -> tuple[Any, bool]:
        """The arm's server died while measured: (what it said, kit.engines.crashes.Crash; whether it
        is to be restarted and the level measured again). Past `decide.crash_restarts` crashes of the
        arm the arm is given up (`crashed`); either way the dead server is cleaned away."""
        server = self.up.pop(arm.name)
        crash = server.crash(in_flight) if hasattr(server, "crash") else None
        server.stop()
        n = self.crashes[arm.name] = self.crashes.get(arm.name, 0) + 1
        limit = self.params.decide.crash_restarts
        if n > limit:
            what = crash.sentence(f"{arm.name}'s server") if crash else f"{arm.name}'s server died"
            advice = crash.advice(arm.speculative) if crash else ""
            self.crashed[arm.name] = (
                f"{what}; it died {n} times (decide.crash_restarts: {limit}), so the arm is not measured"
                + (f". What to try: {advice}" if advice else "")
            )
            log.warning("sweep arm %s crashed: %s", arm.name, self.crashed[arm.name])
        return crash, n <= limit

    def starts_for(self, slots: list[Slot]) -> int:
        """How many server starts measuring `slots` in order takes from now: none when the servers
        run side by side; one at a time, one for each change of arm (the one up now counts: one at a
        time, `up` holds it alone)."""
        if self.together:
            return 0
        names = [
            s.arm.name for s in slots if s.arm.name not in self.failed and s.arm.name not in self.crashed
        ]
        up_now = next(iter(self.up), None)
        return sum(1 for before, now in zip([up_now, *names], names, strict=False) if before != now)

    def _warm(self, name: str) -> None:
        """Requests before the first measurement (first requests pay one-off costs): a few of the
        sweep's length, then the top level's count of the sweep's prompts at once, each asking for
        `WARMUP_BURST_TOKENS` (so the first level measured, the drift check's, is not the one that
        pays for the engine's first large prefill)."""
        p = self.arm_params[name]
        top = max(p.decide.concurrencies)
        burst = [self.prompts[i % len(self.prompts)] for i in range(top)] if self.prompts else []

        async def warm() -> None:
            async with _client(p, self.up[name]) as client:
                hello = [{"role": "user", "content": "Hello"}]
                await asyncio.gather(
                    *(client.chat(hello, max_tokens=p.decide.max_tokens) for _ in range(WARMUP_REQUESTS))
                )
                await asyncio.gather(
                    *(
                        client.chat(q["messages"], max_tokens=WARMUP_BURST_TOKENS, temperature=0.0)
                        for q in burst
                    )
                )

        with contextlib.suppress(EngineError):
            run_coroutine(warm())

    def _failed(self, name: str, e: Exception) -> None:
        self.failed[name] = str(e)[:2000]
        log.warning("sweep arm %s could not be measured: %s", name, str(e).splitlines()[0])

    def pids(self) -> list[int | None]:
        return [getattr(s, "pid", None) for s in self.up.values()]

    def neighbours(self, arm: Arm) -> list[int | None]:
        """The other arms' servers (up, idle or paused) while `arm` is measured."""
        return [getattr(s, "pid", None) for name, s in self.up.items() if name != arm.name]

    def stop_all(self) -> None:
        if self.held:
            pause(self.pids(), paused=False, roots_too=False)  # a paused server ignores SIGTERM
        for server in self.up.values():
            server.stop()
        self.up = {}


def _client(params: RunParams, server: Any) -> EngineClient:
    return EngineClient(
        server.base_url,
        params.engine.flavor,
        params.model.served_name,
        params.generate.request_timeout_s,
        api_key=params.engine.api_key(),
    )


async def _measure(params: RunParams, server: Any, prompts: list[dict], c: int) -> dict[str, Any]:
    d = params.decide
    template = {k: v for k, v in run_request_fields(params).items() if k == "chat_template_kwargs"}
    async with _client(params, server) as client:
        n = d.requests_per_level or 2 * c
        tools = tool_request_fields(params)
        return await _level(client, prompts, n, c, d.max_tokens, template, tools, d.level_s, _serving(server))


def _serving(server: Any) -> Callable[[], bool] | None:
    """How to see that a server the kit runs has died (None for one it does not run: an external
    server's process is not ours to watch, and its requests' errors say enough)."""
    if not getattr(server, "restartable", False):
        return None
    return getattr(server, "serving", None) or server.alive


@dataclass
class SweepLog:
    """`logs/sweep.log`: one line as each measurement starts and ends (what the sweep is doing now)."""

    path: Any

    def line(self, text: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def run_sweep(
    params: RunParams,
    folder: RunFolder,
    prompts: list[dict],
    mtp_status: str | None,
    hybrid: bool = False,
    together: bool = False,
    notes: dict[str, Any] | None = None,
    running_caps: dict[int, int] | None = None,
    pilot_prompts: list[dict] | None = None,
) -> pd.DataFrame:
    """Measure every arm in interleaved rounds; write `sweep_runs.parquet` (every measurement) and
    `sweep.parquet` (per arm and level, with intervals); return the per-level table. `notes` receives
    how the servers ran side by side (`servers_idle_cpu_pct`, `servers_held`); `running_caps` (k ->
    requests) caps the servers of arms that memory cannot give the top level; `pilot_prompts` are
    answered once by the plain arm's server at the end, as stage 3 samples (kit.decide.pilot): their
    answers go to `sweep_answers.parquet` before the sweep's own, and `notes["pilot"]` says how
    it went."""
    d = params.decide
    arms = sweep_arms(params)
    runnable = [a for a in arms if not skip_reason(params, a, mtp_status)]
    rows: list[dict[str, Any]] = []
    piloted: list[dict[str, Any]] = []
    for arm in arms:
        reason = skip_reason(params, arm, mtp_status)
        if reason:
            rows += [_head(arm, c) | {"status": "skipped", "reason": reason} for c in d.concurrencies]
    slots = schedule(runnable, d.concurrencies, d.repetitions, together) if runnable else []
    sweep_log = SweepLog(folder.logs / "sweep.log")
    folder.logs.mkdir(parents=True, exist_ok=True)
    sweep_log.line(f"sweep of {len(runnable)} arm(s), {d.repetitions} round(s), servers together: {together}")
    servers = ArmServers(params, folder, runnable, hybrid, together, prompts, running_caps)
    bar = progress(total=len(slots), desc="sweep", unit="level")
    t0 = time.monotonic()
    try:
        if together:
            servers.start_all(runnable)
            if servers.idle_cpu is not None:
                sweep_log.line(
                    f"idle, the servers take {100 * servers.idle_cpu:.0f}% of the CPU between them: "
                    + ("each is paused while another arm is measured" if servers.held else "they stay up")
                )
        measured = _run_slots(slots[:-1], servers, prompts, bar, sweep_log, d.time_budget_s, t0)
        redo = redo_slots(measured, runnable, together, d.repetitions)
        if redo and _fits(measured, d.time_budget_s, t0, redo, slots[-1:], servers, sweep_log):
            bar.total += len(redo)
            sweep_log.line(f"measuring {len({s.concurrency for s in redo})} disturbed level(s) once more")
            measured += _run_slots(redo, servers, prompts, bar, sweep_log, None, t0)
        rows += measured + _run_slots(slots[-1:], servers, prompts, bar, sweep_log, None, t0)
        if pilot_prompts and runnable:
            piloted, figures = _pilot(params, servers, runnable, pilot_prompts, sweep_log)
            if notes is not None:
                notes["pilot"] = figures
    finally:
        servers.stop_all()
        bar.close()
    if notes is not None and servers.idle_cpu is not None:
        notes.update(servers_idle_cpu_pct=round(100 * servers.idle_cpu, 1), servers_held=servers.held)
    for name, error in servers.failed.items():
        arm = next(a for a in runnable if a.name == name)
        rows += [_head(arm, c) | {"status": "failed", "reason": error} for c in d.concurrencies]
    for name, error in servers.crashed.items():  # the levels it never reached
        arm = next(a for a in runnable if a.name == name)
        reached = {r["concurrency"] for r in rows if r.get("arm") == name and r.get("phase") == "sweep"}
        rows += [
            _head(arm, c) | {"status": "crashed", "reason": error}
            for c in d.concurrencies
            if c not in reached
        ]
    save_answers(rows, folder.sweep_answers, piloted)
    if notes is not None:
        notes["server_start_s"] = [round(x, 1) for x in servers.start_s]
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    runs.to_parquet(folder.sweep_runs, index=False)
    table = given_up(summarise(runs), servers.crashed)
    table.to_parquet(folder.sweep, index=False)
    return table


def given_up(table: pd.DataFrame, crashed: dict[str, str]) -> pd.DataFrame:
    """The per-level table with every level of an arm whose server kept dying marked `crashed` (its
    reason: the last crash and what to try) and no figure: such an arm is never chosen, whatever
    levels it ran before it died, since stage 3 would meet the same crash at full load (what those
    levels measured stays in sweep_runs.parquet)."""
    table = table.copy()
    for name, why in crashed.items():
        mine = table.arm == name
        table.loc[mine, "status"] = "crashed"
        table.loc[mine, "reason"] = why
        table.loc[mine, ["output_tok_s", "output_tok_s_lo", "output_tok_s_hi"]] = None
    return table


def _head(arm: Arm, c: int) -> dict[str, Any]:
    return {"arm": arm.name, "algorithm": arm.algorithm, "spec_k": arm.k, "concurrency": c, "phase": "sweep"}


def redo_slots(rows: list[dict[str, Any]], arms: list[Arm], together: bool, next_round: int) -> list[Slot]:
    """One more round at each level where a measurement was disturbed, every arm again (so leads stay
    paired by round): set aside, a disturbed repetition must not leave its level one short."""
    if not rows:
        return []
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    hit = sorted({int(c) for c in runs[(runs.phase == "sweep") & runs.disturbed].concurrency})
    order = arms if next_round % 2 == 0 else arms[::-1]
    if together:
        return [Slot(next_round, arm, c) for c in hit for arm in order]
    return [Slot(next_round, arm, c) for arm in order for c in hit]


def _fits(
    rows: list[dict[str, Any]],
    budget: float | None,
    t0: float,
    redo: list[Slot],
    end: list[Slot],
    servers: ArmServers,
    sweep_log: SweepLog,
) -> bool:
    """Whether measuring `redo` again, then the end check, fits in the time budget, at the sweep's
    pace so far: its levels' mean time, plus a server start (their mean so far) for each change of
    arm when the servers run one at a time. On the H200 a Qwen3-32B server took ~95 s to start and
    a level ~11 s: two disturbed levels cost three restarts, not two levels' time."""
    if budget is None or not rows:
        return True
    elapsed = time.monotonic() - t0
    starting = sum(servers.start_s)
    per_level = max(elapsed - starting, 0.0) / len(rows)
    per_start = starting / len(servers.start_s) if servers.start_s else 0.0
    with_redo = (len(redo) + len(end)) * per_level + servers.starts_for(redo + end) * per_start
    if elapsed + with_redo <= budget:
        return True
    sweep_log.line(
        f"time budget {budget:g} s: the disturbed levels are not measured again "
        f"(about {with_redo:.0f} s more with the end check, {elapsed:.0f} s spent)"
    )
    return False


def _run_slots(
    slots: list[Slot],
    servers: ArmServers,
    prompts: list[dict],
    bar: Any,
    sweep_log: SweepLog,
    budget: float | None,
    t0: float,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    round_started: dict[int, float] = {}
    first_start = (lambda: servers.start_s[0] if servers.start_s else 0.0) if budget is not None else None
    for slot in _within_budget(slots, t0, budget, round_started, sweep_log, first_start):
        bar.update(1)
        while (server := servers.get(slot.arm)) is not None:
            row = _run_slot(slot, server, servers, prompts, sweep_log, t0)
            rows.append(row)
            if row["status"] != "crashed":
                break
            crash, again = servers.crash(slot.arm, row.get("crash_in_flight"))
            row.update(_crash_fields(crash), restarted=again)
            row["reason"] = crash.sentence(f"{slot.arm.name}'s server") if crash else "the server died"
            sweep_log.line(
                f"crashed round {slot.round} {slot.phase} {slot.arm.name} at {slot.concurrency}: "
                + f"{row['reason']}; "
                + ("restarting it to measure the level again" if again else "the arm is given up")
            )
    return rows


def _run_slot(
    slot: Slot, server: Any, servers: ArmServers, prompts: list[dict], sweep_log: SweepLog, t0: float
) -> dict[str, Any]:
    """One measurement, bracketed by what else the machine did."""
    p = servers.arm_params[slot.arm.name]
    what = f"round {slot.round} {slot.phase} {slot.arm.name} at {slot.concurrency}"
    sweep_log.line(f"start {what}")
    near = servers.neighbours(slot.arm)
    before = MachineReading.now(servers.pids(), near)
    started = time.monotonic() - t0
    try:
        measured = run_coroutine(_measure(p, server, prompts, slot.concurrency))
    except EngineError as e:  # no answer to the level's scrapes: the arm's measurement failed
        measured = {"status": "failed", "reason": str(e)[:2000], "concurrency": slot.concurrency}
    seen = interference(before, servers.pids(), near)
    row = {**_head(slot.arm, slot.concurrency), **measured, "round": slot.round, "phase": slot.phase}
    tok_s = measured.get("output_tok_s")
    sweep_log.line(
        f"end {what}: {tok_s or 0:.0f} tok/s, others took {100 * seen.foreign_cpu:.0f}% of the CPU, "
        f"the other arms' servers {100 * seen.neighbour_cpu:.0f}%, CPU canary {seen.canary_ms:.1f} ms"
        + (f" (disturbed: {seen.why})" if seen.disturbed else "")
        + (" (its server died)" if measured.get("status") == "crashed" else "")
    )
    return {**row, "started_s": started, **seen.as_dict()}


def _crash_fields(crash: Any) -> dict[str, Any]:
    """The `CRASH_COLUMNS` of a crash (kit.engines.crashes.Crash; None: a server with no log)."""
    if crash is None:
        return {}
    return {
        "crash_exit_code": crash.exit_code,
        "crash_error": crash.error,
        "crash_where": crash.where,
        "crash_running": crash.running,
    }


def _within_budget(
    slots: list[Slot],
    t0: float,
    budget: float | None,
    started: dict[int, float],
    sweep_log: SweepLog,
    first_start: Callable[[], float] | None = None,
) -> Iterator[Slot]:
    """The slots, until starting another round would overrun `budget` seconds (the first round and
    the end check always run; the rounds left out are said in the log and in decision.json). A
    round's pace leaves out the first server start (`first_start`: its seconds), which no later
    round pays again: on the H200 three servers side by side took 170 s to come up and a round of
    levels ~110 s, so with the start counted in the pace a 400 s budget allowed one round of two
    that fit."""
    for slot in slots:
        if slot.phase == "sweep" and slot.round not in started:
            now = time.monotonic() - t0
            if budget is not None and slot.round >= 1:
                once = first_start() if first_start else 0.0
                per_round = max(now - once, 0.0) / slot.round
                if now + per_round > budget:
                    sweep_log.line(f"time budget {budget:g} s: stopping after {slot.round} round(s)")
                    log.warning(
                        "decide.time_budget_s (%g s) allows %d round(s) of the sweep", budget, slot.round
                    )
                    yield from (s for s in slots if s.phase == "end")
                    return
            started[slot.round] = now
        yield slot


def flags(column: pd.Series) -> pd.Series:
    """A column of true / false / missing as booleans (missing: false)."""
    return column.map(lambda v: bool(v) if pd.notna(v) else False).astype(bool)


def flag_slow(runs: pd.DataFrame) -> pd.DataFrame:
    """Judge every measurement by its signals, the CPU canary's `slowdown` over the sweep's median
    among them (kit.decide.machine.judge_runs): `disturbed`, and `why` names the signals that said so."""
    return judge_runs(runs)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, level): the median of its repetitions (disturbed ones set aside while two
    others remain), the interval of that median, and the level's other figures from the
    repetition nearest the median."""
    out = []
    for _, g in runs[runs.phase == "sweep"].groupby(["arm", "concurrency"], sort=False):
        ok = g[(g.status == "ok") & g.output_tok_s.notna()]
        if ok.empty:
            first = g.iloc[0].to_dict()
            out.append({**{k: first.get(k) for k in LEVEL_COLUMNS}, "repetitions": 0, "set_aside": 0})
            continue
        calm = ok[~flags(ok.disturbed)]
        used = calm if len(calm) >= 2 else ok
        iv = median_interval(used.output_tok_s.astype(float).tolist())
        nearest = used.iloc[(used.output_tok_s.astype(float) - iv.median).abs().argsort().iloc[0]].to_dict()
        accept = used.accept_length.dropna()
        row = {k: nearest.get(k) for k in LEVEL_COLUMNS}
        row.update(
            output_tok_s=iv.median,
            output_tok_s_lo=iv.lo,
            output_tok_s_hi=iv.hi,
            repetitions=iv.n,
            set_aside=len(ok) - len(used),
            noise_pct=100 * iv.half_width if iv.n >= 2 else None,
            accept_length=float(accept.median()) if len(accept) else None,
        )
        out.append(row)
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def _used(runs: pd.DataFrame, arm: str, concurrency: int) -> pd.DataFrame:
    """The measurements of one arm at one level that its figure uses: the undisturbed ones while two
    remain, else every one that answered."""
    g = runs[(runs.phase == "sweep") & (runs.arm == arm) & (runs.concurrency == concurrency)]
    ok = g[(g.status == "ok") & g.output_tok_s.notna()]
    calm = ok[~flags(ok.disturbed)]
    return calm if len(calm) >= 2 else ok


def per_round(runs: pd.DataFrame, arm: str, concurrency: int) -> dict[int, float]:
    """{round: tok/s} of one arm at one level, over the measurements the summary used."""
    used = _used(runs, arm, concurrency)
    return {int(r): float(v) for r, v in zip(used["round"], used.output_tok_s, strict=True)}


def rests_on_disturbed(runs: pd.DataFrame, arm: str, concurrency: int) -> bool:
    """Whether the figure of one arm at one level uses a disturbed measurement (too few calm ones)."""
    return bool(flags(_used(runs, arm, concurrency).disturbed).any())
