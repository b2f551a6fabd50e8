"""Resume verifies what it trusts: damaged shards, copied shards, a garbage timeline, a deleted
plan and a plan that failed never lead to lost or doubled rows, nor to a dead end."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kit.generate.store import ShardWriter, done_ids, now_utc
from kit.params import load_params
from kit.runfolder import RunFolder, ShardFiles

KIT = [sys.executable, "-m", "kit.cli"]
FAKE = Path(__file__).resolve().parent / "fake_sglang"


def row(i: int) -> dict:
    return {
        "id": f"{i:016x}",
        "prompt_id": f"{i:016x}",
        "sample_index": 0,
        "source": "s",
        "messages": [{"role": "user", "content": f"prompt {i}"}],
        "tools": None,
        "completion": f"answer {i} " + os.urandom(300).hex(),  # incompressible: pages of real size
        "finish_reason": "stop",
        "prompt_tokens": 10,
        "completion_tokens": 300,
        "latency_s": 0.1,
        "ttft_s": None,
        "accept_length": None,
        "engine": "{}",
        "sampling": "{}",
        "sampling_hash": "x",
        "finished_at": now_utc(),
    }


def write_shards(directory: Path, shards: int = 3, rows: int = 50) -> list[Path]:
    writer = ShardWriter(directory)
    paths = []
    for s in range(shards):
        for i in range(s * rows, (s + 1) * rows):
            writer.add(row(i))
        paths.append(writer.flush())
    return paths


def damage_completions(path: Path, n_bytes: int = 2000) -> None:
    """Overwrite `n_bytes` inside the `completion` column's data: the id column stays readable."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    (chunk,) = [c for c in map(group.column, range(group.num_columns)) if c.path_in_schema == "completion"]
    first = min(x for x in (chunk.dictionary_page_offset, chunk.data_page_offset) if x is not None)
    start = first + chunk.total_compressed_size // 3
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(os.urandom(n_bytes))


@pytest.mark.parametrize("sidecar", [True, False], ids=["checksum", "no-checksum"])
def test_a_shard_damaged_in_the_middle_is_set_aside(tmp_path, caplog, sidecar):
    """With its recorded checksum, or (a shard written by an older kit) read in full."""
    paths = write_shards(tmp_path)
    if not sidecar:
        ShardFiles.checksum(paths[1]).unlink()
    damage_completions(paths[1])
    assert pq.read_table(paths[1], columns=["id"]).num_rows == 50, "the id column alone still reads"
    with caplog.at_level(logging.WARNING):
        check = done_ids(tmp_path)
    assert check.corrupt == [paths[1].name] and not check.duplicate
    assert check.ids == {f"{i:016x}" for i in (*range(50), *range(100, 150))}
    assert (tmp_path / "corrupt" / paths[1].name).exists() and not paths[1].exists()
    assert f"{paths[1]}: corrupt shard" in caplog.text and "generated again" in caplog.text
    assert done_ids(tmp_path).ids == check.ids, "the next resume finds the same, without the bad shard"


def test_a_bit_flipped_in_the_footer_of_a_shard_without_its_checksum(tmp_path, caplog):
    """`cp part-*` leaves the hidden checksum files behind; a flipped bit in the footer (which no page
    checksum covers) renamed a column and passed resume (issue 19, item 9). Now every flip either sets
    the shard aside or leaves its rows exactly as written."""
    (path,) = write_shards(tmp_path / "written", shards=1)
    data, written = path.read_bytes(), pq.read_table(path)
    footer = int.from_bytes(data[-8:-4], "little")
    rng, kept, schema_caught = random.Random(19), 0, 0
    for n in range(120):
        at, bit = rng.randrange(len(data) - 8 - footer, len(data) - 8), rng.randrange(8)
        flipped = bytearray(data)
        flipped[at] ^= 1 << bit
        copy = tmp_path / f"copy{n}"
        copy.mkdir()
        (copy / path.name).write_bytes(bytes(flipped))
        with caplog.at_level(logging.WARNING):
            check = done_ids(copy)
        if check.corrupt:
            schema_caught += "differ from the row schema" in caplog.text
        else:
            kept += 1
            assert pq.read_table(copy / path.name).equals(written), f"bit {bit} of byte {at} changed rows"
        caplog.clear()
        shutil.rmtree(copy)
    assert 0 < kept < 120 and schema_caught, (kept, schema_caught)


def test_a_copied_shard_is_counted_once(tmp_path, caplog):
    paths = write_shards(tmp_path, shards=2)
    copy = tmp_path / "part-00001 (copy).parquet"
    shutil.copy(paths[0], copy)
    with caplog.at_level(logging.WARNING):
        check = done_ids(tmp_path)
    assert len(check.ids) == 100 and check.duplicate == [copy.name] and not check.corrupt
    assert (tmp_path / "duplicate" / copy.name).exists()
    assert "repeats ids of another shard" in caplog.text


def test_a_truncated_shard_and_a_wrong_checksum_are_caught(tmp_path):
    paths = write_shards(tmp_path)
    paths[0].write_bytes(paths[0].read_bytes()[:-100])
    ShardFiles.checksum(paths[2]).write_text("1 00000000\n")
    check = done_ids(tmp_path)
    assert sorted(check.corrupt) == [paths[0].name, paths[2].name]
    assert check.ids == {f"{i:016x}" for i in range(50, 100)}


# --- end to end: `kit generate` over damaged state (an SGLang-shaped stand-in serves the rows) ---


def kit_generate(params_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*KIT, "generate", str(params_file)], capture_output=True, text=True, timeout=600)


def ids_on_disk(folder: RunFolder) -> list[str]:
    return pq.read_table(folder.shard_paths(), columns=["id"]).column("id").to_pylist()


def source(path: Path) -> dict:
    return {"name": "q", "adapter": "prompt_column", "dataset": "json", "data_files": [str(path)]}


@pytest.mark.slow
def test_damaged_state_between_runs_is_set_aside_and_rebuilt(write_params, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Question {i}?"}) + "\n" for i in range(30)))
    engine = {"flavor": "sglang", "startup_timeout_s": 120, "env": {"PYTHONPATH": str(FAKE)}}
    gen = {"concurrency": 4, "shard_rows": 5, "sampling": {"max_tokens": 64, "seed": 0}}

    # A plan that fails (an empty file: a missing one stops the params as they load) binds the folder
    # to nothing: the corrected params run.
    (tmp_path / "empty.jsonl").write_text("")
    broken = write_params("damaged", data={"sources": [source(tmp_path / "empty.jsonl")]}, engine=engine)
    failed = kit_generate(broken)
    assert failed.returncode == 2 and "empty.jsonl is empty" in failed.stderr
    assert "Traceback" not in failed.stderr
    params_file = write_params("damaged", data={"sources": [source(data)]}, engine=engine, generate=gen)
    folder = RunFolder(load_params(params_file).run_dir)
    first = kit_generate(params_file)
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(ids_on_disk(folder)) == sorted(pq.read_table(folder.prompts).column("id").to_pylist())

    # A shard damaged in the middle, a copied shard, a garbage timeline: set aside, warned, regenerated.
    damage_completions(folder.shard_paths()[1])
    shutil.copy(folder.shard_paths()[0], folder.generations / "part-00002 (copy).parquet")
    folder.metrics.write_bytes(os.urandom(3000))
    again = kit_generate(params_file)
    assert again.returncode == 0, again.stderr[-3000:]
    for said in ("corrupt shard", "repeats ids of another shard", "is not a readable timeline"):
        assert said in again.stderr
    manifest = json.loads(folder.manifest.read_text())
    ids = ids_on_disk(folder)
    assert len(ids) == len(set(ids)) == 30 and manifest["complete"] and manifest["rows"] == 30
    assert manifest["rows_this_session"] == 5 and len(manifest["corrupt_shards_set_aside"]) == 1
    assert manifest["duplicate_shards_set_aside"] == ["part-00002 (copy).parquet"]

    # A truncated plan: the message says to delete it, and doing so leads back to a complete run.
    folder.prompts.write_bytes(folder.prompts.read_bytes()[:500])
    truncated = kit_generate(params_file)
    assert truncated.returncode == 2 and "delete it" in truncated.stderr
    folder.prompts.unlink()
    rebuilt = kit_generate(params_file)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "data section of the params changed" not in rebuilt.stderr
    assert json.loads(folder.manifest.read_text())["rows"] == 30


NAMESPACE = """
set -u
mount -t tmpfs -o size=600k tmpfs "$OUT" || exit 97
"$PY" -m kit.cli generate "$PARAMS" > "$KEEP/full.out" 2> "$KEEP/full.err"; echo $? > "$KEEP/full.rc"
mount -o remount,size=64m "$OUT"
"$PY" -m kit.cli generate "$PARAMS" > "$KEEP/freed.out" 2> "$KEEP/freed.err"; echo $? > "$KEEP/freed.rc"
cp -r "$OUT" "$KEEP/outputs"
"""


@pytest.mark.slow
def test_a_full_disk_is_a_message_and_the_rerun_completes(write_params, tmp_path):
    """ENOSPC on a real (small tmpfs) filesystem, in a private mount namespace."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux) for a private tmpfs")
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Question {i}?"}) + "\n" for i in range(200)))
    fake_env = {"PYTHONPATH": str(FAKE), "FAKE_SGLANG_NOISE": "1", "FAKE_SGLANG_STEP_S": "0.0001"}
    engine = {"flavor": "sglang", "startup_timeout_s": 120, "env": fake_env}
    gen = {"concurrency": 8, "shard_rows": 10, "sampling": {"max_tokens": 1000, "seed": 0}}
    params_file = write_params("full", data={"sources": [source(data)]}, engine=engine, generate=gen)
    out = load_params(params_file).output_dir
    out.mkdir(parents=True)
    keep = tmp_path / "keep"
    keep.mkdir()
    env = {**os.environ, "OUT": str(out), "PY": sys.executable, "PARAMS": str(params_file), "KEEP": str(keep)}
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", NAMESPACE]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode == 97 or "unshare" in done.stderr:
        pytest.skip(f"no private tmpfs here: {done.stderr.strip()[:200]}")
    err = (keep / "full.err").read_text()
    assert (keep / "full.rc").read_text().strip() == "2", err[-3000:]
    assert "error: the disk is full (No space left on device, writing" in err and "Traceback" not in err
    assert (keep / "freed.rc").read_text().strip() == "0", (keep / "freed.err").read_text()[-3000:]
    folder = RunFolder(keep / "outputs" / "full")
    ids = ids_on_disk(folder)
    assert len(ids) == len(set(ids)) == 200
    assert json.loads(folder.manifest.read_text())["rows_this_session"] < 200, (
        "rows of the first run were kept"
    )


@pytest.mark.slow
def test_a_refusal_over_changed_settings_names_each_setting_old_and_new(write_params, tmp_path):
    """Not `sampling_hash: '51c1...' -> 'c3f9...'`: the params key and both values, from the
    settings kept in `_run.json`, or for a folder made before they were kept, from its rows."""
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Question {i}?"}) + "\n" for i in range(6)))
    engine = {"flavor": "sglang", "startup_timeout_s": 120, "env": {"PYTHONPATH": str(FAKE)}}
    gen = {"sampling": {"max_tokens": 16, "temperature": 0.7, "seed": 0}}
    params_file = write_params("changed", data={"sources": [source(data)]}, engine=engine, generate=gen)
    first = kit_generate(params_file)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = RunFolder(load_params(params_file).run_dir)
    kept = json.loads(folder.identity.read_text())
    assert kept["settings"]["generate.sampling.temperature"] == 0.7

    hotter = {"sampling": {**gen["sampling"], "temperature": 0.9, "top_k": 20}}
    moved = write_params(
        "changed", data={"seed": 5, "sources": [source(data)]}, engine=engine, generate=hotter
    )
    refused = kit_generate(moved)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    said = refused.stderr
    for line in (
        "generate.sampling.temperature: 0.7 -> 0.9",
        "generate.sampling.top_k: None -> 20",
        "data.seed: 0 -> 5",
    ):
        assert line in said, said
    assert "sampling_hash" not in said and "data_hash" not in said and "max_tokens" not in said

    # _run.json as a kit before this one wrote it: the rows still say what they were made with
    folder.identity.write_text(json.dumps({k: v for k, v in kept.items() if k != "settings"}))
    older = kit_generate(moved).stderr
    assert (
        "generate.sampling.temperature: 0.7 -> 0.9" in older
        and "generate.sampling.top_k: None -> 20" in older
    )
    assert f"data_hash: {kept['data_hash']!r} -> " in older and "kept only its hash" in older
    assert json.loads(folder.identity.read_text()) == {k: v for k, v in kept.items() if k != "settings"}
