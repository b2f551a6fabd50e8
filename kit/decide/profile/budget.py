"""How much memory a CPU step profile needs, against what this machine can give it.

The `hf` profiler builds a random-weight model in fp32: a 27B model at full depth would need
about 108 GB. `plan_cpu_profile` estimates the bytes a profile holds at a given depth from the
config (weights, the filled cache and the logits of the largest batch) and picks the full model
when it fits, else a few layers that the profiler scales to full depth (the step time of a decoder
stack is close to linear in its layers; embeddings and LM head are built once, at their real size),
else no profile at all: the prediction then uses the nominal figures, and says so.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kit.arch import ModelArch

GIB = 1024**3
USABLE_FRACTION = 0.5
"""Share of the available memory a profile may take: other work on the machine keeps the rest."""
CACHE_COPIES = 3
"""The transformers cache concatenates on every step: old and new tensors live side by side."""
FIXED_BYTES = 512 * 2**20
"""Allocator slack, thread stacks and the forward pass's small temporaries."""
MAX_SCALED_LAYERS = 8


@dataclass(frozen=True)
class ProfilePlan:
    """Which profile runs: the full model, `n_layers` scaled to full depth, or none."""

    mode: Literal["full", "scaled", "skipped"]
    n_layers: int
    """Depth built (the deepest of the two depths when scaled; the smallest tried when skipped)."""
    full_layers: int
    need_bytes: int
    """Estimated peak of the profile at `n_layers`."""
    full_bytes: int
    usable_bytes: int

    @property
    def profiler_layers(self) -> int | None:
        """`n_layers` for `profile_steps`: None builds the full model."""
        return None if self.mode == "full" else self.n_layers

    def source(self) -> str:
        """What the prediction's efficiency figures come from, for decision.json."""
        if self.mode == "full":
            return "profile on cpu"
        if self.mode == "scaled":
            return f"profile on cpu: {self.n_layers} of {self.full_layers} layers, scaled to full depth"
        return "nominal CPU figures: no step profile (it would not fit in memory)"

    def warning(self) -> str | None:
        """What a person should know about this profile, or None when the full model was profiled."""
        sizes = (self.need_bytes, self.full_bytes, self.usable_bytes)
        need, full, usable = (f"{b / GIB:.1f} GiB" for b in sizes)
        if self.mode == "scaled":
            return (
                f"the CPU step profile built {self.n_layers} of {self.full_layers} layers and scaled the "
                f"step time to full depth: the whole model needs about {full} in fp32, {usable} usable "
                "here. To profile it whole, run kit decide on a machine with more memory, or pass a "
                "profile measured on the GPU (decide.profile)."
            )
        if self.mode == "skipped":
            return (
                f"no CPU step profile: even {self.n_layers} of {self.full_layers} layers need about {need} "
                f"in fp32 (the whole model {full}), {usable} usable here, so the prediction uses nominal CPU "
                "figures and default efficiencies. To calibrate it, run kit decide where a GPU is present "
                "or pass a measured profile (decide.profile, benchmarks/profile_step.py)."
            )
        return None


def profile_bytes(
    arch: ModelArch, n_layers: int, batch: int, q: int, context: int, dtype_bytes: int = 4
) -> int:
    """Estimated peak bytes of the `hf` profiler on a model cut to `n_layers` layers."""
    emb = arch.vocab_size * arch.hidden_size * (1 if arch.tie_embeddings else 2)
    weights = (emb + n_layers * arch.layer_params) * dtype_bytes
    types = arch.layer_types[:n_layers]
    full = sum(t == "full_attention" for t in types)
    linear = len(types) - full
    kv_per_layer = arch.kv_bytes_per_token(dtype_bytes) // max(arch.full_attention_layers, 1)
    state = arch.state_bytes_per_seq(dtype_bytes, dtype_bytes)
    state_per_layer = state // max(arch.linear_attention_layers, 1)
    cache = batch * (full * kv_per_layer * (context + q) + linear * state_per_layer) * CACHE_COPIES
    logits = 2 * batch * q * arch.vocab_size * dtype_bytes
    hidden = 4 * batch * q * max(arch.intermediate_size, arch.moe_intermediate_size, arch.hidden_size)
    return weights + cache + logits + hidden * dtype_bytes + FIXED_BYTES


def scaled_depths(arch: ModelArch) -> list[int]:
    """Depths the profiler can scale from, deepest first: whole hybrid periods, at least two of them."""
    types = arch.layer_types
    period = types.index("full_attention") + 1 if "full_attention" in types else 1
    top = min(max(MAX_SCALED_LAYERS, 2 * period), arch.num_layers - 1)
    return [d for d in range(top, 2 * period - 1, -1) if d % period == 0]


def plan_cpu_profile(
    arch: ModelArch, batch: int, q: int, context: int, available_bytes: int | None = None
) -> ProfilePlan:
    """The deepest profile that fits in half the memory available now (`available_bytes` overrides)."""
    usable = int(USABLE_FRACTION * (available_memory_bytes() if available_bytes is None else available_bytes))
    full = profile_bytes(arch, arch.num_layers, batch, q, context)
    if full <= usable:
        return ProfilePlan("full", arch.num_layers, arch.num_layers, full, full, usable)
    depths = scaled_depths(arch)
    for depth in depths:
        need = profile_bytes(arch, depth, batch, q, context)
        if need <= usable:
            return ProfilePlan("scaled", depth, arch.num_layers, need, full, usable)
    smallest = depths[-1] if depths else arch.num_layers
    need = profile_bytes(arch, smallest, batch, q, context)
    return ProfilePlan("skipped", smallest, arch.num_layers, need, full, usable)


def available_memory_bytes() -> int:
    """Memory this process can still take: the least of free RAM, a cgroup limit and `ulimit -v`."""
    import psutil

    candidates = [psutil.virtual_memory().available]
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        candidates.append(cgroup)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        candidates.append(max(soft - psutil.Process().memory_info().vms, 0))
    return max(min(candidates), 0)


def _cgroup_headroom() -> int | None:
    """Limit minus usage of this process's memory cgroup (v2, else v1), None when unlimited."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit, usage = (Path(f).read_text().strip() for f in (limit_file, usage_file))
        except OSError:
            continue
        if limit.isdigit() and int(limit) < 2**60:
            return max(int(limit) - int(usage), 0)
        return None
    return None
