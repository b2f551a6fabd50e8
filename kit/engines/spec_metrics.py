"""Speculative-decoding counters from an engine's Prometheus `/metrics`, turned into accept length.

vLLM does not put an accept length in its responses; its `/metrics` counts drafts and accepted
tokens instead (`vllm:spec_decode_num_drafts_total`, `..._num_accepted_tokens_total`, and per
draft position `..._num_accepted_tokens_per_pos_total{position="i"}`). Over an interval the
accept length (tokens per verify step, the bonus token included) is
`1 + delta(accepted) / delta(drafts)`, and the acceptance of position i is
`delta(accepted at i) / delta(drafts)`. SGLang reports `sglang:spec_accept_length` as a gauge.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.engines.flavors import sglang, vllm
from kit.engines.metrics import Sample

VLLM_DRAFTS = vllm.DRAFTS
VLLM_DRAFT_TOKENS = vllm.DRAFT_TOKENS
VLLM_ACCEPTED = vllm.ACCEPTED
VLLM_PER_POSITION = vllm.PER_POSITION
SGLANG_ACCEPT_LENGTH = sglang.ACCEPT_LENGTH
"""The series each flavor names in its module (`Flavor.spec_metrics`), as this parser reads them."""


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative speculative counters at one moment (or their difference over an interval)."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_position: tuple[float, ...] = ()

    @classmethod
    def from_samples(cls, samples: list[Sample]) -> SpecCounters | None:
        """The counters in a `/metrics` scrape, summed over engines; None when it has none."""
        totals = {VLLM_DRAFTS: 0.0, VLLM_DRAFT_TOKENS: 0.0, VLLM_ACCEPTED: 0.0}
        positions: dict[int, float] = {}
        seen = False
        for s in samples:
            if s.name in totals:
                totals[s.name] += s.value
                seen = True
            elif s.name == VLLM_PER_POSITION and s.labels.get("position", "").isdigit():
                i = int(s.labels["position"])
                positions[i] = positions.get(i, 0.0) + s.value
        if not seen:
            return None
        per_pos = tuple(positions.get(i, 0.0) for i in range(max(positions, default=-1) + 1))
        return cls(totals[VLLM_DRAFTS], totals[VLLM_DRAFT_TOKENS], totals[VLLM_ACCEPTED], per_pos)

    def since(self, earlier: SpecCounters | None) -> SpecCounters:
        """What was counted between `earlier` and this scrape."""
        if earlier is None:
            return self
        n = max(len(self.per_position), len(earlier.per_position))
        mine = self.per_position + (0.0,) * (n - len(self.per_position))
        theirs = earlier.per_position + (0.0,) * (n - len(earlier.per_position))
        return SpecCounters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted - earlier.accepted,
            tuple(a - b for a, b in zip(mine, theirs, strict=True)),
        )

    @property
    def accept_length(self) -> float | None:
        """Tokens per verify step, the bonus token included; None when nothing was drafted."""
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def position_acceptance(self) -> list[float]:
        """Share of drafts whose token at position i was accepted (falls with i)."""
        return [p / self.drafts for p in self.per_position] if self.drafts > 0 else []


def gauge_accept_length(samples: list[Sample]) -> float | None:
    """SGLang's accept-length gauge (the mean over its data-parallel ranks), or None."""
    values = [s.value for s in samples if s.name == SGLANG_ACCEPT_LENGTH and s.value > 0]
    return sum(values) / len(values) if values else None
