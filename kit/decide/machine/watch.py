"""What else the machine did while the sweep measured: what can take from the engine, and a CPU canary.

Each measurement of the sweep is bracketed by two `MachineReading`s; `Interference` between them
records the signals, each a column of sweep_runs.parquet:

- `foreign_cpu`: the share of all cores that processes other than the kit and its servers took;
- `engine_core_foreign_cpu`: the same on the cores the measured arm's server may run on (the union
  of its processes' `cpu_affinity`; `engine_cores` of them): per-CPU busy time there, less what
  the kit's own processes ran there (each in proportion to its own affinity's overlap);
- `neighbour_cpu`: what the other arms' servers took (idle, vLLM's CPU build still spins at about a
  quarter of a core each);
- on a box with GPUs (NVML, `gpus`), on the GPUs the servers use: `gpu_foreign_seen`, compute
  processes that are not the kit's and that this pid namespace can see (inside a container NVML
  names processes by host pids: those it cannot see are unknown, not foreign;
  `gpu_foreign_processes` keeps the raw count, context only); `gpu_throttle`, the clock-event
  reasons at either reading and NVML's thermal / power violation counters over the measurement;
  `gpu_throttle_s`, the seconds of thermal throttling during it; `gpu_sm_mhz`, the SM clock;
- `canary_ms`: a fixed piece of pure-Python work timed in the CPU time of its own thread, the
  slower of before and after (`slowdown`: over the sweep's median);
- the 1-minute load average and the CPU clock, context only.

`judge` turns them into a verdict and one `why` string naming the signals that flagged a
measurement. Others above `DISTURBED_CPU` of all cores or of the engine's cores, the other arms'
servers above it, a foreign process on the engine's GPU, or a thermal / hardware throttle
(`FLAGGED_THROTTLES`) disturb a measurement anywhere. The canary's slowdown over `SLOW_CANARY`
disturbs one on a CPU box, where the engine computes on the CPU it measures; on a box with GPUs the
engine computes on the GPU, and the canary flags past `SLOW_CANARY` only when others also took
`CORROBORATING_CPU` of the engine's cores: alone it is context. On the H200 it flagged 10 levels at
1.3-1.7x while other processes took at most 0.8% of the CPU (issue 45); the 2.0x floor that came
next still flagged, on an H100 (2026-12-06), a 2.3x canary whose level ran within 1% of its other
measurements, others at 0.1% of the CPU, no other process on the GPU (the sweep's first measurement,
right after the servers' warm-up: the engine's own threads share the canary's cores). A
disturbed measurement is set aside when enough undisturbed repetitions of its level remain
(kit.decide.sweep.sweep).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from kit.decide.machine.disturbance import Disturbance
from kit.decide.machine.gpu_watch import FLAGGED_THROTTLES, GpuReading, read_gpus, throttle_during

DISTURBED_CPU = 0.10
"""Share of all CPU cores that other processes took during a measurement beyond which it is
disturbed. Calm measurements here saw at most 5%; two busy-looping processes that cut a level
of the demo engine to a third took 22% (docs/lab/bench_decide.md)."""
SLOW_CANARY = 1.3
"""A measurement whose CPU canary ran this much slower than the sweep's median canary ran on a
slow machine (a neighbour on a shared host, a lower clock) and is disturbed (on a CPU box)."""
CORROBORATING_CPU = DISTURBED_CPU / 2
"""On a box with GPUs, others' share of the engine's cores that makes a canary past `SLOW_CANARY`
count."""
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


def _cpu_times(pids: Iterable[int]) -> dict[int, float]:
    """Each live process's CPU seconds so far (user + system)."""
    out: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
    return out


def _cpu_seconds(pids: set[int]) -> float:
    return sum(_cpu_times(pids).values())


BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def _busy(t: object) -> float:
    return sum(getattr(t, f, 0.0) for f in BUSY_FIELDS)


def _busy_seconds() -> float:
    return _busy(psutil.cpu_times())


def _busy_per_cpu() -> tuple[float, ...]:
    """Busy seconds of each CPU so far, by CPU number."""
    with contextlib.suppress(Exception):
        return tuple(_busy(t) for t in psutil.cpu_times(percpu=True))
    return ()


def _affinity(pid: int) -> frozenset[int] | None:
    """The CPUs a process may run on (None: unknown, e.g. gone, or no affinity on this OS)."""
    try:
        return frozenset(psutil.Process(pid).cpu_affinity())
    except (psutil.Error, AttributeError, OSError):
        return None


def engine_cores(pids: Iterable[int]) -> frozenset[int]:
    """The CPUs the engine's processes may run on: the union of their affinities."""
    cores: set[int] = set()
    for pid in pids:
        cores |= _affinity(pid) or set()
    return frozenset(cores)


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
    own_times: dict[int, float] = field(default_factory=dict)
    """Each of the kit's own processes' CPU seconds so far."""
    per_cpu: tuple[float, ...] = ()
    """Busy seconds of each CPU so far."""
    engine_pids: frozenset[int] = frozenset()
    """The measured arm's server's processes (the servers that are not `neighbours`)."""
    gpu: GpuReading | None = None

    @classmethod
    def now(cls, server_pids: Iterable[int | None], neighbours: Iterable[int | None] = ()) -> MachineReading:
        server_pids, neighbours = list(server_pids), list(neighbours)
        canary = canary_ms()
        pids = own_pids(server_pids)
        near = tree_pids(neighbours)
        engine = tree_pids([p for p in server_pids if p not in neighbours])
        times = _cpu_times(pids)
        gpu = read_gpus(pids)
        return cls(
            time.monotonic(),
            _busy_seconds(),
            sum(times.values()),
            frozenset(pids),
            canary,
            _cpu_seconds(near),
            frozenset(near),
            times,
            _busy_per_cpu(),
            frozenset(engine),
            gpu,
        )


@dataclass(frozen=True)
class Interference:
    """Between two readings: what took from the engine, the canary, and context (load, clock)."""

    foreign_cpu: float
    load_1m: float
    cpu_mhz: float | None
    gpu_foreign_processes: int | None
    canary_ms: float
    """The slower of the CPU canaries before and after the measurement."""
    neighbour_cpu: float = 0.0
    """Share of all cores the other arms' servers took (their own, but not the measured arm's)."""
    engine_cores: int | None = None
    """How many CPUs the measured arm's server may run on (None: no server, or unknown)."""
    engine_core_foreign_cpu: float | None = None
    """Share of those CPUs that processes other than the kit's took."""
    gpus: int | None = None
    """GPUs on this box (NVML, else device files; None: none seen)."""
    gpu_foreign_seen: int | None = None
    """Compute processes on the engine's GPUs that are not the kit's, seen in this pid namespace."""
    gpu_throttle: str | None = None
    """The GPU clock-event reasons seen at either reading or counted during the measurement, by
    name ('': none; None: not known), the flagged ones (`FLAGGED_THROTTLES`) first."""
    gpu_throttle_s: float | None = None
    """Seconds NVML counted the engine's GPUs thermally throttled during the measurement (the most
    of any of them)."""
    gpu_sm_mhz: float | None = None
    """The engine's GPUs' lowest SM clock at the end of the measurement."""

    @property
    def why(self) -> str:
        """What disturbed the measurement ('' when nothing did; the canary's verdict needs the
        sweep's median: `judge_runs`)."""
        return judge(self.signals())

    @property
    def disturbed(self) -> bool:
        return bool(self.why)

    def signals(self) -> Disturbance:
        return {
            "foreign_cpu": round(self.foreign_cpu, 4),
            "load_1m": round(self.load_1m, 2),
            "cpu_mhz": self.cpu_mhz,
            "gpu_foreign_processes": self.gpu_foreign_processes,
            "canary_ms": round(self.canary_ms, 3),
            "neighbour_cpu": round(self.neighbour_cpu, 4),
            "engine_cores": self.engine_cores,
            "engine_core_foreign_cpu": None
            if self.engine_core_foreign_cpu is None
            else round(self.engine_core_foreign_cpu, 4),
            "gpus": self.gpus,
            "gpu_foreign_seen": self.gpu_foreign_seen,
            "gpu_throttle": self.gpu_throttle,
            "gpu_throttle_s": None if self.gpu_throttle_s is None else round(self.gpu_throttle_s, 3),
            "gpu_sm_mhz": self.gpu_sm_mhz,
        }

    def as_dict(self) -> Disturbance:
        why = self.why
        return {**self.signals(), "disturbed": bool(why), "why": why}


def interference(
    before: MachineReading, server_pids: Iterable[int | None], neighbours: Iterable[int | None] = ()
) -> Interference:
    """What others (and the `neighbours`' server trees) did since `before` (own processes: those seen
    at either reading)."""
    after = MachineReading.now(server_pids, neighbours)
    wall = max(after.at - before.at - after.canary_ms / 1000, 1e-6)
    ncpu = psutil.cpu_count() or 1
    # own CPU is read again over both readings' pids (a process that appeared in between counts whole)
    now = _cpu_times(before.pids | after.pids)
    own_delta = {p: max(t - before.own_times.get(p, 0.0), 0.0) for p, t in now.items()}
    if not before.own_times:  # a reading without per-process times: the total only
        own_delta = {0: max(sum(now.values()) - before.own_s, 0.0)}
    foreign = max(after.busy_s - before.busy_s - sum(own_delta.values()), 0.0) / (wall * ncpu)
    near = _cpu_seconds(set(before.neighbour_pids | after.neighbour_pids))
    neighbour = max(near - before.neighbour_s, 0.0) / (wall * ncpu)
    cores = engine_cores(before.engine_pids | after.engine_pids)
    on_cores = _foreign_on(cores, before.per_cpu, after.per_cpu, own_delta, wall, ncpu)
    freq = None
    with contextlib.suppress(Exception):
        f = psutil.cpu_freq()
        freq = round(f.current, 0) if f else None
    canary = max(before.canary_ms, after.canary_ms)
    throttle, throttle_s = throttle_during(before.gpu, after.gpu)
    gpu = after.gpu
    return Interference(
        min(foreign, 1.0),
        os.getloadavg()[0],
        freq,
        gpu.foreign if gpu else None,
        canary,
        min(neighbour, 1.0),
        len(cores) if cores else None,
        on_cores,
        gpu.gpus if gpu else None,
        _most(before.gpu.foreign_seen if before.gpu else None, gpu.foreign_seen if gpu else None),
        throttle,
        throttle_s,
        gpu.sm_mhz if gpu else None,
    )


def _foreign_on(
    cores: frozenset[int],
    before: tuple[float, ...],
    after: tuple[float, ...],
    own_delta: dict[int, float],
    wall: float,
    ncpu: int,
) -> float | None:
    """Share of `cores` that others took: their busy time less the kit's own processes' CPU time,
    each counted on them in proportion to its affinity's overlap (a process free to run anywhere
    counts |cores| / ncpu of its time here)."""
    if not cores or not before or len(before) != len(after):
        return None
    on = [c for c in cores if c < len(after)]
    if not on:
        return None
    busy = sum(after[c] - before[c] for c in on)
    own = 0.0
    for pid, spent in own_delta.items():
        aff = _affinity(pid) if pid else None
        own += spent * (len(aff & cores) / len(aff) if aff else len(on) / ncpu)
    return min(max(busy - own, 0.0) / (wall * len(on)), 1.0)


def _most(a: int | None, b: int | None) -> int | None:
    known = [x for x in (a, b) if x is not None]
    return max(known) if known else None


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, str):
        return None
    with contextlib.suppress(TypeError, ValueError):
        x = float(v)
        return None if math.isnan(x) else x
    return None


def judge(signals: Mapping[str, Any], slowdown: float | None = None) -> str:
    """Why a measurement with these signals (a reading's columns) was disturbed: the signals that
    flagged it, joined by ' and ' ('' when none did). `slowdown`: its canary over the sweep's
    median, where known."""
    out = []
    foreign = _number(signals.get("foreign_cpu"))
    on_cores = _number(signals.get("engine_core_foreign_cpu"))
    cores = _number(signals.get("engine_cores"))
    engine = f"{100 * on_cores:.0f}% of the engine's {cores or 0:.0f} core(s)" if on_cores is not None else ""
    if foreign is not None and foreign > DISTURBED_CPU:
        both = on_cores is not None and on_cores > DISTURBED_CPU
        out.append(f"other processes took {100 * foreign:.0f}% of the CPU" + (f", {engine}" if both else ""))
    elif on_cores is not None and on_cores > DISTURBED_CPU:
        out.append(f"other processes took {engine}")
    neighbour = _number(signals.get("neighbour_cpu"))
    if neighbour is not None and neighbour > DISTURBED_CPU:
        out.append(f"the other arms' servers took {100 * neighbour:.0f}% of the CPU")
    strangers = _number(signals.get("gpu_foreign_seen"))
    if strangers:
        out.append(f"{strangers:.0f} other process(es) ran on the engine's GPU")
    throttle = signals.get("gpu_throttle")
    if isinstance(throttle, str) and throttle:
        bad = [n for n in throttle.split(",") if n in FLAGGED_THROTTLES.values() or n == "thermal"]
        if bad:
            secs = _number(signals.get("gpu_throttle_s"))
            during = f", {secs:.1f} s thermal during the measurement" if secs else ""
            out.append(f"the GPU throttled ({', '.join(bad)}{during})")
    if slowdown is not None and not math.isnan(slowdown) and slowdown > SLOW_CANARY:
        gpu_box = (_number(signals.get("gpus")) or 0) > 0
        took = max(foreign or 0.0, on_cores or 0.0)
        if not gpu_box:
            out.append(f"the CPU canary ran {slowdown:.1f}x slower than the sweep's median")
        elif took > CORROBORATING_CPU:
            out.append(
                f"the CPU canary ran {slowdown:.1f}x slower than the sweep's median while others took "
                f"{100 * took:.0f}% of the engine's cores"
            )
    return " and ".join(out)


def judge_runs(runs: Any) -> Any:
    """sweep_runs' rows (a DataFrame) judged: `slowdown`, each canary over the sweep's median canary;
    `disturbed`, a measurement any signal flagged (or that was already flagged); `why`, what did."""
    import pandas as pd  # the sweep's tables only; readings need no pandas

    runs = runs.copy()
    runs["slowdown"] = slowdowns([None if pd.isna(c) else float(c) for c in runs.canary_ms])
    rows = runs.to_dict("records")
    judged = [judge(r, s) for r, s in zip(rows, runs.slowdown, strict=True)]
    earlier = [bool(r.get("disturbed")) if pd.notna(r.get("disturbed")) else False for r in rows]
    runs["disturbed"] = [bool(w) or e for w, e in zip(judged, earlier, strict=True)]
    before = [r.get("why") if isinstance(r.get("why"), str) else "" for r in rows]
    runs["why"] = [w or b for w, b in zip(judged, before, strict=True)]
    return runs


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
