"""Findings of section `gpus`: count, each GPU, datasheet match, torch, measurement."""

from __future__ import annotations

from kit.artifacts import Finding
from kit.artifacts.probe_sections import TorchInfo
from kit.probe.findings import finding
from kit.probe.gpu import GpuFacts, lookup_datasheet

GIB = 1024**3


def gpu_findings(
    gpus: list[GpuFacts], torch_info: TorchInfo | None, needs_gpu: bool, wanted: int = 1
) -> list[Finding]:
    """Findings of section `gpus`: count, each GPU, datasheet match, shared memory, measurement.

    No GPU fails when the engine runs on GPUs (`needs_gpu`; `wanted` = tp_size x dp_size of them).
    `torch_info` None: torch was not asked (GPU facts given by the caller), so no torch finding."""
    if not gpus:
        why = "no NVIDIA GPU seen (NVML found no driver or device, torch sees no CUDA device)"
        if not needs_gpu:
            return [finding("gpus", "count", "ok", 0, why)]
        return [
            finding(
                "gpus",
                "count",
                "fail",
                0,
                f"{why}, but the engine runs on GPUs and tp_size x dp_size = {wanted} of them are wanted",
                "run on a machine with the GPUs (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use "
                "engine.flavor 'transformers' with device 'cpu' for a small model",
            )
        ]
    out = [finding("gpus", "count", "ok", len(gpus), f"{len(gpus)} x {gpus[0].name}")]
    if len({g.name for g in gpus}) > 1:
        out.append(
            finding(
                "gpus",
                "mixed",
                "warn",
                sorted({g.name for g in gpus}),
                "GPUs of different models",
                "pin the server to identical GPUs with CUDA_VISIBLE_DEVICES (engine.env)",
            )
        )
    for g in gpus:
        out.append(_one_gpu(g))
    out.append(_datasheet_finding(gpus[0]))
    if torch_info is not None:
        out.extend(_torch_findings(gpus[0], torch_info))
    return out


def _one_gpu(g: GpuFacts) -> Finding:
    total, free = g.memory_total_bytes or 0, g.memory_free_bytes
    value = {"name": g.name, "arch": g.arch, "memory_gib": round(total / GIB, 1)}
    if free is not None and total and free < 0.9 * total:
        used = (total - free) / GIB
        return finding(
            "gpus",
            f"gpu{g.index}",
            "warn",
            value,
            f"{used:.1f} GiB already used by other processes",
            "stop the other processes on this GPU, or lower engine.mem_fraction_static",
        )
    return finding("gpus", f"gpu{g.index}", "ok", value, f"{g.name}, {g.arch}, {total / GIB:.1f} GiB")


def _datasheet_finding(g: GpuFacts) -> Finding:
    entry = lookup_datasheet(g.name)
    if entry is None:
        return finding(
            "gpus",
            "datasheet",
            "warn",
            None,
            f"{g.name!r} is not in the kit's datasheet",
            "add it to kit/probe/datasheet.yaml; meanwhile set probe.measure_gpu: true for measured "
            "bandwidth and FLOP/s",
        )
    why = f"{entry['name']}: {entry['bandwidth_tbs']} TB/s, {entry['bf16_tflops']} bf16 TFLOP/s dense"
    if g.arch and entry["arch"] != g.arch:
        return finding(
            "gpus",
            "datasheet",
            "warn",
            entry["name"],
            why + f", but arch {entry['arch']} != {g.arch}",
            "check the name match in kit/probe/datasheet.yaml",
        )
    return finding("gpus", "datasheet", "ok", entry["name"], why)


def _torch_findings(g: GpuFacts, info: TorchInfo) -> list[Finding]:
    out = []
    problem = info.get("error") or info.get("skipped")
    if not problem and not info.get("cuda_available"):
        problem = f"torch {info.get('torch_version')} sees no CUDA device (a CPU-only build?)"
    if problem:
        action = "install a CUDA build of torch in the kit's environment for SM count and shared memory"
        out.append(finding("gpus", "torch", "warn", info.get("torch_version"), problem, action))
    else:
        why = f"torch {info['torch_version']} built for CUDA {info.get('torch_cuda_version')}"
        out.append(finding("gpus", "torch", "ok", info["torch_version"], why))
    m = info.get("measured")
    if m:
        entry = lookup_datasheet(g.name)
        bw = m["copy_bandwidth_bytes_s"]
        flops, secs = m["bf16_flops"] / 1e12, m["seconds"]
        why = f"copy {bw / 1e12:.2f} TB/s, bf16 matmul {flops:.0f} TFLOP/s in {secs:.1f} s"
        if entry and bw < 0.5 * entry["bandwidth_bytes_s"]:
            out.append(
                finding(
                    "gpus",
                    "measured",
                    "warn",
                    m,
                    why + f" (< half of {entry['bandwidth_tbs']} TB/s)",
                    "check for other work on the GPU, clocks (nvidia-smi -q -d CLOCK) and thermals",
                )
            )
        else:
            out.append(finding("gpus", "measured", "ok", m, why))
    return out
