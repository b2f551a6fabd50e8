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
from collections.abc import Iterable

import pandas as pd

from kit.decide.measure.journal import SweepJournal, sweep_key
from kit.decide.measure.servers import ArmServers, Slot
from kit.decide.measure.slots import SweepLog, pilot_on_plain, run_slots, slot_head, slot_of
from kit.decide.measure.tables import RUN_COLUMNS, SweepRow, flag_slow, write_tables
from kit.decide.sweep.rounds import Race
from kit.decide.sweep.setup import SweepResult, SweepSetup
from kit.engines.settings import Arm
from kit.progress import progress

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


def run_sweep(setup: SweepSetup, fresh: bool = False) -> SweepResult:
    """Measure every arm in interleaved rounds, racing (each round after the first measures only
    what is still open: kit.decide.sweep.limits) within the time budget (kit.decide.sweep.limits); write
    `sweep_runs.parquet` (every measurement) and `sweep.parquet` (per arm and level, with intervals)
    and return them with what the sweep learnt of itself (`SweepResult`). The pilot's prompts are
    answered once by the plain arm's server at the end, as stage 3 samples (kit.decide.measure.pilot), then
    the further ones while the pilot is too short to time: their answers go to
    `sweep_answers.parquet` before the sweep's own. A journal of this sweep left by a run that
    stopped part way is resumed: its measurements count and only the rest are made (`fresh`: it is
    set aside and the sweep starts over)."""
    params, folder = setup.server_params, setup.folder
    d = params.decide
    runnable = setup.runnable
    rows: list[SweepRow] = []
    for arm in setup.arms:
        reason = setup.skipped.get(arm.name)
        if reason:
            rows += [slot_head(arm, c) | {"status": "skipped", "reason": reason} for c in d.concurrencies]
    plan = schedule(runnable, d.concurrencies, d.repetitions, setup.together) if runnable else []
    sweep_log = SweepLog(folder.logs / "sweep.log")
    folder.logs.mkdir(parents=True, exist_ok=True)
    sweep_log.line(
        f"sweep of {len(runnable)} arm(s), {d.repetitions} round(s), servers together: {setup.together}"
    )
    key = sweep_key(params, setup.prompts, [a.name for a in runnable], setup.together, setup.running_caps)
    journal = SweepJournal.open(folder.sweep_journal, key, fresh)
    done = journal.done()
    prior = _resumed(journal, len(done), sweep_log)
    race = Race(setup, runnable, done, sweep_log)
    servers = ArmServers(
        params, folder, runnable, setup.hybrid, setup.together, setup.prompts, setup.running_caps
    )
    servers.crashes.update(journal.crashes())
    servers.crashed.update(journal.given_up)
    kept = len([s for s in plan if slot_of(s) in done])
    bar = progress(total=len(plan), desc="sweep", unit="level", initial=kept)
    piloted, figures = [], None  # the pilot's answers and figures, where it runs
    try:
        if setup.together:
            servers.start_all(runnable)
            if servers.idle_cpu is not None:
                sweep_log.line(
                    f"idle, the servers take {100 * servers.idle_cpu:.0f}% of the CPU between them: "
                    + ("each is paused while another arm is measured" if servers.held else "they stay up")
                )
        measured = [r for r in prior if r["phase"] != "end"]
        new = race.rounds(plan, measured, servers, bar, journal)
        measured += new
        end = [s for s in plan if s.phase == "end" and slot_of(s) not in done]
        redo = redo_slots(
            [r for r in measured if r["round"] < d.repetitions], runnable, setup.together, d.repetitions
        )
        redo, _ = race.drop_settled(redo, measured)
        redo = [s for s in redo if slot_of(s) not in done]
        again = "the disturbed levels are not measured again"
        if redo and race.fits(new, redo, end, servers, again):
            bar.total += len(redo)
            sweep_log.line(f"measuring {len({s.concurrency for s in redo})} disturbed level(s) once more")
            redone = run_slots(redo, servers, setup.prompts, bar, sweep_log, race.t0, journal)
            new += redone
            measured += redone
        ended = [r for r in prior if r["phase"] == "end"]
        finals = run_slots(end, servers, setup.prompts, bar, sweep_log, race.t0, journal)
        new += finals
        rows += measured + ended + finals
        if setup.pilot_prompts and runnable:
            piloted, figures = pilot_on_plain(
                params, servers, runnable, setup.pilot_prompts, setup.pilot_more, sweep_log
            )
    except BaseException:
        journal.stopped(race.spent(len(journal.rows) - len(prior), servers))
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
    wall_s = time.monotonic() - race.t0
    for name, error in servers.failed.items():
        arm = next(a for a in runnable if a.name == name)
        rows += [slot_head(arm, c) | {"status": "failed", "reason": error} for c in d.concurrencies]
    for name, error in servers.crashed.items():  # the levels it never reached
        arm = next(a for a in runnable if a.name == name)
        reached = {r["concurrency"] for r in rows if r.get("arm") == name and r.get("phase") == "sweep"}
        rows += [
            slot_head(arm, c) | {"status": "crashed", "reason": error}
            for c in d.concurrencies
            if c not in reached
        ]
    table, runs = write_tables(rows, folder, servers.crashed, piloted)
    return SweepResult(
        table=table,
        runs=runs,
        pilot=figures,
        server_start_s=[round(x, 1) for x in servers.start_s],
        running_lowered=dict(servers.lowered),
        resumed=len(prior),
        servers_idle_cpu_pct=None if servers.idle_cpu is None else round(100 * servers.idle_cpu, 1),
        servers_held=servers.held,
        cost=race.cost(wall_s, len(new), _rounds(runs, d.repetitions), servers, journal.spent),
    )


def _resumed(journal: SweepJournal, kept: int, sweep_log: SweepLog) -> list[SweepRow]:
    """The measurements an earlier, stopped run of this sweep finished (said in the log); their
    `started_s` stay as they were measured, on that run's clock."""
    if not journal.resumed:
        return []
    sweep_log.line(
        f"resumed: {kept} measurement(s) of an earlier run of this sweep kept"
        + (f"; given up before: {', '.join(journal.given_up)}" if journal.given_up else "")
    )
    return [r.copy() for r in journal.rows]


def _rounds(runs: pd.DataFrame, planned: int) -> int:
    """The planned rounds that measured anything, over every run of a resumed sweep (a disturbed
    level's round measured again is not one: its measurements count in `measurements`)."""
    sweep = runs[(runs.phase == "sweep") & (runs["round"] < planned)]
    return int(sweep["round"].nunique())


def redo_slots(rows: list[SweepRow], arms: list[Arm], together: bool, next_round: int) -> list[Slot]:
    """One more round at each level where a measurement was disturbed, every arm again (so leads stay
    paired by round): set aside, a disturbed repetition must not leave its level one short."""
    if not rows:
        return []
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    hit = sorted({int(c) for c in runs[(runs.phase == "sweep") & runs.disturbed].concurrency})
    return interleaved(arms, hit, [next_round], together)


def finish(setup: SweepSetup) -> None:
    """Stage 2 is written whole (decision.json): the sweep's journal goes, so a later `kit decide`
    measures anew (a run stopped before this goes on from it)."""
    SweepJournal.finish(setup.folder.sweep_journal)
