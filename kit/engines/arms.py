"""The arms a sweep measures and a decision chooses: plain decoding (k = 0) or speculation with k
drafted tokens per step, and the speculative algorithms an arm may name; beside them the engine's
own adaptive speculation (`adaptive`: the engine picks the draft length per batch, k its ceiling),
which the sweep measures but the decision never chooses (kit.decide.measure.adaptive compares it). Pure and
dependency-free, so the cost model (which runs on GPU boxes without the kit's full dependencies)
names arms the same way as the engines do. `Arm(k, algorithm)` is the one form of an arm until a
flavor spells it (`kit.engines.flavors`: SGLang's steps / top-k / draft tokens, vLLM's
`num_speculative_tokens`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kit.columns import SPEC_K

if TYPE_CHECKING:
    from kit.params import SpeculativeParams

DraftSource = Literal["heads", "model", "none"]


@dataclass(frozen=True)
class Arm:
    """One configuration the sweep measures and the decision may choose: plain (k = 0) or speculative."""

    k: int
    """Draft tokens per verify step; 0 is plain decoding. Of an adaptive arm: the ceiling, the most
    draft tokens the engine may use."""
    algorithm: str | None = None
    adaptive: bool = field(default=False, kw_only=True)
    """The engine's own adaptive speculation (`decide.adaptive_k`): it picks k per batch, up to `k`.
    Keyword-only, so that an arm's subclasses (the settings sweep's `Alternative`) keep their
    positional fields after `algorithm`."""

    @property
    def name(self) -> str:
        return f"{ADAPTIVE_PREFIX}{self.k}" if self.adaptive else arm_name(self.k)

    @property
    def speculative(self) -> bool:
        return self.k > 0


ADAPTIVE_PREFIX = "adaptive_k"
"""The name of an adaptive arm is this and its ceiling (adaptive_k3): never a fixed arm's name."""


ADAPTIVE_BANDS: tuple[tuple[int, tuple[int, ...]], ...] = (
    (1, (1, 3, 7)),
    (8, (0, 1, 3)),
    (32, (0, 1)),
    (64, (0,)),
)
"""SGLang 0.5.16's default adaptive bands (sglang/srt/speculative/adaptive_spec_params.py): from this
many running requests, the draft lengths it picks among (0: speculation off). An adaptive arm runs
them capped at its ceiling, on every engine that has adaptive speculation (kit.engines.flavors)."""


def adaptive_bands(ceiling: int) -> list[tuple[int, list[int]]]:
    """`ADAPTIVE_BANDS` with every draft length capped at `ceiling` (no band above it)."""
    return [(first, sorted({min(k, ceiling) for k in ks})) for first, ks in ADAPTIVE_BANDS]


def adaptive_ceiling(name: str) -> int | None:
    """The ceiling an adaptive arm's name says (adaptive_k3 -> 3); None for any other name."""
    digits = name.removeprefix(ADAPTIVE_PREFIX)
    return int(digits) if digits != name and digits.isdigit() else None


def arm_name(k: int) -> str:
    """The name of the arm with draft length k in tables and decision.json: plain, or the name of the
    tables' column of k and k (spec_k3)."""
    return "plain" if k == 0 else f"{SPEC_K}{k}"


def arm_k(name: str) -> int | None:
    """The draft length an arm's name says (`arm_name` read back: plain -> 0, spec_k3 -> 3); None
    for a name `arm_name` never makes."""
    if name == "plain":
        return 0
    digits = name.removeprefix(SPEC_K)
    return int(digits) if digits != name and digits.isdigit() else None


def arm_label(k: int, spec_label: str) -> str:
    """'plain decoding' or e.g. 'n-gram k=3' in reasons."""
    return "plain decoding" if k == 0 else f"{spec_label} k={k}"


def adaptive_label(ceiling: int, spec_label: str, engine: str) -> str:
    """An adaptive arm in reasons: e.g. "SGLang's adaptive MTP (up to k=3)"."""
    return f"{engine}'s adaptive {spec_label} (up to k={ceiling})"


@dataclass(frozen=True)
class Algorithm:
    """A speculative algorithm as the kit names it (each flavor spells it in its own module)."""

    name: str
    draft: DraftSource
    """What drafts: the model's own MTP heads, a separate draft model, or nothing (n-gram lookup)."""
    label: str
    """How reasons and tables call its arms."""


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("MTP", "heads", "MTP"),
        Algorithm("NEXTN", "heads", "MTP"),
        Algorithm("EAGLE", "model", "EAGLE"),
        Algorithm("EAGLE3", "model", "EAGLE3"),
        Algorithm("STANDALONE", "model", "draft model"),
        Algorithm("NGRAM", "none", "n-gram"),
    )
}
DEFAULT_ALGORITHM = "MTP"
"""What the sweep tries when the params name no algorithm: the model's own MTP heads."""


def resolve_algorithm(name: str | None, has_draft_model: bool) -> Algorithm:
    """The algorithm named `name` (default MTP); EAGLE without a draft model means the model's own
    heads, as in SGLang."""
    a = ALGORITHMS[name or DEFAULT_ALGORITHM]
    return ALGORITHMS["MTP"] if a.name == "EAGLE" and not has_draft_model else a


# ---- reading `engine.speculative` (what the user wrote, or what `spell_arm` made) ------------------
def section_algorithm(spec: SpeculativeParams) -> Algorithm:
    """The algorithm of a speculative params section."""
    return resolve_algorithm(spec.algorithm, spec.draft_model_path is not None)


def draft_length(spec: SpeculativeParams) -> int | None:
    """k of a speculative section: `num_steps` (every flavor spells an arm's k there), else the
    draft tokens a user wrote less the verified one."""
    if spec.num_steps:
        return spec.num_steps
    return spec.num_draft_tokens - 1 if spec.num_draft_tokens and spec.num_draft_tokens > 1 else None
