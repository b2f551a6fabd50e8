"""The cost model's measured error on held-out published tables, and what those tables cover: the band
a prediction is drawn with, and when a scenario lies outside what the model was checked on.

    band = error_band(gpu="B200", moe=False, draft="mtp")
    band.around(1.6)          # (low, high): where the true ratio lay for a prediction of 1.6
    band.outside              # ['GPU class Blackwell (B200)']: not checked there

`HELD_OUT` is the record of tests/published_tables.py at the kit's defaults (independent accept
lengths, each engine family's own fixed costs, no constant of a table's own); tests/test_costmodel.py
recomputes it and fails when the two differ, so the band cannot drift from the validation it quotes.
An error is predicted / published - 1, so the truth of a prediction p lies in p / (1 + error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HeldOut:
    """One held-out table: what it ran (GPU class, MoE or dense, draft kind, engine) and the smallest
    and largest signed error of its points at the kit's defaults."""

    name: str
    gpu_class: str
    moe: bool
    draft: str
    engine: str
    points: int
    min_error: float
    max_error: float
    known_miss: bool = False
    """Listed in docs/costmodel.md as missed (beyond 25% or the trend with batch wrong), with the term
    that dominates the miss."""


HELD_OUT: tuple[HeldOut, ...] = (
    HeldOut("sglang_eagle3_h100", "Hopper", False, "eagle3", "sglang", 9, 0.083, 0.383, True),
    HeldOut("vllm_eagle3_rtx3090", "Ampere", False, "eagle3", "vllm", 8, -0.044, 0.151),
    HeldOut("sglang_dsv3_mtp_h200", "Hopper", True, "mtp", "sglang", 2, -0.378, -0.163, True),
    HeldOut("specforge_qwen3_moe_h100", "Hopper", True, "eagle3", "sglang", 2, -0.024, 0.105, True),
    HeldOut("magicdec_llama2_selfspec", "Ampere", False, "self_spec", "sglang", 3, -0.085, 0.099),
)
"""tests/published_tables.py's held-out tables at the kit's defaults (errors rounded to 0.001)."""

GPU_CLASSES = (
    ("Blackwell", r"\b(gb|b)(200|300)\b|rtx (pro )?(5090|6000 blackwell|pro 6000)|blackwell"),
    ("Hopper", r"\bg?h(100|200|800|20)\b"),
    ("Ada", r"\bl(4|40s?|20)\b|rtx (4090|6000 ada)"),
    ("Ampere", r"\ba(100|800|10g?|40|30)\b|rtx (3090|a6000)"),
)
"""GPU generations by name (datasheet or NVML), first match wins; the model's transfer between GPUs
is by datasheet ratios, checked only within the classes the held-out tables ran on."""


def gpu_class(name: str) -> str:
    """'Hopper' for 'H200' or 'NVIDIA H100 80GB HBM3', 'Blackwell' for 'B200', ... 'other'."""
    text = re.sub(r"[^a-z0-9]+", " ", name.lower())
    return next((c for c, pattern in GPU_CLASSES if re.search(pattern, text)), "other")


@dataclass(frozen=True)
class ErrorBand:
    """The held-out error a prediction is drawn with (`lo`, `hi`: smallest and largest signed error
    over `points` held-out points) and what of the scenario lies outside what those points covered."""

    lo: float
    hi: float
    points: int
    outside: list[str] = field(default_factory=list)

    def around(self, predicted: float) -> tuple[float, float]:
        """Where the truth lay for a prediction `predicted`: (p / (1 + hi), p / (1 + lo))."""
        return predicted / (1 + self.hi), predicted / (1 + self.lo)

    @property
    def label(self) -> str:
        """'held-out error -38% to +38% (24 points)'."""
        return f"held-out error {100 * self.lo:+.0f}% to {100 * self.hi:+.0f}% ({self.points} points)"

    @property
    def outside_sentence(self) -> str:
        """'' when every part was checked, else 'outside what the model was checked on: ...'."""
        return f"outside what the model was checked on: {'; '.join(self.outside)}" if self.outside else ""


def error_band(gpu: str, moe: bool, draft: str, engine: str | None = None) -> ErrorBand:
    """The band of every held-out point (the model's error is not told apart by scenario: too few
    points per class), and which of the scenario's GPU class, MoE-ness, draft kind and engine family
    no held-out table covered."""
    lo = min(h.min_error for h in HELD_OUT)
    hi = max(h.max_error for h in HELD_OUT)
    points = sum(h.points for h in HELD_OUT)
    outside = []
    cls = gpu_class(gpu)
    if cls not in {h.gpu_class for h in HELD_OUT}:
        outside.append(f"GPU class {cls} ({gpu}): held-out tables ran on Hopper and Ampere only")
    moe_tables = [h for h in HELD_OUT if h.moe]
    if moe and not moe_tables:
        outside.append("MoE models")
    elif moe and all(h.known_miss for h in moe_tables):
        outside.append(f"MoE: its {len(moe_tables)} held-out tables are known misses (docs/costmodel.md)")
    if draft not in {h.draft for h in HELD_OUT}:
        kinds = ", ".join(sorted({h.draft for h in HELD_OUT}))
        outside.append(f"{draft} drafts (held-out tables: {kinds})")
    if engine and engine not in {h.engine for h in HELD_OUT}:
        outside.append(f"engine {engine}")
    return ErrorBand(lo, hi, points, outside)
