"""Stage 3 at scale without an engine: a rerun with nothing left reads ids only, once; the timeline
is appended, not rewritten; shards are sized by rows for the run and by the bytes of their text."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow.parquet as pq
import pytest
from fixtures_outputs import made_row

from kit.generate import run as generate_run
from kit.generate import store
from kit.generate.metrics import Timeline, load_timeline
from kit.generate.run import run_generation
from kit.generate.store import ShardWriter, row_bytes, shard_rows_for
from kit.params import load_params
from kit.prompts import prompt_set
from kit.prompts.prompt_set import ensure_prompts
from kit.runfolder import RunFolder


def test_a_rerun_with_nothing_left_reads_ids_only_and_starts_no_engine(
    write_params, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every planned row is on disk: the rerun decides from the prompt ids and the shards' ids
    (each shard read once), never reads the prompts' text, never contacts the (absent) server."""
    params = load_params(write_params(engine={"flavor": "external", "base_url": "http://127.0.0.1:9"}))
    folder = RunFolder(params.run_dir).ensure()
    prompts = ensure_prompts(params, folder).to_pylist()
    writer = ShardWriter(folder.generations)
    for i, p in enumerate(prompts):
        writer.add(made_row(p))
        if i % 7 == 6:
            writer.flush()
    writer.flush()

    def no_prompts(path: Path) -> None:
        raise AssertionError(f"read the prompts' text from {path}")

    reads: list[Path] = []
    real = store._shard_ids
    monkeypatch.setattr(generate_run, "read_prompts", no_prompts)
    monkeypatch.setattr(prompt_set, "read_prompts", no_prompts)
    monkeypatch.setattr(store, "_shard_ids", lambda path: reads.append(path) or real(path))
    read_table = pq.read_table
    again: list[object] = []

    def spy(source, *args, **kwargs):  # noqa: ANN001, ANN202
        if isinstance(source, (str, Path, list)):
            again.append(source)  # a shard (or the prompts) read by path, beside the verified read
        return read_table(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", spy)
    manifest = run_generation(params, folder)
    assert again == [folder.prompts]  # the prompt ids (one column); no shard read a second time
    assert manifest["complete"] and manifest["rows"] == len(prompts) and manifest["left"] == 0
    assert manifest["rows_this_session"] == 0 and manifest["planned_prompts"] == len(prompts)
    by_source = pd.Series([p["source"] for p in prompts]).value_counts().to_dict()
    assert manifest["rows_by_source"] == by_source
    assert sorted(reads) == sorted(folder.shard_paths())  # each shard verified once, none read again


def test_the_timeline_appends_during_a_session_and_folds_once_at_its_end(tmp_path: Path) -> None:
    path, log = tmp_path / "metrics.parquet", tmp_path / "metrics.jsonl"
    stats = SimpleNamespace(rows=0, output_tokens=0, in_flight=0, failures=0)
    first = Timeline(path, log)
    for n in range(5):
        stats.rows = n
        first.sample(stats, {})
        first.save()
        assert len(log.read_bytes().splitlines()) == n + 1  # one line more: appended, not rewritten
        assert not path.exists()
    first.close()
    assert not log.exists() and len(pq.read_table(path)) == 5

    second = Timeline(path, log)  # a session that crashed: its samples stay in the log
    second.sample(stats, {})
    second.sample(stats, {})
    second.save()
    with open(log, "ab") as f:
        f.write(b'{"session": 2, "t_')  # a line cut short by the crash
    seen = load_timeline(path, log)
    assert seen["session"].tolist() == [1] * 5 + [2, 2]

    third = Timeline(path, log)  # folds the crashed session's log first
    assert third.session == 3 and not log.exists()
    assert pq.read_table(path).column("session").to_pylist() == [1] * 5 + [2, 2]


def test_shards_are_sized_for_the_run_and_closed_by_the_bytes_of_their_text(tmp_path: Path) -> None:
    assert shard_rows_for(None, 5_000) == 1_000
    assert shard_rows_for(None, 2_000_000) == 10_000
    assert shard_rows_for(None, 50_000_000) == 20_000
    assert shard_rows_for(64, 2_000_000) == 64
    writer = ShardWriter(tmp_path)
    prompt = {"id": "a", "source": "s", "messages": [{"role": "user", "content": "x" * 100}], "tools": None}
    prompt["prompt_tokens"] = 1
    row = made_row(prompt, completion="y" * 900)
    assert row_bytes(row) == 1000
    for _ in range(3):
        writer.add(row)
    assert not writer.due(1000, 60.0, max_bytes=3001) and writer.due(1000, 60.0, max_bytes=3000)
    writer.flush()
    assert writer.buffer_bytes == 0 and not writer.due(1, 60.0, max_bytes=1)
    assert json.loads(json.dumps(shard_rows_for(None, 0))) == 1000


def starving(
    running: float | None,
    waiting: float | None,
    in_flight: int,
    ticks: int = 3,
    tok_s: list[float] | None = None,
) -> int:
    """Requests in flight after `ticks` samples of the engine's gauges, through the loop's own rule
    (kit.generate.loop.GenerationLoop._keep_engine_full), the kit holding `in_flight` of 10,000;
    `running` may change sample by sample (a list), `tok_s` the answers' tokens/s of each."""
    from kit.generate.loop import GenerationLoop, LoopStats
    from kit.generate.timeline_sample import TimelineSample

    stats = LoopStats(in_flight=in_flight, concurrency=in_flight)
    loop = SimpleNamespace(stats=stats, total=10_000, _taken=in_flight, _starved_ticks=0,
                           grow_when_starved=True, _said_starved=False)  # fmt: skip
    loop._spawn = lambda n: setattr(stats, "concurrency", stats.concurrency + n)
    runs = running if isinstance(running, list) else [running] * ticks
    for i, now in enumerate(runs):
        stats.in_flight = stats.concurrency  # every worker holds a request
        sample = TimelineSample(
            session=1, at=None, t_s=2.0 * i, rows_done=0, output_tokens_done=0, rows_s=0.0,
            tok_s=(tok_s or [0.0] * len(runs))[i], in_flight=stats.in_flight, failures=0,
            num_running_reqs=now, num_queue_reqs=waiting,
        )  # fmt: skip
        GenerationLoop._keep_engine_full(loop, sample)
    return stats.concurrency


def test_the_loop_grows_only_when_the_engine_runs_what_it_sent():
    """Every request running and none waiting: the kit is the engine's limit, so it sends more. None
    running and none waiting with 1,024 out (an H100's SGLang compiling its sampler at the first
    request): the requests have not reached the scheduler, and sending more only deepens its queue
    (the kit went to 16,384 in flight there, and SGLang ran 10-512 of its 512)."""
    assert starving(running=60, waiting=0, in_flight=64) > 64
    assert starving(running=0, waiting=0, in_flight=1024) == 1024
    assert starving(running=300, waiting=0, in_flight=1024) == 1024
    assert starving(running=512, waiting=400, in_flight=1024) == 1024


def test_a_sample_between_two_waves_neither_counts_nor_breaks_the_row():
    """vLLM on a loaded CPU, 64 out, answers of one length: samples alternated 49, 0, 42, 0, 52, 1
    running, none waiting; the zeros fell between two waves (answers came back since the sample
    before), and reading them as 'not running what it was sent' kept the kit at 64 until the run's
    last sample (a CI run). With no answers coming back, a zero still breaks the row."""
    assert starving(running=[49, 0, 42], waiting=0, in_flight=64, tok_s=[900, 800, 900]) > 64
    assert starving(running=[49, 0, 42], waiting=0, in_flight=64, tok_s=[900, 0, 900]) == 64
    assert starving(running=[0, 0, 0], waiting=0, in_flight=1024, tok_s=[0, 0, 0]) == 1024
