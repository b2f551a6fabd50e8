"""kit export: a run folder as a dataset folder. Rows are put on disk without an engine (a real plan
of the fixture data, rows as stage 3 writes them, a failure log, a manifest); the folder is read back
with `datasets.load_dataset` and its card with `huggingface_hub.DatasetCard`."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from datasets.info import DatasetInfosDict
from fixtures_outputs import NEW_SCHEMA, made_row, write_run
from huggingface_hub import DatasetCard, DatasetCardData

import kit
from kit.artifacts import Manifest, Summary
from kit.errors import ExportError
from kit.export import DEFAULT_DROP, ExportOptions, export_run, parse_drop, push_folder
from kit.params import DataParams, RunParams, dump_params
from kit.prompts.adapters import sharegpt_prompt
from kit.prompts.plan import build_plan
from kit.runfolder import RunFolder

REPO = Path(__file__).resolve().parent.parent


def planned_run(
    root: Path, fixture_data: Path, complete: bool = True, refusals: tuple[int, ...] = ()
) -> tuple[RunFolder, dict[str, str]]:
    """A run folder with a real plan of three fixture sources, rows for all prompts but two (failed),
    one empty answer, one cut by max_tokens, one duplicate pair, and a refusal at each of `refusals`
    (kept: not a default rule); the planted reason of each id."""
    folder = RunFolder(root).ensure()
    sources = [
        {
            "name": s,
            "adapter": s,
            "dataset": "json",
            "data_files": [str(fixture_data / f"{s}.jsonl")],
            "count": 6,
        }
        for s in ("webinstructsub", "metamathqa", "codefeedback")
    ]
    params = RunParams(run=root.name, model={"path": str(root / "model")}, data={"sources": sources})
    folder.params.write_text(dump_params(params))
    build_plan(DataParams(sources=sources), None, folder.prompts, folder.plan, progress=False)
    prompts = pq.read_table(folder.prompts).to_pylist()
    planted: dict[str, str] = {}
    rows = []
    for i, p in enumerate(prompts):
        if i in (0, 7):
            planted[p["id"]] = "failed"
            continue
        if i == 1:
            rows.append(made_row(p, "   "))
            planted[p["id"]] = "empty"
        elif i == 2:
            rows.append(made_row(p, "a long answer that was cut", finish="length"))
            planted[p["id"]] = "truncated"
        elif i in (3, 4):
            rows.append(made_row(p, "the very same answer, twice over"))
            planted[p["id"]] = "duplicate" if i == 4 else "kept"
        elif i in refusals:
            rows.append(make_row_refusal(p, i))
            planted[p["id"]] = "kept"
        else:
            rows.append(made_row(p, f"answer number {i} about {p['source']}"))
            planted[p["id"]] = "kept"
    for k, part in enumerate((rows[:7], rows[7:])):
        pq.write_table(
            pa.Table.from_pylist(part, schema=NEW_SCHEMA), folder.generations / f"part-{k:05d}.parquet"
        )
    with folder.failures.open("w") as f:
        for i in (0, 7):
            p = prompts[i]
            f.write(
                json.dumps({"id": p["id"], "source": p["source"], "reason": "http_500", "error": "boom"})
                + "\n"
            )
    folder.shard(0, 1).write_manifest(
        Manifest(
            run=root.name,
            complete=complete,
            status="complete" if complete else "incomplete",
            rows=len(rows),
            left=0 if complete else 2,
            failures=2,
        )
    )
    return folder, planted


def make_row_refusal(prompt: dict, i: int) -> dict:
    return made_row(prompt, f"I'm sorry, I cannot help with request {i}.")


@pytest.fixture
def run(tmp_path, fixture_data):
    return planned_run(tmp_path / "run", fixture_data)


def test_export_loads_with_datasets_and_the_card_states_its_counts(run, tmp_path) -> None:
    folder, planted = run
    out = tmp_path / "export"
    result = export_run(folder.root, ExportOptions(to=out), progress=False)
    ds = datasets.load_dataset(str(out))
    assert set(ds) == {"train", "rejected"}
    assert len(ds["train"]) == result.splits["train"] == sum(v == "kept" for v in planted.values())
    assert len(ds["rejected"]) == result.splits["rejected"] == sum(v != "kept" for v in planted.values())
    got = {r["id"]: r["drop_reason"] or "kept" for split in ds.values() for r in split}
    assert got == planted  # every id once, in the split and with the reason planted
    card = DatasetCard.load(out / "README.md")
    info = DatasetInfosDict.from_dataset_card_data(card.data)["default"]
    assert {s: info.splits[s].num_examples for s in ("train", "rejected")} == result.splits
    assert card.data.license == "unknown" and card.data.size_categories == ["n<1K"]
    DatasetCardData(**card.data.to_dict())  # the metadata validates as the Hub's card data
    assert f"{result.splits['train']:,} rows in `train`" in card.text
    for rule in DEFAULT_DROP:
        assert f"| `{rule}` | {result.reasons[rule]:,} |" in card.text
    assert result.reasons["failed"] == 2 and result.reasons["duplicate"] == 1
    assert "| webinstructsub | 6 |" in card.text  # planned per source
    failed = [r for r in ds["rejected"] if r["drop_reason"] == "failed"]
    assert all(m["role"] != "assistant" for r in failed for m in r["messages"])  # the prompt alone


def test_messages_shape_reasoning_and_tool_calls(tmp_path) -> None:
    folder = write_run(tmp_path / "run")
    folder.shard(0, 1).write_manifest(Manifest(run="run", complete=True, status="complete"))
    out = tmp_path / "field"
    export_run(folder.root, ExportOptions(to=out, drop=()), progress=False)
    assert set(datasets.load_dataset(str(out))) == {"train"}  # no rows rejected: no rejected split
    assert "0 in `rejected`" in DatasetCard.load(out / "README.md").text
    rows = {r["id"]: r for r in datasets.load_dataset(str(out), split="train")}
    think = rows["think-000"]["messages"][-1]
    assert think == {
        "role": "assistant",
        "content": "4",
        "reasoning_content": "Let me think about 2+2. It is 4.",
        "tool_calls": None,
    }
    calls = [r["messages"][-1]["tool_calls"] for r in rows.values() if r["source"] == "hermes_text"]
    text_call = next(c for c in calls if c)[0]  # a <tool_call> block of the text, in the OpenAI shape
    assert text_call["type"] == "function" and json.loads(text_call["function"]["arguments"]) is not None
    assert all(
        "<tool_call>" not in r["messages"][-1]["content"]
        for r in rows.values()
        if r["source"] == "hermes_text" and r["messages"][-1]["tool_calls"]
    )
    inline = tmp_path / "inline"
    export_run(folder.root, ExportOptions(to=inline, drop=(), reasoning="inline"), progress=False)
    row = next(r for r in datasets.load_dataset(str(inline), split="train") if r["id"] == "think-000")
    assert row["messages"][-1]["content"] == "<think>\nLet me think about 2+2. It is 4.\n</think>\n\n4"
    assert "reasoning_content" not in row["messages"][-1]
    assert "<think>" in DatasetCard.load(inline / "README.md").text


def test_raw_format_keeps_the_run_schema(run, tmp_path) -> None:
    folder, planted = run
    export_run(folder.root, ExportOptions(to=tmp_path / "raw", fmt="raw"), progress=False)
    train = pq.read_table(sorted((tmp_path / "raw" / "data").glob("train-*"))[0])
    assert set(pq.read_schema(next(folder.generations.glob("part-*.parquet"))).names) <= set(
        train.column_names
    )
    assert train.column("completion").null_count == 0


def test_an_incomplete_run_is_refused_then_exported_with_a_card_that_says_so(tmp_path, fixture_data) -> None:
    folder, _ = planned_run(tmp_path / "run", fixture_data, complete=False)
    with pytest.raises(
        ExportError, match="incomplete: manifest.json says incomplete: 2 row.*--allow-incomplete"
    ):
        export_run(folder.root, ExportOptions(to=tmp_path / "x"), progress=False)
    assert not (tmp_path / "x").exists()
    export_run(folder.root, ExportOptions(to=tmp_path / "x", allow_incomplete=True), progress=False)
    assert "The run was incomplete when exported" in (tmp_path / "x" / "README.md").read_text()


def test_an_existing_folder_is_refused_and_replaced_only_on_overwrite(run, tmp_path) -> None:
    folder, _ = run
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="exists and is not empty.*--overwrite"):
        export_run(folder.root, ExportOptions(to=out), progress=False)
    assert (out / "keep.txt").read_text() == "mine"
    with pytest.raises(ExportError, match="is the run folder"):
        export_run(folder.root, ExportOptions(to=folder.root, overwrite=True), progress=False)
    export_run(folder.root, ExportOptions(to=out, overwrite=True), progress=False)
    assert not (out / "keep.txt").exists() and (out / "README.md").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging left behind


def test_files_roll_over_at_the_size_limit_and_still_load(run, tmp_path) -> None:
    folder, planted = run
    out = tmp_path / "small"
    result = export_run(folder.root, ExportOptions(to=out, max_file_bytes=1), progress=False)
    files = sorted(p.name for p in (out / "data").glob("train-*"))
    assert len(files) > 1 and files[0] == f"train-00000-of-{len(files):05d}.parquet"
    assert len(datasets.load_dataset(str(out), split="train")) == result.splits["train"]


def test_drop_rules_parse_and_refuse_unknown_names() -> None:
    assert parse_drop("default") == DEFAULT_DROP
    assert parse_drop("refusal,empty") == ("empty", "refusal")  # judged in the rules' order
    assert parse_drop("none") == ()
    with pytest.raises(ExportError, match="unknown rule 'emtpy'.*failed, unterminated_think, empty"):
        parse_drop("emtpy")


def test_push_without_the_hub_is_a_message_and_the_folder_stays(run, tmp_path, monkeypatch) -> None:
    folder, _ = run
    out = tmp_path / "out"
    export_run(folder.root, ExportOptions(to=out), progress=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(ExportError, match="cannot push to me/data: HF_HUB_OFFLINE.*hf upload me/data"):
        push_folder(out, "me/data")
    assert (out / "README.md").is_file()


def test_cli_export_and_its_bad_input(run, tmp_path) -> None:
    folder, _ = run
    cmd = [sys.executable, "-m", "kit.cli", "export", str(folder.root), "--to", str(tmp_path / "cli")]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["splits"]["train"] > 0
    again = subprocess.run(cmd + ["--drop", "empty,nope"], capture_output=True, text=True, cwd=REPO)
    assert again.returncode == 2 and "error: --drop: unknown rule 'nope'" in again.stderr
    assert "Traceback" not in again.stderr
    assert yaml.safe_load((tmp_path / "cli" / "README.md").read_text().split("---")[1])["configs"]


@pytest.mark.slow
def test_the_demo_run_exports_as_the_card_says_and_notebook_04_did_the_same(demo_run, tmp_path) -> None:
    out = tmp_path / "x"
    cmd = [sys.executable, "-m", "kit.cli", "export", str(demo_run), "--to", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    ds = datasets.load_dataset(str(out))
    card = DatasetCard.load(out / "README.md")
    info = DatasetInfosDict.from_dataset_card_data(card.data)["default"]
    assert {s: len(ds[s]) for s in ds} == {s: info.splits[s].num_examples for s in info.splits}
    summary = json.loads((demo_run / "summary.json").read_text())
    assert sum(len(ds[s]) for s in ds) == summary["rows"] + summary["health"]["failures"]
    assert "The run was **complete** when exported." in card.text
    assert "- **Decision** (stage 2): " in card.text and "not decided" not in card.text
    notebook = datasets.load_dataset(str(demo_run / "dataset"))  # notebook 04's cell, the same function
    assert {s: len(notebook[s]) for s in notebook} == {s: len(ds[s]) for s in ds}


def test_a_folder_without_rows_is_a_message(tmp_path) -> None:
    with pytest.raises(ExportError, match="nope is not a run folder"):
        export_run(tmp_path / "nope", ExportOptions(to=tmp_path / "out"), progress=False)
    RunFolder(tmp_path / "empty").ensure()
    with pytest.raises(ExportError, match="holds no generated rows .*run `kit generate PARAMS` first"):
        export_run(tmp_path / "empty", ExportOptions(to=tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


def test_the_flat_first_pass_judges_each_row_as_stage_4_does(run) -> None:
    """kit.export.facts keeps a few numbers a row where stage 4's scan keeps its facts: the same rows
    (a copied shard's repeated ids left out), the same reasons under every rule but the near ones."""
    import shutil

    from kit.analyse.run import read_run
    from kit.export.drops import drop_reasons
    from kit.export.facts import export_facts
    from kit.params import AnalyseParams

    folder, _ = run
    shutil.copy(folder.generations / "part-00000.parquet", folder.generations / "part-00002.parquet")
    rows = pq.read_table(folder.generations / "part-00001.parquet").to_pylist()
    rows[0]["completion"] = "I'm sorry, but I can't help with that."
    rows[1]["finish_reason"] = "length"
    pq.write_table(pa.Table.from_pylist(rows, schema=NEW_SCHEMA), folder.generations / "part-00001.parquet")
    rules = parse_drop("default,refusal,repeats_prompt")
    facts = export_facts(folder, AnalyseParams(), rules, progress=False)
    full = read_run(folder, AnalyseParams(near_duplicates=False), progress=False)
    reasons = facts.reasons()
    assert reasons.tolist() == drop_reasons(full.df, full.flags, rules).tolist()
    assert {"refusal", "truncated", "duplicate", "empty"} <= set(reasons.tolist())
    assert facts.positions() == list(zip(full.df["shard"].tolist(), full.df["row"].tolist(), strict=True))
    assert facts.sources == full.df["source"].astype(str).value_counts().to_dict()
    assert sorted(facts.failures["id"]) == sorted(full.failures["id"]) and len(facts.failures) == 2
    assert any("repeat the id of a row in another shard" in g for g in facts.gaps)
    assert facts.counts() == {r: int((reasons == r).sum()) for r in rules}


def test_the_partitioned_dedups_keep_the_first_row_as_pandas_did(tmp_path, monkeypatch) -> None:
    """kit.export.facts dedups digests spilled to partition files, one partition at a time: the
    same rows repeat as pandas' `duplicated(keep="first")` over all rows at once found (the old
    first pass), ids first (a repeat is left out), then completions among the rows no earlier rule
    dropped; a shard judged only in part adds nothing."""
    import numpy as np
    import pandas as pd

    from kit.export import facts as F

    monkeypatch.setattr(F, "PARTITIONS", 4)
    monkeypatch.setattr(F, "CHUNK", 1000)  # the per-row file read in several chunks
    rng = np.random.default_rng(0)
    n = 5000
    names = [f"r{k}" for k in rng.integers(0, 4500, n)]  # ~10% repeat
    ids = F.id_digests(names)
    hashes = rng.integers(0, 300, n).astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)  # 0: no completion
    bits = rng.integers(0, 64, n).astype(np.uint8) & rng.integers(0, 2, n).astype(np.uint8) * np.uint8(63)
    src = rng.integers(0, 3, n).astype(np.uint32)
    spill = F._Spill(tmp_path)
    for start in range(0, n, 700):
        stop = min(n, start + 700)
        spill.add(ids[start:stop], hashes[start:stop], bits[start:stop], src[start:stop])
        spill.commit()
    spill.add(ids[:10], hashes[:10], bits[:10], src[:10])
    spill.drop_pending()  # a shard that failed half-way
    spill.close()
    rules = parse_drop("default,refusal")
    failures = pd.DataFrame({"id": ["a", names[1234], "b"], "source": "s"})  # the second has a row
    codes, outstanding, repeated = F._codes(spill, rules, failures)
    first = ~pd.Series(ids).duplicated(keep="first").to_numpy()  # the old first pass
    assert repeated == int((~first).sum()) > 0 and len(codes) == n
    assert np.array_equal(codes == F.SKIP_CODE, ~first)
    reason = np.full(int(first.sum()), None, dtype=object)
    kept_bits, kept_hashes = bits[first], hashes[first]
    for rule in rules:
        free = pd.isna(reason)
        if rule == "duplicate":
            rows = np.flatnonzero(free & (kept_hashes != 0))
            hit = np.zeros(len(reason), dtype=bool)
            hit[rows[pd.Series(kept_hashes[rows]).duplicated(keep="first").to_numpy()]] = True
        elif rule in F.BIT_RULES:
            hit = (kept_bits >> np.uint8(F.BIT_RULES.index(rule))) & 1 == 1
        else:
            continue
        reason[free & hit] = rule
    labels = np.full(256, None, dtype=object)
    labels[1 : 1 + len(rules)] = list(rules)
    assert labels[codes[first]].tolist() == reason.tolist()
    assert {"duplicate", "empty", "refusal"} <= set(reason.tolist())
    assert outstanding["id"].tolist() == ["a", "b"]  # as load.outstanding_failures leaves them


def test_the_card_says_license_origins_date_version_and_the_flags_kept(tmp_path, fixture_data) -> None:
    """What a trainer needs of the card: the license (or that none was given), where each source came
    from, when and with which kit, the rules applied and the rows of `train` meeting the others (here
    two refusals, the same through the flat first pass and through stage 4's scan; the near
    duplicates stage 4 found where the export did not count them), the model named once, and no local
    path anywhere (`--push` would publish it)."""
    folder, planted = planned_run(tmp_path / "run", fixture_data, refusals=(5, 9))
    out = tmp_path / "card"
    export_run(folder.root, ExportOptions(to=out), progress=False)
    card = DatasetCard.load(out / "README.md")
    assert card.data.license == "unknown"
    assert "- **License**: none was given (`export.license` is not set in the params)" in card.text
    for s in ("webinstructsub", "metamathqa", "codefeedback"):
        f = fixture_data / f"{s}.jsonl"
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        assert f"- `{s}`: local json file `{f.name}` (sha256 `{sha}`)" in card.text
    assert (
        str(tmp_path) not in card.text and str(fixture_data) not in card.text and str(REPO) not in card.text
    )
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert f"- **Created**: exported {today} " in card.text and f"with kit {kit.__version__}" in card.text
    assert "- **Model**: `model` (" in card.text and str(folder.root / "model") not in card.text
    assert "| `refusal` | 2 | the answer matches analyse.refusal_patterns |" in card.text
    assert "| `repeats_prompt` | 0 |" in card.text
    assert "| `near_duplicate` | not looked for (stage 4 made no clusters) |" in card.text
    assert "| `refusal` | 0 |" not in card.text and f"| `truncated` | {1:,} |" in card.text  # applied

    clusters = {"clusters": 2, "rows": 5, "extra_rows": 3}  # as stage 4's summary.json says them
    folder.write_summary(
        Summary(near_duplicates={"answers": clusters, "prompts": {**clusters, "clusters": 0}})
    )
    found = tmp_path / "found"
    export_run(folder.root, ExportOptions(to=found), progress=False)
    assert (
        "| `near_duplicate` | not counted in `train`; stage 4 found 2 cluster(s) among all rows, 3 row(s) "
        "beyond the first of each |" in (found / "README.md").read_text()
    )

    near = tmp_path / "near"  # stage 4's scan, with its clusters
    export_run(folder.root, ExportOptions(to=near, drop=(*DEFAULT_DROP, "near_duplicate")), progress=False)
    near_card = (near / "README.md").read_text()
    assert "| `refusal` | 2 |" in near_card and "| `near_duplicate_prompt` | 0 |" in near_card

    params = RunParams(**{**yaml.safe_load(folder.params.read_text()), "export": {"license": "cc-by-4.0"}})
    folder.params.write_text(dump_params(params))
    licensed = tmp_path / "licensed"
    export_run(folder.root, ExportOptions(to=licensed), progress=False)
    card = DatasetCard.load(licensed / "README.md")
    assert card.data.license == "cc-by-4.0" and "- **License**: `cc-by-4.0` (`export.license`" in card.text
    assert sum(v == "kept" for v in planted.values()) == len(
        datasets.load_dataset(str(licensed), split="train")
    )


def test_a_plan_without_origins_gets_them_from_the_params_and_says_so(run, tmp_path, fixture_data) -> None:
    folder, _ = run
    plan = json.loads(folder.plan.read_text())
    assert set(plan["origins"]) == {"webinstructsub", "metamathqa", "codefeedback"}
    folder.plan.write_text(json.dumps({k: v for k, v in plan.items() if k != "origins"}))  # an older plan
    export_run(folder.root, ExportOptions(to=tmp_path / "old"), progress=False)
    text = (tmp_path / "old" / "README.md").read_text()
    assert "Where each source's rows came from (read at export: this run's plan.json does not record" in text
    assert "- `metamathqa`: local json file `metamathqa.jsonl` (sha256 `" in text


def hermes_run(root: Path, fixture_data: Path) -> RunFolder:
    """A run of the fixture's function-calling rows: half of them as planned now (the adapter took the
    tool listing out of the system prompt), half as a run planned before held them (the source's
    system prompt, listing every schema), with answers that call a tool."""
    folder = RunFolder(root).ensure()
    source = {"name": "hermes_fc", "adapter": "hermes_fc", "dataset": "json",
              "data_files": [str(fixture_data / "hermes_fc.jsonl")], "count": 10}  # fmt: skip
    params = RunParams(run=root.name, model={"path": str(root / "model")}, data={"sources": [source]})
    folder.params.write_text(dump_params(params))
    build_plan(DataParams(sources=[source]), None, folder.prompts, folder.plan, progress=False)
    by_id = {str(r["id"]): r for r in map(json.loads, (fixture_data / "hermes_fc.jsonl").open())}
    rows = []
    for i, p in enumerate(pq.read_table(folder.prompts).to_pylist()):
        if i % 2:
            p = {**p, "messages": sharegpt_prompt(by_id[p["source_row_id"]]["conversations"])[0]}
        name = json.loads(p["tools"])[0]["function"]["name"]
        rows.append(made_row(p, f'<tool_call>\n{{"name": "{name}", "arguments": {{}}}}\n</tool_call>'))
    pq.write_table(pa.Table.from_pylist(rows, schema=NEW_SCHEMA), folder.generations / "part-00000.parquet")
    folder.failures.write_text("")
    folder.shard(0, 1).write_manifest(
        Manifest(run=root.name, complete=True, status="complete", rows=len(rows))
    )
    return folder


def test_function_calling_rows_reload_and_render_each_tool_list_once(
    tmp_path, fixture_data, demo_model
) -> None:
    """TRL's conversational format: `messages` and `tools` (JSON text, decoded) into the chat template,
    after a reload with `datasets`: every tool schema once, from the `tools` field, for the rows planned
    now and for those of a run planned while the system prompt listed them too."""
    from transformers import AutoTokenizer

    folder = hermes_run(tmp_path / "run", fixture_data)
    export_run(folder.root, ExportOptions(to=tmp_path / "fc", drop=()), progress=False)
    tok = AutoTokenizer.from_pretrained(demo_model)
    train = datasets.load_dataset(str(tmp_path / "fc"), split="train")
    assert len(train) == 10
    earlier = 0
    for row in train:
        tools = json.loads(row["tools"])
        text = tok.apply_chat_template(row["messages"], tools=tools, tokenize=False)
        for tool in tools:
            assert text.count(json.dumps(tool["function"]["parameters"])) == 1, (row["id"], tool)
        # one format a row: every turn's calls structured, as the generated turn's (issue 60), and
        # each tool answer wrapped once, by the template
        calls = [c for m in row["messages"] for c in m["tool_calls"] or []]
        responses = [m for m in row["messages"] if m["role"] == "tool"]
        turns = [m for m in row["messages"] if m["role"] in ("assistant", "tool")]
        assert not any("<tool_call>" in (m["content"] or "") for m in turns), row["id"]
        assert text.count('<tool_call>\n{"name": "') == len(calls), row["id"]  # rendered from tool_calls
        assert text.count("<tool_response>") == len(responses), row["id"]
        earlier += len(calls) - len(row["messages"][-1]["tool_calls"])
        system = next(m["content"] for m in row["messages"] if m["role"] == "system")
        assert "<tools></tools> XML tags" in system and tools[0]["function"]["name"] not in system
        assert row["messages"][-1]["tool_calls"][0]["function"]["name"] == tools[0]["function"]["name"]
    assert earlier > 0, "no row of the plan calls a tool in an earlier turn: the check above saw none"
    assert (
        "The offered tools are in one place, the `tools` column"
        in (tmp_path / "fc" / "README.md").read_text()
    )


def test_the_cards_how_it_was_made_reads_as_text_without_nulls_or_local_paths(run, tmp_path) -> None:
    """Seen on the demo's card (issue 60): the model line's code span held another, a 16-digit hash
    was called sha256, the sampling was a JSON dump of nulls, and the paths of this machine stood in
    it. The model here is a demo model's folder; the manifest's sampling and engine are as stage 3
    writes them (unset fields null, the draft model by its absolute path)."""
    from kit.modelshape import DEMO_MARKER

    folder, _ = run
    model = folder.root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    (model / DEMO_MARKER).write_text('{"version": 7}')
    sampling = {"max_tokens": 256, "temperature": 0.7, "top_p": 0.95, "top_k": None, "min_p": None,
                "stop": [], "seed": None, "extra_body": {}}  # fmt: skip
    spec = {"algorithm": "EAGLE", "num_steps": 3, "draft_model_path": str(tmp_path / "drafts" / "eagle-8b")}
    old = json.loads(folder.manifest.read_text())
    folder.manifest.write_text(
        json.dumps({**old, "sampling": sampling, "engine": {"flavor": "vllm", "speculative": spec}})
    )
    out = tmp_path / "card"
    export_run(folder.root, ExportOptions(to=out), progress=False)
    text = (out / "README.md").read_text()
    line = {ln.split("**")[1]: ln for ln in text.splitlines() if ln.startswith("- **")}
    sha = hashlib.sha256((model / "config.json").read_bytes()).hexdigest()
    assert line["Model"] == (
        "- **Model**: `kit demo model v7` (a tiny model `kit demo-assets` trains; "
        f"config.json sha256 `{sha}`)"
    )
    assert line["Sampling"] == (
        "- **Sampling**: `max_tokens` 256, `temperature` 0.7, `top_p` 0.95; the 5 setting(s) left unset "
        "were not sent (the engine's and the model's defaults)"
    )
    assert line["Engine"].endswith(
        "speculative decoding: `algorithm` EAGLE, `num_steps` 3, `draft_model_path` eagle-8b"
    )
    assert str(tmp_path) not in text and "null" not in text
    from kit.export.card import no_local_paths

    said = "no shards in /home/me/outputs/run/generations/; 51 tok/s, k 1/2, see https://hf.co/a/b"
    assert no_local_paths(said) == "no shards in generations; 51 tok/s, k 1/2, see https://hf.co/a/b"
