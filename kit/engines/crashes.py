"""An engine server that died while serving, named by what the engine itself said.

A server that crashes mid-run leaves its reason in its log: a Python traceback whose last line is
the exception (SGLang's scheduler logs "Scheduler hit an exception: Traceback ...", then its
launcher kills the whole process tree, exit -9; vLLM's engine core logs "EngineCore encountered a
fatal error" and a traceback), and, before it, the engine's own status lines with the number of
requests it was running. `read_crash` turns that log into a `Crash`: the exception line, the file
and function it was raised in, the requests the engine last said it ran, the exit code, and what
a user can try. Start failures have their own reader (kit.engines.start_failures): they happen
before the server answers, with causes of their own (memory, flags, ports).

On the H200 (SGLang 0.5.16, Qwen3.6-27B shape, MTP k=3, triton attention) a server that came up as
planned died six seconds later in its first verify step with
`RuntimeError: The expanded size of the tensor (2621440) must match the existing size (2622720)`
in `triton_backend.py`, `_update_target_verify_buffers`: an engine bug on that backend, the one
fact the user needs, which a sweep that only counted refused connections never said.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from kit.engines.reaper import TEARDOWN
from kit.engines.start_failures import worker_death, worker_death_advice

TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s*(?P<message>.*))?$")
"""The line after a traceback's frames: the exception's (dotted) class and its message."""
PREFIX = re.compile(r"^(?:\x1b\[[\d;]*m)*\([\w.-]+ pid=\d+\)\s?")
"""vLLM's prefix on each line its engine-core process writes: '(EngineCore_DP0 pid=1234) '."""
RUNNING = (
    # SGLang: "Decode batch, #running-req: 43, ..."; a Prefill line counts the running requests
    # before it adds its #new-seq, which run in the step after it
    re.compile(r"(?:#new-seq:\s*(?P<new>\d+)[^\n]*?)?#running-req:\s*(?P<n>\d+)"),
    re.compile(r"Running:\s*(?P<n>\d+)\s*reqs?"),  # vLLM: "... Running: 4 reqs, Waiting: 0 reqs"
)
PACKAGE_ROOTS = ("site-packages/", "dist-packages/")
ENGINE_PACKAGE = re.compile(r"/((?:sglang|sgl_kernel|vllm|flashinfer|torch|triton|transformers)/[^/].*)$")
MESSAGE_CHARS = 400


@dataclass(frozen=True)
class Crash:
    """What the engine said as it died, and what to try."""

    exit_code: int | None
    error: str | None
    """The exception line: 'RuntimeError: The expanded size of the tensor ...' (None: none logged)."""
    where: str | None
    """The file, line and function it was raised in: 'sglang/srt/layers/attention/triton_backend.py:612
    in _update_target_verify_buffers'."""
    running: int | None
    """The requests the engine last said it was running (its own status lines), None if it said none."""
    in_flight: int | None = None
    """The kit's requests out when it saw the server gone."""
    log: str | None = None
    """The server's log file."""
    worker: str | None = None
    """What the log says of an engine worker process that died ("vLLM's worker VllmWorker-0 was
    killed by SIGKILL (exit code -9)"): the cause, where the server's own exit is its consequence."""
    worker_advice: str | None = None

    @property
    def how(self) -> str:
        """'exited with code 1', 'was killed by SIGKILL (exit -9)'."""
        code = self.exit_code
        if code is None:
            return "stopped answering"
        signo = -code if code < 0 else code - 128 if code > 128 else None
        if signo:
            try:
                return f"was killed by {signal.Signals(signo).name} (exit {code})"
            except ValueError:
                pass
        return f"exited with code {code}"

    def sentence(self, name: str = "the server") -> str:
        """One line a person can act on: what died, the engine's own error, where, the load."""
        return f"{name} {self.what()}"

    def what(self) -> str:
        """The sentence without its subject: 'was killed by SIGKILL (exit 137) while serving: ...'."""
        load = []
        if self.running is not None:
            load.append(f"the engine last reported {self.running} running requests")
        if self.in_flight is not None:
            load.append(f"the kit had {self.in_flight} requests out")
        return (
            f"{self.how} while serving{self._said()}"
            + (f"; {' and '.join(load)}" if load else "")
            + (f"; log: {self.log}" if self.log else "")
        )

    def _said(self) -> str:
        """What the log names as the cause: a worker's death, else the last exception, else none."""
        if self.worker:
            return f": {self.worker}"
        if self.error:
            return f": {self.error}" + (f" (raised in {self.where})" if self.where else "")
        return (
            ", with no error in its log (killed from outside: the kernel's out-of-memory killer, "
            "or another process; `dmesg` says which)"
        )

    def advice(self, speculative: bool) -> str:
        """What a user can try: an error inside the engine is the engine's, not the kit's request."""
        if self.worker_advice:
            return self.worker_advice
        if not self.error:
            return (
                "see the log and `dmesg` for what killed it; if it was memory, lower "
                "engine.mem_fraction_static or engine.max_running_requests"
            )
        tries = ["another attention backend (engine.attention_backend)"]
        if speculative:
            tries.append("fewer draft tokens (a smaller k in decide.spec_steps)")
        tries.append("another version of the engine")
        return (
            "this is an error inside the engine, not in the kit's requests or the model: try "
            + ", or ".join(tries)
            + "; if it repeats, report it to the engine's maintainers with the log"
        )


def read_crash(
    log_text: str, exit_code: int | None, in_flight: int | None = None, log: str | None = None
) -> Crash:
    """The `Crash` that `log_text` (what the server wrote since it started) shows: read up to where
    the kit's reaper began stopping what was left of the server's processes, whose answers to that
    (vLLM's engine core aborting its requests with `RuntimeError: cancelled`) are not why it died."""
    log_text = before_teardown(log_text)
    error, where = last_exception(log_text)
    worker = worker_death(log_text)
    advice = worker_death_advice(log_text) if worker else None
    return Crash(exit_code, error, where, last_running(log_text), in_flight, log, worker, advice)


def before_teardown(log_text: str) -> str:
    """The log up to the reaper's first note that it signals the server's process group."""
    for m in re.finditer(r"^\[kit reaper \d+\] .*$", log_text, re.MULTILINE):
        if TEARDOWN in m.group(0):
            return log_text[: m.start()]
    return log_text


def last_exception(log_text: str) -> tuple[str | None, str | None]:
    """(exception line, where it was raised) of the log's last traceback; (None, None) when none."""
    starts = [m.end() for m in TRACEBACK.finditer(log_text)]
    if not starts:
        return None, None
    lines = [PREFIX.sub("", line).rstrip() for line in log_text[starts[-1] :].splitlines()[1:]]
    where = None
    for line in lines:
        frame = FRAME.match(line)
        if frame:
            where = f"{_short(frame['file'])}:{frame['line']} in {frame['func']}"
        elif line and not line[0].isspace():  # the first line after the frames (and their code lines)
            exc = EXCEPTION.match(line)
            if not exc:
                break
            message = (exc["message"] or "").strip()
            text = f"{exc['type']}: {message}" if message else exc["type"]
            return text[:MESSAGE_CHARS], where
    return None, where


def last_running(log_text: str) -> int | None:
    """The number of running requests in the engine's last status line that says it."""
    best: tuple[int, int] | None = None
    for pattern in RUNNING:
        for m in pattern.finditer(log_text):
            if best is None or m.start() > best[0]:
                added = m.groupdict().get("new")
                best = (m.start(), int(m["n"]) + (int(added) if added else 0))
    return None if best is None else best[1]


def _short(path: str) -> str:
    """A source file as its package names it ('sglang/srt/...'), not where it was installed."""
    for root in PACKAGE_ROOTS:
        if root in path:
            return path.split(root, 1)[1]
    engine = ENGINE_PACKAGE.search(path)  # installed with --target (the H200's /tmp/site)
    return engine[1] if engine else path
