"""What the sweep leaves out: the (arm, level) pairs a round's measurements already settle (racing),
and the rounds its time budget has no room for.

Racing. After each round of the sweep, at each level the arm with the highest figure so far (the
median of its repetitions, as the decision reads it: kit.decide.measure.tables.summarise) leads;
another arm there is ruled out when the leader's lead over it counts by the decision's own noise
rule (kit.decide.measure.noise.Lead.counts: paired by round, over three rounds its interval
excludes 1 and it exceeds the pooled noise; over fewer, it exceeds the noise assumed of arms
measured once, ±10% each). A level where every other arm is ruled out has nothing left to compare,
so its leader is not measured there again either; an arm with no level left is not started again
(one server at a time: a start is most of a round's cost on a big model). A lead that rests on a
disturbed measurement never counts (kit.decide.measure.tables.arm_lead), so a disturbed level stays
open. The engine's own adaptive arm (`decide.adaptive_k`) never leads a level: the decision never
chooses it, and an arm ruled out only against it would leave the decision's own comparison there
unmeasured. It is ruled out where its comparison with the level's leader counts, either way.

The budget. The user's `decide.time_budget_s`, else a share of the job it decides for: a decision
is worth at most what it saves on the job, and a sweep's minutes are paid before the first row, so
a 2,000-prompt job should not wait half an hour for its sweep and a 2-million-prompt job deserves
every repetition. Without a budget in the params the sweep may take `decide.budget_share` (2% by
default) of the job's hours at plain decoding, read after the first round (which always runs, so
the budget is never less than one round):

    job seconds = the plan's requests' predicted output tokens / plain decoding's best rate measured

The output tokens come from kit.prompts.lengths' model of the run (the first round's answers, cut
at `decide.max_tokens`, else each source's budget); the rate is plain's best level in that round.
Stage 3's tail and server start are left out: the budget is a share of the job's bulk.

    closed = settle(runs, adaptive={"adaptive_k3"})   # after a round: what not to measure again
    left, skipped = race(next_round_slots, closed)    # the slots that still decide something
    budget = params_budget(params) or round_budget(setup, rows, adaptive)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd

from kit.columns import OUTPUT_TOK_S
from kit.decide.choose.measured import arm_bests
from kit.decide.forecast.inputs import plan_lengths
from kit.decide.measure.noise import MIN_PAIRS, Lead
from kit.decide.measure.pilot import ANSWER_COLUMNS, Answer
from kit.decide.measure.tables import RUN_COLUMNS, SweepRow, arm_lead, flag_slow, summarise
from kit.decide.sweep.setup import SweepSetup
from kit.display import hours
from kit.params import RunParams
from kit.prompts.lengths import LENGTH_COLUMNS, LengthModel
from kit.runfolder import RunFolder

S = TypeVar("S")


@dataclass(frozen=True)
class Settled:
    """An (arm, level) the sweep measures no more: `leader` out-measures it outside the noise there
    (`arm == leader`: every other arm at the level is settled, nothing is left to compare)."""

    arm: str
    concurrency: int
    leader: str
    ratio: float
    """The leader's figure over the arm's (1.0 for the leader itself)."""
    rounds: int
    """Rounds that measured both when it was settled."""

    def sentence(self) -> str:
        if self.arm == self.leader:
            return f"{self.arm} at {self.concurrency}: every other arm there was ruled out"
        return (
            f"{self.arm} at {self.concurrency}: {self.leader} measured {self.ratio:.2f}x of it over "
            f"{self.rounds} round(s), outside the noise"
        )


def settle(runs: pd.DataFrame, adaptive: Iterable[str] = ()) -> list[Settled]:
    """The (arm, level) pairs the measurements so far settle (module docstring); `runs` are the
    sweep's measurements as sweep_runs.parquet keeps them, `adaptive` names the engine's own
    adaptive arms. An arm's best level, the figure the decision compares across levels, stays open
    while that comparison is (`open_bests`)."""
    adaptive = set(adaptive)
    if runs.empty:
        return []
    table = summarise(runs)
    table = table[(table.status == "ok") & table[OUTPUT_TOK_S].notna()]
    spread = replicate_ratio(runs)
    keep = open_bests(table[~table.arm.isin(adaptive)], runs, spread)
    out: list[Settled] = []
    for c, g in table.groupby("concurrency", sort=True):
        core = g[~g.arm.isin(adaptive)]
        if core.empty:
            continue
        level = int(c)  # type: ignore[call-overload]
        leader = str(core.loc[core[OUTPUT_TOK_S].astype(float).idxmax(), "arm"])
        here = []
        for arm in g.arm.astype(str):
            if arm == leader:
                continue
            lead = arm_lead(runs, leader, level, arm, level)
            if decisive(lead, spread):
                here.append(Settled(arm, level, leader, lead.ratio.median, lead.ratio.n))
        if len(here) == len(g) - 1 and len(g) > 1:
            here.append(Settled(leader, level, leader, 1.0, min(s.rounds for s in here)))
        out += [s for s in here if (s.arm, s.concurrency) not in keep]
    return out


def open_bests(table: pd.DataFrame, runs: pd.DataFrame, spread: float = 1.0) -> set[tuple[str, int]]:
    """The (arm, best level) pairs the decision's own comparison still needs (kit.decide.choose.measured:
    each arm at its best level against the leader at its best): an arm the leader does not yet beat
    outside the noise there, and the leader's best while any such arm is left. A level every other
    arm lost may still be its leader's best: the decision reads that figure against the other arms'
    bests at other levels (a CPU sweep replayed chose n-gram k=1 over plain once plain's best level
    was left at one round)."""
    bests = arm_bests(table)
    if len(bests) < 2:
        return set()
    leader = max(bests, key=lambda b: b.median)
    close = {
        (b.arm, b.concurrency)
        for b in bests
        if b is not leader
        and not decisive(arm_lead(runs, leader.arm, leader.concurrency, b.arm, b.concurrency), spread)
    }
    return close | {(leader.arm, leader.concurrency)} if close else set()


def replicate_ratio(runs: pd.DataFrame) -> float:
    """The largest ratio between measurements of one (arm, level) that the first round already
    repeats: the drift check's start (plain at the top level) and the same arm and level in the
    rounds. A lead read off fewer than three rounds must exceed it as well as the ±10% assumed of an
    arm measured once, or it is the machine's noise, not the arms': on the H100 the 27B shape's
    plain arm at 256 measured 1,727 and 1,732 tok/s (1.003); on this 2-core CPU the demo's plain at 8
    measured 693 then 269 (2.58), and a round-0 lead of 1.71x that the full sweep found inside the
    noise would otherwise have settled the decision. 1.0 where nothing is repeated yet."""
    start = runs[(runs.phase == "start") & (runs.status == "ok") & runs[OUTPUT_TOK_S].notna()]
    if start.empty:
        return 1.0
    arm, level = start.arm.iloc[0], start.concurrency.iloc[0]
    same = runs[(runs.arm == arm) & (runs.concurrency == level) & (runs.status == "ok")]
    values = [float(v) for v in same[OUTPUT_TOK_S].dropna() if float(v) > 0]
    return max(values) / min(values) if len(values) >= 2 else 1.0


def decisive(lead: Lead, spread: float) -> bool:
    """A lead racing acts on: one the decision counts (kit.decide.measure.noise.Lead.counts), and,
    read off fewer than `MIN_PAIRS` rounds, larger than the first round's own repeat (`spread`)."""
    if not lead.counts:
        return False
    r = lead.ratio.median
    return lead.ratio.n >= MIN_PAIRS or max(r, 1 / r) > spread


def race(slots: Iterable[S], closed: Iterable[Settled]) -> tuple[list[S], list[S]]:
    """(the slots still to measure, those skipped): a sweep slot of a settled (arm, level) is
    skipped; the drift check's start and end are always kept. A slot is anything with `phase`,
    `arm.name` and `concurrency` (kit.decide.measure.servers.Slot)."""
    done = {(s.arm, s.concurrency) for s in closed}
    keep: list[S] = []
    skip: list[S] = []
    for slot in slots:
        key = (slot.arm.name, slot.concurrency)  # type: ignore[attr-defined]
        (skip if slot.phase == "sweep" and key in done else keep).append(slot)  # type: ignore[attr-defined]
    return keep, skip


def replay(runs: pd.DataFrame, adaptive: Iterable[str] = ()) -> pd.DataFrame:
    """A recorded sweep (sweep_runs.parquet) as racing would have measured it: round by round, the
    measurements of every (arm, level) settled by the rounds before are dropped (the drift check's
    start and end are kept). The decision read off the result is the one racing reaches; the rows
    dropped are the measurements it saves (docs/decision.md, benchmarks/racing_replay.py)."""
    adaptive = list(adaptive)
    sweep = runs[runs.phase == "sweep"]
    kept = runs[runs.phase != "sweep"]
    closed: set[tuple[str, int]] = set()
    for r in sorted(int(x) for x in sweep["round"].dropna().unique()):
        here = sweep[sweep["round"] == r]
        here = here[[(str(a), int(c)) not in closed for a, c in zip(here.arm, here.concurrency, strict=True)]]
        kept = pd.concat([kept, here], ignore_index=True)
        closed |= {(s.arm, s.concurrency) for s in settle(kept, adaptive)}
    return kept


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


def round_budget(setup: SweepSetup, rows: list[SweepRow], adaptive: set[str]) -> SweepBudget:
    """The budget from the job (`job_budget`), read off the first round's measurements: plain
    decoding's best level and its answers' lengths."""
    runs = runs_frame(rows)
    table = summarise(runs) if not runs.empty else runs
    plain = table[(table.spec_k == 0) & ~table.arm.isin(adaptive)] if len(table) else table
    rate = plain[OUTPUT_TOK_S].astype(float).max() if len(plain) else None
    answers: list[Answer] = [
        a for r in rows if r.get("spec_k") == 0 and r.get("phase") == "sweep" for a in r.get("answers") or []
    ]
    requests, tokens = job_output_tokens(setup.params, setup.folder, answers)
    return job_budget(setup.params, requests, tokens, None if pd.isna(rate) else float(rate))


def runs_frame(rows: list[SweepRow]) -> pd.DataFrame:
    """Measurements as sweep_runs.parquet keeps them, judged for disturbance (as the decision reads
    them)."""
    if not rows:
        return pd.DataFrame(columns=RUN_COLUMNS)
    return flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
