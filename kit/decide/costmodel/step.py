"""Cost of one decode / verify step, `T(B, q, L)`, as a sum of physically named terms.

Pure functions of a `Scenario` (kit.decide.costmodel.scenario: the model, its `Hardware`, the
`Efficiency` of its kernels, the workload's bytes per element and the tensor-parallel degree `tp`,
one replica's step running on `tp` GPUs) and the step's point: `B` sequences verify `q` tokens each
(1 plain, `k + 1` speculative) over a context of `L`; `n = B q` tokens pass through the weights.
Per GPU:

- weights_s   = W(n) / (tp bw e_bw)          W(n): dense weights + LM head + the routed experts the
                n tokens touch, E (1 - (1 - top_k / E)^n) per MoE layer; bytes per weight from the
                checkpoint (FP8 = 1, bf16 = 2)
- linear_s    = 2 N_act n / (tp peak e_gemm(n)),   e_gemm(n) = e_flops n / (n + n_half)
                (routed experts see n top_k / touched tokens each, so their GEMMs run less efficiently)
- kv_s        = B (L + q) kv_tok / (shards bw e_bw v)   v = verify_kv_bw when q > 1, else 1;
                shards = min(tp, kv_heads); 1 for MLA, whose latent is replicated on every rank
- attention_s = 2 n (L + q) n_attn H (d_qk + d_v) / (tp peak e_attn(r)),  e_attn(r) = e_attn r / (r + r_half)
                with r = query rows per KV head = (H / H_kv) q (GQA) or H q (MLA, absorbed: d_qk =
                kv_lora_rank + rope, d_v = kv_lora_rank); standard attention d_qk = d_v = head_dim
- state_s     = (2 B S + [q > 1] B (q + 2) S) / (tp bw e_bw)   recurrent state of hybrid models,
                with one snapshot per verified token and the accepted one copied back
- fixed_s     = overhead (scheduler, sampling) + n_layers layer_s (launch gaps, small kernels)
- experts_s / expert_linear_s: the routed experts apart from the dense weights (shared experts are
                dense): the touched experts' bytes, and their grouped GEMMs over whole tiles of
                `moe_tile_tokens` rows per active expert (few tokens per expert waste most of a tile)
- expert_fixed_s = n_moe_layers (moe_layer_s + E_touched expert_s)   (both 0 by default: no
                measurement prices a fused-MoE layer beyond its bytes and padded math)
- comm_s      = [tp > 1] 2 n_layers (allreduce_s + 2 (tp - 1) / tp n h 2 / link_bw)

A kernel's memory and compute times join through a soft maximum `(m^p + c^p)^(1/p)` (p =
`Efficiency.sharpness`: how well kernels overlap loads with math), so extra verified tokens always
cost a little and never jump at a ridge:

    T = smax(weights, linear) + smax(experts, expert_linear) + smax(kv, attention)
        + smax(state, recurrent) + fixed + comm + expert_fixed

Draft costs per kind are in kit.decide.costmodel.drafts; validation against published tables in
docs/costmodel.md. `MODEL_ERROR` is the error band the validation supports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.arch import ModelArch
from kit.decide.costmodel.hardware import Efficiency, Hardware
from kit.decide.costmodel.scenario import PLAIN_SHAPE, Scenario, StepShape
from kit.errors import CostModelError

MODEL_ERROR = 0.25
"""Relative error of a predicted tokens/s the validation supports (docs/costmodel.md): two arms whose
predictions differ by less than this are not told apart by the model."""


@dataclass(frozen=True)
class StepTerms:
    """Seconds of each physical term of one step on one GPU (see the module docstring)."""

    weights_s: float
    linear_s: float
    experts_s: float
    expert_linear_s: float
    kv_s: float
    attention_s: float
    state_s: float
    recurrent_s: float
    fixed_s: float
    comm_s: float
    expert_fixed_s: float = 0.0
    sharpness: float = 3.0

    @property
    def memory_s(self) -> float:
        return self.weights_s + self.experts_s + self.kv_s + self.state_s

    @property
    def compute_s(self) -> float:
        return self.linear_s + self.expert_linear_s + self.attention_s + self.recurrent_s

    @property
    def total_s(self) -> float:
        p = self.sharpness
        kernels = (
            smax(self.weights_s, self.linear_s, p)
            + smax(self.experts_s, self.expert_linear_s, p)
            + smax(self.kv_s, self.attention_s, p)
            + smax(self.state_s, self.recurrent_s, p)
        )
        return kernels + self.fixed_s + self.comm_s + self.expert_fixed_s


def smax(m: float, c: float, p: float = 3.0) -> float:
    """Soft maximum (m^p + c^p)^(1/p) of a kernel's memory and compute times."""
    return (m**p + c**p) ** (1 / p)


def _check_step(B: int, q: int, L: float, tp: int = 1) -> None:
    if B < 1 or q < 1 or L < 0 or tp < 1:
        raise CostModelError(f"step needs B >= 1, q >= 1, L >= 0, tp >= 1; got B={B}, q={q}, L={L}, tp={tp}")


def param_split(arch: ModelArch) -> tuple[float, float, float, float]:
    """(dense layer params, routed expert params, routed params active per token, LM head params)."""
    total, _ = arch.param_counts()
    emb = arch.vocab_size * arch.hidden_size
    layers = total - emb * (1 if arch.tie_embeddings else 2)
    routed = routed_active = 0.0
    if arch.is_moe:
        expert = 3 * arch.hidden_size * arch.moe_intermediate_size
        moe_layers = arch.num_layers - arch.dense_layers
        routed = moe_layers * expert * arch.num_experts
        routed_active = moe_layers * expert * arch.experts_per_token
    return layers - routed, routed, routed_active, emb


def experts_touched(arch: ModelArch, tokens: float) -> float:
    """Fraction of routed experts a step of `tokens` tokens reads: 1 - (1 - top_k / E)^tokens."""
    if not arch.is_moe:
        return 0.0
    return 1 - (1 - arch.experts_per_token / arch.num_experts) ** tokens


def weight_bytes(arch: ModelArch, shape: StepShape = PLAIN_SHAPE, tokens: float | None = None) -> float:
    """Weight bytes a step of `tokens` tokens reads (all of them when `tokens` is None)."""
    dense, routed, _, head = param_split(arch)
    touched = 1.0 if tokens is None else experts_touched(arch, tokens)
    return float((dense + head + routed * touched) * shape.per_weight(arch))


def attention_dims(arch: ModelArch) -> tuple[int, int, int]:
    """(d_qk, d_v, query heads per KV head) of the decode attention kernel (MLA: absorbed form)."""
    if arch.is_mla:
        rope = arch.qk_rope_head_dim or 64
        return (arch.kv_lora_rank or 0) + rope, arch.kv_lora_rank or 0, arch.num_heads
    return arch.head_dim, arch.head_dim, max(arch.num_heads // max(arch.num_kv_heads, 1), 1)


def attention_flops(arch: ModelArch, tokens: float, L: float) -> float:
    """FLOPs of attention for `tokens` query tokens over `L` positions: 2 n L n_attn H (d_qk + d_v)."""
    d_qk, d_v, _ = attention_dims(arch)
    return 2 * tokens * L * arch.full_attention_layers * arch.num_heads * (d_qk + d_v)


def _tile_padding(tokens_per_expert: float, tile: float) -> float:
    """Rows a grouped GEMM computes per row it needs: each active expert's tokens are padded up to
    whole tiles of `tile` rows (fused-MoE kernels' BLOCK_SIZE_M), so few tokens per expert waste most
    of a tile's math (1 when `tile` is 0)."""
    if tile <= 0 or tokens_per_expert <= 0:
        return 1.0
    return math.ceil(tokens_per_expert / tile) * tile / tokens_per_expert


def _efficiency(peak_fraction: float, size: float, half: float) -> float:
    return peak_fraction * size / (size + half)


def step_terms(s: Scenario, B: int, q: int, L: float) -> StepTerms:
    """Every term of one step of `B` sequences verifying `q` tokens each over a context of `L` (see
    the module docstring), per GPU of the scenario's `tp`-way replica."""
    arch, hw, eff, shape, tp = s.arch, s.hw, s.eff, s.shape, s.tp
    _check_step(B, q, L, tp)
    n = B * q
    bw, wb = hw.bandwidth_Bps * eff.bw, shape.per_weight(arch)
    peak = hw.peak(wb)
    e_flops = hw.gemm_efficiency or eff.flops
    dense, routed, routed_active, head = param_split(arch)
    touched = experts_touched(arch, n)
    per_expert = n * arch.experts_per_token / max(touched * arch.num_experts, 1e-9) if arch.is_moe else 0
    padding = _tile_padding(per_expert, eff.moe_tile_tokens)
    _, _, group = attention_dims(arch)
    shards = 1 if arch.is_mla else min(tp, max(arch.num_kv_heads, 1))
    kv_tok = arch.kv_bytes_per_token(shape.kv_dtype_bytes)
    state = arch.state_bytes_per_seq(shape.ssm_dtype_bytes, arch.dtype_bytes)
    lin = arch.linear
    return StepTerms(
        weights_s=(dense + head) * wb / (tp * bw),
        linear_s=2 * (dense + head) * n / (tp * peak * _efficiency(e_flops, n, eff.gemm_half_tokens)),
        experts_s=routed * touched * wb / (tp * bw),
        expert_linear_s=(
            2
            * routed_active
            * n
            * padding
            / (tp * peak * _efficiency(e_flops, per_expert, eff.gemm_half_tokens))
            if arch.is_moe
            else 0.0
        ),
        kv_s=B * (L + q) * kv_tok / (shards * bw * (eff.verify_kv_bw if q > 1 else 1.0)),
        attention_s=attention_flops(arch, n, L + q)
        / (tp * hw.flops_bf16 * _efficiency(eff.attn_flops, group * q, eff.attn_half_rows)),
        state_s=(2 * B * state + (B * (q + 2) * state if q > 1 else 0)) / (tp * bw),
        recurrent_s=(
            4 * n * arch.linear_attention_layers * lin.ssm_elements / (tp * hw.flops_bf16 * eff.attn_flops)
            if lin
            else 0.0
        ),
        fixed_s=eff.overhead_s + arch.num_layers * eff.layer_s,
        expert_fixed_s=(arch.num_layers - arch.dense_layers)
        * (eff.moe_layer_s + touched * arch.num_experts * eff.expert_s)
        if arch.is_moe
        else 0.0,
        comm_s=allreduce_time(arch.num_layers, n, arch.hidden_size, hw, eff, tp),
        sharpness=eff.sharpness,
    )


def allreduce_time(layers: int, tokens: float, hidden: int, hw: Hardware, eff: Efficiency, tp: int) -> float:
    """Two all-reduces per layer under tensor parallelism: latency plus ring bytes over the link."""
    if tp == 1:
        return 0.0
    ring = 2 * (tp - 1) / tp * tokens * hidden * 2 / hw.link_Bps if hw.link_Bps else 0.0
    return 2 * layers * (eff.allreduce_s + ring)


def step_time(s: Scenario, B: int, q: int, L: float) -> float:
    """Seconds per step: the sum of the step's terms (module docstring)."""
    return step_terms(s, B, q, L).total_s


def is_compute_bound(s: Scenario, B: int, q: int, L: float) -> bool:
    """True when the step's compute terms outweigh its memory terms."""
    t = step_terms(s, B, q, L)
    return t.compute_s > t.memory_s


def step_bytes(s: Scenario, B: int, q: int, L: float) -> float:
    """HBM bytes of one step on one GPU: weights touched, KV read and written, recurrent state."""
    arch, shape = s.arch, s.shape
    _check_step(B, q, L)
    state = arch.state_bytes_per_seq(shape.ssm_dtype_bytes, arch.dtype_bytes)
    kv = B * (L + q) * arch.kv_bytes_per_token(shape.kv_dtype_bytes)
    return weight_bytes(arch, shape, B * q) + kv + 2 * B * state + (B * (q + 2) * state if q > 1 else 0)


def prefill_time(s: Scenario) -> float:
    """Seconds to prefill one request of the workload's `input_len` tokens (attention over I/2 on
    average), no fixed cost."""
    input_len = s.work.input_len
    if input_len < 1:
        return 0.0
    t = step_terms(s, 1, input_len, input_len / 2)
    return t.total_s - t.fixed_s
