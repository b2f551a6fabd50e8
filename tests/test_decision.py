"""Decision: the seed's case (no MTP weights on 8 RTX PRO 6000), measured sweeps deciding, reasons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kit.arch import load_arch
from kit.decide.costmodel import Hardware
from kit.decide.decision import decide, with_gpus
from kit.decide.predict import Workload
from kit.params import DecideParams

CONFIGS = Path(__file__).parent / "configs"
# Datasheets (specdec.md): RTX PRO 6000 Blackwell 96 GB, 1.79 TB/s, ~504 TF bf16; H200 141 GB, 4.8 TB/s.
RTX_PRO_6000 = Hardware(1.79e12, 504e12, 96e9, name="RTX PRO 6000 Blackwell")
H200 = Hardware(bandwidth_Bps=4.8e12, flops_bf16=989e12, memory_bytes=141e9, name="H200")


@pytest.fixture
def qwen36_without_mtp(tmp_path: Path) -> Path:
    """A model dir as the seed had it: MTP declared in config.json, no mtp.* tensors in the index."""
    shutil.copy(CONFIGS / "qwen3_6_27b.json", tmp_path / "config.json")
    shard = "model-00001-of-00001.safetensors"
    index = {"weight_map": {"model.language_model.layers.0.mlp.up_proj.weight": shard}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return tmp_path


def _sweep(rows: list[tuple]) -> pd.DataFrame:
    cols = ["arm", "spec_k", "concurrency", "output_tok_s", "accept_length", "status", "reason"]
    t = pd.DataFrame(rows, columns=cols)
    t["requests"], t["output_tokens"], t["duration_s"], t["req_s"] = 64, 1000, 1.0, 1.0
    t["latency_p50_s"] = t["latency_p90_s"] = t["latency_p99_s"] = 1.0
    t["ttft_p50_s"] = None
    return t


def test_seed_case_no_mtp_weights_on_eight_rtx_pro_6000(qwen36_without_mtp: Path) -> None:
    arch = load_arch(qwen36_without_mtp)
    assert arch.mtp_layers == 1
    work = with_gpus(Workload(1024, 1024, 0.85), arch, RTX_PRO_6000, gpu_count=8)
    params = DecideParams(concurrencies=[1, 8, 64, 256, 512], spec_steps=[1, 2, 3], accept_lengths={3: 3.2})
    d = decide(arch, RTX_PRO_6000, None, params, mtp_status="missing", engine_flavor="sglang", work=work)
    json.dumps(d)
    assert d["chosen_arm"] == "plain" and not d["speculation_available"]
    assert "lacks their weights" in d["speculation_unavailable_reason"]
    s = d["engine_settings"]
    assert s["speculative"] is False and s["dp_size"] == 8 and s["tp_size"] == 1
    assert isinstance(s["max_running_requests"], int) and s["max_running_requests"] >= 1
    worth = [r for r in d["reasons"] if "would be worth" in r and "k=3" in r]
    assert worth and "1: " in worth[0]
    spec1 = [r for r in d["table"] if r["arm"] == "spec_k3" and r["concurrency"] == 1][0]
    plain1 = [r for r in d["table"] if r["arm"] == "plain" and r["concurrency"] == 1][0]
    assert spec1["predicted_tok_s"] > 1.5 * plain1["predicted_tok_s"]


def test_measured_sweep_decides_and_carries_skips() -> None:
    arch = load_arch_from("qwen3_32b")
    sweep = _sweep(
        [
            ("plain", 0, 1, 40.0, None, "ok", ""),
            ("plain", 0, 256, 9000.0, None, "ok", ""),
            ("spec_k3", 3, 1, 95.0, 2.9, "ok", ""),
            ("spec_k3", 3, 256, 7900.0, 2.8, "ok", ""),
            ("spec_k1", 1, 1, None, None, "skipped", "draft tokens 2 not supported by this build"),
        ]
    )
    params = DecideParams(concurrencies=[1, 256], spec_steps=[1, 3])
    d = decide(arch, H200, sweep, params, mtp_status="present", engine_flavor="sglang")
    assert d["decided_by"] == "measured" and d["chosen_arm"] == "plain"
    assert d["engine_settings"]["speculative"] is False
    assert d["accept_lengths"][3] == pytest.approx(2.85)
    text = " ".join(d["reasons"])
    assert "plain decoding at 256 concurrent beats MTP k=3" in text and "by 14%" in text
    assert "spec_k1 was not measured: draft tokens 2 not supported" in text
    row = [r for r in d["table"] if r["arm"] == "plain" and r["concurrency"] == 1][0]
    assert row["measured_tok_s"] == 40.0
    assert row["error_pct"] == pytest.approx(100 * (row["predicted_tok_s"] / 40.0 - 1))
    beyond = [r for r in d["table"] if r["arm"] == "plain" and r["concurrency"] == 256][0]
    assert beyond["measured_tok_s"] == 9000.0 and not beyond["feasible"]


def test_speculation_chosen_sets_explicit_running_cap_and_extra_buffer() -> None:
    arch = load_arch_from("qwen3_6_27b")
    params = DecideParams(concurrencies=[1, 4, 16], spec_steps=[3], accept_lengths={3: 3.2})
    d = decide(arch, H200, None, params, mtp_status="present", engine_flavor="sglang")
    s = d["engine_settings"]
    assert d["chosen_arm"] == "spec_k3" and s["speculative"] and s["num_draft_tokens"] == 4
    assert s["mamba_strategy"] == "extra_buffer" and s["max_running_requests"] == 16
    assert any("resets it to 48" in r for r in d["reasons"])


def test_transformers_flavor_has_no_speculation() -> None:
    arch = load_arch_from("qwen3_32b")
    d = decide(
        arch,
        H200,
        None,
        DecideParams(concurrencies=[1, 4]),
        mtp_status="present",
        engine_flavor="transformers",
    )
    assert (
        d["chosen_arm"] == "plain"
        and "transformers serve has no speculative" in d["speculation_unavailable_reason"]
    )


def test_latency_bound_objective_limits_concurrency() -> None:
    arch = load_arch_from("qwen3_32b")
    ladder = dict(concurrencies=[1, 16, 256], spec_steps=[3])
    loose = decide(arch, H200, None, DecideParams(**ladder), "absent", "sglang")
    tight = DecideParams(**ladder, objective="latency_bound", latency_bound_s=18.0)
    d = decide(arch, H200, None, tight, "absent", "sglang", work=Workload(1024, 1024))
    assert d["engine_settings"]["client_concurrency"] < loose["engine_settings"]["client_concurrency"]


def load_arch_from(name: str):
    from kit.arch import arch_from_config

    return arch_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def test_a_decision_never_rests_on_nothing() -> None:
    """Unmeasured speculation wins only on a predicted lead beyond the model's known error; a measured
    lead within the noise keeps plain decoding; a failed arm never wins over a measured one."""
    from kit.decide.decision import MEASUREMENT_NOISE, PREDICTION_ERROR, _pick_predicted

    ladder = pd.DataFrame(
        {"arm": ["plain", "spec_k3"], "spec_k": [0, 3], "concurrency": [64, 64], "feasible": [True, True]}
    )
    within = ladder.assign(output_tok_s=[1000.0, 1000.0 * (1 + PREDICTION_ERROR * 0.8)])
    choice = _pick_predicted(within, None, None, 1024, "MTP")
    assert choice["spec_k"] == 0 and "within the cost model's known error" in choice["note"]
    beyond = ladder.assign(output_tok_s=[1000.0, 1000.0 * (1 + PREDICTION_ERROR * 1.5)])
    assert _pick_predicted(beyond, None, None, 1024)["spec_k"] == 3
    assert _pick_predicted(beyond, "no MTP weights", None, 1024)["spec_k"] == 0

    arch = load_arch_from("qwen3_32b")
    params = DecideParams(concurrencies=[1, 64], spec_steps=[3], accept_lengths={3: 3.5})
    close = _sweep(
        [
            ("plain", 0, 64, 1000.0, None, "ok", ""),
            ("spec_k3", 3, 64, 1000.0 * (1 + MEASUREMENT_NOISE / 2), 2.0, "ok", ""),
        ]
    )
    d = decide(arch, H200, close, params, mtp_status="present", engine_flavor="sglang")
    assert d["decided_by"] == "measured" and d["chosen_arm"] == "plain"
    assert any("run-to-run noise" in r for r in d["reasons"])

    failed = _sweep(
        [
            ("plain", 0, 64, 1000.0, None, "ok", ""),
            ("spec_k3", 3, 64, None, None, "failed", "server 'sweep-spec_k3' exited with code 1\nlog tail"),
        ]
    )
    d = decide(arch, H200, failed, params, mtp_status="present", engine_flavor="sglang")
    assert d["decided_by"] == "measured" and d["chosen_arm"] == "plain"
    assert any("spec_k3 could not be measured (server 'sweep-spec_k3' exited" in r for r in d["reasons"])
    row = [r for r in d["table"] if r["arm"] == "spec_k3" and r["concurrency"] == 64][0]
    assert row["status"] == "failed" and row["measured_tok_s"] is None
