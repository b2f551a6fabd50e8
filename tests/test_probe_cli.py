"""`kit probe` from the shell: NO-GO exits non-zero and prints each failure's reason and `Do:` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures_models import dense_qwen3

from kit.probe.view import NO_GO_EXIT_CODE

ROOT = Path(__file__).resolve().parents[1]
FAKE_SGLANG = ROOT / "tests" / "fake_sglang"


def probe_cli(tmp: Path, **engine: object) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `kit probe` on a fabricated Qwen3-32B directory; the report it wrote."""
    model = dense_qwen3(tmp / "model").path
    params = tmp / "p.yaml"
    params.write_text(
        yaml.safe_dump(
            {"run": "p", "output_dir": str(tmp / "out"), "model": {"path": str(model)}, "engine": engine}
        )
    )
    env = {**os.environ, "PYTHONPATH": str(FAKE_SGLANG)}  # an SGLang environment is present
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "probe", str(params)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    return done, json.loads((tmp / "out" / "p" / "probe.json").read_text())


def test_dp_8_without_gpus_is_no_go_with_reasons_and_do_lines(tmp_path: Path) -> None:
    done, report = probe_cli(tmp_path, flavor="sglang", python=sys.executable, dp_size=8)
    if report["gpus"]["devices"]:
        pytest.skip("this machine has GPUs")
    assert report["engine_env"]["interpreter"]["packages"]["sglang"] == "0.0.2"  # the fake was found
    assert done.returncode == NO_GO_EXIT_CODE, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    out = done.stdout
    assert out.startswith("NO-GO: ")
    assert "FAIL gpus/count: no NVIDIA GPU seen" in out and "tp_size x dp_size = 8" in out
    assert "  Do: run on a machine with the GPUs" in out
    for f in report["findings"]:  # every failure and warning, with its reason and what to do
        if f["status"] != "ok":
            assert (
                f"{f['status'].upper()} {f['section']}/{f['name']}: {f['reason']}\n  Do: {f['action']}" in out
            )
    assert f"probe.json: {tmp_path / 'out' / 'p' / 'probe.json'}" in out
