"""The host: CPU cores, RAM, free disk where outputs go, /dev/shm, OS and Python."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from pathlib import Path

try:
    import psutil
except ImportError:  # a bare GPU box (benchmarks/probe_gpu.py) may lack psutil
    psutil = None

from kit.artifacts import Finding
from kit.artifacts.probe_sections import HostFacts
from kit.probe.findings import finding

GIB = 1024**3
SHM_MIN_BYTES = 1 * GIB
"""NCCL and multi-process engines (tp / dp > 1) need more than Docker's 64 MB /dev/shm."""


def _existing_parent(path: Path) -> Path:
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _cpu_and_ram() -> tuple[int | None, int | None, int, int]:
    """(logical cores, physical cores, RAM total, RAM available); psutil when installed, else sysconf."""
    if psutil is None:
        page = os.sysconf("SC_PAGE_SIZE")
        total, avail = page * os.sysconf("SC_PHYS_PAGES"), page * os.sysconf("SC_AVPHYS_PAGES")
        return os.cpu_count(), None, total, avail
    mem = psutil.virtual_memory()
    return psutil.cpu_count(logical=True), psutil.cpu_count(logical=False), mem.total, mem.available


def host_facts(output_dir: Path) -> HostFacts:
    """Facts about this machine; disk space is measured on the filesystem that will hold `output_dir`."""
    cores, physical, total, available = _cpu_and_ram()
    disk = shutil.disk_usage(_existing_parent(output_dir))
    shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    return HostFacts(
        hostname=platform.node(),
        cpu_logical=cores,
        cpu_physical=physical,
        ram_total_bytes=total,
        ram_available_bytes=available,
        output_dir=str(output_dir),
        disk_free_bytes=disk.free,
        shm_total_bytes=shm.total if shm else None,
        shm_free_bytes=shm.free if shm else None,
        os=platform.platform(),
        python=sys.version.split()[0],
        python_executable=sys.executable,
    )


def host_findings(h: HostFacts, weight_bytes: int | None, multi_process: bool) -> list[Finding]:
    """Findings of section `host`; `multi_process` when tp or dp > 1 (NCCL needs /dev/shm)."""
    f = finding
    out = [
        f(
            "host",
            "cpu",
            "ok",
            h["cpu_logical"],
            f"{h['cpu_logical']} logical / {h['cpu_physical']} physical cores",
        ),
        f("host", "os", "ok", h["os"], f"{h['os']}, Python {h['python']}"),
    ]
    ram = h["ram_total_bytes"]
    if weight_bytes and ram < weight_bytes:
        out.append(
            f(
                "host",
                "ram",
                "warn",
                ram,
                f"{ram / GIB:.0f} GiB RAM < {weight_bytes / GIB:.0f} GiB of weights",
                "loading will page weights from disk: expect a slow start, or stage the model on faster disk",
            )
        )
    else:
        out.append(
            f("host", "ram", "ok", ram, f"{ram / GIB:.0f} GiB RAM, {h['ram_available_bytes'] / GIB:.0f} free")
        )
    free = h["disk_free_bytes"]
    status = "warn" if free < 10 * GIB else "ok"
    out.append(
        f(
            "host",
            "disk",
            status,
            free,
            f"{free / GIB:.0f} GiB free under {h['output_dir']}",
            "free disk space or set output_dir on a larger filesystem" if status == "warn" else "",
        )
    )
    out.append(_shm_finding(h, multi_process))
    return out


def _shm_finding(h: HostFacts, multi_process: bool) -> Finding:
    shm = h["shm_total_bytes"]
    if shm is None:
        return finding(
            "host",
            "shm",
            "warn" if multi_process else "ok",
            None,
            "no /dev/shm",
            "mount /dev/shm (docker run --shm-size 16g)" if multi_process else "",
        )
    why = f"/dev/shm {shm / GIB:.1f} GiB ({h['shm_free_bytes'] / GIB:.1f} free)"
    if multi_process and shm < SHM_MIN_BYTES:
        return finding(
            "host",
            "shm",
            "warn",
            shm,
            why + ": too small for NCCL with tp / dp > 1",
            "run the container with --shm-size 16g (or --ipc host)",
        )
    return finding("host", "shm", "ok", shm, why)
