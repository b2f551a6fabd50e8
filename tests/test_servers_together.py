"""Whether stage 2's arms share one GPU (kit.decide.sweep.layout.servers_together): each server then gets a
KV cache of its own size through the flavor's cap flag, sized for the sweep's top level, and only
while weights plus caches fit under the memory fraction."""

from __future__ import annotations

import pytest
from conftest import REPO

from kit.artifacts import GpuSection, ProbeReport
from kit.decide.sweep import layout
from kit.decide.sweep.layout import GIB, sweep_kv_tokens
from kit.engines.flavors import flavor
from kit.engines.settings import sweep_arms
from kit.params import RunParams

H200 = {"name": "NVIDIA H200", "memory_total_bytes": 143771 * 2**20, "index": 0}
QWEN3_8B_WEIGHTS, QWEN3_8B_KV = 16.4e9, 147456  # bytes; KV bytes per token


def params(tmp_path, flavor="sglang", **over) -> RunParams:
    eng = {"flavor": flavor, "mem_fraction_static": 0.85, **over.pop("engine", {})}
    decide = {
        "concurrencies": [1, 16, 64, 256],
        "spec_steps": [1, 2, 3],
        "max_tokens": 128,
        **over.pop("decide", {}),
    }
    return RunParams.model_validate({"run": "t", "output_dir": tmp_path, "model": {"path": tmp_path},
                                     "engine": eng, "decide": decide})  # fmt: skip


def probe(gpus=(H200,)) -> ProbeReport:
    return ProbeReport(gpus=GpuSection(devices=list(gpus)))


def servers_together(p: RunParams, report: ProbeReport, *sizes):
    """kit.decide.sweep.layout.servers_together as the stage's set-up calls it: the params' flavor
    and their sweep's arms."""
    return layout.servers_together(p, report, flavor(p.engine.flavor), len(sweep_arms(p)), *sizes)


def running_caps(p: RunParams, report: ProbeReport, arch, prompts) -> dict[int, int]:
    """kit.decide.sweep.layout.running_caps as the stage's set-up calls it."""
    return layout.running_caps(p, report, arch, prompts, sweep_arms(p), flavor(p.engine.flavor))


def sweep_server_params(p: RunParams, cap):
    return layout.sweep_server_params(p, flavor(p.engine.flavor), cap)


def test_kv_tokens_cover_the_top_level_at_the_mean_prompt(tmp_path):
    p = params(tmp_path)
    prompts = [{"prompt_tokens": n} for n in range(100, 401)]  # mean 250
    assert sweep_kv_tokens(p, prompts, sweep_arms(p)) == int(1.25 * 256 * (250 + 128 + 3 + 1))


def test_kv_tokens_hold_the_longest_request_where_the_top_level_is_small(tmp_path):
    """The demo model on SGLang at 1 concurrent (H100, 2026-12-08): the mean prompt's KV gave each
    server 287 tokens and SGLang refused the longer prompts (628 tokens) and the pilot's answers."""
    p = RunParams.model_validate(
        {**params(tmp_path, decide={"concurrencies": [1], "spec_steps": [3], "max_tokens": 96}).model_dump(),
         "data": {"max_prompt_tokens": 1536, "sources": []},
         "generate": {"sampling": {"max_tokens": 192}}}
    )  # fmt: skip
    prompts = [{"prompt_tokens": n} for n in (20, 100, 630)]  # mean 250
    assert sweep_kv_tokens(p, prompts, sweep_arms(p)) == int(1.25 * (630 + 192 + 3 + 1))
    pilot = [{"prompt_tokens": 900}]  # the pilot's prompts go to plain's server too
    assert sweep_kv_tokens(p, prompts, sweep_arms(p), prompts + pilot) == int(1.25 * (900 + 192 + 3 + 1))
    uncounted = [{"prompt_tokens": None}]  # no count: the plan's bound
    assert sweep_kv_tokens(p, uncounted, sweep_arms(p)) == int(1.25 * (1536 + 192 + 3 + 1))
    many = params(tmp_path)  # at 256 the top level's sum is the larger
    assert sweep_kv_tokens(many, prompts, sweep_arms(many)) == int(1.25 * 256 * (250 + 128 + 3 + 1))


def test_an_8b_model_shares_the_h200_with_a_cap_per_server(tmp_path):
    three_arms = params(tmp_path, decide={"spec_steps": [1, 3]})
    together, why, cap = servers_together(three_arms, probe(), QWEN3_8B_WEIGHTS, 120_000, QWEN3_8B_KV)
    assert together and cap == ["--max-total-tokens", "120000"], why
    assert why.startswith("the arms share the GPU: 3 x") and "120,000 tokens" in why
    # four arms of 165K tokens each (42 GiB a server) do not fit in 0.85 of 140 GiB
    together, why, cap = servers_together(params(tmp_path), probe(), QWEN3_8B_WEIGHTS, 165_000, QWEN3_8B_KV)
    assert not together and not cap and "4 x 41.9 GiB" in why and "would exceed 119 GiB" in why


def test_too_big_to_share_runs_one_at_a_time_and_says_by_how_much(tmp_path):
    together, why, cap = servers_together(params(tmp_path), probe(), 54e9, 165_000, QWEN3_8B_KV)
    assert not together and not cap and "would exceed 119 GiB" in why, why


def test_a_hybrid_models_recurrent_state_counts(tmp_path):
    """Qwen3.6-27B on the H200: two servers of its weights and the sweep's KV cache alone fit in 0.85
    of the GPU, so the kit put them side by side, and both died at start for want of memory (SGLang
    0.5.16, docs/lab/h200/sglang/qwen3.6-27b-together/). Each also holds ~147 MiB of recurrent state per
    running sequence: 256 running is 37 GiB a server."""
    from kit.arch import arch_from_config
    from kit.decide import costmodel as cm
    from kit.modelshape import SHAPES

    arch = arch_from_config(SHAPES["qwen3.6-27b"].config)
    two_arms = params(tmp_path, decide={"spec_steps": [3]})
    args = (two_arms, probe(), cm.weight_bytes(arch), 91_052, arch.kv_bytes_per_token())
    together, why, _ = servers_together(*args)
    assert together, why  # what the kit did before it counted the state
    together, why, cap = servers_together(*args, arch.state_bytes_per_seq())
    assert not together and not cap and "GiB of recurrent state" in why and "would exceed" in why, why


def test_the_users_own_cap_is_kept_and_sizes_the_check(tmp_path):
    p = params(tmp_path, engine={"extra_args": ["--max-total-tokens", "2000000"]})
    together, why, cap = servers_together(p, probe(), QWEN3_8B_WEIGHTS, 165_000, QWEN3_8B_KV)
    assert not together and cap == [] and "2,000,000 tokens" in why  # 4 x 295 GB does not fit
    p = params(tmp_path, engine={"extra_args": ["--max-total-tokens", "50000"]})
    together, why, cap = servers_together(p, probe(), QWEN3_8B_WEIGHTS, 165_000, QWEN3_8B_KV)
    assert together and cap == [], why


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"engine": {"tp_size": 2}}, "a server spans several GPUs"),
        ({"decide": {"servers": "one_at_a_time"}}, "decide.servers is one_at_a_time"),
    ],
)
def test_what_keeps_the_arms_apart_on_a_gpu(tmp_path, over, said):
    together, why, cap = servers_together(
        params(tmp_path, **over), probe(), QWEN3_8B_WEIGHTS, 1000, QWEN3_8B_KV
    )
    assert not together and not cap and said in why


def test_an_engine_without_a_cap_flag_does_not_share(tmp_path):
    together, why, _ = servers_together(
        params(tmp_path, "vllm"), probe(), QWEN3_8B_WEIGHTS, 1000, QWEN3_8B_KV
    )
    assert not together and "vllm has no flag the kit knows to cap a server's KV cache" in why


def test_on_a_cpu_nothing_changes(tmp_path):
    together, why, cap = servers_together(params(tmp_path), probe(gpus=()), 1 * GIB, 1000, QWEN3_8B_KV)
    assert cap == [] and isinstance(together, bool) and why


def test_the_sweeps_servers_run_without_a_prefix_cache_and_stage_3s_keep_theirs(tmp_path):
    """The sweep sends its prompts again at every level (stage 3 sends each once): its servers get
    the flavor's prefix cache off, and the KV cap when the arms share a GPU; stage 3's params are
    not touched, and a user's own prefix-cache flag is kept as it is."""
    sglang = params(tmp_path)
    sweep, added = sweep_server_params(sglang, ["--max-total-tokens", "91052"])
    assert added == ["--max-total-tokens", "91052", "--disable-radix-cache"]
    assert sweep.engine.extra_args == added and sglang.engine.extra_args == []
    vllm, added = sweep_server_params(params(tmp_path, "vllm"), None)
    assert added == ["--no-enable-prefix-caching"] and vllm.engine.extra_args == added
    embedded = params(tmp_path, "transformers")
    assert sweep_server_params(embedded, None) == (embedded, [])
    own = params(tmp_path, "vllm", engine={"extra_args": ["--enable-prefix-caching"]})
    assert sweep_server_params(own, None) == (own, [])


def test_a_speculative_arm_of_a_hybrid_model_is_capped_to_what_its_state_leaves(tmp_path):
    """SGLang 0.5.16 reserves, for a hybrid model under speculation, max running requests x (1 +
    draft tokens) recurrent states before the KV cache: the Qwen3.6-27B shape's MTP k=3 server at 256
    asked for 183 GiB, and did not start (the H200, docs/lab/h200/sglang/qwen3.6-27b-mtp/). What that
    server saw there: 139.09 GiB free at start, 51.05 GiB of weights, 5.53 GiB of MTP draft (its
    layer and an embedding and LM head of its own), so 61.65 GiB for pools under 0.85. The kit's cap
    must fit in that, state and KV of the sweep's sequences together, and not waste half of it."""
    from kit.arch import arch_from_config
    from kit.engines.arms import Arm
    from kit.engines.settings import arm_engine
    from kit.modelshape import SHAPES

    arch = arch_from_config(SHAPES["qwen3.6-27b"].config)
    p = params(tmp_path, decide={"spec_steps": [1, 3]}, engine={"speculative": {"algorithm": "MTP"}})
    prompts = [{"prompt_tokens": 150}] * 256
    caps = running_caps(p, probe(), arch, prompts)
    assert set(caps) == {1, 3} and caps[1] > caps[3], caps  # plain holds 256 on the H200
    state, kv = arch.state_bytes_per_seq(), arch.kv_bytes_per_token()
    for k, cap in caps.items():
        need = cap * ((k + 2) * state + (150 + 128 + k + 1) * kv)
        assert cap % 8 == 0 and 0.75 * 61.65 * GIB < need <= 61.65 * GIB, (k, cap, need / GIB)
    mtp3 = arm_engine(p, Arm(3, "MTP"), True, caps[3])
    assert mtp3.max_running_requests == caps[3] and mtp3.cuda_graph_max_bs == caps[3]
    assert arm_engine(p, Arm(0), True, None).max_running_requests == 256  # plain keeps the top level
    # the user's own limit is theirs; a dense model, or an engine that grows its pools, is not capped
    mine = params(tmp_path, decide={"spec_steps": [3]}, engine={"max_running_requests": 200})
    assert running_caps(mine, probe(), arch, prompts) == {}
    assert running_caps(params(tmp_path, flavor="vllm"), probe(), arch, prompts) == {}
    dense = arch_from_config(SHAPES["qwen3-8b"].config)
    assert running_caps(p, probe(), dense, prompts) == {}
    assert running_caps(p, probe(gpus=()), arch, prompts) == {}  # no GPU: no plan


H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 81559 * 2**20, "index": 0}


def test_plain_decoding_of_a_hybrid_model_is_capped_too_where_its_state_does_not_fit(tmp_path):
    """On an 80 GB H100 the Qwen3.6-27B shape's plain server at 256 running did not start either
    (SGLang 0.5.16: 51.05 GiB of weights, 27.42 GiB left, "no GPU memory for the KV cache under
    --mem-fraction-static=0.85"; 2026-12-06, docs/lab/h200/sglang/2026-12-06.md): SGLang reserves
    each running request's recurrent state, ~147 MiB here, without speculation too. The plain arm
    gets a cap of its own (k 0), larger than any speculative arm's, and the sentence names it."""
    from kit.arch import arch_from_config
    from kit.decide.sweep.layout import running_cap_sentence
    from kit.engines.arms import Arm
    from kit.engines.settings import arm_engine
    from kit.modelshape import SHAPES

    arch = arch_from_config(SHAPES["qwen3.6-27b"].config)
    p = params(tmp_path, decide={"spec_steps": [1, 3]}, engine={"speculative": {"algorithm": "MTP"}})
    prompts = [{"prompt_tokens": 150}] * 256
    caps = running_caps(p, probe((H100,)), arch, prompts)
    assert set(caps) == {0, 1, 3} and caps[0] > caps[1] > caps[3], caps
    # what those servers had for their pools (their logs: 78.47 GiB free at start, 51.05 of weights,
    # 5.53 of MTP draft) holds what the caps ask; the MTP caps are below the 24 / 16 that failed
    state, kv = arch.state_bytes_per_seq(), arch.kv_bytes_per_token()
    for k, cap in caps.items():
        pool = (0.85 * 78.47 - 51.05 - (5.53 if k else 0)) * GIB
        need = cap * ((k + 2 if k else 1) * state + (150 + 128 + k + 1) * kv)
        assert cap % 8 == 0 and 0.5 * pool < need <= pool, (k, cap, need / GIB, pool / GIB)
    assert caps[1] < 24 and caps[3] < 16
    assert arm_engine(p, Arm(0), True, caps[0]).max_running_requests == caps[0]
    line = running_cap_sentence(caps, 256, "MTP")
    assert f"plain decoding at {caps[0]}, MTP k=1 at {caps[1]}, MTP k=3 at {caps[3]}" in line, line
    assert "of the sweep's top level 256" in line


def test_an_arm_without_memory_for_its_running_requests_is_started_again_at_half(tmp_path):
    """The memory plan's cap is an estimate: on the H100 the Qwen3.6-27B shape's MTP k=1 server at
    24 running did not start (SGLang's own words in its log). The sweep starts it again at 8 (half,
    in steps of 8, never below 8), and says so; another failure, or a limit the user set, is final."""
    from kit.decide.measure.servers import ArmServers
    from kit.engines.arms import Arm
    from kit.runfolder import RunFolder

    h100_log = (REPO / "docs/lab/h200/sglang/2026-12-06/qwen3.6-27b-h100/sweep-plain-tail.log").read_text()

    class Failed:
        def __init__(self, text: str) -> None:
            self.log_since_start = lambda: text

    p = params(tmp_path, decide={"spec_steps": [1]}, engine={"speculative": {"algorithm": "MTP"}})
    servers = ArmServers(p, RunFolder(tmp_path), [Arm(0), Arm(1, "MTP")], True, False, [], {1: 24})
    assert servers.arm_params["spec_k1"].engine.max_running_requests == 24
    assert servers._lower_running("spec_k1", Failed(h100_log))
    eng = servers.arm_params["spec_k1"].engine
    assert (eng.max_running_requests, eng.cuda_graph_max_bs) == (8, 8)
    assert not servers._lower_running("spec_k1", Failed(h100_log))  # at the floor: the failure stands
    assert servers.lowered == {"spec_k1": [24, 8]}
    assert servers._lower_running("plain", Failed(h100_log))  # 256 -> 128
    assert servers.arm_params["plain"].engine.max_running_requests == 128
    assert not servers._lower_running("plain", Failed("RuntimeError: something else"))
    mine = params(tmp_path, engine={"max_running_requests": 200})
    theirs = ArmServers(mine, RunFolder(tmp_path), [Arm(0)], True, False, [])
    assert not theirs._lower_running("plain", Failed(h100_log))  # the user's limit is theirs
