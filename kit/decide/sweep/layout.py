"""How the sweep's servers run: side by side or one at a time (`servers_together`: on a CPU when they
fit in memory, on one GPU when each can be given a KV cache of its own), the running requests an
arm's server is capped at where memory holds fewer than the sweep's top level (`running_caps`), and
the flags the sweep adds to stage 3's for its servers (`sweep_server_params`: the KV cap, the
prefix cache off). kit.decide.sweep.setup builds the stage's set-up from these.
"""

from __future__ import annotations

import logging
from typing import Any

import psutil

from kit.artifacts import ProbeReport
from kit.decide import costmodel as cm
from kit.decide.choose.scenario import sweep_workload
from kit.decide.measure.pilot import SweepPrompt
from kit.engines.flavors import Flavor
from kit.engines.settings import Arm
from kit.params import RunParams

log = logging.getLogger(__name__)
GIB = 1024**3


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


def sweep_kv_tokens(
    params: RunParams, prompts: list[SweepPrompt], arms: list[Arm], sent: list[SweepPrompt] | None = None
) -> int:
    """KV-cache tokens one arm's server needs for the sweep's top level: that many sequences of the
    sweep's mean prompt (the sum over a few hundred sampled prompts is close to its mean times their
    count) plus `decide.max_tokens` and the drafted tokens of the longest of `arms`, and never less
    than the longest request the stage sends a server (`longest_request_tokens` over `sent`: the
    sweep's prompts and the pilot's; `prompts` when not given), with `KV_HEADROOM`.

    The floor matters where the top level is small: at 1 concurrent the mean alone gave the demo
    model's servers 287 tokens on SGLang, which refused every longer prompt ("Input length (628
    tokens) exceeds the maximum allowed length (281 tokens)", H100, 2026-12-08)."""
    draft = max(a.k for a in arms) + 1
    per_seq = mean_prompt_tokens(params, prompts) + params.decide.max_tokens + draft
    top = max(params.decide.concurrencies) * per_seq
    return int(KV_HEADROOM * max(top, longest_request_tokens(params, sent or prompts) + draft))


def longest_request_tokens(params: RunParams, sent: list[SweepPrompt]) -> int:
    """The longest request stage 2 sends one server, in tokens: the longest prompt of `sent` (else
    `data.max_prompt_tokens`, where no prompt was counted) and the largest output budget its
    requests carry (the sweep's `decide.max_tokens`; the pilot's and the answers check's, sampled as
    stage 3: `generate.sampling.max_tokens` and each source's own)."""
    counted = [int(p["prompt_tokens"]) for p in sent if p.get("prompt_tokens")]
    prompt = max(counted) if counted else params.data.max_prompt_tokens or 0
    budgets = [s.max_tokens for s in params.data.sources if s.max_tokens]
    return prompt + max(params.decide.max_tokens, params.generate.sampling.max_tokens, *budgets)


def running_caps(
    params: RunParams, probe: ProbeReport, arch: Any, prompts: list[SweepPrompt], arms: list[Arm], fl: Flavor
) -> dict[int, int]:
    """k -> the running requests an arm's server is started with (0: plain decoding), for the arms
    whose GPU memory cannot hold the sweep's top level (none when the params set max_running_requests).

    An engine that reserves a hybrid model's recurrent state up front (`Flavor.spec_state_up_front`)
    keeps, per running request, its state (and under speculation one more for each draft token)
    before the KV cache gets any: the Qwen3.6-27B shape under MTP k=3 at 256 asked 183 GiB of the
    H200's 62 left after the weights, and its server did not start; on an 80 GB H100 its plain
    server at 256 did not start either (27 GiB left after 51 GiB of weights: SGLang's "no GPU memory
    for the KV cache", 2026-12-06). The cap is the arm's one memory figure, the table's
    `mem_max_running` (kit.decide.costmodel.arm_capacity, at the workload the cost model predicts:
    kit.decide.choose.scenario.sweep_workload), so the arm is measured as it can run; its levels
    above the cap queue. `arms`: the sweep's; `fl`: the engine's flavor."""
    eng = params.engine
    devices = probe.gpus.devices if probe.gpus else []
    if eng.max_running_requests or not arch.is_hybrid or not fl.spec_state_up_front:
        return {}
    if not devices or not devices[0].get("memory_total_bytes"):
        return {}
    work = sweep_workload(params, prompts)
    draft = cm.draft_for(params.decide, eng.speculative)
    memory = int(devices[0]["memory_total_bytes"])
    top = max(params.decide.concurrencies)
    caps = {}
    for k in sorted({a.k for a in arms}):  # an adaptive arm: at its ceiling
        held = cm.arm_capacity(arch, memory, work, draft, k).running
        if 0 < held < top:
            caps[k] = held
    return caps


def servers_together(
    params: RunParams,
    probe: ProbeReport,
    fl: Flavor,
    arms: int,
    weight_bytes: float,
    kv_tokens: int | None = None,
    kv_bytes_per_token: int | None = None,
    state_bytes_per_seq: int = 0,
) -> tuple[bool, str, list[str]]:
    """Whether the sweep keeps every arm's server up at once, why (decide.servers: auto), and the
    flags that cap each server's KV cache when they share a GPU (else []). `fl`: the engine's flavor;
    `arms`: how many servers the sweep runs; `state_bytes_per_seq`: a hybrid model's recurrent
    state, which the engine holds for each running sequence besides the KV."""
    mode = params.decide.servers
    eng = params.engine
    if mode == "one_at_a_time":
        return False, f"decide.servers is {mode}", []
    if not fl.can_speculate:
        return False, f"{eng.flavor} runs one server (it has no speculative arms)", []
    if probe.gpus.devices:
        return _together_on_gpu(
            params, probe, fl, arms, weight_bytes, kv_tokens, kv_bytes_per_token, state_bytes_per_seq
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
    fl: Flavor,
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
    flag = fl.kv_cap_flag
    cap = fl.kv_cap_args(kv_tokens) if kv_tokens else None
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


PREFIX_CACHE_WORDS = ("prefix-caching", "radix-cache")
"""A user's own extra_args naming one of these chose the prefix cache: the sweep keeps that choice."""


def sweep_server_params(
    params: RunParams, fl: Flavor, kv_cap: list[str] | None
) -> tuple[RunParams, list[str]]:
    """The params of the sweep's servers and the flags added to stage 3's for them: the KV cap that
    lets arms share a GPU (`servers_together`), and the prefix cache off (`Flavor.no_prefix_cache_args`).
    The sweep sends its prompts again at every level while stage 3 sends each once, so with the cache
    a level's tokens/s depends on what its server served before: on the H200 a Qwen3-32B server
    measured plain at 256 concurrent at 4.1K tok/s fresh and 6.1K after three lower levels of the
    same prompts. Stage 3's servers are left as they are."""
    eng = params.engine
    added = list(kv_cap or [])
    if not any(w in a for a in eng.extra_args for w in PREFIX_CACHE_WORDS):
        added += fl.no_prefix_cache_args
    if not added:
        return params, []
    engine = eng.model_copy(update={"extra_args": [*eng.extra_args, *added]})
    return params.model_copy(update={"engine": engine}), added


def running_cap_sentence(caps: dict[int, int], top: int, name: str) -> str:
    """The reason line of the capped arms (`name`: what the speculative arms are called)."""
    arms = ", ".join(
        f"{'plain decoding' if k == 0 else f'{name} k={k}'} at {c}" for k, c in sorted(caps.items())
    )
    return (
        f"memory capped the arms' servers: {arms} requests at once (of the sweep's top level {top}): "
        f"the engine reserves each running request's recurrent state (under speculation one more per "
        f"draft token) before its KV cache, and memory holds no more; a level above a cap measures that "
        f"running batch, as stage 3 would run it (twice the cap out at once and sent, not the level's)"
    )
