"""Stage 2: probe facts + measured sweep + cost model -> decision.json (its display:
kit.decide.views.notebook). The steps, each in the subpackage that owns it: the checks that refuse
what cannot run, the sweep's set-up and the sweep (kit.decide.sweep), the cost model's scenario and
the decision (kit.decide.choose), the checks after the choice (kit.decide.checks), the forecast
with what the sweep cost (kit.decide.forecast).
"""

from __future__ import annotations

from dataclasses import replace

from kit.arch import load_arch
from kit.artifacts import Decision, ProbeReport
from kit.decide.checks.stage import checked_decision, compared, refuse_what_cannot_run
from kit.decide.choose.scenario import run_scenario
from kit.decide.forecast.inputs import with_forecast
from kit.decide.sweep.setup import sweep_setup, with_sweep_notes
from kit.decide.sweep.sweep import finish, run_sweep
from kit.params import RunParams
from kit.runfolder import RunFolder


def run_decision(params: RunParams, folder: RunFolder, probe: ProbeReport, fresh: bool = False) -> Decision:
    """Run the sweep (going on from a stopped one's journal unless `fresh`), predict, decide; write
    decision.json and return it."""
    refuse_what_cannot_run(params)
    arch = load_arch(params.model.path)
    setup = sweep_setup(params, folder, probe, arch)
    result = run_sweep(setup, fresh)
    model = run_scenario(
        params,
        folder,
        probe,
        arch,
        setup.prompts,
        setup.running_caps,
        fl=setup.flavor,
        spec=setup.speculation,
    )
    checked = checked_decision(setup, result, model)
    decision = model.with_profile_notes(with_sweep_notes(checked.decision, setup, result))
    decision = replace(decision, mtp_status=probe.mtp_status)
    decision = compared(setup, checked, decision)
    decision = with_forecast(
        params, folder, decision, setup.label, result.pilot, result.server_start_s, result.cost
    )
    folder.write_decision(decision)
    finish(setup)  # only now: a run stopped before it goes on
    return decision
