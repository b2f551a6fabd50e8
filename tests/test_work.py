"""What is left to do after a resume: samples per prompt, skipped ids, static shards, a limit."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kit.errors import ParamsError
from kit.generate.store import row_id
from kit.generate.work import iter_items, parse_shard, pending_items


def prompts(n: int) -> pa.Table:
    ids = [f"{i:016x}" for i in range(n)]
    tools = [
        json.dumps([{"type": "function", "function": {"name": "f"}}]) if i % 2 else None for i in range(n)
    ]
    return pa.table(
        {
            "id": ids,
            "source": ["s"] * n,
            "messages": [[{"role": "user", "content": f"q{i}"}] for i in range(n)],
            "tools": tools,
            "prompt_tokens": list(range(n)),
        }
    )


def ids_of(table: pa.Table, work: list[tuple[int, int]]) -> list[str]:
    return [item["id"] for item in iter_items(table, work, batch=3)]


def test_samples_per_prompt_get_their_own_ids_and_resume_skips_done_ones():
    table = prompts(4)
    todo, work = pending_items(table, 2, set(), (0, 1), None)
    all_ids = ids_of(todo, work)
    assert len(all_ids) == len(set(all_ids)) == 8
    assert row_id("0000000000000000", 0) in all_ids and row_id("0000000000000000", 1) in all_ids
    done = set(all_ids[:5])
    todo, work = pending_items(table, 2, done, (0, 1), None)
    assert sorted(ids_of(todo, work)) == sorted(set(all_ids) - done)


def test_items_carry_messages_tools_and_prompt_tokens():
    todo, work = pending_items(prompts(3), 1, set(), (0, 1), None)
    items = list(iter_items(todo, work, batch=2))
    assert [i["prompt_tokens"] for i in items] == [0, 1, 2]
    assert items[0]["tools_list"] is None and items[1]["tools_list"][0]["function"]["name"] == "f"
    assert items[2]["messages"] == [{"role": "user", "content": "q2"}]


def test_shards_partition_the_plan_and_limit_cuts_it():
    table = prompts(40)
    parts = [set(ids_of(*pending_items(table, 1, set(), (i, 3), None))) for i in range(3)]
    assert set().union(*parts) == set(table.column("id").to_pylist())
    assert sum(len(p) for p in parts) == 40 and all(parts)
    todo, work = pending_items(table, 1, set(), (0, 1), 5)
    assert len(work) == 5


@pytest.mark.parametrize("bad", ["3/3", "-1/2", "1", "a/b"])
def test_bad_shard_spec(bad):
    with pytest.raises(ParamsError, match="--shard"):
        parse_shard(bad)
    assert parse_shard(None) == (0, 1) and parse_shard("1/4") == (1, 4)
