"""Stage 4 at scale: the run is read shard by shard, batch by batch, and only each row's facts are
kept; the text of the rows shown is read back on demand. Pinned here: the same answers as the rows
held in memory, duplicates found across shards, the browser reading only what it shows, and the
memory of `kit analyse` on a run whose text would not fit the old way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_analyse_fixture import build_run, generation_frame  # noqa: E402

from kit.analyse import compute_flags, load_generations, read_run, sample_browser, summarise  # noqa: E402
from kit.analyse import scan as scan_module  # noqa: E402
from kit.errors import RunFolderError  # noqa: E402
from kit.generate.store import ROW_SCHEMA  # noqa: E402
from kit.runfolder import RunFolder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_facts_and_flags_equal_those_of_the_rows_in_memory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scan_module, "BATCH_ROWS", 3)  # several batches per shard
    run = build_run(tmp_path / "run", shards=3)
    data = read_run(run, progress=False)
    rows, _ = load_generations(run)
    by_id = data.df.set_index("id")
    assert sorted(by_id.index) == sorted(rows["id"])
    flags = data.flags.set_axis(data.df["id"]).sort_index()
    expected = compute_flags(rows).set_axis(rows["id"]).sort_index()
    pd.testing.assert_frame_equal(flags, expected, check_names=False)
    for col in ("completion_tokens", "finish_reason", "source"):
        assert by_id.loc[rows["id"], col].astype(str).tolist() == rows[col].astype(str).tolist()
    assert "completion" not in data.df.columns and "messages" not in data.df.columns


def test_a_completion_repeated_in_another_shard_is_flagged_in_both(tmp_path: Path) -> None:
    frame = generation_frame()
    frame.loc[0, "completion"] = frame.loc[1, "completion"] = "the same long answer, twice over"
    run = build_run(tmp_path / "run", shards=2, frame=frame)  # rows 0 and 1 land in different shards
    data = read_run(run, progress=False)
    flagged = set(data.df.loc[data.flags["duplicate"], "id"])
    assert {frame.loc[0, "id"], frame.loc[1, "id"]} <= flagged


def test_rows_reads_only_the_row_groups_of_the_rows_asked_for(tmp_path: Path, monkeypatch) -> None:
    run = build_run(tmp_path / "run", shards=1)
    shard = run.shard_paths()[0]
    table = pq.read_table(shard)
    pq.write_table(table, shard, row_group_size=4)  # 20 rows in 5 row groups
    data = read_run(run, progress=False)
    read: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self, row_groups, *args, **kwargs):  # noqa: ANN001, ANN202
        read.append(list(row_groups))
        return real(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    picked = data.df.index[[13, 2, 9]]
    rows = data.rows(picked)
    assert read == [[0, 2, 3]]
    assert rows.index.tolist() == picked.tolist()
    truth = table.to_pandas().set_index("id")
    assert rows["completion"].tolist() == truth.loc[rows["id"], "completion"].tolist()
    browser = sample_browser(data, n=3, interactive=False)
    assert browser.html.count("<tr>") == 4  # a header and three rows, their text read back


def test_a_shard_unreadable_half_way_counts_not_at_all(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scan_module, "BATCH_ROWS", 2)
    run = build_run(tmp_path / "run", shards=2)
    bad = run.shard_paths()[1]
    data = bytearray(bad.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64  # a page in the middle, footer intact
    bad.write_bytes(bytes(data))
    result = read_run(run, progress=False)
    ids = set(pq.read_table(run.shard_paths()[0], columns=["id"]).column("id").to_pylist())
    assert set(result.df["id"]) == ids
    assert any(bad.name in gap and "left out" in gap for gap in result.gaps)
    assert summarise(result)["rows"] == len(ids)


CHILD = """
import json, sys
from pathlib import Path
from kit.analyse import analyse_run
from kit.runfolder import RunFolder
def status(key):
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(key + ":"))
    return int(line.split()[1])
Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) counts from here, not the imports'
base = status("VmRSS")
summary = analyse_run(RunFolder(Path(sys.argv[1])))
print(json.dumps({"base_kb": base, "peak_kb": status("VmHWM"),
                  "rows": summary["rows"], "duplicates": summary["flags"]["duplicate"]}))
"""
"""Stage 4 in a process of its own: its peak resident memory above what it held once imported. The
peak is reset after the imports (Linux: /proc/self/clear_refs): getrusage's ru_maxrss kept the
imports' own peak, which varied by ~90 MB from one start to the next (236 to 326 MB here), so the
growth read from it did too."""


def _grew_mb(run: RunFolder) -> tuple[float, dict]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(run.root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return (got["peak_kb"] - got["base_kb"]) / 1024, got


def _big_run(root: Path, shards: int, rows: int, chars: int) -> RunFolder:
    """A run folder whose completions hold `shards * rows * chars` characters of text."""
    folder = RunFolder(root).ensure()
    words = [f"w{i:04d}" for i in range(997)]
    for s in range(shards):
        records = []
        for r in range(rows):
            n = s * rows + r
            text = f"row {n}: " + " ".join(words[(n * 7 + k) % 997] for k in range(chars // 6))
            records.append(
                {
                    "id": f"{n:016x}",
                    "prompt_id": f"{n:016x}",
                    "sample_index": 0,
                    "source": ("a", "b", "c")[n % 3],
                    "messages": [{"role": "user", "content": f"question {n}"}],
                    "completion": text if n % 50 else "I'm sorry, I cannot.",
                    "finish_reason": "stop",
                    "prompt_tokens": 10,
                    "completion_tokens": chars // 4,
                    "latency_s": 1.0,
                }
            )
        table = pa.Table.from_pylist(records, schema=ROW_SCHEMA)
        pq.write_table(table, folder.generations / f"part-{s:05d}.parquet")
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures with Linux's /proc")
def test_analyse_of_a_run_larger_than_memory_allows_stays_bounded(tmp_path: Path) -> None:
    """`kit analyse` of 6,000 rows holding ~229 MB of completion text: the old reader (every row's
    text in pandas, then copied for the flags) peaked at several times the text; stage 4 now holds
    one batch of text at a time. Pinned two ways against the same analysis of the run's first shard
    alone (250 rows, ~10 MB of text: one batch, its working set and the first use of what stage 4
    imports, ~110 MB measured): 23 shards more add little (8-25 MB measured, where text kept per
    row would add its ~219 MB), and the whole stays under 0.75 of the text (~140 MB measured; 233 MB
    when a batch's word 5-grams were all held at once, ~12 times its text: issue 33)."""
    text_mb = 6_000 * 40_000 / 2**20
    run = _big_run(tmp_path / "big", shards=24, rows=250, chars=40_000)
    one = _big_run(tmp_path / "one", shards=1, rows=250, chars=40_000)
    one_mb, _ = _grew_mb(one)
    grew_mb, got = _grew_mb(run)
    assert got["rows"] == 6_000
    assert got["duplicates"] == 120  # the 120 refusals share one text, across shards
    more_text = text_mb * 23 / 24
    assert grew_mb - one_mb < 0.25 * more_text, (
        f"stage 4 grew by {grew_mb:.0f} MB for 24 shards, {one_mb:.0f} MB for one: "
        f"{grew_mb - one_mb:.0f} MB more for {more_text:.0f} MB more text"
    )
    assert grew_mb < 0.75 * text_mb, f"stage 4 grew by {grew_mb:.0f} MB for {text_mb:.0f} MB of text"


def test_the_browser_given_facts_alone_says_to_pass_the_run(tmp_path: Path) -> None:
    data = read_run(build_run(tmp_path / "run"), progress=False)
    with pytest.raises(RunFolderError, match=r"pass the RunData itself, sample_browser\(data\)"):
        sample_browser(data.df, n=2)
