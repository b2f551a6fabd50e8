"""How many sequences fit on one GPU: weights, KV cache, recurrent state and speculative buffers.

SGLang's `--mem-fraction-static` is the share of GPU memory for weights plus the KV / state pools;
what is left after the weights is split between sequences. One sequence of context `L` costs
`L x kv_bytes_per_token + state_bytes_per_seq`; with speculation it also costs the verification
buffers: for hybrid linear-attention models SGLang keeps the intermediate recurrent state of every
draft token (about `state_bytes_per_seq x num_draft_tokens` per running request), each draft token
needs a KV slot, and built-in MTP layers keep their own KV cache over the context.
"""

from __future__ import annotations

from kit.arch import ModelArch
from kit.artifacts.probe_memory import MemoryPlan
from kit.errors import CostModelError

__all__ = ["MemoryPlan", "memory_plan"]


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

