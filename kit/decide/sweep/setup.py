"""What stage 2 hands its measurements, built once (`SweepSetup`), and what the sweep hands back
(`SweepResult`): the sweep (kit.decide.sweep), the answers check and the settings sweep read the same
set-up, and what the sweep learnt of itself comes back typed, not as keys written into a shared dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from kit.artifacts import SweepCost
from kit.decide.measure.pilot import PilotFigures, SweepPrompt
from kit.params import RunParams
from kit.runfolder import RunFolder


@dataclass(frozen=True)
class SweepSetup:
    """The stage's measurement set-up (kit.decide.run.run_decision builds it)."""

    params: RunParams
    """The run's params, as stage 3 will run."""
    server_params: RunParams
    """The sweep's servers' params: the run's, with the flags the sweep adds (a KV cap when the arms
    share a GPU, the prefix cache off: kit.decide.run.sweep_server_params)."""
    folder: RunFolder
    prompts: list[SweepPrompt]
    """The sweep's fixed sample of the plan (kit.decide.run.sweep_prompts)."""
    hybrid: bool
    """Whether the model keeps recurrent state (a hybrid model: its servers size pools for it)."""
    together: bool
    """Whether the arms' servers run side by side (kit.decide.run.servers_together)."""
    running_caps: dict[int, int] = field(default_factory=dict)
    """k -> running requests an arm's server is capped at where memory holds fewer than the top level."""
    mtp_status: str | None = None
    """The probe's word on MTP weights (present, absent, ...): an MTP arm without them is skipped."""
    pilot_prompts: list[SweepPrompt] = field(default_factory=list)
    """Answered once by plain's server after the sweep, as stage 3 samples (kit.decide.measure.pilot)."""
    pilot_more: list[SweepPrompt] = field(default_factory=list)
    """Sent while the pilot is too short to time."""


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
