"""The arms a sweep measures and a decision chooses: plain decoding (k = 0) or speculation with k
drafted tokens per step, and the speculative algorithms an arm may name. Pure and dependency-free,
so the cost model (which runs on GPU boxes without the kit's full dependencies) names arms the same
way as the engines do. `Arm(k, algorithm)` is the one form of an arm until a flavor spells it
(`kit.engines.flavors`: SGLang's steps / top-k / draft tokens, vLLM's `num_speculative_tokens`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kit.columns import SPEC_K

DraftSource = Literal["heads", "model", "none"]


@dataclass(frozen=True)
class Arm:
    """One configuration the sweep measures and the decision may choose: plain (k = 0) or speculative."""

    k: int
    """Draft tokens per verify step; 0 is plain decoding."""
    algorithm: str | None = None

    @property
    def name(self) -> str:
        return arm_name(self.k)

    @property
    def speculative(self) -> bool:
        return self.k > 0


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
