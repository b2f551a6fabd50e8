"""Shape-faithful decode step of a serving engine, timed without Hugging Face modeling overheads.

The `hf` profiler backend times `transformers` modeling code, whose DynamicCache concatenates the
whole KV cache every step and whose SDPA path expands GQA heads: at large B x L that measures
copies, not a serving engine. This backend builds what an engine's decode step does from a
`ModelArch`, with random weights (timing does not depend on their values):

- per layer: RMSNorm (torch ops), fused QKV projection (query doubled when `attn_output_gate`,
  the gate applied as a sigmoid before the O projection), attention, O projection, RMSNorm and a
  gated MLP (fused gate/up, down); residual adds;
- a preallocated KV cache `[B, kv_heads, L + q_max, head_dim]` per full-attention layer; a step
  writes its `q` new K/V at positions `L..L+q` (slice assignment, no concatenation) and attends
  over the first `L + q` positions with `scaled_dot_product_attention`, the query heads of each
  KV group packed into rows (`[B, kv_heads, group * q, head_dim]`, as FlashInfer's and FA3's
  GQA kernels do), so K/V are read once per KV head, without a mask: the flash kernel takes the
  `q` tokens natively. The causal triangle among the `q` new tokens (a verify kernel masks it
  in-register at no cost; `q^2` of `q (L + q)` scores) is left out, because PyTorch routes any
  multi-token mask to slower kernels that no serving engine uses (docs/lab/h200/README.md has the
  measurement): the step is faithful in time, not in the values of those few scores;
- the LM head on `B * q` rows with the real vocabulary.

Approximations (details in docs/costmodel.md, "Two backends"): no embedding gather, RoPE, q/k
norms or sampling; Gated DeltaNet layers are their projections plus a per-token fp32 state update
and read of the right size; MoE layers run only the active experts; MLA models are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import pandas as pd
import torch
import torch.nn.functional as F

from kit.arch import ModelArch, arch_from_config
from kit.decide.profile.steptimer import (
    config_hash,
    depth_scaled_rows,
    lower_depth,
    time_cuda_graph,
    time_eager,
)
from kit.errors import CostModelError

CPU_BUDGET_BYTES = 4 * 2**30
GPU_BUDGET_FRACTION = 0.6


class TensorOptions(TypedDict):
    """Where and in what type a weight is made: the keyword arguments of torch's factories."""

    device: str
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class MlpWeights:
    """A gated MLP: fused gate/up and down; for a MoE layer the active experts fused into one, and
    the router (None: a dense layer) with the experts it picks per token."""

    gate_up: torch.Tensor
    down: torch.Tensor
    router: torch.Tensor | None
    top_k: int


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """One layer's random weights, as `decode_step` reads them."""

    kind: str
    """full (attention) or linear (Gated DeltaNet)."""
    w_in: torch.Tensor
    """The mixer's fused input projection: QKV (and the output gate) of attention, or DeltaNet's."""
    w_out: torch.Tensor
    """Its output projection (attention's O)."""
    mlp: MlpWeights
    norm1: torch.Tensor
    norm2: torch.Tensor


@dataclass
class SyntheticModel:
    """Random weights of the first `n` layers of a model, laid out as an engine keeps them."""

    arch: ModelArch
    layers: list[LayerWeights]
    lm_head: Any
    final_norm: Any
    device: str
    dtype: Any
    buffers: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def dtype_bytes(self) -> int:
        return torch.tensor([], dtype=self.dtype).element_size()


def _rand(*shape: int, like: TensorOptions) -> Any:
    return torch.randn(*shape, **like) * shape[-1] ** -0.5


def _attention_weights(a: ModelArch, opt: TensorOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """(QKV, O) of full attention."""
    q_out = a.num_heads * a.head_dim * (2 if a.attn_output_gate else 1)
    qkv = q_out + 2 * a.num_kv_heads * a.head_dim
    return _rand(qkv, a.hidden_size, like=opt), _rand(a.hidden_size, a.num_heads * a.head_dim, like=opt)


def _linear_weights(a: ModelArch, opt: TensorOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """(in, out) projections of a Gated DeltaNet layer."""
    la = a.linear
    assert la is not None
    key_dim, value_dim = la.num_k_heads * la.k_head_dim, la.num_v_heads * la.v_head_dim
    return (
        _rand(2 * key_dim + 2 * value_dim + 2 * la.num_v_heads, a.hidden_size, like=opt),
        _rand(a.hidden_size, value_dim, like=opt),
    )


def _mlp_weights(a: ModelArch, layer: int, opt: TensorOptions) -> MlpWeights:
    """Gated MLP; for MoE layers the active experts (top-k + shared) fused into one, plus the router."""
    inter, router = a.intermediate_size, None
    if a.is_moe and layer >= a.dense_layers:
        inter = (a.experts_per_token + a.shared_experts) * a.moe_intermediate_size
        router = _rand(a.num_experts, a.hidden_size, like=opt)
    return MlpWeights(
        _rand(2 * inter, a.hidden_size, like=opt),
        _rand(a.hidden_size, inter, like=opt),
        router,
        a.experts_per_token,
    )


def build_synthetic(arch: ModelArch, n_layers: int, device: str, dtype: Any) -> SyntheticModel:
    """Random weights for the first `n_layers` layers of `arch` on `device` (MLA is refused)."""
    if arch.is_mla:
        raise CostModelError("the synthetic profiler does not model MLA attention; use backend='hf'")
    opt = TensorOptions(device=device, dtype=dtype)
    layers = []
    for i, kind in enumerate(arch.layer_types[:n_layers]):
        linear = kind == "linear_attention"
        w_in, w_out = _linear_weights(arch, opt) if linear else _attention_weights(arch, opt)
        mlp = _mlp_weights(arch, i, opt)
        norm1, norm2 = torch.ones(arch.hidden_size, **opt), torch.ones(arch.hidden_size, **opt)
        layers.append(LayerWeights("linear" if linear else "full", w_in, w_out, mlp, norm1, norm2))
    return SyntheticModel(
        arch,
        layers,
        _rand(arch.vocab_size, arch.hidden_size, like=opt),
        torch.ones(arch.hidden_size, **opt),
        device,
        dtype,
    )


def point_bytes(arch: ModelArch, n_layers: int, B: int, q: int, L: int, dtype_bytes: int) -> dict[str, int]:
    """Device bytes one grid point allocates besides the weights: KV, recurrent state, activations."""
    types = arch.layer_types[:n_layers]
    n_full = sum(t == "full_attention" for t in types)
    kv = n_full * 2 * B * arch.num_kv_heads * (L + q) * arch.head_dim * dtype_bytes
    state = (n_layers - n_full) * B * arch.linear.ssm_elements * 4 if arch.linear else 0
    widest = max(arch.vocab_size, 2 * arch.intermediate_size, 2 * arch.hidden_size)
    act = 4 * B * q * widest * dtype_bytes
    return {"kv": kv, "state": state, "activations": act}


def default_budget(device: str) -> int:
    """Bytes a grid point may allocate: 60% of free GPU memory, or 4 GiB on a CPU."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free * GPU_BUDGET_FRACTION)
    return CPU_BUDGET_BYTES


def check_budget(
    arch: ModelArch, n_layers: int, points: list[tuple[int, int, int]], dtype_bytes: int, budget: int
) -> None:
    """Raise `CostModelError` naming every (B, q, L) whose buffers would exceed `budget` bytes."""
    over = []
    for B, q, L in points:
        need = point_bytes(arch, n_layers, B, q, L, dtype_bytes)
        if sum(need.values()) > budget:
            parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in need.items())
            over.append(f"B={B} q={q} L={L}: {sum(need.values()) / 2**30:.2f} GiB ({parts})")
    if over:
        raise CostModelError(
            f"grid points exceed the memory budget of {budget / 2**30:.2f} GiB for {n_layers} layers: "
            + "; ".join(over)
            + ". Drop them from the grid, profile fewer layers or raise memory_budget_bytes"
        )


def allocate(model: SyntheticModel, B: int, L_max: int) -> None:
    """Random KV caches `[B, kv_heads, L_max, head_dim]` and fp32 recurrent states for every layer."""
    a, opt = model.arch, {"device": model.device}
    model.buffers = {"k": [], "v": [], "state": []}
    for layer in model.layers:
        if layer.kind == "full":
            for name in ("k", "v"):
                model.buffers[name].append(
                    torch.empty(B, a.num_kv_heads, L_max, a.head_dim, dtype=model.dtype, **opt).normal_()
                )
        else:
            la = a.linear
            model.buffers["state"].append(
                torch.empty(B * la.num_v_heads, la.k_head_dim, la.v_head_dim, dtype=torch.float32, **opt)
                .normal_()
                .mul_(0.01)
            )


def _rms(x: Any, w: Any) -> Any:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _attention(m: SyntheticModel, p: LayerWeights, x: Any, idx: int, B: int, q: int, L: int) -> Any:
    a = m.arch
    nq, nkv, d = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.head_dim
    gate_w = nq if a.attn_output_gate else 0
    qh, gate, k, v = F.linear(x, p.w_in).split([nq, gate_w, nkv, nkv], dim=-1)
    kc, vc = m.buffers["k"][idx], m.buffers["v"][idx]
    kc[:, :, L : L + q] = k.view(B, q, a.num_kv_heads, d).transpose(1, 2)
    vc[:, :, L : L + q] = v.view(B, q, a.num_kv_heads, d).transpose(1, 2)
    group = a.num_heads // a.num_kv_heads
    packed = qh.view(B, q, a.num_kv_heads, group, d).permute(0, 2, 3, 1, 4).reshape(B, a.num_kv_heads, -1, d)
    o = F.scaled_dot_product_attention(packed, kc[:, :, : L + q], vc[:, :, : L + q])
    o = o.view(B, a.num_kv_heads, group, q, d).permute(0, 3, 1, 2, 4).reshape(B * q, nq)
    if a.attn_output_gate:
        o = o * gate.sigmoid()
    return F.linear(o, p.w_out)


def _deltanet(m: SyntheticModel, p: LayerWeights, x: Any, idx: int, B: int, q: int) -> Any:
    """Projections plus a per-token fp32 update and read of the recurrent state (an approximation)."""
    la = m.arch.linear
    key_dim, value_dim, hv = la.num_k_heads * la.k_head_dim, la.num_v_heads * la.v_head_dim, la.num_v_heads
    qk, kk, v, z, _ = F.linear(x, p.w_in).split([key_dim, key_dim, value_dim, value_dim, 2 * hv], dim=-1)
    rep, dk, dv = hv // la.num_k_heads, la.k_head_dim, la.v_head_dim
    qk, kk = (
        t.reshape(B, q, la.num_k_heads, 1, dk).float().expand(-1, -1, -1, rep, -1).reshape(B, q, hv, dk)
        for t in (qk, kk)
    )  # k heads shared by rep v heads, without a host sync
    v = v.reshape(B, q, hv, dv).float()
    state = m.buffers["state"][idx]
    outs = []
    for t in range(q):
        state.baddbmm_(kk[:, t].reshape(B * hv, dk, 1), v[:, t].reshape(B * hv, 1, dv), beta=0.99)
        outs.append(torch.bmm(qk[:, t].reshape(B * hv, 1, dk), state).view(B, 1, value_dim))
    o = torch.cat(outs, dim=1).reshape(B * q, value_dim).to(x.dtype)
    return F.linear(_rms(o, 1.0) * F.silu(z), p.w_out)


def _mlp(p: MlpWeights, x: Any) -> Any:
    if p.router is not None:
        F.linear(x, p.router).topk(p.top_k, dim=-1)
    gate, up = F.linear(x, p.gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, p.down)


def decode_step(m: SyntheticModel, x: Any, B: int, q: int, L: int, depth: int) -> Any:
    """Logits `[B * q, vocab]` of one step of `q` tokens per sequence over a context of `L`."""
    full = lin = 0
    for p in m.layers[:depth]:
        h = _rms(x, p.norm1)
        if p.kind == "full":
            x = x + _attention(m, p, h, full, B, q, L)
            full += 1
        else:
            x = x + _deltanet(m, p, h, lin, B, q)
            lin += 1
        x = x + _mlp(p.mlp, _rms(x, p.norm2))
    return F.linear(_rms(x, m.final_norm), m.lm_head)


def time_point(
    m: SyntheticModel, B: int, q: int, L: int, depth: int, reps: int, cuda_graph: bool
) -> tuple[float, bool]:
    """Seconds of one step at (B, q, L) over the first `depth` layers; and whether a graph was used.

    `allocate(m, B, L_max)` with `L_max >= L + q` must have run.
    """
    x = torch.randn(B * q, m.arch.hidden_size, device=m.device, dtype=m.dtype)

    def step() -> None:
        with torch.no_grad():
            decode_step(m, x, B, q, L, depth)

    on_gpu = m.device.startswith("cuda")
    if on_gpu and cuda_graph:
        try:
            return time_cuda_graph(step, reps), True
        except Exception:  # noqa: BLE001 - any capture failure falls back to eager timing
            torch.cuda.synchronize()
    return time_eager(step, reps, torch.cuda.synchronize if on_gpu else (lambda: None)), False


def profile_synthetic(
    cfg: dict[str, Any],
    grid: Any,
    device: str = "cpu",
    n_layers: int | None = None,
    dtype: Any = None,
    cuda_graph: bool = True,
    memory_budget_bytes: int | None = None,
) -> pd.DataFrame:
    """Time synthetic decode steps over `grid` (a `ProfileGrid`); one row per (B, q, L) at full depth.

    Same columns as `profiler.profile_steps` plus `backend = "synthetic"`. The model is built once
    with `n_layers` layers and timed at that depth and at about half (a whole number of hybrid
    periods); the difference scales to full depth. Grid points whose buffers exceed
    `memory_budget_bytes` (default: 60% of free GPU memory, 4 GiB on a CPU) raise before any timing.
    """
    arch = arch_from_config(cfg)
    full = arch.num_layers
    n = full if n_layers is None or n_layers >= full else n_layers
    if n < full and n < 2:
        raise CostModelError(f"profile at least 2 layers to scale to full depth, got n_layers={n_layers}")
    depths = [n] if n == full else [lower_depth(arch, n), n]
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    model = build_synthetic(arch, n, device, dtype)
    q_max = max(grid.q_values)
    points = [(B, q_max, L) for L in grid.contexts for B in grid.batch_sizes]
    budget = memory_budget_bytes if memory_budget_bytes is not None else default_budget(device)
    check_budget(arch, n, points, model.dtype_bytes, budget)
    times: dict[int, dict[tuple[int, int, int], tuple[float, bool]]] = {d: {} for d in depths}
    for L in grid.contexts:
        for B in grid.batch_sizes:
            allocate(model, B, L + q_max)
            for q in grid.q_values:
                for d in depths:
                    times[d][(B, q, L)] = time_point(model, B, q, L, d, grid.reps, cuda_graph)
                    cuda_graph = cuda_graph and times[d][(B, q, L)][1]  # one failed capture: eager after
            model.buffers = {}
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    table = depth_scaled_rows(times, depths, full, device, config_hash(arch), model.dtype_bytes)
    return table.assign(backend="synthetic")
