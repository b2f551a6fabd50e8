"""Cost model: the published GB300 anchor, acceptance arithmetic, roofline regimes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.arch import arch_from_config
from kit.decide import costmodel as cm
from kit.decide.acceptance import (
    accept_length,
    accept_length_for,
    accept_length_positional,
    acceptance_rate,
)
from kit.decide.predict import (
    SGLANG_SPEC_RUNNING_CAP,
    Workload,
    crossover,
    predict_ladder,
    with_ratio,
)
from kit.errors import CostModelError

CONFIGS = Path(__file__).parent / "configs"
# GB300 (Blackwell Ultra): ~8 TB/s HBM3e, ~2.5 PFLOP/s dense bf16, 288 GB (specdec.md / NVIDIA datasheet).
GB300 = cm.Hardware(bandwidth_Bps=8e12, flops_bf16=2.5e15, memory_bytes=288e9, name="GB300")
H200 = cm.Hardware(bandwidth_Bps=4.8e12, flops_bf16=989e12, memory_bytes=141e9, name="H200")


def _arch(name: str):
    return arch_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def test_published_gb300_anchor_within_25_percent() -> None:
    """SGLang cookbook, Qwen3.x-27B BF16 on one GB300, 1024 in / 1024 out, MTP 3 steps, accept 3.2.

    The cookbook's command leaves --max-running-requests unset, so SGLang runs at most 48
    requests under speculation: the prediction applies that engine cap, nothing else is fitted.
    """
    ladder = predict_ladder(
        _arch("qwen3_6_27b"),
        GB300,
        [1, 16, 64],
        [3],
        {3: 3.2},
        Workload(1024, 1024, 0.85),
        engine_caps={3: SGLANG_SPEC_RUNNING_CAP},
    )
    ratios = with_ratio(ladder).query("spec_k == 3").set_index("concurrency").ratio_vs_plain
    for c, published in {1: 2.53, 16: 1.87, 64: 1.25}.items():
        assert abs(ratios[c] / published - 1) <= 0.25, (c, ratios[c], published)
    assert ratios[1] > ratios[16] > ratios[64]


def test_engine_cap_lowers_speculative_throughput_above_it() -> None:
    arch, work = _arch("qwen3_6_27b"), Workload(1024, 1024, 0.85)
    free = predict_ladder(arch, GB300, [64], [3], {3: 3.2}, work).query("spec_k == 3")
    capped = predict_ladder(arch, GB300, [64], [3], {3: 3.2}, work, engine_caps={3: 48}).query("spec_k == 3")
    assert capped.running.item() == 48
    assert capped.output_tok_s.item() < free.output_tok_s.item()


def test_accept_length_and_rate_round_trip() -> None:
    for a in (0.3, 0.69, 0.86):
        for k in (1, 3, 5):
            assert acceptance_rate(accept_length(a, k), k) == pytest.approx(a, abs=1e-9)
    assert accept_length(0.5, 1) == pytest.approx(1.5)
    assert accept_length_positional([0.9, 0.8]) == pytest.approx(1 + 0.9 + 0.72)
    assert accept_length_positional([0.7] * 3) == pytest.approx(accept_length(0.7, 3))


def test_published_accept_lengths_give_consistent_rate() -> None:
    """InferenceX thinking-off accept lengths 1.90 / 2.68 / 3.28 / 3.79 for k = 1..4: a ~ 0.86 at k=3."""
    assert acceptance_rate(3.28, 3) == pytest.approx(0.86, abs=0.03)
    E, source = accept_length_for(4, {3: 3.28})
    assert E == pytest.approx(3.79, abs=0.15) and "carried over" in source


@pytest.mark.parametrize("a", [0.0, 1.0, -0.1, 1.2])
def test_acceptance_outside_open_interval_is_an_error(a: float) -> None:
    with pytest.raises(CostModelError, match="strictly between 0 and 1"):
        accept_length(a, 3)


@pytest.mark.parametrize(("E", "k"), [(4.5, 3), (0.9, 3), (2.1, 1)])
def test_impossible_accept_length_is_an_error(E: float, k: int) -> None:
    with pytest.raises(CostModelError, match="impossible"):
        acceptance_rate(E, k)
    with pytest.raises(CostModelError, match="impossible"):
        predict_ladder(_arch("qwen3_32b"), H200, [1], [k], {k: E})


def test_ladder_beyond_memory_is_an_error_or_marked() -> None:
    arch = _arch("qwen3_32b")
    with pytest.raises(CostModelError, match="memory holds only"):
        predict_ladder(arch, H200, [1, 4096], [], work=Workload(4096, 4096, 0.9))
    marked = predict_ladder(arch, H200, [1, 4096], [], work=Workload(4096, 4096, 0.9), strict=False)
    assert list(marked.feasible) == [True, False] and marked.output_tok_s.isna().tolist() == [False, True]


def test_verify_is_nearly_free_when_memory_bound_and_not_when_compute_bound() -> None:
    arch = _arch("qwen3_32b")
    t1, t4 = (cm.step_time(arch, H200, 1, q, 1024) for q in (1, 4))
    assert t4 / t1 < 1.05
    assert not cm.is_compute_bound(arch, H200, 1, 4, 1024)
    big1, big4 = (cm.step_time(arch, H200, 256, q, 1024) for q in (1, 4))
    assert cm.is_compute_bound(arch, H200, 256, 4, 1024)
    assert big4 / big1 > 2.0


def test_hybrid_state_and_snapshots_count_in_bytes() -> None:
    arch = _arch("qwen3_6_27b")
    state = arch.state_bytes_per_seq(4, 2)
    plain = cm.step_bytes(arch, 8, 1, 0) - cm.step_bytes(arch, 1, 1, 0)
    verify = cm.step_bytes(arch, 8, 4, 0) - cm.step_bytes(arch, 1, 4, 0)
    assert plain == pytest.approx(7 * (2 * state + arch.kv_bytes_per_token()))
    assert verify - plain == pytest.approx(7 * (6 * state + 3 * arch.kv_bytes_per_token()))


def test_moe_reads_fewer_weights_at_batch_one() -> None:
    arch = _arch("deepseek_v3")
    assert cm.weight_bytes(arch, tokens=1) < 0.2 * cm.weight_bytes(arch)
    assert cm.weight_bytes(arch, tokens=4096) == pytest.approx(cm.weight_bytes(arch), rel=0.01)


def test_crossover_moves_up_with_context() -> None:
    arch, conc = _arch("qwen3_32b"), [1, 8, 32, 64, 128, 256]
    short = predict_ladder(arch, H200, conc, [3], {3: 3.0}, Workload(256, 256, 0.9))
    long_ = predict_ladder(arch, H200, conc, [3], {3: 3.0}, Workload(2048, 256, 0.9), strict=False)
    x_short = crossover(short, 3)
    assert x_short is not None
    assert (crossover(long_, 3) or 10**9) >= x_short


def test_bad_hardware_and_step_are_errors() -> None:
    with pytest.raises(CostModelError):
        cm.Hardware(0, 1e15, 1e9)
    with pytest.raises(CostModelError):
        cm.step_time(_arch("qwen3_32b"), H200, 0, 1, 10)
