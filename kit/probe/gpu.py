"""GPU facts (NVML, then torch in a child process), the datasheet table, and GPU findings."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import yaml

from kit.artifacts.probe_sections import DatasheetEntry, DatasheetFigures, GpuDevice, TorchDevice, TorchInfo

try:
    import pynvml as nv
except ImportError:  # no nvidia-ml-py: no NVIDIA GPU is read
    nv = None

TORCH_QUERY = Path(__file__).with_name("torch_query.py")


@dataclass(frozen=True)
class GpuFacts:
    """What the probe knows of one GPU; fields a source cannot tell stay None."""

    name: str
    arch: str | None = None
    """Compute capability as `sm_90`, `sm_120`..."""
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    index: int = 0
    sm_count: int | None = None
    smem_per_block_optin: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None

    @property
    def sm(self) -> int | None:
        """The compute capability as a number: 90 for sm_90, 120 for sm_120."""
        m = re.fullmatch(r"sm_(\d+)", self.arch or "")
        return int(m.group(1)) if m else None

    def to_dict(self) -> GpuDevice:
        """probe.json's `gpus.devices` entry: every field, in the order declared."""
        return GpuDevice(
            name=self.name,
            arch=self.arch,
            memory_total_bytes=self.memory_total_bytes,
            memory_free_bytes=self.memory_free_bytes,
            index=self.index,
            sm_count=self.sm_count,
            smem_per_block_optin=self.smem_per_block_optin,
            clock_sm_max_mhz=self.clock_sm_max_mhz,
            clock_mem_max_mhz=self.clock_mem_max_mhz,
            driver_version=self.driver_version,
            cuda_driver_version=self.cuda_driver_version,
        )

    @classmethod
    def from_dict(cls, d: GpuDevice | TorchDevice) -> GpuFacts:
        """The facts of a probe.json device entry (of any kit) or of a torch device."""
        return cls(**{f.name: d.get(f.name) for f in fields(cls) if f.name in d})


class DatasheetRow(DatasheetFigures):
    """An entry of kit/probe/datasheet.yaml as written: the figures and the name patterns it matches."""

    match: list[str]


# ---- datasheet ---------------------------------------------------------------
@lru_cache(maxsize=1)
def datasheet() -> list[DatasheetRow]:
    """Entries of `datasheet.yaml`, in matching order."""
    text = resources.files("kit.probe").joinpath("datasheet.yaml").read_text()
    return yaml.safe_load(text)["gpus"]


def _normalize(name: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", name.lower()).split())


def lookup_datasheet(name: str) -> DatasheetEntry | None:
    """The datasheet entry for an NVML / torch GPU name ("NVIDIA H100 80GB HBM3"...), or None.

    The entry gains derived SI fields: `bandwidth_bytes_s`, `bf16_flops`, `fp8_flops`,
    `memory_bytes` and `smem_per_block_bytes`.
    """
    norm = _normalize(name)
    for entry in datasheet():
        if any(re.search(p, norm) for p in entry["match"]):
            e = cast(DatasheetEntry, {k: v for k, v in entry.items() if k != "match"})
            e["bandwidth_bytes_s"] = e["bandwidth_tbs"] * 1e12
            e["bf16_flops"] = e["bf16_tflops"] * 1e12
            e["fp8_flops"] = e["fp8_tflops"] * 1e12 if e.get("fp8_tflops") else None
            e["memory_bytes"] = int(e["memory_gb"] * 1e9)
            e["smem_per_block_bytes"] = int(e["smem_per_block_kb"] * 1024)
            return e
    return None


# ---- collection --------------------------------------------------------------
def nvml_gpus() -> list[GpuFacts]:
    """GPUs seen by NVML; empty when there is no driver or no nvidia-ml-py."""
    if nv is None:
        return []
    try:
        nv.nvmlInit()
    except Exception:  # no library, no driver: both mean "no NVIDIA GPU here"
        return []
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        cuda = nv.nvmlSystemGetCudaDriverVersion_v2()
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            out.append(
                GpuFacts(
                    name=_str(nv.nvmlDeviceGetName(h)),
                    index=i,
                    arch=f"sm_{major}{minor}",
                    memory_total_bytes=int(mem.total),
                    memory_free_bytes=int(mem.free),
                    clock_sm_max_mhz=_safe(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                    clock_mem_max_mhz=_safe(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
                    driver_version=_str(driver),
                    cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
                )
            )
        return out
    finally:
        nv.nvmlShutdown()


def _str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVML raises NotSupported on some boards for optional queries
        return None


def torch_query(measure: bool = False, python: str | None = None, timeout_s: float = 120) -> TorchInfo:
    """Run `torch_query.py` in a child interpreter; on any failure a dict with an `error`."""
    cmd = [python or sys.executable, str(TORCH_QUERY)] + (["--measure"] if measure else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError, OSError) as e:
        return TorchInfo(error=f"torch query failed: {e}", devices=[])


def merge_torch(nvml: list[GpuFacts], torch_info: TorchInfo) -> list[GpuFacts]:
    """NVML facts completed with torch's SM count and shared memory; torch alone when NVML saw none."""
    devices = torch_info.get("devices") or []
    if not nvml:
        return [GpuFacts.from_dict(d) for d in devices]
    out = []
    for g in nvml:
        d = next((d for d in devices if d["index"] == g.index), None)
        out.append(
            replace(
                g,
                sm_count=d.get("sm_count") if d else None,
                smem_per_block_optin=d.get("smem_per_block_optin") if d else None,
            )
        )
    return out


def collect_gpus(measure: bool = False) -> tuple[list[GpuFacts], TorchInfo]:
    """(GPU facts, torch info incl. optional measurement); ([], info) on a machine without GPUs."""
    nvml = nvml_gpus()
    info = (
        torch_query(measure=measure)
        if nvml or measure
        else TorchInfo(devices=[], skipped="no GPU seen by NVML")
    )
    return merge_torch(nvml, info), info


def topology() -> str | None:
    """`nvidia-smi topo -m` output when nvidia-smi is on PATH."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        return subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.TimeoutExpired, OSError):
        return None
