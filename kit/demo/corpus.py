"""A generated chat corpus for the demo model: short questions and plain-English answers.

The corpus only has to make a tiny model emit word-like text and learn the ChatML turn
structure (so it ends its turn with `<|im_end|>`); it is generated from templates with a
fixed seed, so no text file needs to ship or be downloaded.
"""

from __future__ import annotations

import random

TOPICS = [
    "prime numbers",
    "binary search",
    "photosynthesis",
    "the water cycle",
    "linear equations",
    "sorting a list",
    "recursion",
    "the French revolution",
    "gravity",
    "probability",
    "hash tables",
    "matrix multiplication",
    "climate",
    "electric circuits",
    "fractions",
    "the speed of light",
    "a linked list",
    "interest rates",
    "volcanoes",
    "the human heart",
]
OPENERS = [
    "Explain {t} in simple words.",
    "What is {t}?",
    "Can you describe {t}?",
    "Write a short note about {t}.",
    "How does {t} work?",
    "Give me an example of {t}.",
    "Why is {t} important?",
    "Summarize {t} for a student.",
]
SENTENCES = [
    "{T} is a simple idea once you see the main step.",
    "First, we look at what {t} means and why it matters.",
    "The key point is that each part depends on the one before it.",
    "For example, you can start with a small case and check the result.",
    "Then we repeat the same step until the answer is clear.",
    "This is why {t} appears in many books and courses.",
    "In short, {t} helps us solve a problem with fewer steps.",
    "A good way to learn {t} is to try a few examples by hand.",
    "Most people find that {t} becomes easy with practice.",
    "The answer is {n}, because the two parts add up.",
    "We can write the result as {n} and check it again.",
    "Let me know if you want a longer explanation.",
]
MATH = [
    ("What is {a} plus {b}?", "The sum of {a} and {b} is {s}. We add the two numbers and get {s}."),
    ("What is {a} times {b}?", "The product of {a} and {b} is {p}. We multiply them and get {p}."),
    (
        "If you have {a} apples and buy {b} more, how many do you have?",
        "You start with {a} apples and add {b}, so you have {s} apples.",
    ),
]


def _answer(rng: random.Random, topic: str) -> str:
    k = rng.randint(2, 5)
    picks = rng.sample(SENTENCES, k)
    return " ".join(s.format(t=topic, T=topic.capitalize(), n=rng.randint(2, 99)) for s in picks)


def _turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def chat_corpus(n: int = 3000, seed: int = 0) -> list[str]:
    """`n` ChatML conversations (system optional, one user turn, one assistant turn)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = _turn("system", "You are a helpful assistant.") if rng.random() < 0.3 else ""
        if rng.random() < 0.25:
            a, b = rng.randint(2, 60), rng.randint(2, 60)
            q, ans = rng.choice(MATH)
            text += _turn("user", q.format(a=a, b=b)) + _turn(
                "assistant", ans.format(a=a, b=b, s=a + b, p=a * b)
            )
        else:
            topic = rng.choice(TOPICS)
            text += _turn("user", rng.choice(OPENERS).format(t=topic)) + _turn(
                "assistant", _answer(rng, topic)
            )
        out.append(text)
    return out
