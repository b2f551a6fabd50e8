"""The arms a sweep measures and a decision chooses: plain decoding (k = 0) or speculation with k
drafted tokens per step. Pure and dependency-free, so the cost model (which runs on GPU boxes
without the kit's full dependencies) names arms the same way as the engines do."""

from __future__ import annotations

from dataclasses import dataclass


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
    """The name of the arm with draft length k in tables and decision.json."""
    return "plain" if k == 0 else f"spec_k{k}"
