"""What speculation costs beyond its kernels, per engine family: the fixed costs of a draft pass, of a
speculative iteration and of each sequence in it, with where each figure was measured.

    costs = engine_costs("vllm")            # EngineCosts: the figures and their provenance
    eff = with_engine(DEFAULT_EFFICIENCY, "vllm")

These belong to an engine's version and host, not to the GPU: the kernels' bytes and FLOPs transfer
between GPUs by the datasheet (kit.decide.costmodel.step), these do not, and the kit has each only for
the engine, version and GPU named in its source. `DEFAULT_EFFICIENCY` carries SGLang's, the kit's
main engine, as SGLang 0.5.16 on the H200 measured them (`costs_from_step_table` on its own step
times). A sweep refits them for the engine at hand (`fit_to_sweep`). docs/costmodel.md, "Where the
constants come from", says how each was derived.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kit.decide.costmodel.hardware import Efficiency
from kit.decide.costmodel.predict import iteration_time
from kit.decide.costmodel.scenario import Scenario
from kit.errors import CostModelError


@dataclass(frozen=True)
class EngineCosts:
    """One engine family's speculative fixed costs and where they were measured."""

    family: str
    version: str
    gpu: str
    draft_pass_s: float
    """Per draft forward pass beyond its kernels (launches, sampling the drafted token, the sync)."""
    spec_iter_s: float
    """Per speculative iteration beyond verify and draft kernels, whatever the batch."""
    spec_seq_s: float
    """Per running sequence per speculative iteration (host bookkeeping not overlapped)."""
    source: str

    def provenance(self) -> str:
        """'vllm V1 (July 2025) on H100 SXM: <source>'."""
        return f"{self.family} {self.version} on {self.gpu}: {self.source}"


SGLANG_H200 = (
    "SGLang 0.5.16 on one H200 (docs/lab/h200/sglang/eagle3/, commit c062c1b): a shape-only Qwen3-8B "
    "(random weights, --load-format dummy) with EAGLE-3 over a shape-only draft head (SpecForge's "
    "Qwen3-8B config, 0.40 B params), chain drafts (topk 1), k = 1 and 3 against plain at 1 / 16 / 64 "
    "/ 256 running, attention backend triton, --sampling-backend pytorch, greedy, CUDA graphs on; "
    "accept length exactly 1.00 (a random head), so each speculative step is the pure cost of "
    "speculating. Step times are SGLang's own (its Decode batch lines, benchmarks/sglang_step_times.py). "
    "The measured step less the measured plain step less the model's extra verify and draft kernels "
    "is flat in k (a pass costs 33 us beyond its kernels, from batch 1) and a line in the batch: "
    "0.93 ms an iteration plus 0.19 ms a running sequence (costs_from_step_table). One round, one "
    "model size, chain drafts, the triton backend only"
)

ENGINE_COSTS: dict[str, EngineCosts] = {
    "sglang": EngineCosts(
        "sglang",
        "0.5.16",
        "H200",
        draft_pass_s=3.3e-5,
        spec_iter_s=9.3e-4,
        spec_seq_s=0.0,
        source=(
            SGLANG_H200 + ". spec_seq_s is left at 0 here, a choice, not a measurement: the 0.19 ms a "
            "sequence was read as the triton backend's target verify (the serial-prefix extend kernel, "
            "one program per sequence and head; SGLang PRs #27382, #39316), but flashinfer too grows "
            "0.13 ms a sequence over plain from 16 to 64 running on the same shape (one round, "
            "docs/lab/h200/sglang/eagle3-flashinfer-graphs128/), and fa3 is unmeasured; in the default the "
            "0.19 ms would put the published SGLang tables 26-43% low at their largest batches (EAGLE-3 "
            "on the H100 -43% at 64, the GB300 cookbook -26%, MagicDec -31%); `sglang/triton` carries it"
        ),
    ),
    "sglang/triton": EngineCosts(
        "sglang",
        "0.5.16, --attention-backend triton",
        "H200",
        draft_pass_s=3.3e-5,
        spec_iter_s=9.3e-4,
        spec_seq_s=1.92e-4,
        source=SGLANG_H200,
    ),
    "vllm": EngineCosts(
        "vllm",
        "V1 (July 2025, EAGLE-3 drafts)",
        "H100 SXM",
        draft_pass_s=7.3e-4,
        spec_iter_s=1.26e-3,
        spec_seq_s=0.0,
        source=(
            "vLLM issue #20780: Llama-3.1-8B with the EAGLE-3 head at batch 1, TPOT and accept length for "
            "K = 2..7; the iteration (TPOT x accept length) grows 0.73 ms per draft pass beyond the "
            "model's draft kernels, and its intercept lies 1.26 ms above a plain step (the plain TPOT "
            "of 7.07 ms, not the model's, so the plain offset is not counted twice); batch 1 only, so "
            "no per-sequence term"
        ),
    ),
}
"""The engine families the kit has speculative fixed costs for, and an attention backend of one that
costs differently (`family/backend`). tests/test_costmodel.py re-derives the SGLang figures from the
committed H200 logs and the vLLM ones from issue #20780, and checks SGLang's are `DEFAULT_EFFICIENCY`'s."""

DEFAULT_ENGINE = "sglang"


def engine_costs(family: str, attention_backend: str | None = None) -> EngineCosts:
    """The speculative fixed costs of an engine family (`sglang`, `vllm`), or of one of its attention
    backends where that was measured apart (`engine_costs("sglang", "triton")`); other flavors (the
    embedded transformers server, an external one) and other backends get the family's default."""
    if not family:
        raise CostModelError("engine family is empty: name one of " + ", ".join(ENGINE_COSTS))
    if attention_backend and f"{family}/{attention_backend}" in ENGINE_COSTS:
        return ENGINE_COSTS[f"{family}/{attention_backend}"]
    return ENGINE_COSTS.get(family, ENGINE_COSTS[DEFAULT_ENGINE])


def with_engine(eff: Efficiency, family: str, attention_backend: str | None = None) -> Efficiency:
    """`eff` with the speculative fixed costs of `family` (and backend; kernel factors and step costs
    kept)."""
    c = engine_costs(family, attention_backend)
    return replace(eff, draft_pass_s=c.draft_pass_s, spec_iter_s=c.spec_iter_s, spec_seq_s=c.spec_seq_s)


@dataclass(frozen=True)
class StepDerivation:
    """Speculative fixed costs read from an engine's measured step times (`costs_from_step_table`),
    with what the model's kernels leave unexplained at each point."""

    draft_pass_s: float
    spec_iter_s: float
    spec_seq_s: float
    residual_s: dict[tuple[int, int], float]
    """(k, B): measured speculative step - measured plain step - the model's extra kernels."""
    misfit_s: dict[tuple[int, int], float]
    """(k, B): residual - (k draft_pass_s + spec_iter_s + B spec_seq_s)."""


def costs_from_step_table(
    s: Scenario, plain_s: Mapping[int, float], spec_s: Mapping[int, Mapping[int, float]]
) -> StepDerivation:
    """The speculative fixed costs an engine adds, from its own step times at accept length 1 (a
    shape-only draft: every draft rejected, so each step verifies k + 1 tokens and keeps one).

    `plain_s` is {B: plain step seconds}, `spec_s` {k: {B: speculative step seconds}}. At each point the
    residual is the measured speculative step less the measured plain step (so the plain step's own
    offset from the model cancels) less what the model's kernels add for it (the verify of k + 1 tokens
    and the k draft passes at `s`, with no speculative fixed cost). Then
    residual = k draft_pass_s + spec_iter_s + B spec_seq_s: `draft_pass_s` is the residual's slope in k
    at the smallest batch (where nothing grows with the batch; at least 0), `spec_iter_s` and
    `spec_seq_s` a line in B through every point's residual less its draft passes, least squares
    relative to the measured step (so batch 1 weighs as much as batch 256)."""
    import numpy as np

    bare = replace(s, eff=replace(s.eff, draft_pass_s=0.0, spec_iter_s=0.0, spec_seq_s=0.0))
    ks = sorted(spec_s)
    if len(ks) < 2:
        raise CostModelError("costs_from_step_table needs two draft lengths to tell a pass from an iteration")
    points = [(k, B) for k in ks for B in sorted(spec_s[k]) if B in plain_s]
    residual = {
        (k, B): (spec_s[k][B] - plain_s[B]) - (iteration_time(bare, B, k) - iteration_time(bare, B, 0))
        for k, B in points
    }
    b0 = min(B for _, B in points)
    at_b0 = [(k, residual[(k, b0)]) for k in ks if (k, b0) in residual]
    per_pass = max(float(np.polyfit([k for k, _ in at_b0], [r for _, r in at_b0], 1)[0]), 0.0)
    w = np.array([1 / spec_s[k][B] for k, B in points])
    A = np.array([[1.0, B] for _, B in points]) * w[:, None]
    y = np.array([residual[p] - p[0] * per_pass for p in points]) * w
    per_iter, per_seq = (float(v) for v in np.linalg.lstsq(A, y, rcond=None)[0])
    misfit = {(k, B): r - (k * per_pass + per_iter + B * per_seq) for (k, B), r in residual.items()}
    return StepDerivation(per_pass, per_iter, per_seq, residual, misfit)
