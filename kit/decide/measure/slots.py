"""One measurement of the sweep at a time: an arm's server at a level, bracketed by what else the
machine did (kit.decide.machine), restarted when it dies (kit.decide.measure.servers), each measurement
journaled as it ends (kit.decide.measure.journal) and said in `logs/sweep.log`. The sweep
(kit.decide.sweep), its rounds (kit.decide.sweep.rounds) and the settings sweep measure through here."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kit.asyncrun import run_coroutine
from kit.columns import OUTPUT_TOK_S
from kit.decide.machine.watch import MachineReading, interference
from kit.decide.measure.journal import SweepJournal
from kit.decide.measure.level import arm_client, measure_level
from kit.decide.measure.pilot import Answer, PilotFigures, SweepPrompt, pilot
from kit.decide.measure.servers import ArmServers, Slot
from kit.decide.measure.tables import LevelFigures, SweepRow, crash_fields
from kit.engines.settings import Arm
from kit.errors import EngineError
from kit.params import RunParams


@dataclass
class SweepLog:
    """`logs/sweep.log`: one line as each measurement starts and ends (what the sweep is doing now)."""

    path: Any

    def line(self, text: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def slot_of(slot: Slot) -> tuple[str, int, str, int]:
    """A slot as the journal keys its measurement (kit.decide.measure.journal.slot_key)."""
    return (slot.phase, slot.round, slot.arm.name, slot.concurrency)


def slot_head(arm: Arm, c: int) -> SweepRow:
    """The keys that name a measurement of `arm` at level `c` (a sweep row's head)."""
    return SweepRow(arm=arm.name, algorithm=arm.algorithm, spec_k=arm.k, concurrency=c, phase="sweep")


def run_slots(
    slots: list[Slot],
    servers: ArmServers,
    prompts: list[SweepPrompt],
    bar: Any,
    sweep_log: SweepLog,
    t0: float,
    journal: SweepJournal | None = None,
    sampled: bool = False,
) -> list[SweepRow]:
    """Measure `slots` in order (`sampled`: as stage 3 samples, else greedy), restarting a server
    that dies (kit.decide.measure.servers.ArmServers.crash) and journaling each measurement."""
    rows: list[SweepRow] = []
    for slot in slots:
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
    ask = servers.asks[slot.arm.name]
    what = f"round {slot.round} {slot.phase} {slot.arm.name} at {slot.concurrency}"
    sweep_log.line(f"start {what}")
    near = servers.neighbours(slot.arm)
    before = MachineReading.now(servers.pids(), near)
    started = time.monotonic() - t0
    try:
        level = measure_level(ask, server, prompts, slot.concurrency, sampled)
        measured = run_coroutine(level)
    except EngineError as e:  # no answer to the level's scrapes: the arm's measurement failed
        measured = LevelFigures(status="failed", reason=str(e)[:2000], concurrency=slot.concurrency)
    seen = interference(before, servers.pids(), near)
    row = slot_head(slot.arm, slot.concurrency) | measured | SweepRow(round=slot.round, phase=slot.phase)
    tok_s = measured.get(OUTPUT_TOK_S)
    sweep_log.line(
        f"end {what}: {tok_s or 0:.0f} tok/s, others took {100 * seen.foreign_cpu:.0f}% of the CPU, "
        f"the other arms' servers {100 * seen.neighbour_cpu:.0f}%, CPU canary {seen.canary_ms:.1f} ms"
        + (f" (disturbed: {seen.why})" if seen.disturbed else "")
        + (" (its server died)" if measured.get("status") == "crashed" else "")
    )
    return {**row, "started_s": started, **seen.as_dict()}


def pilot_on_plain(
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
        async with arm_client(servers.asks[plain.name], server) as client:
            return await pilot(params, client, prompts, more)

    answers, figures = run_coroutine(go())
    sweep_log.line(
        f"pilot: {figures['answered']} of {figures['sent']} answered "
        f"({figures['cut']} cut at their max_tokens), "
        f"{figures['output_tokens']} tokens in {figures['seconds']:.1f} s"
    )
    return answers, figures
