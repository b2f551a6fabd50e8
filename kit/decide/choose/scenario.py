"""The cost model's side of stage 2 for one run: its scenario (the model, the hardware from the
probe, the workload the sweep measured, the draft) and the decision it makes from a sweep's tables.

Hardware comes from the probe: the datasheet of the first GPU (its efficiency factors from a
step profile when `decide.profile` names one), or, with no GPU, this CPU calibrated by a short
step profile of the model's own config, so the demo predicts its own curve honestly. The CPU
profile never takes more memory than the machine has (kit.decide.profile.budget): a model too big
to build whole is profiled on a few layers and scaled, or not at all, and decision.json says which.

    model = run_scenario(params, folder, probe, arch, prompts, fl=flavor, spec=speculation)
    decision = model.decide(sweep_table, sweep_runs)
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from kit.arch import arch_from_config
from kit.artifacts import Decision, GpuSection, ProbeReport
from kit.decide import costmodel as cm
from kit.decide.choose.decision import decide, with_gpus
from kit.decide.profile.budget import ProfilePlan, plan_cpu_profile
from kit.decide.profile.profiler import ProfileGrid, load_profile, profile_steps
from kit.engines.flavors import Flavor
from kit.engines.settings import Speculation
from kit.errors import CostModelError
from kit.params import RunParams
from kit.runfolder import RunFolder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunScenario:
    """The cost model of this run and what it needs to decide: the scenario, the step profile (None:
    the roofline), the CPU profile's plan, the attention backend, the engine's speculation (its
    flavor, the arms' algorithm, why they cannot run here), and the running caps the sweep's servers
    had (k -> requests: the arms' memory figure)."""

    params: RunParams
    scenario: cm.Scenario
    profile: pd.DataFrame | None
    plan: ProfilePlan | None
    backend: str | None
    spec: Speculation
    running_caps: dict[int, int] = field(default_factory=dict)

    def decide(self, table: pd.DataFrame, runs: pd.DataFrame | None) -> Decision:
        """The decision from the sweep's table and its measurements (kit.decide.choose.decision),
        with what it says of the CPU profile."""
        return decide(
            self.scenario,
            table,
            self.params.decide,
            self.spec,
            profile=self.profile,
            attention_backend=self.backend,
            runs=runs,
            running_caps=self.running_caps,
        )

    def with_profile_notes(self, decision: Decision) -> Decision:
        """The decision with what it says of the CPU profile (efficiency source, warnings)."""
        plan = self.plan
        if plan is None:
            return decision
        warnings = [*decision.warnings, plan.warning()] if plan.warning() else decision.warnings
        efficiency = {**decision.efficiency, "source": plan.source()}
        return replace(decision, efficiency=efficiency, cpu_profile=asdict(plan), warnings=warnings)


def run_scenario(
    params: RunParams,
    folder: RunFolder,
    probe: ProbeReport,
    arch: Any,
    prompts: list[Any],
    running_caps: dict[int, int] | None = None,
    *,
    fl: Flavor,
    spec: Speculation,
) -> RunScenario:
    """The cost model of this run: hardware from the probe (or a CPU profile), the workload of the
    sweep's prompts, every GPU used where the params leave the layout open; `running_caps`: the
    sweep's servers' (kit.decide.sweep.layout.running_caps); `fl` and `spec`: the engine's flavor
    and speculation as the sweep's set-up read them (kit.decide.sweep.setup.SweepSetup)."""
    hw, profile, n_gpus, plan = hardware(params, folder, probe)
    eng = params.engine
    work = sweep_workload(params, prompts)
    scenario = cm.Scenario(arch, hw, work=work, draft=cm.draft_for(params.decide, eng.speculative))
    if n_gpus > 1 and eng.tp_size == 1 and eng.dp_size == 1:
        scenario = with_gpus(scenario, n_gpus)  # params leave the layout open: use every GPU
    probed = probe.recommended.attention_backend if fl.attention_backends else None
    backend = eng.attention_backend or probed  # the probe's names are SGLang's
    return RunScenario(params, scenario, profile, plan, backend, spec, dict(running_caps or {}))


def sweep_workload(params: RunParams, prompts: list[Any]) -> cm.Workload:
    """The workload the sweep measures: its mean prompt, `decide.max_tokens`, the engine's memory
    fraction and layout. The cost model predicts at it, and the sweep's running caps
    (kit.decide.sweep.layout.running_caps) are its memory figure, so both are one."""
    lens = [p["prompt_tokens"] for p in prompts if p.get("prompt_tokens")]
    eng = params.engine
    return cm.Workload(
        input_len=int(sum(lens) / len(lens)) if lens else 512,
        output_len=params.decide.max_tokens,
        mem_fraction=eng.mem_fraction_static or params.probe.mem_fraction,
        tp_size=eng.tp_size,
        dp_size=eng.dp_size,
    )


CPU_NOMINAL = cm.Hardware(bandwidth_Bps=20e9, flops_bf16=200e9, memory_bytes=16e9, name="cpu")
"""Nominal CPU figures: a CPU profile's calibration scales them, so only their ratio matters much."""


def hardware(
    params: RunParams, folder: RunFolder, probe: ProbeReport
) -> tuple[cm.Hardware, pd.DataFrame | None, int, ProfilePlan | None]:
    """(hardware, step profile or None, GPU count, the CPU profile's plan when one was made)."""
    gpus = probe.gpus.devices
    profile = load_profile(params.decide.profile) if params.decide.profile else None
    if gpus:
        return gpu_hardware(probe.gpus), profile, len(gpus), None
    ram = probe.ram_total_bytes or CPU_NOMINAL.memory_bytes
    hw = cm.Hardware(CPU_NOMINAL.bandwidth_Bps, CPU_NOMINAL.flops_bf16, ram, "cpu")
    if profile is not None:
        return hw, profile, 1, None
    profile, plan = cpu_profile(params, folder)
    return hw, profile, 1, plan


def cpu_profile(params: RunParams, folder: RunFolder) -> tuple[pd.DataFrame | None, ProfilePlan]:
    """A step profile of this model on the CPU, as deep as memory allows (none when nothing fits)."""
    cfg = json.loads((Path(params.model.path) / "config.json").read_text())
    grid = ProfileGrid(
        batch_sizes=tuple(sorted({1, *params.decide.concurrencies})),
        q_values=(1, 2),
        contexts=(128,),
        reps=3,
    )
    plan = plan_cpu_profile(arch_from_config(cfg), max(grid.batch_sizes), max(grid.q_values), 128)
    if plan.warning():
        log.warning(plan.warning())
    if plan.mode == "skipped":
        return None, plan
    profile = profile_steps(cfg, grid, device="cpu", n_layers=plan.profiler_layers)
    profile.to_parquet(folder.step_profile, index=False)
    return profile, plan


def gpu_hardware(gpus: GpuSection) -> cm.Hardware:
    """The first GPU's datasheet figures, else the probe's measured ones, else a clear error."""
    sheet, measured, first = gpus.datasheet or {}, gpus.measured, gpus.devices[0]
    memory = first.get("memory_total_bytes") or sheet.get("memory_bytes")
    name = first["name"]
    if sheet and memory:
        return cm.Hardware(
            sheet["bandwidth_bytes_s"],
            sheet["bf16_flops"],
            memory,
            name,
            gemm_efficiency=sheet.get("gemm_efficiency"),
        )
    if measured.get("copy_bandwidth_bytes_s") and measured.get("bf16_flops") and memory:
        return cm.Hardware(
            measured["copy_bandwidth_bytes_s"], measured["bf16_flops"], memory, f"{name} (measured)"
        )
    raise CostModelError(
        f"{name} is not in the kit's datasheet and was not measured: set probe.measure_gpu: true and "
        "rerun kit probe (or add the GPU to kit/probe/datasheet.yaml)"
    )
