"""Shards written off the event loop: a slow disk does not stall it, a failed write is not silent."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_type_hints

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kit.engines.answers import ChatResult
from kit.generate import store
from kit.generate.loop import GenerationLoop, LoopStats
from kit.generate.store import ROW_SCHEMA, FailureLog, ShardWriter, done_ids, now_utc
from kit.generate.work import iter_items
from kit.generate.work_item import GeneratedRow, LoggedFailure


def row(i: int) -> dict[str, Any]:
    return {
        "id": f"r{i:05d}",
        "prompt_id": f"r{i:05d}",
        "sample_index": 0,
        "source": "s",
        "messages": [{"role": "user", "content": f"prompt {i}"}],
        "completion": "done",
        "finished_at": now_utc(),
    }


def test_the_row_record_names_the_row_schemas_columns_in_order() -> None:
    assert list(GeneratedRow.__annotations__) == ROW_SCHEMA.names
    assert list(get_type_hints(GeneratedRow)) == ROW_SCHEMA.names  # the annotations resolve


def test_the_loop_fills_every_column_of_a_row() -> None:
    item = next(iter_items(pa.table({"id": ["p"], "source": ["s"], "messages": [[]]}), [(0, 1)]))
    stamp = SimpleNamespace(_sampling_of=lambda _: {"sampling": "{}", "sampling_hash": "h"})
    made = GenerationLoop._row(stamp, item, ChatResult("hi", "stop", 3, 1, 0.5), "{}")  # type: ignore[arg-type]
    assert sorted(made) == sorted(ROW_SCHEMA.names)
    assert pa.Table.from_pylist([made], schema=ROW_SCHEMA).to_pylist()[0]["id"] == "p.1"


def test_the_loop_logs_a_failure_record_with_its_keys(tmp_path: Path) -> None:
    item = next(iter_items(pa.table({"id": ["p"], "source": ["s"], "messages": [[]]}), [(0, 0)]))
    here = SimpleNamespace(stats=LoopStats(), failures=FailureLog(tmp_path / "failures.jsonl"))
    GenerationLoop._fail(here, item, "transient", "timed out", 3, permanent=False)  # type: ignore[arg-type]
    (logged,) = here.failures.read()
    assert list(logged) == list(get_type_hints(LoggedFailure))
    assert (logged["id"], logged["reason"], logged["attempts"]) == ("p", "transient", 3)
    assert here.stats.failures == 1


def slow_disk(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    real = pq.write_table

    def write_table(*args: Any, **kwargs: Any) -> None:
        time.sleep(seconds)
        real(*args, **kwargs)

    monkeypatch.setattr(store.pq, "write_table", write_table)


def test_a_slow_disk_does_not_stall_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow_disk(monkeypatch, 1.0)  # seconds a shard takes: far above any scheduling hiccup
    writer = ShardWriter(tmp_path)

    first = tmp_path / "part-00001.parquet"

    async def go() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        for i in range(100):
            writer.add(row(i))
        t0 = time.perf_counter()
        await writer.flush_async()
        assert time.perf_counter() - t0 < 0.5, "flush_async waited for the disk"
        await asyncio.sleep(0.5)
        assert ticks >= 10, "the event loop did not run while the shard was written"
        assert not first.exists(), "the disk was not slow after all"
        for i in range(100, 300):  # two more shards: the third waits for the first (max_pending=2)
            writer.add(row(i))
            if i % 100 == 99:
                await writer.flush_async()
        assert first.exists(), "with max_pending shards queued, the next flush waits (memory stays bounded)"
        task.cancel()

    asyncio.run(go())
    writer.flush()
    check = done_ids(tmp_path)
    assert not check.corrupt and check.ids == {f"r{i:05d}" for i in range(300)}
    assert sorted(p.name for p in tmp_path.glob("part-*.parquet")) == [
        f"part-0000{k}.parquet" for k in (1, 2, 3)
    ]


def test_a_failed_shard_write_is_raised_and_leaves_no_partial_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ShardWriter(tmp_path)
    writer.add(row(0))
    writer.flush()

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.pq, "write_table", full_disk)

    async def go() -> None:
        writer.add(row(1))
        await writer.flush_async()  # returns at once; the write fails in the thread
        await asyncio.sleep(0.2)
        writer.add(row(2))
        await writer.flush_async()  # the earlier failure surfaces here

    with pytest.raises(OSError, match="No space left"):
        asyncio.run(go())
    with pytest.raises(OSError, match="No space left"):
        writer.flush()  # and the shard queued after it failed too: still not silent
    ids = done_ids(tmp_path).ids
    assert ids == {"r00000"}, "rows of a failed shard are not on disk: a resume generates them again"
    assert not list(tmp_path.glob(".*.tmp")), "no temporary file is left behind"


def test_failure_records_are_batched_and_read_back(tmp_path: Path) -> None:
    log = FailureLog(tmp_path / "failures.jsonl", batch=3)
    for i in range(4):
        log.append(
            {
                "id": f"x{i}",
                "reason": "rejected",
                "error": "bad \udcff surrogate" if i else "ok",
                "permanent": True,
            }
        )
    assert len((tmp_path / "failures.jsonl").read_text().splitlines()) == 3, "one write per batch"
    assert [r["id"] for r in log.read()] == ["x0", "x1", "x2", "x3"], "read() writes what waits first"
    assert log.permanent_ids() == {"x0", "x1", "x2", "x3"}
