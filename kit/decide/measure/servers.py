"""The sweep's servers, one per arm: side by side or one at a time, warmed up, paused while another
arm is measured when idle ones take the CPU, restarted after a crash (kit.decide.sweep.sweep drives
them; kit.decide.measure.level measures a level on one)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from kit.asyncrun import run_coroutine
from kit.decide.machine.watch import DISTURBED_CPU, idle_cpu, pause
from kit.decide.measure.level import LevelAsk, Sampling, arm_client, level_ask
from kit.decide.measure.pilot import SweepPrompt
from kit.engines import start_server
from kit.engines.process import ServerProcess
from kit.engines.servers import ExternalServer
from kit.engines.settings import Arm, arm_engine
from kit.engines.start_failures import start_failure_name
from kit.errors import EngineError
from kit.params import RunParams
from kit.runfolder import RunFolder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Slot:
    """One measurement of the sweep: in a round, an arm at a level (`phase`: sweep, start or end)."""

    round: int
    arm: Arm
    concurrency: int
    phase: str = "sweep"


def arm_params(params: RunParams, arm: Arm, hybrid: bool, running_cap: int | None = None) -> RunParams:
    """The run's params with the engine of one arm (see `kit.engines.settings.arm_engine`)."""
    return params.model_copy(update={"engine": arm_engine(params, arm, hybrid, running_cap)})


LOWERED_ON = frozenset({"sglang_no_pool_memory"})
"""Start failures (kit.engines.start_failures) after which the arm's server is started again with
half its running requests: SGLang reserves a hybrid model's recurrent state per running request."""
RUNNING_FLOOR = 8
"""The fewest running requests an arm is lowered to (a CUDA-graph batch size step)."""

WARMUP_REQUESTS = 4
WARMUP_BURST_TOKENS = 2
"""Tokens each request of the warm-up burst asks for: the burst is for the prefill of the top level's
prompts all at once (full chunks: kernels an engine compiles or captures at first use; on the H200,
FlashInfer's first 8,192-token prefill chunk took 8 s), and its first large-batch decode steps."""


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
        prompts: list[SweepPrompt] | None = None,
        running_caps: dict[int, int] | None = None,
        warm_sampling: Sampling | None = None,
        log_name: str = "sweep",
    ):
        self.params, self.folder, self.hybrid, self.together = params, folder, hybrid, together
        self.log_name = log_name
        """Each server's log is logs/<log_name>-<arm>.log (the answers check keeps the sweep's)."""
        self.warm_sampling = warm_sampling or Sampling()
        """How the warm-up's first requests sample (default the client's): the settings sweep sends
        the run's own, so a sampler's first-use compile (FlashInfer's, ~87 s on the H200) falls in
        the warm-up, counted in the start's seconds, and never in a measurement."""
        self.prompts = prompts or []
        """The sweep's prompts: the warm-up sends the top level's worth of them at once."""
        self.up: dict[str, ServerProcess | ExternalServer] = {}
        self.failed: dict[str, str] = {}
        self.crashed: dict[str, str] = {}
        """Arms whose server kept dying: the last crash, in a sentence with what to try."""
        self.crashes: dict[str, int] = {}
        """Crashes seen per arm."""
        caps = running_caps or {}
        self.arm_params = {a.name: arm_params(params, a, hybrid, caps.get(a.k)) for a in arms}
        self.asks: dict[str, LevelAsk] = {name: level_ask(p) for name, p in self.arm_params.items()}
        """What each arm's levels send (kit.decide.measure.level.LevelAsk), read from its params once."""
        self.idle_cpu: float | None = None
        """Share of the machine the servers took between them while idle, side by side."""
        self.held = False
        self.start_s: list[float] = []
        """Seconds each server start took (launch to answering, warm-up included)."""
        self.launched = 0
        """Server processes started (side by side, each of `start_all`'s counts)."""
        self.start_parts: list[dict[str, float]] = []
        self.compile_cache: Any = None
        """The folder the servers keep their compile caches in (kit.engines.compile_cache)."""
        """Of each start, what its server's log says took how long (kit.engines.start_parts)."""
        self.started: dict[str, list[float]] = {}
        """The same per arm, one at a time (side by side, `start_all` times them together)."""
        self.lowered: dict[str, list[int]] = {}
        """Arms started again with fewer running requests after a start without memory for them:
        the running requests of each start, in order (`_lower_running`)."""

    def start_all(self, arms: list[Arm]) -> None:
        """Start every arm's server at once, then wait for each (they load side by side)."""
        started = time.monotonic()
        starting = {}
        for arm in arms:
            server = start_server(
                self.arm_params[arm.name], self.folder.logs, name=f"{self.log_name}-{arm.name}"
            )
            self.launched += 1
            try:
                starting[arm.name] = server.start()
            except EngineError as e:
                self._failed(arm.name, e)
        for name, server in starting.items():
            try:
                self.up[name] = server.wait_ready()
                self._record_parts(self.up[name])
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
            while True:
                server = start_server(
                    self.arm_params[arm.name], self.folder.logs, name=f"{self.log_name}-{arm.name}"
                )
                started = time.monotonic()
                self.launched += 1
                try:
                    self.up[arm.name] = server.__enter__()
                    self._record_parts(self.up[arm.name])
                    self._warm(arm.name)
                    break
                except EngineError as e:
                    if not self._lower_running(arm.name, server):
                        self._failed(arm.name, e)
                        return None
            self.start_s.append(time.monotonic() - started)
            self.started.setdefault(arm.name, []).append(self.start_s[-1])
        return self.up[arm.name]

    def _record_parts(self, server: Any) -> None:
        """What the server's log says its start took, part by part (`start_parts`: none where the
        engine's log says nothing, or the server is someone else's)."""
        parts = getattr(server, "start_parts", None)
        self.start_parts.append(parts() if callable(parts) else {})
        self.compile_cache = self.compile_cache or getattr(server, "compile_cache", None)

    def _lower_running(self, name: str, server: Any) -> bool:
        """After a start that failed for want of memory for the running requests' state
        (`LOWERED_ON`), halve the arm's running requests (never below `RUNNING_FLOOR`, never a
        limit the params set) so that it is started again; False when there is nothing to lower.
        The memory plan's cap (kit.decide.sweep.layout.running_caps) is an estimate: on an 80 GB H100 the
        Qwen3.6-27B shape's MTP servers at 24 and 16 running did not start (2026-12-06; its weights
        load 3.3 GiB above the plan's, a fifth of what was left there for the pools)."""
        log_text = getattr(server, "log_since_start", lambda: "")()
        if start_failure_name(log_text) not in LOWERED_ON:
            return False
        eng = self.arm_params[name].engine
        running = eng.max_running_requests or 0
        if self.params.engine.max_running_requests or running <= RUNNING_FLOOR:
            return False
        lower = max(running // 2 // RUNNING_FLOOR * RUNNING_FLOOR, RUNNING_FLOOR)
        graphs = min(eng.cuda_graph_max_bs or lower, lower)
        self.arm_params[name] = self.arm_params[name].model_copy(
            update={
                "engine": eng.model_copy(update={"max_running_requests": lower, "cuda_graph_max_bs": graphs})
            }
        )
        self.asks[name] = level_ask(self.arm_params[name])
        self.lowered.setdefault(name, [running]).append(lower)
        log.warning("sweep arm %s: no memory at %d running requests; starting it at %d", name, running, lower)
        return True

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
        ask = self.asks[name]
        top = max(self.params.decide.concurrencies)
        burst = [self.prompts[i % len(self.prompts)] for i in range(top)] if self.prompts else []

        async def warm() -> None:
            async with arm_client(ask, self.up[name]) as client:
                hello = [{"role": "user", "content": "Hello"}]
                await asyncio.gather(
                    *(
                        client.chat(hello, max_tokens=ask.max_tokens, **self.warm_sampling)
                        for _ in range(WARMUP_REQUESTS)
                    )
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
