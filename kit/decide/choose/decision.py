"""Choose plain or speculative decoding, with the engine settings and the reasons: decision.json.

Measured sweep results decide when there are any; the cost model explains them and fills in for
arms that could not be measured (for example: what MTP would be worth if its weights were fetched).
The reasons' sentences (and PREDICTION_ERROR, the margin they and the choice respect) are
kit/decide/choose/reasons.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

import pandas as pd

from kit.artifacts import Decision, EngineSettings, LadderPoint, Noise
from kit.columns import OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO, SPEC_K
from kit.decide.choose.measured import MeasuredChoice, choose, measured_fall, noise_section, noise_sentences
from kit.decide.choose.reasons import (
    PREDICTION_ERROR,
    arm_label,
    batch_sentence,
    gap_sentences,
    is_number,
    reason_sentences,
)
from kit.decide.costmodel import (
    Efficiency,
    Scenario,
    best_arm,
    fit_to_sweep,
    predict_ladder,
    weight_bytes,
    with_engine,
    workload_dict,
)
from kit.decide.measure.arm_status import (
    crash_sentences,
    crashes,
    decided_by,
    unmeasured,
    unmeasured_sentences,
)
from kit.decide.profile.profiler import calibrate
from kit.engines.arms import Arm, resolve_algorithm
from kit.engines.settings import Speculation, decided_settings
from kit.errors import CostModelError

if TYPE_CHECKING:
    from kit.params import DecideParams, RunParams


class Pick(TypedDict, total=False):
    """The arm and level the decision chose, as the rest of `decide` reads it: measured (from
    kit.decide.choose.measured's choice) or predicted (the ladder's best row, whose other columns it
    keeps)."""

    arm: str
    spec_k: int
    concurrency: int
    output_tok_s: float
    figure: str
    """The measured figure with its interval; a predicted pick has none (its tokens/s are said)."""
    source: str
    """measured or predicted."""
    note: str | None
    cap_concurrency: int
    """The most concurrent requests stage 3 should run (a measured fall, or the latency bound)."""
    cap_reason: str


def decision_arm(decision: Decision | Mapping[str, Any] | None) -> Arm | None:
    """The arm a decision chose (its name, `plain` / `spec_k3`, is `Arm.name`), or None when it names
    none (no decision.json, or one without a choice); for callers holding decision.json's JSON.

    This kit writes it once, as `arm` ({"k": 3, "algorithm": "MTP"}). A decision.json of an earlier kit
    spelled it as `chosen_arm` (the name) and as `engine_settings`' `speculative`, `spec_k` and
    `algorithm` (and `num_draft_tokens`, k + 1): it opens the same (kit.artifacts.Decision)."""
    return Decision.from_json(decision).arm if decision else None


def measured_accept_lengths(sweep: pd.DataFrame | None) -> dict[int, float]:
    """Median accept length the engine reported per k, over the sweep's ok rows."""
    if sweep is None or sweep.empty or "accept_length" not in sweep:
        return {}
    ok = sweep[(sweep.status == "ok") & (sweep.spec_k > 0) & sweep.accept_length.notna()]
    return {int(k): float(g.accept_length.median()) for k, g in ok.groupby(SPEC_K)}


def _joined(predicted: pd.DataFrame, sweep: pd.DataFrame | None) -> pd.DataFrame:
    """Predicted beside measured tokens/s per arm and concurrency, with the prediction's error."""
    t = predicted.rename(
        columns={OUTPUT_TOK_S: "predicted_tok_s", "accept_length": "predicted_accept_length"}
    )
    if sweep is None or sweep.empty:
        t["measured_tok_s"], t["status"], t["reason"] = None, "not measured", ""
    else:
        cols = ["arm", "concurrency", OUTPUT_TOK_S, "accept_length", "latency_p50_s", "status", "reason"]
        cols += [c for c in (OUTPUT_TOK_S_LO, OUTPUT_TOK_S_HI, "repetitions") if c in sweep]
        m = sweep[cols].rename(
            columns={
                OUTPUT_TOK_S: "measured_tok_s",
                OUTPUT_TOK_S_LO: "measured_lo",
                OUTPUT_TOK_S_HI: "measured_hi",
                "accept_length": "measured_accept_length",
            }
        )
        t = t.merge(m, on=["arm", "concurrency"], how="left")
        t["status"] = t["status"].fillna("not measured")
    t["error_pct"] = [
        100 * (p - m) / m if is_number(p) and is_number(m) and m > 0 else None
        for p, m in zip(t.predicted_tok_s, t.measured_tok_s, strict=True)
    ]
    return t


def _has_rows(sweep: pd.DataFrame | None) -> bool:
    return sweep is not None and not sweep.empty


def _pick_measured(
    sweep: pd.DataFrame, runs: pd.DataFrame | None, latency_bound_s: float | None, name: str
) -> tuple[Pick | None, MeasuredChoice | None]:
    """The measured choice (kit.decide.choose.measured) as the dict the rest of the decision reads."""
    choice = choose(sweep, runs, latency_bound_s, lambda k: arm_label(pd.Series({SPEC_K: k}), name))
    if choice is None:
        return None, None
    c = choice.chosen
    picked = Pick(
        arm=c.arm,
        spec_k=c.spec_k,
        concurrency=c.concurrency,
        output_tok_s=c.median,
        figure=c.figure(),
        source="measured",
        note="; ".join(choice.notes) or None,
    )
    return picked, choice


def _pick_predicted(
    predicted: pd.DataFrame, unavailable: str | None, bound: float | None, output_len: int, name: str = "MTP"
) -> Pick:
    """The best predicted arm when nothing was measured: speculation only on a margin larger than
    the cost model's known error, and never when it cannot run here."""
    plain: Pick = {**best_arm(predicted[predicted.spec_k == 0], bound, output_len), "source": "predicted"}
    if unavailable:
        return plain
    best: Pick = {**best_arm(predicted, bound, output_len), "source": "predicted"}
    if int(best[SPEC_K]) == 0:
        return plain
    margin = float(best[OUTPUT_TOK_S]) / float(plain[OUTPUT_TOK_S]) - 1
    if margin <= PREDICTION_ERROR:
        plain["note"] = (
            f"nothing was measured, and the predicted lead of {name} k={int(best[SPEC_K])} over plain "
            f"decoding ({100 * margin:.0f}%) is within the cost model's known error "
            f"(±{100 * PREDICTION_ERROR:.0f}%): plain decoding is kept"
        )
        return plain
    best["note"] = (
        f"nothing was measured: speculation is chosen on a predicted lead of {100 * margin:.0f}%, "
        f"larger than the cost model's known error (±{100 * PREDICTION_ERROR:.0f}%); measure it"
    )
    return best


def spec_name(algorithm: str | None, draft_model: bool) -> str:
    """What the speculative arms are called in the reasons (MTP for the model's own heads)."""
    return resolve_algorithm(algorithm, draft_model).label


def speculation_label(params: RunParams | None) -> str:
    """What a run's speculative arms are called (MTP, n-gram, EAGLE, draft model), from its params
    (MTP when they are unknown)."""
    if params is None:
        return "MTP"
    spec = params.engine.speculative
    return spec_name(spec.algorithm, spec.draft_model_path is not None)


def _settings(
    choice: Pick, arm: Arm, s: Scenario, predicted: pd.DataFrame, flavor: str, attention_backend: str | None
) -> EngineSettings:
    """decision.json's `engine_settings` for the chosen arm: what stage 3 takes beside the arm."""
    work = s.work
    rows = predicted[predicted.spec_k == arm.k]
    mem_cap = int(rows.mem_max_running.iloc[0]) if len(rows) else 1
    cap, why = choice.get("cap_concurrency"), choice.get("cap_reason", "")
    return decided_settings(
        arm,
        flavor=flavor,
        memory_running=mem_cap,
        cap_running=math.ceil(cap / work.dp_size) if cap else None,
        cap_reason=why,
        mem_fraction=work.mem_fraction,
        dp_size=work.dp_size,
        tp_size=work.tp_size,
        attention_backend=attention_backend,
        hybrid=s.arch.is_hybrid,
        measured_at=int(choice["concurrency"]),
    )


def decide(
    s: Scenario,
    sweep: pd.DataFrame | None,
    params: DecideParams,
    spec: Speculation,
    *,
    runs: pd.DataFrame | None = None,
    profile: pd.DataFrame | None = None,
    attention_backend: str | None = None,
    running_caps: Mapping[int, int] | None = None,
) -> Decision:
    """The content of decision.json for the scenario `s` (model, hardware, workload, and the draft the
    speculative arms run; its efficiency is the start, calibrated on `profile` when one is given).
    `params` is a DecideParams (concurrencies, spec_steps, accept_lengths, objective, latency_bound_s);
    `spec` the engine's flavor, the speculative arms' algorithm and why they cannot run here
    (kit.engines.settings.speculation).
    Measured rows decide (`sweep`: one row per arm and level with its interval; `runs`: every
    measurement, for leads paired by round); predictions explain. `running_caps`: k -> the running
    requests the sweep's server of that arm was started with (kit.decide.sweep.layout.running_caps,
    the table's `mem_max_running` where memory set it): the levels above it are predicted queued
    at it, as they were measured."""
    engine_flavor, algo, unavailable, name = spec.flavor, spec.algo, spec.unavailable, spec.label
    if profile is not None:
        s = replace(s, eff=calibrate(profile, s.arch, s.hw))
    # the speculative fixed costs of this engine (and backend, where measured apart): issue 32
    s = replace(s, eff=with_engine(s.eff, engine_flavor, attention_backend))
    work, ks = s.work, list(params.spec_steps)
    accept = {
        **{int(k): float(v) for k, v in params.accept_lengths.items()},
        **measured_accept_lengths(sweep),
    }
    before, fitted = s, _fitted(sweep, s)
    s = replace(s, eff=fitted)
    caps = dict(running_caps or {})
    predicted = predict_ladder(s, params.concurrencies, ks, accept, engine_caps=caps, strict=False)
    if fitted is not before.eff:  # calibrated on the sweep: keep what the model said before measuring
        unfitted = predict_ladder(before, params.concurrencies, ks, accept, engine_caps=caps, strict=False)
        predicted["predicted_before_tok_s"] = unfitted.output_tok_s.to_numpy()
    if predicted[predicted.spec_k == 0].feasible.sum() == 0:
        raise CostModelError(
            f"plain decoding does not fit: {s.arch.model_type} at context "
            f"{work.input_len + work.output_len} leaves no room for one sequence on {s.hw.name}"
        )
    table = _joined(predicted, sweep)
    bound = params.latency_bound_s if params.objective == "latency_bound" else None
    choice, measured = _pick_measured(sweep, runs, bound, name) if _has_rows(sweep) else (None, None)
    if choice is None:
        choice = _pick_predicted(predicted, unavailable, bound, work.output_len, name)
    fall = measured_fall(sweep, runs, str(choice["arm"])) if choice["source"] == "measured" else None
    if fall is not None:
        choice.update(
            cap_concurrency=fall[0], cap_reason="the level above which the sweep measured throughput fall"
        )
    elif bound is not None:
        choice.update(
            cap_concurrency=int(choice["concurrency"]),
            cap_reason=f"the most concurrent requests within the latency bound ({bound:g} s at p50)",
        )
    k = int(choice[SPEC_K])
    arm = Arm(k, algo.name if k else None)
    settings = _settings(choice, arm, s, predicted, engine_flavor, attention_backend)
    figure = choice.get("figure") or f"{float(choice[OUTPUT_TOK_S]):.0f} output tok/s"
    reasons = [
        f"chosen: {arm_label(pd.Series(choice), name)} (best at concurrency {int(choice['concurrency'])}: "
        f"{choice['source']} {figure} over {work.dp_size} replica(s))"
    ]
    if choice.get("note"):
        reasons.append(choice["note"])
    noise = noise_section(sweep, runs, measured) if _has_rows(sweep) else None
    reasons += noise_sentences(noise, params.repetitions)
    reasons.append(batch_sentence(settings, fall))
    missing, dead = unmeasured(sweep), crashes(runs)
    reasons += unmeasured_sentences(sweep, missing) + crash_sentences(missing, dead)
    reasons += reason_sentences(table, predicted, unavailable, work, ks, choice["source"] == "measured", name)
    reasons += gap_sentences(table, s, name)
    return Decision(
        arm=arm,
        decided_by=decided_by(choice["source"], missing),
        unmeasured=missing,
        crashes=dead,
        measured_difference=None if measured is None else measured.measurable,
        measured={b.arm: b.as_dict() for b in measured.bests} if measured else {},
        noise=None if noise is None else Noise.from_json(noise),
        objective=params.objective,
        speculation_available=unavailable is None,
        speculation_unavailable_reason=unavailable,
        engine_settings=settings,
        reasons=reasons,
        hardware={
            "name": s.hw.name,
            "bandwidth_Bps": s.hw.bandwidth_Bps,
            "flops_bf16": s.hw.flops_bf16,
            "memory_bytes": s.hw.memory_bytes,
            "gemm_efficiency": s.hw.gemm_efficiency,
        },
        efficiency=s.eff.as_dict(),
        workload=workload_dict(work),
        accept_lengths=accept,
        table=[LadderPoint.from_json(row) for row in _records(table)],
        engine_flavor=engine_flavor,
    )


def _fitted(sweep: pd.DataFrame | None, s: Scenario) -> Efficiency:
    """The scenario's efficiency fitted to the sweep's own measured points when there are enough of
    them (the prediction then explains the measurement and extrapolates from it); else `s.eff` as it is.

    Free: the fixed cost per step and the two rates, plus, when speculative arms were measured,
    the per-sequence cost of drafting (n-gram lookup) or of speculative bookkeeping.
    """
    if sweep is None or sweep.empty:
        return s.eff
    ok = sweep[(sweep.status == "ok") & sweep.output_tok_s.notna()]
    free = ["overhead_s", "bw", "flops"]
    if (ok.spec_k > 0).any():
        free.append("ngram_seq_s" if s.draft.kind == "ngram" else "spec_seq_s")
    if len(ok) < len(free):
        return s.eff
    try:
        return fit_to_sweep(ok, s, tuple(free))
    except CostModelError:
        return s.eff


def _records(table: pd.DataFrame) -> list[dict]:
    """JSON-ready rows (NaN -> None)."""
    clean = table.astype(object).where(table.notna(), None)
    return [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in clean.to_dict("records")
    ]


def with_gpus(s: Scenario, gpu_count: int) -> Scenario:
    """The scenario laid out over `gpu_count` GPUs: data parallel over all of them when the weights fit
    one GPU's budget, else the smallest TP that fits."""
    work = s.work
    weights = work.weight_bytes or weight_bytes(s.arch)
    tp = 1
    while tp < gpu_count and weights / tp > 0.8 * s.hw.memory_bytes * work.mem_fraction:
        tp *= 2
    return replace(s, work=replace(work, tp_size=tp, dp_size=max(gpu_count // tp, 1)))
