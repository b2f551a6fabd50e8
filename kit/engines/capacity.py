"""How many requests an engine runs at once (its capacity), as each flavor says it or defaults it.

Stage 3 keeps the engine full: requests in flight = capacity plus a queue as deep again, so that
every slot a finished request frees is taken at the engine's next step (docs/lab/bench_ceiling.md
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
from typing import TYPE_CHECKING, Any, TypedDict

from kit.engines.flavors import Capacity, flavor

if TYPE_CHECKING:
    from kit.params import EngineParams

__all__ = ["Capacity", "ServerInfo", "launched_capacity", "server_info_capacity"]


class SchedulerState(TypedDict, total=False):
    effective_max_running_requests_per_dp: int | None
    """What one data-parallel rank's scheduler chose to run at once."""


class ServerInfo(TypedDict, total=False):
    """SGLang's `/server_info` answer (`EngineClient.server_info`): its server arguments and state,
    of which the kit reads these keys (the answer holds many more)."""

    dp_size: int | None
    max_running_requests: int | None
    """The launch argument (null where the launch left it to the schedulers)."""
    internal_states: list[SchedulerState]


def launched_capacity(eng: EngineParams, distribution: str | None, gpus: Callable[[], list[Any]]) -> Capacity:
    """The capacity of the servers of `eng`, from their launch flag or their flavor's default
    (`distribution`: the installed engine package; `gpus`: the GPUs' facts, asked only if needed)."""
    return flavor(eng.flavor).capacity(eng, distribution=distribution, gpus=gpus)


def server_info_capacity(infos: list[ServerInfo | None]) -> Capacity | None:
    """SGLang's own figure, summed over its servers' /server_info: `max_running_requests` x `dp_size`
    where the launch set it, else what its schedulers chose (`internal_states[].
    effective_max_running_requests_per_dp`: SGLang 0.5.16 on an H200 left the argument null and ran
    4,096, docs/lab/h200/sglang)."""
    total, chosen = 0, False
    for info in infos:
        running = _running(info) if info else None
        if not running:
            return None
        total += running[0]
        chosen = chosen or running[1]
    if not total:
        return None
    source = (
        "scheduler's effective_max_running_requests_per_dp" if chosen else "max_running_requests x dp_size"
    )
    return Capacity(total, f"the server's /server_info ({source})")


def _running(info: ServerInfo) -> tuple[int, bool] | None:
    """(requests one server runs at once, whether its schedulers chose the figure), or None."""
    dp = int(info.get("dp_size") or 1)
    if running := info.get("max_running_requests"):
        return int(running) * dp, False
    ranks = [
        int(per_dp)
        for s in info.get("internal_states") or []
        if isinstance(s, dict) and (per_dp := s.get("effective_max_running_requests_per_dp"))
    ]
    if not ranks:
        return None
    return (sum(ranks) if len(ranks) == dp else ranks[0] * dp), True
