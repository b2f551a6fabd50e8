"""A generated chat corpus that teaches the demo model the output shapes engines parse.

The prompts read like the six fixture sources (kit.demo.fixture_text's word lists and
templates); the completions follow Qwen3: with thinking on, a `<think>\\n...\\n</think>\\n\\n`
block (a few arithmetic steps for word problems, a line or nothing for chit-chat) and then the
answer; with thinking off, the answer alone (the chat template has already pre-filled an empty
think block). Prompts whose system turn lists tools are answered with a Hermes / Qwen3 tool
call, `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, whose arguments are the
values the request names. Everything is drawn from one seeded generator.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from kit.demo import fixture_text as text
from kit.demo.fixture_text import ArgValue, between, pick
from kit.demo.fixture_words import ToolSchema

THINKING_SHARE = 0.7
"""Share of conversations rendered with thinking on (Qwen3's default) rather than off."""
HERMES_SYSTEM_SHARE = 0.8
"""Share of tool conversations whose system turn is the Hermes prompt (the rest: a plain one, or none)."""


@dataclass(frozen=True)
class Example:
    """One conversation: the request side (messages, tools, thinking) and the completion to learn."""

    messages: list[dict[str, str]]
    tools: list[ToolSchema] | None
    thinking: bool
    reasoning: str
    answer: str

    @property
    def completion(self) -> str:
        """What the model writes after the generation prompt (its end-of-turn token not included)."""
        if not self.thinking:
            return self.answer
        return f"<think>\n{self.reasoning}\n</think>\n\n{self.answer}"


Shape = tuple[list[dict[str, str]], list[ToolSchema] | None, str, str]
"""(messages, tools, reasoning, answer) as one kind of conversation produces them."""

TOPIC_SENTENCES = [
    "{T} is a simple idea once you see the main step.",
    "First, we look at what {t} means and why it matters.",
    "The key point is that each part of {t} depends on the one before it.",
    "For example, you can start with a small case of {t} and check the result.",
    "This is why {t} appears in many books and courses.",
    "In short, {t} helps {a} solve a problem with fewer steps.",
    "A good way to learn {t} is to try a few examples by hand.",
    "Most people find that {t} becomes easy with practice.",
    "{T} and {t2} are often studied together.",
]
CHAT_THOUGHTS = [
    "The user asks about {t} for {a}. I will keep it simple.",
    "This is about {t}. A short, clear answer is enough.",
    "I should explain {t} in plain words.",
]
MATH_STEPS = [
    "First I write down what is given.",
    "The question asks for one number, so I work step by step.",
    "I apply the standard rule to each term.",
    "Then I simplify the result.",
    "Finally I check the answer against the question.",
    "The signs matter here, so I keep track of them.",
]


def _chat(rng: random.Random) -> Shape:
    """An Infinity-Instruct-like request (some with a system prompt, a follow-up, or in Chinese)."""
    if rng.random() < 0.12:
        thought = pick(rng, ["", "The user writes in Chinese, so I answer in Chinese."])
        return [{"role": "user", "content": text.zh_request(rng)}], None, thought, text.answer(rng, zh=True)
    t, t2 = rng.sample(text.TOPICS, 2)
    a = pick(rng, text.AUDIENCES)
    request = pick(rng, text.REQUESTS).format(
        topic=t, topic2=t2, audience=a, genre=pick(rng, text.GENRES), style=pick(rng, text.STYLES),
        k=between(rng, 2, 9), n=10 * between(rng, 5, 59),
    )  # fmt: skip
    answer = " ".join(
        s.format(t=t, T=t[0].upper() + t[1:], t2=t2, a=a)
        for s in rng.sample(TOPIC_SENTENCES, between(rng, 2, 4))
    )
    messages = [{"role": "user", "content": request}]
    if rng.random() < 0.15:
        follow_up = {"role": "user", "content": text.follow_up(rng)}
        messages += [{"role": "assistant", "content": answer}, follow_up]
        answer = text.answer(rng)
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": text.system_prompt(rng)})
    thought = "" if rng.random() < 0.25 else pick(rng, CHAT_THOUGHTS).format(t=t, a=a)
    return messages, None, thought, answer


def _word_problem(rng: random.Random) -> Shape:
    """A MetaMathQA-like word problem (the fixture's wording), worked through in the think block."""
    name, other = rng.sample(text.NAMES, 2)
    item = pick(rng, text.ITEMS)
    a, b, c = between(rng, 10, 500), between(rng, 2, 90), between(rng, 1, 9)
    question = (
        f"{name} has {a} {item}. {name} buys {b} more, then gives {c} {item} to {other}. "
        f"How many {item} are left?"
    )
    question = text.rephrase(rng, question, pick(rng, text.MATH_TYPES))
    thought = (
        f"{name} starts with {a} {item}.\nBuying {b} more gives {a} + {b} = {a + b}.\n"
        f"Giving {c} to {other} leaves {a + b} - {c} = {a + b - c}.\nSo {a + b - c} {item} are left."
    )
    answer = f"{name} has {a + b - c} {item} left. The answer is: {a + b - c}"
    return [{"role": "user", "content": question}], None, thought, answer


def _math_question(rng: random.Random) -> Shape:
    """A WebInstructSub-like question with a few generic reasoning steps."""
    thought = "\n".join(rng.sample(MATH_STEPS, between(rng, 2, 4)))
    answer = "Working through the steps above gives the result. " + text.answer(rng)
    return [{"role": "user", "content": text.math_question(rng)}], None, thought, answer


def _code(rng: random.Random) -> Shape:
    """A CodeFeedback-like request answered with a code block."""
    lang = pick(rng, text.CODE_LANGS)
    thought = f"The task asks for a {lang} function. I will keep it short and handle the edge cases."
    request = text.code_request(rng, lang)
    return [{"role": "user", "content": request}], None, thought, text.code_answer(rng, lang)


def _agent(rng: random.Random) -> Shape:
    """An AgentInstruct-like OS task: in-context turns, then one `Think: / Act:` step."""
    messages = [
        {"role": "user", "content": text.AGENT_INSTRUCTIONS},
        {"role": "assistant", "content": "OK."},
        {"role": "user", "content": text.os_task(rng)},
    ]
    for _ in range(between(rng, 0, 2)):
        messages += [
            {"role": "assistant", "content": text.agent_act(rng)},
            {"role": "user", "content": text.os_output(rng)},
        ]
    return messages, None, "I need to look at the files before I answer.", text.agent_act(rng)


def _tool_call(rng: random.Random) -> Shape:
    """A Hermes-like request with 1-3 tools listed: a tool call, or a reply to the tool's result."""
    picked = rng.sample(text.TOOLS, between(rng, 1, 3))
    tools = [tool for _, tool in picked]
    tool = pick(rng, tools)
    request, call = text.tool_request(rng, tool, arg=_value)
    system = rng.random()
    messages = [{"role": "user", "content": request}]
    if system < HERMES_SYSTEM_SHARE:
        messages.insert(0, {"role": "system", "content": text.hermes_system(tools)})
    elif system < (1 + HERMES_SYSTEM_SHARE) / 2:
        messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
    name = call["name"]
    tool_call = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    if rng.random() < 0.25:
        result = text.tool_response(rng, call)
        value = json.loads(result.split("\n")[1])["content"]["value"]
        messages += [{"role": "assistant", "content": tool_call}, {"role": "tool", "content": result}]
        return messages, tools, f"The {name} call succeeded.", f"The {name} call returned the value {value}."
    return messages, tools, f"{name} does this. I call it with the values given.", tool_call


def _value(rng: random.Random, name: str, kind: str) -> ArgValue:
    """Short argument values (a request worded like the fixture's, with values the tiny model can copy)."""
    if kind in ("integer", "number"):
        return between(rng, 1, 99)
    if "currency" in name:
        return pick(rng, text.CURRENCIES)
    if name in ("city", "origin", "destination"):
        return pick(rng, text.CITIES)
    return pick(rng, text.TOPICS)


KINDS: list[tuple[float, Callable[[random.Random], Shape]]] = [
    (0.27, _chat),
    (0.15, _word_problem),
    (0.08, _math_question),
    (0.10, _code),
    (0.10, _agent),
    (0.30, _tool_call),
]


def examples(n: int, seed: int = 0) -> list[Example]:
    """`n` seeded conversations of every kind, thinking on for about 70% of them."""
    rng = random.Random(seed)
    weights = [w for w, _ in KINDS]
    makers = [make for _, make in KINDS]
    out = []
    for _ in range(n):
        make = rng.choices(makers, weights)[0]
        messages, tools, reasoning, answer = make(rng)
        out.append(Example(messages, tools, rng.random() < THINKING_SHARE, reasoning, answer))
    return out


def render(example: Example, tokenizer) -> tuple[str, str]:
    """The prompt as the chat template writes it for a request, and the completion with `<|im_end|>`."""
    prompt = tokenizer.apply_chat_template(
        example.messages,
        tools=example.tools,
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=example.thinking,
    )
    return prompt, example.completion + "<|im_end|>"


def tokenizer_texts(items: list[Example]) -> list[str]:
    """Plain texts for training the BPE: every message, tool schema and completion."""
    out = []
    for ex in items:
        out += [m["content"] for m in ex.messages] + [ex.reasoning, ex.answer]
        out += [json.dumps(t) for t in ex.tools or []]
    return out
