"""The prompt plan on real local files: sampling, filters, dedup, stable ids, errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from kit.demo.fixtures import (
    SOURCES,
    is_chinese,
    is_duplicate,
    is_long,
    plan_sources_from_files,
    write_fixtures,
)
from kit.demo.tiny_tokenizer import write_tokenizer
from kit.errors import DataError
from kit.params import DataParams, SourceParams
from kit.prompts import plan as plan_module
from kit.prompts import sampling
from kit.prompts.dedup import Deduplicator, dedup_key
from kit.prompts.plan import PROMPTS_SCHEMA, PromptSpill, build_plan, read_prompts
from kit.prompts.sampling import source_targets

N = 48
PLANTED_DUPS = sum(is_duplicate(i) for i in range(N))
PLANTED_LONG = sum(is_long(i) for i in range(N))
LIMIT = 1536  # tokens: above every ordinary fixture prompt, below every planted long one


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_fixtures(tmp_path_factory.mktemp("fx"), rows_per_source=N)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("tok"))


def _plan(tmp: Path, data: DataParams, tokenizer: Path | None = None):
    return build_plan(data, tokenizer, tmp / "prompts.parquet", tmp / "plan.json", progress=False)


def _by_source(result) -> dict[str, dict]:
    return {row["source"]: row for row in result.table.to_dict("records")}


def test_same_params_same_bytes(files: dict[str, Path], tokenizer: Path, tmp_path: Path) -> None:
    data = DataParams(seed=3, total=150, max_prompt_tokens=LIMIT, sources=plan_sources_from_files(files))
    a = _plan(tmp_path / "a", data, tokenizer)
    _plan(tmp_path / "b", data, tokenizer)
    assert a.kept == 150
    assert (tmp_path / "a/prompts.parquet").read_bytes() == (tmp_path / "b/prompts.parquet").read_bytes()
    assert (tmp_path / "a/plan.json").read_bytes() == (tmp_path / "b/plan.json").read_bytes()
    ids = read_prompts(a.prompts).column("id").to_pylist()
    assert len(set(ids)) == len(ids) == 150 and ids == sorted(ids)
    other = _plan(tmp_path / "c", data.model_copy(update={"seed": 4}), tokenizer)
    assert read_prompts(other.prompts).column("id").to_pylist() != ids


def test_ids_hash_source_row_and_request_not_seed(files: dict[str, Path], tmp_path: Path) -> None:
    sources = plan_sources_from_files(files, counts={n: 20 for n in SOURCES})
    one = read_prompts(_plan(tmp_path / "a", DataParams(seed=0, sources=sources)).prompts).to_pylist()
    two = read_prompts(_plan(tmp_path / "b", DataParams(seed=1, sources=sources)).prompts).to_pylist()
    first = {(r["source"], r["source_row_id"]): r["id"] for r in one}
    shared = [
        (r["source"], r["source_row_id"], r["id"]) for r in two if (r["source"], r["source_row_id"]) in first
    ]
    assert shared and all(first[(s, rid)] == pid for s, rid, pid in shared)
    r = one[0]
    parts = [r["source"], r["source_row_id"], *(f"{m['role']}\x1e{m['content']}" for m in r["messages"])]
    payload = "\x1f".join([*parts, r["tools"] or ""])
    assert r["id"] == hashlib.sha256(payload.encode()).hexdigest()[:16]


def test_dedup_counts_planted_duplicates(files: dict[str, Path], tmp_path: Path) -> None:
    result = _plan(tmp_path, DataParams(sources=plan_sources_from_files(files)))
    for name, row in _by_source(result).items():
        assert row["dropped_duplicate"] == PLANTED_DUPS, name
        assert row["kept"] == N - PLANTED_DUPS and row["available"] == N
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["dropped_examples"]["metamathqa"]["duplicate"][0]["detail"].startswith("same text as ")
    off = _plan(tmp_path / "off", DataParams(dedup=False, sources=plan_sources_from_files(files)))
    assert off.kept == N * len(SOURCES) and off.dropped == 0


def test_dedup_across_sources_on_normalised_text(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(json.dumps({"prompt": p}) for p in ["What is 2+2?", "Name a prime.", "Hi"]))
    b.write_text(
        json.dumps({"messages": [{"role": "user", "content": "  what IS   2+2? "}]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "Something new"}]})
    )
    data = DataParams(
        sources=[
            SourceParams(name="a", adapter="prompt_column", dataset="json", data_files=[a]),
            SourceParams(name="b", adapter="openai_messages", dataset="json", data_files=[b]),
        ]
    )
    result = _plan(tmp_path, data)
    assert _by_source(result)["b"]["dropped_duplicate"] == 1 and result.kept == 4
    dropped = result.dropped_rows.to_dict("records")
    assert dropped == [
        {"source": "b", "source_row_id": "0", "reason": "duplicate", "detail": dropped[0]["detail"]}
    ]
    kept_a = {
        r["source_row_id"]: r["id"] for r in read_prompts(result.prompts).to_pylist() if r["source"] == "a"
    }
    assert dropped[0]["detail"] == f"same text as {kept_a['0']}"


def test_counts_and_weights(files: dict[str, Path], tmp_path: Path) -> None:
    sources = [
        SourceParams(
            name="m", adapter="metamathqa", dataset="json", data_files=[files["metamathqa"]], count=10
        ),
        SourceParams(
            name="w", adapter="webinstructsub", dataset="json", data_files=[files["webinstructsub"]], weight=2
        ),
        SourceParams(
            name="c", adapter="codefeedback", dataset="json", data_files=[files["codefeedback"]], weight=1
        ),
    ]
    data = DataParams(total=41, sources=sources)
    assert source_targets(data) == {"m": 10, "w": 21, "c": 10}
    result = _plan(tmp_path, data)
    assert {k: v["kept"] for k, v in _by_source(result).items()} == {"m": 10, "w": 21, "c": 10}
    with pytest.raises(DataError, match="data.total is not set"):
        source_targets(DataParams(sources=sources))
    with pytest.raises(DataError, match="less than the sum"):
        source_targets(DataParams(total=5, sources=sources))


def test_dropped_rows_are_replaced_until_the_source_runs_out(
    files: dict[str, Path], tokenizer: Path, tmp_path: Path
) -> None:
    usable = N - PLANTED_DUPS - PLANTED_LONG
    for count, expect in [(usable, usable), (N, usable)]:
        src = SourceParams(
            name="m", adapter="metamathqa", dataset="json", data_files=[files["metamathqa"]], count=count
        )
        row = _by_source(
            _plan(tmp_path / str(count), DataParams(max_prompt_tokens=LIMIT, sources=[src]), tokenizer)
        )["m"]
        assert row["kept"] == expect and row["requested"] == count
        drops = row["dropped_duplicate"] + row["dropped_too_long"]
        if count == usable:  # rows dropped inside the shuffle were replaced by later ones
            assert row["examined"] == usable + drops and drops > 0
        else:  # more asked than there is: every row examined, every drop recorded
            assert row["examined"] == N and drops == N - usable


def test_language_filter(files: dict[str, Path], tmp_path: Path) -> None:
    raw = [json.loads(x) for x in files["infinity_instruct"].read_text(encoding="utf-8").splitlines()]
    zh_rows = sum(r["langdetect"] == "zh" for r in raw)
    assert zh_rows >= sum(is_chinese(i) for i in range(N)) > 0
    for lang, dropped in [("en", zh_rows), ("zh", N - zh_rows)]:
        src = SourceParams(
            name="inf",
            adapter="infinity_instruct",
            dataset="json",
            data_files=[files["infinity_instruct"]],
            language=lang,
        )
        result = _plan(tmp_path / lang, DataParams(dedup=False, sources=[src]))
        assert _by_source(result)["inf"]["dropped_language"] == dropped
        assert {
            json.loads(m)["lang"] for m in read_prompts(result.prompts).column("metadata").to_pylist()
        } == {lang}
    src = SourceParams(
        name="m", adapter="metamathqa", dataset="json", data_files=[files["metamathqa"]], language="en"
    )
    with pytest.raises(DataError, match="source 'm': language 'en'.*no language column"):
        _plan(tmp_path / "m", DataParams(sources=[src]))


def test_a_filter_that_empties_a_source_fails_naming_source_filter_and_values(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """CodeFeedback's `lang` holds programming languages: `language: en` kept none of them."""
    src = SourceParams(
        name="code",
        adapter="codefeedback",
        dataset="json",
        data_files=[files["codefeedback"]],
        count=4,
        language="en",
    )
    with pytest.raises(DataError) as err:
        _plan(tmp_path, DataParams(sources=[src]))
    text = str(err.value)
    assert text.startswith("source 'code' gave 0 of 4 planned prompts")
    assert f"`language: en` dropped {N} rows: column 'lang' holds " in text and "'python' (" in text
    assert "To fix: lower the count, set `language` to a value seen, or remove it" in text
    assert not (tmp_path / "prompts.parquet").exists()


def test_a_source_left_short_is_a_note_in_the_result_the_log_and_plan_json(
    files: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    zh = sum(json.loads(x)["langdetect"] == "zh" for x in files["infinity_instruct"].read_text().splitlines())
    src = SourceParams(
        name="inf",
        adapter="infinity_instruct",
        dataset="json",
        data_files=[files["infinity_instruct"]],
        count=zh + 5,
        language="zh",
    )
    with caplog.at_level("INFO", logger="kit.prompts.plan"):  # stage 3 warns of it (plan.json)
        result = _plan(tmp_path, DataParams(dedup=False, sources=[src]))
    assert result.kept == zh
    (warning,) = result.warnings
    assert warning.startswith(f"source 'inf' gave {zh} of {zh + 5} planned prompts")
    assert f"column 'langdetect' holds 'en' ({N - zh}), 'zh' ({zh})" in warning
    assert json.loads(result.plan.read_text())["warnings"] == [warning] and warning in caplog.text
    full = _plan(tmp_path / "full", DataParams(dedup=False, sources=[src.model_copy(update={"count": zh})]))
    assert full.warnings == [] and json.loads(full.plan.read_text())["warnings"] == []


@pytest.mark.parametrize(
    "name, text, says",
    [
        ("empty.jsonl", "", "empty.jsonl is empty. To fix: fill it, or remove it from data_files"),
        ("blank.json", "\n \n", "blank.json is empty"),
        ("bad.jsonl", '{"query": "a"}\n\n{"query": broken\n', "bad.jsonl line 3 is not valid JSON"),
        ("cut.json", '[{"query": "a"}, {"que', "cut.json is not valid JSON: Unterminated string"),
        ("list.jsonl", '{"query": "a"}\n["query", "b"]\n', "list.jsonl line 2 is a JSON list, not an object"),
    ],
)
def test_an_empty_or_malformed_json_file_is_named(tmp_path: Path, name: str, text: str, says: str) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"query": "fine"}) + "\n")
    (tmp_path / name).write_text(text)
    src = SourceParams(name="m", adapter="metamathqa", dataset="json", data_files=[good, tmp_path / name])
    with pytest.raises(DataError) as err:
        _plan(tmp_path, DataParams(sources=[src]))
    message = str(err.value)
    assert message.startswith("source 'm': cannot load dataset 'json': data file ") and says in message
    assert str(tmp_path / name) in message and "StopIteration" not in message


def test_token_filter_counts_with_the_chat_template(
    files: dict[str, Path], tokenizer: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    data = DataParams(max_prompt_tokens=LIMIT, dedup=False, sources=plan_sources_from_files(files))
    result = _plan(tmp_path, data, tokenizer)
    for name, row in _by_source(result).items():
        assert row["dropped_too_long"] == PLANTED_LONG, name
    rows = read_prompts(result.prompts).to_pylist()
    tok = AutoTokenizer.from_pretrained(tokenizer)
    for r in rows:  # every kept prompt: the piecewise, cached count equals the whole-text one
        tools = json.loads(r["tools"]) if r["tools"] else None
        ids = tok.apply_chat_template(r["messages"], tools=tools, add_generation_prompt=True)["input_ids"]
        assert r["prompt_tokens"] == len(ids)
    assert all(r["prompt_tokens"] <= LIMIT for r in rows)
    with pytest.raises(DataError, match="max_prompt_tokens needs the model's tokenizer"):
        _plan(tmp_path / "x", data, None)


def test_schema_mismatch_through_the_plan(files: dict[str, Path], tmp_path: Path) -> None:
    src = SourceParams(name="web", adapter="webinstructsub", dataset="json", data_files=[files["metamathqa"]])
    with pytest.raises(DataError) as err:
        _plan(tmp_path, DataParams(sources=[src]))
    text = str(err.value)
    assert "source 'web'" in text and "expects columns [question]" in text
    assert "query" in text and "original_question" in text


def test_malformed_rows_dropped_then_fatal_when_most_are(tmp_path: Path) -> None:
    good = {"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]}
    bad = {"conversations": [{"from": "gpt", "value": "A"}]}
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps({**good, "id": f"g{i}"}) for i in range(9)) + "\n" + json.dumps(bad))
    src = SourceParams(name="s", adapter="sharegpt", dataset="json", data_files=[path])
    result = _plan(tmp_path, DataParams(dedup=False, sources=[src]))
    assert _by_source(result)["s"]["dropped_malformed"] == 1 and result.kept == 9
    path.write_text("\n".join(json.dumps(bad) for _ in range(3)))
    with pytest.raises(DataError, match="3 of 3 rows do not fit adapter 'sharegpt'"):
        _plan(tmp_path / "b", DataParams(sources=[src]))


def test_load_failures_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = SourceParams(
        name="gone", adapter="metamathqa", dataset="json", data_files=[tmp_path / "missing.jsonl"]
    )
    with pytest.raises(DataError, match="source 'gone': cannot load dataset 'json'.*missing.jsonl does not"):
        _plan(tmp_path, DataParams(sources=[src]))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    hub = SourceParams(
        name="inf", adapter="infinity_instruct", dataset="BAAI/Infinity-Instruct", config="0625"
    )
    with pytest.raises(
        DataError, match="source 'inf': cannot load dataset 'BAAI/Infinity-Instruct'.*HF_TOKEN"
    ):
        _plan(tmp_path, DataParams(sources=[hub]))
    with pytest.raises(DataError, match="not found"):
        read_prompts(tmp_path / "nothing.parquet")


def test_tokenizer_without_chat_template_is_refused(
    files: dict[str, Path], tokenizer: Path, tmp_path: Path
) -> None:
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(tokenizer, bare)
    (bare / "chat_template.jinja").unlink()
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    data = DataParams(max_prompt_tokens=LIMIT, sources=plan_sources_from_files(files))
    with pytest.raises(DataError, match="has no chat template"):
        _plan(tmp_path, data, bare)
    with pytest.raises(DataError, match="cannot load a tokenizer from"):
        _plan(tmp_path, data, tmp_path / "no_such_model")


def test_worker_processes_count_like_one_process(tmp_path: Path, tokenizer: Path) -> None:
    from kit.prompts.adapters import get_adapter
    from kit.prompts.tokens import TokenCounter

    files = write_fixtures(tmp_path / "fx", rows_per_source=500)  # 3,000 rows, long and duplicate ones too
    data = DataParams(seed=5, max_prompt_tokens=LIMIT, sources=plan_sources_from_files(files))
    one = _plan_pooled(tmp_path / "one", data, tokenizer, pool_min=None)
    pooled = _plan_pooled(tmp_path / "pool", data, tokenizer, pool_min=1)
    assert one.kept == pooled.kept > 2500
    assert (tmp_path / "one/prompts.parquet").read_bytes() == (tmp_path / "pool/prompts.parquet").read_bytes()
    assert (tmp_path / "one/plan.json").read_bytes() == (tmp_path / "pool/plan.json").read_bytes()
    assert one.dropped_rows.equals(pooled.dropped_rows)
    hermes = get_adapter("hermes_fc")
    source = datasets.load_dataset("json", data_files=str(files["hermes_fc"]), split="train")
    rows = [hermes(r, i) for i, r in enumerate(source)]
    with TokenCounter(tokenizer, pool_min=100, workers=2) as counter:
        counts = counter.count(rows)
        assert counter._pool is not None  # the workers did count
    assert counts == TokenCounter(tokenizer, pool_min=None).count(rows)
    assert len(set(counts)) > 50


def _plan_pooled(tmp: Path, data: DataParams, tokenizer: Path, pool_min: int | None):
    return build_plan(
        data, tokenizer, tmp / "prompts.parquet", tmp / "plan.json", progress=False, pool_min=pool_min
    )


def _spill_small(monkeypatch: pytest.MonkeyPatch, digits: int = 1) -> tuple[list[dict], list[Path]]:
    """Spill every 40 rows (handed over every 5) into 16 ** digits buckets; record what was added
    and the spill folders used."""
    monkeypatch.setattr(sampling, "SPILL_ROWS", 5)
    monkeypatch.setattr(plan_module, "SPILL_BUFFER_ROWS", 40)
    monkeypatch.setattr(plan_module, "ROWS_PER_GROUP", 64)
    monkeypatch.setattr(plan_module, "BUCKET_DIGITS", digits)
    added: list[dict] = []
    folders: list[Path] = []
    add, spill = PromptSpill.add, PromptSpill._spill

    def recording_add(self: PromptSpill, rows: list[dict]) -> None:
        assert len(rows) <= 5
        added.extend(rows)
        add(self, rows)

    def recording_spill(self: PromptSpill) -> None:
        spill(self)
        if self.folder is not None and self.folder not in folders:
            assert self.folder.is_dir() and self.folder.parent == self.out.parent
            folders.append(self.folder)

    monkeypatch.setattr(PromptSpill, "add", recording_add)
    monkeypatch.setattr(PromptSpill, "_spill", recording_spill)
    return added, folders


@pytest.mark.parametrize("digits", [1, 2])
def test_a_spilled_plan_writes_what_one_in_memory_sort_writes(
    files: dict[str, Path], tokenizer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digits: int
) -> None:
    """Duplicates, long prompts, six sources: more rows than one spill batch, sorted a bucket at a time."""
    data = DataParams(seed=2, max_prompt_tokens=LIMIT, sources=plan_sources_from_files(files))
    whole = _plan(tmp_path / "whole", data, tokenizer)  # fits the buffer: sorted in memory
    added, folders = _spill_small(monkeypatch, digits)
    spilled = _plan(tmp_path / "spilled", data, tokenizer)
    table = read_prompts(spilled.prompts)
    expected = pa.Table.from_pylist(added, schema=PROMPTS_SCHEMA)
    expected = expected.take(pc.sort_indices(expected, [("id", "ascending")]))
    assert table.equals(expected) and table.equals(read_prompts(whole.prompts))
    assert spilled.kept == table.num_rows == int(spilled.table["kept"].sum()) > 4 * 40
    assert pq.ParquetFile(spilled.prompts).metadata.num_row_groups > 1
    assert (tmp_path / "spilled/plan.json").read_text() == (tmp_path / "whole/plan.json").read_text()
    plan = json.loads(spilled.plan.read_text())
    ids = table.column("id").to_pylist()
    assert plan["ids_sha256"] == hashlib.sha256("\n".join(ids).encode()).hexdigest()
    assert plan["prompts"] == len(ids) == len(set(ids))
    assert spilled.dropped_rows.equals(whole.dropped_rows) and spilled.table.equals(whole.table)
    assert folders and not any(f.exists() for f in folders)
    assert sorted(p.name for p in (tmp_path / "spilled").iterdir()) == ["plan.json", "prompts.parquet"]


def test_the_spill_folder_goes_when_the_plan_fails(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, folders = _spill_small(monkeypatch)
    sources = plan_sources_from_files(files)
    emptied = SourceParams(
        name="code", adapter="codefeedback", dataset="json", data_files=[files["codefeedback"]], language="en"
    )
    with pytest.raises(DataError, match="source 'code' gave 0 of all its planned prompts"):
        _plan(tmp_path / "a", DataParams(sources=[*sources[:2], emptied]))
    assert folders and not any(f.exists() for f in folders)
    assert list((tmp_path / "a").iterdir()) == []

    def failing_sort(table: pa.Table) -> pa.Table:
        raise OSError("disk full")

    monkeypatch.setattr(plan_module, "_sort_by_id", failing_sort)  # fails while writing prompts.parquet
    with pytest.raises(OSError, match="disk full"):
        _plan(tmp_path / "b", DataParams(sources=sources[:2]))
    assert len(folders) == 2 and not folders[1].exists()
    assert list((tmp_path / "b").iterdir()) == []

    monkeypatch.undo()  # a plan killed with kill -9 leaves its spill folder: the next plan removes it
    stale = tmp_path / "c" / ".prompts.parquet.x1y2.spill"
    stale.mkdir(parents=True)
    (stale / "bucket-00.parquet").write_bytes(b"half a bucket")
    _plan(tmp_path / "c", DataParams(sources=sources[:2]))
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["plan.json", "prompts.parquet"]


def test_an_empty_plan_writes_an_empty_prompt_set(files: dict[str, Path], tmp_path: Path) -> None:
    sources = plan_sources_from_files(files, counts={"metamathqa": 0})[3:4]
    result = _plan(tmp_path, DataParams(sources=sources))
    assert result.kept == 0 and read_prompts(result.prompts).num_rows == 0
    plan = json.loads(result.plan.read_text())
    assert plan["prompts"] == 0 and plan["ids_sha256"] == hashlib.sha256(b"").hexdigest()


def test_dedup_gives_back_the_first_holder_id() -> None:
    dedup = Deduplicator()
    key = dedup_key([{"role": "user", "content": "Hi"}], None)
    assert dedup.first_holder(key) is None and key not in dedup
    dedup.add(key, "00a1b2c3d4e5f607")
    dedup.add(key, "ffffffffffffffff")
    assert dedup.first_holder(key) == "00a1b2c3d4e5f607" and key in dedup and len(dedup) == 1


def test_piece_counts_stay_right_when_the_piece_cache_fills(tokenizer: Path) -> None:
    """A full cache is cleared before a batch: pieces it held must be counted again (at 2M prompts a
    batch met the limit with pieces cached earlier, and counting them raised KeyError)."""
    from transformers import AutoTokenizer

    from kit.prompts.tokens import PieceCounter

    backend = AutoTokenizer.from_pretrained(tokenizer).backend_tokenizer
    counter = PieceCounter(backend)
    counter.MAX_CACHED = 3
    texts = [f"<|im_start|>user\nquestion {i} about the same topic<|im_end|>" for i in range(4)]
    whole = [len(e) for e in backend.encode_batch(texts, add_special_tokens=False)]
    assert counter.lengths(texts[:2]) == whole[:2]  # fills the cache with these pieces
    assert counter.lengths(texts) == whole  # over the limit: cleared, and the cached pieces counted again


def test_remapping_the_source_between_chunks_changes_nothing(
    files: dict[str, Path], tokenizer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk maps each source's cache afresh after every chunk (so the pages it touched leave the
    process); with small chunks, many remaps give the same bytes as never remapping."""
    data = DataParams(seed=5, total=150, max_prompt_tokens=LIMIT, sources=plan_sources_from_files(files))
    monkeypatch.setattr(sampling, "CHUNK_MAX", 16)
    remaps: list[bool] = []
    real = sampling.remapped

    def counting(dataset):
        fresh = real(dataset)
        remaps.append(fresh is not dataset)
        return fresh

    monkeypatch.setattr(sampling, "remapped", counting)
    _plan(tmp_path / "remapped", data, tokenizer)
    monkeypatch.setattr(sampling, "remapped", lambda dataset: dataset)
    _plan(tmp_path / "kept", data, tokenizer)
    assert len(remaps) >= 2 * len(files) and all(remaps)  # every chunk of every source got a fresh map
    for name in ("prompts.parquet", "plan.json"):
        assert (tmp_path / "remapped" / name).read_bytes() == (tmp_path / "kept" / name).read_bytes()


def test_take_prompts_reads_the_rows_asked_for_in_that_order(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sample of the frozen set (stage 2's sweep prompts) reads only the row groups holding it."""
    from kit.prompts.plan import take_prompts

    monkeypatch.setattr(plan_module, "ROWS_PER_GROUP", 16)
    monkeypatch.setattr(plan_module, "SPILL_BUFFER_ROWS", 8)  # spilled: many buckets, small row groups
    result = _plan(tmp_path, DataParams(seed=1, total=120, sources=plan_sources_from_files(files)))
    whole = read_prompts(result.prompts)
    assert pq.ParquetFile(result.prompts).metadata.num_row_groups > 2
    positions = [77, 3, 119, 3, 40, 0]
    assert take_prompts(result.prompts, positions).equals(whole.take(positions))
    assert take_prompts(result.prompts, []).num_rows == 0
    with pytest.raises(IndexError):
        take_prompts(result.prompts, [120])
    with pytest.raises(DataError, match="not found"):
        take_prompts(tmp_path / "missing.parquet", [0])


def test_the_sweeps_and_the_pilots_samples_read_in_one_pass_are_the_same(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """Stage 2 reads its sweep sample, the pilot's prompts and the pilot's further ones in one pass
    over the plan (kit.decide.sweep.setup.planned_samples): the same prompts, in the same order, as
    each read on its own; a position in two samples appears in both."""
    from kit.decide.sweep.setup import (
        pilot_positions,
        pilot_prompts,
        planned_samples,
        prompts_at,
        sweep_prompts,
    )

    result = _plan(tmp_path, DataParams(seed=1, total=120, sources=plan_sources_from_files(files)))
    sweep, pilot, more = planned_samples(result.prompts, 1, 40, 3)
    assert sweep == sweep_prompts(result.prompts, 1, 40)
    assert pilot == pilot_prompts(result.prompts, 1, 3)
    assert more == prompts_at(result.prompts, pilot_positions(result.prompts, 1, 3)[1])
    assert len(sweep) == 40 and pilot and len(pilot) + len(more) == 120
    assert {p["id"] for p in sweep} & {p["id"] for p in pilot}, "these samples share prompts"
    assert planned_samples(result.prompts, 1, 5, 0)[1:] == ([], [])


def test_tools_list_parses_a_planned_prompts_tools_for_the_client() -> None:
    """The `tools` column is JSON text: parsed for the engine's client, None where a prompt has none."""
    from kit.prompts.plan import tools_list

    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    assert tools_list({"tools": json.dumps([tool])}) == [tool]
    assert tools_list({"tools": "[]"}) is None
    assert tools_list({"tools": None}) is None
    assert tools_list({"tools": ""}) is None
    assert tools_list({}) is None


def test_the_plan_records_name_the_columns_and_reasons_the_plan_writes() -> None:
    """The records are spelled out beside what they mirror: prompts.parquet's schema, one
    `dropped_<reason>` per filter (in REASONS order), the keys plan.json is written with."""
    from kit.prompts.records import PlanReport, PromptRecord, SourcePlanSummary

    assert list(PromptRecord.__annotations__) == PROMPTS_SCHEMA.names
    dropped = [k for k in SourcePlanSummary.__annotations__ if k.startswith("dropped_")]
    assert dropped == [f"dropped_{r}" for r in sampling.REASONS]
    assert list(PlanReport.__annotations__)[-2:] == ["origins", "warnings"]
