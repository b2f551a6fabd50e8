"""Start, watch and stop an inference server as a child process that never outlives the kit
(`ServerProcess`). Which server the params get (this, or an `ExternalServer` the kit does not start),
and several started at once, are kit/engines/servers.py's: `with start_server(params, logs) as srv:`.

The server runs under `kit/engines/reaper.py` in a process group of its own: `stop()` (also on
KeyboardInterrupt, at interpreter exit, and when the kit is killed outright) takes down the whole
group, SIGTERM first, SIGKILL after a grace period. Its output goes to `<log_dir>/<name>.log`.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from kit.engines import launcher as launchers
from kit.engines import reaper
from kit.engines.client import is_loopback, key_refused
from kit.engines.compile_cache import compile_cache_env, compile_cache_folder, kept_by_user, users_environ
from kit.engines.crashes import Crash, read_crash
from kit.engines.flavors import flavor, server_command, server_env
from kit.engines.start_failures import explain_start_failure, start_failure_name
from kit.errors import EngineError, EngineStartError, ModelDirError
from kit.params import RunParams

LOG_TAIL_LINES = 30
PORT_TRIES = 3
"""Starts on a port the kit picked: between the kit's check that it is free and the server's bind
(seconds later, after loading), another process can take it (an outgoing connection's ephemeral
port, another server); the kit then starts the server again on another free port."""
REAPER_GRACE_S = 10.0


def port_in_use(host: str, port: int) -> bool:
    """Whether a server could not bind `host:port` now (same socket options as uvicorn)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that nothing listens on (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def probe_ready(http: httpx.Client, base_url: str) -> bool:
    """True when GET /health (or, where it does not exist, GET /v1/models) answers 200.

    EngineError when it answers 401 or 403: the server is up but wants an API key (waiting for it
    would never end)."""
    for path in ("/health", "/v1/models"):
        try:
            r = http.get(base_url + path)
        except httpx.HTTPError:
            return False
        if r.status_code in (401, 403):
            raise key_refused(f"GET {base_url}{path}: HTTP {r.status_code}", "Authorization" in http.headers)
        if r.status_code == 200:
            return True
        if r.status_code != 404:
            return False
    return False


class ServerProcess:
    """One engine server started from `params.engine` (a flavor the kit starts)."""

    restartable = True
    """The kit owns this server: it can stop and start it again."""

    def __init__(
        self,
        params: RunParams,
        log_dir: Path,
        name: str = "server",
        launcher: launchers.Launcher | None = None,
    ) -> None:
        """`launcher`: what the installed launcher accepts, used to rename flags that moved between
        versions and to check choices; by default it is read from the engine's own `--help`."""
        self.params = params
        self.launcher = launcher
        self.flag_notes: list[str] = []
        self.log_dir = Path(log_dir)
        self.name = name
        self.port: int | None = None
        self.command: list[str] = []
        self.exit_code: int | None = None
        self.compile_cache: Path | None = None
        """The folder its compile caches go to (kit.engines.compile_cache), once started."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._server_pgid: int | None = None
        self._log_offset = 0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise EngineError(f"server '{self.name}' has no port yet: call start() first")
        host = self.params.engine.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Pid of the reaper that runs the server (the server itself is its child)."""
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        """Whether the server (its reaper) is still running."""
        if self._proc is None:
            return False
        code = self._proc.poll()
        if code is not None:
            self.exit_code = code
        return code is None

    def serving(self) -> bool:
        """Whether the engine's own process still runs: once it dies, the reaper outlives it by up to
        its grace period while it takes down what the server left (vLLM's engine core), and a client
        that waited for `alive()` would send that long to a closed port."""
        if not self.alive():
            return False
        if self._server_pgid is None:
            return True
        try:
            return psutil.Process(self._server_pgid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def crash(self, in_flight: int | None = None, wait_s: float = REAPER_GRACE_S + 5) -> Crash:
        """What the server said as it died (kit.engines.crashes), once its reaper has exited (at most
        `wait_s` seconds: its exit code is the server's)."""
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(wait_s)
            self.alive()
        return read_crash(self.log_since_start(), self.exit_code, in_flight, str(self.log_path))

    def start(self) -> ServerProcess:
        """Launch the server; returns at once (see `wait_ready`)."""
        if self.alive():
            raise EngineError(f"server '{self.name}' is already running on {self.base_url}; stop() it first")
        if not self.params.model.path.exists():
            raise ModelDirError(
                f"model.path {self.params.model.path} does not exist; point it at a local "
                "Hugging Face model directory (config.json, weights, tokenizer)."
            )
        self.port = self._choose_port()
        launcher = self._launcher()
        built = server_command(self.params, self.port)
        self.command, self.flag_notes = launchers.adapt_flags(built, launcher)
        self.compile_cache = self.compile_cache or self._compile_cache_folder()
        problems = launchers.choice_problems(self.command, launcher)
        if problems:
            raise EngineStartError(
                f"server '{self.name}' ({self.params.engine.flavor}) would be refused by its launcher: "
                + "; ".join(problems)
                + ". Fix the engine params (see `kit probe` for what this engine offers)."
            )
        self._proc = self._launch()
        self.exit_code = None
        atexit.register(self.stop)
        return self

    def _launcher(self) -> launchers.Launcher | None:
        """The installed launcher (read once per engine version); a clear error when the engine is absent."""
        fl = flavor(self.params.engine.flavor)
        if self.launcher is not None or fl.launcher is None:
            return self.launcher
        python = self.params.engine_python
        if not Path(python).exists():
            raise EngineStartError(
                f"engine.python {python} does not exist: point it at the interpreter of the environment "
                f"where {fl.name} is installed (for the CPU vLLM of the demo: run `make engine-vllm`, then "
                "use .venv-vllm/bin/python)."
            )
        env = {**os.environ, **server_env(self.params)}
        if launchers.engine_version(python, fl, env) is None:
            raise EngineStartError(
                f"{fl.name} is not installed in {python}: install it there "
                f"({python} -m pip install {fl.distributions[0]}), or point engine.python at the "
                "interpreter of the environment that has it."
            )
        self.launcher = launchers.discover(python, fl, copy_to=self.log_dir, env=env)
        return self.launcher

    def _compile_cache_folder(self) -> Path:
        """This engine install's compile-cache folder (made here, so that a user finds it)."""
        python = self.params.engine_python
        fl = flavor(self.params.engine.flavor)
        installed = launchers.engine_install(python, fl, {**os.environ, **server_env(self.params)})
        folder = compile_cache_folder(fl.name, python, installed)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def server_environment(self) -> dict[str, str]:
        """The server's environment: its compile caches in `compile_cache`, under the kit's own
        environment and the flavor's variables and `engine.env` (a variable set there wins)."""
        variables = flavor(self.params.engine.flavor).compile_cache_vars
        own = compile_cache_env(variables, self.compile_cache) if self.compile_cache else {}
        return {**own, **users_environ(os.environ), **server_env(self.params)}

    def _compile_cache_note(self) -> str:
        """The log line that names the compile-cache folder, and the variables the user set."""
        variables = flavor(self.params.engine.flavor).compile_cache_vars
        kept = kept_by_user(variables, users_environ(os.environ), server_env(self.params))
        note = f"==== kit: compile caches in {self.compile_cache}"
        return note + (f" (kept as set: {', '.join(kept)})" if kept else "") + "\n"

    def _launch(self) -> subprocess.Popen[bytes]:
        """Start the reaper (by file path: it needs only the standard library) with the server command."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        reaper_argv = [sys.executable, reaper.__file__, "--parent-pid", str(os.getpid())]
        reaper_argv += ["--grace", str(REAPER_GRACE_S), "--", *self.command]
        stamp = dt.datetime.now().isoformat(timespec="seconds")
        header = f"==== kit {stamp}: start '{self.name}', port {self.port}: {shlex.join(self.command)}\n"
        header += "".join(f"==== kit: {note}\n" for note in self.flag_notes)
        header += self._compile_cache_note() if self.compile_cache else ""
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            log.write(header.encode())
            log.flush()
            return subprocess.Popen(
                reaper_argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.server_environment(),
                start_new_session=True,
            )

    def _choose_port(self) -> int:
        host = self.params.engine.host
        wanted = self.params.engine.port
        if wanted is not None:
            if port_in_use(host, wanted):
                raise EngineStartError(
                    f"port {wanted} on {host} is already in use, so server '{self.name}' cannot bind it. "
                    f"Stop whatever listens there (`ss -ltnp | grep :{wanted}` shows it) or remove "
                    "engine.port from the params so that the kit picks a free port."
                )
            return wanted
        if self.port is not None and not port_in_use(host, self.port):
            return self.port  # a restart keeps its address when it can, so clients stay valid
        return free_port(host)

    def wait_ready(self, timeout: float | None = None) -> ServerProcess:
        """Poll until the server answers; raise EngineStartError (with its log tail) on death or timeout."""
        timeout = self.params.engine.startup_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        port_tries = PORT_TRIES
        with httpx.Client(timeout=5.0, trust_env=not is_loopback(self.base_url)) as http:
            while True:
                if not self.alive():
                    if port_tries > 1 and self._port_was_taken():
                        port_tries -= 1
                        self.port = None  # picked afresh by start()
                        self.start()
                        continue
                    raise EngineStartError(
                        self._failure(f"exited with code {self.exit_code} before answering")
                    )
                if probe_ready(http, self.base_url):
                    self._remember_group()
                    return self
                if time.monotonic() > deadline:
                    raise EngineStartError(self._failure(f"did not answer within {timeout:.0f} s"))
                time.sleep(0.5)

    def _port_was_taken(self) -> bool:
        """Whether the port the kit picked (not the user's engine.port) was taken before the server
        bound it."""
        return self.params.engine.port is None and start_failure_name(self.log_since_start()) == "port_in_use"

    def _failure(self, what: str) -> str:
        tail = (
            "\n".join("  " + line for line in self.log_tail(LOG_TAIL_LINES).splitlines())
            or "  (the log is empty)"
        )
        cause = explain_start_failure(self.log_since_start())
        head = f"server '{self.name}' ({self.params.engine.flavor}) {what} on {self.base_url}"
        return (
            (f"{head}: {cause}.\n" if cause else f"{head}.\n") + f"command: {shlex.join(self.command)}\n"
            f"last {LOG_TAIL_LINES} lines of {self.log_path}:\n{tail}\n"
            "What to do: read the log lines above (usual causes: a model path that is not a model "
            "directory, a flag the installed engine does not know, too little memory); fix the params "
            "and run again. If the server was only slow to load, raise engine.startup_timeout_s."
        )

    def log_since_start(self, max_bytes: int = 256 * 1024) -> str:
        """What the server wrote since its latest start (its last `max_bytes` at most)."""
        try:
            with open(self.log_path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(self._log_offset, size - max_bytes))
                return f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def start_parts(self, max_bytes: int = 1024 * 1024) -> dict[str, float]:
        """What its latest start spent time on, in seconds, as far as its log shows (the flavor's
        `start_parts`: weights, graphs, compile, ...), read from the start's first `max_bytes`."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                head = f.read(max_bytes).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return {}
        return flavor(self.params.engine.flavor).start_parts(head)

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last `n` non-empty lines that the server wrote since its latest start, one per line."""
        lines = [line.rstrip() for line in self.log_since_start().splitlines()]
        return "\n".join([line for line in lines if line][-n:])

    def _remember_group(self) -> None:
        """Note the server's process group (the reaper's child leads it), to clean it up even if
        the reaper itself is killed."""
        if self._proc is not None and self._server_pgid is None:
            with contextlib.suppress(psutil.Error, IndexError):
                self._server_pgid = psutil.Process(self._proc.pid).children()[0].pid

    def stop(self, timeout: float = 15.0, force: bool = False) -> None:
        """SIGTERM the server's process group (through the reaper), SIGKILL what is left after `timeout`.

        `force`: SIGKILL the server at once (a hung server does not act on SIGTERM).
        """
        proc, self._proc = self._proc, None
        pgid, self._server_pgid = self._server_pgid, None
        atexit.unregister(self.stop)
        if proc is None:
            return
        members = _descendants(proc.pid)
        if force:
            _kill_all([*members, psutil.Process(proc.pid)] if proc.poll() is None else members)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
        self.exit_code = proc.returncode
        _kill_all(members)
        if pgid is not None:  # the reaper was killed: its server (and the server's children) are orphans
            _kill_group(pgid)

    def restart(self, timeout: float | None = None, force: bool = False) -> ServerProcess:
        """Stop (`force`: SIGKILL at once), start again (same port when free), wait until it answers."""
        self.stop(force=force)
        return self.start().wait_ready(timeout)

    def __enter__(self) -> ServerProcess:
        self.start()
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


def _kill_group(pgid: int) -> None:
    """SIGKILL what is left of process group `pgid` (orphans of a killed reaper)."""
    left = reaper.group_members(pgid)
    if left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        psutil.wait_procs([p for p in map(_process, left) if p is not None], timeout=5.0)


def _process(pid: int) -> psutil.Process | None:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid)
    return None


def _kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL every process in `procs` that still runs (psutil guards against reused pids)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                p.kill()
    psutil.wait_procs(procs, timeout=5.0)
