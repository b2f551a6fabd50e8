"""run_probe end to end on this machine: RunParams, a fabricated model, injected or real GPU facts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_models import dense_qwen3, install_fake_sglang, qwen36_like

from kit.artifacts import ProbeReport
from kit.params import RunParams
from kit.probe import GpuFacts, probe_tables, probe_verdict, run_probe
from kit.runfolder import RunFolder

H200 = GpuFacts(
    name="NVIDIA H200",
    arch="sm_90",
    memory_total_bytes=143771 * 2**20,
    memory_free_bytes=143000 * 2**20,
    smem_per_block_optin=232448,
)
RTX_PRO = GpuFacts(
    name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    arch="sm_120",
    memory_total_bytes=97887 * 2**20,
    smem_per_block_optin=101376,
)
ROOT = Path(__file__).resolve().parents[1]


def params(tmp: Path, model: Path, **engine: object) -> RunParams:
    return RunParams.model_validate(
        {
            "run": "probe-test",
            "output_dir": str(tmp / "outputs"),
            "model": {"path": str(model)},
            "engine": engine,
        }
    )


def names(report: dict) -> dict[str, dict]:
    return {f"{f['section']}/{f['name']}": f for f in report["findings"]}


def test_run_probe_writes_probe_json_that_renders_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_sglang(tmp_path / "site", monkeypatch)
    m = qwen36_like(tmp_path / "model")
    p = params(tmp_path, m.path, flavor="sglang", python=sys.executable, mamba_strategy="no_buffer")
    folder = RunFolder(p.run_dir).ensure()
    report = run_probe(p, folder, gpus=[H200])
    loaded = json.loads(folder.probe.read_text())
    assert loaded["summary"] == report["summary"] and loaded["summary"]["go"] is True
    f = names(loaded)
    assert f["engine_env/flag --mamba-scheduler-strategy"]["status"] == "warn"  # the fake knows the new name
    assert (folder.logs / "sglang-0.0.1-launch-help.txt").is_file()
    rec = loaded["recommended"]
    assert rec["attention_backend"] == "fa3" and rec["mamba_flag"] == "--mamba-radix-cache-strategy"
    assert rec["speculative"]["available"] is True and rec["mamba_strategy_speculative"] == "extra_buffer"
    mem = loaded["memory"]
    assert mem["kv_bytes_per_token"] == 65536 and mem["state_bytes_per_seq"] == 153_944_064
    assert mem["weight_source"] == "safetensors headers" and mem["max_seqs_spec"] < mem["max_seqs_plain"]
    tables = {t.title: t.frame for t in probe_tables(ProbeReport.from_json(loaded))}
    assert {
        "GPUs",
        "Model directory",
        "Engine environment",
        "Host",
        "Attention backends",
        "Memory plan per GPU",
    } <= set(tables)
    assert len(tables["Attention backends"]) == 6 and tables["GPU devices"]["name"][0] == "NVIDIA H200"
    md = probe_verdict(ProbeReport.from_json(loaded))
    assert md.startswith("## GO") and "--attention-backend fa3" in md and "--speculative-num-steps 3" in md


def test_fa3_is_not_recommended_where_its_kernel_library_was_trimmed_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle that fits the lent H200's carry leaves out sgl_kernel/flash_ops (FA3's 1.1 GB):
    the probe looks for the file (without importing sgl_kernel) and recommends the next backend of
    sm_90's order; asked for fa3, it fails saying why. With the library there, fa3 again."""
    site = install_fake_sglang(tmp_path / "site", monkeypatch)
    (site / "sgl_kernel").mkdir()
    (site / "sgl_kernel" / "__init__.py").write_text("raise ImportError('the probe must not import me')\n")
    m = dense_qwen3(tmp_path / "model")
    p = params(tmp_path, m.path, flavor="sglang", python=sys.executable)
    report = run_probe(p, RunFolder(p.run_dir).ensure(), gpus=[H200])
    assert report["engine_env"]["interpreter"]["files"] == {"sgl_kernel/flash_ops*": False}
    assert report["recommended"]["attention_backend"] == "flashinfer"
    fa3 = next(v for v in report["backends"] if v["backend"] == "fa3")
    assert fa3["status"] == "fail" and "no flash_ops*" in fa3["reason"] and "sglang-kernel" in fa3["reason"]
    asked = params(tmp_path, m.path, flavor="sglang", python=sys.executable, attention_backend="fa3")
    f = names(run_probe(asked, RunFolder(asked.run_dir).ensure(), gpus=[H200]))["backends/requested"]
    assert f["status"] == "fail" and "flash_ops" in f["reason"] and "flashinfer" in f["action"]
    (site / "sgl_kernel" / "flash_ops.abi3.so").write_bytes(b"")
    again = run_probe(p, RunFolder(p.run_dir).ensure(), gpus=[H200])
    assert again["recommended"]["attention_backend"] == "fa3"


def test_invalid_config_fails_but_every_other_check_runs(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "model")
    (m.path / "config.json").write_text("{not json")
    p = params(tmp_path, m.path, flavor="sglang", attention_backend="fa3")
    report = run_probe(p, RunFolder(p.run_dir).ensure(), gpus=[RTX_PRO])
    f = names(report)
    assert report["summary"]["go"] is False and "model/config.json" in report["summary"]["fails"]
    assert f["backends/requested"]["status"] == "fail"  # fa3 cannot run on sm_120
    assert {"gpus/datasheet", "host/shm", "engine_env/python", "model/shards"} <= set(f)
    assert report["memory"] is None and "NO-GO" in probe_verdict(report)


def test_more_gpus_wanted_than_present(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "model")
    p = params(tmp_path, m.path, flavor="sglang", tp_size=2, dp_size=2)
    report = run_probe(p, RunFolder(p.run_dir).ensure(), gpus=[H200, H200])
    assert names(report)["gpus/parallel"]["status"] == "fail"
    assert report["memory"]["tp_size"] == 2


def test_real_gpu_collection_on_this_machine(tmp_path: Path) -> None:
    """No GPU here: a valid finding, not a crash; the transformers flavor needs none."""
    m = dense_qwen3(tmp_path / "model")
    p = params(tmp_path, m.path, flavor="transformers")
    report = run_probe(p, RunFolder(p.run_dir).ensure())
    if report["gpus"]["devices"]:
        pytest.skip("this machine has a GPU")
    f = names(report)
    assert f["gpus/count"]["status"] == "ok" and f["gpus/count"]["value"] == 0
    assert f["engine_env/packages"]["status"] == "ok"  # transformers is installed in this venv
    assert not any(k.startswith("backends/") for k in f)
    assert report["summary"]["go"] is True and report["host"]["cpu_logical"] >= 1


@pytest.mark.slow
def test_benchmark_script_runs_without_pydantic_or_psutil(tmp_path: Path) -> None:
    block = tmp_path / "block"
    block.mkdir()
    for mod in ("pydantic", "psutil", "typer"):
        (block / f"{mod}.py").write_text("raise ImportError('not on the GPU box')\n")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks/probe_gpu.py"),
        "--out",
        str(out),
        "--model-config",
        str(ROOT / "tests/configs/qwen3_6_27b.json"),
        "--no-measure",
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        # a bare environment, but the session's HOME and temp folder (tests/isolation.py)
        env={
            "PYTHONPATH": str(block),
            "PATH": "/usr/bin:/bin",
            "HOME": str(Path.home()),
            "TMPDIR": str(tmp_path),
        },
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "probe.json").read_text())
    assert report["model"]["config"]["is_hybrid"] and report["model"]["mtp"]["status"] == "declared_missing"
    assert report["host"]["cpu_physical"] is None  # the psutil-free fallback ran
    assert (out / "probe.md").read_text().startswith("## ")
