"""The rows of the six seed sources as kit.demo.fixtures writes them: each source's real schema on
the Hub, one `TypedDict` per source (a line of its `<source>.jsonl`)."""

from __future__ import annotations

from typing import TypedDict

Turn = TypedDict("Turn", {"from": str, "value": str})
"""A ShareGPT turn: `from` is system, human, gpt or tool (a keyword: the functional form)."""
AgentTurn = TypedDict("AgentTurn", {"from": str, "loss": bool | None, "value": str})
"""AgentInstruct's turn: whether the trainer learns it (`loss`; None on the human's turns)."""


class InfinityLabel(TypedDict):
    ability_en: list[str]
    ability_zh: list[str]
    cate_ability_en: list[str]
    cate_ability_zh: list[str]


class InfinityRow(TypedDict):
    """BAAI/Infinity-Instruct."""

    id: int
    conversations: list[Turn]
    label: InfinityLabel
    langdetect: str
    source: str


class WebInstructRow(TypedDict):
    """TIGER-Lab/WebInstructSub."""

    question: str
    answer: str
    source: str


class CodeFeedbackRow(TypedDict):
    """m-a-p/CodeFeedback-Filtered-Instruction."""

    query: str
    answer: str
    lang: str
    resource: str


class MetaMathRow(TypedDict):
    """meta-math/MetaMathQA."""

    query: str
    response: str
    type: str
    original_question: str


class HermesRow(TypedDict):
    """NousResearch/hermes-function-calling-v1: `tools` as JSON text, the calls in the gpt turns."""

    id: str
    conversations: list[Turn]
    tools: str
    category: str
    subcategory: str
    task: str


class AgentRow(TypedDict):
    """THUDM/AgentInstruct."""

    id: str
    conversations: list[AgentTurn]


FixtureRow = InfinityRow | WebInstructRow | CodeFeedbackRow | MetaMathRow | HermesRow | AgentRow
"""A line of any source's fixture file."""
