"""Word lists and templates that make synthetic prompts read like real ones (see fixtures.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

TOPICS = [
    "photosynthesis",
    "the French Revolution",
    "binary search trees",
    "compound interest",
    "plate tectonics",
    "the water cycle",
    "public key cryptography",
    "supply and demand",
    "the immune system",
    "black holes",
    "machine translation",
    "the Roman aqueducts",
    "climate feedback loops",
    "vaccines",
    "jazz harmony",
    "container shipping",
    "sourdough fermentation",
    "the printing press",
    "quantum entanglement",
    "urban beekeeping",
    "solar panels",
    "the stock market",
    "volcanic eruptions",
    "coral reefs",
    "the Silk Road",
    "electric cars",
    "sleep cycles",
    "garbage collection",
    "the Olympic Games",
    "renaissance painting",
    "tidal energy",
    "the human heart",
    "recycling plastics",
    "neural networks",
]
AUDIENCES = [
    "a ten-year-old",
    "a first-year student",
    "a busy manager",
    "a retired engineer",
    "a new employee",
    "a curious teenager",
    "a hospital nurse",
    "a small business owner",
    "a history teacher",
    "a novelist",
]
GENRES = [
    "short story",
    "poem",
    "blog post",
    "product description",
    "speech",
    "letter",
    "news report",
    "dialogue",
    "limerick",
    "haiku sequence",
]
STYLES = [
    "in a friendly tone",
    "formally",
    "with a touch of humour",
    "as a numbered list",
    "in plain words",
    "step by step",
    "with one concrete analogy",
    "as if for a podcast",
    "concisely",
    "with examples",
]
REQUESTS = [
    "Explain {topic} to {audience} {style}, in about {n} words.",
    "Write a {genre} about {topic} for {audience}, in under {n} words.",
    "What are the {k} most common misconceptions about {topic} among {audience}? Answer {style}.",
    "Compare {topic} and {topic2} for {audience}: how are they alike and how do they differ? Answer {style}.",
    "Give me a {k}-day study plan to understand {topic}, aimed at {audience}, with {n} minutes a week.",
    "Summarise the history of {topic} and its link to {topic2} in {k} paragraphs, {style}.",
    "I am {audience}. Why should I care about {topic}? Keep it under {n} words and answer {style}.",
    "Draft {k} quiz questions with answers about {topic} for {audience}, each under {n} words.",
    'Rewrite this sentence {style} in under {n} words: "{topic2} changed the way we think about {topic}."',
    "List {k} practical tips related to {topic} for {audience}, and explain each one {style}.",
]
FOLLOW_UPS = [
    "Can you make it shorter?",
    "Now give me {k} more examples.",
    "Rewrite that {style}.",
    "What would {audience} find hardest to follow here?",
    "Translate the first paragraph into French.",
    "Add a short conclusion with {k} key points.",
]
SYSTEMS = [
    "You are a helpful assistant.",
    "You are a patient tutor who explains ideas clearly.",
    "You are an expert writer. Answer {style}.",
    "You are a concise assistant; avoid filler.",
]
ABILITIES = [
    "logical reasoning",
    "knowledge q&a",
    "creative writing",
    "mathematical calculation",
    "programming ability",
    "information extraction",
    "text summarization",
    "translation",
]
CATEGORIES = [
    "information processing and integration",
    "problem solving and support",
    "creativity and design",
    "stem knowledge",
    "linguistic knowledge",
    "programming and software development",
]
INFINITY_ORIGINS = [
    "flan",
    "Subjective",
    "OpenHermes-2.5",
    "code_exercises",
    "MathInstruct",
    "EvolInstruct_mm",
]

ZH_TOPICS = [
    "光合作用",
    "法国大革命",
    "复利",
    "板块构造",
    "水循环",
    "公钥密码学",
    "供求关系",
    "免疫系统",
    "黑洞",
    "机器翻译",
    "丝绸之路",
    "电动汽车",
    "睡眠周期",
    "神经网络",
    "珊瑚礁",
    "太阳能电池板",
]
ZH_REQUESTS = [
    "请向{audience}解释{topic}，并举{k}个例子，不超过{n}字。",
    "写一篇关于{topic}和{topic2}的短文，不超过{n}字。",
    "{topic}和{topic2}有什么区别？请向{audience}分{k}点说明。",
    "为{audience}制定一个{k}天学习{topic}的计划，每天{n}分钟。",
    "总结{topic}的发展历史，用{k}段话，每段不超过{n}字。",
]
ZH_AUDIENCES = ["小学生", "大学新生", "企业经理", "退休工程师", "历史老师"]

NAMES = ["Maria", "James", "Aisha", "Chen", "Olivia", "Raj", "Lena", "Tom", "Sofia", "Kwame", "Yuki", "Diego"]
ITEMS = ["apples", "stickers", "marbles", "books", "cookies", "pencils", "stamps", "shells", "cards", "coins"]
WEB_ORIGINS = ["mathstackexchange", "stackexchange", "socratic"]
MATH_TYPES = ["GSM_AnsAug", "GSM_Rephrased", "GSM_SV", "GSM_FOBAR", "MATH_AnsAug", "MATH_Rephrased"]
CODE_LANGS = ["python", "javascript", "java", "c++", "rust", "sql", "go", "typescript"]
CODE_ORIGINS = ["evolinstruct", "wizardcoder", "sharegpt", "codefuse", "magicoder_oss_instruct"]
CODE_TASKS = [
    "returns the {k} largest values of a list of integers",
    "checks whether a string is a palindrome",
    "merges two sorted arrays without using the built-in sort",
    "parses a CSV line with quoted fields",
    "counts word frequencies in a text and prints the top {k}",
    "validates an email address",
    "computes the nth Fibonacci number in O(log n) time",
    "flattens a nested list of depth up to {k}",
    "removes duplicate rows from a table keeping the first",
    "finds the longest common prefix of words",
    "implements an LRU cache holding at most {n} entries",
    "converts a Roman numeral to an integer",
]
CODE_LIMITS = [
    "The input can hold up to {n} elements.",
    "Aim for linear time.",
    "Include unit tests.",
    "Handle empty input gracefully.",
    "Add type hints and a docstring.",
    "Explain the complexity.",
]

AGENT_INSTRUCTIONS = (
    "You are an assistant that will act like a person. I will play the role of a linux (ubuntu) operating "
    "system. Your goal is to implement the operations required by me or answer the question proposed by me. "
    "For each of "
    "your turn, you should first think what you should do, and then take exactly one of the three actions: "
    '"bash", "finish" or "answer". If you think you should execute some bash code, put it in a bash block. '
    'Now, my problem is: tell me how many files are in the directory "/etc"?'
)
OS_TASKS = [
    "How many {ext} files are there under {path}/project_{k}, recursively?",
    "Find the largest file in {path}/archive_{k} and print its size.",
    "Tell me how many users with a UID above {k} have {shell} as their login shell.",
    "Count the lines that contain '{word}' in all {ext} files under {path}.",
    "Create a directory {path}/backup_{k} and copy every {ext} file into it.",
    "What is the total size in KB of the {ext} files in {path}?",
]
PATHS = ["/home/user", "/var/log", "/etc", "/usr/share/doc", "/opt/data", "/srv/www", "/tmp/work"]
EXTS = [".txt", ".log", ".conf", ".py", ".csv", ".json", ".md"]

TOOLS: list[tuple[str, dict[str, Any]]] = [
    (
        cat,
        {
            "type": "function",
            "function": {
                "name": name,
                "description": desc,
                "parameters": {
                    "type": "object",
                    "properties": {
                        p: {"type": t, "description": f"The {p.replace('_', ' ')}"} for p, t in params.items()
                    },
                    "required": list(params),
                },
            },
        },
    )
    for cat, name, desc, params in [
        (
            "Weather",
            "get_current_weather",
            "Get the current weather in a city",
            {"city": "string", "unit": "string"},
        ),
        (
            "Finance",
            "convert_currency",
            "Convert an amount between currencies",
            {"amount": "number", "from_currency": "string", "to_currency": "string"},
        ),
        (
            "Travel",
            "search_flights",
            "Search flights between two airports on a date",
            {"origin": "string", "destination": "string", "date": "string"},
        ),
        (
            "Food",
            "search_recipes",
            "Find recipes that use the given ingredients",
            {"ingredients": "string", "max_minutes": "integer"},
        ),
        (
            "Productivity",
            "create_calendar_event",
            "Create an event in the user's calendar",
            {"title": "string", "start_time": "string", "duration_minutes": "integer"},
        ),
        (
            "Health",
            "calculate_bmi",
            "Calculate the body mass index",
            {"weight_kg": "number", "height_m": "number"},
        ),
        ("Shopping", "track_package", "Track a parcel by its tracking number", {"tracking_number": "string"}),
        (
            "Information",
            "search_news",
            "Search recent news articles on a topic",
            {"query": "string", "language": "string"},
        ),
        (
            "Communication",
            "send_email",
            "Send an email",
            {"to": "string", "subject": "string", "body": "string"},
        ),
        (
            "Math",
            "solve_quadratic",
            "Solve a quadratic equation",
            {"a": "number", "b": "number", "c": "number"},
        ),
    ]
]
CITIES = ["Paris", "Nairobi", "Osaka", "Lima", "Toronto", "Oslo", "Cairo", "Melbourne", "Denver", "Hanoi"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "INR", "BRL", "CHF"]


T = TypeVar("T")


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


def hermes_system(tools: list[dict[str, Any]]) -> str:
    return (
        "You are a function calling AI model. You are provided with function signatures within "
        f"<tools></tools> XML tags.<tools>\n{json.dumps(tools)}\n</tools> For each function call return a "
        "json object with function name and arguments within <tool_call></tool_call> XML tags."
    )


def tool_request(
    rng: random.Random, tool: dict[str, Any], arg: Callable[[random.Random, str, str], Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """A request for `tool` naming every argument's value, and the call it asks for. `arg(rng, name,
    type)` draws a value (default: the fixture's)."""
    fn = tool["function"]
    arg = arg or _arg
    args = {p: arg(rng, p, spec["type"]) for p, spec in fn["parameters"]["properties"].items()}
    described = ", ".join(f"{p.replace('_', ' ')} {v}" for p, v in args.items())
    lead = pick(rng, ["Could you", "Please", "I need you to", "Can you help me and"])
    return f"{lead} {fn['description'].lower()} with {described}?", {"name": fn["name"], "arguments": args}


def _arg(rng: random.Random, name: str, kind: str) -> Any:
    if kind == "integer":
        return between(rng, 5, 240)
    if kind == "number":
        return round(rng.uniform(1, 500), 2)
    if "currency" in name:
        return pick(rng, CURRENCIES)
    if name in ("city", "origin", "destination"):
        return pick(rng, CITIES)
    return f"{pick(rng, TOPICS)} {between(rng, 1, 999)}"


def tool_response(rng: random.Random, call: dict[str, Any]) -> str:
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
