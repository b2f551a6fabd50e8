"""What a run's forecast rests on, read from the run: the planned requests, how stage 3 will hold
them (its running cap per replica, replicas, start-up), the pilot's answers. The arithmetic that
turns them into hours is kit.decide.forecast.job; the what-if of notebook 02 (kit.decide.forecast.jobhours)
changes the plan's size and the replicas of a `ForecastInputs` and asks again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from kit.artifacts import Decision, Forecast, LadderPoint, Noise, SweepCost
from kit.decide.choose.reasons import racing_sentences, sweep_cost_sentence
from kit.decide.forecast.history import MIN_RUNS, History, judged_history, widened_arm
from kit.decide.forecast.job import JobSettings, PlanLengths, forecast_job, sentence
from kit.decide.measure.pilot import PilotFigures
from kit.engines.capacity import launched_capacity
from kit.engines.flavors import flavor, server_env
from kit.engines.launcher import discover
from kit.params import RunParams
from kit.probe.gpu import nvml_gpus
from kit.prompts.lengths import LengthModel, run_length_model
from kit.prompts.prompt_set import ensure_plan
from kit.runfolder import RunFolder


def plan_lengths(params: RunParams, folder: RunFolder) -> PlanLengths:
    """The requests stage 3 will send: the plan's prompts (its first `generate.limit`), each
    `generate.sampling.n` times."""
    table = pq.read_table(ensure_plan(params, folder), columns=["source", "prompt_tokens"])
    if params.generate.limit is not None:
        table = table.slice(0, params.generate.limit)
    return PlanLengths.of(
        table.column("source").to_pylist(),
        [x if x is not None else np.nan for x in table.column("prompt_tokens").to_pylist()],
        params.generate.sampling.n,
    )


def job_settings(
    params: RunParams, decision: Decision, start_s: list[float] | None, launched: int | None = None
) -> JobSettings:
    """How stage 3 will run each arm (per replica): the params' running cap; for the chosen arm the
    decision's; else the cap its sweep server ran at (the table's `engine_cap`); else `launched`,
    what stage 3 reads from the launch flag or the flavor's default, per replica; else what memory
    holds (`mem_max_running`: kit.memoryplan.running_capacity, the figure the sweep's caps are);
    never more than `generate.concurrency` when it is set."""
    eng = params.engine
    chosen = decision.arm.name if decision.arm is not None else None
    decided = decision.engine_settings.max_running_requests
    capacity = {}
    for row in decision.table:
        own = decided if row.arm == chosen else None
        held = eng.max_running_requests or own or row.value("engine_cap") or launched or row.mem_max_running
        if params.generate.concurrency:
            held = min(held, params.generate.concurrency) if held else params.generate.concurrency
        if held:
            capacity[row.arm] = int(held)
    starts = sorted(start_s or [])
    return JobSettings(
        capacity=capacity,
        replicas=eng.replicas,
        gpus_per_replica=max(1, eng.tp_size * eng.dp_size),
        startup_s=starts[len(starts) // 2] if starts else 0.0,
        gpu_name=decision.hardware.get("name"),
    )


@dataclass(frozen=True)
class ForecastInputs:
    """Everything a run's forecast rests on, read once: the what-if changes `plan` and `job` only."""

    plan: PlanLengths
    model: LengthModel
    table: list[LadderPoint]
    job: JobSettings
    chosen: str | None
    spec_label: str
    pilot: PilotFigures | None
    pilot_lengths: np.ndarray
    noise: Noise | None = None
    history: History | None = None
    """The comparable judged runs beside this one (kit.decide.forecast.history): None, not read."""

    def forecast(self, requests: int | None = None, replicas: int | None = None) -> Forecast | None:
        """The forecast for the plan as it is, or for `requests` requests of its mix on `replicas`."""
        plan = self.plan if requests in (None, len(self.plan)) else self.plan.scaled(int(requests))
        job = self.job if replicas is None else replace(self.job, replicas=int(replicas))
        f = forecast_job(
            plan,
            self.model,
            self.table,
            job,
            self.chosen,
            self.spec_label,
            self.pilot,
            self.pilot_lengths,
            self.noise,
        )
        return with_history(f, self.history) if f is not None else None


def forecast_inputs(
    params: RunParams,
    folder: RunFolder,
    decision: Decision,
    spec_label: str,
    pilot: PilotFigures | None = None,
    start_s: list[float] | None = None,
) -> ForecastInputs:
    """A run's forecast inputs from its params, decision and stage 2's answers (`pilot`: the pilot's
    figures; `start_s`: the sweep's server starts)."""
    return ForecastInputs(
        plan=plan_lengths(params, folder),
        model=run_length_model(params, folder, made=False),
        table=decision.table,
        job=job_settings(params, decision, start_s, launched_per_replica(params)),
        chosen=decision.arm.name if decision.arm is not None else None,
        spec_label=spec_label,
        pilot=pilot,
        pilot_lengths=pilot_lengths(folder),
        noise=decision.noise,
        history=judged_history(params, folder, decision),
    )


def launched_per_replica(params: RunParams) -> int | None:
    """The requests one replica runs at once as stage 3 will read it before /server_info: the launch
    flag, else the flavor's default for this install and device (vLLM's CPU build: 128 a server;
    kit.engines.capacity), None where the flavor has none (SGLang then says its own at start)."""
    eng = params.engine
    found = discover(params.engine_python, flavor(eng.flavor), env={**os.environ, **server_env(params)})
    total = launched_capacity(eng, found.distribution if found else None, nvml_gpus).total
    return max(1, total // max(eng.replicas, 1)) if total else None


def pilot_lengths(folder: RunFolder) -> np.ndarray:
    """The pilot's answers' lengths in the order it sent them (sweep_answers.parquet)."""
    if not folder.sweep_answers.exists():
        return np.array([])
    answers = pd.read_parquet(folder.sweep_answers)
    if "pilot" not in answers:
        return np.array([])
    mine = answers[answers["pilot"].fillna(False).astype(bool)]
    return mine.completion_tokens.fillna(0).to_numpy(dtype=float)


def with_history(f: Forecast, history: History | None) -> Forecast:
    """`f` with where its interval's width came from (`interval_from`, `history`) and, with enough
    comparable judged runs, every arm's interval widened by their errors (`sentence` follows)."""
    if history is None:
        return f
    n, q = len(history.errors_pct), history.quantile()
    if q is None:
        note = (
            f"the interval carries the sweep's noise only: {n} judged run(s) of this engine, model and "
            f"machine under the outputs root, {MIN_RUNS} would widen it by their wall-time errors"
        )
        f = replace(f, interval_from="the sweep's noise", history=history.said(), notes=[*f.notes, note])
    else:
        gpus = f.replicas * f.gpus_per_replica
        arms = [widened_arm(a, q, gpus) for a in f.arms]
        note = (
            f"the interval holds at least ±{100 * q:.0f}% (as error over the actual): the "
            f"{history.rank}th smallest of the |wall-time errors| of {n} judged runs of this engine, "
            "model and machine under the outputs root (split conformal, 80%)"
        )
        f = replace(
            f,
            arms=arms,
            interval_from=f"the sweep's noise and {n} judged runs' errors",
            history=history.said(),
            notes=[*f.notes, note],
        )
    return replace(f, sentence=sentence(f))


def with_forecast(
    params: RunParams,
    folder: RunFolder,
    decision: Decision,
    spec_label: str,
    pilot: PilotFigures | None,
    start_s: list[float] | None,
    cost: SweepCost | None = None,
) -> Decision:
    """The decision with stage 3 in hours per arm (its `forecast` and a reason), then what the sweep
    cost beside what the decision saves on this job (`sweep_cost`, its reasons)."""
    forecast = forecast_inputs(params, folder, decision, spec_label, pilot, start_s).forecast()
    if forecast is not None:
        decision = replace(
            decision, forecast=forecast, reasons=[*decision.reasons, f"forecast: {forecast.sentence}"]
        )
    if cost is None:
        return decision
    lines = [*racing_sentences(cost), sweep_cost_sentence(cost, decision.forecast)]
    return replace(decision, sweep_cost=cost, reasons=[*decision.reasons, *lines])
