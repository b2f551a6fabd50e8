"""Stage 1: the probe's inputs from run params, every check (kit.probe.checks), the recommended
engine commands, written to probe.json (its display: kit.probe.view)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kit.artifacts import ProbeReport
from kit.engines.flavors import flavor, server_env
from kit.engines.launcher import parse_help
from kit.probe.checks import ProbeInputs, build_report
from kit.probe.engine_env import planned_command
from kit.probe.gpu import GpuFacts
from kit.probe.recommend import recommended_commands
from kit.runfolder import RunFolder

if TYPE_CHECKING:
    from kit.params import RunParams


def inputs_from_params(params: RunParams, folder: RunFolder) -> ProbeInputs:
    """The probe's inputs from run params; the launcher's --help is cached in the run folder's logs/."""
    e, spec = params.engine, params.engine.speculative
    return ProbeInputs(
        model_path=params.model.path,
        output_dir=params.output_dir,
        engine_python=params.engine_python,
        flavor=e.flavor,
        cache_dir=folder.logs,
        engine_env=server_env(params),
        context_len=e.context_length or params.probe.context_length,
        mem_fraction=e.mem_fraction_static or params.probe.mem_fraction,
        measure_gpu=params.probe.measure_gpu,
        tp_size=e.tp_size,
        dp_size=e.dp_size,
        spec_algorithm=spec.algorithm,
        spec_topk=spec.eagle_topk,
        spec_draft_tokens=spec.num_draft_tokens,
        requested_backend=e.attention_backend,
        device=e.device,
        planned_command=planned_command(params) if flavor(e.flavor).launcher else None,
        run=params.run,
    )


def run_probe(params: RunParams, folder: RunFolder, *, gpus: list[GpuFacts] | None = None) -> ProbeReport:
    """Run every check, write `folder.probe` (probe.json) atomically and return the report.

    `gpus`: GPU facts gathered elsewhere (another machine, a fabricated GPU in tests), used as they are
    and torch is not asked; otherwise NVML, then torch in a child process.
    """
    report = build_report(inputs_from_params(params, folder), gpus=gpus)
    help_file = report.launcher_help
    launcher = parse_help(Path(help_file).read_text()) if help_file else None
    commands = recommended_commands(params, report.recommended, launcher)
    report = replace(report, recommended=replace(report.recommended, commands=commands))
    folder.write_probe(report)
    return report
