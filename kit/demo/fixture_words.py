"""The word lists and templates that make synthetic prompts read like real ones: topics, audiences,
requests, the sources' own labels (origins, categories, math types), code tasks, the OS agent's
tasks, the Hermes tools. Data only: kit/demo/fixture_text.py draws text from them (and re-exports
every name here), kit/demo/fixtures.py writes the fixture rows.
"""

from __future__ import annotations

from typing import TypedDict


class ParameterSchema(TypedDict):
    type: str
    """string, number or integer."""
    description: str


class ParametersSchema(TypedDict):
    type: str
    properties: dict[str, ParameterSchema]
    required: list[str]


class FunctionSchema(TypedDict):
    name: str
    description: str
    parameters: ParametersSchema


class ToolSchema(TypedDict):
    """A tool as a request offers it (OpenAI's function tool) and Hermes rows list it: the fixture's
    tools take only flat, required arguments."""

    type: str
    function: FunctionSchema


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

TOOLS: list[tuple[str, ToolSchema]] = [
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
