"""How much of a run is fit to train on: the rows `kit export` keeps in `train` by default, against
the rows made, and what left the others out. Judged with the export's own rules (kit.export.drops)
on the facts stage 4 read, so the share the report leads with is the share `kit export` then keeps.

    analysis = with_fitness(folder, run_analysis(folder, params))   # kit.stages.analyse

A run can be complete with no failed request and still be mostly unusable (half its answers cut at
max_tokens): stage 4 and the report's index say this first, not the run's completion.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from kit.analyse.run import Analysis, RunData
from kit.artifacts import Fitness
from kit.export.drops import DEFAULT_DROP, RULES, drop_reasons, reason_counts
from kit.runfolder import RunFolder


def run_fitness(data: RunData, rules: tuple[str, ...] = DEFAULT_DROP) -> Fitness:
    """The rows of `data` that `rules` keep, and the rows each rule drops (most first)."""
    reasons = drop_reasons(data.df, data.flags, rules)
    dropped = reason_counts(reasons)
    return Fitness(
        rules=list(rules),
        rows=len(data.df),
        usable=int(pd.isna(reasons).sum()),
        dropped=dropped,
        means={r: RULES[r] for r in dropped},
        failed=len(data.failures) if "failed" in rules else 0,
    )


def with_fitness(folder: RunFolder, analysis: Analysis) -> Analysis:
    """`analysis` with its summary's `fitness`, written to the run's summary.json."""
    analysis.summary = replace(analysis.summary, fitness=run_fitness(analysis.data))
    folder.write_summary(analysis.summary)
    return analysis
