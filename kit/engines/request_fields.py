"""The body fields of a chat completion: a run's sampling settings in its engine's terms.

    fields = run_request_fields(params)     # the loop adds max_tokens and the seed per sample
    tools = tool_request_fields(params)     # what a request that offers tools adds
    flavor(params.engine.flavor).sampling_problems(params.generate.sampling)   # refused before the run

What a flavor refuses, and where it takes the settings beyond OpenAI's, is the flavor's
(`Flavor.refused_fields`, `Flavor.sampling_body`, `Flavor.tool_request_fields`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from kit.engines import parsers
from kit.engines.flavors import Flavor, flavor
from kit.engines.flavors.base import ExtendedFields, RequestFields, SamplingFields, ToolFields
from kit.params import RunParams, SamplingParams

OPENAI_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "stop", "seed")
EXTENDED_FIELDS = ("top_k", "min_p", "repetition_penalty")
"""Taken beside the OpenAI ones by vLLM and SGLang; by `transformers serve` only inside a
`generation_config` (which replaces the model's, so the kit merges the two). Both are keys of
`SamplingFields` (`ExtendedFields`), named as `SamplingParams` names them."""


def request_fields(
    fl: Flavor,
    sampling: SamplingParams,
    *,
    thinking_kwarg: str = "enable_thinking",
    model_generation_config: dict[str, Any] | None = None,
) -> RequestFields:
    """The body fields of a chat completion for these sampling settings (model, messages, max_tokens
    and the per-sample seed are added per request). Unset settings are left out. The flavor's
    `SamplingFields`, the chat template's variables and the user's `extra_body` (sent as written,
    so the whole is open JSON)."""
    openai = {k: getattr(sampling, k) for k in OPENAI_FIELDS if getattr(sampling, k) not in (None, [])}
    extended = {k: getattr(sampling, k) for k in EXTENDED_FIELDS if getattr(sampling, k) is not None}
    body = fl.sampling_body(
        cast(SamplingFields, openai), cast(ExtendedFields, extended), model_generation_config
    )
    kwargs = dict(sampling.chat_template_kwargs)
    if sampling.thinking is not None:
        kwargs.setdefault(thinking_kwarg, sampling.thinking)
    template = {"chat_template_kwargs": kwargs} if kwargs else {}
    return cast(RequestFields, {**body, **template, **sampling.extra_body})


def run_request_fields(params: RunParams) -> RequestFields:
    """The request fields of a run's chat completions (the loop adds max_tokens and the seed per
    sample): its sampling settings in its engine's terms, with the thinking switch named as the
    model's chat template names it, and the model's generation config for a flavor that merges it."""
    model = Path(params.model.path)
    switch = parsers.thinking_switch(parsers.chat_template(model)) or "enable_thinking"
    fields = request_fields(
        flavor(params.engine.flavor),
        params.generate.sampling,
        thinking_kwarg=switch,
        model_generation_config=_generation_config(model),
    )
    fields.pop("seed", None)
    return fields


def _generation_config(model: Path) -> dict[str, Any] | None:
    """The model's generation_config.json as read (any keys), or None when it has none (or an
    unreadable one)."""
    path = model / "generation_config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tool_request_fields(params: RunParams) -> ToolFields:
    """Fields a request that offers tools adds (`Flavor.tool_request_fields`)."""
    return flavor(params.engine.flavor).tool_request_fields(params)


def thinking_problem(sampling: SamplingParams, template: str | None) -> str | None:
    """Why `generate.sampling.thinking` cannot work with this chat template, or None."""
    if sampling.thinking is None or template is None or parsers.thinking_switch(template):
        return None
    return (
        "generate.sampling.thinking: the model's chat template has no thinking switch "
        "(no enable_thinking or thinking variable), so the setting would change nothing; remove it"
    )
