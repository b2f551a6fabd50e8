"""Stage 2: probe facts + measured sweep + cost model -> decision.json (its display:
kit.decide.views.notebook).

Hardware comes from the probe: the datasheet of the first GPU (its efficiency factors from a
step profile when `decide.profile` names one), or, with no GPU, this CPU calibrated by a short
step profile of the model's own config, so the demo predicts its own curve honestly. The CPU
profile never takes more memory than the machine has (kit.decide.profile.budget): a model too big
to build whole is profiled on a few layers and scaled, or not at all, and decision.json says which.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, cast

import pandas as pd
import psutil
import pyarrow.parquet as pq

from kit.arch import arch_from_config, load_arch
from kit.artifacts import Decision, GpuSection, ProbeReport
from kit.decide import costmodel as cm
from kit.decide.checks.answers import answers_checked
from kit.decide.checks.settings_choice import settings_sweep
from kit.decide.checks.settings_sweep import check_backends
from kit.decide.choose.decision import decide, speculation_label, with_gpus
from kit.decide.choose.reasons import racing_sentences, running_cap_sentence, sweep_cost_sentence
from kit.decide.forecast.inputs import forecast_inputs
from kit.decide.measure.adaptive import check_adaptive, split, with_adaptive
from kit.decide.measure.journal import SweepJournal
from kit.decide.measure.pilot import SweepPrompt
from kit.decide.measure.tables import SweepNotes
from kit.decide.profile.budget import ProfilePlan, plan_cpu_profile
from kit.decide.profile.profiler import ProfileGrid, load_profile, profile_steps
from kit.decide.sweep.setup import SweepResult, SweepSetup
from kit.decide.sweep.sweep import run_sweep
from kit.engines.flavors import flavor
from kit.engines.settings import sweep_arms
from kit.errors import CostModelError
from kit.memoryplan import memory_plan
from kit.params import RunParams
from kit.prompts.plan import take_prompts, tools_list
from kit.prompts.prompt_set import ensure_plan
from kit.runfolder import RunFolder

log = logging.getLogger(__name__)
GIB = 1024**3

CPU_NOMINAL = cm.Hardware(bandwidth_Bps=20e9, flops_bf16=200e9, memory_bytes=16e9, name="cpu")
"""Nominal CPU figures: a CPU profile's calibration scales them, so only their ratio matters much."""


def sweep_prompts(params: RunParams, folder: RunFolder) -> list[SweepPrompt]:
    """A fixed, seeded sample of the planned prompts for every arm of the sweep."""
    path = ensure_plan(params, folder)
    order = list(range(pq.ParquetFile(path).metadata.num_rows))
    random.Random(params.data.seed).shuffle(order)  # shuffle positions: only the sample is read
    return _prompts(path, order[: params.decide.num_prompts])


def _prompts(path: Path, at: list[int]) -> list[SweepPrompt]:
    """The planned prompts at these positions, with their tools parsed for the engine's client."""
    rows = take_prompts(path, at).to_pylist() if at else []
    return [cast(SweepPrompt, {**r, "tools_list": tools_list(r)}) for r in rows]


PILOT_MORE = 2048
"""Further planned prompts the pilot may send while it has lasted under `MIN_PILOT_S` (at the H100's
13,000 tok/s and 64-token answers, 5 s is about 1,000 requests)."""


def pilot_prompts(params: RunParams, folder: RunFolder) -> tuple[list[SweepPrompt], list[SweepPrompt]]:
    """(`decide.pilot_per_source` planned prompts of each source: its first in a seeded shuffle of the
    plan, for the pilot that measures the run's own output lengths; then up to `PILOT_MORE` further
    planned prompts in that shuffle, which the pilot sends while it is too short to time)."""
    k = params.decide.pilot_per_source
    if not k:
        return [], []
    path = ensure_plan(params, folder)
    sources = pq.read_table(path, columns=["source"]).column("source").to_pylist()
    order = list(range(len(sources)))
    random.Random(params.data.seed + 1).shuffle(order)
    taken: dict[str, list[int]] = {}
    for i in order:
        mine = taken.setdefault(sources[i], [])
        if len(mine) < k:
            mine.append(i)
    picked = sorted(i for mine in taken.values() for i in mine)
    chosen = set(picked)
    more = [i for i in order if i not in chosen][:PILOT_MORE]
    return _prompts(path, picked), _prompts(path, more)


SERVER_OVERHEAD_BYTES = 2 * GIB
"""Memory one engine server takes besides its weights and KV cache (its processes, buffers)."""
TOGETHER_SHARE = 0.6
"""Servers run side by side only while they need less than this share of the memory free."""


GPU_SERVER_OVERHEAD_BYTES = 4 * GIB
"""GPU memory one server takes besides its weights and its KV cache: the CUDA context, CUDA graphs,
activations and sampling buffers (SGLang's slack outside `mem_fraction_static` covers the rest)."""
KV_HEADROOM = 1.25
"""The KV cache a server side by side is given over what the sweep's top level needs."""


def mean_prompt_tokens(params: RunParams, prompts: list[SweepPrompt]) -> float:
    """The sweep's mean prompt length in tokens (`data.max_prompt_tokens` when none was counted)."""
    lens = [int(p["prompt_tokens"]) for p in prompts if p.get("prompt_tokens")]
    return sum(lens) / len(lens) if lens else params.data.max_prompt_tokens


def sweep_kv_tokens(params: RunParams, prompts: list[SweepPrompt]) -> int:
    """KV-cache tokens one arm's server needs for the sweep's top level: that many sequences of the
    sweep's mean prompt (the sum over a few hundred sampled prompts is close to its mean times their
    count) plus `decide.max_tokens` and the drafted tokens, with `KV_HEADROOM`."""
    d = params.decide
    per_seq = mean_prompt_tokens(params, prompts) + d.max_tokens + max(a.k for a in sweep_arms(params)) + 1
    return int(KV_HEADROOM * max(d.concurrencies) * per_seq)


def _draft_weight_bytes(params: RunParams, arch: Any) -> int:
    """Draft weights a speculative server holds when it sizes its pools: a separate draft model's
    (EAGLE / STANDALONE, from its config), else the target's MTP layers with the embedding and LM
    head of their own that SGLang 0.5.16 builds before sharing the target's (Qwen3.6-27B shape on
    the H200: 5.53 GiB loaded, of which the layer is 0.71), and nothing for n-gram."""
    spec = params.engine.speculative
    if spec.draft_model_path:
        return int(load_arch(spec.draft_model_path).param_counts()[0] * arch.dtype_bytes)
    if (spec.algorithm or "").upper() in ("NGRAM", "LOOKAHEAD") or not arch.mtp_layers:
        return 0
    heads = arch.vocab_size * arch.hidden_size * (1 if arch.tie_embeddings else 2)
    return int((arch.mtp_layers * arch.layer_params + heads) * arch.dtype_bytes)


RUNNING_CAP_STEP = 8
"""A capped arm's running requests are rounded down to a multiple of this (CUDA-graph batch sizes)."""
RUNNING_CAP_MARGIN = 0.9
"""The share of the memory plan's sequences a capped arm is given, for what the plan does not see
(the engine's own buffers, its activations at the top level): on the H200 the plan's 151 sequences
for the Qwen3.6-27B shape's MTP k=1 would have asked 64 GiB of the 61.65 that server had."""
CUDA_CONTEXT_BYTES = int(1.3 * 2**30)
"""GPU memory gone before the engine plans its pools (the CUDA context): SGLang sizes them as a
share of the memory free when it starts, 1.18 GiB under the total on an H100 80GB, 1.31 on the
H200 (2026-12-03 / 12-06)."""


def running_caps(
    params: RunParams, probe: ProbeReport, arch: Any, prompts: list[SweepPrompt]
) -> dict[int, int]:
    """k -> the running requests an arm's server is started with (0: plain decoding), for the arms
    whose GPU memory cannot hold the sweep's top level (none when the params set max_running_requests).

    An engine that reserves a hybrid model's recurrent state up front (`Flavor.spec_state_up_front`)
    keeps, per running request, its state (and under speculation one more for each draft token)
    before the KV cache gets any: the Qwen3.6-27B shape under MTP k=3 at 256 asked 183 GiB of the
    H200's 62 left after the weights, and its server did not start; on an 80 GB H100 its plain
    server at 256 did not start either (27 GiB left after 51 GiB of weights: SGLang's "no GPU memory
    for the KV cache", 2026-12-06). The cap is the memory plan's (kit.memoryplan) at the sweep's
    context, so the arm is measured as it can run; its levels above the cap queue."""
    eng = params.engine
    d = params.decide
    devices = probe.gpus.devices if probe.gpus else []
    if eng.max_running_requests or not arch.is_hybrid or not flavor(eng.flavor).spec_state_up_front:
        return {}
    if not devices or not devices[0].get("memory_total_bytes"):
        return {}
    mean = mean_prompt_tokens(params, prompts)
    # what the engine loads (the embedding and a vision tower too: the cost model's weight_bytes is
    # what a step reads, 3.3 GiB under what SGLang held for the Qwen3.6-27B shape)
    weights, draft = arch.resident_weight_bytes(), _draft_weight_bytes(params, arch)
    free = int(devices[0]["memory_total_bytes"]) - CUDA_CONTEXT_BYTES
    top = max(d.concurrencies)
    caps = {}
    for k in sorted({a.k for a in sweep_arms(params)}):  # an adaptive arm: at its ceiling
        plan = memory_plan(
            arch,
            free,
            eng.mem_fraction_static or params.probe.mem_fraction,
            int(mean + d.max_tokens + k + 1),
            weight_bytes=weights,
            spec_draft_tokens=k + 1 if k else 0,
            draft_weight_bytes=draft if k else 0,
            tp_size=eng.tp_size,
        )
        fits = int(RUNNING_CAP_MARGIN * (plan.max_seqs_spec if k else plan.max_seqs_plain))
        if 0 < fits < top:
            caps[k] = max(fits // RUNNING_CAP_STEP * RUNNING_CAP_STEP, min(fits, RUNNING_CAP_STEP))
    return caps


def servers_together(
    params: RunParams,
    probe: ProbeReport,
    weight_bytes: float,
    kv_tokens: int | None = None,
    kv_bytes_per_token: int | None = None,
    state_bytes_per_seq: int = 0,
) -> tuple[bool, str, list[str]]:
    """Whether the sweep keeps every arm's server up at once, why (decide.servers: auto), and the
    flags that cap each server's KV cache when they share a GPU (else []). `state_bytes_per_seq`: a
    hybrid model's recurrent state, which the engine holds for each running sequence besides the KV."""
    mode = params.decide.servers
    eng = params.engine
    arms = len(sweep_arms(params))
    fl = flavor(eng.flavor)
    if mode == "one_at_a_time":
        return False, f"decide.servers is {mode}", []
    if not fl.can_speculate:
        return False, f"{eng.flavor} runs one server (it has no speculative arms)", []
    if probe.gpus.devices:
        return _together_on_gpu(
            params, probe, arms, weight_bytes, kv_tokens, kv_bytes_per_token, state_bytes_per_seq
        )
    if mode == "together":
        return True, f"decide.servers is {mode}", []
    apart = fl.apart_on_cpu(eng)
    if apart:
        return False, apart, []
    need = arms * (weight_bytes + fl.cpu_cache_gib(eng) * GIB + SERVER_OVERHEAD_BYTES)
    free = psutil.virtual_memory().available
    if need > TOGETHER_SHARE * free:
        return False, f"{arms} servers would need {need / GIB:.1f} GiB of the {free / GIB:.1f} GiB free", []
    return True, f"{arms} servers fit side by side ({need / GIB:.1f} of {free / GIB:.1f} GiB free)", []


def _together_on_gpu(
    params: RunParams,
    probe: ProbeReport,
    arms: int,
    weight_bytes: float,
    kv_tokens: int | None,
    kv_bytes_per_token: int | None,
    state_bytes_per_seq: int = 0,
) -> tuple[bool, str, list[str]]:
    """On one GPU the arms' servers can share it when each is given a KV cache of its own size
    (`Flavor.kv_cap_args`: an engine left alone sizes its cache from the memory free when it starts,
    and the second server would find none) and weights plus caches fit under the memory fraction."""
    eng = params.engine
    one_at_a_time = "each arm's server takes the GPUs' memory, so the arms run one at a time"
    if eng.tp_size > 1 or eng.dp_size > 1 or eng.replicas > 1:
        return False, f"{one_at_a_time} (a server spans several GPUs)", []
    flag = flavor(eng.flavor).kv_cap_flag
    cap = flavor(eng.flavor).kv_cap_args(kv_tokens) if kv_tokens else None
    if flag in eng.extra_args:  # the user's own cap: kept, and the sizes read from it
        kv_tokens, cap = int(eng.extra_args[eng.extra_args.index(flag) + 1]), []
    memory = probe.gpus.devices[0].get("memory_total_bytes")
    if cap is None or not memory or not kv_bytes_per_token or not kv_tokens:
        why = f"{eng.flavor} has no flag the kit knows to cap a server's KV cache" if cap is None else ""
        return False, f"{one_at_a_time}{f' ({why})' if why else ''}", []
    frac = eng.mem_fraction_static or params.probe.mem_fraction
    state = max(params.decide.concurrencies) * state_bytes_per_seq
    per = weight_bytes + kv_tokens * kv_bytes_per_token + state + GPU_SERVER_OVERHEAD_BYTES
    have = frac * memory
    held = f", {state / GIB:.1f} GiB of recurrent state" if state else ""
    sizes = f"{arms} x {per / GIB:.1f} GiB (weights, {kv_tokens:,} tokens of KV cache{held}, overhead)"
    if arms * per > have:
        if params.decide.servers == "together":
            log.warning(
                "decide.servers is together, but %s exceed %.0f GiB: one at a time", sizes, have / GIB
            )
        return False, f"{one_at_a_time}: {sizes} would exceed {have / GIB:.0f} GiB", []
    return True, f"the arms share the GPU: {sizes} fit in {have / GIB:.0f} GiB", cap or []


def _hardware(
    params: RunParams, folder: RunFolder, probe: ProbeReport
) -> tuple[cm.Hardware, pd.DataFrame | None, int, ProfilePlan | None]:
    """(hardware, step profile or None, GPU count, the CPU profile's plan when one was made)."""
    gpus = probe.gpus.devices
    profile = load_profile(params.decide.profile) if params.decide.profile else None
    if gpus:
        return _gpu_hardware(probe.gpus), profile, len(gpus), None
    ram = probe.ram_total_bytes or CPU_NOMINAL.memory_bytes
    hw = cm.Hardware(CPU_NOMINAL.bandwidth_Bps, CPU_NOMINAL.flops_bf16, ram, "cpu")
    if profile is not None:
        return hw, profile, 1, None
    profile, plan = _cpu_profile(params, folder)
    return hw, profile, 1, plan


def _cpu_profile(params: RunParams, folder: RunFolder) -> tuple[pd.DataFrame | None, ProfilePlan]:
    """A step profile of this model on the CPU, as deep as memory allows (none when nothing fits)."""
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


def _gpu_hardware(gpus: GpuSection) -> cm.Hardware:
    """The first GPU's datasheet figures, else the probe's measured ones, else a clear error."""
    sheet, measured, first = gpus.datasheet or {}, gpus.measured, gpus.devices[0]
    memory = first.get("memory_total_bytes") or sheet.get("memory_bytes")
    name = first["name"]
    if sheet and memory:
        return cm.Hardware(
            sheet["bandwidth_bytes_s"],
            sheet["bf16_flops"],
            memory,
            name,
            gemm_efficiency=sheet.get("gemm_efficiency"),
        )
    if measured.get("copy_bandwidth_bytes_s") and measured.get("bf16_flops") and memory:
        return cm.Hardware(
            measured["copy_bandwidth_bytes_s"], measured["bf16_flops"], memory, f"{name} (measured)"
        )
    raise CostModelError(
        f"{name} is not in the kit's datasheet and was not measured: set probe.measure_gpu: true and "
        "rerun kit probe (or add the GPU to kit/probe/datasheet.yaml)"
    )


PREFIX_CACHE_WORDS = ("prefix-caching", "radix-cache")
"""A user's own extra_args naming one of these chose the prefix cache: the sweep keeps that choice."""


def sweep_server_params(params: RunParams, kv_cap: list[str] | None) -> tuple[RunParams, list[str]]:
    """The params of the sweep's servers and the flags added to stage 3's for them: the KV cap that
    lets arms share a GPU (`servers_together`), and the prefix cache off (`Flavor.no_prefix_cache_args`).
    The sweep sends its prompts again at every level while stage 3 sends each once, so with the cache
    a level's tokens/s depends on what its server served before: on the H200 a Qwen3-32B server
    measured plain at 256 concurrent at 4.1K tok/s fresh and 6.1K after three lower levels of the
    same prompts. Stage 3's servers are left as they are."""
    eng = params.engine
    added = list(kv_cap or [])
    if not any(w in a for a in eng.extra_args for w in PREFIX_CACHE_WORDS):
        added += flavor(eng.flavor).no_prefix_cache_args
    if not added:
        return params, []
    engine = eng.model_copy(update={"extra_args": [*eng.extra_args, *added]})
    return params.model_copy(update={"engine": engine}), added


def run_decision(params: RunParams, folder: RunFolder, probe: ProbeReport, fresh: bool = False) -> Decision:
    """Run the sweep (going on from a stopped one's journal unless `fresh`), predict, decide; write
    decision.json and return it."""
    arch = load_arch(params.model.path)
    check_backends(params)  # a settings sweep the installed engine cannot launch: said before measuring
    check_adaptive(params)  # so is an adaptive arm it cannot run
    mtp = probe.mtp_status
    prompts = sweep_prompts(params, folder)
    together, why_together, cap = servers_together(
        params,
        probe,
        cm.weight_bytes(arch),
        sweep_kv_tokens(params, prompts),
        arch.kv_bytes_per_token(),
        arch.state_bytes_per_seq(),
    )
    side_by_side = SweepNotes(servers_kv_cap_args=cap) if cap else SweepNotes()
    sweep_params, added = sweep_server_params(params, cap)
    if added:
        side_by_side["sweep_extra_args"] = added
    caps = running_caps(params, probe, arch, prompts)
    if caps:
        side_by_side["running_caps"] = {str(k): c for k, c in caps.items()}
    sample, more = pilot_prompts(params, folder)
    setup = SweepSetup(
        params, sweep_params, folder, prompts, arch.is_hybrid, together, caps, mtp, sample, more
    )
    result = run_sweep(setup, fresh)
    side_by_side.update(_notes(result))
    sweep, runs, adaptive = split(result.table, result.runs)  # the adaptive arm: compared apart, never chosen
    hw, profile, n_gpus, profile_plan = _hardware(params, folder, probe)
    lens = [p["prompt_tokens"] for p in prompts if p.get("prompt_tokens")]
    eng = params.engine
    work = cm.Workload(
        input_len=int(sum(lens) / len(lens)) if lens else 512,
        output_len=params.decide.max_tokens,
        mem_fraction=eng.mem_fraction_static or params.probe.mem_fraction,
        tp_size=eng.tp_size,
        dp_size=eng.dp_size,
    )
    scenario = cm.Scenario(arch, hw, work=work, draft=cm.draft_for(params.decide, eng.speculative))
    if n_gpus > 1 and eng.tp_size == 1 and eng.dp_size == 1:
        scenario = with_gpus(scenario, n_gpus)  # params leave the layout open: use every GPU
    probed = probe.recommended.attention_backend if flavor(eng.flavor).attention_backends else None
    backend = eng.attention_backend or probed  # the probe's names are SGLang's

    def decided(table: pd.DataFrame) -> Decision:
        return decide(
            scenario,
            table,
            params.decide,
            mtp or "absent",
            eng.flavor,
            profile=profile,
            attention_backend=backend,
            algorithm=eng.speculative.algorithm,
            draft_model=eng.speculative.draft_model_path is not None,
            runs=runs,
        )

    decision = decided(sweep)
    sweep, decision = answers_checked(setup, sweep, decision, decided)
    noise = decision.noise
    if noise is not None:
        extra = {**noise.extra, **side_by_side}
        noise = replace(noise, servers_together=together, servers_why=why_together, extra=extra)
    if caps:
        line = running_cap_sentence(caps, max(params.decide.concurrencies), speculation_label(params))
        decision = replace(decision, reasons=[*decision.reasons, line])
    for name, starts in (side_by_side.get("running_lowered") or {}).items():
        line = (
            f"{name}'s server had no memory for the state of {starts[0]} running requests and was "
            f"started again at {', then '.join(map(str, starts[1:]))}: its levels above that queue"
        )
        decision = replace(decision, reasons=[*decision.reasons, line])
    if side_by_side.get("sweep_resumed"):
        line = (
            f"the sweep went on from a run of it stopped part way ({side_by_side['sweep_resumed']} "
            "measurements kept): its drift check, plain decoding at the top level first and last, spans both"
        )
        decision = replace(decision, reasons=[*decision.reasons, line])
    decision = _with_profile_notes(replace(decision, noise=noise, mtp_status=mtp), profile_plan)
    decision = with_adaptive(
        decision, adaptive, sweep, runs, flavor(eng.flavor).title, speculation_label(params)
    )
    decision = settings_sweep(setup, decision)
    label = speculation_label(params)
    forecast = forecast_inputs(
        params, folder, decision, label, result.pilot, result.server_start_s
    ).forecast()
    if forecast is not None:
        decision = replace(
            decision, forecast=forecast, reasons=[*decision.reasons, f"forecast: {forecast.sentence}"]
        )
    cost = [*racing_sentences(result.cost), sweep_cost_sentence(result.cost, decision.forecast)]
    decision = replace(decision, sweep_cost=result.cost, reasons=[*decision.reasons, *cost])
    folder.write_decision(decision)
    SweepJournal.finish(folder.sweep_journal)  # only now: a run stopped before it goes on
    return decision


def _notes(result: SweepResult) -> SweepNotes:
    """What the sweep said of how it ran, as decision.json's `noise` keeps it beside the servers'
    flags (an earlier kit's keys: old decisions read the same)."""
    notes = SweepNotes()
    if result.running_lowered:
        notes["running_lowered"] = result.running_lowered
    if result.resumed:
        notes["sweep_resumed"] = result.resumed
    if result.servers_idle_cpu_pct is not None:
        notes.update(servers_idle_cpu_pct=result.servers_idle_cpu_pct, servers_held=result.servers_held)
    return notes


def _with_profile_notes(decision: Decision, plan: ProfilePlan | None) -> Decision:
    """The decision with what it says of the CPU profile (efficiency source, warnings)."""
    if plan is None:
        return decision
    warnings = [*decision.warnings, plan.warning()] if plan.warning() else decision.warnings
    efficiency = {**decision.efficiency, "source": plan.source()}
    return replace(decision, efficiency=efficiency, cpu_profile=asdict(plan), warnings=warnings)
