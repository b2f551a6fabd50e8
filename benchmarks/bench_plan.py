"""Benchmark the prompt plan on a synthetic 200K-prompt set in the six source schemas.

    .venv/bin/python benchmarks/bench_plan.py --out /tmp/bench_plan            # 6 x 33,334 rows
    .venv/bin/python benchmarks/bench_plan.py --out /tmp/bench_plan --rows 2000  # a quick CPU check

Writes the fixtures (timed apart), then runs `build_plan` in a fresh child process with an empty
datasets cache (cold: JSON to Arrow conversion included) and again with that cache warm, and
records wall time, CPU time and peak RSS (main process and token-counting workers) and where the
time went (`tokens_s`: time the main process waits for token counts). Results: `<out>/bench_plan.json`.
Targets (issue 5): planning <= 60 s and <= 2 GB on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=33_334, help="rows per source (6 sources)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="a model dir; default: a tiny trained BPE")
    ap.add_argument("--max-prompt-tokens", type=int, default=1536)
    ap.add_argument(
        "--no-tokenizer", action="store_true", help="plan without counting tokens (for the ratio)"
    )
    ap.add_argument("--child", choices=["cold", "warm"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args)
    args.out.mkdir(parents=True, exist_ok=True)
    from kit.demo.fixtures import write_fixtures
    from kit.demo.tiny_tokenizer import write_tokenizer

    t0, c0 = time.perf_counter(), time.process_time()
    files = write_fixtures(args.out / "data", rows_per_source=args.rows)
    fixtures = {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "bytes": sum(p.stat().st_size for p in files.values()),
    }
    tokenizer = None if args.no_tokenizer else args.tokenizer or write_tokenizer(args.out / "tokenizer")
    runs = {kind: _run_child(args, tokenizer, kind) for kind in ("cold", "warm")}
    result = {
        "rows_per_source": args.rows,
        "rows": 6 * args.rows,
        "tokenizer": str(tokenizer) if tokenizer else None,
        "max_prompt_tokens": args.max_prompt_tokens,
        "cpus": os.cpu_count(),
        "fixtures": fixtures,
        "plan": runs,
    }
    name = "bench_plan_no_tokenizer.json" if args.no_tokenizer else "bench_plan.json"
    (args.out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _run_child(args: argparse.Namespace, tokenizer: Path | None, kind: str) -> dict:
    env = {**os.environ, "HF_DATASETS_CACHE": str(args.out / "hf_cache")}
    if kind == "cold":
        subprocess.run(["rm", "-rf", str(args.out / "hf_cache")], check=True)
    cmd = [sys.executable, __file__, "--out", str(args.out), "--rows", str(args.rows), "--child", kind]
    cmd += ["--max-prompt-tokens", str(args.max_prompt_tokens)]
    cmd += ["--no-tokenizer"] if tokenizer is None else ["--tokenizer", str(tokenizer)]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(args: argparse.Namespace) -> None:
    """Run one plan and print its measurements as one JSON line (peak RSS is this process's own)."""
    load_before = os.getloadavg()[0]
    t_import = time.perf_counter()
    import kit.prompts.plan as plan_mod
    from kit.demo.fixtures import SOURCES, plan_sources_from_files
    from kit.params import DataParams
    from kit.prompts.sampling import SourcePlan
    from kit.prompts.tokens import TokenCounter

    import_s = time.perf_counter() - t_import
    spent = {"load_s": 0.0, "tokens_s": 0.0, "tokenizer_load_s": 0.0}
    plan_mod.load_source = _timed(plan_mod.load_source, spent, "load_s")
    SourcePlan._wait = staticmethod(_timed(SourcePlan._wait, spent, "tokens_s"))  # counting not overlapped
    TokenCounter.__init__ = _timed(TokenCounter.__init__, spent, "tokenizer_load_s")
    files = {name: args.out / "data" / f"{name}.jsonl" for name in SOURCES}
    limit = None if args.no_tokenizer else args.max_prompt_tokens
    data = DataParams(seed=0, max_prompt_tokens=limit, sources=plan_sources_from_files(files))
    out = args.out / args.child
    t0, c0 = time.perf_counter(), time.process_time()
    result = plan_mod.build_plan(
        data,
        None if args.no_tokenizer else args.tokenizer,
        out / "prompts.parquet",
        out / "plan.json",
        progress=False,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # token-counting workers, if started
    worker_mb, worker_cpu = workers.ru_maxrss / 1024, workers.ru_utime + workers.ru_stime
    table = result.table
    print(
        json.dumps(
            {
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "worker_cpu_s": round(worker_cpu, 2),
                "cpu_share": round((cpu + worker_cpu) / wall, 2),
                "import_s": round(import_s, 2),
                **{k: round(v, 2) for k, v in spent.items()},
                "other_s": round(wall - sum(spent.values()), 2),
                "peak_rss_mb": round(peak_mb),
                "worker_peak_rss_mb": round(worker_mb),
                "kept": result.kept,
                "dropped": {c: int(table[c].sum()) for c in table if c.startswith("dropped_")},
                "rows_per_s": round((int(table["examined"].sum())) / wall),
                "prompts_mb": round((out / "prompts.parquet").stat().st_size / 2**20, 1),
                "loadavg_before": round(load_before, 2),
                "loadavg_after": round(os.getloadavg()[0], 2),
            }
        )
    )


def _timed(fn, spent: dict, key: str):
    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            spent[key] += time.perf_counter() - t

    return wrapper


if __name__ == "__main__":
    main()
