"""Run a coroutine to completion from sync code, also inside Jupyter's already-running loop.

In a notebook kernel an event loop is already running, so `asyncio.run` refuses; the coroutine
then runs on a fresh loop in a worker thread. Ctrl-C (a kernel interrupt) cancels it there, so
its `finally` blocks run (buffered rows are flushed, servers stopped) before the interrupt
propagates. SIGTERM and SIGHUP (a scheduler ending a job, a closed terminal) take the same path
inside `stop_signals()`: they raise `Terminated`, a KeyboardInterrupt that knows its signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
log = logging.getLogger(__name__)


_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C: finished rows are flushed and servers stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        _received.append(signum)


def stop_signal_received() -> int | None:
    """The SIGTERM / SIGHUP that ended work in this process, if one did (for the exit code)."""
    return _received[0] if _received else None


def _handled(sig: signal.Signals) -> bool:
    """Whether to take over `sig`: on the main thread only, and not where it is ignored (`nohup`)."""
    return threading.current_thread() is threading.main_thread() and signal.getsignal(sig) != signal.SIG_IGN


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While active, SIGTERM and SIGHUP raise `Terminated` in the main thread (once; repeats are
    ignored so that the clean-up they start can finish)."""
    taken = [sig for sig in STOP_SIGNALS if _handled(sig)]
    old = {sig: signal.getsignal(sig) for sig in taken}
    raised: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        if raised:
            log.warning(
                "%s again: still saving finished work and stopping servers", signal.Signals(signum).name
            )
            return
        raised.append(signum)
        raise Terminated(signum)

    for sig in taken:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


LEFTOVER_WAIT_S = 5.0
"""Seconds that tasks still running after the coroutine get to end before the loop closes."""


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    return _run_in_thread(coro)


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    """Like asyncio.run, but the clean-up is bounded: tasks left over (a connection that will not
    close, a server restart in a thread) get LEFTOVER_WAIT_S to end, so the kit always exits."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_cancelled_by_signals(coro))
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=LEFTOVER_WAIT_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()  # shuts the default executor down without waiting for its threads


async def _cancelled_by_signals(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro`; SIGINT, SIGTERM and SIGHUP cancel it (its finally blocks run), then raise
    KeyboardInterrupt or `Terminated`: a signal handler must not raise inside the event loop."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    got: list[int] = []

    def on_signal(signum: int) -> None:
        if not got and task is not None:
            got.append(signum)
            task.cancel()

    taken = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS if _handled(sig)}
    if _handled(signal.SIGINT) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        taken[signal.SIGINT] = signal.default_int_handler
    for sig in taken:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        result = await coro
    except BaseException:
        # the signal wins over whatever the cancelled coroutine raised on its way out: a sweep's
        # level turned the cancellation into an EngineError ("no answer to the level's scrapes"),
        # which the sweep records as a failed level and goes on, so SIGINT was lost (CI, 2026-12-07,
        # tests/test_sweep_resume.py: the interrupted `kit decide` ran to its end)
        if got:
            raise _interruption(got[0]) from None
        raise
    finally:
        for sig, handler in taken.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)
    if got:  # the coroutine ended by itself before the cancellation reached it
        raise _interruption(got[0])
    return result


def _interruption(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


@dataclass(slots=True)
class _Box(Generic[T]):
    """What the loop's thread hands back to the caller's: its task (to cancel on an interrupt), then
    the coroutine's result or the exception it raised."""

    task: asyncio.Task[T] | None = None
    result: T | None = None
    error: BaseException | None = None


def _run_in_thread(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.new_event_loop()
    box = _Box[T]()
    finished = threading.Event()  # not Thread.join: an interrupted join can report a live thread dead

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            box.task = task = loop.create_task(coro)
            box.result = loop.run_until_complete(task)
        except BaseException as e:  # re-raised in the caller's thread
            box.error = e
        finally:
            loop.close()
            finished.set()

    threading.Thread(target=target, name="kit-async", daemon=True).start()
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        task = box.task
        if task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop finished and closed in the meantime
                pass
        finished.wait()  # let the coroutine's finally blocks run (flush rows, stop servers)
        raise
    if box.error is not None:
        raise box.error
    return cast(T, box.result)
