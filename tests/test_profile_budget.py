"""A CPU step profile never needs more memory than the machine has: full, a few layers scaled, or none.

The real 27B / 32B configs are planned by arithmetic only; the profiles that do run are small
models in child processes under a real `ulimit -v` (RLIMIT_AS), with their peak RSS measured.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures_models import load_config

from kit.arch import arch_from_config
from kit.decide.profile.budget import GIB, plan_cpu_profile, profile_bytes, scaled_depths

ROOT = Path(__file__).resolve().parents[1]


def small_dense(layers: int = 48) -> dict:
    """Qwen3-32B's config at a size a test can build: 512 wide, 16K vocabulary."""
    cfg = load_config("qwen3_32b.json")
    cfg.update(
        hidden_size=512,
        intermediate_size=1536,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        vocab_size=16000,
        num_hidden_layers=layers,
    )
    return cfg


def test_a_27b_model_is_not_profiled_where_it_cannot_fit() -> None:
    arch = arch_from_config(load_config("qwen3_6_27b.json"))
    plan = plan_cpu_profile(arch, batch=16, q=2, context=128, available_bytes=23 * GIB)
    assert plan.mode == "skipped" and plan.profiler_layers == 8  # two hybrid periods at least
    assert 100 * 10**9 < plan.full_bytes < 125 * 10**9  # ~108 GB of fp32 weights
    assert plan.need_bytes > plan.usable_bytes == int(11.5 * GIB)
    assert plan.source().startswith("nominal CPU figures")
    warning = plan.warning()
    assert "even 8 of 64 layers need about 22" in warning and "decide.profile" in warning
    roomy = plan_cpu_profile(arch, batch=16, q=2, context=128, available_bytes=64 * GIB)
    assert roomy.mode == "scaled" and roomy.n_layers == 8 and roomy.need_bytes <= roomy.usable_bytes


def test_a_32b_model_is_profiled_on_the_deepest_cut_that_fits() -> None:
    arch = arch_from_config(load_config("qwen3_32b.json"))
    assert scaled_depths(arch) == [8, 7, 6, 5, 4, 3, 2]
    plan = plan_cpu_profile(arch, batch=16, q=2, context=128, available_bytes=22 * GIB)
    assert plan.mode == "scaled" and plan.n_layers == 2 and plan.need_bytes <= plan.usable_bytes
    assert plan.source() == "profile on cpu: 2 of 64 layers, scaled to full depth"
    assert "built 2 of 64 layers" in plan.warning()
    whole = plan_cpu_profile(arch, batch=16, q=2, context=128, available_bytes=400 * GIB)
    assert whole.mode == "full" and whole.profiler_layers is None and whole.warning() is None


def test_the_estimate_grows_with_batch_and_context_where_the_cache_lives() -> None:
    arch = arch_from_config(load_config("qwen3_6_27b.json"))
    base = profile_bytes(arch, 8, 1, 1, 128)
    assert profile_bytes(arch, 8, 64, 1, 128) - base > 64 * 6 * 3 * 2**20  # 6 linear layers' fp32 state
    assert profile_bytes(arch, 8, 1, 1, 4096) > base


CHILD = r"""
import json, resource, sys
import psutil, torch, transformers.models.qwen3.modeling_qwen3  # imported before the limit is set
from kit.decide.profile.budget import available_memory_bytes
from kit.decide.choose.scenario import cpu_profile
from kit.params import RunParams
from kit.runfolder import RunFolder

model, out, headroom = sys.argv[1], sys.argv[2], int(sys.argv[3])
params = RunParams.model_validate(
    {"run": "budget", "output_dir": out, "model": {"path": model}, "decide": {"concurrencies": [1, 4]}}
)
folder = RunFolder(params.run_dir).ensure()
start = psutil.Process().memory_info()
resource.setrlimit(resource.RLIMIT_AS, (start.vms + headroom, resource.RLIM_INFINITY))
available = available_memory_bytes()
profile, plan = cpu_profile(params, folder)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
layers = {"profiled": sorted(set(profile.n_layers_profiled)), "full": sorted(set(profile.n_layers_full))}
print(json.dumps({"available": available, "mode": plan.mode, "n_layers": plan.n_layers,
                  "need": plan.need_bytes, "growth": peak - start.rss, **layers,
                  "written": (folder.root / "step_profile.parquet").is_file()}))
"""


@pytest.mark.slow
def test_under_ulimit_a_few_layers_are_profiled_and_memory_stays_in_budget(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(small_dense()))
    headroom = int(1.6 * GIB)  # the whole 48 layers would be planned at ~1.3 GiB: over half of this
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), str(tmp_path / "out"), str(headroom)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["available"] <= headroom  # ulimit -v is what bounds this process, not the host's RAM
    assert got["mode"] == "scaled" and got["n_layers"] == 8
    assert got["profiled"] == [8] and got["full"] == [48] and got["written"]
    assert got["growth"] < got["need"] <= headroom / 2  # the estimate bounds what the profile took


def kit_decide_under_ulimit(params_file: Path, limit_bytes: int) -> tuple[int, str, int]:
    """`kit decide` in a child process under `ulimit -v`: (exit code, stderr, its own peak RSS in bytes)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, resource.RLIM_INFINITY))

    err = params_file.with_suffix(".stderr")
    with err.open("w") as e:
        child = subprocess.Popen(
            [sys.executable, "-m", "kit.cli", "decide", str(params_file)],
            stdout=subprocess.DEVNULL,
            stderr=e,
            cwd=ROOT,
            preexec_fn=limit,
        )
    _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the test session's
    return os.waitstatus_to_exitcode(status), err.read_text(), usage.ru_maxrss * 1024


@pytest.mark.slow
def test_kit_decide_on_a_27b_directory_without_gpu_stays_small(tmp_path: Path) -> None:
    """The reported fault: `kit decide` built the whole 27B model in fp32 and died in the allocator
    (under this 6 GiB `ulimit -v`: "DefaultCPUAllocator: can't allocate memory ... 5085593600 bytes").
    Now no profile is built, the run says so, and the process stays far below the limit."""
    import yaml
    from fixtures_models import qwen36_like

    from kit.params import load_params
    from kit.probe import run_probe
    from kit.runfolder import RunFolder, read_json

    model = qwen36_like(tmp_path / "Qwen3.6-27B", mtp="none").path
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"query": f"What is {i} + {i}?"}) + "\n" for i in range(8)))
    params_file = tmp_path / "big.yaml"
    params_file.write_text(
        yaml.safe_dump(
            {
                "run": "big",
                "output_dir": str(tmp_path / "outputs"),
                "model": {"path": str(model)},
                "engine": {"flavor": "sglang", "startup_timeout_s": 30},
                "decide": {"concurrencies": [1, 16], "spec_steps": [3], "num_prompts": 4, "max_tokens": 8},
                "data": {
                    "sources": [
                        {"name": "q", "adapter": "metamathqa", "dataset": "json", "data_files": [str(data)]}
                    ]
                },
            }
        )
    )
    params = load_params(params_file)
    folder = RunFolder(params.run_dir).ensure()
    probe = run_probe(params, folder, gpus=[])  # no GPU, as on this machine

    big_box = {**probe.host, "ram_total_bytes": 256 * GIB}  # a big CPU box: the 27B model fits in bf16
    folder.write_probe(replace(probe, host=big_box))
    code, log, peak = kit_decide_under_ulimit(params_file, 6 * GIB)
    assert code == 0, log[-3000:]
    assert "Traceback" not in log and "WARNING kit.decide.choose.scenario: no CPU step profile" in log
    decision = read_json(folder.decision)
    assert decision["efficiency"]["source"].startswith("nominal CPU figures")
    assert decision["cpu_profile"]["mode"] == "skipped" and "no CPU step profile" in decision["warnings"][0]
    assert not (folder.root / "step_profile.parquet").exists()
    assert peak < 2 * GIB, f"kit decide peaked at {peak / GIB:.1f} GiB"

    laptop = {**probe.host, "ram_total_bytes": 16 * GIB}  # a laptop: the model cannot be served at all
    folder.write_probe(replace(probe, host=laptop))
    code, log, peak = kit_decide_under_ulimit(params_file, 6 * GIB)
    assert code == 2 and "Traceback" not in log and peak < 2 * GIB
    assert "no CPU step profile" in log and "error: plain decoding does not fit" in log
