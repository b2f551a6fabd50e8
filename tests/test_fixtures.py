"""Synthetic fixtures: real schemas, deterministic bytes, planted duplicates, long and Chinese rows;
the demo's fixture folder gives each demo source its count."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import yaml

from kit.demo.fixtures import (
    DEMO_ROWS_PER_SOURCE,
    SOURCES,
    duplicate_of,
    ensure_demo_fixtures,
    is_chinese,
    is_duplicate,
    is_long,
    write_fixtures,
)

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


REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("params_file", ["demo.yaml", "demo-vllm.yaml"])
def test_the_demo_fixtures_give_every_demo_source_its_count(params_file, demo_model, tmp_path) -> None:
    """The demo's sources, planned as the demo plans them (its filters, its prompt limit, the demo
    model's tokenizer) from the fixture files the demo writes: every count met, no warning."""
    from kit.params import DataParams
    from kit.prompts.plan import build_plan

    data = yaml.safe_load((REPO / "params" / params_file).read_text())["data"]
    files = ensure_demo_fixtures(tmp_path / "data")
    for source in data["sources"]:
        source["data_files"] = [str(files[source["adapter"]])]
    data["demo_fixtures"] = str(tmp_path / "data")
    out = (tmp_path / "p.parquet", tmp_path / "plan.json")
    plan = build_plan(DataParams.model_validate(data), demo_model, *out, progress=False)
    assert plan.warnings == []
    counts = {s["name"]: s["count"] for s in data["sources"]}
    assert plan.table.set_index("source")["kept"].to_dict() == counts
    assert plan.table["dropped_language"].sum() > 0 and plan.table["dropped_duplicate"].sum() > 0


def test_demo_fixtures_are_rewritten_only_when_written_with_other_settings(tmp_path) -> None:
    old = write_fixtures(tmp_path, rows_per_source=24)  # as a kit before the marker wrote them
    (tmp_path / "mine.jsonl").write_text('{"prompt": "kept"}\n')
    files = ensure_demo_fixtures(tmp_path)
    assert files == old and len(_rows(files["metamathqa"])) == DEMO_ROWS_PER_SOURCE
    again = write_fixtures(tmp_path / "fresh", rows_per_source=DEMO_ROWS_PER_SOURCE)
    assert all(files[name].read_bytes() == again[name].read_bytes() for name in SOURCES)
    stamps = {name: files[name].stat().st_mtime_ns for name in SOURCES}
    assert ensure_demo_fixtures(tmp_path) == files
    assert {name: files[name].stat().st_mtime_ns for name in SOURCES} == stamps
    assert (tmp_path / "mine.jsonl").read_text() == '{"prompt": "kept"}\n'
