"""A pool of inference servers: least-outstanding balancing, liveness, restarts after a crash or hang.

One replica is the usual case (SGLang spreads its `--dp-size` replicas behind one port); with
`engine.replicas > 1` the kit starts one server per GPU group and balances here.

Liveness is more than "the process exists", and more than "/health answers": a watchdog asks each
server's /health every few seconds and, while requests are out, trusts the engine's own token
counters (vLLM, SGLang; read by the loop's timeline every few seconds) over /health; a server that
shows no life for `hang_timeout_s` (no answer, no healthy
probe, or, with requests out, no token made) is taken as hung and restarted, like one that exited.
Until a server (each start of it) has made its first token, the silence allowed is the engine's
start-up timeout instead: a first request can pay a first-use compile (SGLang's flashinfer sampler
took ~90 s on an H100; the server's own /health fails meanwhile), and a hang timeout of 30 s
restarted such a server four times in 400 s, each start compiling anew, without making a row.
Requests wait while their replica restarts
(`acquire`), and a request that failed because its server died, hung or was restarted is retried
without counting an attempt (`recover`): a server fault costs the in-flight requests a retry,
never a row. A server the kit does not own (`external`) is waited for instead of restarted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kit.engines.client import EngineClient
from kit.errors import EngineError, EngineStartError

log = logging.getLogger(__name__)
HEALTH_INTERVAL_S = 5.0
"""Seconds between two health probes of a replica (less when the hang timeout is short)."""
CLOSE_WAIT_S = 5.0
HEALTH_TIMEOUT_S = 10.0
"""A probe not answered within this (or the hang timeout, if shorter) is a failed probe."""
MIN_PROBE_S = 0.5
"""The shortest wait between two probes, and the shortest probe timeout."""
TOKEN_COUNTERS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:prompt_tokens_total",
)
"""Counters an engine raises as it works: with requests out, a server whose counters stand still
for the hang timeout is hung, whatever its /health says."""


@dataclass
class Replica:
    server: Any
    """A started `ServerProcess` or `ExternalServer`."""
    flavor: str
    model: str | None
    timeout_s: float
    api_key: str | None = None
    """Sent with every request (engine.api_key_env); never stored."""
    client: EngineClient | None = None
    outstanding: int = 0
    restarts: int = 0
    restarts_in_a_row: int = 0
    """Restarts since the last good answer: the budget `max_restarts` applies to these."""
    generation: int = 0
    """Bumped at each restart: a request sent to an older generation was cut by the restart."""
    last_life: float = field(default_factory=time.monotonic)
    """When the server last answered anything (a completion, an error status, a healthy probe)."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    retired: list[EngineClient] = field(default_factory=list)
    """Clients of earlier generations: closed at the end, when no request can still hold them."""
    engine_json: str | None = None
    """The `engine` column of the rows this replica makes, when it differs from the run's (a replica
    switched to speculation for the tail: kit.generate.tailswitch)."""
    token_count: float | None = None
    """The engine's token counters at the last reading (kit.generate.pool.TOKEN_COUNTERS)."""
    answered: bool = False
    """Whether this start of the server has shown work (an answer, or its token counters rising):
    until then a first-use compile may keep it silent (`ServerPool.first_answer_s`)."""
    counts_tokens: bool = False
    """Whether this server keeps token counters (then they, not /health, show its life with requests
    out); read from the loop's timeline scrapes (`note_counters`)."""
    _probe: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return getattr(self.server, "name", "server")

    async def open(self) -> None:
        if self.client is not None:
            self.retired.append(self.client)
        self.token_count = None  # a restarted server counts from zero
        self.client = EngineClient(
            self.server.base_url, self.flavor, self.model, timeout_s=self.timeout_s, api_key=self.api_key
        )
        await self.client.__aenter__()
        self.last_life = time.monotonic()
        self.answered = False
        self.ready.set()

    async def close(self) -> None:
        """Close every client it had, waiting a few seconds at most: a connection to a server that
        is frozen or gone must not hold the run's end."""
        self.ready.clear()
        closing = [
            asyncio.ensure_future(c.__aexit__(None, None, None)) for c in (*self.retired, self.client) if c
        ]
        self.client, self.retired = None, []
        if closing:
            await asyncio.wait(closing, timeout=CLOSE_WAIT_S)

    def saw_life(self) -> None:
        self.last_life = time.monotonic()

    def process_exited(self) -> bool:
        """Whether a server the kit runs has exited (an external server's process is not ours to see)."""
        return bool(getattr(self.server, "restartable", False)) and not self.server.alive()

    async def healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
        """One /health probe with a deadline; concurrent callers share the probe in flight."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._health(timeout_s))
        return await asyncio.shield(self._probe)

    async def _health(self, timeout_s: float) -> bool:
        client = self.client
        if client is None:
            return False
        try:
            return bool(await asyncio.wait_for(client.health(), timeout_s))
        except Exception:  # whatever stops the probe (timeout, refused, a closed client) is a failed probe
            return False

    def note_counters(self, metrics: dict[str, float] | None) -> None:
        """The engine's /metrics as the loop's timeline read it: when its token counters (tokens
        generated or prompts prefilled) rose since the last reading, the server is alive, whatever
        it answers to /health; a server that keeps such counters (vLLM, SGLang) shows its life with
        requests out this way only (kit.generate.pool.TOKEN_COUNTERS). One scrape serves both."""
        if not metrics or not any(k in metrics for k in TOKEN_COUNTERS):
            return
        tokens = sum(v for k, v in metrics.items() if k in TOKEN_COUNTERS)
        before, self.token_count, self.counts_tokens = self.token_count, tokens, True
        if before is not None and tokens > before:
            self.answered = True
        if before is None or tokens > before:
            self.saw_life()


def exited(server: Any) -> str:
    """Why a server the kit runs is gone, in the engine's own words where its log has them
    (kit.engines.crashes: 'exited with code 1 while serving: RuntimeError: ... (raised in ...)')."""
    if hasattr(server, "crash"):
        return server.crash(wait_s=0).what()
    return f"exited with code {getattr(server, 'exit_code', None)}"


class ServerPool:
    """Started servers and their clients; `acquire()` gives the ready replica with the fewest requests out."""

    def __init__(
        self,
        replicas: list[Replica],
        max_restarts: int,
        hang_timeout_s: float = 60.0,
        first_answer_s: float | None = None,
    ) -> None:
        self.replicas = replicas
        self.max_restarts = max_restarts
        self.hang_timeout_s = hang_timeout_s
        self.first_answer_s = max(hang_timeout_s, first_answer_s or 0.0)
        """The silence allowed before a start of a server has shown work (`engine.startup_timeout_s`)."""
        self.health_interval_s = min(HEALTH_INTERVAL_S, hang_timeout_s / 2)
        self.probe_timeout_s = min(HEALTH_TIMEOUT_S, hang_timeout_s)

    async def __aenter__(self) -> ServerPool:
        for r in self.replicas:
            await r.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for r in self.replicas:
            await r.close()

    async def acquire(self) -> Replica:
        """The ready replica with the fewest requests out; waits while every replica restarts."""
        while True:
            ready = [r for r in self.replicas if r.ready.is_set()]
            if ready:
                return min(ready, key=lambda r: r.outstanding)
            waits = [asyncio.ensure_future(r.ready.wait()) for r in self.replicas]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def note_answer(self, replica: Replica, generation: int, good: bool) -> None:
        """The server answered; a good answer from its current generation resets its restarts in a row."""
        if generation == replica.generation:
            replica.saw_life()
            replica.answered = True
            if good:
                replica.restarts_in_a_row = 0

    async def recover(self, replica: Replica, generation: int, error: Exception) -> bool:
        """After a failed request: True when the fault was the server's (it exited, hung or was
        restarted since the request was sent), so the request is retried without counting an
        attempt; False when the server is well and the failure counts against the request."""
        if getattr(error, "status", None) is not None:  # it answered with an error status: it lives
            self.note_answer(replica, generation, good=False)
            return False
        async with replica.lock:
            if replica.generation != generation:
                return True
            if replica.process_exited():
                await self._restart(replica, exited(replica.server))
                return True
        if await replica.healthy(self.probe_timeout_s):
            return False
        await self._until_life_or_restart(replica, generation)
        return True

    async def _until_life_or_restart(self, replica: Replica, generation: int) -> None:
        """Wait until the unresponsive server answers again or the watchdog has restarted it."""
        since = time.monotonic()
        while replica.generation == generation and replica.last_life <= since:
            await asyncio.sleep(0.5)

    async def watch(self) -> None:
        """Run the watchdog of every replica until cancelled; raises when a server cannot be brought back."""
        await asyncio.gather(*(self._watch(r) for r in self.replicas))

    async def _watch(self, replica: Replica) -> None:
        """Probe the replica every `health_interval_s` (sooner as its hang deadline nears); restart it
        once it has shown no life for `hang_timeout_s`: the deadline is last_life + hang_timeout_s,
        and neither the wait nor the probe runs past it, so a freeze is caught at that deadline (a
        probe's latency late at most), not a probe interval and a probe timeout after it."""
        while True:
            await asyncio.sleep(self._until_next_check(replica))
            generation = replica.generation
            if not replica.ready.is_set():
                continue
            if replica.process_exited():
                await self._restart_if(replica, generation, exited(replica.server))
                continue
            limit = self.silence_limit(replica)
            left = replica.last_life + limit - time.monotonic()
            timeout = max(MIN_PROBE_S, min(self.probe_timeout_s, left))
            if await replica.healthy(timeout) and not (replica.counts_tokens and replica.outstanding):
                replica.saw_life()  # with requests out, an engine that counts tokens shows life by them
                continue
            silent = time.monotonic() - replica.last_life
            if silent >= limit:
                hung = f"(hung: hang timeout {limit:g} s)"
                if not replica.answered:
                    hung = f"(hung: no first token within the start-up timeout, {limit:g} s)"
                why = f"has not answered for {silent:.0f} s {hung}"
                if replica.counts_tokens and replica.outstanding:
                    out = replica.outstanding
                    why = (
                        f"answers /health but made no token for {silent:.0f} s with {out} requests out {hung}"
                    )
                await self._restart_if(replica, generation, why, force=True)

    def silence_limit(self, replica: Replica) -> float:
        """Seconds of silence after which `replica` counts as hung: the hang timeout once this start
        of it has shown work, the start-up timeout before (a first-use compile)."""
        return self.hang_timeout_s if replica.answered else self.first_answer_s

    def _until_next_check(self, replica: Replica) -> float:
        """Seconds to the next probe: the health interval, or less when the hang deadline comes first."""
        left = replica.last_life + self.silence_limit(replica) - time.monotonic()
        return max(MIN_PROBE_S, min(self.health_interval_s, left))

    async def _restart_if(self, replica: Replica, generation: int, why: str, force: bool = False) -> None:
        async with replica.lock:
            if replica.generation == generation:
                await self._restart(replica, why, force)

    async def _restart(self, replica: Replica, why: str, force: bool = False) -> None:
        """Restart `replica` (its lock held), again if a start fails; EngineError once
        `max_restarts` in a row are spent."""
        replica.ready.clear()
        while True:
            self._count_restart(replica, why)
            try:
                if getattr(replica.server, "restartable", False):
                    await asyncio.to_thread(replica.server.restart, force=force)
                else:
                    await asyncio.to_thread(replica.server.wait_ready)
                break
            except EngineStartError as e:  # killed while starting, or no answer in time
                why, force = f"did not come back ({str(e).splitlines()[0]})", True
        replica.generation += 1
        await replica.open()

    def _count_restart(self, replica: Replica, why: str) -> None:
        tail = replica.server.log_tail(30) if hasattr(replica.server, "log_tail") else ""
        if replica.restarts_in_a_row >= self.max_restarts:
            raise EngineError(
                f"server '{replica.name}' {why}, after {replica.restarts_in_a_row} restarts without one good "
                f"answer in between (limit generate.max_server_restarts={self.max_restarts}); finished rows "
                f"are saved, rerun the same command to resume. Last log lines:\n{tail}"
            )
        replica.restarts += 1
        replica.restarts_in_a_row += 1
        owned = getattr(replica.server, "restartable", False)
        log.warning(
            "server '%s' %s; %s (%d in a row, limit %d). Log tail:\n%s",
            replica.name,
            why,
            "restarting it" if owned else "waiting for it to answer again",
            replica.restarts_in_a_row,
            self.max_restarts,
            tail,
        )

    @property
    def restarts(self) -> int:
        return sum(r.restarts for r in self.replicas)
