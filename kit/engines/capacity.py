"""How many requests an engine runs at once (its capacity), as each flavor says it or defaults it.

Stage 3 keeps the engine full: requests in flight = capacity plus a queue as deep again, so that
every slot a finished request frees is taken at the engine's next step (docs/bench_ceiling.md
measured the depth). Where the capacity comes from, in order:

- a server that answers `/server_info` (SGLang, and an external SGLang): `max_running_requests` x
  `dp_size`, what the running server says;
- a launch flag the kit passed (`engine.max_running_requests`: the flavor's `capacity_flag`, SGLang
  `--max-running-requests`, vLLM `--max-num-seqs`), times data parallel;
- the flavor's own default (`Flavor.capacity`): vLLM's for the device (kit/engines/flavors/vllm.py);
- nothing known (`transformers serve`, an external server): None, and the loop's own default.

The engine's gauges then check it during the run (`kit.generate.loop`): when every request the kit
has in flight is running and none waits, the kit was the limit and sends more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kit.engines.flavors import Capacity, flavor

if TYPE_CHECKING:
    from kit.params import EngineParams

__all__ = ["Capacity", "launched_capacity", "server_info_capacity"]


def launched_capacity(eng: EngineParams, distribution: str | None, gpus: Callable[[], list[Any]]) -> Capacity:
    """The capacity of the servers of `eng`, from their launch flag or their flavor's default
    (`distribution`: the installed engine package; `gpus`: the GPUs' facts, asked only if needed)."""
    return flavor(eng.flavor).capacity(eng, distribution=distribution, gpus=gpus)


def server_info_capacity(infos: list[dict[str, Any] | None]) -> Capacity | None:
    """SGLang's own figure: `max_running_requests` x `dp_size` summed over its servers' /server_info."""
    total = 0
    for info in infos:
        if not info or not info.get("max_running_requests"):
            return None
        total += int(info["max_running_requests"]) * int(info.get("dp_size") or 1)
    return Capacity(total, "the server's /server_info (max_running_requests x dp_size)") if total else None
