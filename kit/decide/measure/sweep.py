"""The measured sweep: the real engine per arm, at a ladder of concurrencies, in interleaved rounds.

Each arm (plain; speculative with draft length k; the engine's own adaptive speculation up to k,
`decide.adaptive_k`) runs on a server launched with that arm's flags and warmed up; each (arm,
level) is then measured `decide.repetitions` times, in rounds that interleave the arms (plain, k1,
k2, ... then k2, k1, plain, ...: a slow minute slows every arm alike), and plain decoding at the top
level is measured once more at the very start and the very end, to see whether the machine drifted
(kit.decide.measure.noise). Where the arms' servers fit in memory together (a CPU engine with a small model)
they stay up side by side and a round costs requests; otherwise each round starts each arm's server
in turn (`decide.servers`).

Each measurement is written to the sweep's journal as it ends (kit.decide.measure.journal): a sweep
stopped part way goes on where it stopped when `kit decide` runs again with the same settings.

Every measurement is bracketed by readings of what else the machine did (kit.decide.machine.watch); a
level where one was disturbed is measured once more, every arm again, and the disturbed
measurement is set aside while two undisturbed repetitions of its level remain (where fewer remain,
a lead read off it does not count: kit.decide.measure.noise). `sweep_runs.parquet` keeps every measurement;
`sweep.parquet` one row per (arm, level): the median, its interval and how many repetitions back
it. An arm the engine cannot run is a row with status `skipped` and the reason; one whose server
would not start, or whose requests failed, is `failed` with the error. Accept length comes from the
responses where the engine puts it there (SGLang), else from the change of its `/metrics` counters
over the level (vLLM).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kit.asyncrun import run_coroutine
from kit.columns import OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO, SPEC_K
from kit.decide.machine.watch import MachineReading, interference
from kit.decide.measure.adaptive import mark
from kit.decide.measure.journal import SweepJournal, sweep_key
from kit.decide.measure.level import arm_client, measure_level
from kit.decide.measure.pilot import ANSWER_COLUMNS, Answer, PilotFigures, SweepPrompt, pilot
from kit.decide.measure.servers import ArmServers, Slot
from kit.decide.measure.tables import (
    RUN_COLUMNS,
    LevelFigures,
    SweepNotes,
    SweepRow,
    crash_fields,
    flag_slow,
    summarise,
)
from kit.engines.settings import Arm, engine_unavailable_reason, sweep_arms
from kit.errors import EngineError
from kit.params import RunParams
from kit.progress import progress
from kit.runfolder import RunFolder

log = logging.getLogger(__name__)


def schedule(arms: list[Arm], levels: list[int], rounds: int, together: bool) -> list[Slot]:
    """The order of measurements: a drift check first and last (plain at the top level), and
    rounds that interleave the arms, reversing their order every other round (ABBA), so a steady
    drift weighs on every arm alike. Servers side by side: arms alternate at each level; one
    server at a time: each arm measures all its levels before the next one starts."""
    top = max(levels)
    plain = next((a for a in arms if not a.speculative), arms[0])
    rounds_ = interleaved(arms, levels, range(rounds), together)
    return [Slot(0, plain, top, "start"), *rounds_, Slot(rounds - 1, plain, top, "end")]


def interleaved(arms: list[Arm], levels: list[int], rounds: Iterable[int], together: bool) -> list[Slot]:
    """The measurements of `rounds`, the arms' order reversed in every odd round (ABBA). Servers side
    by side: the arms alternate at each level; one at a time: each arm measures all its levels
    before the next one's server starts."""
    slots: list[Slot] = []
    for r in rounds:
        order = arms if r % 2 == 0 else arms[::-1]
        if together:
            slots += [Slot(r, arm, c) for c in levels for arm in order]
        else:
            slots += [Slot(r, arm, c) for arm in order for c in levels]
    return slots


def skip_reason(params: RunParams, arm: Arm, mtp_status: str | None) -> str | None:
    """Why `arm` cannot run here, or None when it can."""
    return None if not arm.speculative else engine_unavailable_reason(params.engine, mtp_status)


def save_answers(rows: list[SweepRow], path: Any, pilot: list[Answer] | None = None) -> None:
    """One answer per prompt: the pilot's (sampled as stage 3 samples, at its output budget), else
    the plain arm's in the sweep (greedy: every level answers a prompt alike, cut at
    `decide.max_tokens`)."""
    seen: dict[str | None, Answer] = {a["id"]: a for a in pilot or []}
    for row in rows:
        if row.get(SPEC_K) == 0:
            for a in row.get("answers") or []:
                seen.setdefault(a["id"], a)
    pd.DataFrame(list(seen.values()), columns=ANSWER_COLUMNS).to_parquet(path, index=False)


def _pilot(
    params: RunParams,
    servers: ArmServers,
    arms: list[Arm],
    prompts: list[SweepPrompt],
    more: list[SweepPrompt],
    sweep_log: SweepLog,
) -> tuple[list[Answer], PilotFigures]:
    """The pilot on the plain arm's server (kit.decide.measure.pilot); nothing when it will not serve."""
    plain = next((a for a in arms if not a.speculative), None)
    server = servers.get(plain) if plain is not None else None
    if server is None:
        return [], PilotFigures(sent=0, why="the plain arm's server was not up")
    sweep_log.line(f"pilot: {len(prompts)} prompts as stage 3 samples them, on {plain.name}")

    async def go() -> tuple[list[Answer], PilotFigures]:
        async with arm_client(servers.arm_params[plain.name], server) as client:
            return await pilot(params, client, prompts, more)

    answers, figures = run_coroutine(go())
    sweep_log.line(
        f"pilot: {figures['answered']} of {figures['sent']} answered "
        f"({figures['cut']} cut at their max_tokens), "
        f"{figures['output_tokens']} tokens in {figures['seconds']:.1f} s"
    )
    return answers, figures


@dataclass
class SweepLog:
    """`logs/sweep.log`: one line as each measurement starts and ends (what the sweep is doing now)."""

    path: Any

    def line(self, text: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def run_sweep(
    params: RunParams,
    folder: RunFolder,
    prompts: list[SweepPrompt],
    mtp_status: str | None,
    hybrid: bool = False,
    together: bool = False,
    notes: SweepNotes | None = None,
    running_caps: dict[int, int] | None = None,
    pilot_prompts: list[SweepPrompt] | None = None,
    pilot_more: list[SweepPrompt] | None = None,
    fresh: bool = False,
) -> pd.DataFrame:
    """Measure every arm in interleaved rounds; write `sweep_runs.parquet` (every measurement) and
    `sweep.parquet` (per arm and level, with intervals); return the per-level table. `notes` receives
    how the servers ran side by side (`servers_idle_cpu_pct`, `servers_held`); `running_caps` (k ->
    requests) caps the servers of arms that memory cannot give the top level; `pilot_prompts` are
    answered once by the plain arm's server at the end, as stage 3 samples (kit.decide.measure.pilot), then
    `pilot_more` while the pilot is too short to time: their answers go to `sweep_answers.parquet`
    before the sweep's own, and `notes["pilot"]` says how it went. A journal of this sweep left by a
    run that stopped part way is resumed: its measurements count and only the rest are made (`fresh`:
    it is set aside and the sweep starts over)."""
    d = params.decide
    arms = sweep_arms(params)
    runnable = [a for a in arms if not skip_reason(params, a, mtp_status)]
    rows: list[SweepRow] = []
    piloted: list[Answer] = []
    for arm in arms:
        reason = skip_reason(params, arm, mtp_status)
        if reason:
            rows += [_head(arm, c) | {"status": "skipped", "reason": reason} for c in d.concurrencies]
    slots = schedule(runnable, d.concurrencies, d.repetitions, together) if runnable else []
    sweep_log = SweepLog(folder.logs / "sweep.log")
    folder.logs.mkdir(parents=True, exist_ok=True)
    sweep_log.line(f"sweep of {len(runnable)} arm(s), {d.repetitions} round(s), servers together: {together}")
    key = sweep_key(params, prompts, [a.name for a in runnable], together, running_caps or {})
    journal = SweepJournal.open(folder.sweep_journal, key, fresh)
    servers = ArmServers(params, folder, runnable, hybrid, together, prompts, running_caps)
    servers.crashes.update(journal.crashes())
    servers.crashed.update(journal.given_up)
    done = journal.done()
    prior = _resumed(journal, len(done), sweep_log, notes)
    left = [s for s in slots if slot_of(s) not in done]
    bar = progress(total=len(slots), desc="sweep", unit="level", initial=len(slots) - len(left))
    t0 = time.monotonic()
    try:
        if together:
            servers.start_all(runnable)
            if servers.idle_cpu is not None:
                sweep_log.line(
                    f"idle, the servers take {100 * servers.idle_cpu:.0f}% of the CPU between them: "
                    + ("each is paused while another arm is measured" if servers.held else "they stay up")
                )
        end = [s for s in left if s.phase == "end"]
        new = run_slots(
            [s for s in left if s.phase != "end"],
            servers,
            prompts,
            bar,
            sweep_log,
            d.time_budget_s,
            t0,
            journal,
        )
        measured = [r for r in prior if r["phase"] != "end"] + new
        redo = redo_slots(
            [r for r in measured if r["round"] < d.repetitions], runnable, together, d.repetitions
        )
        redo = [s for s in redo if slot_of(s) not in done]
        if redo and _fits(new, d.time_budget_s, t0, redo, end, servers, sweep_log):
            bar.total += len(redo)
            sweep_log.line(f"measuring {len({s.concurrency for s in redo})} disturbed level(s) once more")
            measured += run_slots(redo, servers, prompts, bar, sweep_log, None, t0, journal)
        ended = [r for r in prior if r["phase"] == "end"]
        rows += measured + ended + run_slots(end, servers, prompts, bar, sweep_log, None, t0, journal)
        if pilot_prompts and runnable:
            piloted, figures = _pilot(params, servers, runnable, pilot_prompts, pilot_more or [], sweep_log)
            if notes is not None:
                notes["pilot"] = figures
    except BaseException:
        kept = journal.kept()  # what is on disk: the interrupt may have cut a line's count short
        log.warning(
            "the sweep stopped: %d measurement(s) are kept in %s; run kit decide again with the same "
            "params to go on from them (kit decide --fresh starts over)",
            kept,
            journal.path,
        )
        raise
    finally:
        servers.stop_all()
        bar.close()
    if notes is not None and servers.idle_cpu is not None:
        notes.update(servers_idle_cpu_pct=round(100 * servers.idle_cpu, 1), servers_held=servers.held)
    for name, error in servers.failed.items():
        arm = next(a for a in runnable if a.name == name)
        rows += [_head(arm, c) | {"status": "failed", "reason": error} for c in d.concurrencies]
    for name, error in servers.crashed.items():  # the levels it never reached
        arm = next(a for a in runnable if a.name == name)
        reached = {r["concurrency"] for r in rows if r.get("arm") == name and r.get("phase") == "sweep"}
        rows += [
            _head(arm, c) | {"status": "crashed", "reason": error}
            for c in d.concurrencies
            if c not in reached
        ]
    save_answers(rows, folder.sweep_answers, piloted)
    if notes is not None:
        notes["server_start_s"] = [round(x, 1) for x in servers.start_s]
        if servers.lowered:
            notes["running_lowered"] = servers.lowered
    runs = mark(flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS)))
    runs.to_parquet(folder.sweep_runs, index=False)
    table = mark(given_up(summarise(runs), servers.crashed))  # mark: an adaptive arm's rows
    table.to_parquet(folder.sweep, index=False)
    return table


def slot_of(slot: Slot) -> tuple[str, int, str, int]:
    """A slot as the journal keys its measurement (kit.decide.measure.journal.slot_key)."""
    return (slot.phase, slot.round, slot.arm.name, slot.concurrency)


def _resumed(
    journal: SweepJournal, kept: int, sweep_log: SweepLog, notes: SweepNotes | None
) -> list[SweepRow]:
    """The measurements an earlier, stopped run of this sweep finished (said in the log and in
    `notes["sweep_resumed"]`); their `started_s` stay as they were measured, on that run's clock."""
    if not journal.resumed:
        return []
    sweep_log.line(
        f"resumed: {kept} measurement(s) of an earlier run of this sweep kept"
        + (f"; given up before: {', '.join(journal.given_up)}" if journal.given_up else "")
    )
    if notes is not None:
        notes["sweep_resumed"] = kept
    return [r.copy() for r in journal.rows]


def given_up(table: pd.DataFrame, crashed: dict[str, str]) -> pd.DataFrame:
    """The per-level table with every level of an arm whose server kept dying marked `crashed` (its
    reason: the last crash and what to try) and no figure: such an arm is never chosen, whatever
    levels it ran before it died, since stage 3 would meet the same crash at full load (what those
    levels measured stays in sweep_runs.parquet)."""
    table = table.copy()
    for name, why in crashed.items():
        mine = table.arm == name
        table.loc[mine, "status"] = "crashed"
        table.loc[mine, "reason"] = why
        table.loc[mine, [OUTPUT_TOK_S, OUTPUT_TOK_S_LO, OUTPUT_TOK_S_HI]] = None
    return table


def _head(arm: Arm, c: int) -> SweepRow:
    return SweepRow(arm=arm.name, algorithm=arm.algorithm, spec_k=arm.k, concurrency=c, phase="sweep")


def redo_slots(rows: list[SweepRow], arms: list[Arm], together: bool, next_round: int) -> list[Slot]:
    """One more round at each level where a measurement was disturbed, every arm again (so leads stay
    paired by round): set aside, a disturbed repetition must not leave its level one short."""
    if not rows:
        return []
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    hit = sorted({int(c) for c in runs[(runs.phase == "sweep") & runs.disturbed].concurrency})
    return interleaved(arms, hit, [next_round], together)


def _fits(
    rows: list[SweepRow],
    budget: float | None,
    t0: float,
    redo: list[Slot],
    end: list[Slot],
    servers: ArmServers,
    sweep_log: SweepLog,
) -> bool:
    """Whether measuring `redo` again, then the end check, fits in the time budget, at the sweep's
    pace so far: its levels' mean time, plus a server start (their mean so far) for each change of
    arm when the servers run one at a time. On the H200 a Qwen3-32B server took ~95 s to start and
    a level ~11 s: two disturbed levels cost three restarts, not two levels' time."""
    if budget is None or not rows:
        return True
    elapsed = time.monotonic() - t0
    starting = sum(servers.start_s)
    per_level = max(elapsed - starting, 0.0) / len(rows)
    per_start = starting / len(servers.start_s) if servers.start_s else 0.0
    with_redo = (len(redo) + len(end)) * per_level + servers.starts_for(redo + end) * per_start
    if elapsed + with_redo <= budget:
        return True
    sweep_log.line(
        f"time budget {budget:g} s: the disturbed levels are not measured again "
        f"(about {with_redo:.0f} s more with the end check, {elapsed:.0f} s spent)"
    )
    return False


def run_slots(
    slots: list[Slot],
    servers: ArmServers,
    prompts: list[SweepPrompt],
    bar: Any,
    sweep_log: SweepLog,
    budget: float | None,
    t0: float,
    journal: SweepJournal | None = None,
    sampled: bool = False,
) -> list[SweepRow]:
    """Measure `slots` in order (`sampled`: as stage 3 samples, else greedy), restarting a server
    that dies (kit.decide.measure.servers.ArmServers.crash) and journaling each measurement."""
    rows: list[SweepRow] = []
    round_started: dict[int, float] = {}
    first_start = (lambda: servers.start_s[0] if servers.start_s else 0.0) if budget is not None else None
    for slot in _within_budget(slots, t0, budget, round_started, sweep_log, first_start):
        bar.update(1)
        while (server := servers.get(slot.arm)) is not None:
            row = _run_slot(slot, server, servers, prompts, sweep_log, t0, sampled)
            rows.append(row)
            if row["status"] != "crashed":
                if journal is not None:
                    journal.add(row)
                break
            crash, again = servers.crash(slot.arm, row.get("crash_in_flight"))
            row.update(crash_fields(crash), restarted=again)
            row["reason"] = crash.sentence(f"{slot.arm.name}'s server") if crash else "the server died"
            if journal is not None:
                journal.add(row)
                if not again:
                    journal.give_up(slot.arm.name, servers.crashed[slot.arm.name])
            sweep_log.line(
                f"crashed round {slot.round} {slot.phase} {slot.arm.name} at {slot.concurrency}: "
                + f"{row['reason']}; "
                + ("restarting it to measure the level again" if again else "the arm is given up")
            )
    return rows


def _run_slot(
    slot: Slot,
    server: Any,
    servers: ArmServers,
    prompts: list[SweepPrompt],
    sweep_log: SweepLog,
    t0: float,
    sampled: bool = False,
) -> SweepRow:
    """One measurement, bracketed by what else the machine did."""
    p = servers.arm_params[slot.arm.name]
    what = f"round {slot.round} {slot.phase} {slot.arm.name} at {slot.concurrency}"
    sweep_log.line(f"start {what}")
    near = servers.neighbours(slot.arm)
    before = MachineReading.now(servers.pids(), near)
    started = time.monotonic() - t0
    try:
        measured = run_coroutine(measure_level(p, server, prompts, slot.concurrency, sampled))
    except EngineError as e:  # no answer to the level's scrapes: the arm's measurement failed
        measured = LevelFigures(status="failed", reason=str(e)[:2000], concurrency=slot.concurrency)
    seen = interference(before, servers.pids(), near)
    row = _head(slot.arm, slot.concurrency) | measured | SweepRow(round=slot.round, phase=slot.phase)
    tok_s = measured.get(OUTPUT_TOK_S)
    sweep_log.line(
        f"end {what}: {tok_s or 0:.0f} tok/s, others took {100 * seen.foreign_cpu:.0f}% of the CPU, "
        f"the other arms' servers {100 * seen.neighbour_cpu:.0f}%, CPU canary {seen.canary_ms:.1f} ms"
        + (f" (disturbed: {seen.why})" if seen.disturbed else "")
        + (" (its server died)" if measured.get("status") == "crashed" else "")
    )
    return {**row, "started_s": started, **seen.as_dict()}


def _within_budget(
    slots: list[Slot],
    t0: float,
    budget: float | None,
    started: dict[int, float],
    sweep_log: SweepLog,
    first_start: Callable[[], float] | None = None,
) -> Iterator[Slot]:
    """The slots, until starting another round would overrun `budget` seconds (the first round and
    the end check always run; the rounds left out are said in the log and in decision.json). A
    round's pace leaves out the first server start (`first_start`: its seconds), which no later
    round pays again: on the H200 three servers side by side took 170 s to come up and a round of
    levels ~110 s, so with the start counted in the pace a 400 s budget allowed one round of two
    that fit."""
    for slot in slots:
        if slot.phase == "sweep" and slot.round not in started:
            now = time.monotonic() - t0
            if budget is not None and started:  # the pace of the rounds run here (a resumed sweep's
                once = first_start() if first_start else 0.0  # earlier ones cost this run nothing)
                per_round = max(now - once, 0.0) / len(started)
                if now + per_round > budget:
                    sweep_log.line(f"time budget {budget:g} s: stopping after {slot.round} round(s)")
                    log.warning(
                        "decide.time_budget_s (%g s) allows %d round(s) of the sweep", budget, slot.round
                    )
                    yield from (s for s in slots if s.phase == "end")
                    return
            started[slot.round] = now
        yield slot
