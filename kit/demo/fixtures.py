"""Synthetic datasets in the six seed sources' real schemas, for tests, the demo and benchmarks.

Rows are built from small word lists and templates, seeded, so the same call writes the same
bytes. Every few rows carry planted work for the plan: exact duplicates (a copy of an earlier
row's prompt under a new id, with case and spacing changed where the prompt is one text),
very long prompts (for the token filter) and, in Infinity-Instruct, Chinese rows
(`langdetect: zh`). `is_duplicate`, `is_long` and `is_chinese` say which row indices those are.

    from kit.demo.fixtures import write_fixtures
    files = write_fixtures(Path("/tmp/fx"), rows_per_source=24)   # {"metamathqa": Path(...), ...}
    ensure_demo_fixtures(Path(".cache/demo/data"))                 # the demo's: enough for its counts
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from kit.demo import fixture_text as text
from kit.demo.fixture_rows import (
    AgentRow,
    AgentTurn,
    CodeFeedbackRow,
    FixtureRow,
    HermesRow,
    InfinityLabel,
    InfinityRow,
    MetaMathRow,
    Turn,
    WebInstructRow,
)
from kit.demo.fixture_text import between, pick
from kit.params import SourceParams
from kit.params.paths import FIXTURE_SOURCES

DUP_EVERY = 12
"""Row i with i % 12 == 11 repeats the prompt of row i - 5 (i - 6 when that one is long)."""
LONG_EVERY = 50
"""Row i with i % 50 == 19 holds a very long prompt (a document of ~1,500 words)."""
ZH_EVERY = 6
"""Infinity-Instruct row i with i % 6 == 4 is Chinese (`langdetect: zh`)."""

DEMO_ROWS_PER_SOURCE = 40
"""Rows per source of the demo's fixture files: params/demo.yaml asks 20 of a source, and what
the plan removes of 40 rows (at most 6 Chinese, 3 planted duplicates, 1 very long) leaves 30.
With 24, Infinity-Instruct's English rows were 17 (4 Chinese, 2 duplicates, 1 too long), and every
demo run warned that the source gave 17 of 20."""
DEMO_MARKER = ".kit-demo-data.json"
"""Written last in the demo's fixture folder: the rows per source and seed its files were written with."""

SOURCES = FIXTURE_SOURCES
"""The six seed sources, one fixture file each (`<source>.jsonl`)."""


def is_duplicate(i: int) -> bool:
    """Whether row `i` of a fixture file is a planted exact duplicate of an earlier row."""
    return i % DUP_EVERY == DUP_EVERY - 1


def is_long(i: int) -> bool:
    """Whether row `i` of a fixture file holds a very long prompt (planted duplicates never do)."""
    return i % LONG_EVERY == 19 and not is_duplicate(i)


def is_chinese(i: int) -> bool:
    """Whether Infinity-Instruct row `i` was generated in Chinese (its duplicates copy the language)."""
    return i % ZH_EVERY == 4


def duplicate_of(i: int) -> int:
    """The earlier row that planted duplicate `i` copies."""
    j = i - 5
    return j - 1 if is_long(j) else j


def write_fixtures(out_dir: Path, rows_per_source: int = 24, seed: int = 0) -> dict[str, Path]:
    """Write one JSONL file per source (`<source>.jsonl`) in its real schema; return the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for k, name in enumerate(SOURCES):
        rng = random.Random(seed * 1000 + k)
        rows = _rows(_GENERATORS[name], rng, rows_per_source)
        path = out_dir / f"{name}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        paths[name] = path
    return paths


def ensure_demo_fixtures(out_dir: Path, rows_per_source: int = DEMO_ROWS_PER_SOURCE) -> dict[str, Path]:
    """The demo's fixture files in `out_dir`: written when absent, or when an older kit wrote them with
    other settings (its marker differs); other files in the folder are left alone."""
    out_dir = Path(out_dir)
    settings = {"rows_per_source": rows_per_source, "seed": 0}
    marker = out_dir / DEMO_MARKER
    paths = {name: out_dir / f"{name}.jsonl" for name in SOURCES}
    try:
        current = json.loads(marker.read_text()) == settings and all(p.is_file() for p in paths.values())
    except (OSError, ValueError):
        current = False
    if not current:
        paths = write_fixtures(out_dir, rows_per_source=rows_per_source)
        marker.write_text(json.dumps(settings) + "\n")
    return paths


Make = Callable[[random.Random, int], tuple[FixtureRow, str]]
"""A source's row generator: row i, and its prompt (the key duplicates are judged by)."""


def _rows(make: Make, rng: random.Random, n: int) -> list[FixtureRow]:
    """Generate `n` rows with unique prompts, then plant the duplicates."""
    rows: list[FixtureRow] = []
    seen: set[str] = set()
    for i in range(n):
        if is_duplicate(i):
            rows.append(_copy(rows[duplicate_of(i)], make, i))
            continue
        for _attempt in range(100):
            row, key = make(rng, i)
            if key not in seen:
                break
        seen.add(key)
        rows.append(row)
    return rows


def _copy(row: FixtureRow, make: Make, i: int) -> FixtureRow:
    """A copy of `row` under row i's id; one-text prompts get their case and spacing changed."""
    new = row.copy()
    if "id" in new:
        new["id"] = _ID_FORMATS[make](i)
    if "question" in new:
        new["question"] = _recased(new["question"])
    if "query" in new:
        new["query"] = _recased(new["query"])
    return new


def _recased(prompt: str) -> str:
    """The same prompt, its first word in capitals and its spaces doubled (still an exact duplicate
    once the plan normalises case and spacing)."""
    words = prompt.split(" ")
    return "  ".join([words[0].upper(), *words[1:]]) + " "


# --- one generator per source -------------------------------------------------------------------


def _infinity(rng: random.Random, i: int) -> tuple[InfinityRow, str]:
    zh = is_chinese(i)
    question = text.zh_request(rng) if zh else text.long_document(rng) if is_long(i) else text.request(rng)
    turns: list[Turn] = [{"from": "human", "value": question}, {"from": "gpt", "value": text.answer(rng, zh)}]
    if i % 5 == 2:
        turns.insert(0, {"from": "system", "value": text.system_prompt(rng)})
    if i % 7 == 3:
        follow = text.zh_request(rng) if zh else text.follow_up(rng)
        turns += [{"from": "human", "value": follow}, {"from": "gpt", "value": text.answer(rng, zh)}]
    ability = rng.sample(text.ABILITIES, 2)
    label = InfinityLabel(
        ability_en=ability,
        ability_zh=ability,
        cate_ability_en=[pick(rng, text.CATEGORIES)],
        cate_ability_zh=[pick(rng, text.CATEGORIES)],
    )
    row = InfinityRow(
        id=i,
        conversations=turns,
        label=label,
        langdetect="zh" if zh else "en",
        source=pick(rng, text.INFINITY_ORIGINS),
    )
    return row, question


def _webinstruct(rng: random.Random, i: int) -> tuple[WebInstructRow, str]:
    question = text.long_document(rng) if is_long(i) else text.math_question(rng)
    row = WebInstructRow(question=question, answer=text.answer(rng), source=pick(rng, text.WEB_ORIGINS))
    return row, question


def _codefeedback(rng: random.Random, i: int) -> tuple[CodeFeedbackRow, str]:
    lang = pick(rng, text.CODE_LANGS)
    query = text.long_document(rng) if is_long(i) else text.code_request(rng, lang)
    row = CodeFeedbackRow(
        query=query,
        answer=text.code_answer(rng, lang),
        lang=lang,
        resource=pick(rng, text.CODE_ORIGINS),
    )
    return row, query


def _metamath(rng: random.Random, i: int) -> tuple[MetaMathRow, str]:
    original, answer = text.word_problem(rng)
    kind = pick(rng, text.MATH_TYPES)
    query = text.long_document(rng) if is_long(i) else text.rephrase(rng, original, kind)
    row = MetaMathRow(
        query=query,
        response=f"Let us work it out step by step. The answer is: {answer}",
        type=kind,
        original_question=original,
    )
    return row, query


def _hermes(rng: random.Random, i: int) -> tuple[HermesRow, str]:
    picked = tuple(sorted(rng.sample(range(len(text.TOOLS)), between(rng, 1, 3))))
    tools_text, system = _tool_texts(picked)
    request, call = text.tool_request(rng, text.TOOLS[picked[0]][1])
    if is_long(i):
        request = text.long_document(rng) + "\n\n" + request
    turns: list[Turn] = [
        {"from": "system", "value": system},
        {"from": "human", "value": request},
        {"from": "gpt", "value": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"},
    ]
    if i % 4 == 1:
        turns += [
            {"from": "tool", "value": text.tool_response(rng, call)},
            {"from": "gpt", "value": text.answer(rng)},
        ]
    row = HermesRow(
        id=f"{i:08x}-hermes",
        conversations=turns,
        tools=tools_text,
        category=text.TOOLS[picked[0]][0],
        subcategory=call["name"],
        task=request[:80],
    )
    return row, request


@cache
def _tool_texts(picked: tuple[int, ...]) -> tuple[str, str]:
    """The `tools` JSON and the Hermes system prompt for a set of tools (few sets, many rows)."""
    tools = [text.TOOLS[k][1] for k in picked]
    return json.dumps(tools), text.hermes_system(tools)


def _agent(rng: random.Random, i: int) -> tuple[AgentRow, str]:
    task = text.long_document(rng) if is_long(i) else text.os_task(rng)
    turns: list[AgentTurn] = [
        {"from": "human", "loss": None, "value": text.AGENT_INSTRUCTIONS},
        {"from": "gpt", "loss": False, "value": "OK."},
        {"from": "human", "loss": None, "value": task},
        {"from": "gpt", "loss": True, "value": text.agent_act(rng)},
    ]
    for _ in range(between(rng, 0, 2)):
        turns += [
            {"from": "human", "loss": None, "value": text.os_output(rng)},
            {"from": "gpt", "loss": True, "value": text.agent_act(rng)},
        ]
    return AgentRow(id=f"os_{i}", conversations=turns), task


_GENERATORS: dict[str, Make] = {
    "infinity_instruct": _infinity,
    "webinstructsub": _webinstruct,
    "codefeedback": _codefeedback,
    "metamathqa": _metamath,
    "hermes_fc": _hermes,
    "agentinstruct": _agent,
}
_ID_FORMATS: dict[Callable, Callable[[int], Any]] = {
    _infinity: lambda i: i,
    _hermes: lambda i: f"{i:08x}-hermes",
    _agent: lambda i: f"os_{i}",
}


def plan_sources_from_files(
    files: dict[str, Path], counts: dict[str, int] | None = None, **overrides: Any
) -> list[SourceParams]:
    """Sources for the fixture files write_fixtures returns (named after their adapter): tests, benchmarks."""
    counts = counts or {}
    return [
        SourceParams(
            name=name,
            adapter=name,
            dataset="json",
            data_files=[path],
            count=counts.get(name),
            **overrides.get(name, {}),
        )
        for name, path in files.items()
    ]
