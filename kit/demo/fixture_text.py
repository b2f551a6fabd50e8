"""Synthetic text that reads like real prompts and answers (see fixtures.py): requests, math and word
problems, code requests, Hermes tool calls, the OS agent's turns, each drawn with a seeded
`random.Random`. The word lists and templates they draw from are kit/demo/fixture_words.py's, imported
here (`fixture_text.TOPICS` reads as before).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from functools import cache
from typing import TypedDict, TypeVar

from kit.demo.fixture_words import (
    ABILITIES,
    AGENT_INSTRUCTIONS,
    AUDIENCES,
    CATEGORIES,
    CITIES,
    CODE_LANGS,
    CODE_LIMITS,
    CODE_ORIGINS,
    CODE_TASKS,
    CURRENCIES,
    EXTS,
    FOLLOW_UPS,
    GENRES,
    INFINITY_ORIGINS,
    ITEMS,
    MATH_TYPES,
    NAMES,
    OS_TASKS,
    PATHS,
    REQUESTS,
    STYLES,
    SYSTEMS,
    TOOLS,
    TOPICS,
    WEB_ORIGINS,
    ZH_AUDIENCES,
    ZH_REQUESTS,
    ZH_TOPICS,
    ToolSchema,
)

__all__ = [
    "ABILITIES",
    "AGENT_INSTRUCTIONS",
    "AUDIENCES",
    "CATEGORIES",
    "CITIES",
    "CODE_LANGS",
    "CODE_LIMITS",
    "CODE_ORIGINS",
    "CODE_TASKS",
    "CURRENCIES",
    "EXTS",
    "FOLLOW_UPS",
    "GENRES",
    "INFINITY_ORIGINS",
    "ITEMS",
    "MATH_TYPES",
    "NAMES",
    "OS_TASKS",
    "PATHS",
    "REQUESTS",
    "STYLES",
    "SYSTEMS",
    "TOOLS",
    "TOPICS",
    "WEB_ORIGINS",
    "ZH_AUDIENCES",
    "ZH_REQUESTS",
    "ZH_TOPICS",
    "agent_act",
    "answer",
    "between",
    "code_answer",
    "code_request",
    "follow_up",
    "hermes_system",
    "long_document",
    "math_question",
    "os_output",
    "os_task",
    "pick",
    "rephrase",
    "request",
    "system_prompt",
    "tool_request",
    "tool_response",
    "word_problem",
    "zh_request",
]
"""The word lists (kit/demo/fixture_words.py) and the generators here."""

T = TypeVar("T")
ArgValue = str | int | float
"""A value the fixture's tool arguments take (kit.demo.fixture_words.ParameterSchema's types)."""


class HermesCall(TypedDict):
    """A tool call as a Hermes answer writes it inside `<tool_call>` (arguments as an object)."""

    name: str
    arguments: dict[str, ArgValue]


def pick(rng: random.Random, seq: Sequence[T]) -> T:
    """`rng.choice`, several times faster (the fixtures draw millions of words)."""
    return seq[int(rng.random() * len(seq))]


def between(rng: random.Random, low: int, high: int) -> int:
    """`rng.randint` (both ends included), faster."""
    return low + int(rng.random() * (high - low + 1))


def _fill(rng: random.Random, template: str, zh: bool = False) -> str:
    topic, topic2 = rng.sample(ZH_TOPICS if zh else TOPICS, 2)
    return template.format(
        topic=topic,
        topic2=topic2,
        audience=pick(rng, ZH_AUDIENCES if zh else AUDIENCES),
        genre=pick(rng, GENRES),
        style=pick(rng, STYLES),
        k=between(rng, 2, 9),
        n=10 * between(rng, 5, 59),
    )


def request(rng: random.Random) -> str:
    return _fill(rng, pick(rng, REQUESTS))


def zh_request(rng: random.Random) -> str:
    return _fill(rng, pick(rng, ZH_REQUESTS), zh=True)


def follow_up(rng: random.Random) -> str:
    return _fill(rng, pick(rng, FOLLOW_UPS))


def system_prompt(rng: random.Random) -> str:
    return _fill(rng, pick(rng, SYSTEMS))


def answer(rng: random.Random, zh: bool = False) -> str:
    if zh:
        return "、".join(rng.sample(ZH_TOPICS, 3)) + "之间有密切的联系。"
    return " ".join(pick(rng, _sentences()) for _ in range(between(rng, 2, 5)))


@cache
def _sentences() -> tuple[str, ...]:
    """A fixed pool of plain English sentences, built once (long documents sample from it)."""
    rng = random.Random(1234)
    verbs = ["shapes", "depends on", "explains", "limits", "changes", "supports", "resembles", "drives"]
    return tuple(
        f"{pick(rng, TOPICS).capitalize()} {pick(rng, verbs)} {pick(rng, TOPICS)} "
        f"in ways that {pick(rng, AUDIENCES)} can observe {pick(rng, STYLES).replace('as ', 'through ')}."
        for _ in range(600)
    )


def long_document(rng: random.Random) -> str:
    """A ~1,500-word document with a summarising instruction (for the token filter)."""
    body = " ".join(rng.choices(_sentences(), k=110))
    head = f"Summarise the following report in {between(rng, 3, 9)} bullet points for {pick(rng, AUDIENCES)}."
    return f"{head}\n\n{body}"


def math_question(rng: random.Random) -> str:
    a, b, c = between(rng, 2, 19), between(rng, -30, 30), between(rng, -50, 50)
    forms = [
        f"Find the derivative of f(x) = {a}x^3 + {b}x - {c}.",
        f"How do you solve {a}x^2 + {b}x + {c} = 0 and what are its roots?",
        f"Evaluate the integral of {a}sin(x) + {b}x from 0 to {abs(c) + 1}.",
        f"Prove that the sum of the first {a * 7} odd numbers is a perfect square.",
        f"What is the probability of rolling at least {a % 6 + 1} sixes in {a + 3} throws of a fair die?",
        f"If a matrix A has eigenvalues {a} and {b}, what is the determinant of A^{abs(c) % 5 + 2}?",
    ]
    return pick(rng, forms)


def word_problem(rng: random.Random) -> tuple[str, int]:
    name, other = rng.sample(NAMES, 2)
    item = pick(rng, ITEMS)
    a, b, c = between(rng, 10, 500), between(rng, 2, 90), between(rng, 1, 9)
    q = f"{name} has {a} {item}. {name} buys {b} more, then gives {c} {item} to {other}. "
    q += f"How many {item} are left?"
    return q, a + b - c


def rephrase(rng: random.Random, question: str, kind: str) -> str:
    if kind.endswith("Rephrased"):
        return "Rephrase and solve: " + question
    if kind.endswith(("SV", "FOBAR")):
        return (
            question
            + f" If the answer is known, what is the value of the unknown variable x? ({between(rng, 1, 99)})"
        )
    return question


def code_request(rng: random.Random, lang: str) -> str:
    task = pick(rng, CODE_TASKS).format(k=between(rng, 2, 9), n=100 * between(rng, 1, 999))
    extra = pick(rng, CODE_LIMITS).format(n=1000 * between(rng, 1, 9999))
    name = f"{pick(rng, ['fast', 'safe', 'simple', 'batch'])}_{pick(rng, ['solver', 'helper', 'util', 'op'])}"
    return f"Write a {lang} function `{name}` that {task}. {extra}"


def code_answer(rng: random.Random, lang: str) -> str:
    return f"Here is a {lang} solution.\n```{lang}\n// {between(rng, 1, 10**6)}\n```\nIt runs in linear time."


def hermes_system(tools: list[ToolSchema]) -> str:
    return (
        "You are a function calling AI model. You are provided with function signatures within "
        f"<tools></tools> XML tags.<tools>\n{json.dumps(tools)}\n</tools> For each function call return a "
        "json object with function name and arguments within <tool_call></tool_call> XML tags."
    )


def tool_request(
    rng: random.Random, tool: ToolSchema, arg: Callable[[random.Random, str, str], ArgValue] | None = None
) -> tuple[str, HermesCall]:
    """A request for `tool` naming every argument's value, and the call it asks for. `arg(rng, name,
    type)` draws a value (default: the fixture's)."""
    fn = tool["function"]
    arg = arg or _arg
    args = {p: arg(rng, p, spec["type"]) for p, spec in fn["parameters"]["properties"].items()}
    described = ", ".join(f"{p.replace('_', ' ')} {v}" for p, v in args.items())
    lead = pick(rng, ["Could you", "Please", "I need you to", "Can you help me and"])
    call = HermesCall(name=fn["name"], arguments=args)
    return f"{lead} {fn['description'].lower()} with {described}?", call


def _arg(rng: random.Random, name: str, kind: str) -> ArgValue:
    if kind == "integer":
        return between(rng, 5, 240)
    if kind == "number":
        return round(rng.uniform(1, 500), 2)
    if "currency" in name:
        return pick(rng, CURRENCIES)
    if name in ("city", "origin", "destination"):
        return pick(rng, CITIES)
    return f"{pick(rng, TOPICS)} {between(rng, 1, 999)}"


def tool_response(rng: random.Random, call: HermesCall) -> str:
    result = {"name": call["name"], "content": {"status": "ok", "value": between(rng, 1, 10**5)}}
    return f"<tool_response>\n{json.dumps(result)}\n</tool_response>"


def os_task(rng: random.Random) -> str:
    return pick(rng, OS_TASKS).format(
        ext=pick(rng, EXTS),
        path=pick(rng, PATHS),
        k=between(rng, 1, 999),
        shell=pick(rng, ["/bin/bash", "/bin/zsh", "/usr/sbin/nologin"]),
        word=pick(rng, ["error", "TODO", "warning", "timeout"]),
    )


def agent_act(rng: random.Random) -> str:
    cmd = pick(rng, ["find {p} -type f | wc -l", "ls -la {p}", "du -sk {p}", "grep -rc error {p}"]).format(
        p=pick(rng, PATHS)
    )
    return f"Think: I should inspect the files first.\n\nAct: bash\n\n```bash\n{cmd}\n```"


def os_output(rng: random.Random) -> str:
    return f"The output of the OS:\n\n{between(rng, 0, 5000)}\n[root@localhost]# "
