"""What else the machine did while the sweep measured: other processes' CPU, load, clock, GPUs.

Each measurement of the sweep is bracketed by two `MachineReading`s; `Interference` between them
says how much of the machine processes other than the kit and its servers took (CPU share of all
cores), how much the other arms' servers took (idle, vLLM's CPU build still spins at about a
quarter of a core each), the 1-minute load average, the CPU clock, and processes on the GPUs that
are not the servers' (context: inside a container NVML may show the servers' own by other pids). A
measurement that others or neighbours disturbed (`DISTURBED_CPU`) is set aside when enough
undisturbed repetitions of its level remain (kit.decide.sweep).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

try:
    import pynvml as nv
except ImportError:  # no nvidia-ml-py: no GPU's processes are read
    nv = None

DISTURBED_CPU = 0.10
"""Share of all CPU cores that other processes took during a measurement beyond which it is
disturbed. Calm measurements here saw at most 5%; two busy-looping processes that cut a level
of the demo engine to a third took 22% (docs/bench_decide.md)."""
SLOW_CANARY = 1.3
"""A measurement whose CPU canary ran this much slower than the sweep's median canary ran on a
slow machine (a neighbour on a shared host, a lower clock) and is disturbed."""
CANARY_LOOPS = 100_000
CANARY_SAMPLES = 5
"""The canary's loops are timed in this many equal slices; the fastest slice counts (times the
number of slices): a slice that a time-slice boundary, a page fault or the garbage collector hit
is not the CPU's speed."""


def canary_ms(samples: int = CANARY_SAMPLES) -> float:
    """CPU milliseconds a fixed piece of pure-Python work takes now (about 2 ms on this machine).

    Counted in the CPU time of the calling thread only (`time.thread_time`), so a busy engine, a
    local process sharing the cores, or another thread of the kit's own process does not slow it
    (time slices are not charged), while a slower CPU does: a neighbour on the host's other
    hyperthread, a lower clock, a virtual CPU descheduled without steal accounting. Taken before
    and after each measurement, when the engine is idle. A host-level slow-down that no process
    of this machine shows was seen here at 1.7x for seconds at a time.

    It used to be timed with `time.process_time`, the CPU time of every thread of the process:
    with one busy Python thread beside it (the GIL handed back and forth) the canary read 1.5x its
    calm value here, though the CPU was no slower (benchmarks/bench_disturbance.py)."""
    loops = max(CANARY_LOOPS // samples, 1)
    best = float("inf")
    for _ in range(samples):
        t0 = time.thread_time()
        x = 0
        for i in range(loops):
            x += i
        best = min(best, time.thread_time() - t0)
    return 1000 * best * samples


def own_pids(server_pids: Iterable[int | None]) -> set[int]:
    """This process, its children, and every server's process tree."""
    return {os.getpid()} | tree_pids([os.getpid(), *server_pids])


def tree_pids(roots: Iterable[int | None]) -> set[int]:
    """The processes of each root's tree (a server and its children)."""
    pids: set[int] = set()
    for pid in roots:
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            pids.add(root.pid)
            pids.update(c.pid for c in root.children(recursive=True))
    return pids


def _cpu_seconds(pids: set[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def _busy_seconds() -> float:
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


@dataclass(frozen=True)
class MachineReading:
    at: float
    busy_s: float
    own_s: float
    pids: frozenset[int]
    canary_ms: float
    neighbour_s: float = 0.0
    """CPU seconds of the other arms' servers (`neighbours`) so far."""
    neighbour_pids: frozenset[int] = frozenset()

    @classmethod
    def now(cls, server_pids: Iterable[int | None], neighbours: Iterable[int | None] = ()) -> MachineReading:
        canary = canary_ms()
        pids = own_pids(server_pids)
        near = tree_pids(neighbours)
        return cls(
            time.monotonic(),
            _busy_seconds(),
            _cpu_seconds(pids),
            frozenset(pids),
            canary,
            _cpu_seconds(near),
            frozenset(near),
        )


@dataclass(frozen=True)
class Interference:
    """Between two readings: others' share of the CPU, the load, the clock, foreign GPU processes."""

    foreign_cpu: float
    load_1m: float
    cpu_mhz: float | None
    gpu_foreign_processes: int | None
    canary_ms: float
    """The slower of the CPU canaries before and after the measurement."""
    neighbour_cpu: float = 0.0
    """Share of all cores the other arms' servers took (their own, but not the measured arm's)."""

    @property
    def disturbed(self) -> bool:
        """Others, or the other arms' servers, took the CPU (the canary's verdict needs the sweep's
        median: `flag_slow`). GPU processes are context only: in a container NVML names them by host
        pids, not ours."""
        return self.foreign_cpu > DISTURBED_CPU or self.neighbour_cpu > DISTURBED_CPU

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "foreign_cpu": round(self.foreign_cpu, 4),
            "load_1m": round(self.load_1m, 2),
            "cpu_mhz": self.cpu_mhz,
            "gpu_foreign_processes": self.gpu_foreign_processes,
            "canary_ms": round(self.canary_ms, 3),
            "neighbour_cpu": round(self.neighbour_cpu, 4),
            "disturbed": self.disturbed,
        }


def interference(
    before: MachineReading, server_pids: Iterable[int | None], neighbours: Iterable[int | None] = ()
) -> Interference:
    """What others (and the `neighbours`' server trees) did since `before` (own processes: those seen
    at either reading)."""
    after = MachineReading.now(server_pids, neighbours)
    wall = max(after.at - before.at - after.canary_ms / 1000, 1e-6)
    cores = wall * (psutil.cpu_count() or 1)
    own = _cpu_seconds(set(before.pids | after.pids))
    # own CPU is read again over both readings' pids (a process that appeared in between counts whole)
    own_delta = max(own - before.own_s, 0.0)
    foreign = max(after.busy_s - before.busy_s - own_delta, 0.0) / cores
    near = _cpu_seconds(set(before.neighbour_pids | after.neighbour_pids))
    neighbour = max(near - before.neighbour_s, 0.0) / cores
    freq = None
    with contextlib.suppress(Exception):
        f = psutil.cpu_freq()
        freq = round(f.current, 0) if f else None
    canary = max(before.canary_ms, after.canary_ms)
    return Interference(
        min(foreign, 1.0), os.getloadavg()[0], freq, _gpu_foreign(after.pids), canary, min(neighbour, 1.0)
    )


def idle_cpu(roots: Iterable[int | None], seconds: float = 1.0) -> float:
    """Share of all cores the `roots`' process trees take over `seconds` while nobody sends them work."""
    pids = tree_pids(roots)
    t0, before = time.monotonic(), _cpu_seconds(pids)
    time.sleep(seconds)
    used = max(_cpu_seconds(pids) - before, 0.0)
    return used / (max(time.monotonic() - t0, 1e-6) * (psutil.cpu_count() or 1))


def pause(roots: Iterable[int | None], paused: bool, roots_too: bool = True) -> None:
    """SIGSTOP (`paused`) or SIGCONT every process of the `roots`' trees (`roots_too` False: only
    their descendants; a root that is the kit's reaper stays awake, to take its server down should
    the kit die meanwhile)."""
    roots = list(roots)
    pids = tree_pids(roots) - (set() if roots_too else {r for r in roots if r is not None})
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            p.suspend() if paused else p.resume()


def slowdowns(canaries: list[float]) -> list[float]:
    """Each canary over the sweep's median canary (1.0: as fast as usual)."""
    ok = sorted(c for c in canaries if c and c > 0)
    if not ok:
        return [1.0 for _ in canaries]
    median = ok[len(ok) // 2]
    return [c / median if c and c > 0 else 1.0 for c in canaries]


def _gpu_foreign(pids: frozenset[int]) -> int | None:
    """Compute processes on the GPUs that are not ours (None without NVML)."""
    if nv is None:
        return None
    try:
        nv.nvmlInit()
    except Exception:  # no library, no driver: no GPU to read
        return None
    try:
        found = 0
        for i in range(nv.nvmlDeviceGetCount()):
            procs = nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i))
            found += sum(p.pid not in pids for p in procs)
        return found
    except Exception:  # NVML may refuse process queries in containers: unknown, not zero
        return None
    finally:
        nv.nvmlShutdown()
