"""Generation at scale without a GPU: resume cost with 200K finished rows, and memory over a long run.

    .venv/bin/python benchmarks/bench_generate.py --out docs/lab/bench_generate.md

Part 1 (resume): writes 200,000 finished rows as real parquet shards with the kit's own
ShardWriter next to a 210,000-prompt plan, then times what a resumed `kit generate` does before
its first request: verify every shard and read its ids (`done_ids`), select the prompts left
(`pending_items`). Target: at most 5 s.

Part 2 (memory): runs the real generation loop (`run_generation`, flavor `external`) for N
requests against a stand-in OpenAI-compatible server (FastAPI + uvicorn, canned answers): the
server is not what is measured; the kit's resident memory is, sampled once a second. Target:
flat (the last quarter's RSS within a few percent of the first quarter's).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kit.generate.store import ShardWriter, done_ids, now_utc  # noqa: E402
from kit.generate.work import pending_items  # noqa: E402

STANDIN = """
from fastapi import FastAPI
app = FastAPI()
@app.get("/health")
def health(): return {"status": "ok"}
@app.get("/v1/models")
def models(): return {"data": [{"id": "standin"}]}
@app.post("/v1/chat/completions")
def chat(body: dict):
    text = "word " * 64
    return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 64, "total_tokens": 164}}
"""


def prompts_table(n: int) -> pa.Table:
    ids = [f"{i:016x}" for i in range(n)]
    msgs = [[{"role": "user", "content": f"prompt {i}"}] for i in range(n)]
    return pa.table(
        {
            "id": ids,
            "source": ["s"] * n,
            "source_row_id": ids,
            "messages": msgs,
            "tools": pa.nulls(n, pa.string()),
            "metadata": ["{}"] * n,
            "prompt_tokens": pa.array([10] * n, pa.int64()),
        }
    )


def bench_resume(tmp: Path, finished: int = 200_000, planned: int = 210_000) -> dict:
    gen = tmp / "generations"
    writer = ShardWriter(gen)
    t0 = time.perf_counter()
    for i in range(finished):
        writer.add(
            {
                "id": f"{i:016x}",
                "prompt_id": f"{i:016x}",
                "sample_index": 0,
                "source": "s",
                "messages": [{"role": "user", "content": f"prompt {i}"}],
                "tools": None,
                "completion": "word " * 64,
                "finish_reason": "stop",
                "prompt_tokens": 10,
                "completion_tokens": 64,
                "latency_s": 1.0,
                "ttft_s": None,
                "accept_length": None,
                "engine": "{}",
                "sampling": "{}",
                "sampling_hash": "x",
                "finished_at": now_utc(),
            }
        )
        if len(writer.buffer) >= 1000:
            writer.flush()
    writer.flush()
    write_s = time.perf_counter() - t0
    prompts = prompts_table(planned)
    pq.write_table(prompts, tmp / "prompts.parquet")
    t0 = time.perf_counter()
    table = pq.read_table(tmp / "prompts.parquet")
    done = done_ids(gen).ids
    _, work = pending_items(table, 1, done, (0, 1), None)
    resume_s = time.perf_counter() - t0
    assert len(work) == planned - finished
    return {
        "finished_rows": finished,
        "planned": planned,
        "shards": len(list(gen.glob("part-*"))),
        "write_s": write_s,
        "resume_s": resume_s,
        "left": len(work),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_memory(tmp: Path, requests: int) -> dict:
    from kit.generate import run_generation
    from kit.params import RunParams
    from kit.runfolder import RunFolder

    port = free_port()
    app = tmp / "standin.py"
    app.write_text(STANDIN)
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "standin:app", "--port", str(port), "--log-level", "warning"],
        cwd=tmp,
    )
    try:
        params = RunParams.model_validate(
            {
                "run": "mem",
                "output_dir": str(tmp / "out"),
                "model": {"path": str(tmp)},
                "engine": {"flavor": "external", "base_url": f"http://127.0.0.1:{port}"},
                "generate": {"concurrency": 64, "shard_rows": 2000, "shard_seconds": 30},
            }
        )
        folder = RunFolder(params.run_dir).ensure()
        pq.write_table(prompts_table(requests), folder.prompts)
        from kit.prompts.prompt_set import data_hash

        (folder.root / "prompts.hash").write_text(data_hash(params))
        samples: list[tuple[float, float]] = []
        stop = threading.Event()
        me = psutil.Process()

        def sample() -> None:
            while not stop.wait(1.0):
                samples.append((time.perf_counter(), me.memory_info().rss / 2**20))

        threading.Thread(target=sample, daemon=True).start()
        t0 = time.perf_counter()
        manifest = run_generation(params, folder)
        elapsed = time.perf_counter() - t0
        stop.set()
    finally:
        server.terminate()
        server.wait()
    rss = [r for _, r in samples]
    q = max(len(rss) // 4, 1)
    first, last = sum(rss[:q]) / q, sum(rss[-q:]) / q
    return {
        "requests": requests,
        "rows": manifest["rows"],
        "elapsed_s": elapsed,
        "req_s": requests / elapsed,
        "rss_first_quarter_mib": first,
        "rss_last_quarter_mib": last,
        "rss_max_mib": max(rss),
        "growth_pct": 100 * (last / first - 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    ap.add_argument("--requests", type=int, default=40_000)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/kit-bench-generate"))
    args = ap.parse_args()
    import shutil

    shutil.rmtree(args.tmp, ignore_errors=True)
    (args.tmp / "resume").mkdir(parents=True)
    (args.tmp / "memory").mkdir(parents=True)
    r = bench_resume(args.tmp / "resume")
    m = bench_memory(args.tmp / "memory", args.requests)
    text = f"""# Generation at scale (no GPU)

Command: `.venv/bin/python benchmarks/bench_generate.py --requests {args.requests}` on {os.cpu_count()} cores.

## Resume with {r["finished_rows"]:,} finished rows

| what | value |
|---|---|
| finished rows in shards | {r["finished_rows"]:,} in {r["shards"]} shards |
| planned prompts | {r["planned"]:,} |
| writing those rows with ShardWriter | {r["write_s"]:.1f} s |
| **finding what is left** (prompt plan + shard ids, pending) | **{r["resume_s"]:.2f} s** (target <= 5 s) |
| left to generate | {r["left"]:,} |

## Memory over a run of {m["requests"]:,} requests

Real generation loop, concurrency 64, against a stand-in OpenAI-compatible server (canned
answers, so the kit is the bottleneck).

| what | value |
|---|---|
| rows written | {m["rows"]:,} |
| wall time | {m["elapsed_s"]:.0f} s ({m["req_s"]:.0f} requests/s) |
| kit RSS, first quarter (mean) | {m["rss_first_quarter_mib"]:.0f} MiB |
| kit RSS, last quarter (mean) | {m["rss_last_quarter_mib"]:.0f} MiB |
| kit RSS, max | {m["rss_max_mib"]:.0f} MiB |
| **growth first -> last quarter** | **{m["growth_pct"]:+.1f}%** |
"""
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
