"""GPU facts, the datasheet, and attention-backend verdicts for injected GPUs."""

from __future__ import annotations

import pytest

from kit.probe.backends import ModelTraits, backend_findings, backend_verdicts, recommend_backend
from kit.probe.gpu import GpuFacts, datasheet, lookup_datasheet, merge_torch, torch_query
from kit.probe.gpu_findings import gpu_findings

QWEN36 = ModelTraits(is_hybrid=True, head_dim=256)
DENSE = ModelTraits(head_dim=128)
MLA = ModelTraits(is_mla=True, head_dim=192)


@pytest.mark.parametrize(
    ("nvml_name", "entry", "arch"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", "sm_90"),
        ("NVIDIA H100 PCIe", "H100 PCIe", "sm_90"),
        ("NVIDIA H200", "H200", "sm_90"),
        ("NVIDIA GH200 480GB", "GH200", "sm_90"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell", "sm_120"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", "sm_120"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090", "sm_120"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", "sm_89"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB", "sm_80"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB", "sm_80"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", "sm_80"),
        ("NVIDIA A10G", "A10G", "sm_86"),
        ("NVIDIA L4", "L4", "sm_89"),
        ("NVIDIA L40S", "L40S", "sm_89"),
        ("NVIDIA B200", "B200", "sm_100"),
        ("NVIDIA B300 SXM6 AC", "B300", "sm_103"),
        ("NVIDIA GB300", "GB300", "sm_103"),
    ],
)
def test_datasheet_matches_nvml_names(nvml_name: str, entry: str, arch: str) -> None:
    e = lookup_datasheet(nvml_name)
    assert e is not None and e["name"] == entry and e["arch"] == arch
    assert e["bandwidth_bytes_s"] == e["bandwidth_tbs"] * 1e12 and e["bf16_flops"] > 1e13


def test_datasheet_is_complete_and_unknown_gpu_warns() -> None:
    for e in datasheet():
        assert {
            "name",
            "match",
            "arch",
            "memory_gb",
            "bandwidth_tbs",
            "bf16_tflops",
            "fp8_tflops",
            "smem_per_block_kb",
        } <= set(e)
    assert lookup_datasheet("Tesla T4") is None
    found = {
        f["name"]: f for f in gpu_findings([GpuFacts(name="Tesla T4", arch="sm_75")], {"devices": []}, True)
    }
    assert found["datasheet"]["status"] == "warn" and "datasheet.yaml" in found["datasheet"]["action"]
    assert lookup_datasheet("NVIDIA H200")["smem_per_block_bytes"] == 227 * 1024


def status(verdicts: list[dict]) -> dict[str, str]:
    return {v["backend"]: v["status"] for v in verdicts}


def test_rtx_pro_6000_blackwell() -> None:
    v = backend_verdicts(120, 101376, QWEN36)
    s = status(v)
    assert s["fa3"] == s["fa4"] == s["triton"] == s["trtllm_mha"] == "fail"
    assert s["flashinfer"] == "ok" and s["torch_native"] == "ok"
    triton = next(x for x in v if x["backend"] == "triton")
    assert "99 KB" in triton["reason"] and "101376" in triton["reason"]
    assert recommend_backend(120, v, QWEN36)["backend"] == "flashinfer"


def test_h200_recommends_fa3() -> None:
    v = backend_verdicts(90, 227 * 1024, QWEN36)
    s = status(v)
    assert s["fa3"] == s["triton"] == s["flashinfer"] == "ok" and s["fa4"] == s["trtllm_mha"] == "fail"
    assert recommend_backend(90, v, QWEN36)["backend"] == "fa3"
    assert recommend_backend(90, backend_verdicts(90, 227 * 1024, MLA), MLA)["backend"] == "fa3"


def test_b200_recommends_trtllm_mha_unless_topk_above_one_or_mla() -> None:
    v = backend_verdicts(100, 227 * 1024, DENSE)
    assert status(v)["trtllm_mha"] == "ok" and status(v)["fa3"] == "fail" and status(v)["fa4"] == "ok"
    assert recommend_backend(100, v, DENSE)["backend"] == "trtllm_mha"
    topk4 = ModelTraits(head_dim=128, spec_topk=4)
    v4 = backend_verdicts(100, 227 * 1024, topk4)
    assert status(v4)["trtllm_mha"] == "fail" and recommend_backend(100, v4, topk4)["backend"] == "fa4"
    assert status(backend_verdicts(100, None, QWEN36))["flashinfer"] == "warn"
    assert recommend_backend(100, backend_verdicts(100, None, MLA), MLA)["backend"] == "trtllm_mla"


def test_a100_flashinfer_and_fa3_for_standard_attention_only() -> None:
    v = backend_verdicts(80, 163 * 1024, DENSE)
    s = status(v)
    assert s["flashinfer"] == s["triton"] == s["fa3"] == "ok" and s["fa4"] == s["trtllm_mha"] == "fail"
    assert recommend_backend(80, v, DENSE)["backend"] == "flashinfer"
    assert status(backend_verdicts(80, 163 * 1024, MLA))["fa3"] == "fail"


def test_no_gpu_and_a_requested_backend_that_cannot_run() -> None:
    assert set(status(backend_verdicts(None, None, DENSE)).values()) == {"fail"}
    v = backend_verdicts(120, 101376, DENSE)
    found = {f["name"]: f for f in backend_findings(v, recommend_backend(120, v, DENSE), "fa3")}
    assert found["requested"]["status"] == "fail" and "flashinfer" in found["requested"]["action"]
    assert found["recommended"]["value"] == "flashinfer"


def test_gpu_findings_used_memory_mixed_and_no_gpu() -> None:
    a = GpuFacts(
        name="NVIDIA H200", arch="sm_90", memory_total_bytes=100 * 2**30, memory_free_bytes=50 * 2**30
    )
    b = GpuFacts(name="NVIDIA H100 80GB HBM3", arch="sm_90", memory_total_bytes=80 * 2**30, index=1)
    f = {x["name"]: x for x in gpu_findings([a, b], {"devices": []}, True)}
    assert f["gpu0"]["status"] == "warn" and "50.0 GiB already used" in f["gpu0"]["reason"]
    assert (
        f["mixed"]["status"] == "warn" and f["gpu1"]["status"] == "ok" and f["datasheet"]["value"] == "H200"
    )
    (none,) = gpu_findings([], {}, needs_gpu=True, wanted=8)
    assert none["status"] == "fail" and "tp_size x dp_size = 8" in none["reason"]  # SGLang cannot run
    assert gpu_findings([], {}, needs_gpu=False)[0]["status"] == "ok"


@pytest.mark.slow
def test_torch_query_runs_in_a_child_process_and_merges() -> None:
    info = torch_query()
    assert "error" not in info and info["torch_version"]
    nvml = [GpuFacts(name="NVIDIA H200", arch="sm_90")]
    torch_dev = {
        "devices": [{"index": 0, "name": "NVIDIA H200", "sm_count": 132, "smem_per_block_optin": 232448}]
    }
    (g,) = merge_torch(nvml, torch_dev)
    assert g.sm_count == 132 and g.smem_per_block_optin == 232448 and g.sm == 90
    assert merge_torch([], torch_dev)[0].name == "NVIDIA H200"


def test_torch_findings_cover_cpu_builds_and_measurements() -> None:
    h200 = GpuFacts(name="NVIDIA H200", arch="sm_90", memory_total_bytes=141 * 10**9)
    cpu_torch = {"torch_version": "2.13.0+cpu", "cuda_available": False, "devices": []}
    f = {x["name"]: x for x in gpu_findings([h200], cpu_torch, True)}
    assert f["torch"]["status"] == "warn" and "CPU-only" in f["torch"]["reason"]
    slow = {
        "torch_version": "2.9",
        "cuda_available": True,
        "devices": [],
        "measured": {"copy_bandwidth_bytes_s": 1.0e12, "bf16_flops": 7.0e14, "seconds": 3.0},
    }
    f = {x["name"]: x for x in gpu_findings([h200], slow, True)}
    assert f["measured"]["status"] == "warn" and "1.00 TB/s" in f["measured"]["reason"]  # < half of 4.8 TB/s
    fast = slow | {"measured": slow["measured"] | {"copy_bandwidth_bytes_s": 4.1e12}}
    f = {x["name"]: x for x in gpu_findings([h200], fast, True)}
    assert f["measured"]["status"] == "ok" and f["torch"]["status"] == "ok"
