"""What speculation costs beyond its kernels, per engine family: the fixed costs of a draft pass, of a
speculative iteration and of each sequence in it, with where each figure was measured.

    costs = engine_costs("vllm")            # EngineCosts: the figures and their provenance
    eff = with_engine(DEFAULT_EFFICIENCY, "vllm")

These belong to an engine's version and host, not to the GPU: the kernels' bytes and FLOPs transfer
between GPUs by the datasheet (kit.decide.costmodel.step), these do not, and the kit has each only for
the engine, version and GPU named in its source. `DEFAULT_EFFICIENCY` carries SGLang's, the kit's
main engine. A sweep refits them for the engine at hand (`fit_to_sweep`). docs/costmodel.md, "Where
the constants come from", says how each was derived.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kit.decide.costmodel.hardware import Efficiency
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


ENGINE_COSTS: dict[str, EngineCosts] = {
    "sglang": EngineCosts(
        "sglang",
        "2026 (the Qwen3.x cookbook's)",
        "GB300",
        draft_pass_s=2.32e-4,
        spec_iter_s=0.0,
        spec_seq_s=0.0,
        source=(
            "draft_pass_s fitted on SGLang's GB300 cookbook table (Qwen3.x-27B MTP, a fitted table of "
            "tests/published_tables.py, with MagicDec); spec_iter_s and spec_seq_s: no independent "
            "measurement yet (0; the fit leaves them there)"
        ),
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
"""The engine families the kit has speculative fixed costs for (tests/test_costmodel.py re-derives
the vLLM figures from their source and checks the SGLang ones are `DEFAULT_EFFICIENCY`'s)."""

DEFAULT_ENGINE = "sglang"


def engine_costs(family: str) -> EngineCosts:
    """The speculative fixed costs of an engine family (`sglang`, `vllm`); other flavors (the
    embedded transformers server, an external one) get SGLang's."""
    if not family:
        raise CostModelError("engine family is empty: name one of " + ", ".join(ENGINE_COSTS))
    return ENGINE_COSTS.get(family, ENGINE_COSTS[DEFAULT_ENGINE])


def with_engine(eff: Efficiency, family: str) -> Efficiency:
    """`eff` with the speculative fixed costs of `family` (kernel factors and step costs kept)."""
    c = engine_costs(family)
    return replace(eff, draft_pass_s=c.draft_pass_s, spec_iter_s=c.spec_iter_s, spec_seq_s=c.spec_seq_s)
