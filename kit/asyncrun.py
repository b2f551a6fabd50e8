"""Run a coroutine to completion from sync code, also inside Jupyter's already-running loop.

In a notebook kernel an event loop is already running, so `asyncio.run` refuses; the coroutine
then runs on a fresh loop in a worker thread. Ctrl-C (a kernel interrupt) cancels it there, so
its `finally` blocks run (buffered rows are flushed, servers stopped) before the interrupt
propagates.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    return _run_in_thread(coro)


def _run_in_thread(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.new_event_loop()
    box: dict[str, Any] = {}
    finished = threading.Event()  # not Thread.join: an interrupted join can report a live thread dead

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["task"] = task = loop.create_task(coro)
            box["result"] = loop.run_until_complete(task)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e
        finally:
            loop.close()
            finished.set()

    threading.Thread(target=target, name="kit-async", daemon=True).start()
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        task = box.get("task")
        if task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop finished and closed in the meantime
                pass
        finished.wait()  # let the coroutine's finally blocks run (flush rows, stop servers)
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]
