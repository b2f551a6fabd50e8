"""Running the async loop from notebooks: inside an already-running event loop, and Ctrl-C."""

from __future__ import annotations

import _thread
import asyncio
import threading

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
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(notebook_cell())
    finally:
        loop.close()
    assert flushed == [True]
