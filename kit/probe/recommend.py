"""Engine settings the probe recommends, from the GPU, the model, the engine's flags and the memory plan."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, TypedDict

from kit.artifacts import ProbeSpeculation, Recommended
from kit.artifacts.probe_sections import BackendChoice, EngineEnvFacts, ModelFacts
from kit.engines import parsers
from kit.engines.arms import Arm
from kit.engines.flavors import flavor, server_command
from kit.engines.launcher import adapt_flags
from kit.memoryplan import MemoryPlan

MAX_RUNNING_CAP = 1024
"""Beyond this the scheduler, not memory, is the limit: no point recommending more."""
MTP_K = 3
"""The documented MTP draft length for Qwen3.5 / 3.6 (3 steps, top-k 1, 4 draft tokens)."""


class ParserAdvice(TypedDict):
    """The parser and thinking fields of `Recommended`, read from the model's chat template."""

    tool_call_parser: str | None
    reasoning_parser: str | None
    parsers_reason: str
    thinking_switch: str | None
    thinking_note: str


def _mtp_defaults(name: str) -> dict[str, str | int]:
    """The speculative section of the MTP arm with the documented k, as flavor `name` spells it."""
    return {"algorithm": "MTP", **flavor(name).spell_arm(Arm(MTP_K, "MTP"))}


def speculation(inp: Any, model: ModelFacts) -> ProbeSpeculation:
    """Whether speculative decoding can run with this model directory, and why."""
    facts = model.get("mtp")
    mtp = facts["status"] if facts else None
    if inp.spec_algorithm == "NGRAM":
        return ProbeSpeculation(
            available=True, why="n-gram speculation needs no draft weights", algorithm="NGRAM"
        )
    if mtp == "present":
        return ProbeSpeculation.from_json(
            {
                "available": True,
                "why": "MTP weights present: EAGLE over the built-in heads",
                **_mtp_defaults(inp.flavor),
            }
        )
    if inp.spec_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        return ProbeSpeculation(
            available=None,
            why=f"{inp.spec_algorithm} with a separate draft model: not checked here",
            algorithm=inp.spec_algorithm,
        )
    why = {
        "declared_missing": "the config declares MTP layers but their weights are missing",
        "absent_from_architecture": "this architecture has no MTP layers",
    }.get(mtp, "model not readable")
    return ProbeSpeculation(available=False, why=why + "; NGRAM remains possible", algorithm=None)


def _mamba_flag(engine: EngineEnvFacts) -> str | None:
    flags = set((engine.get("launcher") or {}).get("flags") or [])
    return next(
        (f for f in ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy") if f in flags), None
    )


def recommend(
    inp: Any,
    model: ModelFacts,
    engine: EngineEnvFacts,
    memory: MemoryPlan | None,
    backend: BackendChoice,
    first_gpu: Any,
) -> Recommended:
    """Recommended engine settings; None where the probe cannot tell (no GPU, unreadable model)."""
    spec = speculation(inp, model)
    config = model.get("config")
    hybrid = bool(config and config["is_hybrid"])
    plain = min(memory.max_seqs_plain, MAX_RUNNING_CAP) if memory else None
    with_spec = min(memory.max_seqs_spec, MAX_RUNNING_CAP) if memory and spec.available else None
    big = first_gpu is not None and (first_gpu.memory_total_bytes or 0) > 160 * 1024**3
    graph_cap = 512 if big else 256
    return Recommended(
        attention_backend=backend["backend"],
        attention_backend_reason=backend["reason"],
        mem_fraction_static=inp.mem_fraction,
        max_running_requests=plain,
        max_running_requests_speculative=with_spec,
        max_running_requests_note="set it explicitly with speculation: SGLang otherwise resets it to 48",
        cuda_graph_max_bs=min(plain, graph_cap) if plain else None,
        cuda_graph_max_bs_speculative=min(with_spec, graph_cap) if with_spec else None,
        mamba_strategy="no_buffer" if hybrid else None,
        mamba_strategy_speculative="extra_buffer" if hybrid and spec.available else None,
        mamba_flag=_mamba_flag(engine) if hybrid else None,
        speculative=spec,
        context_length=inp.context_len,
        **_parsers(inp),
    )


def _parsers(inp: Any) -> ParserAdvice:
    """The tool-call / reasoning parsers the model's chat template calls for on this engine."""
    chosen = parsers.recommended(flavor(inp.flavor), Path(inp.model_path))
    switch = parsers.thinking_switch(parsers.chat_template(Path(inp.model_path)))
    return ParserAdvice(
        tool_call_parser=chosen.tool_call,
        reasoning_parser=chosen.reasoning,
        parsers_reason=chosen.why,
        thinking_switch=switch,
        thinking_note=(
            f"the chat template turns thinking on or off with `{switch}`: set generate.sampling.thinking"
            if switch
            else "the chat template has no thinking switch: leave generate.sampling.thinking unset"
        ),
    )


def recommended_engine(params: Any, rec: Recommended, speculative: bool) -> Any:
    """The run's params with the probe's recommended engine settings filled where the params leave
    them unset (the speculative variant: the model's MTP heads, or n-gram, with k = 3)."""
    from kit.engines.settings import speculative_params  # needs pydantic, as `params` does

    eng = params.engine
    fl = flavor(eng.flavor)
    suffix = "_speculative" if speculative else ""
    wanted = {
        "attention_backend": rec.attention_backend,
        "mem_fraction_static": rec.mem_fraction_static,
        "max_running_requests": getattr(rec, "max_running_requests" + suffix),
        "cuda_graph_max_bs": getattr(rec, "cuda_graph_max_bs" + suffix),
        "mamba_strategy": getattr(rec, "mamba_strategy" + suffix),
    }
    update = {k: v for k, v in wanted.items() if v is not None and k not in eng.model_fields_set}
    if speculative:
        algorithm = rec.speculative.algorithm
        update["speculative"] = speculative_params(Arm(MTP_K, algorithm), fl, eng.speculative)
    else:
        update["speculative"] = speculative_params(Arm(0), fl)
    return params.model_copy(update={"engine": eng.model_copy(update=update)})


def recommended_commands(params: Any, rec: Recommended, launcher: Any = None) -> dict[str, list[str]]:
    """Launch commands with the recommended settings, built by the kit's own command builders (and
    renamed for the installed launcher when it is known): plain, and speculative where available.
    Nothing for a flavor whose launch flags the kit does not tune (it reads no launcher of it)."""
    if flavor(params.engine.flavor).launcher is None:
        return {}
    arms = {"plain": False}
    if rec.speculative.available:
        arms["speculative"] = True
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, spec in arms.items():
            cmd = server_command(recommended_engine(params, rec, spec), params.engine.port or 30000)
            out[name] = adapt_flags(cmd, launcher)[0]
    return out
