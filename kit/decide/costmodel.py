"""Cost of one decode / verify step, `T(B, q, L)`, as a sum of physically named terms.

Pure functions of a `ModelArch`, a `Hardware`, an `Efficiency` and the tensor-parallel degree `tp`
(one replica's step runs on `tp` GPUs). `B` sequences verify `q` tokens each (1 plain, `k + 1`
speculative) over a context of `L`; `n = B q` tokens pass through the weights. Per GPU:

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
- expert_fixed_s = n_moe_layers E_touched expert_s   (fused-MoE cost per active expert, added)
- comm_s      = [tp > 1] 2 n_layers (allreduce_s + 2 (tp - 1) / tp n h 2 / link_bw)

A kernel's memory and compute times join through a soft maximum `(m^p + c^p)^(1/p)` (p =
`Efficiency.sharpness`: how well kernels overlap loads with math), so extra verified tokens always
cost a little and never jump at a ridge:

    T = smax(weights, linear) + smax(experts, expert_linear) + smax(kv, attention)
        + smax(state, recurrent) + fixed + comm + expert_fixed

Draft costs per kind are in kit.decide.drafts; validation against published tables in
docs/costmodel.md. `MODEL_ERROR` is the error band the validation supports.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kit.arch import ModelArch
from kit.errors import CostModelError

MODEL_ERROR = 0.25
"""Relative error of a predicted tokens/s the validation supports (docs/costmodel.md): two arms whose
predictions differ by less than this are not told apart by the model."""


@dataclass(frozen=True)
class Hardware:
    """What the step model needs of one accelerator (datasheet or measured figures)."""

    bandwidth_Bps: float
    flops_bf16: float
    memory_bytes: float
    name: str = "gpu"
    link_Bps: float = 0.0
    """Interconnect bandwidth per GPU and direction for tensor-parallel all-reduce (0: not modelled)."""
    flops_fp8: float | None = None
    """Dense FP8 FLOP/s; default twice the bf16 figure (Hopper, Blackwell)."""
    gemm_efficiency: float | None = None
    """Fraction of the datasheet FLOP/s that large GEMMs reach on this GPU class; None: `Efficiency.flops`
    (calibrated on the H200, whose 700 W SXM parts clock down under dense tensor load). Consumer and
    PCIe cards, whose datasheet peak is already a sustained clock, reach ~0.9 in cuBLAS."""

    def __post_init__(self) -> None:
        if (
            min(self.bandwidth_Bps, self.flops_bf16, self.memory_bytes) <= 0
            or self.link_Bps < 0
            or not (self.gemm_efficiency is None or 0 < self.gemm_efficiency <= 4)
        ):
            raise CostModelError(f"hardware {self.name!r}: bandwidth, FLOP/s and memory must be positive")

    def peak(self, weight_dtype_bytes: float) -> float:
        """FLOP/s of the GEMMs: FP8 rate for 1-byte weights, else bf16."""
        return (self.flops_fp8 or 2 * self.flops_bf16) if weight_dtype_bytes <= 1 else self.flops_bf16


@dataclass(frozen=True)
class Efficiency:
    """How far real kernels get from the datasheet, and the fixed costs of a step.

    Defaults (docs/costmodel.md, "Where the constants come from"): the kernel factors (bw to
    sharpness) are `calibrate_many` of the H200 profiles of Qwen3-32B and Llama-3.1-8B
    (docs/h200/); the fixed costs (overhead_s to spec_seq_s) are fitted on two of the five published
    tables (SGLang's GB300 cookbook and MagicDec); the other three are held out. `calibrate`
    (kit.decide.profiler) and `fit_to_sweep` (kit.decide.fit) refit them for a device or an engine.
    """

    bw: float = 0.848
    """Fraction of datasheet HBM bandwidth that streamed weight and KV reads reach."""
    flops: float = 0.594
    """Fraction of peak FLOP/s that large GEMMs reach."""
    gemm_half_tokens: float = 0.0
    """Tokens per GEMM at which it reaches half of `flops` (0: flat; the H200 profiles put it there)."""
    attn_flops: float = 0.342
    """Fraction of peak that attention reaches with many query rows per KV head."""
    attn_half_rows: float = 10.1
    """Query rows per KV head (group x q) at which attention reaches half of `attn_flops`."""
    sharpness: float = 3.0
    """p of the soft maximum joining a kernel's memory and compute times (large p: a hard max)."""
    overhead_s: float = 1.28e-4
    """Per step: scheduler, sampling, graph launch."""
    layer_s: float = 0.0
    """Per decoder layer per forward pass: launch gaps and the small kernels (norms, rope, activation)."""
    allreduce_s: float = 1e-5
    """Latency of one tensor-parallel all-reduce (two per layer when tp > 1)."""
    spec_seq_s: float = 0.0
    """Host bookkeeping per running sequence in a speculative iteration (accept / reject, KV slots),
    which engines do not overlap with the GPU as they do a plain step's scheduling."""
    ngram_seq_s: float = 5e-6
    """Host time of an n-gram (prompt lookup) proposal per sequence and iteration (not fitted on any
    published table: none measures n-gram; the CPU sweep refits it, docs/cpu_validation.md)."""
    verify_kv_bw: float = 0.598
    """Fraction of the decode kernels' KV bandwidth that attention reaches when each sequence brings
    q > 1 query tokens (verify): engines send those to prefill-type kernels, which do not split a
    long context across thread blocks the way decode kernels do."""
    expert_s: float = 2e-6
    """Per routed expert a step touches, per MoE layer: what the fused-MoE kernels pay for each active
    expert beyond its weight bytes (its own padded token tile, a partial wave of thread blocks, the
    routing metadata), added to the expert term rather than hidden under its soft maximum."""
    draft_pass_s: float = 2.32e-4
    """Fixed cost of one draft forward pass beyond its kernels' bytes and FLOPs: the launches, the
    sampling of the drafted token and the sync before the next pass (a chain of k drafts runs k
    passes, one after the other)."""
    source: str = "defaults"

    def __post_init__(self) -> None:
        if not (
            0 < self.bw <= 4
            and 0 < self.flops <= 4
            and 0 < self.attn_flops <= 4
            and 0 < self.verify_kv_bw <= 1
            and self.sharpness >= 1
        ):
            raise CostModelError(
                f"efficiency factors must be in (0, 4] (above 1 means the datasheet figure is too low), "
                f"got bw={self.bw}, flops={self.flops}, attn_flops={self.attn_flops}"
            )
        fixed = (
            self.overhead_s,
            self.layer_s,
            self.allreduce_s,
            self.spec_seq_s,
            self.ngram_seq_s,
            self.draft_pass_s,
            self.expert_s,
        )
        if min(*fixed, self.gemm_half_tokens, self.attn_half_rows) < 0:
            raise CostModelError("fixed costs and half-efficiency points must be >= 0")

    def as_dict(self) -> dict:
        """JSON-ready copy."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_EFFICIENCY = Efficiency()


@dataclass(frozen=True)
class StepShape:
    """Bytes per element the step moves: weights, KV cache, recurrent state."""

    weight_bytes: float | None = None
    """Bytes of the target's weights; default: parameters x `weight_dtype_bytes`."""
    kv_dtype_bytes: int | None = None
    ssm_dtype_bytes: int = 4
    weight_dtype_bytes: float | None = None
    """Bytes per weight (1: FP8 checkpoint); default the config's dtype."""

    def per_weight(self, arch: ModelArch) -> float:
        """Bytes one weight occupies in this checkpoint."""
        if self.weight_bytes is not None:
            return self.weight_bytes / arch.param_counts()[0]
        return self.weight_dtype_bytes or arch.dtype_bytes


PLAIN_SHAPE = StepShape()


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


def weight_bytes(arch: ModelArch, shape: StepShape = StepShape(), tokens: float | None = None) -> float:
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


def _efficiency(peak_fraction: float, size: float, half: float) -> float:
    return peak_fraction * size / (size + half)


def step_terms(
    arch: ModelArch,
    hw: Hardware,
    B: int,
    q: int,
    L: float,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    shape: StepShape = StepShape(),
    tp: int = 1,
) -> StepTerms:
    """Every term of one step (see the module docstring), per GPU of a `tp`-way replica."""
    _check_step(B, q, L, tp)
    n = B * q
    bw, wb = hw.bandwidth_Bps * eff.bw, shape.per_weight(arch)
    peak = hw.peak(wb)
    e_flops = hw.gemm_efficiency or eff.flops
    dense, routed, routed_active, head = param_split(arch)
    touched = experts_touched(arch, n)
    per_expert = n * arch.experts_per_token / max(touched * arch.num_experts, 1e-9) if arch.is_moe else 0
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
            2 * routed_active * n / (tp * peak * _efficiency(e_flops, per_expert, eff.gemm_half_tokens))
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
        expert_fixed_s=(arch.num_layers - arch.dense_layers) * touched * arch.num_experts * eff.expert_s
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


def step_time(
    arch: ModelArch,
    hw: Hardware,
    B: int,
    q: int,
    L: float,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    shape: StepShape = StepShape(),
    tp: int = 1,
) -> float:
    """Seconds per step: the sum of the step's terms (module docstring)."""
    return step_terms(arch, hw, B, q, L, eff, shape, tp).total_s


def is_compute_bound(
    arch: ModelArch,
    hw: Hardware,
    B: int,
    q: int,
    L: float,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    shape: StepShape = StepShape(),
    tp: int = 1,
) -> bool:
    """True when the step's compute terms outweigh its memory terms."""
    t = step_terms(arch, hw, B, q, L, eff, shape, tp)
    return t.compute_s > t.memory_s


def step_bytes(arch: ModelArch, B: int, q: int, L: float, shape: StepShape = StepShape()) -> float:
    """HBM bytes of one step on one GPU: weights touched, KV read and written, recurrent state."""
    _check_step(B, q, L)
    state = arch.state_bytes_per_seq(shape.ssm_dtype_bytes, arch.dtype_bytes)
    kv = B * (L + q) * arch.kv_bytes_per_token(shape.kv_dtype_bytes)
    return weight_bytes(arch, shape, B * q) + kv + 2 * B * state + (B * (q + 2) * state if q > 1 else 0)


def prefill_time(
    arch: ModelArch,
    hw: Hardware,
    input_len: int,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    shape: StepShape = StepShape(),
    tp: int = 1,
) -> float:
    """Seconds to prefill one request of `input_len` tokens (attention over I/2 on average), no fixed cost."""
    if input_len < 1:
        return 0.0
    t = step_terms(arch, hw, 1, input_len, input_len / 2, eff, shape, tp)
    return t.total_s - t.fixed_s
