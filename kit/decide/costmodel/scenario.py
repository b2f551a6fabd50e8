"""What a prediction holds fixed, as one frozen `Scenario`: the model, the accelerator, how far its
kernels get from the datasheet, the workload and the draft.

    s = Scenario(arch, H200, work=Workload(1024, 1024, tp_size=2), draft=NGRAM)
    step_time(s, B=64, q=4, L=2048)            # kit.decide.costmodel.step: one step at a point
    predict_ladder(s, [1, 8, 64], ks=[1, 3])   # kit.decide.costmodel.predict: tokens/s per arm

The cost model's functions take a scenario and the one thing that varies (the step's point B, q, L;
the draft length k; a concurrency ladder), never the argument list `(arch, hw, B, q, L, eff, shape,
tp)` again. Change one part with `dataclasses.replace(s, eff=...)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kit.arch import ModelArch
from kit.decide.costmodel.hardware import DEFAULT_EFFICIENCY, Efficiency, Hardware
from kit.errors import CostModelError


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
class Workload:
    """Request shape, memory settings and layout the prediction assumes (decision.json's `workload`)."""

    input_len: int = 1024
    output_len: int = 1024
    mem_fraction: float = 0.85
    tp_size: int = 1
    dp_size: int = 1
    kv_dtype_bytes: int | None = None
    ssm_dtype_bytes: int = 4
    weight_bytes: float | None = None
    weight_dtype_bytes: float | None = None
    """Bytes per weight (1 for an FP8 checkpoint); default the config's dtype."""

    @property
    def mean_context(self) -> float:
        return self.input_len + self.output_len / 2

    @property
    def shape(self) -> StepShape:
        return StepShape(
            self.weight_bytes, self.kv_dtype_bytes, self.ssm_dtype_bytes, self.weight_dtype_bytes
        )


DraftKind = Literal["mtp", "eagle", "eagle3", "draft_model", "self_spec", "ngram"]
DRAFT_KINDS: tuple[str, ...] = ("mtp", "eagle", "eagle3", "draft_model", "self_spec", "ngram")


@dataclass(frozen=True)
class Draft:
    """A kind of draft and what its cost depends on (its cost: kit.decide.costmodel.drafts)."""

    kind: DraftKind = "mtp"
    arch: ModelArch | None = None
    """draft_model: its config (required); eagle / eagle3: the head's config (default: the target's width)."""
    vocab: int | None = None
    """Rows of the draft LM head (EAGLE-3's reduced vocabulary); default the target's vocabulary."""
    kv_budget: int | None = None
    """self_spec: tokens of KV cache the draft attends to."""

    def __post_init__(self) -> None:
        if self.kind not in DRAFT_KINDS:
            raise CostModelError(f"unknown draft kind {self.kind!r}; use one of {', '.join(DRAFT_KINDS)}")
        if self.kind == "draft_model" and self.arch is None:
            raise CostModelError("a draft_model draft needs the draft's config.json (draft arch)")
        if self.kind == "self_spec" and not (self.kv_budget and self.kv_budget > 0):
            raise CostModelError("self_spec drafting needs a positive kv_budget (tokens of KV it attends to)")


MTP = Draft("mtp")
NGRAM = Draft("ngram")


@dataclass(frozen=True)
class Scenario:
    """The model (`arch`), the accelerator (`hw`), the kernels' efficiency (`eff`), the workload
    (`work`: prompt and output lengths, memory fraction, tp and dp, bytes per weight / KV / state)
    and what the speculative arms draft with (`draft`)."""

    arch: ModelArch
    hw: Hardware
    eff: Efficiency = DEFAULT_EFFICIENCY
    work: Workload = Workload()
    draft: Draft = MTP

    @property
    def tp(self) -> int:
        """GPUs one replica's step runs on (tensor parallel)."""
        return self.work.tp_size

    @property
    def shape(self) -> StepShape:
        """Bytes per weight, KV element and state element of the target's step."""
        return self.work.shape

    @property
    def context(self) -> float:
        """Mean context of a decode step over a request: prompt plus half the output."""
        return self.work.mean_context
