"""Synthetic fixtures: real schemas, deterministic bytes, planted duplicates, long and Chinese rows."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from kit.demo.fixtures import SOURCES, duplicate_of, is_chinese, is_duplicate, is_long, write_fixtures

N = 60
COLUMNS = {
    "infinity_instruct": {"id", "conversations", "label", "langdetect", "source"},
    "webinstructsub": {"question", "answer", "source"},
    "codefeedback": {"query", "answer", "lang", "resource"},
    "metamathqa": {"query", "response", "type", "original_question"},
    "hermes_fc": {"id", "conversations", "tools", "category", "subcategory", "task"},
    "agentinstruct": {"id", "conversations"},
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_fixtures(tmp_path_factory.mktemp("fx"), rows_per_source=N)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _prompt_text(row: dict) -> str:
    """The prompt side of a raw row, lowercased with whitespace collapsed (independent of the kit)."""
    if "conversations" in row:
        turns = row["conversations"]
        last = max(i for i, t in enumerate(turns) if t["from"] == "gpt")
        text = "|".join(f"{t['from']}:{t['value']}" for t in turns[:last]) + (row.get("tools") or "")
    else:
        text = row.get("question") or row["query"]
    return " ".join(text.split()).lower()


def test_same_seed_same_bytes_other_seed_other_bytes(files: dict[str, Path], tmp_path: Path) -> None:
    again = write_fixtures(tmp_path / "a", rows_per_source=N)
    other = write_fixtures(tmp_path / "b", rows_per_source=N, seed=1)
    for name in SOURCES:
        assert again[name].read_bytes() == files[name].read_bytes()
        assert other[name].read_bytes() != files[name].read_bytes()


def test_loads_with_datasets_in_the_real_schema(files: dict[str, Path]) -> None:
    assert set(files) == set(SOURCES)
    for name, path in files.items():
        ds = datasets.load_dataset("json", data_files=str(path), split="train")
        assert set(ds.column_names) == COLUMNS[name] and len(ds) == N
    agent = _rows(files["agentinstruct"])[0]["conversations"][1]
    assert set(agent) == {"from", "loss", "value"}
    hermes = _rows(files["hermes_fc"])[0]
    assert isinstance(hermes["tools"], str) and json.loads(hermes["tools"])[0]["type"] == "function"


def test_planted_duplicates_and_nothing_else(files: dict[str, Path]) -> None:
    for name, path in files.items():
        texts = [_prompt_text(r) for r in _rows(path)]
        for i, t in enumerate(texts):
            if is_duplicate(i):
                assert t == texts[duplicate_of(i)], f"{name} row {i}"
        planted = sum(is_duplicate(i) for i in range(N))
        assert len(texts) - len(set(texts)) == planted, name


def test_long_rows_and_chinese_rows(files: dict[str, Path]) -> None:
    for name, path in files.items():
        lengths = [len(_prompt_text(r)) for r in _rows(path)]
        longs = [n for i, n in enumerate(lengths) if is_long(i)]
        factor = 1.5 if name == "hermes_fc" else 5  # Hermes prompts carry a long system prompt and tools
        assert longs and min(longs) > factor * max(n for i, n in enumerate(lengths) if not is_long(i))
    infinity = _rows(files["infinity_instruct"])
    zh = [r for r in infinity if r["langdetect"] == "zh"]
    assert len(zh) == sum(
        is_chinese(i) or (is_duplicate(i) and is_chinese(duplicate_of(i))) for i in range(N)
    )
    for r in zh:
        human = [t["value"] for t in r["conversations"] if t["from"] == "human"]
        assert all(any("\u4e00" <= ch <= "\u9fff" for ch in text) for text in human)
