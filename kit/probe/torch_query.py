"""GPU facts from torch, run as a child process so the caller never initialises CUDA itself.

Standalone on purpose (imports only torch and the standard library): `python torch_query.py
[--measure]` prints one JSON object: torch and CUDA versions, per-device properties, and with
`--measure` a device-to-device copy bandwidth and a bf16 matmul rate on device 0 (a few seconds).
"""

from __future__ import annotations

import json
import sys
import time


def _device(torch, i: int) -> dict:  # noqa: ANN001 - torch is passed in to keep imports local
    p = torch.cuda.get_device_properties(i)
    return {
        "index": i,
        "name": p.name,
        "arch": f"sm_{p.major}{p.minor}",
        "memory_total_bytes": int(p.total_memory),
        "sm_count": int(p.multi_processor_count),
        "smem_per_block_optin": getattr(p, "shared_memory_per_block_optin", None),
    }


def _timed(torch, fn, repeats: int) -> float:  # noqa: ANN001
    """Median seconds of `fn()` on the current stream, measured with CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def measure(torch) -> dict:  # noqa: ANN001
    """Copy bandwidth (read + write bytes per second) and dense bf16 matmul FLOP/s on device 0."""
    t0 = time.perf_counter()
    free, _ = torch.cuda.mem_get_info(0)
    nbytes = int(min(1 << 30, free // 4))
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty_like(src)
    copy_s = _timed(torch, lambda: dst.copy_(src), 10)
    src = dst = None  # free the copy buffers before the matmul
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda:0")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda:0")
    mm_s = _timed(torch, lambda: a @ b, 10)
    return {
        "copy_bytes": nbytes,
        "copy_bandwidth_bytes_s": 2 * nbytes / copy_s,
        "matmul_n": n,
        "bf16_flops": 2 * n**3 / mm_s,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    out: dict = {"torch_version": None, "cuda_available": False, "devices": []}
    try:
        import torch
    except ImportError as e:
        out["error"] = f"torch not importable: {e}"
        print(json.dumps(out))
        return
    out["torch_version"] = torch.__version__
    out["torch_cuda_version"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    if out["cuda_available"]:
        out["devices"] = [_device(torch, i) for i in range(torch.cuda.device_count())]
        if "--measure" in sys.argv:
            out["measured"] = measure(torch)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
