"""One GPU's memory plan, declared once: its inputs as fields, its figures (pools, bytes per sequence,
the sequences that fit) as properties. kit.memoryplan computes one (`memory_plan`); probe.json keeps
it as its `memory` section (`MemorySection`: the plan and where its weight bytes came from), each
input, then each figure, then `weight_source`, the order the file always had.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from kit.artifacts.record import Record

FIGURES = (
    "budget_bytes",
    "pool_bytes_plain",
    "pool_bytes_spec",
    "bytes_per_seq",
    "bytes_per_seq_spec",
    "max_seqs_plain",
    "max_seqs_spec",
)
"""The plan's derived figures, written after its inputs."""


@dataclass(frozen=True, kw_only=True)
class MemoryPlan(Record):
    """Per-GPU memory budget and the largest batch it allows, plain and speculative."""

    gpu_mem_bytes: int
    mem_fraction: float
    context_len: int
    tp_size: int
    weight_bytes: int
    """Target-model weights on one GPU (the checkpoint divided by tp_size)."""
    draft_weight_bytes: int
    kv_bytes_per_token: int
    """KV cache of one token on one GPU (full-attention layers only; the MLA latent for MLA)."""
    state_bytes_per_seq: int
    """Recurrent state (SSM + conv) of one sequence on one GPU, hybrid models only."""
    spec_draft_tokens: int
    spec_buffer_bytes_per_seq: int
    """Extra bytes per running request with speculation (intermediate states, draft KV)."""

    @property
    def budget_bytes(self) -> int:
        return int(self.gpu_mem_bytes * self.mem_fraction)

    @property
    def pool_bytes_plain(self) -> int:
        return self.budget_bytes - self.weight_bytes

    @property
    def pool_bytes_spec(self) -> int:
        return self.budget_bytes - self.weight_bytes - self.draft_weight_bytes

    @property
    def bytes_per_seq(self) -> int:
        return self.context_len * self.kv_bytes_per_token + self.state_bytes_per_seq

    @property
    def bytes_per_seq_spec(self) -> int:
        return self.bytes_per_seq + self.spec_buffer_bytes_per_seq

    @property
    def max_seqs_plain(self) -> int:
        return max(self.pool_bytes_plain, 0) // max(self.bytes_per_seq, 1)

    @property
    def max_seqs_spec(self) -> int:
        return max(self.pool_bytes_spec, 0) // max(self.bytes_per_seq_spec, 1)

    def to_dict(self) -> dict[str, Any]:
        """Inputs and figures, JSON-ready (probe.json's `memory` less its `weight_source`)."""
        return self.to_json()

    def _entries(self) -> Iterator[tuple[str, Any]]:
        """The plan's inputs, its figures, then a section's own fields and `extra` (a plan read from a
        file: its keys as read, the figures among them)."""
        entries = list(super()._entries())
        if self.read_keys is not None:
            yield from entries
            return
        inputs = {f.name for f in fields(MemoryPlan)}
        yield from ((k, v) for k, v in entries if k in inputs)
        yield from ((name, getattr(self, name)) for name in FIGURES)
        yield from ((k, v) for k, v in entries if k not in inputs)


@dataclass(frozen=True, kw_only=True)
class MemorySection(MemoryPlan):
    """probe.json's `memory`: the plan, and where the weight bytes came from."""

    weight_source: str = ""
    """safetensors headers, the index's total_size, or the config's parameter count."""

    @classmethod
    def of(cls, plan: MemoryPlan, weight_source: str) -> MemorySection:
        """The section of `plan` whose weight bytes came from `weight_source`."""
        inputs = {f.name: getattr(plan, f.name) for f in fields(MemoryPlan) if f.init and f.name != "extra"}
        return cls(**inputs, weight_source=weight_source)
