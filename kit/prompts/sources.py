"""The registered adapters: the six seed-plan datasets and three generic chat schemas.

Importing this module fills the registry in `kit.prompts.adapters`. An adapter that passes `tools`
takes their `<tools>` listing out of the system prompt (`tools_in_one_place`): the chat template
renders `tools`, so each schema reaches the engine once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kit.errors import DataError
from kit.prompts import openai_batch as _openai_batch  # noqa: F401  (registers the openai_batch adapter)
from kit.prompts.adapters import (
    Adapted,
    _short,
    adapter,
    scalar_meta,
    sharegpt_prompt,
    tools_in_one_place,
    tools_json,
    user_prompt,
)


@adapter("infinity_instruct", columns=("conversations",), id_column="id", language=("langdetect",))
def infinity_instruct(row: Mapping[str, Any]) -> Adapted:
    """BAAI/Infinity-Instruct: ShareGPT `conversations`, `label` abilities, `langdetect`, `source`."""
    messages, reference = sharegpt_prompt(row["conversations"])
    label = row.get("label") or {}
    meta = {
        "lang": row.get("langdetect"),
        "origin": row.get("source"),
        "ability": label.get("ability_en") if isinstance(label, Mapping) else None,
        "category": label.get("cate_ability_en") if isinstance(label, Mapping) else None,
        "reference": reference,
    }
    return Adapted(messages, None, meta)


@adapter("webinstructsub", columns=("question",), language=())
def webinstructsub(row: Mapping[str, Any]) -> Adapted:
    """TIGER-Lab/WebInstructSub: `question`, `answer`, `source` (stackexchange, socratic...)."""
    meta = {"origin": row.get("source"), "reference": row.get("answer")}
    return Adapted(user_prompt(row["question"], "question"), None, meta)


@adapter("codefeedback", columns=("query",), language=("lang",))
def codefeedback(row: Mapping[str, Any]) -> Adapted:
    """m-a-p/CodeFeedback-Filtered-Instruction: `query`, `answer`, `lang` (programming), `resource`."""
    meta = {"lang": row.get("lang"), "origin": row.get("resource"), "reference": row.get("answer")}
    return Adapted(user_prompt(row["query"], "query"), None, meta)


@adapter("metamathqa", columns=("query",))
def metamathqa(row: Mapping[str, Any]) -> Adapted:
    """meta-math/MetaMathQA: `query`, `response`, `type` (GSM_AnsAug...), `original_question`."""
    meta = {
        "type": row.get("type"),
        "original_question": row.get("original_question"),
        "reference": row.get("response"),
    }
    return Adapted(user_prompt(row["query"], "query"), None, meta)


@adapter("hermes_fc", columns=("conversations", "tools"), id_column="id")
def hermes_fc(row: Mapping[str, Any]) -> Adapted:
    """NousResearch/hermes-function-calling-v1: `tools` passed as tools, the system prompt kept without
    its `<tools>` listing of the same schemas (the chat template renders `tools`: once)."""
    messages, reference = sharegpt_prompt(row["conversations"])
    meta = {
        "category": row.get("category"),
        "subcategory": row.get("subcategory"),
        "task": row.get("task"),
        "reference": reference,
    }
    tools = tools_json(row["tools"])
    return Adapted(tools_in_one_place(messages, tools), tools, meta)


@adapter("agentinstruct", columns=("conversations",), id_column="id")
def agentinstruct(row: Mapping[str, Any]) -> Adapted:
    """THUDM/AgentInstruct: the in-context example turns kept, prompt cut before the last `gpt` turn."""
    messages, reference = sharegpt_prompt(row["conversations"])
    return Adapted(messages, None, {"turns": len(messages), "reference": reference})


@adapter("prompt_column", columns=("prompt",), id_column="id", language=("language", "lang", "langdetect"))
def prompt_column(row: Mapping[str, Any]) -> Adapted:
    """Any dataset with a `prompt` text column (optional `system`, `id`, `tools`)."""
    messages = user_prompt(row["prompt"], "prompt")
    system = row.get("system")
    if isinstance(system, str) and system.strip():
        messages = [{"role": "system", "content": system}, *messages]
    meta = scalar_meta(row, skip=("prompt", "system", "id", "tools"))
    tools = tools_json(row.get("tools"))
    return Adapted(tools_in_one_place(messages, tools), tools, meta)


@adapter(
    "openai_messages", columns=("messages",), id_column="id", language=("language", "lang", "langdetect")
)
def openai_messages(row: Mapping[str, Any]) -> Adapted:
    """OpenAI chat format: `messages` of {role, content} (optional `tools`, `id`)."""
    turns = row["messages"]
    if isinstance(turns, list) and any(isinstance(t, Mapping) and t.get("content") is None for t in turns):
        raise DataError(f"every message needs text content, found {_short(turns)}")
    messages, reference = sharegpt_prompt(turns, keys=("role", "content"))
    meta = {**scalar_meta(row, skip=("messages", "id", "tools")), "reference": reference}
    tools = tools_json(row.get("tools"))
    return Adapted(tools_in_one_place(messages, tools), tools, meta)


@adapter("sharegpt", columns=("conversations",), id_column="id", language=("language", "lang", "langdetect"))
def sharegpt(row: Mapping[str, Any]) -> Adapted:
    """ShareGPT: `conversations` of {from, value} (optional `tools`, `id`)."""
    messages, reference = sharegpt_prompt(row["conversations"])
    meta = {**scalar_meta(row, skip=("conversations", "id", "tools")), "reference": reference}
    tools = tools_json(row.get("tools"))
    return Adapted(tools_in_one_place(messages, tools), tools, meta)
