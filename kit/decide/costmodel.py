"""Roofline cost model of one decode step, `T(B, q, L)`, and of the MTP draft.

Pure functions of a `ModelArch`, a `Hardware` and an `Efficiency`. Formulas (also in
docs/costmodel.md):

- bytes(B, q, L) = W + B * (L + q) * kv_token + B * 2 * S + [q > 1] * B * (q + 2) * S
  with W the weight bytes, kv_token the KV-cache bytes of one token over all full-attention
  layers, S the recurrent state of one sequence (hybrid models; read and written each step) and,
  during verification, one state snapshot written per verified token plus the accepted snapshot
  copied back into the state pool (read and write).
- flops(B, q, L) = 2 * N_active * B * q + 4 * B * q * L * n_attn * n_heads * head_dim
                   + 4 * B * q * n_linear * h_v * d_k * d_v
- T = max(bytes / (bw * eff.bw), flops / (peak * eff.flops)) + eff.overhead_s
- MTP draft (one extra layer plus the LM head per pass): the same roofline on those weights,
  `k + 1` passes per iteration: `k` draft steps and one draft extend over the accepted tokens
  (EAGLE-style engines such as SGLang run it to get the hidden state the next draft starts from).
- Prefill of one request of `I` tokens: flops(1, I, I / 2) / (peak * eff.flops), weights once.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.arch import ModelArch
from kit.errors import CostModelError


@dataclass(frozen=True)
class Hardware:
    """What the roofline needs of one accelerator (datasheet or measured figures)."""

    bandwidth_Bps: float
    flops_bf16: float
    memory_bytes: float
    name: str = "gpu"

    def __post_init__(self) -> None:
        if min(self.bandwidth_Bps, self.flops_bf16, self.memory_bytes) <= 0:
            raise CostModelError(f"hardware {self.name!r}: bandwidth, FLOP/s and memory must be positive")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where compute starts to bind (peak FLOP/s over bandwidth)."""
        return self.flops_bf16 / self.bandwidth_Bps


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet a real engine reaches, and a fixed cost per step.

    Defaults (one set for every model and GPU, not fitted to any published point):
    bw 0.80: decode GEMV kernels and a device copy reach 75-90% of datasheet HBM bandwidth;
    flops 0.50: bf16 GEMMs reach ~70% of peak on large shapes and less on the skinny
    (a few hundred rows) shapes of a decode step, plus attention and norms that run far below peak;
    overhead_s 1.5 ms: scheduler, sampling and graph launch per step in SGLang / vLLM with CUDA graphs.
    `calibrate` in kit.decide.profiler replaces them with figures fitted to a measured profile.
    """

    bw: float = 0.80
    flops: float = 0.50
    overhead_s: float = 1.5e-3
    source: str = "defaults"

    def __post_init__(self) -> None:
        if not (0 < self.bw <= 4 and 0 < self.flops <= 4):
            raise CostModelError(
                f"efficiency factors must be in (0, 4] (above 1 means the datasheet figure is too low), "
                f"got bw={self.bw}, flops={self.flops}"
            )
        if self.overhead_s < 0:
            raise CostModelError(f"fixed overhead per step must be >= 0, got {self.overhead_s}")


DEFAULT_EFFICIENCY = Efficiency()


@dataclass(frozen=True)
class StepShape:
    """Bytes per dtype element the step moves: weights, KV cache, recurrent state."""

    weight_bytes: float | None = None
    """Bytes of the target's weights; default: total parameters x model dtype."""
    kv_dtype_bytes: int | None = None
    ssm_dtype_bytes: int = 4


def weight_bytes(arch: ModelArch, shape: StepShape = StepShape(), tokens: int | None = None) -> float:
    """Weight bytes read once per step.

    For MoE models a step of `tokens` tokens reads each routed expert with probability
    1 - (1 - top_k / n_experts) ** tokens (uniform routing); `tokens=None` means all of them.
    """
    total, active = arch.param_counts()
    scale = 1.0 if shape.weight_bytes is None else shape.weight_bytes / (total * arch.dtype_bytes)
    if not arch.is_moe or tokens is None:
        return float(total * arch.dtype_bytes * scale)
    expert = 3 * arch.hidden_size * arch.moe_intermediate_size
    moe_layers = arch.num_layers - arch.dense_layers
    routed = moe_layers * expert * arch.num_experts
    touched = 1 - (1 - arch.experts_per_token / arch.num_experts) ** tokens
    return float((total - routed + routed * touched) * arch.dtype_bytes * scale)


def _check_step(B: int, q: int, L: float) -> None:
    if B < 1 or q < 1 or L < 0:
        raise CostModelError(f"step needs B >= 1, q >= 1, L >= 0; got B={B}, q={q}, L={L}")


def step_bytes(arch: ModelArch, B: int, q: int, L: float, shape: StepShape = StepShape()) -> float:
    """HBM bytes one decode / verify step moves (see the module docstring)."""
    _check_step(B, q, L)
    kv_tok = arch.kv_bytes_per_token(shape.kv_dtype_bytes)
    state = arch.state_bytes_per_seq(shape.ssm_dtype_bytes, arch.dtype_bytes)
    kv = B * L * kv_tok + B * q * kv_tok
    recurrent = B * 2 * state + (B * (q + 2) * state if q > 1 else 0)
    return weight_bytes(arch, shape, B * q) + kv + recurrent


def step_flops(arch: ModelArch, B: int, q: int, L: float) -> float:
    """FLOPs of one decode / verify step: linear layers, attention over L, recurrent update."""
    _check_step(B, q, L)
    _, active = arch.param_counts()
    tokens = B * q
    attn = 4 * tokens * L * arch.full_attention_layers * arch.num_heads * arch.head_dim
    lin = arch.linear
    recurrent = 4 * tokens * arch.linear_attention_layers * lin.ssm_elements if lin else 0
    return 2 * active * tokens + attn + recurrent


def roofline(bytes_: float, flops: float, hw: Hardware, eff: Efficiency) -> tuple[float, float]:
    """(memory time, compute time) in seconds, after the efficiency factors."""
    return bytes_ / (hw.bandwidth_Bps * eff.bw), flops / (hw.flops_bf16 * eff.flops)


def step_time(
    arch: ModelArch,
    hw: Hardware,
    B: int,
    q: int,
    L: float,
    eff: Efficiency = Efficiency(),
    shape: StepShape = StepShape(),
) -> float:
    """Seconds per step: max(memory time, compute time) + fixed overhead."""
    t_mem, t_cmp = roofline(step_bytes(arch, B, q, L, shape), step_flops(arch, B, q, L), hw, eff)
    return max(t_mem, t_cmp) + eff.overhead_s


def is_compute_bound(
    arch: ModelArch,
    hw: Hardware,
    B: int,
    q: int,
    L: float,
    eff: Efficiency = Efficiency(),
    shape: StepShape = StepShape(),
) -> bool:
    """True when the FLOPs term of the step outweighs the bytes term."""
    t_mem, t_cmp = roofline(step_bytes(arch, B, q, L, shape), step_flops(arch, B, q, L), hw, eff)
    return t_cmp > t_mem


def mtp_head_params(arch: ModelArch) -> int:
    """Parameters one MTP draft step reads: one decoder layer, the fusion projection, the LM head."""
    return arch.layer_params + 2 * arch.hidden_size**2 + arch.vocab_size * arch.hidden_size


def draft_weight_bytes(arch: ModelArch) -> float:
    """Extra weight memory of the MTP head(s) (the LM head and embeddings are shared)."""
    layers = max(arch.mtp_layers, 1)
    return float(layers * (arch.layer_params + 2 * arch.hidden_size**2) * arch.dtype_bytes)


def draft_time(
    arch: ModelArch,
    hw: Hardware,
    B: int,
    k: int,
    L: float,
    eff: Efficiency = Efficiency(),
    kv_dtype_bytes: int | None = None,
) -> float:
    """Seconds for the MTP draft at batch B: k draft steps plus one draft extend, each reading the
    head's weights and its KV over L (the extend runs on up to k + 1 tokens per sequence)."""
    if k < 1:
        raise CostModelError(f"draft length k must be >= 1, got {k}")
    per_layer_kv = arch.kv_bytes_per_token(kv_dtype_bytes) / max(arch.full_attention_layers, 1)
    head = mtp_head_params(arch)
    bytes_ = head * arch.dtype_bytes + B * L * per_layer_kv
    step = max(roofline(bytes_, 2 * head * B + 4 * B * L * arch.num_heads * arch.head_dim, hw, eff))
    q = k + 1
    extend = max(roofline(bytes_, (2 * head + 4 * L * arch.num_heads * arch.head_dim) * B * q, hw, eff))
    return k * step + extend


def prefill_time(
    arch: ModelArch,
    hw: Hardware,
    input_len: int,
    eff: Efficiency = Efficiency(),
    shape: StepShape = StepShape(),
) -> float:
    """Seconds to prefill one request of `input_len` tokens (attention over I/2 on average)."""
    if input_len < 1:
        return 0.0
    flops = step_flops(arch, 1, input_len, input_len / 2)
    bytes_ = weight_bytes(arch, shape, input_len) + input_len * arch.kv_bytes_per_token(shape.kv_dtype_bytes)
    t_mem, t_cmp = roofline(bytes_, flops, hw, eff)
    return max(t_mem, t_cmp)
