"""Column names that cross the stages, spelled once: the sweep's tables (sweep_runs.parquet,
sweep.parquet, kit.decide.measure.tables), the cost model's ladder, decision.json's table and what stage 4
and the notebooks read of them. Dependency-free, so the shared modules (kit.display, kit.artifacts)
and every stage import it alike; the names are the files' own, so older run folders read as before.

    from kit.columns import OUTPUT_TOK_S, SPEC_K
    best = sweep.loc[sweep[OUTPUT_TOK_S].idxmax(), SPEC_K]
"""

from __future__ import annotations

from typing import Final

SPEC_K: Final = "spec_k"
"""An arm's draft length k (0: plain decoding). A column of the sweep's tables, the ladder and
decision.json's table; an earlier kit also wrote it among decision.json's `engine_settings`."""
OUTPUT_TOK_S: Final = "output_tok_s"
"""Output tokens/s: one measurement's (sweep_runs.parquet), the median of a level's repetitions
(sweep.parquet), or the cost model's prediction (the ladder)."""
OUTPUT_TOK_S_LO: Final = "output_tok_s_lo"
OUTPUT_TOK_S_HI: Final = "output_tok_s_hi"
"""The 90% interval of a level's median (sweep.parquet, kit.decide.measure.noise)."""
ADAPTIVE: Final = "adaptive"
"""Whether a sweep row's arm is the engine's own adaptive speculation (`decide.adaptive_k`), its
`spec_k` then the ceiling (sweep_runs.parquet, sweep.parquet; a sweep without it lacks the column)."""
