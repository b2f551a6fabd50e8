"""What the cost model knows of an accelerator (`Hardware`: datasheet or measured figures) and how far
real kernels get from it (`Efficiency`: fractions of the datasheet and the fixed costs of a step).

Both are frozen inputs of a `Scenario` (kit.decide.costmodel.scenario); the defaults and where they
come from are in docs/costmodel.md ("Where the constants come from").
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kit.errors import CostModelError


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

    @property
    def on_cpu(self) -> bool:
        """A CPU standing in for the accelerator (kit.decide.run's `cpu` hardware): no CUDA context."""
        return self.name == "cpu"

    def peak(self, weight_dtype_bytes: float) -> float:
        """FLOP/s of the GEMMs: FP8 rate for 1-byte weights, else bf16."""
        return (self.flops_fp8 or 2 * self.flops_bf16) if weight_dtype_bytes <= 1 else self.flops_bf16


@dataclass(frozen=True)
class Efficiency:
    """How far real kernels get from the datasheet, and the fixed costs of a step.

    Defaults (docs/costmodel.md, "Where the constants come from"): the kernel factors (bw to
    sharpness) are `calibrate_many` of the H200 profiles of Qwen3-32B and Llama-3.1-8B
    (docs/lab/h200/); `overhead_s`, `layer_s` and `allreduce_s` are set from measurements; SGLang's
    speculative fixed costs (`draft_pass_s`, `spec_iter_s`, `spec_seq_s`; other engine families:
    kit.decide.costmodel.engines) are measured on SGLang 0.5.16 on the H200 (docs/lab/h200/sglang/eagle3/);
    `verify_kv_bw` is fitted on two of the seven published tables (SGLang's GB300 cookbook and
    MagicDec); the other five are held out. `calibrate`
    (kit.decide.profile.profiler) and `fit_to_sweep` (kit.decide.costmodel.fit) refit them for a
    device or an engine.
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
    spec_iter_s: float = 9.3e-4
    """Per speculative iteration, whatever the batch: what an engine adds to a verify step beyond its
    kernels and the draft passes (rejection sampling, the draft's input preparation, the extra host
    sync); kit.decide.costmodel.engines gives it per engine family."""
    ngram_seq_s: float = 5e-6
    """Host time of an n-gram (prompt lookup) proposal per sequence and iteration (not fitted on any
    published table: none measures n-gram; the CPU sweep refits it, docs/lab/cpu_validation.md)."""
    verify_kv_bw: float = 0.607
    """Fraction of the decode kernels' KV bandwidth that attention reaches when each sequence brings
    q > 1 query tokens (verify): engines send those to prefill-type kernels, which do not split a
    long context across thread blocks the way decode kernels do."""
    expert_s: float = 0.0
    """Per routed expert a step touches, per MoE layer: what the fused-MoE kernels pay for each active
    expert beyond its weight bytes (its own padded token tile, a partial wave of thread blocks, the
    routing metadata), added to the expert term rather than hidden under its soft maximum."""
    moe_layer_s: float = 0.0
    """Per MoE layer per forward pass: the fused-MoE kernels' own launches and routing (top-k, token
    sort and align, the combine), whatever the number of experts touched."""
    moe_tile_tokens: float = 16.0
    """Rows of one grouped-GEMM tile (fused-MoE BLOCK_SIZE_M: 16 in SGLang's and vLLM's tuned configs
    for small batches): an active expert computes whole tiles, however few tokens it got."""
    draft_pass_s: float = 3.3e-5
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
            self.spec_iter_s,
            self.ngram_seq_s,
            self.draft_pass_s,
            self.expert_s,
            self.moe_layer_s,
            self.moe_tile_tokens,
        )
        if min(*fixed, self.gemm_half_tokens, self.attn_half_rows) < 0:
            raise CostModelError("fixed costs and half-efficiency points must be >= 0")

    def as_dict(self) -> dict:
        """JSON-ready copy."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_EFFICIENCY = Efficiency()
