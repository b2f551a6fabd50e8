"""A KV cache that fits the machine, for an engine that would size its own from all of a CPU's memory.

vLLM's CPU build, without VLLM_CPU_KVCACHE_SPACE, gives its KV cache engine.mem_fraction_static (its
--gpu-memory-utilization, 0.92 by default) of the machine's whole memory less what its worker holds,
whatever else runs: on a shared 23.5 GiB machine it took 20.9 GiB, the kernel's out-of-memory killer
ended its worker, and both sweep arms fell back to predicted figures (issue 60). Where the params set
neither that variable nor the fraction, the kit gives each server a KV cache that fits, and says so:
what its running requests can fill at the context length, at most `FREE_SHARE` of the memory the
probe found free (shared by the servers that run at once) less the weights and a server's
overhead; in whole GiB (vLLM reads the variable as an integer), at least 1.

    params, said = with_cpu_kv_space(params, probe)   # stages 2 and 3, before a server starts

Stage 3 asks with the params the decision filled in, and names the user's own (`users`): a
decision's engine_settings carry the cost model's mem_fraction_static (0.85), which is not the
user sizing the cache; vLLM's CPU build, handed that as --gpu-memory-utilization without the
variable, refused to start where 0.85 of the machine was not free (CI, issue 60).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

import psutil

from kit.arch import load_arch
from kit.artifacts import ProbeReport
from kit.engines.flavors import flavor, server_env
from kit.engines.launcher import discover
from kit.params import RunParams

log = logging.getLogger(__name__)
GIB = 1024**3
FREE_SHARE = 0.5
"""Of the memory free when probed, what the kit's servers may take together (the rest: the kit, the
client, page cache and whatever else the machine runs)."""
OVERHEAD_BYTES = 2 * GIB
"""A server's own memory besides its weights and KV cache (Python, torch, buffers)."""


@dataclass(frozen=True)
class KvSpace:
    """The KV cache given, in GiB, and the figures it came from."""

    variable: str
    gib: int
    need_bytes: int
    room_bytes: float
    free_bytes: int
    seqs: int
    context: int

    def sentence(self, when: str) -> str:
        """What the kit did and why, for the log and decision.json (`when`: when `free` was read)."""
        bound = (
            f"what {self.seqs} running requests of {self.context:,} tokens fill "
            f"({self.need_bytes / GIB:.2f} GiB)"
            if self.need_bytes <= self.room_bytes
            else f"half the free memory less the weights and {OVERHEAD_BYTES // GIB} GiB of overhead"
        )
        return (
            f"engine.env sets no {self.variable} and engine.mem_fraction_static is unset, so vLLM's CPU "
            "build would size its KV cache at 0.92 of all the machine's memory whatever else runs (on a "
            f"shared machine the kernel's out-of-memory killer then ended its worker): the kit gives each "
            f"server {self.variable}={self.gib} (GiB), {bound}, in whole GiB and at least 1, with "
            f"{self.free_bytes / GIB:.1f} GiB free {when}. Set engine.env {self.variable} to choose"
        )


def with_cpu_kv_space(
    params: RunParams, probe: ProbeReport | None, users: RunParams | None = None
) -> tuple[RunParams, str | None]:
    """`params` with the engine's CPU KV cache size set where the engine would take most of the
    machine's memory (see the module's docstring), and the sentence saying so; else as they are.
    `users`: the params as the user wrote them, where `params` had settings filled in (stage 3's
    decision): whether the user sized the cache through engine.mem_fraction_static is read there."""
    eng = params.engine
    fl = flavor(eng.flavor)
    fraction = (users or params).engine.mem_fraction_static
    if (probe is not None and probe.gpus.devices) or fraction is not None:
        return params, None
    distribution = _distribution(params, probe)
    variable = fl.cpu_kv_variable(eng, distribution)
    if variable is None:
        return params, None
    space = kv_space(params, probe, variable, distribution)
    said = space.sentence("when probed" if _probed_free(probe) else "now")
    log.warning("%s", said)
    env = {**eng.env, variable: str(space.gib)}
    return params.model_copy(update={"engine": eng.model_copy(update={"env": env})}), said


def kv_space(
    params: RunParams, probe: ProbeReport | None, variable: str, distribution: str | None
) -> KvSpace:
    """The KV cache size each server gets, from the model, the engine's capacity and the free memory."""
    eng = params.engine
    arch = load_arch(params.model.path)
    context = eng.context_length or arch.max_positions or params.probe.context_length
    servers = max(1, eng.dp_size * eng.replicas)
    capacity = flavor(eng.flavor).capacity(eng, distribution=distribution, gpus=list)
    seqs = eng.max_running_requests or max(1, capacity.total // servers)
    need = seqs * context * arch.kv_bytes_per_token()
    free = _probed_free(probe) or psutil.virtual_memory().available
    room = FREE_SHARE * free / servers - arch.resident_weight_bytes() - OVERHEAD_BYTES
    gib = max(1, min(math.ceil(need / GIB), math.floor(room / GIB)))
    return KvSpace(variable, gib, need, room, free, seqs, context)


def _probed_free(probe: ProbeReport | None) -> int | None:
    return probe.host.get("ram_available_bytes") if probe is not None else None


def _distribution(params: RunParams, probe: ProbeReport | None) -> str | None:
    """The engine's installed distribution (`vllm-cpu`...): probe.json's packages, else its launcher."""
    packages = (probe.engine_env.get("interpreter") or {}).get("packages") if probe is not None else None
    if isinstance(packages, dict):
        found = [name for name, version in packages.items() if version and name in _names(params)]
        if found:
            return found[-1]
    fl = flavor(params.engine.flavor)
    launcher = discover(params.engine_python, fl, env={**os.environ, **server_env(params)})
    return launcher.distribution if launcher else None


def _names(params: RunParams) -> tuple[str, ...]:
    return tuple(flavor(params.engine.flavor).distributions)
