"""The order work is sent in: longest predicted output first, so the longest requests do not start
last and hold the job's tail (`generate.order: longest_first`; `plan` keeps the plan's order).

    model = LengthModel.fit(done_lengths(folder.shard_paths()), caps, default_cap)   # kit.prompts.lengths
    work = longest_first(todo, work, model)      # the same items, longest predicted first

A batch job's wall time is decided at its end as well as at full load: once fewer requests remain
than the engine runs at once, the GPUs run a shrinking batch, and a long request sent last keeps
them nearly idle until it ends. Sending the longest first lets the short ones fill the end.

The prediction (kit.prompts.lengths) is a pure function of what is on disk, so the order is the
same on every resume. Where every prediction is equal (one cap, no answers), the order is the
plan's. Ties keep the plan's order.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa

from kit.artifacts.manifest_sections import OrderReport
from kit.prompts.lengths import LengthModel

log = logging.getLogger(__name__)


def longest_first(
    todo: pa.Table, work: list[tuple[int, int]], model: LengthModel
) -> tuple[list[tuple[int, int]], OrderReport]:
    """`work` (row of `todo`, sample index) ordered by predicted output length, longest first, ties
    in the given order; and a summary of the order for the manifest."""
    if not work:
        return work, OrderReport(order="longest_first", items=0)
    rows = np.fromiter((r for r, _ in work), dtype=np.int64, count=len(work))
    sources = np.asarray(todo.column("source").to_numpy(zero_copy_only=False), dtype=object)
    prompt = todo.column("prompt_tokens").to_numpy(zero_copy_only=False)
    predicted = model.predict(sources.astype(str), np.asarray(prompt, dtype=float))[rows]
    order = np.argsort(-predicted, kind="stable")  # stable: equal predictions keep the plan's order
    finite = predicted[np.isfinite(predicted)]
    summary: OrderReport = {
        "order": "longest_first",
        "items": len(work),
        "predicted_tokens_first": _num(predicted[order[0]]),
        "predicted_tokens_last": _num(predicted[order[-1]]),
        "predicted_tokens_mean": _num(finite.mean()) if len(finite) else None,
        "changed": bool((order != np.arange(len(order))).any()),
        "by_source": model.describe(),
    }
    return [work[i] for i in order.tolist()], summary


def _num(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 1)
