"""The checks around stage 2's choice, in the order the stage runs them: before the sweep, what the
installed engine cannot run is refused (a settings sweep's flags, an adaptive arm); after it, the
decision is made from the sweep's core (the engine's own adaptive arm kept apart) and its speculative
pick's sampled answers are checked against plain decoding's; then the adaptive arm is compared with
the pick and the settings sweep measures the pick's engine settings.

    refuse_what_cannot_run(params)
    checked = checked_decision(setup, result, model)   # .decision, .sweep, .runs, .adaptive
    decision = compared(setup, checked, decision)
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kit.artifacts import Decision
from kit.decide.checks.answers import answers_checked
from kit.decide.checks.settings_choice import settings_sweep
from kit.decide.checks.settings_sweep import check_backends
from kit.decide.choose.scenario import RunScenario
from kit.decide.measure.adaptive import AdaptiveFrames, check_adaptive, split, with_adaptive
from kit.decide.sweep.setup import SweepResult, SweepSetup
from kit.params import RunParams


def refuse_what_cannot_run(params: RunParams) -> None:
    """Said before measuring: a settings sweep the installed engine cannot launch, an adaptive arm it
    cannot run (kit.errors.ParamsError with what to do)."""
    check_backends(params)
    check_adaptive(params)


@dataclass(frozen=True)
class Checked:
    """The decision after the answers check, and the tables it was read from (the adaptive arm's
    rows apart: the decision never chooses it)."""

    decision: Decision
    sweep: pd.DataFrame
    runs: pd.DataFrame | None
    adaptive: AdaptiveFrames | None


def checked_decision(setup: SweepSetup, result: SweepResult, model: RunScenario) -> Checked:
    """The decision from the sweep's core, made again without any speculative pick whose sampled
    answers differ from plain decoding's (kit.decide.checks.answers)."""
    sweep, runs, adaptive = split(result.table, result.runs)
    decision = model.decide(sweep, runs)
    sweep, decision = answers_checked(setup, sweep, decision, lambda table: model.decide(table, runs))
    return Checked(decision, sweep, runs, adaptive)


def compared(setup: SweepSetup, checked: Checked, decision: Decision) -> Decision:
    """The decision with the engine's own adaptive arm compared with its pick per level, then the
    settings sweep's verdict (each where the params ask for it)."""
    decision = with_adaptive(
        decision, checked.adaptive, checked.sweep, checked.runs, setup.engine_title, setup.label
    )
    return settings_sweep(setup, decision)
