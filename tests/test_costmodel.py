"""Cost model: validation against published tables, step terms, draft kinds, fitting, bad input.

The published tables (data, citations and settings in tests/published_tables.py):

- SGLang cookbook, Qwen3.x-27B MTP on one GB300 (fitted);
- EAGLE-3 (arXiv 2503.01840) Table 3, SGLang on H100, batch 2-64 (held out);
- EAGLE-3 (arXiv 2503.01840) Table 5, vLLM on RTX 3090, batch 2-56 (held out);
- MagicDec (arXiv 2408.11049), Llama-3.1-8B self-speculation, 32K context, 8xA100 / 8xH100 (fitted);
- SGLang docs, DeepSeek-V3 MTP on H200 TP8, batch 1 and 32 (held out);
- SpecForge #339, Qwen3-30B-A3B EAGLE-3 on 2 x H100, batch 1 and 4 (held out);
- MagicDec, Llama-2-7B self-speculation at 8K (held out).

Held out means judged at the kit's defaults, the engine family's fixed costs and an independent accept
length, with no constant of the table's own; a table missed is listed (KNOWN_MISSES, docs/costmodel.md).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from published_tables import (
    FITTED,
    FITTED_TOLERANCE,
    HELD_OUT_TOLERANCE,
    KNOWN_MISSES,
    TABLES,
    h200_eagle3_steps,
    h200_eagle3_table,
    h200_qwen36_mtp_table,
    held_out_record,
    predicted,
    refit_fixed_costs,
    sglang_h200_costs,
    vllm_costs_from_20780,
    with_kernel_factors_only,
)

from kit.arch import arch_from_config
from kit.decide import costmodel as cm
from kit.decide.costmodel import (
    MTP,
    NGRAM,
    Draft,
    Scenario,
    Workload,
    accept_length,
    accept_length_for,
    acceptance_rate,
    crossover,
    draft_from_config,
    draft_time,
    draft_weight_bytes,
    fit_to_sweep,
    predict_ladder,
    predict_sweep,
)
from kit.decide.profile.profiler import PROFILE_FREE, calibrate_many
from kit.errors import CostModelError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "configs"
H200 = cm.Hardware(bandwidth_Bps=4.8e12, flops_bf16=989e12, memory_bytes=141e9, name="H200", link_Bps=450e9)


def _arch(name: str):
    return arch_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def on_h200(name: str, tp: int = 1, **scenario) -> Scenario:
    """The model `name` on the H200 (tensor parallel over `tp` GPUs)."""
    return Scenario(_arch(name), H200, work=Workload(tp_size=tp), **scenario)


# ---- published tables ---------------------------------------------------------------------------
def test_at_most_half_of_the_tables_are_fitted() -> None:
    assert len(FITTED) <= len(TABLES) / 2
    assert set(KNOWN_MISSES) <= {t.name for t in TABLES} - set(FITTED)


def _trend_right(rows: list[dict]) -> bool:
    first, last = first_and_last_on_one_gpu(rows)
    return (first["published"] > last["published"]) == (first["predicted"] > last["predicted"])


@pytest.mark.parametrize("table", [t for t in TABLES if t.name not in FITTED], ids=lambda t: t.name)
def test_held_out_table_within_25_percent_and_trend_right_or_a_listed_miss(table) -> None:
    """At the kit's defaults, with the accept length measured independently for that draft head and the
    engine family's own fixed costs: every point within 25% and the trend with batch right, or the
    table is a known miss of that kind, and then it still misses (a table that comes right fails here
    until KNOWN_MISSES and docs/costmodel.md say so)."""
    rows = predicted(table)
    worst = max(abs(r["error"]) for r in rows)
    misses = {"error": worst > HELD_OUT_TOLERANCE, "trend": len(rows) > 1 and not _trend_right(rows)}
    expected = KNOWN_MISSES.get(table.name, (None, ""))[0]
    kinds = set(expected.split("+")) if expected else set()
    assert {kind for kind, missed in misses.items() if missed} == kinds, (
        table.name,
        [(r["label"], round(r["error"], 3)) for r in rows],
    )


def test_no_held_out_table_carries_a_constant_of_its_own() -> None:
    """A table names its engine family; the fixed costs are that family's, shared by every table."""
    for t in TABLES:
        assert isinstance(t.engine, str) and t.engine in cm.ENGINE_COSTS, t.name


def test_known_misses_are_listed_in_the_doc_with_their_term() -> None:
    doc = (ROOT / "docs/costmodel.md").read_text()
    section = doc[doc.index("### Known misses") :]
    for name in KNOWN_MISSES:
        assert f"`{name}`" in section, name


def test_the_band_quotes_the_held_out_record() -> None:
    """kit.decide.costmodel.validation.HELD_OUT (what notebook 02 and the index page draw) is what the
    published tables give at the defaults."""
    from kit.decide.costmodel.validation import HELD_OUT

    recorded = [(h.name, h.points, h.min_error, h.max_error, h.known_miss) for h in HELD_OUT]
    assert len(recorded) == len(held_out_record())
    for got, want in zip(recorded, held_out_record(), strict=True):
        assert got[:2] == want[:2] and got[4] == want[4], got
        assert got[2:4] == pytest.approx(want[2:4], abs=0.0015), got


def first_and_last_on_one_gpu(rows: list[dict]) -> tuple[dict, dict]:
    """The first and last point of the first GPU's rows ("8xA100 B=32" labels name the GPU first)."""
    gpu = rows[0]["label"].split()[0] if " " in rows[0]["label"] else None
    same = [r for r in rows if gpu is None or r["label"].split()[0] == gpu]
    return same[0], same[-1]


def test_the_first_point_protocol_hides_the_draft_cost_in_the_accept_length() -> None:
    """Fixing E on the first point of EAGLE-3's H100 table asks for an accept length the head does
    not have (2.79 measured for a chain of 3): the model's missing draft cost went into E."""
    table = next(t for t in TABLES if t.name == "sglang_eagle3_h100")
    fitted_e = predicted(table, protocol="first_point")[0]["E"]
    assert abs(fitted_e - table.accept) > 0.1, fitted_e


@pytest.mark.parametrize("table", [t for t in TABLES if t.name in FITTED], ids=lambda t: t.name)
def test_fitted_table_within_twelve_percent(table) -> None:
    assert max(abs(r["error"]) for r in predicted(table)) <= FITTED_TOLERANCE


def test_magicdec_speedup_grows_with_batch_at_long_context() -> None:
    """The regime the old max(memory, compute) model got backwards: long context, large batch."""
    magic = next(t for t in TABLES if t.name == "magicdec_selfspec")
    a100 = [r["predicted"] for r in predicted(magic) if r["label"].startswith("8xA100")]
    assert a100[0] < a100[1]


def test_fixed_cost_defaults_are_the_fit_on_the_fitted_tables_only() -> None:
    refit = refit_fixed_costs(with_kernel_factors_only())
    for table in TABLES:
        for a, b in zip(predicted(table, refit), predicted(table), strict=True):
            assert a["predicted"] == pytest.approx(b["predicted"], rel=0.01), (table.name, a["label"])


def test_engine_family_costs_come_from_their_sources() -> None:
    """SGLang's are the defaults (measured on the H200, below); vLLM's re-derive from issue #20780."""
    sglang, vllm = cm.engine_costs("sglang"), cm.engine_costs("vllm")
    d = cm.DEFAULT_EFFICIENCY
    assert (sglang.draft_pass_s, sglang.spec_iter_s, sglang.spec_seq_s) == (
        d.draft_pass_s,
        d.spec_iter_s,
        d.spec_seq_s,
    )
    per_pass, per_iteration = vllm_costs_from_20780()
    assert vllm.draft_pass_s == pytest.approx(per_pass, rel=0.02)
    assert vllm.spec_iter_s == pytest.approx(per_iteration, rel=0.02)
    assert "#20780" in vllm.source and vllm.gpu and vllm.version
    assert cm.engine_costs("transformers") is sglang
    assert cm.with_engine(d, "vllm").draft_pass_s == vllm.draft_pass_s
    assert cm.engine_costs("sglang", "fa3") is sglang and cm.engine_costs("vllm", "triton") is vllm
    assert cm.with_engine(d, "sglang", "triton").spec_seq_s == cm.engine_costs("sglang", "triton").spec_seq_s


def test_sglang_costs_re_derive_from_the_committed_h200_logs() -> None:
    """engines.py's SGLang figures are costs_from_step_table on SGLang 0.5.16's own step times
    (docs/lab/h200/sglang/eagle3/server-*.log through benchmarks/sglang_step_times.py): a constant cannot
    drift from its source. The default leaves the per-sequence term out (the triton backend's)."""
    got = sglang_h200_costs()
    sglang, triton = cm.engine_costs("sglang"), cm.engine_costs("sglang", "triton")
    for c in (sglang, triton):
        assert c.draft_pass_s == pytest.approx(got.draft_pass_s, abs=2e-6)
        assert c.spec_iter_s == pytest.approx(got.spec_iter_s, rel=0.02)
        assert "0.5.16" in c.version and c.gpu == "H200" and "triton" in c.source
    assert triton.spec_seq_s == pytest.approx(got.spec_seq_s, rel=0.02)
    assert sglang.spec_seq_s == 0.0
    # three numbers carry the eight points: what the model's kernels leave is flat in k and a line in B
    assert max(abs(m) for m in got.misfit_s.values()) < 1.5e-3, got.misfit_s
    assert got.residual_s[(3, 256)] == pytest.approx(got.residual_s[(1, 256)], rel=0.05)
    plain, spec = h200_eagle3_steps()  # the brief's table, as the logs give it
    assert round(1e3 * plain[1], 2) == 4.99 and round(1e3 * spec[1][256], 2) == 68.94
    assert round(1e3 * spec[3][256], 2) == 83.59


def test_h200_eagle3_table_at_the_triton_costs() -> None:
    """The table the SGLang costs came from (fitted): with `sglang/triton` every speculative step is
    within 20% of SGLang's own (the plain step's offset, 1.1-2.2 ms short in the model, included); at
    the default (no per-sequence term) those at 64 and 256 are less than half of what was measured."""
    triton = h200_eagle3_table(cm.with_engine(cm.DEFAULT_EFFICIENCY, "sglang", "triton"))
    for r in (r for r in triton if r["k"]):
        assert r["predicted_step_ms"] == pytest.approx(r["step_ms"], rel=0.2), r
    default = h200_eagle3_table()
    assert all(r["predicted_step_ms"] < 0.5 * r["step_ms"] for r in default if r["k"] and r["B"] >= 64)


def test_h200_qwen36_mtp_held_out_within_its_error() -> None:
    """The 27B hybrid's MTP run (held out): at the backend it ran (`sglang/triton`) every step within
    20% of SGLang's own, plain and MTP k=3, and the MTP step's growth with the batch (the intermediate
    recurrent states a verify writes, 147 MiB a sequence per token) within 25%; at the defaults too."""
    for eff, rel in (
        (cm.with_engine(cm.DEFAULT_EFFICIENCY, "sglang", "triton"), 0.2),
        (cm.DEFAULT_EFFICIENCY, 0.25),
    ):
        rows = h200_qwen36_mtp_table(eff)
        for r in rows:
            assert r["predicted_step_ms"] == pytest.approx(r["step_ms"], rel=rel), r
        mtp = {r["B"]: r for r in rows if r["k"]}
        grew, predicted = (
            mtp[79]["step_ms"] - mtp[1]["step_ms"],
            mtp[79]["predicted_step_ms"] - mtp[1]["predicted_step_ms"],
        )
        assert predicted == pytest.approx(grew, rel=0.25), (grew, predicted)


def test_kernel_defaults_are_the_h200_profile_calibration() -> None:
    pairs = [
        (pd.read_parquet(ROOT / f"docs/lab/h200/profile-synthetic-{name}/profile.parquet"), _arch(config))
        for name, config in (("qwen3-32b", "qwen3_32b"), ("llama3.1-8b", "llama3_1_8b"))
    ]
    fitted = calibrate_many(pairs, cm.Hardware(4.8e12, 989e12, 141e9, "H200"))
    for name in ("bw", "flops", "attn_flops"):
        assert getattr(fitted, name) == pytest.approx(getattr(cm.DEFAULT_EFFICIENCY, name), rel=0.02), name
    assert set(PROFILE_FREE) >= {"bw", "flops", "gemm_half_tokens", "attn_flops", "attn_half_rows"}


# ---- step terms ----------------------------------------------------------------------------------
def test_verify_costs_little_when_memory_bound_and_grows_smoothly() -> None:
    s = on_h200("qwen3_32b")
    t1, t4 = (cm.step_time(s, 1, q, 1024) for q in (1, 4))
    assert 1.0 < t4 / t1 < 1.05
    assert not cm.is_compute_bound(s, 1, 4, 1024)
    big = [cm.step_time(s, 256, q, 1024) for q in (1, 2, 3, 4)]
    assert cm.is_compute_bound(s, 256, 4, 1024)
    assert big[3] / big[0] > 2.0 and np.all(np.diff(big) > 0)
    costs = [cm.step_time(s, B, 4, 1024) / cm.step_time(s, B, 1, 1024) for B in (8, 16, 32)]
    steps = np.array(costs[1:]) / np.array(costs[:-1])
    assert np.all(steps > 1) and steps.max() < 1.6  # rises with B, no jump at a ridge


def test_terms_are_named_and_sum_to_the_step() -> None:
    s = on_h200("qwen3_32b", tp=2)
    t = cm.step_terms(s, 64, 4, 4096)
    assert t.weights_s > 0 and t.kv_s > 0 and t.linear_s > 0 and t.attention_s > 0 and t.comm_s > 0
    assert t.experts_s == 0 and t.state_s == 0
    assert t.total_s == pytest.approx(cm.step_time(s, 64, 4, 4096))
    assert max(t.memory_s, t.compute_s) < t.total_s < t.memory_s + t.compute_s + t.fixed_s + t.comm_s


def test_tensor_parallel_splits_weights_and_gqa_kv_but_not_the_mla_latent() -> None:
    one, eight = (cm.step_terms(on_h200("qwen3_32b", tp), 8, 1, 4096) for tp in (1, 8))
    assert eight.weights_s == pytest.approx(one.weights_s / 8) and eight.kv_s == pytest.approx(one.kv_s / 8)
    one, eight = (cm.step_terms(on_h200("deepseek_v3", tp), 8, 1, 4096) for tp in (1, 8))
    assert eight.kv_s == pytest.approx(one.kv_s)  # the latent is replicated on every rank
    assert eight.comm_s > 0 and one.comm_s == 0


def test_mla_attention_uses_latent_dims_not_hidden_over_heads() -> None:
    ds = _arch("deepseek_v3")
    assert cm.attention_dims(ds) == (512 + 64, 512, 128)
    per_position = cm.attention_flops(ds, 1, 1) / ds.full_attention_layers
    assert per_position == 2 * 128 * (576 + 512)
    assert per_position > 9 * 4 * ds.num_heads * (ds.hidden_size // ds.num_heads)  # the old ~10x low figure


def test_fp8_weights_halve_weight_bytes_and_moe_reads_touched_experts() -> None:
    ds = _arch("deepseek_v3")
    bf16, fp8 = cm.weight_bytes(ds), cm.weight_bytes(ds, cm.StepShape(weight_dtype_bytes=1))
    assert fp8 == pytest.approx(bf16 / 2)
    assert cm.weight_bytes(ds, tokens=1) < 0.2 * bf16
    two = cm.weight_bytes(ds, tokens=2) - cm.weight_bytes(ds, tokens=1)
    one = cm.weight_bytes(ds, tokens=1) - cm.weight_bytes(ds, tokens=0)
    assert two == pytest.approx(
        one * (1 - 8 / 256), rel=1e-6
    )  # the second token overlaps the first's experts
    assert cm.weight_bytes(ds, tokens=4096) == pytest.approx(bf16, rel=0.01)


def test_moe_experts_priced_by_bytes_touched_and_whole_tiles_with_shared_experts_apart() -> None:
    """Routed experts: the touched fraction's bytes, and GEMMs over whole 16-row tiles per active expert
    (a verify of few tokens per expert costs their weight reads, not a per-expert constant); the shared
    expert is read every step with the dense weights."""
    s = Scenario(_arch("deepseek_v3"), H200, work=Workload(tp_size=8, weight_dtype_bytes=1))
    ds = s.arch
    padded, flat = (
        cm.step_terms(replace(s, eff=replace(cm.DEFAULT_EFFICIENCY, moe_tile_tokens=t)), 1, 1, 1024)
        for t in (16, 0)
    )
    assert padded.expert_linear_s == pytest.approx(16 * flat.expert_linear_s)
    assert padded.expert_fixed_s == 0  # no per-expert constant by default
    plain, verify = (cm.step_terms(s, 1, q, 1024) for q in (1, 2))
    assert verify.experts_s / plain.experts_s == pytest.approx(2 - 8 / 256, rel=1e-3)
    assert verify.total_s - plain.total_s == pytest.approx(verify.experts_s - plain.experts_s, rel=0.1)
    no_shared = replace(ds, shared_experts=0)
    shared = cm.param_split(ds)[0] - cm.param_split(no_shared)[0]
    assert shared == (ds.num_layers - ds.dense_layers) * 3 * ds.hidden_size * ds.moe_intermediate_size
    assert cm.param_split(ds)[1] == cm.param_split(no_shared)[1]


def test_error_band_from_held_out_points_and_what_was_not_checked() -> None:
    from kit.decide.costmodel.validation import HELD_OUT, error_band, gpu_class

    band = error_band("H200", moe=False, draft="mtp", engine="sglang")
    assert band.outside == [] and band.points == sum(h.points for h in HELD_OUT)
    assert band.lo == min(h.min_error for h in HELD_OUT) and band.hi == max(h.max_error for h in HELD_OUT)
    low, high = band.around(1.5)
    assert low == pytest.approx(1.5 / (1 + band.hi)) and high == pytest.approx(1.5 / (1 + band.lo))
    far = error_band("B200", moe=True, draft="ngram", engine="vllm")
    assert len(far.outside) == 3 and "Blackwell" in far.outside_sentence and "ngram" in far.outside_sentence
    assert [gpu_class(g) for g in ("NVIDIA H100 80GB HBM3", "A100 80GB", "RTX 3090", "GB300", "L40S")] == [
        "Hopper", "Ampere", "Ampere", "Blackwell", "Ada",
    ]  # fmt: skip


def test_hybrid_state_and_snapshots_count_in_bytes() -> None:
    s = on_h200("qwen3_6_27b")
    arch = s.arch
    state = arch.state_bytes_per_seq(4, 2)
    plain = cm.step_bytes(s, 8, 1, 0) - cm.step_bytes(s, 1, 1, 0)
    verify = cm.step_bytes(s, 8, 4, 0) - cm.step_bytes(s, 1, 4, 0)
    assert plain == pytest.approx(7 * (2 * state + arch.kv_bytes_per_token()))
    assert verify - plain == pytest.approx(7 * (6 * state + 3 * arch.kv_bytes_per_token()))


# ---- drafts --------------------------------------------------------------------------------------
def test_draft_cost_per_kind_is_ordered_as_the_work_it_does() -> None:
    llama = _arch("llama3_1_8b")
    eagle3 = draft_from_config("eagle3", CONFIGS / "llama3_1_8b_eagle3.json")
    assert eagle3.vocab == 32000 and eagle3.arch.num_layers == 1
    small = draft_from_config("draft_model", _arch_config_dict("llama3_1_8b", num_hidden_layers=4))
    cost = {
        name: draft_time(Scenario(llama, H200, draft=d), 32, 3, 1024)
        for name, d in {
            "ngram": NGRAM,
            "eagle3": eagle3,
            "eagle": Draft("eagle"),
            "mtp": MTP,
            "draft_model": small,
            "self_spec": Draft("self_spec", kv_budget=512),
        }.items()
    }
    verify = cm.step_time(Scenario(llama, H200), 32, 4, 1024)
    assert cost["ngram"] < 0.05 * verify
    assert cost["eagle3"] < cost["eagle"] <= cost["mtp"] * 1.01 < cost["draft_model"] < cost["self_spec"]


def test_self_speculation_draft_does_not_grow_with_context_beyond_its_budget() -> None:
    spec, mtp = on_h200("llama3_1_8b", draft=Draft("self_spec", kv_budget=512)), on_h200("llama3_1_8b")
    assert draft_time(spec, 32, 3, 8000) == pytest.approx(draft_time(spec, 32, 3, 32000))
    assert draft_time(mtp, 32, 3, 32000) > draft_time(mtp, 32, 3, 8000)


def test_moe_mtp_head_reads_its_touched_experts_in_the_checkpoint_dtype() -> None:
    s = on_h200("deepseek_v3", draft=MTP)
    ds = s.arch
    bf16 = draft_time(s, 1, 1, 1024)
    fp8 = draft_time(replace(s, work=Workload(weight_dtype_bytes=1)), 1, 1, 1024)
    assert fp8 < bf16
    head_all_experts = 3 * ds.hidden_size * ds.moe_intermediate_size * ds.num_experts * 2
    assert draft_weight_bytes(ds, MTP) > head_all_experts  # memory holds every expert of the head ...
    assert bf16 < head_all_experts / (H200.bandwidth_Bps * cm.DEFAULT_EFFICIENCY.bw)  # ... a pass reads few


def test_bad_draft_settings_are_errors() -> None:
    with pytest.raises(CostModelError, match="unknown draft kind"):
        Draft("medusa")  # type: ignore[arg-type]
    with pytest.raises(CostModelError, match="config.json"):
        Draft("draft_model")
    with pytest.raises(CostModelError, match="kv_budget"):
        Draft("self_spec")
    with pytest.raises(CostModelError, match="does not exist"):
        draft_from_config("draft_model", Path("/nonexistent/draft"))


def _arch_config_dict(name: str, **changes) -> dict:
    return {**json.loads((CONFIGS / f"{name}.json").read_text()), **changes}


# ---- fitting to a sweep, model error -------------------------------------------------------------
def test_fit_to_sweep_recovers_the_constants_that_made_it() -> None:
    s = Scenario(_arch("llama3_1_8b"), H200, work=Workload(256, 128), draft=NGRAM)
    truth = replace(cm.DEFAULT_EFFICIENCY, overhead_s=2e-3, bw=0.6)
    sweep = pd.DataFrame(
        [{"arm": "plain", "spec_k": 0, "concurrency": c, "accept_length": None} for c in (1, 4, 16, 64)]
        + [{"arm": "spec_k3", "spec_k": 3, "concurrency": c, "accept_length": 2.5} for c in (1, 4, 16, 64)]
    )
    sweep["output_tok_s"] = predict_sweep(sweep, replace(s, eff=truth))
    fitted = fit_to_sweep(sweep, s, free=("overhead_s", "bw"))
    assert fitted.overhead_s == pytest.approx(2e-3, rel=0.02) and fitted.bw == pytest.approx(0.6, rel=0.02)
    assert "4" in fitted.source or "8" in fitted.source
    with pytest.raises(CostModelError, match="lacks columns"):
        fit_to_sweep(sweep.drop(columns="output_tok_s"), s)


def test_model_error_band_tells_close_predictions_apart_from_clear_ones() -> None:
    assert cm.MODEL_ERROR == 0.25


# ---- acceptance arithmetic and the ladder (unchanged behaviour) ----------------------------------
def test_accept_length_and_rate_round_trip() -> None:
    for a in (0.3, 0.69, 0.86):
        for k in (1, 3, 5):
            assert acceptance_rate(accept_length(a, k), k) == pytest.approx(a, abs=1e-9)
    assert accept_length(0.5, 1) == pytest.approx(1.5)


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
        predict_ladder(on_h200("qwen3_32b"), [1], [k], {k: E})


def test_ladder_beyond_memory_is_an_error_or_marked() -> None:
    s = Scenario(_arch("qwen3_32b"), H200, work=Workload(4096, 4096, 0.9))
    with pytest.raises(CostModelError, match="memory holds only"):
        predict_ladder(s, [1, 4096], [])
    marked = predict_ladder(s, [1, 4096], [], strict=False)
    assert list(marked.feasible) == [True, False] and marked.output_tok_s.isna().tolist() == [False, True]


def test_engine_cap_lowers_speculative_throughput_above_it() -> None:
    s = Scenario(_arch("qwen3_6_27b"), TABLES[0].points[0][1], work=Workload(1024, 1024, 0.85))
    free = predict_ladder(s, [64], [3], {3: 3.2}).query("spec_k == 3")
    capped = predict_ladder(s, [64], [3], {3: 3.2}, engine_caps={3: 48}).query("spec_k == 3")
    assert capped.running.item() == 48 and capped.output_tok_s.item() < free.output_tok_s.item()


def test_crossover_moves_up_with_context() -> None:
    s, conc = on_h200("qwen3_32b"), [1, 8, 32, 64, 128, 256]
    short = predict_ladder(replace(s, work=Workload(256, 256, 0.9)), conc, [3], {3: 3.0})
    long_ = predict_ladder(replace(s, work=Workload(2048, 256, 0.9)), conc, [3], {3: 3.0}, strict=False)
    x_short = crossover(short, 3)
    assert x_short is not None
    assert (crossover(long_, 3) or 10**9) >= x_short


def test_bad_hardware_step_and_efficiency_are_errors() -> None:
    with pytest.raises(CostModelError):
        cm.Hardware(0, 1e15, 1e9)
    with pytest.raises(CostModelError):
        cm.step_time(on_h200("qwen3_32b"), 0, 1, 10)
    with pytest.raises(CostModelError):
        cm.Efficiency(layer_s=-1)
    assert np.isfinite(cm.step_time(on_h200("qwen3_32b"), 1, 1, 0))


# ---- draft settings in the params, the MTP band of the seed's case -------------------------------
def test_draft_settings_from_params_and_engine() -> None:
    from kit.decide.costmodel import draft_for
    from kit.params import DecideParams, SpeculativeParams

    assert draft_for(DecideParams()).kind == "mtp"
    assert draft_for(DecideParams(), SpeculativeParams(algorithm="NGRAM")).kind == "ngram"
    eagle3 = draft_for(
        DecideParams(draft_config=CONFIGS / "llama3_1_8b_eagle3.json"), SpeculativeParams(algorithm="EAGLE3")
    )
    assert eagle3.kind == "eagle3" and eagle3.vocab == 32000
    assert draft_for(DecideParams(draft="self_spec", draft_kv_budget=512)).kv_budget == 512
    with pytest.raises(CostModelError, match="draft_config"):
        draft_for(DecideParams(draft="draft_model"))
    with pytest.raises(ValueError, match="draft_kv_budget"):
        DecideParams(draft="self_spec")
    with pytest.raises(ValueError, match="only to draft: self_spec"):
        DecideParams(draft_kv_budget=512)


def test_mtp_worth_band_for_the_seed_case() -> None:
    """params/sglang-8gpu.example.yaml: Qwen3.6-27B, dp 8 on RTX PRO 6000s, 1024 output tokens."""
    from kit.decide.views.worth import mtp_worth
    from kit.params import load_params
    from kit.probe.gpu import lookup_datasheet

    params = load_params(ROOT / "params/sglang-8gpu.example.yaml", check_paths=False)
    sheet = lookup_datasheet("NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    hw = cm.Hardware(
        sheet["bandwidth_bytes_s"], sheet["bf16_flops"], sheet["memory_bytes"], sheet["name"],
        gemm_efficiency=sheet["gemm_efficiency"],
    )  # fmt: skip
    eng, dec = params.engine, params.decide
    work = Workload(1024, dec.max_tokens, eng.mem_fraction_static, eng.tp_size, eng.dp_size)
    band = mtp_worth(Scenario(_arch("qwen3_6_27b"), hw, work=work), dec.concurrencies, dec.spec_steps)
    t = band.table.pivot_table(index="concurrency", columns="band", values="ratio")
    assert (t.low < t.typical).all() and (t.typical < t.high).all()
    assert t.typical.is_monotonic_decreasing and t.typical.iloc[0] > 2 and t.typical.iloc[-1] < 1
    assert set(dec.concurrencies) <= set(band.table[band.table.in_params_ladder].concurrency)
    assert "stops paying" in band.sentence and "from concurrency" in band.sentence
    assert "<table" in band._repr_html_()
