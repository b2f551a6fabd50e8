"""A pool of inference servers: least-outstanding balancing and bounded restarts after a crash.

One replica is the usual case (SGLang spreads its `--dp-size` replicas behind one port); with
`engine.replicas > 1` the kit starts one server per GPU group and balances here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from kit.engines.client import EngineClient
from kit.errors import EngineError

log = logging.getLogger(__name__)


@dataclass
class Replica:
    server: object
    """A started `ServerProcess` or `ExternalServer`."""
    flavor: str
    model: str | None
    timeout_s: float
    client: EngineClient | None = None
    outstanding: int = 0
    restarts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def open(self) -> None:
        self.client = EngineClient(self.server.base_url, self.flavor, self.model, timeout_s=self.timeout_s)
        await self.client.__aenter__()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.__aexit__(None, None, None)
            self.client = None


class ServerPool:
    """Started servers plus their clients; `pick()` returns the replica with the fewest requests out."""

    def __init__(self, replicas: list[Replica], max_restarts: int) -> None:
        self.replicas = replicas
        self.max_restarts = max_restarts

    async def __aenter__(self) -> ServerPool:
        for r in self.replicas:
            await r.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for r in self.replicas:
            await r.close()

    def pick(self) -> Replica:
        return min(self.replicas, key=lambda r: r.outstanding)

    async def recover(self, replica: Replica) -> bool:
        """Restart `replica` if its server died; False when it is alive (the fault was transient).

        Raises EngineError with the server's log tail once `max_restarts` is spent.
        """
        async with replica.lock:
            alive = getattr(replica.server, "alive", lambda: True)
            if alive():
                return False
            tail = replica.server.log_tail(30) if hasattr(replica.server, "log_tail") else ""
            if replica.restarts >= self.max_restarts:
                raise EngineError(
                    f"the server died {replica.restarts + 1} times (limit generate.max_server_restarts="
                    f"{self.max_restarts}); finished rows are saved, rerun the same command to resume. "
                    f"Last log lines:\n{tail}"
                )
            replica.restarts += 1
            log.warning(
                "server died; restarting (%d/%d). Log tail:\n%s", replica.restarts, self.max_restarts, tail
            )
            await replica.close()
            await asyncio.to_thread(replica.server.restart)
            await replica.open()
            return True

    @property
    def restarts(self) -> int:
        return sum(r.restarts for r in self.replicas)
