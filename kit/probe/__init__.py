"""Stage 1: probe the GPU, the engine's environment, the model directory and the host.

    from kit.probe import run_probe, probe_tables, probe_verdict
    report = run_probe(params, RunFolder(params.run_dir).ensure())   # writes probe.json
    print(probe_verdict(report))

Every check runs; each finding has a status (ok / warn / fail), a one-line reason, and for warn
and fail what to do. `benchmarks/probe_gpu.py` runs the same checks without RunParams.
"""

from __future__ import annotations

from kit.probe.checks import ProbeInputs, build_report
from kit.probe.gpu import GpuFacts, lookup_datasheet
from kit.probe.run import inputs_from_params, run_probe
from kit.probe.view import probe_tables, probe_verdict

__all__ = [
    "GpuFacts",
    "ProbeInputs",
    "build_report",
    "inputs_from_params",
    "lookup_datasheet",
    "probe_tables",
    "run_probe",
    "probe_verdict",
]
