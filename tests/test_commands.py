"""Command lines of every engine flavor (`Flavor.command`), pinned against the engines' flags
(docs/engines.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kit.engines.flavors import FLAVORS, flavor, server_command, server_env
from kit.engines.flavors.transformers import cli as transformers_cli
from kit.engines.launcher import Launcher, adapt_flags, parse_help
from kit.errors import EngineError, ParamsError
from kit.params import RunParams

PY = "/opt/sglang-env/bin/python"


def params(model: str = "/models/qwen", **engine: object) -> RunParams:
    return RunParams.model_validate({"run": "t", "model": {"path": model}, "engine": engine})


def flag_values(cmd: list[str]) -> dict[str, str | None]:
    """{--flag: value or None for a bare switch} of an argv (after the module / script part)."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(cmd):
        if arg.startswith("--"):
            nxt = cmd[i + 1] if i + 1 < len(cmd) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_flavor_registry_lists_the_startable_flavors() -> None:
    assert sorted(name for name, fl in FLAVORS.items() if fl.started) == ["sglang", "transformers", "vllm"]


def test_sglang_full_command_uses_the_reference_flags() -> None:
    p = params(
        flavor="sglang", python=PY, tp_size=2, dp_size=4, mem_fraction_static=0.8, max_running_requests=256,
        cuda_graph_max_bs=160, attention_backend="fa3", mamba_strategy="extra_buffer", context_length=8192,
        speculative={"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
                     "draft_model_path": "/models/draft"},
        extra_args=["--schedule-policy", "lpm"],
    )  # fmt: skip
    cmd = server_command(p, 31000)
    assert cmd[:3] == [PY, "-m", "sglang.launch_server"]
    assert flag_values(cmd) == {
        "--model-path": "/models/qwen", "--host": "127.0.0.1", "--port": "31000", "--tp-size": "2",
        "--dp-size": "4", "--mem-fraction-static": "0.8", "--max-running-requests": "256",
        "--cuda-graph-max-bs": "160", "--attention-backend": "fa3", "--speculative-algorithm": "EAGLE",
        "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "4", "--speculative-draft-model-path": "/models/draft",
        "--mamba-scheduler-strategy": "extra_buffer",
        "--enable-metrics": None, "--context-length": "8192", "--schedule-policy": "lpm",
    }  # fmt: skip
    assert cmd[-2:] == ["--schedule-policy", "lpm"], "extra_args come last, verbatim"


def test_sglang_minimal_command_leaves_engine_defaults_alone() -> None:
    cmd = server_command(params(flavor="sglang", enable_metrics=False), 30000)
    assert cmd[0] == sys.executable, "engine.python defaults to this interpreter"
    assert set(flag_values(cmd)) == {"--model-path", "--host", "--port", "--tp-size", "--dp-size"}


@pytest.mark.parametrize(("algorithm", "sent"), [("MTP", "EAGLE"), ("NEXTN", "NEXTN"), ("EAGLE3", "EAGLE3")])
def test_sglang_speculative_algorithm_names(algorithm: str, sent: str) -> None:
    p = params(flavor="sglang", max_running_requests=64, speculative={"algorithm": algorithm, "num_steps": 2})
    values = flag_values(server_command(p, 1))
    assert values["--speculative-algorithm"] == sent
    assert values["--speculative-num-steps"] == "2"
    assert "--speculative-eagle-topk" not in values, "unset speculative values are left to SGLang"


def test_sglang_ngram_asks_for_a_chain_of_k_drafted_tokens() -> None:
    """SGLang's n-gram drafts a tree whose breadth overrides top-k: a chain of k + 1 is asked for."""
    p = params(flavor="sglang", max_running_requests=64, speculative={"algorithm": "NGRAM", "num_steps": 3})
    values = flag_values(server_command(p, 1))
    assert values["--speculative-algorithm"] == "NGRAM"
    assert values["--speculative-num-draft-tokens"] == "4"
    assert values["--speculative-ngram-max-bfs-breadth"] == "1"
    assert "--speculative-num-steps" not in values and "--speculative-eagle-topk" not in values


def test_sglang_warns_that_speculation_lowers_max_running_requests() -> None:
    spec = {"algorithm": "MTP", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    with pytest.warns(UserWarning, match="48"):
        server_command(params(flavor="sglang", speculative=spec), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        server_command(params(flavor="sglang", speculative=spec, max_running_requests=200), 1)


def test_vllm_command_maps_each_setting() -> None:
    p = params(
        flavor="vllm", python=PY, tp_size=2, dp_size=2, mem_fraction_static=0.9, max_running_requests=128,
        context_length=4096, attention_backend="FLASHINFER", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
    )  # fmt: skip
    cmd = server_command(p, 8000)
    assert cmd[:3] == [PY, "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_values(cmd) == {
        "--model": "/models/qwen", "--host": "127.0.0.1", "--port": "8000", "--tensor-parallel-size": "2",
        "--data-parallel-size": "2", "--gpu-memory-utilization": "0.9", "--max-num-seqs": "128",
        "--max-model-len": "4096",
    }  # fmt: skip
    assert server_env(p) == {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"algorithm": "MTP", "num_steps": 3}, {"method": "mtp", "num_speculative_tokens": 3}),
        ({"algorithm": "NEXTN", "num_steps": 2}, {"method": "mtp", "num_speculative_tokens": 2}),
        ({"algorithm": "MTP"}, {"method": "mtp"}),
        ({"algorithm": "EAGLE", "num_steps": 3, "draft_model_path": "/d"},
         {"method": "eagle", "num_speculative_tokens": 3, "model": "/d"}),
        ({"algorithm": "EAGLE3", "num_draft_tokens": 5, "draft_model_path": "/e3"},
         {"method": "eagle3", "num_speculative_tokens": 4, "model": "/e3"}),
        ({"algorithm": "EAGLE", "num_steps": 2}, {"method": "mtp", "num_speculative_tokens": 2}),
        ({"algorithm": "STANDALONE", "num_steps": 2, "draft_model_path": "/small"},
         {"method": "draft_model", "num_speculative_tokens": 2, "model": "/small"}),
        ({"algorithm": "NGRAM", "num_steps": 4},
         {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}),
    ],
)  # fmt: skip
def test_vllm_speculative_config(spec: dict[str, object], expected: dict[str, object]) -> None:
    cmd = server_command(params(flavor="vllm", speculative=spec), 1)
    assert json.loads(flag_values(cmd)["--speculative-config"] or "") == expected


def test_vllm_draft_model_algorithms_need_a_length_and_a_model() -> None:
    with pytest.raises(ParamsError, match="num_steps"):
        server_command(
            params(flavor="vllm", speculative={"algorithm": "EAGLE3", "draft_model_path": "/d"}), 1
        )
    with pytest.raises(ParamsError, match="draft_model_path"):
        server_command(params(flavor="vllm", speculative={"algorithm": "STANDALONE", "num_steps": 2}), 1)


def test_transformers_command_uses_the_console_script_next_to_the_interpreter(tmp_path: Path) -> None:
    model = tmp_path / "m"
    p = params(model=str(model))
    cmd = server_command(p, 8123)
    script = Path(sys.executable).parent / "transformers"
    assert script.is_file(), "the venv has transformers[serving]"
    assert cmd == [str(script), "serve", str(model), "--continuous-batching", "--device", "cpu",
                   "--host", "127.0.0.1", "--port", "8123",
                   "--cb-num-blocks", "128", "--cb-max-batch-tokens", "2048"]  # fmt: skip
    assert server_env(p) == {"HF_HUB_OFFLINE": "1"}


def test_transformers_cpu_cache_is_bounded_by_params_and_user_flags_win() -> None:
    sized = flag_values(server_command(params(max_running_requests=16, context_length=1000), 1))
    assert sized["--cb-num-blocks"] == "63", "16 x 1000 tokens in pages of 256, rounded up"
    user = server_command(params(extra_args=["--cb-num-blocks=7"]), 1)
    assert "--cb-num-blocks" not in user and user[-3:] == [
        "--cb-max-batch-tokens",
        "2048",
        "--cb-num-blocks=7",
    ]
    gpu = flag_values(server_command(params(device="cuda"), 1))
    assert gpu["--device"] == "cuda" and "--cb-num-blocks" not in gpu, "on a GPU transformers sizes its cache"


@pytest.mark.slow
def test_transformers_falls_back_to_the_cli_module_and_it_runs(tmp_path: Path) -> None:
    """An interpreter without the console script beside it: `python -m transformers.cli.transformers`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    python = bindir / "python"
    python.symlink_to(sys.executable)
    cli = transformers_cli(python)
    assert cli == [str(python), "-m", "transformers.cli.transformers"]
    # A symlinked interpreter misses this venv's site-packages: run the module form with the real one.
    module_form = [sys.executable, *cli[1:], "serve", "--help"]
    out = subprocess.run(module_form, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "--continuous-batching" in out.stdout


def test_transformers_refuses_speculation() -> None:
    assert flavor("transformers").no_speculation
    assert flavor("sglang").no_speculation is None
    with pytest.raises(ParamsError, match="speculative"):
        server_command(params(speculative={"algorithm": "MTP"}), 1)


def test_external_has_no_command_and_user_env_wins() -> None:
    p = params(flavor="external", base_url="http://10.0.0.5:30000")
    with pytest.raises(EngineError, match="external"):
        server_command(p, 1)
    assert server_env(params(env={"HF_HUB_OFFLINE": "0", "X": "1"})) == {"HF_HUB_OFFLINE": "0", "X": "1"}


def test_adapt_flags_renames_the_mamba_strategy_flag_both_ways() -> None:
    old = ["py", "-m", "sglang.launch_server", "--mamba-scheduler-strategy", "extra_buffer", "--port", "1"]
    new, notes = adapt_flags(old, Launcher(frozenset({"--mamba-radix-cache-strategy", "--port"})))
    assert new == [
        "py",
        "-m",
        "sglang.launch_server",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--port",
        "1",
    ]
    assert len(notes) == 1 and "renamed" in notes[0]
    back, _ = adapt_flags(
        ["--mamba-radix-cache-strategy=no_buffer"], Launcher(frozenset({"--mamba-scheduler-strategy"}))
    )
    assert back == ["--mamba-scheduler-strategy=no_buffer"]


def test_adapt_flags_reports_unknown_flags_and_keeps_the_command_when_unknown() -> None:
    cmd = ["--speculative-algorithm", "EAGLE", "--enable-metrics"]
    same, notes = adapt_flags(cmd, Launcher(frozenset({"--speculative-algorithm"})))
    assert same == cmd
    assert notes == ["--enable-metrics is not accepted by the installed launcher"]
    assert adapt_flags(cmd, None) == (cmd, [])


def test_parse_help_reads_the_flags_of_a_help_text() -> None:
    text = """usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
      --mamba-radix-cache-strategy {no_buffer,extra_buffer,extra_buffer_lazy}
      --enable-metrics      Enable log prometheus metrics. (see --tp-size)"""
    assert parse_help(text).flags == {
        "--model-path",
        "--tp-size",
        "--mamba-radix-cache-strategy",
        "--enable-metrics",
    }
