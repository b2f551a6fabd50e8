"""What drafting `k` tokens costs, per kind of draft (the scenario's `Draft`): MTP heads, EAGLE /
EAGLE-3 heads, a separate draft model, self-speculation with a sparse KV cache, and n-gram (prompt
lookup).

A model-based draft runs, per iteration of B sequences, one extend pass over the tokens the last
verify accepted (B (k + 1) rows, as SGLang's and vLLM's EAGLE workers pad them) and then k - 1
decode passes of B rows; each pass costs the step terms of the draft network (kit.decide.costmodel.step)
plus `(layers + 1) layer_s` of fixed cost and its all-reduces, and `draft_pass_s` for what a pass
costs beyond its kernels (launches, sampling the drafted token, the sync before the next pass):

    T_draft = P(B (k + 1), L) + (k - 1) P(B, L) + k draft_pass_s

- mtp:        one decoder layer of the target's own shape (an MoE layer for MoE models) with its KV
              over L, the fusion projection 2h x h and the full-vocabulary LM head (shared weights);
- eagle:      one decoder layer (dense, the target's width or the head's config.json), fusion 2h x h,
              the target's LM head;
- eagle3:     the same with fusion 3h x h and the head's reduced draft vocabulary (`draft_vocab_size`,
              32000 for the Llama-3.1-8B head) as LM head;
- draft_model: the draft's own config.json, every layer, at context L;
- self_spec:  the target itself attending to a budget of `kv_budget` tokens (MagicDec, StreamingLLM);
- ngram:      no GPU pass: a host lookup of `Efficiency.ngram_seq_s` per sequence per iteration.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kit.arch import ModelArch, arch_from_config
from kit.decide.costmodel.scenario import PLAIN_SHAPE, Draft, DraftKind, Scenario, StepShape
from kit.decide.costmodel.step import param_split, step_terms
from kit.errors import CostModelError


def draft_from_config(kind: DraftKind, config: dict | Path | None, kv_budget: int | None = None) -> Draft:
    """A `Draft` from a kind and, for model-based drafts, the draft's config.json (dict or path)."""
    if isinstance(config, Path | str):
        path = Path(config)
        path = path / "config.json" if path.is_dir() else path
        if not path.is_file():
            raise CostModelError(f"draft config {path} does not exist: point it at the draft's config.json")
        config = json.loads(path.read_text())
    arch = arch_from_config(config) if config else None
    vocab = int(config["draft_vocab_size"]) if config and config.get("draft_vocab_size") else None
    return Draft(kind, arch, vocab, kv_budget)


def head_arch(target: ModelArch, draft: Draft) -> ModelArch:
    """The one-layer network an MTP / EAGLE head runs, with its LM head rows as vocabulary."""
    base = draft.arch if draft.arch is not None and draft.kind != "mtp" else target
    one = replace(
        base, num_layers=1, layer_types=("full_attention",), linear=None, mtp_layers=0, dense_layers=0
    )
    if draft.kind != "mtp":  # EAGLE heads are dense layers
        one = replace(one, num_experts=0, experts_per_token=0, moe_intermediate_size=0)
    return replace(one, vocab_size=draft.vocab or target.vocab_size, tie_embeddings=True)


def _fusion_params(target: ModelArch, draft: Draft) -> float:
    return (3 if draft.kind == "eagle3" else 2) * target.hidden_size**2


def _pass(s: Scenario, B: int, q: int, L: float, extra_params: float = 0.0) -> float:
    """One draft forward pass of the network `s.arch`: its step terms, its own fixed cost, extra
    (fusion) weights."""
    t = step_terms(s, B, q, L)
    extra = extra_params * s.shape.per_weight(s.arch) / (s.tp * s.hw.bandwidth_Bps * s.eff.bw)
    return t.total_s - t.fixed_s + (s.arch.num_layers + 1) * s.eff.layer_s + extra


def draft_time(s: Scenario, B: int, k: int, L: float) -> float:
    """Seconds to draft k tokens with the scenario's draft for B sequences at context L (module
    docstring)."""
    if k < 1:
        raise CostModelError(f"draft length k must be >= 1, got {k}")
    target, draft, eff = s.arch, s.draft, s.eff
    if draft.kind == "ngram":
        return B * eff.ngram_seq_s
    # a head reads its weights in the target checkpoint's dtype; a draft model in its own config's
    work = replace(s.work, weight_bytes=None, weight_dtype_bytes=s.shape.per_weight(target))
    if draft.kind == "self_spec":
        net, L, extra = target, min(L, float(draft.kv_budget or L)), 0.0
    elif draft.kind == "draft_model":
        net, extra = draft.arch, 0.0
        work = replace(work, weight_dtype_bytes=None, ssm_dtype_bytes=PLAIN_SHAPE.ssm_dtype_bytes)
    else:
        net, extra = head_arch(target, draft), _fusion_params(target, draft)
    assert net is not None
    passes = replace(s, arch=net, work=work)
    extend = _pass(passes, B, k + 1, L, extra)
    return extend + (k - 1) * _pass(passes, B, 1, L, extra) + k * eff.draft_pass_s


def draft_weight_bytes(target: ModelArch, draft: Draft, shape: StepShape = PLAIN_SHAPE) -> float:
    """Weight memory a server of `target` loads for `draft` beside the target, in the target
    checkpoint's bytes per weight (`shape`): a draft model's own weights; an MTP draft's layers with
    an embedding and LM head of their own, which SGLang 0.5.16 builds before sharing the target's
    (Qwen3.6-27B shape on the H200: 5.53 GiB loaded, of which the layer is 0.71); an EAGLE head's
    layer and fusion (an EAGLE-3 head with its reduced LM head), sharing the target's; nothing for
    n-gram and self-speculation."""
    if draft.kind in ("ngram", "self_spec"):
        return 0.0
    if draft.kind == "draft_model":
        assert draft.arch is not None
        return float(draft.arch.param_counts()[0] * draft.arch.dtype_bytes)
    head = head_arch(target, draft)
    layers = max(target.mtp_layers, 1) if draft.kind == "mtp" else 1
    dense, routed, _, lm_head = param_split(head)
    own_head = lm_head if draft.kind == "eagle3" else 0.0
    if draft.kind == "mtp":
        own_head = target.vocab_size * target.hidden_size * (1 if target.tie_embeddings else 2)
    params = layers * (dense + routed + _fusion_params(target, draft)) + own_head
    return float(params * shape.per_weight(target))


_BY_ALGORITHM = {"NGRAM": "ngram", "EAGLE3": "eagle3", "STANDALONE": "draft_model"}


def draft_for(decide: object, speculative: object | None = None) -> Draft:
    """The draft the prediction assumes, from DecideParams (draft, draft_config, draft_kv_budget) and
    the engine's SpeculativeParams (algorithm, draft_model_path) when the former leave it open."""
    algorithm = getattr(speculative, "algorithm", None)
    config = getattr(decide, "draft_config", None) or getattr(speculative, "draft_model_path", None)
    kind = getattr(decide, "draft", None) or _BY_ALGORITHM.get(algorithm or "")
    if kind is None:
        kind = "eagle" if algorithm == "EAGLE" and config else "mtp"
    if kind == "draft_model" and config is None:
        raise CostModelError(
            "a draft_model draft needs its config.json: set decide.draft_config or "
            "engine.speculative.draft_model_path"
        )
    uses_config = kind in ("draft_model", "eagle", "eagle3") and config is not None
    return draft_from_config(kind, config if uses_config else None, getattr(decide, "draft_kv_budget", None))
