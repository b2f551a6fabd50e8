"""Notebook 02 for reading: the decision in sentences, predicted beside measured, the measured sweep,
the figures (also saved under figures/) and what MTP would be worth. Reads the run folder only."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kit.artifacts import Decision
from kit.columns import ADAPTIVE, OUTPUT_TOK_S, OUTPUT_TOK_S_HI, OUTPUT_TOK_S_LO
from kit.decide.choose.decision import speculation_label
from kit.decide.choose.reasons import sweep_cost_sentence
from kit.decide.views.plots import decision_figures as make_figures
from kit.decide.views.verdict import decision_answer
from kit.decide.views.worth import worth_for_run
from kit.display import figure_image, human_name, signed_percent, table
from kit.engines.arms import Arm, arm_label
from kit.params import saved_params
from kit.runfolder import RunFolder, required


def speculation_name(folder: RunFolder) -> str:
    """What the run's speculative arms are called (MTP, n-gram, EAGLE, draft model), from its
    params.yaml (MTP when it is absent or unreadable)."""
    return speculation_label(saved_params(folder.params))


def _decision(folder: RunFolder) -> Decision:
    return required(folder.read_decision(), folder.decision)


def decision_verdict(folder: RunFolder) -> str:
    """The decision first (what was chosen, measured or predicted, by how much), then the reasons,
    warnings and the engine settings stage 3 takes."""
    decision = _decision(folder)
    name = speculation_name(folder)
    answer = decision_answer(decision, name)
    lines = [f"## Decision: {answer.headline}", "", answer.detail, ""]
    if decision.sweep_cost is not None:
        lines += [f"**What it cost:** {sweep_cost_sentence(decision.sweep_cost, decision.forecast)}.", ""]
    lines += ["**Why**", ""]
    lines += [f"- {r}" for r in decision.reasons]
    lines += [f"- **warning:** {w}" for w in decision.warnings]
    lines += ["", "**Engine settings for stage 3**", ""]
    lines += [f"- arm: {arm_label((decision.arm or Arm(0)).k, name)}"]
    lines += [f"- {human_name(k)}: {_setting(v)}" for k, v in decision.engine_settings.shown()]
    return "\n".join(lines)


def _setting(value: Any) -> str:
    if value is None:
        return "engine default"
    return "yes" if value is True else "no" if value is False else str(value)


SWEEP_COLUMNS = {
    "arm": "arm",
    "concurrency": "concurrency",
    "requests": "requests",
    "errors": "errors",
    "output_tokens": "output tokens",
    "duration_s": "duration (s)",
    OUTPUT_TOK_S: "output tok/s (median)",
    OUTPUT_TOK_S_LO: "90% interval from",
    OUTPUT_TOK_S_HI: "to",
    "repetitions": "repetitions",
    "set_aside": "set aside (disturbed)",
    "latency_p50_s": "latency p50 (s)",
    "latency_p90_s": "latency p90 (s)",
    "ttft_p50_s": "first token p50 (s)",
    "accept_length": "accept length",
}
MEASURED = {"ok": "yes", "skipped": "no (skipped)", "failed": "no (failed)", "not measured": "no"}
BESIDE_COLUMNS = {
    "arm": "arm",
    "concurrency": "concurrency",
    "predicted_tok_s": "predicted tok/s",
    "measured_tok_s": "measured tok/s",
    "measured_lo": "measured from",
    "measured_hi": "to",
    "error_pct": "prediction error",
    "predicted_accept_length": "accept length (predicted)",
    "mem_max_running": "sequences memory holds",
    "status": "measured?",
}


def decision_tables(folder: RunFolder) -> list[Any]:
    """Notebook 02's tables for reading: predicted beside measured, the measured sweep, arms not measured,
    and the engine's own adaptive speculation against the kit's pick (when the sweep measured it)."""
    name = speculation_name(folder)
    tables = []
    decision = folder.read_decision()
    if decision is not None:
        t = pd.DataFrame(decision.table_rows())
        t["arm"] = [arm_label(int(k), name) for k in t.spec_k]
        cols = [c for c in BESIDE_COLUMNS if c in t]
        tables.append(
            table(
                t[cols],
                "Predicted beside measured",
                BESIDE_COLUMNS,
                formats={"error_pct": signed_percent, "status": lambda s: MEASURED.get(s, str(s))},
                note="Prediction error: (predicted - measured) / measured.",
                summary=f"{len(t)} arm and concurrency levels",
            )
        )
    if folder.sweep.exists():
        sweep = pd.read_parquet(folder.sweep)
        adaptive = sweep[ADAPTIVE].astype(bool) if ADAPTIVE in sweep else pd.Series(False, index=sweep.index)
        sweep["arm"] = [
            f"{name} adaptive (up to k={int(k)})" if on else arm_label(int(k), name)
            for k, on in zip(sweep.spec_k, adaptive, strict=True)
        ]
        ran = sweep[sweep.status != "skipped"].dropna(axis=1, how="all")
        cols = [c for c in SWEEP_COLUMNS if c in ran]
        if len(ran):
            tables.append(table(ran[cols], "Measured sweep", SWEEP_COLUMNS, summary=f"{len(ran)} levels"))
        skipped = sweep[sweep.status == "skipped"].drop_duplicates("arm")[["arm", "reason"]]
        if len(skipped):
            tables.append(table(skipped, "Arms not measured", {"reason": "why"}))
    if decision is not None and decision.adaptive is not None and decision.adaptive.levels:
        tables.append(adaptive_table(decision))
    return tables


ADAPTIVE_COLUMNS = {
    "concurrency": "concurrency",
    OUTPUT_TOK_S: "adaptive tok/s (median)",
    "vs_plain": "over plain",
    "vs_plain_lo": "from",
    "vs_plain_hi": "to",
    "kit_label": "the kit's pick there",
    "vs_kit": "over the kit's pick",
    "vs_kit_lo": "ratio to the pick from",
    "vs_kit_hi": "ratio to the pick to",
    "kit_leads": "the pick leads outside the noise",
}


def adaptive_table(decision: Decision) -> Any:
    """The engine's own adaptive speculation per level (decision.json's `adaptive`): its median, its
    ratio to plain and to the fastest arm measured there, each the median of per-round ratios with
    its interval, and the verdict as the table's note."""
    cmp = decision.adaptive
    assert cmp is not None
    t = pd.DataFrame([lv.to_json() for lv in cmp.levels])
    return table(
        t[[c for c in ADAPTIVE_COLUMNS if c in t]],
        cmp.label,
        ADAPTIVE_COLUMNS,
        note=cmp.sentence,
        summary=f"{len(t)} levels",
    )


BACKEND_COLUMNS = {
    "setting": "setting",
    "value": "value",
    OUTPUT_TOK_S: "output tok/s (median)",
    OUTPUT_TOK_S_LO: "90% interval from",
    OUTPUT_TOK_S_HI: "to",
    "ratio": "over the baseline",
    "ratio_lo": "ratio from",
    "ratio_hi": "to",
    "start_s": "first start (s)",
    "status": "status",
    "reason": "why",
}


def backends_table(folder: RunFolder) -> Any:
    """The settings sweep (`decide.backends`): each server's median at the top level, its ratio to the
    baseline with the interval, its first start (a first-use compile shows there) and what was kept;
    a line saying none was run when the params asked for none."""
    decision = _decision(folder)
    if not decision.backends:
        from IPython.display import Markdown  # see docs/files.md, "Deferred imports"

        return Markdown("*No settings sweep: `decide.backends` names no engine setting to measure.*")
    t = pd.DataFrame([r.to_json() for r in decision.backends])
    t["setting"] = t.setting.fillna("baseline")
    t["value"] = t.value.fillna("(the params' own)")
    top = int(t.concurrency.iloc[0])
    return table(
        t[[c for c in BACKEND_COLUMNS if c in t]],
        f"Engine settings measured at {top} concurrent, sampled as stage 3 samples",
        BACKEND_COLUMNS,
        note="One setting changed at a time from the params' own; a value is taken only when it beats "
        "the baseline outside the noise (the rule the arms use).",
        summary=f"{len(t)} servers",
    )


def decision_figures(folder: RunFolder) -> list[Any]:
    """The figures of notebook 02 as images with alt text, also saved as PNG under figures/."""
    folder.figures.mkdir(parents=True, exist_ok=True)
    images = []
    for stem, (fig, alt) in make_figures(_decision(folder), speculation_name(folder)).items():
        fig.savefig(folder.figure(f"decide_{stem}"), dpi=110, bbox_inches="tight")
        images.append(figure_image(fig, alt))
    return images


def mtp_worth(folder: RunFolder) -> Any:
    """What the model's MTP heads would be worth (kit.decide.views.worth) for this run, or a line saying
    why it cannot be computed."""
    from IPython.display import Markdown  # Jupyter's display layer: see docs/files.md, "Deferred imports"

    band = worth_for_run(folder)
    if band is None:
        return Markdown("*What MTP would be worth: not computed (the model or decision.json is unreadable).*")
    return band
