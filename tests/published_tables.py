"""Published speculative / plain throughput ratios the cost model is validated against, with the
settings each needs, and the model's prediction for each point (used by tests/test_costmodel.py).

    .venv/bin/python tests/published_tables.py     # the predicted-beside-published tables (markdown)

Every figure below is copied from the cited source; settings the source does not state are named
as assumptions in `assumed`. Two protocols for the accept length E (docs/costmodel.md shows both):

- independent (the default): E as measured for that draft head elsewhere (`accept`, with
  `accept_source`), so every point tests the model;
- first point: E fixed so that the table's first point matches (`protocol="first_point"`), which
  absorbs into E whatever the model misprices at that point and leaves only the slope tested.

`engine` names the table's engine family; its speculative fixed costs are that family's defaults
(kit.decide.costmodel.engines, each from an independent measurement), the same for every table of the
family: no table carries a constant of its own.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kit.arch import ModelArch, arch_from_config  # noqa: E402
from kit.decide import costmodel as cm  # noqa: E402
from kit.decide.costmodel import (  # noqa: E402
    MTP,
    Draft,
    Scenario,
    Workload,
    accept_length,
    check_accept_length,
    draft_from_config,
    iteration_time,
    predict_ladder,
    throughput,
    with_ratio,
)

CONFIGS = ROOT / "tests" / "configs"
# Datasheet figures (dense bf16 / fp16 with fp32 accumulation; NVLink per GPU and direction).
GB300 = cm.Hardware(8e12, 2.5e15, 288e9, "GB300")
H100 = cm.Hardware(3.35e12, 989e12, 80e9, "H100 SXM", link_Bps=450e9)
H200 = cm.Hardware(4.8e12, 989e12, 141e9, "H200", link_Bps=450e9)
A100 = cm.Hardware(2.039e12, 312e12, 80e9, "A100 SXM 80GB", link_Bps=300e9)
RTX3090 = cm.Hardware(936e9, 71e12, 24e9, "RTX 3090", gemm_efficiency=0.9)


def arch(name: str):  # noqa: ANN201
    return arch_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


EAGLE3_LLAMA = draft_from_config("eagle3", CONFIGS / "llama3_1_8b_eagle3.json")
EAGLE3_QWEN3_MOE = draft_from_config("eagle3", CONFIGS / "qwen3_30b_a3b_eagle3.json")
ACCEPT_EAGLE3_K3, ACCEPT_EAGLE3_K2 = 2.79, 2.36
ACCEPT_SOURCE = (
    "vLLM issue #20780 (https://github.com/vllm-project/vllm/issues/20780): yuhuili/EAGLE3-LLaMA3.1-"
    "Instruct-8B chain drafts on MT-Bench, temperature 0: accept length 2.36 for K=2, 2.79 for K=3"
)
VLLM_20780 = {  # K: (accept length, TPOT ms), EAGLE-3 Llama-3.1-8B, batch 1, H100, MT-Bench
    2: (2.36, 4.32), 3: (2.79, 4.09), 4: (3.08, 4.05), 5: (3.32, 4.13), 6: (3.46, 4.20), 7: (3.54, 4.29)
}  # fmt: skip
VLLM_20780_PLAIN_TPOT = 7.07e-3


@dataclass(frozen=True)
class Table:
    """One published table: where it is, what it ran, and its points (label, hardware, B, k, ratio)."""

    name: str
    citation: str
    model: str
    draft: Draft
    work: Workload
    points: tuple[tuple[str, cm.Hardware, int, int, float], ...]
    accept: float | None
    """Accept length E (tokens per verify) measured independently; None: fixed by the first point."""
    settings: str
    assumed: str
    engine_cap: int | None = None
    with_prefill: bool = True
    accept_source: str = ""
    """Where the independent accept length was measured."""
    engine: str = "sglang"
    """The engine family whose speculative fixed costs the table is judged with
    (kit.decide.costmodel.engines): the same figures for every table of that family, never one's own."""


TABLES = (
    Table(
        "gb300_sglang_mtp",
        "SGLang cookbook, Qwen3.x-27B on one GB300, MTP on/off output tok/s (BF16 rows)",
        "qwen3_6_27b",
        MTP,
        Workload(1024, 1024, 0.85),
        (("C=1", GB300, 1, 3, 2.53), ("C=16", GB300, 16, 3, 1.87), ("C=64", GB300, 64, 3, 1.25)),
        3.2,
        "SGLang, BF16, input 1024 / output 1024, MTP 3 steps, topk 1, 4 draft tokens, accept length 3.2",
        "the cookbook command leaves --max-running-requests unset: SGLang's cap of 48 under speculation",
        engine_cap=48,
    ),
    Table(
        "sglang_eagle3_h100",
        "Li et al., EAGLE-3 (arXiv 2503.01840), Table 3: throughput improvement under SGLang v0.4.4, "
        "H100, LLaMA-Instruct 3.1 8B, MT-Bench; https://arxiv.org/abs/2503.01840",
        "llama3_1_8b",
        EAGLE3_LLAMA,
        Workload(128, 512),
        tuple(
            (f"B={b}", H100, b, 3, r)
            for b, r in {
                2: 1.81,
                4: 1.82,
                8: 1.62,
                16: 1.48,
                24: 1.39,
                32: 1.32,
                48: 1.38,
                56: 1.34,
                64: 1.38,
            }.items()
        ),
        ACCEPT_EAGLE3_K3,
        "EAGLE-3 chain of 3 (no tree: the paper's section 4.3), draft vocabulary 32000, batch size = "
        "running requests",
        "MT-Bench lengths: 128 in / 512 out; the chain of 3 as steps 3, top-k 1, 4 draft tokens",
        accept_source=ACCEPT_SOURCE,
    ),
    Table(
        "vllm_eagle3_rtx3090",
        "Li et al., EAGLE-3 (arXiv 2503.01840), Table 5: throughput improvement under vLLM, RTX 3090, "
        "LLaMA-Instruct 3.1 8B, MT-Bench; https://arxiv.org/abs/2503.01840",
        "llama3_1_8b",
        EAGLE3_LLAMA,
        Workload(128, 512, 0.9),
        tuple(
            (f"B={b}", RTX3090, b, 2, r)
            for b, r in {2: 1.75, 4: 1.68, 8: 1.58, 16: 1.49, 24: 1.42, 32: 1.36, 48: 1.21, 56: 1.01}.items()
        ),
        ACCEPT_EAGLE3_K2,
        "EAGLE-3 chain of 2 (no tree: the paper's section 4.4), fp16, draft vocabulary 32000; RTX 3090: "
        "936 GB/s, 71 TFLOP/s fp16 (fp32 acc.), GEMMs at 0.9 of it (a consumer card holds its rated clock)",
        "MT-Bench lengths: 128 in / 512 out",
        accept_source=ACCEPT_SOURCE,
        engine="vllm",
    ),
    Table(
        "magicdec_selfspec",
        "Sadhukhan et al., MagicDec (arXiv 2408.11049), end-to-end speedups on 8xA100 and 8xH100_SXM, "
        "Llama3.1-8B self-speculation rows; https://infini-ai-lab.github.io/MagicDec/ "
        "(same figures as the paper's results table)",
        "llama3_1_8b",
        Draft("self_spec", kv_budget=512),
        Workload(32000, 64, tp_size=8),
        (
            ("8xA100 B=32", A100, 32, 3, 1.22),
            ("8xA100 B=64", A100, 64, 3, 1.38),
            ("8xA100 B=128", A100, 128, 4, 1.47),
            ("8xH100 B=32", H100, 32, 3, 1.23),
            ("8xH100 B=64", H100, 64, 3, 1.43),
        ),
        accept_length(0.81, 3),
        "prefill 32000, TP 8, StreamingLLM draft KV budget 512, optimal speculation length 3 / 3 / 4, "
        "acceptance 0.81 at 32000 (the page's acceptance table), decode time only",
        "acceptance 0.81 carried to every row (the page measured it at 32000 with budget 512)",
        with_prefill=False,
    ),
    Table(
        "sglang_dsv3_mtp_h200",
        "SGLang docs, DeepSeek V3 usage, Multi-token Prediction: 1.8x at batch size 1, 1.5x at batch "
        "size 32 on H200 TP8; https://docs.sglang.ai/references/deepseek.html "
        "(sgl-project/sglang docs/references/deepseek.md)",
        "deepseek_v3",
        MTP,
        Workload(1024, 512, tp_size=8, weight_dtype_bytes=1),
        (("B=1", H200, 1, 1, 1.8), ("B=32", H200, 32, 1, 1.5)),
        1.875,
        "TP 8, FP8 weights (block-wise), MLA, the docs' command: 1 step, topk 1, 2 draft tokens; "
        "accept length 1.85-1.90 (DeepSeek-V3 report: the second token is accepted 85-90% of the time)",
        "context not stated: 1024 in / 512 out",
    ),
    Table(
        "specforge_qwen3_moe_h100",
        "SpecForge issue #339 (https://github.com/sgl-project/SpecForge/issues/339): Qwen3-30B-A3B with "
        "an EAGLE-3 chain, 2 x H100 TP2, SGLang, mtbench:20; plain 222.47 / 566.21 tok/s and EAGLE-3 "
        "159.78 / 447.90 tok/s at batch 1 / 4",
        "qwen3_30b_a3b",
        EAGLE3_QWEN3_MOE,
        Workload(128, 512, tp_size=2),
        (("B=1", H100, 1, 3, 0.718), ("B=4", H100, 4, 3, 0.791)),
        1.86,
        "EAGLE-3 chain: steps 3, top-k 1, 4 draft tokens; MoE (128 experts, 8 per token): verifying 4 "
        "tokens reads about 3.6x the experts a plain step does",
        "MT-Bench lengths: 128 in / 512 out; the head's config as SpecForge's qwen3-30B-eagle3.json",
        accept_source="the same run: accept length 1.86 at both batch sizes",
    ),
    Table(
        "magicdec_llama2_selfspec",
        "Sadhukhan et al., MagicDec (arXiv 2408.11049), end-to-end speedups on 8xA100 and 8xH100_SXM, "
        "Llama2-7B-32K self-speculation rows at 8000 tokens; https://infini-ai-lab.github.io/MagicDec/",
        "llama2_7b_32k",
        Draft("self_spec", kv_budget=512),
        Workload(8000, 64, tp_size=8),
        (
            ("8xA100 B=32", A100, 32, 3, 1.18),
            ("8xA100 B=64", A100, 64, 3, 1.48),
            ("8xH100 B=32", H100, 32, 3, 1.19),
        ),
        accept_length(0.83, 3),
        "prefill 8000, TP 8, StreamingLLM draft KV budget 512, speculation length 3 (the rows with 3)",
        "acceptance 0.83: the page's figure at 8000 tokens, measured on Llama-3.1-8B, carried to Llama-2-7B",
        with_prefill=False,
        accept_source="the MagicDec page's acceptance table (Llama-3.1-8B, budget 512, PG-19, 8000 tokens)",
    ),
)

FITTED = ("gb300_sglang_mtp", "magicdec_selfspec")
"""Tables fitted on: SGLang's `draft_pass_s` and `verify_kv_bw` (`refit_fixed_costs`); they are not
held out. Every other table is judged at the kit's defaults, its engine family's fixed costs
(kit.decide.costmodel.engines) and its independent accept length, with no constant of its own."""

HELD_OUT_TOLERANCE = 0.25
"""Largest |predicted / published - 1| a held-out table meets, its trend with batch right, unless it is
a known miss."""

KNOWN_MISSES = {
    "sglang_eagle3_h100": (
        "error",
        "SGLang 0.4.4's speculative fixed costs: SGLang 0.5.16's measured ones (33 us a pass, 0.93 ms an "
        "iteration) price its drafts, and a cost growing about 60 us per sequence is not modelled "
        "(spec_seq_s 0: the 0.19 ms the H200 measured is the triton backend's, not flashinfer's)",
    ),
    "sglang_dsv3_mtp_h200": (
        "error+trend",
        "early-2025 SGLang's fixed cost per layer on DeepSeek-V3 at batch 1 (SGLang PR #2643: about 33 "
        "ms a plain step at batch 1, against 2.5 ms in the model), which makes verifying nearly free; "
        "on the model's short plain step SGLang 0.5.16's 0.93 ms an iteration weighs 37% at batch 1 and "
        "turns the trend (with PR #2643's plain step both points come within 4%, trend right)",
    ),
    "specforge_qwen3_moe_h100": (
        "trend",
        "the speculative iteration's unexplained cost at batch 1 (SpecForge #339: 11.6 ms, 2.6x a plain "
        "step, against the model's verify of touched experts plus three draft passes)",
    ),
}
"""Held-out tables the model misses (beyond the tolerance: "error", the trend with batch wrong: "trend",
or both: "error+trend") and the term that dominates the miss, each listed in docs/costmodel.md: a
table that comes right, or another that goes wrong, fails tests/test_costmodel.py until this,
kit.decide.costmodel.validation.HELD_OUT and the doc are updated."""
FITTED_TOLERANCE = 0.12


def _spec_speedup(
    arch: ModelArch,
    hw: cm.Hardware,
    B: int,
    k: int,
    E: float,
    work: Workload,
    eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY,
    draft: Draft = MTP,
    with_prefill: bool = True,
) -> float:
    """Speculative over plain output tokens/s with B sequences running: the throughput ratio (prefill
    included), or the decode-only ratio `E T(B, 1, L) / T_iter(B, k)` when `with_prefill` is False."""
    s = Scenario(arch, hw, eff, work, draft)
    if with_prefill:
        return throughput(s, B, k, E) / throughput(s, B, 0, 1.0)
    check_accept_length(E, k)
    return E * iteration_time(s, B, 0) / iteration_time(s, B, k)


def _ratio(t: Table, hw: cm.Hardware, B: int, k: int, E: float, eff: cm.Efficiency) -> float:
    if t.engine_cap:
        s = Scenario(arch(t.model), hw, eff, t.work, t.draft)
        ladder = predict_ladder(s, [B], [k], {k: E}, engine_caps={k: t.engine_cap})
        return float(with_ratio(ladder).query(f"spec_k == {k}").ratio_vs_plain.iloc[0])
    return _spec_speedup(arch(t.model), hw, B, k, E, t.work, eff, t.draft, t.with_prefill)


def accept_for(t: Table, eff: cm.Efficiency, protocol: str = "independent") -> float:
    """The table's independent accept length, or (`first_point`, or none known) the one that makes
    its first point match (ratio ~ E)."""
    if t.accept is not None and protocol == "independent":
        return t.accept
    _, hw, B, k, published = t.points[0]
    E = (k + 2) / 2
    for _ in range(6):
        E = min(max(E * published / _ratio(t, hw, B, k, E, eff), 1.001), k + 0.999)
    return E


def predicted(
    t: Table, eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY, protocol: str = "independent"
) -> list[dict]:
    """One row per point: label, published, predicted, error (with the table's engine constants)."""
    # `eff` is SGLang's (the defaults, or a refit on the fitted tables, all SGLang); another family
    # takes its own speculative fixed costs from kit.decide.costmodel.engines
    eff = eff if t.engine == cm.engines.DEFAULT_ENGINE else cm.with_engine(eff, t.engine)
    E = accept_for(t, eff, protocol)
    rows = []
    for label, hw, B, k, published in t.points:
        p = _ratio(t, hw, B, k, E, eff)
        rows.append(
            {"label": label, "published": published, "predicted": p, "error": p / published - 1, "E": E}
        )
    return rows


FIXED_COSTS = ("verify_kv_bw",)
"""What the fitted tables still fit: SGLang's speculative fixed costs are measured (`sglang_h200_costs`)."""


def refit_fixed_costs(start: cm.Efficiency) -> cm.Efficiency:
    """Fit `FIXED_COSTS` on the `FITTED` tables only (what produced the defaults), SGLang's measured
    speculative fixed costs held."""
    import numpy as np

    from kit.decide.costmodel import fit_efficiency

    tables = [t for t in TABLES if t.name in FITTED]

    def ratios(eff: cm.Efficiency) -> np.ndarray:
        return np.array([r["predicted"] / r["published"] for t in tables for r in predicted(t, eff)])

    return fit_efficiency(ratios, np.ones(len(ratios(start))), FIXED_COSTS, start, "published tables")


def markdown(eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY) -> str:
    """Predicted beside published for every point of every table, under both protocols."""
    out = []
    for t in TABLES:
        role = "fitted" if t.name in FITTED else "held out"
        role += ", known miss" if t.name in KNOWN_MISSES else ""
        indep, first = predicted(t, eff), predicted(t, eff, "first_point")
        source = f" Accept length {indep[0]['E']:.2f}: {t.accept_source}." if t.accept_source else ""
        engine = f" Engine costs: {cm.engine_costs(t.engine).provenance()}."
        out += [
            f"#### {t.name} ({role})",
            "",
            f"{t.citation}. Settings: {t.settings}. Assumed: {t.assumed}.{source}{engine}",
            "",
            f"| point | published | predicted, independent E ({indep[0]['E']:.2f}) | error "
            f"| predicted, E fixed on the first point ({first[0]['E']:.2f}) | error |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {a['label']} | {a['published']:.2f} | {a['predicted']:.2f} | {100 * a['error']:+.0f}% "
            f"| {b['predicted']:.2f} | {100 * b['error']:+.0f}% |"
            for a, b in zip(indep, first, strict=True)
        ]
        out.append("")
    return "\n".join(out)


def vllm_costs_from_20780(eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY) -> tuple[float, float]:
    """(draft_pass_s, spec_iter_s) of vLLM V1 from issue #20780 alone: the measured iteration (TPOT x
    accept length, batch 1, H100, K = 2..7) less the model's verify and draft kernels, fitted as a line
    in K; its slope is the per-pass cost, its intercept less the plain step's own offset (7.07 ms
    measured against the model's) the per-iteration cost."""
    import numpy as np

    bare = replace(eff, draft_pass_s=0.0, spec_iter_s=0.0, spec_seq_s=0.0)
    s = Scenario(arch("llama3_1_8b"), H100, bare, Workload(128, 512), EAGLE3_LLAMA)
    ks = np.array(sorted(VLLM_20780))
    measured = np.array([VLLM_20780[k][0] * VLLM_20780[k][1] * 1e-3 for k in ks])
    kernels = np.array([iteration_time(s, 1, int(k)) for k in ks])
    slope, intercept = np.polyfit(ks, measured - kernels, 1)
    return float(slope), float(intercept - (VLLM_20780_PLAIN_TPOT - iteration_time(s, 1, 0)))


H200_EAGLE3 = ROOT / "docs" / "lab" / "h200" / "sglang" / "eagle3"
"""SGLang 0.5.16 on the H200: plain against EAGLE-3 k = 1, 3 over a shape-only head (accept length 1)."""
H200_EAGLE3_LEVELS = (1, 16, 64, 256)
"""The sweep's concurrency levels; the logs hold a few other running counts (ramps), left out."""


def logged_levels(path: Path) -> dict[int, dict]:
    """SGLang's own step times per running count in one server log (benchmarks/sglang_step_times.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sglang_step_times import read_log

    return read_log(path)


def h200_eagle3_steps() -> tuple[dict[int, float], dict[int, dict[int, float]]]:
    """SGLang's own step seconds per running level from the committed server logs: plain {B: s},
    speculative {k: {B: s}}."""

    def steps(name: str) -> dict[int, float]:
        levels = logged_levels(H200_EAGLE3 / f"server-{name}.log")
        return {B: levels[B]["step_ms"] * 1e-3 for B in H200_EAGLE3_LEVELS}

    return steps("plain"), {k: steps(f"spec_k{k}") for k in (1, 3)}


def h200_eagle3_scenario(eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY) -> Scenario:
    """The measured run as the cost model sees it: Qwen3-8B and its EAGLE-3 head (kit.modelshape's
    configs, the shapes SGLang served), the H200's datasheet, the sweep's workload (decision.json: 152
    prompt tokens, 128 output)."""
    from kit.modelshape import SHAPES

    work = json.loads((H200_EAGLE3 / "decision.json").read_text())["workload"]
    return Scenario(
        arch_from_config(SHAPES["qwen3-8b"].config),
        H200,
        eff,
        Workload(int(work["input_len"]), int(work["output_len"]), float(work["mem_fraction"])),
        draft_from_config("eagle3", SHAPES["qwen3-8b-eagle3"].config),
    )


def sglang_h200_costs() -> cm.engines.StepDerivation:
    """SGLang's speculative fixed costs re-derived from the committed H200 logs (what
    kit.decide.costmodel.engines records for `sglang` and `sglang/triton`)."""
    plain, spec = h200_eagle3_steps()
    return cm.engines.costs_from_step_table(h200_eagle3_scenario(), plain, spec)


def h200_eagle3_table(eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY) -> list[dict]:
    """Predicted beside measured at each level of the H200 run (the table the SGLang costs came from:
    fitted, not held out): step ms from SGLang's logs, tok/s from decision.json (one round)."""
    plain, spec = h200_eagle3_steps()
    s = h200_eagle3_scenario(eff)
    table = json.loads((H200_EAGLE3 / "decision.json").read_text())["table"]
    tok_s = {(r["spec_k"], r["concurrency"]): r["measured_tok_s"] for r in table}
    rows = []
    for k in (0, 1, 3):
        for B in H200_EAGLE3_LEVELS:
            measured = plain[B] if k == 0 else spec[k][B]
            rows.append({
                "k": k, "B": B, "step_ms": 1e3 * measured, "predicted_step_ms": 1e3 * iteration_time(s, B, k),
                "tok_s": tok_s[(k, B)], "predicted_tok_s": throughput(s, B, k, 1.0),
            })  # fmt: skip
    return rows


def h200_eagle3_markdown(rows: list[dict]) -> str:
    out = [
        "| arm | running | step, measured (ms) | predicted | error | tok/s, measured | predicted | error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        arm = "plain" if r["k"] == 0 else f"EAGLE-3 k={r['k']}"
        out.append(
            f"| {arm} | {r['B']} | {r['step_ms']:.2f} | {r['predicted_step_ms']:.2f} "
            f"| {100 * (r['predicted_step_ms'] / r['step_ms'] - 1):+.0f}% | {r['tok_s']:,.0f} "
            f"| {r['predicted_tok_s']:,.0f} | {100 * (r['predicted_tok_s'] / r['tok_s'] - 1):+.0f}% |"
        )
    return "\n".join(out)


H200_QWEN36_MTP = ROOT / "docs" / "lab" / "h200" / "sglang" / "qwen3.6-27b-mtp"
"""SGLang 0.5.16 on the H200 (2026-12-03): the Qwen3.6-27B shape (48 Gated DeltaNet and 16 attention
layers) plain and MTP k=3 over its own random MTP layer, attention backend triton, accept length 1,
MTP capped at 80 running by its recurrent state (`kit.decide.sweep.layout.running_caps`)."""
H200_QWEN36_LEVELS = {0: (1, 16, 64, 255), 3: (1, 16, 64, 79)}
"""The levels SGLang logged steady steps at (plain at 256 ran 255; MTP at 256 ran its cap of 80)."""


def h200_qwen36_mtp_table(eff: cm.Efficiency = cm.DEFAULT_EFFICIENCY) -> list[dict]:
    """Predicted beside measured step times of the 27B MTP run, held out: nothing in the cost model was
    fitted on it (its costs came from the 8B EAGLE-3 run; its hybrid terms, the recurrent state read
    and written and the intermediate states a verify writes, from the architecture alone)."""
    from kit.modelshape import SHAPES

    s = Scenario(
        arch_from_config(SHAPES["qwen3.6-27b"].config), H200, eff, Workload(150, 128, 0.85), cm.Draft("mtp")
    )
    rows = []
    for k, levels in H200_QWEN36_LEVELS.items():
        logged = logged_levels(H200_QWEN36_MTP / f"sweep-{'plain' if k == 0 else f'spec_k{k}'}.log")
        for B in levels:
            rows.append(
                {
                    "k": k,
                    "B": B,
                    "step_ms": logged[B]["step_ms"],
                    "predicted_step_ms": 1e3 * iteration_time(s, B, k),
                }
            )
    return rows


def held_out_record() -> list[tuple[str, int, float, float, bool]]:
    """(name, points, smallest error, largest error, known miss) per held-out table at the defaults:
    what kit.decide.costmodel.validation.HELD_OUT records."""
    out = []
    for t in TABLES:
        if t.name not in FITTED:
            errors = [r["error"] for r in predicted(t)]
            out.append((t.name, len(errors), min(errors), max(errors), t.name in KNOWN_MISSES))
    return out


def with_kernel_factors_only() -> cm.Efficiency:
    """The defaults with the fixed costs as the H200 profiles alone give them (the fit's start)."""
    return replace(
        cm.DEFAULT_EFFICIENCY,
        overhead_s=1.28e-4,  # H200 profiles
        layer_s=0.0,  # H200 profiles with CUDA graphs
        allreduce_s=1e-5,  # NVIDIA/nccl#1259: ~6 us small all-reduce on 2 H100s (NVLS, graphs)
        expert_s=0.0,  # no per-expert cost beyond bytes and tile-padded FLOPs
        moe_layer_s=0.0,
        # SGLang's speculative fixed costs: measured on the H200 (sglang_h200_costs), not fitted
        spec_seq_s=cm.engine_costs("sglang").spec_seq_s,
        spec_iter_s=cm.engine_costs("sglang").spec_iter_s,
        draft_pass_s=cm.engine_costs("sglang").draft_pass_s,
        verify_kv_bw=0.6,
    )


def grid(
    spec_seq_s: tuple[float, ...] = (0.0, 3e-5, 6e-5, 9e-5, 1.3e-4),
    layer_s: tuple[float, ...] = (0.0, 3e-5),
    moe_layer_s: tuple[float, ...] = (0.0, 4.9e-5),
) -> list[dict]:
    """Every table's smallest and largest error with SGLang's per-sequence cost and the plain step's
    per-layer costs set to each combination (`verify_kv_bw` refitted on the fitted tables each time, as
    for the defaults): whether any setting brings the known misses in without a constant of a table's
    own (docs/costmodel.md, "What pricing it would do"). 130 us a sequence is SGLang 0.5.16's measured
    flashinfer figure (triton's, 0.19 ms, is `sglang/triton`), 30 us and 49 us its plain step's
    per-layer excess on the dense 8B and the MoE shape."""
    out = []
    for seq in spec_seq_s:
        for layer in layer_s:
            for moe in moe_layer_s:
                eff = refit_fixed_costs(
                    replace(cm.DEFAULT_EFFICIENCY, spec_seq_s=seq, layer_s=layer, moe_layer_s=moe)
                )
                row = {
                    "spec_seq_s": seq,
                    "layer_s": layer,
                    "moe_layer_s": moe,
                    "verify_kv_bw": eff.verify_kv_bw,
                }
                for t in TABLES:
                    errors = [r["error"] for r in predicted(t, eff)]
                    row[t.name] = (min(errors), max(errors))
                out.append(row)
    return out


def grid_markdown(rows: list[dict]) -> str:
    names = [t.name for t in TABLES]
    lines = [
        "| spec_seq_s | layer_s | moe_layer_s | verify_kv_bw | " + " | ".join(names) + " |",
        "|" + "---:|" * (4 + len(names)),
    ]
    for r in rows:
        cells = [f"{r[n][0]:+.0%} .. {r[n][1]:+.0%}" for n in names]
        us = [f"{1e6 * r[k]:.0f} us" for k in ("spec_seq_s", "layer_s", "moe_layer_s")]
        lines.append("| " + " | ".join([*us, f"{r['verify_kv_bw']:.3f}", *cells]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--grid"]:
        print(grid_markdown(grid()))
        sys.exit()
    print(markdown())
    print("#### SGLang 0.5.16 on the H200, EAGLE-3 at accept length 1 (the SGLang costs' source: fitted)\n")
    print("At the defaults (`sglang`: no per-sequence term):\n")
    print(h200_eagle3_markdown(h200_eagle3_table()))
    print("\nWith `sglang/triton` (the backend it ran: 0.19 ms a sequence):\n")
    print(h200_eagle3_markdown(h200_eagle3_table(cm.with_engine(cm.DEFAULT_EFFICIENCY, "sglang", "triton"))))
