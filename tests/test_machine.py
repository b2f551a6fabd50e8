"""What the sweep sees of the machine, on real processes: the other arms' servers' CPU, idle or
paused, and a measurement they disturb."""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
import threading
import time

import psutil
import pytest

from kit.decide.machine import DISTURBED_CPU, MachineReading, canary_ms, idle_cpu, interference, pause

SPIN = "import time\nwhile True:\n    time.perf_counter()\n"


@pytest.fixture
def spinning_server():
    """A process that spins as an idle vLLM CPU server does (a quarter of a core each, seen here),
    with a child of its own (an engine core): a whole tree."""
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {SPIN!r}])\nexec({SPIN!r})"
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield proc.pid
    for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
        p.kill()
    proc.wait()


def statuses(procs: list[psutil.Process]) -> set[str]:
    """The processes' states, given a second to show SIGSTOP (a signal lands asynchronously)."""
    deadline = time.monotonic() + 1
    while (seen := {p.status() for p in procs}) != {psutil.STATUS_STOPPED} and time.monotonic() < deadline:
        time.sleep(0.02)
    return seen


def test_idle_servers_are_seen_and_paused_as_a_tree(spinning_server):
    # two spinning processes: up to two cores' worth, less on a machine busy with other work
    assert idle_cpu([spinning_server], 0.5) > 0.05
    pause([spinning_server], paused=True)
    try:
        tree = [psutil.Process(spinning_server), *psutil.Process(spinning_server).children()]
        assert statuses(tree) == {psutil.STATUS_STOPPED}
        assert idle_cpu([spinning_server], 0.5) < 0.02
    finally:
        pause([spinning_server], paused=False)
    assert idle_cpu([spinning_server], 0.5) > 0.05
    pause([spinning_server], paused=True, roots_too=False)  # a reaper at the root stays awake
    try:
        assert statuses(psutil.Process(spinning_server).children()) == {psutil.STATUS_STOPPED}
        assert psutil.Process(spinning_server).status() != psutil.STATUS_STOPPED
    finally:
        pause([spinning_server], paused=False)


def test_a_measurement_beside_a_busy_neighbour_is_disturbed(spinning_server):
    """The neighbour is the kit's own (a server of another arm): not foreign, but it disturbs."""
    before = MachineReading.now([spinning_server], neighbours=[spinning_server])
    time.sleep(1.0)
    seen = interference(before, [spinning_server], neighbours=[spinning_server])
    assert seen.neighbour_cpu > DISTURBED_CPU and seen.disturbed
    pause([spinning_server], paused=True)
    try:
        before = MachineReading.now([spinning_server], neighbours=[spinning_server])
        time.sleep(1.0)
        seen = interference(before, [spinning_server], neighbours=[spinning_server])
        assert seen.neighbour_cpu < 0.02
    finally:
        pause([spinning_server], paused=False)


@pytest.fixture
def busy_threads():
    """Two busy threads in this process: one holding the GIL (pure Python), one without it
    (hashing a large buffer releases it), as the kit's own threads may be while a reading is taken."""
    stop = threading.Event()
    buf = b"x" * (4 << 20)

    def python_loop() -> None:
        while not stop.is_set():
            sum(range(1000))

    def native_loop() -> None:
        while not stop.is_set():
            hashlib.sha256(buf).digest()

    threads = [threading.Thread(target=f, daemon=True) for f in (python_loop, native_loop)]
    for t in threads:
        t.start()
    yield
    stop.set()
    for t in threads:
        t.join()


def test_the_canary_counts_its_own_thread_only(busy_threads):
    """The kit's other threads busy beside it do not slow the canary (it used to be timed in the
    whole process's CPU time, every thread's: the cause of false 'disturbed' flags)."""
    p0, t0 = time.process_time(), time.thread_time()
    beside = statistics.median(canary_ms() for _ in range(15))
    # the premise: the other threads did take CPU time meanwhile (process time grew beyond ours)
    assert time.process_time() - p0 > 1.2 * (time.thread_time() - t0)
    assert beside < 1.3 * ALONE_CANARY_MS[0]


ALONE_CANARY_MS: list[float] = []


@pytest.fixture(autouse=True, scope="module")
def _alone_canary():
    """The canary's median with no busy thread of ours, taken before any test starts one."""
    ALONE_CANARY_MS.append(statistics.median(canary_ms() for _ in range(15)))
