"""Running the async loop from notebooks: inside an already-running event loop, and Ctrl-C."""

from __future__ import annotations

import _thread
import asyncio
import signal
import subprocess
import sys
import threading
import time

import pytest

from kit.asyncrun import run_coroutine


async def answer() -> int:
    await asyncio.sleep(0.01)
    return 42


def test_plain_and_inside_a_running_loop():
    assert run_coroutine(answer()) == 42

    async def notebook_cell() -> int:  # Jupyter runs cells inside its own event loop
        return run_coroutine(answer())

    assert asyncio.run(notebook_cell()) == 42


def test_errors_cross_the_thread():
    async def broken() -> None:
        raise ValueError("bad row")

    async def notebook_cell() -> None:
        run_coroutine(broken())

    with pytest.raises(ValueError, match="bad row"):
        asyncio.run(notebook_cell())


def test_kernel_interrupt_cancels_the_coroutine_and_runs_its_finally():
    flushed: list[bool] = []

    async def long_job() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            flushed.append(True)  # where the generation loop flushes its buffered rows

    async def notebook_cell() -> None:
        threading.Timer(0.5, _thread.interrupt_main).start()  # what a kernel interrupt does
        run_coroutine(long_job())

    # A bare loop, as ipykernel runs cells: asyncio.run would install its own SIGINT handler.
    # Python's own SIGINT handler, as in a kernel: a shell that starts pytest in the background
    # (`make test &`) leaves SIGINT ignored, and interrupt_main then does nothing.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(notebook_cell())
    finally:
        loop.close()
        signal.signal(signal.SIGINT, old)
    assert flushed == [True]


STOPPABLE = """
import asyncio, signal, sys, time
from pathlib import Path
from kit.asyncrun import run_coroutine, stop_signals

async def long_job():
    try:
        print("running", flush=True)
        await asyncio.sleep(60)
    finally:
        await asyncio.sleep(0.1)  # an await inside the clean-up, as the loop's flush has
        Path(sys.argv[1]).write_text("flushed")

with stop_signals():
    if sys.argv[2] == "sync":  # a signal outside the event loop (planning, a server starting)
        print("running", flush=True)
        time.sleep(60)
    else:
        run_coroutine(long_job())
"""


@pytest.mark.parametrize("where", ["loop", "sync"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_sigterm_and_sighup_stop_like_ctrl_c(tmp_path, sig, where):
    """They raise Terminated (a KeyboardInterrupt) after the coroutine's clean-up ran."""
    marker = tmp_path / "flushed"
    proc = stoppable(marker, where, hangup=signal.SIG_DFL)  # as a terminal starts it (not under nohup)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert f"kit.asyncrun.Terminated: {sig.name}" in err, err
    assert marker.exists() == (where == "loop")


def stoppable(marker, where: str, hangup) -> subprocess.Popen:
    """The job above in a process of its own, started with SIGHUP set to `hangup`; once running."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, str(marker), where],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, hangup),
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "running"  # type: ignore[union-attr]
    return proc


def test_under_nohup_a_hangup_is_ignored(tmp_path):
    """`nohup kit generate ...` means: go on when the terminal closes. A SIGHUP ignored at start stays
    ignored; SIGTERM still stops the job cleanly."""
    marker = tmp_path / "flushed"
    proc = stoppable(marker, "loop", hangup=signal.SIG_IGN)
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None, "still running after the hangup"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert "kit.asyncrun.Terminated: SIGTERM" in err, err
    assert marker.exists()
