"""Memory plan: numbers worked out by hand for Qwen3.6-27B on an H200, TP and MLA variants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.arch import arch_from_config
from kit.errors import CostModelError
from kit.memoryplan import memory_plan

CONFIGS = Path(__file__).parent / "configs"
H200_BYTES = 143771 * 2**20  # what NVML reports for an H200: 150,754,820,096 B


def arch(name: str):
    return arch_from_config(json.loads((CONFIGS / name).read_text()))


def test_qwen36_on_h200_plain_by_hand() -> None:
    plan = memory_plan(arch("qwen3_6_27b.json"), H200_BYTES, 0.85, 4096, weight_bytes=55_600_000_000)
    # KV: 16 full-attention layers x (K + V) x 4 KV heads x head_dim 256 x 2 B (bf16) = 64 KiB per token
    assert plan.kv_bytes_per_token == 16 * 2 * 4 * 256 * 2 == 65536
    # state: 48 linear layers x (ssm 48 heads x 128 x 128 x 4 B + conv (2*16*128 + 48*128) x 3 x 2 B)
    assert plan.state_bytes_per_seq == 48 * (3_145_728 + 61_440) == 153_944_064  # ~146.8 MiB
    assert plan.bytes_per_seq == 4096 * 65536 + 153_944_064 == 422_379_520
    # budget int(150,754,820,096 x 0.85) = 128,141,597,081; minus 55.6e9 of weights
    assert plan.pool_bytes_plain == 72_541_597_081
    assert plan.max_seqs_plain == 171  # 171 x 422,379,520 = 72,226,897,920 <= pool < 172 x ...
    assert plan.max_seqs_spec == plan.max_seqs_plain  # no speculation asked: no buffers


def test_qwen36_on_h200_speculative_by_hand() -> None:
    plan = memory_plan(
        arch("qwen3_6_27b.json"),
        H200_BYTES,
        0.85,
        4096,
        weight_bytes=55_600_000_000,
        spec_draft_tokens=4,
        draft_weight_bytes=850_000_000,
    )
    # 4 intermediate states (615,776,256) + 4 draft-token KV slots (262,144)
    # + the MTP layer's own KV over the context: 65536 / 16 layers x 1 MTP layer x 4096 tokens (16,777,216)
    assert plan.spec_buffer_bytes_per_seq == 615_776_256 + 262_144 + 16_777_216 == 632_815_616
    assert plan.bytes_per_seq_spec == 1_055_195_136
    assert plan.pool_bytes_spec == 72_541_597_081 - 850_000_000
    assert plan.max_seqs_spec == 67  # 67 x 1,055,195,136 = 70,698,074,112 <= 71,691,597,081 < 68 x ...
    d = plan.to_dict()
    assert d["max_seqs_spec"] == 67 and d["max_seqs_plain"] == 171 and d["tp_size"] == 1
    json.dumps(d)


def test_tensor_parallel_splits_weights_kv_heads_and_state() -> None:
    a = arch("qwen3_6_27b.json")
    one = memory_plan(a, H200_BYTES, 0.85, 4096, weight_bytes=55_600_000_000)
    two = memory_plan(a, H200_BYTES, 0.85, 4096, weight_bytes=55_600_000_000, tp_size=2)
    assert two.weight_bytes == 27_800_000_000
    assert two.kv_bytes_per_token == 32768  # 2 of the 4 KV heads per GPU
    assert two.state_bytes_per_seq == 153_944_064 // 2
    eight = memory_plan(a, H200_BYTES, 0.85, 4096, weight_bytes=55_600_000_000, tp_size=8)
    assert eight.kv_bytes_per_token == 16384  # 4 KV heads over 8 GPUs: one (replicated) head each
    assert two.max_seqs_plain > 2 * one.max_seqs_plain


def test_mla_latent_is_replicated_across_tp() -> None:
    ds = arch("deepseek_v3.json")
    plan = memory_plan(ds, H200_BYTES, 0.9, 8192, weight_bytes=680_000_000_000, tp_size=8)
    assert plan.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70272
    assert plan.state_bytes_per_seq == 0
    assert plan.weight_bytes == 85_000_000_000


def test_default_weights_from_config_and_fp8_kv() -> None:
    a = arch("qwen3_32b.json")
    plan = memory_plan(a, 80 * 10**9, 0.9, 2048, kv_dtype_bytes=1)
    assert plan.weight_bytes == a.param_counts()[0] * 2
    assert plan.kv_bytes_per_token == 64 * 2 * 8 * 128 * 1  # 128 KiB in fp8 (256 KiB in bf16)
    # 72e9 budget - 65,522,892,800 B of weights = 6,477,107,200 B; 2048 tokens x 128 KiB = 268,435,456 B each
    assert plan.pool_bytes_plain == 6_477_107_200
    assert plan.max_seqs_plain == 24  # 24 x 268,435,456 = 6,442,450,944


def test_weights_larger_than_budget_give_zero_sequences() -> None:
    plan = memory_plan(arch("qwen3_32b.json"), 24 * 10**9, 0.9, 4096)
    assert plan.pool_bytes_plain < 0
    assert plan.max_seqs_plain == 0 and plan.max_seqs_spec == 0


@pytest.mark.parametrize(
    "kw", [{"mem_fraction": 1.2}, {"context_len": 0}, {"tp_size": 0}, {"gpu_mem_bytes": 0}]
)
def test_bad_inputs_raise_cost_model_error(kw: dict) -> None:
    args = {"gpu_mem_bytes": H200_BYTES, "mem_fraction": 0.8, "context_len": 10, "tp_size": 1} | kw
    with pytest.raises(CostModelError, match="memory_plan"):
        memory_plan(arch("qwen3_32b.json"), **args)


H100_BYTES = 81559 * 2**20  # NVML's total for an H100 80GB HBM3: 85,520,809,984 B


def test_what_one_server_runs_at_once_is_the_plan_of_what_the_engine_loads_out_of_what_is_free() -> None:
    """The one figure of an arm's running requests (kit.memoryplan.running_capacity), on the
    Qwen3.6-27B shape on an 80 GB H100 as SGLang 0.5.16 ran it (docs/lab/h200/sglang/2026-12-06.md:
    `Load weight end ... avail mem=27.42 GB, mem usage=51.05 GB`; plain started at 80 running, MTP k=1
    at 16, k=3 at 8; MTP at 24 and 16 did not start): the weights the engine loads, the memory free at
    its start, a recurrent state per running request and one more per draft token."""
    from kit.decide import costmodel as cm
    from kit.memoryplan import CUDA_CONTEXT_BYTES, running_capacity
    from kit.modelshape import SHAPES

    a = arch_from_config(SHAPES["qwen3.6-27b"].config)
    gib = 2**30
    plain = running_capacity(a, H100_BYTES, 0.85, 139 + 128)
    assert abs(plain.plan.weight_bytes / gib - 51.05) < 0.15  # what SGLang loaded, not the 47.7 a step reads
    assert abs(plain.plan.gpu_mem_bytes / gib - (27.42 + 51.05)) < 0.15  # free at its start
    assert (plain.planned, plain.running) == (97, 80)  # 0.9 x 97 = 87, rounded down to CUDA-graph steps of 8
    work = cm.Workload(139, 128, 0.85)
    figures = {k: cm.arm_capacity(a, H100_BYTES, work, cm.MTP, k) for k in (0, 1, 3)}
    assert {k: c.running for k, c in figures.items()} == {0: 80, 1: 16, 3: 8}
    assert figures[0] == plain and abs(figures[1].plan.draft_weight_bytes / gib - 5.53) < 0.1
    assert figures[1].planned < 24 and figures[3].planned < 16  # the caps that did not start
    # a CPU has no CUDA context; a plan that fits nothing gives 0, one under 8 is kept as it is
    cpu = running_capacity(a, H100_BYTES, 0.85, 267, reserved_bytes=0)
    assert cpu.plan.gpu_mem_bytes == H100_BYTES == plain.plan.gpu_mem_bytes + CUDA_CONTEXT_BYTES
    assert running_capacity(a, 60 * gib, 0.85, 267).running == 0
    small = running_capacity(a, 62 * gib, 0.85, 267)
    assert 0 < small.running == int(0.9 * small.planned) < 8, small.planned
