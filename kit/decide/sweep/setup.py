"""What stage 2 hands its measurements, built once (`sweep_setup` -> `SweepSetup`), and what the sweep
hands back (`SweepResult`): the sweep (kit.decide.sweep.sweep), the answers check and the settings
sweep read the same set-up, and what the sweep learnt of itself comes back typed, not as keys
written into a shared dict. Its prompts: a fixed, seeded sample of the plan (`sweep_prompts`) and the
pilot's few per source (`pilot_positions`); how its servers run: kit.decide.sweep.layout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pyarrow.parquet as pq

from kit.artifacts import Decision, ProbeReport, SweepCost
from kit.decide import costmodel as cm
from kit.decide.measure.pilot import PilotFigures, SweepPrompt
from kit.decide.measure.tables import SweepNotes
from kit.decide.sweep.layout import (
    running_cap_sentence,
    running_caps,
    servers_together,
    sweep_kv_tokens,
    sweep_server_params,
)
from kit.engines.flavors import Flavor, flavor
from kit.engines.settings import Arm, Speculation, engine_speculation, sweep_arms
from kit.params import RunParams
from kit.prompts.plan import take_prompts, tools_list
from kit.prompts.prompt_set import ensure_plan
from kit.runfolder import RunFolder


@dataclass(frozen=True)
class SweepSetup:
    """The stage's measurement set-up (kit.decide.run.run_decision builds it)."""

    params: RunParams
    """The run's params, as stage 3 will run."""
    server_params: RunParams
    """The sweep's servers' params: the run's, with the flags the sweep adds (a KV cap when the arms
    share a GPU, the prefix cache off: kit.decide.sweep.layout.sweep_server_params)."""
    folder: RunFolder
    prompts: list[SweepPrompt]
    """The sweep's fixed sample of the plan (kit.decide.sweep.setup.sweep_prompts)."""
    hybrid: bool
    """Whether the model keeps recurrent state (a hybrid model: its servers size pools for it)."""
    together: bool
    """Whether the arms' servers run side by side (kit.decide.sweep.layout.servers_together)."""
    running_caps: dict[int, int] = field(default_factory=dict)
    """k -> running requests an arm's server is capped at where memory holds fewer than the top level."""
    mtp_status: str | None = None
    """The probe's word on MTP weights (present, absent, ...): an MTP arm without them is skipped."""
    pilot_prompts: list[SweepPrompt] = field(default_factory=list)
    """Answered once by plain's server after the sweep, as stage 3 samples (kit.decide.measure.pilot)."""
    pilot_more: list[SweepPrompt] = field(default_factory=list)
    """Sent while the pilot is too short to time."""
    why_together: str = ""
    """Why the servers run side by side or one at a time (decision.json's `noise.servers_why`)."""
    kv_cap_args: list[str] = field(default_factory=list)
    """The flags that cap each server's KV cache when the arms' servers share a GPU."""
    extra_args: list[str] = field(default_factory=list)
    """The flags the sweep adds to stage 3's for its servers (the KV cap, the prefix cache off)."""
    arms: list[Arm] = field(default_factory=list)
    """The sweep's arms (kit.engines.settings.sweep_arms), read once from the params."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Arm name -> why the engine cannot run it here (an MTP arm without MTP weights...)."""
    flavor: Flavor = field(kw_only=True)
    """The engine's flavor (kit.engines.flavors), read once."""
    speculation: Speculation = field(kw_only=True)
    """The speculative arms' algorithm and why they cannot run here (kit.engines.settings.speculation),
    read once: the decision says it as the sweep skipped it."""

    @property
    def engine_title(self) -> str:
        """The engine's name as the reasons say it (`Flavor.title`: SGLang, vLLM...)."""
        return self.flavor.title

    @property
    def runnable(self) -> list[Arm]:
        """The arms the sweep measures."""
        return [a for a in self.arms if a.name not in self.skipped]

    @property
    def label(self) -> str:
        """What this run's speculative arms are called (MTP, n-gram, EAGLE, draft model)."""
        return self.speculation.label

    def notes(self) -> SweepNotes:
        """How the servers were set up, as decision.json's `noise` keeps it."""
        notes = SweepNotes(servers_kv_cap_args=self.kv_cap_args) if self.kv_cap_args else SweepNotes()
        if self.extra_args:
            notes["sweep_extra_args"] = self.extra_args
        if self.running_caps:
            notes["running_caps"] = {str(k): c for k, c in self.running_caps.items()}
        return notes


def sweep_setup(params: RunParams, folder: RunFolder, probe: ProbeReport, arch: Any) -> SweepSetup:
    """The stage's set-up, built once: the sweep's prompts and the pilot's, how the arms' servers run
    (side by side or in turn, memory's running caps, the flags the sweep adds). The engine's flavor
    and the arms are read from the params here, once; what follows is handed them."""
    plan = ensure_plan(params, folder)  # planned once: the sweep's sample and the pilot's read it
    prompts, sample, more = planned_samples(
        plan, params.data.seed, params.decide.num_prompts, params.decide.pilot_per_source
    )
    fl = flavor(params.engine.flavor)
    arms = sweep_arms(params)
    spec = engine_speculation(params.engine, probe.mtp_status)
    together, why, cap = servers_together(
        params,
        probe,
        fl,
        len(arms),
        cm.weight_bytes(arch),
        sweep_kv_tokens(params, prompts, arms, [*prompts, *sample, *more]),
        arch.kv_bytes_per_token(),
        arch.state_bytes_per_seq(),
    )
    server_params, added = sweep_server_params(params, fl, cap)
    return SweepSetup(
        params,
        server_params,
        folder,
        prompts,
        arch.is_hybrid,
        together,
        running_caps(params, probe, arch, prompts, arms, fl),
        probe.mtp_status,
        sample,
        more,
        why_together=why,
        kv_cap_args=list(cap),
        extra_args=added,
        arms=arms,
        skipped={a.name: spec.unavailable for a in arms if a.speculative and spec.unavailable},
        flavor=fl,
        speculation=spec,
    )


def answers_check_setup(params: RunParams, folder: RunFolder, *, hybrid: bool) -> SweepSetup:
    """A set-up for the answers check on its own, outside a sweep (benchmarks/answers_check.py and
    its test): the run's params for its servers as they are, one server at a time, no sweep sample,
    the pilot's prompts (`pilot_prompts`) and the sweep's arms."""
    plan = ensure_plan(params, folder)
    sample = pilot_prompts(plan, params.data.seed, params.decide.pilot_per_source)
    return SweepSetup(
        params,
        params,
        folder,
        [],
        hybrid=hybrid,
        together=False,
        pilot_prompts=sample,
        arms=sweep_arms(params),
        flavor=flavor(params.engine.flavor),
        speculation=engine_speculation(params.engine, None),
    )


def planned_samples(
    path: Path, seed: int, n: int, k: int
) -> tuple[list[SweepPrompt], list[SweepPrompt], list[SweepPrompt]]:
    """The sweep's sample (`sweep_positions`), the pilot's and the pilot's further prompts
    (`pilot_positions`) of the planned prompts at `path`, their rows read in one pass."""
    sweep_at = sweep_positions(path, seed, n)
    pilot_at, more_at = pilot_positions(path, seed, k)
    at = sorted({*sweep_at, *pilot_at, *more_at})
    rows = dict(zip(at, prompts_at(path, at), strict=True))
    return [rows[i] for i in sweep_at], [rows[i] for i in pilot_at], [rows[i] for i in more_at]


def sweep_prompts(path: Path, seed: int, n: int) -> list[SweepPrompt]:
    """A fixed sample of `n` of the planned prompts (`path`: prompts.parquet, kit.prompts.prompt_set.
    ensure_plan) in a shuffle seeded by `seed` (`data.seed`), for every arm of the sweep."""
    return prompts_at(path, sweep_positions(path, seed, n))


def sweep_positions(path: Path, seed: int, n: int) -> list[int]:
    """The positions of `sweep_prompts`' sample, in its order."""
    order = list(range(pq.ParquetFile(path).metadata.num_rows))
    random.Random(seed).shuffle(order)  # shuffle positions: only the sample is read
    return order[:n]


def prompts_at(path: Path, at: list[int]) -> list[SweepPrompt]:
    """The planned prompts at these positions, with their tools parsed for the engine's client."""
    rows = take_prompts(path, at).to_pylist() if at else []
    return [cast(SweepPrompt, {**r, "tools_list": tools_list(r)}) for r in rows]


PILOT_MORE = 2048
"""Further planned prompts the pilot may send while it has lasted under `MIN_PILOT_S` (at the H100's
13,000 tok/s and 64-token answers, 5 s is about 1,000 requests)."""


def pilot_prompts(path: Path, seed: int, k: int) -> list[SweepPrompt]:
    """`k` (`decide.pilot_per_source`) planned prompts of each source, for the pilot that measures the
    run's own output lengths (`pilot_positions`' first list; the further prompts are left unread)."""
    return prompts_at(path, pilot_positions(path, seed, k)[0])


def pilot_positions(path: Path, seed: int, k: int) -> tuple[list[int], list[int]]:
    """(the positions of `k` planned prompts of each source: its first in a shuffle of the plan
    (`path`) seeded by `seed` + 1 (`data.seed`); then of up to `PILOT_MORE` further planned prompts in
    that shuffle, which the pilot sends while it is too short to time), each in its order."""
    if not k:
        return [], []
    sources = pq.read_table(path, columns=["source"]).column("source").to_pylist()
    order = list(range(len(sources)))
    random.Random(seed + 1).shuffle(order)
    taken: dict[str, list[int]] = {}
    for i in order:
        mine = taken.setdefault(sources[i], [])
        if len(mine) < k:
            mine.append(i)
    picked = sorted(i for mine in taken.values() for i in mine)
    chosen = set(picked)
    return picked, [i for i in order if i not in chosen][:PILOT_MORE]


@dataclass(frozen=True)
class SweepResult:
    """What the sweep measured and what it says of how it ran."""

    table: pd.DataFrame
    """sweep.parquet: per (arm, level) the median of its repetitions and its interval."""
    runs: pd.DataFrame
    """sweep_runs.parquet: every measurement."""
    pilot: PilotFigures | None
    """The pilot's figures (None: no pilot ran)."""
    server_start_s: list[float]
    running_lowered: dict[str, list[int]]
    """Per arm started again with fewer running requests: the running requests of each start."""
    resumed: int
    """Measurements of an earlier, stopped run of this sweep kept (0: a fresh sweep)."""
    servers_idle_cpu_pct: float | None
    """Side by side: the share of the CPU the idle servers took between them."""
    servers_held: bool
    """Whether each idle server was paused while another arm was measured."""
    cost: SweepCost
    """decision.json's `sweep_cost`."""

    def notes(self) -> SweepNotes:
        """What the sweep said of how it ran, as decision.json's `noise` keeps it beside the servers'
        flags (an earlier kit's keys: old decisions read the same)."""
        notes = SweepNotes()
        if self.running_lowered:
            notes["running_lowered"] = self.running_lowered
        if self.resumed:
            notes["sweep_resumed"] = self.resumed
        if self.servers_idle_cpu_pct is not None:
            notes.update(servers_idle_cpu_pct=self.servers_idle_cpu_pct, servers_held=self.servers_held)
        return notes


def sweep_reasons(setup: SweepSetup, result: SweepResult) -> list[str]:
    """decision.json's reasons on how the sweep ran: memory's caps, servers started again with fewer
    running requests, a sweep resumed from its journal."""
    out = []
    if setup.running_caps:
        top = max(setup.params.decide.concurrencies)
        out.append(running_cap_sentence(setup.running_caps, top, setup.label))
    for name, starts in result.running_lowered.items():
        out.append(
            f"{name}'s server had no memory for the state of {starts[0]} running requests and was "
            f"started again at {', then '.join(map(str, starts[1:]))}: its levels above that queue"
        )
    if result.resumed:
        out.append(
            f"the sweep went on from a run of it stopped part way ({result.resumed} measurements kept): "
            "its drift check, plain decoding at the top level first and last, spans both"
        )
    return out


def with_sweep_notes(decision: Decision, setup: SweepSetup, result: SweepResult) -> Decision:
    """The decision with how the sweep ran: decision.json's `noise` gains the servers' layout and
    flags and what the sweep said of itself; the reasons, memory's caps, lowered starts, a resume."""
    noise = decision.noise
    if noise is not None:
        extra = {**noise.extra, **setup.notes(), **result.notes()}
        noise = replace(noise, servers_together=setup.together, servers_why=setup.why_together, extra=extra)
    return replace(decision, noise=noise, reasons=[*decision.reasons, *sweep_reasons(setup, result)])
