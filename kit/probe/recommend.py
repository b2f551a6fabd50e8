"""Engine settings the probe recommends, from the GPU, the model, the engine's flags and the memory plan."""

from __future__ import annotations

from typing import Any

MAX_RUNNING_CAP = 1024
"""Beyond this the scheduler, not memory, is the limit: no point recommending more."""
MTP_DEFAULTS = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
"""SGLang's documented MTP settings for Qwen3.5 / 3.6 (see shared/reference/sglang.md)."""


def speculation(inp: Any, model: dict[str, Any]) -> dict[str, Any]:
    """Whether speculative decoding can run with this model directory, and why."""
    mtp = (model.get("mtp") or {}).get("status")
    if inp.spec_algorithm == "NGRAM":
        return {"available": True, "why": "n-gram speculation needs no draft weights", "algorithm": "NGRAM"}
    if mtp == "present":
        return {
            "available": True,
            "why": "MTP weights present: EAGLE over the built-in heads",
            **MTP_DEFAULTS,
        }
    if inp.spec_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        return {
            "available": None,
            "why": f"{inp.spec_algorithm} with a separate draft model: not checked here",
            "algorithm": inp.spec_algorithm,
        }
    why = {
        "declared_missing": "the config declares MTP layers but their weights are missing",
        "absent_from_architecture": "this architecture has no MTP layers",
    }.get(mtp, "model not readable")
    return {"available": False, "why": why + "; NGRAM remains possible", "algorithm": None}


def _mamba_flag(engine: dict[str, Any]) -> str | None:
    flags = set((engine.get("launcher") or {}).get("flags") or [])
    return next(
        (f for f in ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy") if f in flags), None
    )


def recommend(
    inp: Any,
    model: dict[str, Any],
    engine: dict[str, Any],
    memory: dict[str, Any] | None,
    backend: dict[str, Any],
    first_gpu: Any,
) -> dict[str, Any]:
    """Recommended engine settings; None where the probe cannot tell (no GPU, unreadable model)."""
    spec = speculation(inp, model)
    hybrid = bool((model.get("config") or {}).get("is_hybrid"))
    plain = min(memory["max_seqs_plain"], MAX_RUNNING_CAP) if memory else None
    with_spec = min(memory["max_seqs_spec"], MAX_RUNNING_CAP) if memory and spec["available"] else None
    big = first_gpu is not None and (first_gpu.memory_total_bytes or 0) > 160 * 1024**3
    graph_cap = 512 if big else 256
    return {
        "attention_backend": backend["backend"],
        "attention_backend_reason": backend["reason"],
        "mem_fraction_static": inp.mem_fraction,
        "max_running_requests": plain,
        "max_running_requests_speculative": with_spec,
        "max_running_requests_note": "set it explicitly with speculation: SGLang otherwise resets it to 48",
        "cuda_graph_max_bs": min(plain, graph_cap) if plain else None,
        "cuda_graph_max_bs_speculative": min(with_spec, graph_cap) if with_spec else None,
        "mamba_strategy": "no_buffer" if hybrid else None,
        "mamba_strategy_speculative": "extra_buffer" if hybrid and spec["available"] else None,
        "mamba_flag": _mamba_flag(engine) if hybrid else None,
        "speculative": spec,
        "context_length": inp.context_len,
    }
