"""Scenarios over the cost model for notebook 02's what-if: the speculative / plain ratio over
concurrency when a researcher changes accept length, draft length k, concurrency range, context
length or GPU, with the run's own scenario (from decision.json) as the default.

    basis = RunBasis.from_folder(folder)
    p = predict_scenario(basis, gpu="B200", accept_length=2.2)
    p.ladder, p.crossover              # concurrency, plain, spec, ratio; largest concurrency spec wins

No new physics: each scenario is `predict_ladder` (kit.decide.costmodel) for plain decoding and one
draft length, every arm running at most what its memory holds per replica (the rest queue), as
kit.decide.views.worth does. A run without a GPU (the CPU demo) shows an H200 by default, with the cost
model's default efficiency (a CPU calibration says nothing of a GPU), and keeps its own hardware as
a choice. The view (figure, widget, static HTML) is kit.decide.views.whatif.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from kit.arch import ModelArch, load_arch
from kit.artifacts import Decision
from kit.columns import SPEC_K
from kit.decide import costmodel as cm
from kit.decide.choose.decision import speculation_label
from kit.decide.costmodel import (
    MTP,
    Draft,
    Scenario,
    Workload,
    accept_length_for,
    default_capacity,
    draft_for,
    predict_ladder,
)
from kit.decide.costmodel import accept_length as accept_length_of
from kit.decide.costmodel.validation import ErrorBand, error_band
from kit.decide.views.worth import decision_efficiency, decision_hardware
from kit.engines.arms import Arm
from kit.errors import CostModelError, KitError
from kit.params import load_params
from kit.probe.gpu import datasheet, lookup_datasheet
from kit.runfolder import RunFolder, required

FALLBACK_GPU = "H200"
"""The GPU shown first when the run had none (the cost model's default efficiency is fitted on it)."""
CPU_NAME = "cpu"
"""The hardware name kit.decide.run gives a run without a GPU."""
CONTEXTS = tuple(1024 * 2**i for i in range(8))
"""Context lengths (prompt + output tokens) the slider offers, 1K to 128K, plus the run's own."""
TOP_CONCURRENCY = 1024
K_MAX = 8
SCENARIO_KEYS = ("gpu", "accept_length", "k", "concurrency", "context")
COLUMNS = ["concurrency", "plain", "spec", "ratio", "running_plain", "running_spec"]


@dataclass(frozen=True)
class WhatIfScenario:
    """What the controls set: GPU (a datasheet name or the run's own hardware), accept length, draft
    length k, concurrency range (powers of two) and context length (prompt + output tokens). The
    cost model's `Scenario` of it: `RunBasis.scenario`."""

    gpu: str
    accept_length: float
    k: int
    concurrency: tuple[int, int]
    context: int


@dataclass(frozen=True)
class Prediction:
    """One scenario's ladder (concurrency, plain and speculative tok/s, their ratio, the sequences
    running per replica) and the largest concurrency where speculation is predicted to win."""

    scenario: WhatIfScenario
    ladder: pd.DataFrame
    crossover: int | None
    band: ErrorBand
    """The model's measured error on held-out tables, and what of this scenario they did not cover."""


def gpu_names() -> list[str]:
    """Every GPU of the kit's datasheet (kit/probe/datasheet.yaml), in its order."""
    return [e["name"] for e in datasheet()]


def gpu_hardware(name: str) -> cm.Hardware:
    """A datasheet GPU, by its name there, as the cost model sees it (a GPU without an FP8 rate gets
    the cost model's own default for it)."""
    e = lookup_datasheet(name)
    if e is None or e["name"] != name:
        raise CostModelError(
            f"GPU {name!r} is not in the kit's datasheet; pick one of: {', '.join(gpu_names())}"
        )
    return cm.Hardware(
        e["bandwidth_bytes_s"],
        e["bf16_flops"],
        e["memory_bytes"],
        name,
        flops_fp8=e["fp8_flops"],
        gemm_efficiency=e.get("gemm_efficiency"),
    )


def concurrency_grid(lo: int, hi: int) -> list[int]:
    """Powers of two and the halfway points 3 x 2^n from lo to hi: enough points for a smooth curve
    and a crossover read to about 1.5x, few enough to re-draw at once."""
    if not 1 <= lo <= hi:
        raise CostModelError(f"concurrency range must satisfy 1 <= low <= high, got {lo}..{hi}")
    top = hi.bit_length() + 1
    return sorted(c for i in range(top) for c in (2**i, 3 * 2 ** (i - 1) if i else 1) if lo <= c <= hi)


def scenario_ladder(s: Scenario, k: int, accept_length: float, concurrencies: list[int]) -> pd.DataFrame:
    """Predicted plain and speculative (draft length k) output tok/s and their ratio per concurrency,
    each arm running at most what its memory holds per replica (NaN where not even one fits)."""
    cap = default_capacity(s, [k])
    caps = {0: cap.plain, k: cap.spec[k]}
    t = predict_ladder(s, concurrencies, [k], {k: accept_length}, engine_caps=caps, strict=False)
    plain = t[t.spec_k == 0].set_index("concurrency")
    spec = t[t.spec_k == k].set_index("concurrency").reindex(plain.index)
    out = pd.DataFrame(
        {
            "concurrency": plain.index.astype(int),
            "plain": plain.output_tok_s.astype(float).to_numpy(),
            "spec": spec.output_tok_s.astype(float).to_numpy(),
            "running_plain": plain.running.where(plain.feasible).astype(float).to_numpy(),
            "running_spec": spec.running.where(spec.feasible).astype(float).to_numpy(),
        }
    )
    out["ratio"] = out.spec / out.plain
    return out[COLUMNS]


def spec_wins_up_to(ladder: pd.DataFrame) -> int | None:
    """The largest concurrency where speculation is predicted faster than plain decoding, or None."""
    wins = ladder[ladder.ratio > 1.0]
    return int(wins.concurrency.max()) if len(wins) else None


def measured_ratios(decision: Decision) -> pd.DataFrame:
    """The sweep's measured speculative / plain tok/s per arm and concurrency (decision.json's table,
    as kit.decide.views.plots reads it): only levels where both were measured."""
    t = pd.DataFrame(decision.table_rows())
    cols = [SPEC_K, "concurrency", "ratio"]
    if t.empty or "measured_tok_s" not in t:
        return pd.DataFrame(columns=cols)
    ok = t[t.measured_tok_s.notna() & ((t.status == "ok") if "status" in t else True)]
    plain = ok[ok.spec_k == 0].set_index("concurrency").measured_tok_s.astype(float)
    rows = [
        {
            SPEC_K: int(r.spec_k),
            "concurrency": int(r.concurrency),
            "ratio": float(r.measured_tok_s) / plain[r.concurrency],
        }
        for r in ok[ok.spec_k > 0].itertuples()
        if r.concurrency in plain.index and plain[r.concurrency] > 0
    ]
    return pd.DataFrame(rows, columns=cols)


def context_label(tokens: int) -> str:
    """'4K' for 4096 tokens, '1,100' for what is not a whole number of K."""
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens:,}"


@dataclass(frozen=True)
class RunBasis:
    """What a run fixes for every scenario (its model, draft, layout, hardware, efficiency and measured
    points) and its own scenario, the controls' defaults."""

    arch: ModelArch
    draft: Draft
    name: str
    """What the speculative arms are called (MTP, n-gram, EAGLE...)."""
    work: Workload
    run_gpu: str
    """The run's hardware as the GPU control names it: its datasheet name, else `<name> (this run)`."""
    run_hw: cm.Hardware
    run_eff: cm.Efficiency
    on_gpu: bool
    accept_lengths: dict[int, float]
    measured: pd.DataFrame
    default: WhatIfScenario

    @classmethod
    def from_decision(
        cls, arch: ModelArch, decision: Decision, draft: Draft = MTP, name: str = "MTP"
    ) -> RunBasis:
        """The basis of a decision.json (kit.decide.choose.decision.decide) for the model `arch`; a KeyError
        names what an earlier kit's decision.json lacks."""
        for key in ("hardware", "workload"):
            if key not in decision:
                raise KeyError(key)
        hw = decision_hardware(decision)
        eff = decision_efficiency(decision.efficiency)
        on_gpu = hw.name != CPU_NAME
        sheet = lookup_datasheet(hw.name) if on_gpu else None
        if sheet:
            hw = replace(hw, flops_fp8=sheet["fp8_flops"])
        run_gpu = sheet["name"] if sheet else f"{hw.name} (this run)"
        work = Workload(**decision.workload)
        accepts = {int(k): float(v) for k, v in decision.accept_lengths.items()}
        k = _default_k(decision, accepts)
        top = max(TOP_CONCURRENCY, *(int(r.concurrency) for r in decision.table))
        default = WhatIfScenario(
            gpu=run_gpu if on_gpu else FALLBACK_GPU,
            accept_length=accept_length_for(k, accepts)[0],
            k=k,
            concurrency=(1, 2 ** math.ceil(math.log2(top))),
            context=work.input_len + work.output_len,
        )
        return cls(
            arch, draft, name, work, run_gpu, hw, eff, on_gpu, accepts, measured_ratios(decision), default
        )

    @classmethod
    def from_folder(cls, folder: RunFolder) -> RunBasis:
        """The basis of a run folder: its params.yaml (model, draft) and decision.json."""
        if not folder.params.is_file():
            raise KitError(f"{folder.params} not found: run the stages of this run first (kit run)")
        decision = required(folder.read_decision(), folder.decision)
        params = load_params(folder.params, check_paths=False)
        draft = draft_for(params.decide, params.engine.speculative)
        name = speculation_label(params)
        return cls.from_decision(load_arch(params.model.path), decision, draft, name)

    def hardware(self, gpu: str) -> tuple[cm.Hardware, cm.Efficiency]:
        """A GPU choice's figures and the efficiency to price it with: the run's own for its hardware
        and, after a GPU run, for any datasheet GPU too (its factors are fractions of the datasheet);
        the cost model's defaults after a CPU run."""
        if gpu == self.run_gpu:
            return self.run_hw, self.run_eff
        return gpu_hardware(gpu), self.run_eff if self.on_gpu else cm.DEFAULT_EFFICIENCY

    def scenario(self, gpu: str, context: int) -> Scenario:
        """The cost model's scenario of a GPU choice and a context length: the run's model, draft and
        layout, that GPU's figures and efficiency (`hardware`), the run's workload at that context."""
        hw, eff = self.hardware(gpu)
        return Scenario(self.arch, hw, eff, self.workload(context), self.draft)

    def workload(self, context: int) -> Workload:
        """The run's workload at `context` tokens, prompt and output keeping the run's proportions."""
        if context < 2:
            raise CostModelError(
                f"context length must be at least 2 tokens (a prompt and an output), got {context}"
            )
        share = self.work.input_len / (self.work.input_len + self.work.output_len)
        prompt = min(max(round(context * share), 1), context - 1)
        return replace(self.work, input_len=prompt, output_len=context - prompt)

    @property
    def gpus(self) -> list[str]:
        """The GPU control's choices: every datasheet GPU, the run's hardware first when it is not one."""
        names = gpu_names()
        return names if self.run_gpu in names else [self.run_gpu, *names]

    @property
    def contexts(self) -> list[int]:
        return sorted({*CONTEXTS, self.default.context})


def _default_k(decision: Decision, accepts: Mapping[int, float]) -> int:
    """The chosen draft length, else the longest with an accept length given or measured, else the
    longest predicted, else 3 (the draft length of the published MTP figures, kit.decide.views.worth)."""
    chosen = (decision.arm or Arm(0)).k
    predicted = {int(r.spec_k) for r in decision.table if int(r.spec_k) > 0}
    return chosen or max(accepts, default=0) or max(predicted, default=3)


def predict_scenario(
    basis: RunBasis,
    *,
    gpu: str | None = None,
    accept_length: float | None = None,
    acceptance: float | None = None,
    k: int | None = None,
    concurrency: tuple[int, int] | None = None,
    context: int | None = None,
) -> Prediction:
    """The ladder and crossover of one scenario; what is not given is the run's own (`basis.default`).

    Give the accept length or the per-token acceptance rate (converted at draft length k), not both;
    an accept length is clamped to [1, k + 1], what an engine can report at draft length k.
    """
    d = basis.default
    k = d.k if k is None else int(k)
    if k < 1:
        raise CostModelError(f"draft length k must be >= 1, got {k}")
    if accept_length is not None and acceptance is not None:
        raise CostModelError("give the accept length or the acceptance rate, not both")
    E = d.accept_length if accept_length is None else accept_length
    if acceptance is not None:
        E = accept_length_of(acceptance, k)
    scenario = WhatIfScenario(
        gpu=gpu or d.gpu,
        accept_length=min(max(float(E), 1.0), k + 1.0),
        k=k,
        concurrency=tuple(int(c) for c in (concurrency or d.concurrency)),
        context=int(context or d.context),
    )
    grid = concurrency_grid(*scenario.concurrency)
    s = basis.scenario(scenario.gpu, scenario.context)
    ladder = scenario_ladder(s, k, scenario.accept_length, grid)
    band = error_band(scenario.gpu, basis.arch.is_moe, basis.draft.kind)
    return Prediction(scenario, ladder, spec_wins_up_to(ladder), band)


def band_for_run(folder: RunFolder) -> ErrorBand | None:
    """The held-out error band of a run's predictions (its hardware, model, draft kind and engine),
    or None when its decision, params or model config cannot be read."""
    decision = folder.read_decision(lenient=True)
    if decision is None or "hardware" not in decision:
        return None
    try:
        params = load_params(folder.params, check_paths=False)
        arch = load_arch(params.model.path)
        draft = draft_for(params.decide, params.engine.speculative)
    except (KitError, OSError, ValueError, KeyError, TypeError):
        return None
    return error_band(decision_hardware(decision).name, arch.is_moe, draft.kind, params.engine.flavor)


def caption_text(basis: RunBasis, p: Prediction) -> str:
    """'B200 · accept length 2.20 · k=3 · context 4K: speculation predicted to win up to concurrency
    48 (x1.31 at 1; ...); measured points: 4'."""
    s = p.scenario
    gpus = basis.work.dp_size * basis.work.tp_size
    gpu = f"{gpus} × {s.gpu}" if gpus > 1 else s.gpu
    if not basis.on_gpu and s.gpu != basis.run_gpu:
        gpu += " (the run had no GPU)"
    head = f"{gpu} · accept length {s.accept_length:.2f} · k={s.k} · context {context_label(s.context)}"
    band = f"band: the model's {p.band.label}"
    outside = f"; {p.band.outside_sentence}" if p.band.outside else ""
    return f"{head}: {_verdict(p)}; {band}{outside}; measured points: {len(basis.measured)}"


def _verdict(p: Prediction) -> str:
    t = p.ladder.dropna(subset=["ratio"])
    lo, hi = p.scenario.concurrency
    if p.ladder.plain.isna().all():
        return "not one sequence fits in memory: pick a GPU with more memory or a shorter context"
    if t.empty:
        return "speculation does not fit in memory: pick a GPU with more memory or a shorter context"
    at = f"x{t.ratio.iloc[0]:.2f} at {int(t.concurrency.iloc[0])}"
    if p.crossover is None:
        return f"plain decoding predicted to win at every concurrency from {lo} to {hi} ({at})"
    clear = t[t.ratio.map(lambda r: p.band.around(r)[0]) > 1]
    band = "the model's held-out error"
    clearly = (
        f"beyond {band} up to {int(clear.concurrency.max())}" if len(clear) else f"nowhere beyond {band}"
    )
    top = ", the top of the range" if p.crossover == int(t.concurrency.max()) else ""
    return f"speculation predicted to win up to concurrency {p.crossover}{top} ({at}; {clearly})"
