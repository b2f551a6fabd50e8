"""How many sequences fit on one GPU: weights, KV cache, recurrent state and speculative buffers.

SGLang's `--mem-fraction-static` is the share of GPU memory for weights plus the KV / state pools;
what is left after the weights is split between sequences. One sequence of context `L` costs
`L x kv_bytes_per_token + state_bytes_per_seq`; with speculation it also costs the verification
buffers: for hybrid linear-attention models SGLang keeps the intermediate recurrent state of every
draft token (about `state_bytes_per_seq x num_draft_tokens` per running request), each draft token
needs a KV slot, and built-in MTP layers keep their own KV cache over the context.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.arch import ModelArch
from kit.artifacts.probe_memory import MemoryPlan
from kit.errors import CostModelError

__all__ = ["MemoryPlan", "RunningCapacity", "memory_plan", "running_capacity"]


def _kv_per_gpu(arch: ModelArch, kv_dtype_bytes: int | None, tp: int) -> int:
    """KV bytes per token on one GPU: GQA heads split over TP (never below one); MLA latent replicated."""
    total = arch.kv_bytes_per_token(kv_dtype_bytes)
    if arch.is_mla or tp == 1:
        return total
    heads_per_gpu = max(1, -(-arch.num_kv_heads // tp))
    return total * heads_per_gpu // arch.num_kv_heads


def _mtp_kv_per_token(arch: ModelArch, kv_dtype_bytes: int | None) -> int:
    """KV bytes per token of the built-in MTP layers (full attention with the target's shape)."""
    full = max(arch.full_attention_layers, 1)
    return arch.kv_bytes_per_token(kv_dtype_bytes) // full * arch.mtp_layers


def memory_plan(
    arch: ModelArch,
    gpu_mem_bytes: int,
    mem_fraction: float,
    context_len: int,
    weight_bytes: int | None = None,
    spec_draft_tokens: int = 0,
    draft_weight_bytes: int = 0,
    kv_dtype_bytes: int | None = None,
    ssm_dtype_bytes: int = 4,
    tp_size: int = 1,
) -> MemoryPlan:
    """Plan one GPU's memory for `arch`; `weight_bytes` defaults to the config's parameter count x dtype.

    `weight_bytes` and `draft_weight_bytes` are for the whole checkpoint; they are divided by
    `tp_size`, as are GQA KV heads and the recurrent state's heads.
    """
    if not 0 < mem_fraction < 1 or gpu_mem_bytes <= 0 or context_len <= 0 or tp_size < 1:
        raise CostModelError(
            f"memory_plan: need 0 < mem_fraction < 1, positive memory, context and tp_size "
            f"(got {mem_fraction}, {gpu_mem_bytes}, {context_len}, {tp_size})"
        )
    if weight_bytes is None:
        weight_bytes = arch.param_counts()[0] * arch.dtype_bytes
    kv = _kv_per_gpu(arch, kv_dtype_bytes, tp_size)
    state = arch.state_bytes_per_seq(ssm_dtype_bytes) // tp_size
    spec = 0
    if spec_draft_tokens:
        mtp_kv = _mtp_kv_per_token(arch, kv_dtype_bytes) // (1 if arch.is_mla else tp_size)
        spec = state * spec_draft_tokens + kv * spec_draft_tokens + mtp_kv * context_len
    return MemoryPlan(
        gpu_mem_bytes=int(gpu_mem_bytes),
        mem_fraction=mem_fraction,
        context_len=context_len,
        tp_size=tp_size,
        weight_bytes=int(weight_bytes) // tp_size,
        draft_weight_bytes=int(draft_weight_bytes) // tp_size,
        kv_bytes_per_token=kv,
        state_bytes_per_seq=state,
        spec_draft_tokens=spec_draft_tokens,
        spec_buffer_bytes_per_seq=spec,
    )


# ---- what one server of an arm runs at once ------------------------------------
CUDA_CONTEXT_BYTES = int(1.3 * 2**30)
"""GPU memory gone before the engine plans its pools (the CUDA context): SGLang sizes them as a
share of the memory free when it starts, 1.18 GiB under the total on an H100 80GB, 1.31 on the
H200 (2026-12-03 / 12-06)."""
RUNNING_CAP_MARGIN = 0.9
"""The share of the plan's sequences an arm is given, for what the plan does not see (the engine's
own buffers, its activations at the top level): on the H200 the plan's 151 sequences for the
Qwen3.6-27B shape's MTP k=1 would have asked 64 GiB of the 61.65 that server had."""
RUNNING_CAP_STEP = 8
"""The figure is rounded down to a multiple of this (CUDA-graph batch sizes), never below its own
value under 8."""


@dataclass(frozen=True)
class RunningCapacity:
    """The requests one server of an arm runs at once, from memory: `running`, the one figure that
    decision.json's `mem_max_running`, the sweep's running caps and the forecast's capacity state;
    `plan`, what it rests on."""

    k: int
    """Draft length (0: plain decoding)."""
    plan: MemoryPlan

    @property
    def planned(self) -> int:
        """The sequences the plan fits, before the margin."""
        return self.plan.max_seqs_spec if self.k else self.plan.max_seqs_plain

    @property
    def running(self) -> int:
        """`planned` x RUNNING_CAP_MARGIN, rounded down to a multiple of RUNNING_CAP_STEP."""
        fits = int(RUNNING_CAP_MARGIN * self.planned)
        return max(fits // RUNNING_CAP_STEP * RUNNING_CAP_STEP, min(fits, RUNNING_CAP_STEP))


def running_capacity(
    arch: ModelArch,
    gpu_mem_bytes: int,
    mem_fraction: float,
    context_len: int,
    k: int = 0,
    *,
    weight_bytes: int | None = None,
    draft_weight_bytes: int = 0,
    kv_dtype_bytes: int | None = None,
    ssm_dtype_bytes: int = 4,
    tp_size: int = 1,
    reserved_bytes: int = CUDA_CONTEXT_BYTES,
) -> RunningCapacity:
    """The requests one server of the arm with draft length `k` runs at once on a card of
    `gpu_mem_bytes`: the memory plan of what the engine loads (`weight_bytes`, whole checkpoint;
    default `ModelArch.resident_weight_bytes`, with the embedding and a vision tower; and the
    draft's, under speculation) out of what is free at its start (the total less `reserved_bytes`,
    the CUDA context; 0 on a CPU), each running request holding its KV over `context_len`, its
    recurrent state and, under speculation, one more per draft token (`memory_plan`)."""
    plan = memory_plan(
        arch,
        max(int(gpu_mem_bytes) - reserved_bytes, 1),
        mem_fraction,
        context_len,
        weight_bytes=arch.resident_weight_bytes() if weight_bytes is None else weight_bytes,
        spec_draft_tokens=k + 1 if k else 0,
        draft_weight_bytes=draft_weight_bytes if k else 0,
        kv_dtype_bytes=kv_dtype_bytes,
        ssm_dtype_bytes=ssm_dtype_bytes,
        tp_size=tp_size,
    )
    return RunningCapacity(k, plan)
