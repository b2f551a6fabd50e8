"""Stage 2 wiring: probe facts + measured sweep + cost model -> decision.json, and its display.

Hardware comes from the probe: the datasheet of the first GPU (its efficiency factors from a
step profile when `decide.profile` names one), or, with no GPU, this CPU calibrated by a short
step profile of the model's own config, so the demo predicts its own curve honestly. The CPU
profile never takes more memory than the machine has (kit.decide.profile_budget): a model too big
to build whole is profiled on a few layers and scaled, or not at all, and decision.json says which.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from kit.arch import arch_from_config, load_arch
from kit.decide import costmodel as cm
from kit.decide.decision import decide, with_gpus
from kit.decide.drafts import draft_for
from kit.decide.predict import Workload
from kit.decide.profile_budget import ProfilePlan, plan_cpu_profile
from kit.decide.sweep import run_sweep
from kit.errors import CostModelError
from kit.params import RunParams
from kit.prompts.prompt_set import ensure_prompts
from kit.runfolder import RunFolder, read_json, write_json_atomic

log = logging.getLogger(__name__)

CPU_NOMINAL = cm.Hardware(bandwidth_Bps=20e9, flops_bf16=200e9, memory_bytes=16e9, name="cpu")
"""Nominal CPU figures: a CPU profile's calibration scales them, so only their ratio matters much."""


def sweep_prompts(params: RunParams, folder: RunFolder) -> list[dict[str, Any]]:
    """A fixed, seeded sample of the planned prompts for every arm of the sweep."""
    table = ensure_prompts(params, folder)
    order = list(range(table.num_rows))
    random.Random(params.data.seed).shuffle(order)  # shuffle positions: only the sample is materialised
    rows = table.take(order[: params.decide.num_prompts]).to_pylist()
    return [{**r, "tools_list": json.loads(r["tools"]) if r.get("tools") else None} for r in rows]


def _mtp_status(probe: dict[str, Any]) -> str | None:
    return ((probe.get("model") or {}).get("mtp") or {}).get("status")


def _hardware(
    params: RunParams, folder: RunFolder, probe: dict[str, Any]
) -> tuple[cm.Hardware, pd.DataFrame | None, int, ProfilePlan | None]:
    """(hardware, step profile or None, GPU count, the CPU profile's plan when one was made)."""
    from kit.decide.profiler import load_profile

    info = probe.get("gpus") or {}
    gpus = info.get("devices") or []
    profile = load_profile(params.decide.profile) if params.decide.profile else None
    if gpus:
        return _gpu_hardware(gpus, info), profile, len(gpus), None
    ram = (probe.get("host") or {}).get("ram_total_bytes") or CPU_NOMINAL.memory_bytes
    hw = cm.Hardware(CPU_NOMINAL.bandwidth_Bps, CPU_NOMINAL.flops_bf16, ram, "cpu")
    if profile is not None:
        return hw, profile, 1, None
    profile, plan = _cpu_profile(params, folder)
    return hw, profile, 1, plan


def _cpu_profile(params: RunParams, folder: RunFolder) -> tuple[pd.DataFrame | None, ProfilePlan]:
    """A step profile of this model on the CPU, as deep as memory allows (none when nothing fits)."""
    from kit.decide.profiler import ProfileGrid, profile_steps

    cfg = json.loads((Path(params.model.path) / "config.json").read_text())
    grid = ProfileGrid(
        batch_sizes=tuple(sorted({1, *params.decide.concurrencies})),
        q_values=(1, 2),
        contexts=(128,),
        reps=3,
    )
    plan = plan_cpu_profile(arch_from_config(cfg), max(grid.batch_sizes), max(grid.q_values), 128)
    if plan.warning():
        log.warning(plan.warning())
    if plan.mode == "skipped":
        return None, plan
    profile = profile_steps(cfg, grid, device="cpu", n_layers=plan.profiler_layers)
    profile.to_parquet(folder.step_profile, index=False)
    return profile, plan


def _gpu_hardware(gpus: list[dict[str, Any]], info: dict[str, Any]) -> cm.Hardware:
    """The first GPU's datasheet figures, else the probe's measured ones, else a clear error."""
    sheet = info.get("datasheet") or {}
    measured = (info.get("torch") or {}).get("measured") or {}
    memory = gpus[0].get("memory_total_bytes") or sheet.get("memory_bytes")
    name = gpus[0]["name"]
    if sheet and memory:
        return cm.Hardware(sheet["bandwidth_bytes_s"], sheet["bf16_flops"], memory, name)
    if measured.get("copy_bandwidth_bytes_s") and measured.get("bf16_flops") and memory:
        return cm.Hardware(
            measured["copy_bandwidth_bytes_s"], measured["bf16_flops"], memory, f"{name} (measured)"
        )
    raise CostModelError(
        f"{name} is not in the kit's datasheet and was not measured: set probe.measure_gpu: true and "
        "rerun kit probe (or add the GPU to kit/probe/datasheet.yaml)"
    )


def decide_stage(params: RunParams, folder: RunFolder, probe: dict[str, Any]) -> dict[str, Any]:
    """Run the sweep, predict, decide; write decision.json and return it."""
    arch = load_arch(params.model.path)
    mtp = _mtp_status(probe)
    prompts = sweep_prompts(params, folder)
    sweep = run_sweep(params, folder, prompts, mtp, hybrid=arch.is_hybrid)
    hw, profile, n_gpus, profile_plan = _hardware(params, folder, probe)
    lens = [p["prompt_tokens"] for p in prompts if p.get("prompt_tokens")]
    eng = params.engine
    work = Workload(
        input_len=int(sum(lens) / len(lens)) if lens else 512,
        output_len=params.decide.max_tokens,
        mem_fraction=eng.mem_fraction_static or params.probe.mem_fraction,
        tp_size=eng.tp_size,
        dp_size=eng.dp_size,
    )
    if n_gpus > 1 and eng.tp_size == 1 and eng.dp_size == 1:
        work = with_gpus(work, arch, hw, n_gpus)  # params leave the layout open: use every GPU
    backend = eng.attention_backend or (probe.get("recommended") or {}).get("attention_backend")
    decision = decide(
        arch,
        hw,
        sweep,
        params.decide,
        mtp or "absent",
        eng.flavor,
        work=work,
        profile=profile,
        attention_backend=backend,
        algorithm=eng.speculative.algorithm,
        draft_model=eng.speculative.draft_model_path is not None,
        draft=draft_for(params.decide, eng.speculative),
    )
    decision["engine_flavor"] = eng.flavor
    _note_profile_plan(decision, profile_plan)
    decision["mtp_status"] = mtp
    write_json_atomic(folder.decision, decision)
    return decision


def _note_profile_plan(decision: dict[str, Any], plan: ProfilePlan | None) -> None:
    """Say in decision.json (efficiency source, warnings) what the CPU profile was."""
    decision.setdefault("warnings", [])
    if plan is None:
        return
    decision["efficiency"]["source"] = plan.source()
    decision["cpu_profile"] = asdict(plan)
    if plan.warning():
        decision["warnings"].append(plan.warning())


# ---- display (notebook 02) ---------------------------------------------------
def speculation_name(folder: RunFolder) -> str:
    """What the run's speculative arms are called (MTP, n-gram, EAGLE, draft model), from its
    params.yaml (MTP when unreadable)."""
    from kit.decide.decision import spec_name

    try:
        spec = ((yaml.safe_load(folder.params.read_text()) or {}).get("engine") or {}).get(
            "speculative"
        ) or {}
        return spec_name(spec.get("algorithm"), spec.get("draft_model_path") is not None)
    except (OSError, yaml.YAMLError, AttributeError, KeyError):
        return "MTP"


def decision_markdown(folder: RunFolder) -> str:
    """The decision first (what was chosen, measured or predicted, by how much), then the reasons,
    warnings and the engine settings stage 3 takes."""
    from kit.decide.verdict import decision_answer
    from kit.display import human_name

    decision = read_json(folder.decision)
    answer = decision_answer(decision, speculation_name(folder))
    lines = [f"## Decision: {answer.headline}", "", answer.detail, "", "**Why**", ""]
    lines += [f"- {r}" for r in decision["reasons"]]
    lines += [f"- **warning:** {w}" for w in decision.get("warnings") or []]
    lines += ["", "**Engine settings for stage 3**", ""]
    lines += [f"- {human_name(k)}: {_setting(v)}" for k, v in decision["engine_settings"].items()]
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
    "output_tok_s": "output tok/s",
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
    "error_pct": "prediction error",
    "predicted_accept_length": "accept length (predicted)",
    "mem_max_running": "sequences memory holds",
    "status": "measured?",
}


def decision_tables(folder: RunFolder) -> list[Any]:
    """Notebook 02's tables for reading: predicted beside measured, the measured sweep, arms not measured."""
    from kit.decide.verdict import arm_label
    from kit.display import signed_percent, table

    name = speculation_name(folder)
    tables = []
    if folder.decision.exists():
        t = pd.DataFrame(read_json(folder.decision)["table"])
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
        sweep["arm"] = [arm_label(int(k), name) for k in sweep.spec_k]
        ran = sweep[sweep.status != "skipped"].dropna(axis=1, how="all")
        cols = [c for c in SWEEP_COLUMNS if c in ran]
        if len(ran):
            tables.append(table(ran[cols], "Measured sweep", SWEEP_COLUMNS, summary=f"{len(ran)} levels"))
        skipped = sweep[sweep.status == "skipped"].drop_duplicates("arm")[["arm", "reason"]]
        if len(skipped):
            tables.append(table(skipped, "Arms not measured", {"reason": "why"}))
    return tables


def decision_figures(folder: RunFolder) -> list[Any]:
    """The figures of notebook 02 as images with alt text, also saved as PNG under figures/."""
    from kit.decide.plots import decision_figures as make
    from kit.display import figure_image

    folder.figures.mkdir(parents=True, exist_ok=True)
    images = []
    for stem, (fig, alt) in make(read_json(folder.decision), speculation_name(folder)).items():
        fig.savefig(folder.figure(f"decide_{stem}"), dpi=110, bbox_inches="tight")
        images.append(figure_image(fig, alt))
    return images


def mtp_worth(folder: RunFolder) -> Any:
    """What the model's MTP heads would be worth (kit.decide.worth) for this run, or a line saying
    why it cannot be computed."""
    from IPython.display import Markdown

    from kit.decide.worth import worth_for_run

    band = worth_for_run(folder)
    if band is None:
        return Markdown("*What MTP would be worth: not computed (the model or decision.json is unreadable).*")
    return band
