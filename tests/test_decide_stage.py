"""Stage 2 end to end on the seed's case: a fabricated Qwen3.6-27B directory without its MTP
weights, probed on (injected) 8 x RTX PRO 6000 Blackwell, then `stages.decide`."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from fixtures_models import qwen36_like

from kit import stages
from kit.params import RunParams
from kit.probe import run_probe
from kit.probe.gpu import GpuFacts

pytestmark = pytest.mark.slow
RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def test_seed_case_no_mtp_weights_on_eight_rtx_pro_6000(tmp_path, demo_model, fixture_data):
    model = qwen36_like(tmp_path / "Qwen3.6-27B", mtp="none").path
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(demo_model / name, model / name)  # a real tokenizer, so the sweep sample can be planned
    params = RunParams.model_validate(
        {
            "run": "seed",
            "output_dir": tmp_path / "outputs",
            "model": {"path": model},
            "engine": {"flavor": "sglang", "startup_timeout_s": 60},
            "decide": {
                "concurrencies": [1, 16, 64],
                "spec_steps": [3],
                "accept_lengths": {3: 3.2},
                "num_prompts": 4,
                "max_tokens": 8,
            },
            "data": {
                "sources": [
                    {
                        "name": "metamathqa",
                        "adapter": "metamathqa",
                        "dataset": "json",
                        "data_files": [fixture_data / "metamathqa.jsonl"],
                        "count": 4,
                    }
                ]
            },
        }
    )
    folder = stages.prepare(params)
    gpus = [
        GpuFacts(
            name=RTX_PRO_6000,
            arch="sm_120",
            memory_total_bytes=96 * 10**9,
            smem_per_block_optin=101376,
            index=i,
        )
        for i in range(8)
    ]
    probe = run_probe(params, folder, gpus=gpus)
    assert probe["model"]["mtp"]["status"] == "declared_missing"

    decision = stages.decide(params)  # reads the probe.json written above

    assert decision["speculation_available"] is False
    assert (
        "weights are missing" in decision["speculation_unavailable_reason"]
        or "lacks their weights" in decision["speculation_unavailable_reason"]
    )
    assert decision["arm"] == {"k": 0, "algorithm": None} and decision["decided_by"] == "predicted"
    worth = [r for r in decision["reasons"] if "would be worth" in r]
    assert worth and "MTP k=3" in worth[0]
    ratios = {
        int(c): float(x.rstrip("x")) for c, x in (p.split(": ") for p in worth[0].split("): ")[1].split(", "))
    }
    assert ratios[1] > ratios[16] > ratios[64] and ratios[1] > 1.5  # worth most at low concurrency
    s = decision["engine_settings"]
    assert s["dp_size"] == 8 and s["tp_size"] == 1 and "speculative" not in s
    assert s["attention_backend"] == "flashinfer"
    sweep = pd.read_parquet(folder.sweep)
    assert set(sweep[sweep.arm == "spec_k3"].status) == {"skipped"}
    assert set(sweep[sweep.arm == "plain"].status) == {"failed"}  # no sglang in this environment
    assert "sglang" in sweep[sweep.arm == "plain"].reason.iloc[0]
    assert any(
        r.startswith("plain could not be measured (sglang is not installed in") for r in decision["reasons"]
    )


def test_gpu_hardware_from_datasheet_then_measurement_then_a_clear_error():
    from kit.artifacts import GpuSection
    from kit.decide.choose.scenario import gpu_hardware
    from kit.errors import CostModelError

    gpus = [{"name": "NVIDIA Future GPU", "memory_total_bytes": 200 * 10**9}]
    sheet = {"bandwidth_bytes_s": 8e12, "bf16_flops": 2.25e15, "memory_bytes": 192e9}
    assert gpu_hardware(GpuSection(devices=gpus, datasheet=sheet)).bandwidth_Bps == 8e12
    measured = {"measured": {"copy_bandwidth_bytes_s": 5e12, "bf16_flops": 1e15}}
    hw = gpu_hardware(GpuSection(devices=gpus, torch=measured))
    assert hw.bandwidth_Bps == 5e12 and "measured" in hw.name
    with pytest.raises(CostModelError, match="probe.measure_gpu: true"):
        gpu_hardware(GpuSection(devices=gpus))
