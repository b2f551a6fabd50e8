"""`kit export` at scale: time and peak memory of an export of a synthetic run of N rows.

    .venv/bin/python benchmarks/bench_export.py --rows 200000 --out /tmp/bench_export
    .venv/bin/python benchmarks/bench_export.py --rows 2000000 --out /tmp/bench_export --no-near
    .venv/bin/python benchmarks/bench_export.py --rows 20000 --out /tmp/bench_export   # a quick check
    .venv/bin/python benchmarks/bench_export.py --rows 200000 --out /tmp/bench_export --stage4-scan
    .venv/bin/python benchmarks/bench_export.py --rows 2000000 --out /tmp/bench_export --no-near --batch

Writes a run folder as stage 3 leaves it (shards of 20,000 rows in the row schema, ~1.3 KB of text
a row: a prompt, a `<think>` block and an answer; 1% empty answers, 2% cut by max_tokens, 0.5% exact
copies; a complete manifest; params.yaml with `analyse.near_duplicates` on, or off with --no-near),
then runs `export_run` in a fresh child process: wall and CPU time, peak RSS (`ru_maxrss`), the files
written and their sizes. `--stage4-scan` hands the export the run as stage 4 reads it (`read_run`,
what notebook 04 does and what the near-duplicate rules need) instead of its own flat first pass
(kit.export.facts). `--batch` makes every row a line of an OpenAI batch input file (an
`adapter: openai_batch` source: requests.jsonl, prompts.parquet with the custom_ids) and exports
`--format openai_batch`. Results: `<out>/bench_export-<rows>[-no-near][-stage4][-batch].json`
(docs/export.md).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARD_ROWS = 20_000


def make_run(root: Path, rows: int, near: bool, as_batch: bool = False) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kit.artifacts import Manifest
    from kit.demo import fixture_text as ft
    from kit.generate.store import ROW_SCHEMA
    from kit.runfolder import RunFolder

    folder = RunFolder(root).ensure()
    if as_batch:
        write_batch_input(root, rows)
    write_params(root, near, as_batch)
    rng = random.Random(0)
    now = datetime.now(timezone.utc)
    for start in range(0, rows, SHARD_ROWS):
        batch = []
        for i in range(start, min(start + SHARD_ROWS, rows)):
            prompt = ft.request(rng) + f" (case {i})"
            answer = " ".join(ft.answer(rng) for _ in range(3)) + f" Answer {i}."
            cut = rng.random() < 0.02
            completion = f"<think>{ft.answer(rng)}</think>{answer}"
            if rng.random() < 0.01:
                completion = "<think>hm</think>"
            elif rng.random() < 0.005:
                completion = "The same answer, again."
            batch.append(
                {
                    "id": f"{i:016x}",
                    "prompt_id": f"{i:016x}",
                    "sample_index": 0,
                    "source": "batch" if as_batch else f"s{i % 6}",
                    "messages": [{"role": "user", "content": prompt}],
                    "tools": None,
                    "completion": completion,
                    "reasoning": None,
                    "tool_calls": None,
                    "finish_reason": "length" if cut else "stop",
                    "prompt_tokens": 30,
                    "completion_tokens": 200,
                    "reasoning_tokens": None,
                    "latency_s": 1.0,
                    "ttft_s": 0.1,
                    "accept_length": None,
                    "engine": "{}",
                    "sampling": "{}",
                    "sampling_hash": "h",
                    "finished_at": now,
                }
            )
        path = folder.generations / f"part-{start // SHARD_ROWS:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(batch, schema=ROW_SCHEMA), path)
    folder.shard(0, 1).write_manifest(Manifest(run=root.name, complete=True, status="complete", rows=rows))


def write_batch_input(root: Path, rows: int) -> None:
    """requests.jsonl (one line a row, its custom_id the row's id) and prompts.parquet (id, source,
    source_row_id: what the batch export reads of the plan)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kit.runfolder import RunFolder

    with (root / "requests.jsonl").open("w") as f:
        for i in range(rows):
            body = {"messages": [{"role": "user", "content": f"case {i}"}], "max_tokens": 200}
            f.write(
                json.dumps(
                    {"custom_id": f"{i:016x}", "method": "POST", "url": "/v1/chat/completions", "body": body}
                )
            )
            f.write("\n")
    ids = pa.array([f"{i:016x}" for i in range(rows)])
    table = pa.table({"id": ids, "source": pa.array(["batch"] * rows), "source_row_id": ids})
    pq.write_table(table, RunFolder(root).prompts)


def write_params(root: Path, near: bool, batch: bool = False) -> None:
    from kit.params import RunParams, dump_params
    from kit.runfolder import RunFolder

    data = {}
    if batch:
        source = {"name": "batch", "adapter": "openai_batch", "dataset": "text"}
        data = {"data": {"sources": [{**source, "data_files": [str(root / "requests.jsonl")]}]}}
    params = RunParams(
        run=root.name, model={"path": str(root / "model")}, analyse={"near_duplicates": near}, **data
    )
    RunFolder(root).params.write_text(dump_params(params))


def child(run: Path, to: Path, stage4: bool, batch: bool = False) -> dict:
    from kit.export import ExportOptions, export_run

    t0, c0 = time.perf_counter(), time.process_time()
    data = None
    if stage4:
        from kit.analyse.run import read_run
        from kit.params import saved_params
        from kit.runfolder import RunFolder

        folder = RunFolder(run)
        data = read_run(folder, saved_params(folder.params).analyse, progress=False)
    fmt = "openai_batch" if batch else "messages"
    result = export_run(run, ExportOptions(to=to, overwrite=True, fmt=fmt), progress=False, data=data)
    return {
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "splits": result.splits,
        "drop_reasons": result.reasons,
        "files": {p.name: round(p.stat().st_size / 2**20, 1) for p in result.files},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--no-near", action="store_true", help="analyse.near_duplicates: false in the run's params"
    )
    ap.add_argument(
        "--stage4-scan", action="store_true", help="export the run as stage 4 reads it (read_run)"
    )
    ap.add_argument(
        "--batch", action="store_true", help="rows as OpenAI batch lines, exported --format openai_batch"
    )
    ap.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.stage4_scan, args.batch)))
        return
    run = args.out / f"run-{args.rows}{'-batch' if args.batch else ''}"
    t0 = time.perf_counter()
    if not (run / "manifest.json").exists():
        make_run(run, args.rows, near=not args.no_near, as_batch=args.batch)
    else:  # the rows made before; the params say whether stage 4 looks for near-duplicates
        write_params(run, near=not args.no_near, batch=args.batch)
    made_s = round(time.perf_counter() - t0, 1)
    cmd = [
        sys.executable,
        __file__,
        "--out",
        str(args.out),
        "--child",
        str(run),
        str(args.out / f"export-{args.rows}{'-batch' if args.batch else ''}"),
        *(["--stage4-scan"] if args.stage4_scan else []),
        *(["--batch"] if args.batch else []),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    result = {
        "rows": args.rows,
        "near_duplicates": not args.no_near,
        "first_pass": "stage 4's scan (read_run)" if args.stage4_scan else "kit.export.facts",
        "format": "openai_batch" if args.batch else "messages",
        "run_made_s": made_s,
        **json.loads(done.stdout.strip().splitlines()[-1]),
    }
    shards = sorted((run / "generations").glob("part-*.parquet"))
    result["run_shards_mb"] = round(sum(p.stat().st_size for p in shards) / 2**20, 1)
    tags = ("-no-near" if args.no_near else "") + ("-stage4" if args.stage4_scan else "")
    tags += "-batch" if args.batch else ""
    path = args.out / f"bench_export-{args.rows}{tags}.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
