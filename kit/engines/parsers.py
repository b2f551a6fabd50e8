"""Tool-call and reasoning parsers: which one each engine needs for a model, read off its chat template.

Without a tool-call parser vLLM refuses every request that carries `tools` (HTTP 400, '"auto" tool
choice requires --enable-auto-tool-choice and --tool-call-parser'), and the calls of a model that
does call tools stay as text; without a reasoning parser the `<think>` block stays inside the
answer. The chat template says what the model writes, so it decides the parser family; each flavor
names the parsers it gives a family (`Flavor.parser_names`, in `kit/engines/flavors/`; the facts, with
their sources, are in docs/engines.md):

| template writes | family | models |
|---|---|---|
| `<function=..>` (XML) | qwen3-xml | Qwen3.5, Qwen3.6, Qwen3-Coder |
| `<tool_call>{json}` | qwen-json | Qwen2.5, Qwen3, Qwen3-2507 |
| DeepSeek `tool▁calls▁begin` | deepseek-v3 | DeepSeek-V3, V3-0324 |
| the same with `thinking` | deepseek-v3.1 | DeepSeek-V3.1, V3.2 |
| `<think>` and DeepSeek's markers | deepseek-r1 | DeepSeek-R1 |

A reasoning parser is only chosen when the template can think (`<think>`, `enable_thinking`,
`thinking`): vLLM's qwen3 parser returns an answer that never closes `</think>` entirely as
reasoning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic stays out of the probe's GPU-box script (benchmarks/probe_gpu.py)
    from kit.engines.flavors.base import Flavor
    from kit.params import EngineParams

AUTO = "auto"


QWEN_XML = "qwen3-xml"
QWEN_JSON = "qwen-json"
DEEPSEEK_V3 = "deepseek-v3"
DEEPSEEK_V31 = "deepseek-v3.1"
DEEPSEEK_R1 = "deepseek-r1"
"""The chat-template families: what the model writes for tool calls and thinking."""


def chat_template(model_dir: Path) -> str | None:
    """The model's chat template text: chat_template.jinja, else tokenizer_config.json's."""
    model_dir = Path(model_dir)
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    cfg = model_dir / "tokenizer_config.json"
    try:
        template = json.loads(cfg.read_text()).get("chat_template")
    except (OSError, ValueError):
        return None
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return template if isinstance(template, str) else None


def family(template: str | None) -> str | None:
    """The parser family of a chat template, or None when it has no tool-call or thinking format the
    kit knows."""
    if not template:
        return None
    if "tool▁calls▁begin" in template or "tool_calls_begin" in template:
        return DEEPSEEK_V31 if "thinking" in template else DEEPSEEK_V3
    if "<tool_call>" in template or "<function=" in template:
        return QWEN_XML if "<function=" in template else QWEN_JSON
    if "<think>" in template and ("deepseek" in template.lower() or "｜Assistant｜" in template):
        return DEEPSEEK_R1
    if "<think>" in template or "enable_thinking" in template:
        return QWEN_JSON
    return None


def thinks(template: str | None) -> bool:
    """Whether the chat template has a thinking mode (and so needs a reasoning parser)."""
    return bool(template) and any(m in template for m in ("<think>", "enable_thinking", "thinking"))


_SWITCH_RE = re.compile(r"\{[{%][^}]*?\b(enable_thinking|thinking)\b")


def thinking_switch(template: str | None) -> str | None:
    """The chat-template variable that turns thinking on or off (Qwen3's `enable_thinking`,
    DeepSeek-V3.1's `thinking`), or None when the template reads no such variable."""
    found = set(_SWITCH_RE.findall(template or ""))
    return "enable_thinking" if "enable_thinking" in found else next(iter(found), None)


@dataclass(frozen=True)
class Parsers:
    """The parser names to launch with (None: off), and why."""

    tool_call: str | None
    reasoning: str | None
    why: str


def recommended(flavor: Flavor, model_dir: Path) -> Parsers:
    """The parsers the model's chat template calls for on `flavor`; off where it takes no parser flags."""
    if not flavor.parser_names:
        return Parsers(None, None, f"{flavor.name} takes no parser flags")
    template = chat_template(model_dir)
    fam = family(template)
    if fam is None:
        why = "no chat template" if not template else "the chat template has no tool-call or thinking format"
        return Parsers(None, None, why + " the kit knows; set engine.tool_call_parser to choose one")
    tool, reasoning = flavor.parser_names.get(fam, (None, None))
    return Parsers(
        tool, reasoning if thinks(template) else None, f"the chat template writes the {fam} format"
    )


def resolve(flavor: Flavor, eng: EngineParams, model_dir: Path) -> Parsers:
    """The parsers to launch with: the params' names, with `auto` taken from the chat template."""
    wants_auto = AUTO in (eng.tool_call_parser, eng.reasoning_parser)
    auto = recommended(flavor, model_dir) if wants_auto else None
    tool = auto.tool_call if eng.tool_call_parser == AUTO and auto else eng.tool_call_parser
    reasoning = auto.reasoning if eng.reasoning_parser == AUTO and auto else eng.reasoning_parser
    return Parsers(tool, reasoning, auto.why if auto else "set in the params")


def launch_flags(chosen: Parsers, tool_flags: list[str]) -> list[str]:
    """The parser flags of a launch command (`tool_flags` go before the tool-call parser)."""
    out = [*tool_flags, "--tool-call-parser", chosen.tool_call] if chosen.tool_call else []
    return out + (["--reasoning-parser", chosen.reasoning] if chosen.reasoning else [])
