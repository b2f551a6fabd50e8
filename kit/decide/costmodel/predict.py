"""Predicted output tokens/s per arm over a concurrency ladder, the crossover and the best arm.

A closed loop of `C` clients, each sending `I` prompt tokens and reading `O` output tokens (the
scenario's workload). Per engine replica `B = min(ceil(C / dp), cap)` sequences decode together,
with `cap` the smaller of the memory limit and the engine's running-request cap; mean context
`L = I + O / 2`. One batch of `B` requests takes `(O / E) * T_iter(B) + B * T_prefill(I)`, so

    tokens/s = min(C, dp * B) * O / ((O / E) * T_iter(B) + B * T_prefill(I))

with `E = 1`, `T_iter = T(B, 1, L)` for plain decoding and `E` the accept length,
`T_iter = T(B, k + 1, L) + T_draft(B, k, L)` for speculation with draft length `k` (the draft's cost
per kind: kit.decide.costmodel.drafts). A replica's step runs on `tp` GPUs (kit.decide.costmodel.step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from kit.arch import ModelArch
from kit.columns import OUTPUT_TOK_S, SPEC_K
from kit.decide.costmodel.acceptance import accept_length_for, check_accept_length
from kit.decide.costmodel.drafts import draft_time, draft_weight_bytes
from kit.decide.costmodel.scenario import Draft, Scenario, Workload
from kit.decide.costmodel.step import is_compute_bound, prefill_time, step_terms, step_time
from kit.engines.arms import arm_name
from kit.errors import CostModelError
from kit.memoryplan import CUDA_CONTEXT_BYTES, RunningCapacity, running_capacity


@dataclass(frozen=True)
class Capacity:
    """Largest number of running sequences per replica, from memory (`arm_capacity`'s figure)."""

    plain: int
    spec: dict[int, int]
    """Per draft length k."""


def arm_capacity(
    arch: ModelArch, memory_bytes: float, work: Workload, draft: Draft, k: int, *, on_cpu: bool = False
) -> RunningCapacity:
    """What one server of the arm with draft length `k` runs at once on a device of `memory_bytes`
    (kit.memoryplan.running_capacity, at the workload's context and memory settings): the weights it
    loads (every parameter and a vision tower, in the checkpoint's bytes per weight), the draft's,
    the memory free at its start (less the CUDA context on a GPU). The cost model's capacity and
    the sweep's running caps (kit.decide.sweep.layout) are this one figure."""
    loaded = (arch.param_counts()[0] + arch.vision_params) * work.shape.per_weight(arch)
    return running_capacity(
        arch,
        int(memory_bytes),
        work.mem_fraction,
        work.input_len + work.output_len,
        k,
        weight_bytes=int(loaded),
        draft_weight_bytes=int(draft_weight_bytes(arch, draft, work.shape)),
        kv_dtype_bytes=work.kv_dtype_bytes,
        ssm_dtype_bytes=work.ssm_dtype_bytes,
        tp_size=work.tp_size,
        reserved_bytes=0 if on_cpu else CUDA_CONTEXT_BYTES,
    )


def default_capacity(s: Scenario, ks: Sequence[int]) -> Capacity:
    """Memory limit per replica, `arm_capacity` of each arm (pure Python: the cost model stays standalone)."""

    def held(k: int) -> int:
        return arm_capacity(s.arch, s.hw.memory_bytes, s.work, s.draft, k, on_cpu=s.hw.on_cpu).running

    return Capacity(plain=held(0), spec={k: held(k) for k in ks})


CapacityFn = Callable[[Scenario, Sequence[int]], Capacity]


def iteration_time(s: Scenario, B: int, k: int) -> float:
    """Seconds per decode iteration at batch B (k = 0 plain; else verify k + 1 tokens plus the draft)."""
    L = s.context
    if k == 0:
        return step_time(s, B, 1, L)
    spec = s.eff.spec_iter_s + B * s.eff.spec_seq_s
    return step_time(s, B, k + 1, L) + draft_time(s, B, k, L) + spec


TERM_NAMES = {
    "weights_s": "weight reads",
    "linear_s": "GEMM compute",
    "experts_s": "expert weight reads",
    "expert_linear_s": "expert GEMM compute",
    "kv_s": "KV cache reads",
    "attention_s": "attention compute",
    "state_s": "recurrent state traffic",
    "recurrent_s": "recurrent compute",
    "fixed_s": "the fixed per-step cost",
    "comm_s": "tensor-parallel all-reduce",
}


def iteration_shares(s: Scenario, B: int, k: int) -> dict[str, float]:
    """Each named term's share of one iteration (its raw seconds over their sum): which cost the
    prediction rests on at this point (drafting and speculative bookkeeping as their own terms)."""
    L = s.context
    t = step_terms(s, B, k + 1 if k else 1, L)
    seconds = {name: getattr(t, attr) for attr, name in TERM_NAMES.items()}
    if k:
        seconds["drafting"] = draft_time(s, B, k, L)
        seconds["speculative bookkeeping"] = s.eff.spec_iter_s + B * s.eff.spec_seq_s
    total = sum(seconds.values()) or 1.0
    return {name: v / total for name, v in seconds.items() if v > 0}


def throughput(s: Scenario, B: int, k: int, E: float) -> float:
    """Output tokens/s of one replica running B sequences (see the module docstring)."""
    if k:
        check_accept_length(E, k)
    elif E != 1:
        raise CostModelError(f"plain decoding emits one token per step, got accept length {E}")
    out_len = s.work.output_len
    t_batch = (out_len / E) * iteration_time(s, B, k) + B * prefill_time(s)
    return B * out_len / t_batch


@dataclass(frozen=True)
class _LadderArm:
    """One arm of the ladder: draft length, accept length and where it comes from, its caps."""

    k: int
    E: float
    source: str
    mem_cap: int
    engine_cap: int | None


def predict_ladder(
    s: Scenario,
    concurrencies: Sequence[int],
    ks: Sequence[int],
    accept_lengths: Mapping[int, float] | None = None,
    *,
    engine_caps: Mapping[int, int | None] | None = None,
    capacity_fn: CapacityFn = default_capacity,
    strict: bool = True,
) -> pd.DataFrame:
    """Predicted tokens/s for plain (k = 0) and each speculative k at each concurrency.

    The speculative arms draft with the scenario's draft (kit.decide.costmodel.drafts).
    `engine_caps[k]` is the engine's running-request cap for that arm (None: none); requests
    beyond it queue. A concurrency whose running batch exceeds the memory limit raises
    `CostModelError` when `strict`, else its row is marked `feasible = False` with no throughput.
    """
    ks = sorted(set(ks))
    cap = capacity_fn(s, ks)
    rows = []
    for k in [0, *ks]:
        E, source = (1.0, "plain") if k == 0 else accept_length_for(k, accept_lengths)
        arm = _LadderArm(k, E, source, cap.plain if k == 0 else cap.spec[k], (engine_caps or {}).get(k))
        rows += [_ladder_row(s, C, arm, strict) for C in sorted(set(concurrencies))]
    return pd.DataFrame(rows)


def _ladder_row(s: Scenario, C: int, arm: _LadderArm, strict: bool) -> dict:
    work, k = s.work, arm.k
    wanted = math.ceil(C / work.dp_size)
    B = min(wanted, arm.engine_cap) if arm.engine_cap else wanted
    row = {
        "arm": arm_name(k),
        SPEC_K: k,
        "concurrency": C,
        "running": B,
        "accept_length": arm.E,
        "accept_source": arm.source,
        "dp_size": work.dp_size,
        "mem_max_running": arm.mem_cap,
        "engine_cap": arm.engine_cap,
        "feasible": B <= arm.mem_cap and arm.mem_cap > 0,
        "compute_bound": None,
        "step_s": None,
        OUTPUT_TOK_S: None,
    }
    if not row["feasible"]:
        if strict:
            raise CostModelError(
                f"{arm_name(k)} at concurrency {C}: {B} running sequences per replica but memory holds only "
                f"{arm.mem_cap} (context {work.input_len + work.output_len}, "
                f"mem_fraction {work.mem_fraction}); "
                f"lower the concurrency ladder, the context length, or add GPUs"
            )
        return row
    row["compute_bound"] = is_compute_bound(s, B, k + 1 if k else 1, s.context)
    row["step_s"] = iteration_time(s, B, k)
    total_running = min(C, work.dp_size * B)  # concurrency 1 keeps one replica busy, not dp of them
    row[OUTPUT_TOK_S] = total_running * throughput(s, B, k, arm.E) / B
    return row


def with_ratio(ladder: pd.DataFrame) -> pd.DataFrame:
    """Add `ratio_vs_plain`: each arm's tokens/s over plain's at the same concurrency."""
    plain = ladder[ladder.spec_k == 0].set_index("concurrency")[OUTPUT_TOK_S]
    out = ladder.copy()
    out["ratio_vs_plain"] = [
        (r.output_tok_s / plain.get(r.concurrency)) if r.output_tok_s and plain.get(r.concurrency) else None
        for r in out.itertuples()
    ]
    return out


def crossover(ladder: pd.DataFrame, k: int) -> int | None:
    """Smallest concurrency in the ladder where plain decoding matches or beats speculation with k."""
    t = with_ratio(ladder)
    rows = t[(t.spec_k == k) & t.ratio_vs_plain.notna()].sort_values("concurrency")
    hit = rows[rows.ratio_vs_plain <= 1.0]
    return int(hit.concurrency.iloc[0]) if len(hit) else None


def best_arm(ladder: pd.DataFrame, latency_bound_s: float | None = None, output_len: int = 1024) -> dict:
    """Arm and concurrency with the most tokens/s over feasible points.

    With `latency_bound_s`, only points whose predicted request latency
    (output_len x tokens-per-second-per-sequence inverse) meets the bound count.
    """
    ok = ladder[ladder.feasible & ladder.output_tok_s.notna()].copy()
    if latency_bound_s is not None:
        busy = pd.concat([ok.concurrency, ok.running * ok.dp_size], axis=1).min(axis=1)
        per_seq = ok.output_tok_s / busy
        ok = ok[output_len / per_seq <= latency_bound_s]
    if ok.empty:
        raise CostModelError("no feasible arm meets the objective: relax the latency bound or the ladder")
    best = ok.loc[ok.output_tok_s.idxmax()]
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in best.items()}


def workload_dict(work: Workload) -> dict:
    """JSON-ready copy of the workload."""
    return asdict(work)
