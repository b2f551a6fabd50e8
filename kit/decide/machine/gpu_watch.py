"""What the GPUs the engine's servers use did during a measurement, as NVML says it: compute
processes that are not the kit's, clock-event (throttle) reasons, thermal and power violation time,
the SM clock. Read by kit.decide.machine.watch into each `MachineReading`; without nvidia-ml-py, a
driver or a GPU, every figure is unknown (None), never an error.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

import psutil

try:
    import pynvml as nv
except ImportError:  # no nvidia-ml-py: no GPU's processes are read
    nv = None

FLAGGED_THROTTLES = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
"""NVML clock-event reasons that disturb a measurement: thermal, and the hardware's own slow-downs
(an external power brake, a power supply or temperature alarm)."""
RECORDED_THROTTLES = {0x4: "sw_power_cap", 0x200: "board_limit", 0x400: "reliability"}
"""Reasons recorded but not flagged: the software power cap is the GPU's own limit under the load
being measured (an H200 at its top levels reaches it), the same in every repetition: part of what
is measured, not a disturbance; measuring again would meet it again."""


@dataclass(frozen=True)
class GpuReading:
    """What NVML says of the GPUs the servers use (`watched`: their indices), at one moment."""

    gpus: int
    watched: tuple[int, ...] = ()
    foreign: int | None = None
    """Compute processes on any GPU whose pid is not the kit's (a container may show ours so)."""
    foreign_seen: int | None = None
    """Of those on the watched GPUs, the ones that are live processes of this pid namespace."""
    reasons: int | None = None
    """The clock-event (throttle) reasons of the watched GPUs, OR-ed."""
    sm_mhz: float | None = None
    """The lowest SM clock of the watched GPUs."""
    thermal_ns: dict[int, int] = field(default_factory=dict)
    """NVML's cumulative thermal violation time per watched GPU (where it is offered)."""
    power_ns: dict[int, int] = field(default_factory=dict)
    """The same for the power cap."""


@dataclass(slots=True)
class _NvmlState:
    """The NVML module this process initialised, and whether that worked."""

    module: Any = None
    ok: bool = False


_nvml_state = _NvmlState()


def _nvml() -> Any:
    """The NVML module, initialised once per process (None: no nvidia-ml-py, no driver, no GPU)."""
    module = nv
    if module is None:
        return None
    if _nvml_state.module is not module:
        try:
            module.nvmlInit()
            ok = True
        except Exception:  # no library, no driver: no GPU to read
            ok = False
        _nvml_state.module, _nvml_state.ok = module, ok
    return module if _nvml_state.ok else None


def _device_files() -> int:
    """NVIDIA device files (/dev/nvidia0, ...): GPUs there even where NVML cannot be read."""
    with contextlib.suppress(OSError):
        return sum(n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir("/dev"))
    return 0


def _uses_gpu(pid: int) -> bool:
    """Whether a process of this pid namespace has the CUDA driver mapped (unreadable: assumed so).
    A pid that NVML names from the host's namespace may be another process here."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except PermissionError:
        return True
    except OSError:
        return False
    return "libcuda.so" in maps or "/dev/nvidia" in maps


def _visible(count: int) -> list[int]:
    """The GPUs CUDA_VISIBLE_DEVICES names by index (all where it is unset or names them otherwise)."""
    names = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if names and all(n.isdigit() for n in names):
        return [i for i in map(int, names) if i < count]
    return list(range(count))


def _try(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:  # not supported on this GPU, or refused (a container): unknown
        return None


def read_gpus(pids: set[int]) -> GpuReading | None:
    """The GPUs as NVML sees them now (None: no NVML and no GPU device file; a `GpuReading` with only
    `gpus` where device files show GPUs NVML cannot read). The GPUs watched are those that run one
    of `pids`, else (a container, where NVML names them by host pids) those CUDA_VISIBLE_DEVICES
    names, else all."""
    m = _nvml()
    count = _try(m.nvmlDeviceGetCount) if m is not None else None
    if count is None:
        files = _device_files()
        return GpuReading(files) if files else None
    handles = [_try(m.nvmlDeviceGetHandleByIndex, i) for i in range(count)]
    procs = [None if h is None else _try(m.nvmlDeviceGetComputeRunningProcesses, h) for h in handles]
    pid_lists = [None if ps is None else [int(p.pid) for p in ps] for ps in procs]
    ours = [i for i, ps in enumerate(pid_lists) if ps and any(p in pids for p in ps)]
    watched = ours or _visible(count)
    foreign = (
        None if any(ps is None for ps in pid_lists) else sum(p not in pids for ps in pid_lists for p in ps)
    )
    seen = None
    if all(pid_lists[i] is not None for i in watched):
        strangers = {p for i in watched for p in pid_lists[i] or [] if p not in pids}
        seen = sum(psutil.pid_exists(p) and _uses_gpu(p) for p in strangers)
    reason_call = getattr(m, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        m, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    masks = [
        _try(reason_call, handles[i]) if reason_call and handles[i] is not None else None for i in watched
    ]
    known = [int(x) for x in masks if x is not None]
    clock = getattr(m, "NVML_CLOCK_SM", 1)
    clocks = [_try(m.nvmlDeviceGetClockInfo, handles[i], clock) for i in watched if handles[i] is not None]
    known_clocks = [float(c) for c in clocks if c is not None]

    def violations(policy: int) -> dict[int, int]:
        out = {}
        for i in watched:
            v = _try(m.nvmlDeviceGetViolationStatus, handles[i], policy) if handles[i] is not None else None
            if v is not None:
                out[i] = int(v.violationTime)

        return out

    return GpuReading(
        count,
        tuple(watched),
        foreign,
        seen,
        _or(known) if known else None,
        min(known_clocks) if known_clocks else None,
        violations(getattr(m, "NVML_PERF_POLICY_THERMAL", 1)),
        violations(getattr(m, "NVML_PERF_POLICY_POWER", 0)),
    )


def _or(masks: list[int]) -> int:
    out = 0
    for x in masks:
        out |= x
    return out


def throttle_names(mask: int) -> list[str]:
    """The names of the flagged, then the recorded, reasons set in an NVML clock-event mask."""
    return [n for b, n in {**FLAGGED_THROTTLES, **RECORDED_THROTTLES}.items() if mask & b]


def throttle_during(before: GpuReading | None, after: GpuReading | None) -> tuple[str | None, float | None]:
    """The clock-event reasons at either reading, plus 'thermal' / 'power_cap' where NVML's
    violation counters grew in between; and the seconds of thermal violation (the most of any
    watched GPU)."""
    if after is None or (after.reasons is None and not after.thermal_ns and not after.power_ns):
        return None, None
    mask = ((before.reasons or 0) if before else 0) | (after.reasons or 0)
    names = throttle_names(mask)
    thermal = _grew(before.thermal_ns if before else {}, after.thermal_ns)
    power = _grew(before.power_ns if before else {}, after.power_ns)
    if thermal and "sw_thermal" not in names and "hw_thermal" not in names:
        names.insert(0, "thermal")
    if power and "sw_power_cap" not in names:
        names.append("power_cap")
    seconds = thermal / 1e9 if after.thermal_ns and before and before.thermal_ns else None
    return ",".join(names), seconds


def _grew(before: dict[int, int], after: dict[int, int]) -> int:
    """The most any GPU's cumulative counter grew (ns) between two readings."""
    return max((after[i] - before[i] for i in after if i in before), default=0)
