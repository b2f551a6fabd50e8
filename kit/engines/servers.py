"""The server the params get, and several started at once: `start_server` gives a `ServerProcess`
(kit/engines/process.py: a child process the kit starts, watches and stops) for a flavor the kit
starts, or an `ExternalServer` (here: someone else's, at `engine.base_url`, which the kit only waits
for) for one it does not; `all_started` launches replicas side by side. Import them from kit.engines.

    with start_server(params, run_dir / "logs") as srv:     # starts, then waits until it answers
        ...  # talk to srv.base_url with kit.engines.client.EngineClient
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from kit.engines import launcher as launchers
from kit.engines.client import auth_headers, is_loopback
from kit.engines.flavors import flavor
from kit.engines.process import LOG_TAIL_LINES, ServerProcess, probe_ready
from kit.errors import EngineStartError
from kit.params import RunParams


class ExternalServer:
    """A server someone else runs: same surface as ServerProcess, but start and stop do nothing."""

    restartable = False
    """The kit cannot restart it: after a crash or a hang it waits for it to answer again."""

    def __init__(
        self,
        base_url: str,
        startup_timeout_s: float = 60.0,
        name: str = "external",
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.startup_timeout_s = startup_timeout_s
        self.name = name
        self._headers = auth_headers(api_key)

    def start(self) -> ExternalServer:
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Nothing to stop: the kit does not own this server."""

    def alive(self) -> bool:
        with httpx.Client(
            timeout=5.0, trust_env=not is_loopback(self.base_url), headers=self._headers
        ) as http:
            return probe_ready(http, self.base_url)

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """Nothing: the kit has no log of a server it does not run."""
        return ""

    def wait_ready(self, timeout: float | None = None) -> ExternalServer:
        """Poll the URL until it answers; EngineStartError after `timeout` seconds."""
        timeout = self.startup_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self.alive():
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"external server {self.base_url} did not answer GET /health or /v1/models within "
                    f"{timeout:.0f} s. Check that it runs and that engine.base_url is right."
                )
            time.sleep(1.0)
        return self

    def restart(self, timeout: float | None = None, force: bool = False) -> ExternalServer:
        """The kit cannot restart a server it does not own: wait for it to come back instead."""
        return self.wait_ready(timeout)

    def __enter__(self) -> ExternalServer:
        return self.wait_ready()

    def __exit__(self, *exc: object) -> None:
        pass


def start_server(
    params: RunParams, log_dir: Path, name: str = "server", launcher: launchers.Launcher | None = None
) -> ServerProcess | ExternalServer:
    """The server for `params.engine` (not started: use `with start_server(...) as srv:`)."""
    if not flavor(params.engine.flavor).started:
        engine = params.engine
        return ExternalServer(str(engine.base_url), engine.startup_timeout_s, name, engine.api_key())
    return ServerProcess(params, log_dir, name, launcher)


@contextlib.contextmanager
def all_started(
    servers: list[ServerProcess | ExternalServer],
) -> Iterator[list[ServerProcess | ExternalServer]]:
    """Launch every server, then wait for each: replicas load side by side, so a machine's start-up
    is its slowest server's, not the sum (on the H200, two SGLang replicas started in turn waited
    57 s + 65 s before the first request). A server that fails to start stops them all."""
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()
