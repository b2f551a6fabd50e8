"""A server start's parts (weights, graphs, compile, warm-up), read from the engine's own log lines:
SGLang 0.5.16's as it ran on the H200, vLLM 0.32's CPU build as it ran here (the real server's own
start: tests/test_vllm_engine.py)."""

from __future__ import annotations

import re
from pathlib import Path

from kit.engines.flavors import FLAVORS

LAB = Path(__file__).resolve().parents[1] / "docs" / "lab" / "h200" / "sglang"


def starts(log: Path) -> list[str]:
    """Each start's part of a kit server log (the reaper's line opens each)."""
    return re.split(r"(?m)^(?=\[kit reaper \d+\] started)", log.read_text())[1:]


def test_sglang_0_5_16_plain_server_weights_graphs_and_warmup() -> None:
    first = starts(LAB / "qwen3.6-27b-mtp" / "sweep-plain.log")[0]
    # Load weight end. elapsed=0.32 s (shape-only weights); Capture target decode CUDA graph end.
    # elapsed=62.07 s; its last capture at 10:51:42, "fired up and ready to roll" at 10:52:11
    assert FLAVORS["sglang"].start_parts(first) == {"weights_s": 0.32, "graphs_s": 62.07, "warmup_s": 29.0}


def test_sglang_0_5_16_mtp_server_sums_the_draft_with_the_target() -> None:
    log = (LAB / "qwen3.6-27b-mtp" / "sweep-spec_k3.log").read_text()
    parts = FLAVORS["sglang"].start_parts(log)
    assert parts["weights_s"] == 0.33  # 0.32 the target, 0.01 its MTP draft
    assert parts["graphs_s"] == 28.82  # target verify 22.75, draft decode 4.61, draft extend 1.46
    assert set(parts) == {"weights_s", "graphs_s", "warmup_s"}


def test_sglang_0_5_23_lines_as_its_source_prints_them() -> None:
    """No GPU has run 0.5.23 here: its lines as cuda_graph_setup.py:790 (`bs=` before `elapsed=`),
    eagle_worker_v2.py:1855 (the adaptive runtime state) and model_runner.py:1374 print them."""
    log = (
        "[2027-01-02 10:00:00] Load weight end. elapsed=3.50 s, type=Qwen3ForCausalLM, avail mem=70.00 GB, "
        "mem usage=16.00 GB.\n"
        "[2027-01-02 10:00:40 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=12.25 s, "
        "mem usage=0.50 GB, avail mem=10.00 GB.\n"
        "[2027-01-02 10:00:45 TP0] Built adaptive runtime state steps=1: elapsed=4.75s, mem=0.20GB\n"
        "[2027-01-02 10:01:00] The server is fired up and ready to roll!\n"
    )
    assert FLAVORS["sglang"].start_parts(log) == {"weights_s": 3.5, "graphs_s": 17.0, "warmup_s": 15.0}


def test_a_log_without_start_lines_has_no_parts() -> None:
    assert FLAVORS["sglang"].start_parts((LAB / "eagle3" / "server-plain.log").read_text()) == {}
    assert FLAVORS["vllm"].start_parts("") == {}
    assert FLAVORS["transformers"].start_parts("Loading weights took 1.00 seconds") == {}


W, E = "(Worker pid=11027) INFO 12-07", "(EngineCore pid=10771) INFO 12-07"
VLLM_CPU = "\n".join(
    [
        f"{W} 19:09:13 [base_loader.py:82] Initializing model took 0.364458 seconds",
        f"{W} 19:09:13 [default_loader.py:501] Loading weights took 0.02 seconds",
        f"{W} 19:09:16 [cpu_model_runner.py:87] Warming up model for the compilation...",
        f"{W} 19:10:54 [monitor.py:91] [backbone] Initial profiling/warmup run took 0.15 s",
        f"{W} 19:10:56 [cpu_model_runner.py:91] Warming up done.",
        f"{E} 19:11:03 [core.py:402] init engine (profile, create kv cache, warmup model) took 107.22 s",
    ]
)
"""vLLM 0.32's CPU build starting the demo model with torch.compile on (no --enforce-eager), its
compile caches empty (2026-12-07, this machine, two cores shared)."""


def test_vllm_cpu_build_weights_its_compiling_warmup_and_engine_init() -> None:
    assert FLAVORS["vllm"].start_parts(VLLM_CPU) == {
        "weights_s": 0.02,
        "compile_s": 100.0,
        "engine_init_s": 107.22,
    }


def test_vllm_on_gpus_its_own_compile_total_and_graph_capture() -> None:
    """As 0.32 prints them on CUDA: v1/worker/gpu_model_runner.py:6582, v1/engine/core.py:396."""
    log = (
        "(Worker pid=7) INFO 12-31 23:59:50 [default_loader.py:501] Loading weights took 41.07 seconds\n"
        "(Worker pid=7) INFO 12-31 23:59:58 [monitor.py:40] [backbone] torch.compile took 31.40 s in total\n"
        "(Worker pid=7) INFO 01-01 00:00:20 [gpu_model_runner.py:6582] Graph capturing finished in 14 secs, "
        "took 0.61 GiB\n"
        "(EngineCore pid=6) INFO 01-01 00:00:21 [core.py:396] init engine (profile, create kv cache, warmup "
        "model) took 60.11 s (compilation: 33.02 s)\n"
    )
    assert FLAVORS["vllm"].start_parts(log) == {
        "weights_s": 41.07,
        "compile_s": 33.02,  # its own total over every compiled part, not the backbone's line alone
        "graphs_s": 14.0,
        "engine_init_s": 60.11,
    }
