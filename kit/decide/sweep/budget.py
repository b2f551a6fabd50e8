"""The sweep's time budget: the user's `decide.time_budget_s`, else a share of the job it decides for.

A decision is worth at most what it saves on the job, and a sweep's minutes are paid before the
first row: a 2,000-prompt job should not wait half an hour for its sweep, and a 2-million-prompt job
deserves every repetition. So without a budget in the params the sweep may take `decide.budget_share`
(2% by default) of the job's hours at plain decoding, read after the first round (the first round
always runs, so the budget is never less than one round):

    job seconds = the plan's requests' predicted output tokens / plain decoding's best rate measured

The output tokens come from kit.prompts.lengths' model of the run (the first round's answers, cut
at `decide.max_tokens`, else each source's budget); the rate is plain's best level in that round.
Stage 3's tail and server start are left out: the budget is a share of the job's bulk.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kit.decide.forecast.inputs import plan_lengths
from kit.decide.measure.pilot import ANSWER_COLUMNS, Answer
from kit.display import hours
from kit.params import RunParams
from kit.prompts.lengths import LENGTH_COLUMNS, LengthModel
from kit.runfolder import RunFolder


@dataclass(frozen=True)
class SweepBudget:
    """Seconds the sweep may take (None: no limit) and where that figure came from."""

    seconds: float | None
    rule: str


def params_budget(params: RunParams) -> SweepBudget | None:
    """The user's budget (it always wins), or None when the job is to size it."""
    d = params.decide
    if d.time_budget_s is not None:
        return SweepBudget(d.time_budget_s, f"decide.time_budget_s: {d.time_budget_s:g} s")
    if not d.budget_share:
        return SweepBudget(None, "no budget (decide.budget_share: 0)")
    return None


def job_output_tokens(params: RunParams, folder: RunFolder, answers: list[Answer]) -> tuple[int, float]:
    """(the job's requests, their predicted output tokens) from the plan and the sweep's answers."""
    plan = plan_lengths(params, folder)
    caps = {src.name: src.max_tokens for src in params.data.sources if src.max_tokens}
    frame = pd.DataFrame(answers, columns=ANSWER_COLUMNS) if answers else None
    model = LengthModel.fit(
        pd.DataFrame(columns=LENGTH_COLUMNS),
        caps,
        params.generate.sampling.max_tokens,
        frame,
        params.decide.max_tokens,
    )
    return len(plan), float(model.predict(plan.sources, plan.prompt_tokens).sum())


def job_budget(params: RunParams, requests: int, tokens: float, plain_tok_s: float | None) -> SweepBudget:
    """`decide.budget_share` of the job's seconds at `plain_tok_s` (None or 0: plain decoding was not
    measured, so the job cannot be sized: no limit, and the rule says why)."""
    share = params.decide.budget_share
    if not plain_tok_s or plain_tok_s <= 0:
        return SweepBudget(None, "no budget: plain decoding was not measured, so the job was not sized")
    replicas = max(1, params.engine.replicas)
    job_s = tokens / plain_tok_s / replicas
    on = f" on {replicas} replicas" if replicas > 1 else ""
    return SweepBudget(
        share * job_s,
        f"{100 * share:g}% of the job's {hours(job_s)}{on} at plain decoding's {plain_tok_s:,.0f} tok/s "
        f"({requests:,} requests, {tokens:,.0f} output tokens predicted; decide.budget_share)",
    )
