"""One figure for memory (issue 58 item 5): what one server of an arm runs at once is
kit.memoryplan.running_capacity, and decision.json's table (`mem_max_running`), the sweep's running
caps and the forecast's capacity all state it. Pinned on the Qwen3.6-27B shape on an 80 GB H100 as
measured on 2026-12-06 (docs/lab/h200/sglang/2026-12-06/qwen3.6-27b-h100-mtp/): SGLang 0.5.16 ran
plain decoding at 80, MTP k=1 at 16 and k=3 at 8; that decision.json's table said 125 / 42 / 26 and
its forecast sized stage 3 from those."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from conftest import REPO

from kit.arch import arch_from_config
from kit.artifacts import GpuSection, ProbeReport
from kit.decide.choose.scenario import run_scenario
from kit.decide.forecast.inputs import job_settings
from kit.decide.measure.tables import summarise
from kit.decide.sweep.layout import running_caps
from kit.engines.flavors import flavor
from kit.engines.settings import engine_speculation, sweep_arms
from kit.modelshape import SHAPES
from kit.params import RunParams
from kit.probe.gpu import lookup_datasheet
from kit.runfolder import RunFolder

RECORDED = REPO / "docs/lab/h200/sglang/2026-12-06/qwen3.6-27b-h100-mtp/sweep_runs.parquet"
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 81559 * 2**20, "index": 0}
ARMS = {0: "plain", 1: "spec_k1", 3: "spec_k3"}


def params(tmp_path: Path) -> RunParams:
    return RunParams.model_validate(
        {
            "run": "t",
            "output_dir": tmp_path,
            "model": {"path": tmp_path},
            "engine": {"flavor": "sglang", "mem_fraction_static": 0.85, "speculative": {"algorithm": "MTP"}},
            "decide": {"concurrencies": [1, 16, 64, 256], "spec_steps": [1, 3], "max_tokens": 128},
        }
    )


def test_the_27b_shape_on_80_gb_states_one_figure_per_arm(tmp_path: Path) -> None:
    p = params(tmp_path)
    arch = arch_from_config(SHAPES["qwen3.6-27b"].config)
    probe = ProbeReport(gpus=GpuSection(devices=[H100], datasheet=lookup_datasheet(H100["name"])))
    prompts = [{"prompt_tokens": 139}] * 256  # the recorded sweep's mean prompt
    caps = running_caps(p, probe, arch, prompts, sweep_arms(p), flavor("sglang"))
    assert caps == {0: 80, 1: 16, 3: 8}, "what SGLang 0.5.16 started on this card"
    spec = engine_speculation(p.engine, probe.mtp_status)
    model = run_scenario(p, RunFolder(tmp_path), probe, arch, prompts, caps, fl=flavor("sglang"), spec=spec)
    runs = pd.read_parquet(RECORDED)
    decision = model.decide(summarise(runs), runs)
    table = {(r.arm, r.concurrency): r for r in decision.table}
    assert {r.arm: r.mem_max_running for r in decision.table} == {ARMS[k]: c for k, c in caps.items()}
    # the levels above a cap are predicted as they were measured: that many running, queued beyond
    top = table["plain", 256]
    assert top.feasible and top.running == 80 and top.measured_tok_s and top.predicted_tok_s
    assert table["spec_k3", 64].running == 8 and table["spec_k3", 64].feasible
    assert decision.arm is not None and decision.arm.name == "plain"
    job = job_settings(p, decision, None)
    assert job.capacity == {ARMS[k]: c for k, c in caps.items()}, "stage 3 sized from the same figure"


def test_a_chosen_speculative_arm_runs_stage_3_at_its_figure_and_the_others_keep_theirs(
    tmp_path: Path,
) -> None:
    """SGLang lowers max running requests to 48 under speculation when it is unset, so the decision
    sets it for a chosen MTP arm to what memory holds: 16 for k=1 here (42 before, above the 24 that
    did not start). The forecast sizes that arm from it, and plain decoding from its own 80."""
    p = params(tmp_path)
    arch = arch_from_config(SHAPES["qwen3.6-27b"].config)
    probe = ProbeReport(gpus=GpuSection(devices=[H100], datasheet=lookup_datasheet(H100["name"])))
    prompts = [{"prompt_tokens": 139}] * 256
    caps = running_caps(p, probe, arch, prompts, sweep_arms(p), flavor("sglang"))
    runs = pd.read_parquet(RECORDED)
    faster = runs.arm == "spec_k1"
    runs.loc[faster, "output_tok_s"] = runs.loc[faster, "output_tok_s"] * 5  # MTP k=1 ahead everywhere
    spec = engine_speculation(p.engine, probe.mtp_status)
    model = run_scenario(p, RunFolder(tmp_path), probe, arch, prompts, caps, fl=flavor("sglang"), spec=spec)
    decision = model.decide(summarise(runs), runs)
    assert decision.arm is not None and decision.arm.name == "spec_k1"
    assert decision.engine_settings.max_running_requests == 16
    assert job_settings(p, decision, None).capacity == {"plain": 80, "spec_k1": 16, "spec_k3": 8}
