"""What the sweep sees of the machine, on real processes: the other arms' servers' CPU, idle or
paused, and a measurement they disturb."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from kit.decide.machine import DISTURBED_CPU, MachineReading, idle_cpu, interference, pause

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
