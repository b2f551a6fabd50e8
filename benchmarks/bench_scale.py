"""Two million prompts on one machine: every step of a run, end to end, against an instant server.

    .venv/bin/python benchmarks/bench_scale.py --out /tmp/bench_scale                      # 200K and 2M
    .venv/bin/python benchmarks/bench_scale.py --out /tmp/bench_scale --sizes 2000 20000   # a quick check
    .venv/bin/python benchmarks/bench_scale.py --out /tmp/bench_scale --sizes 200000 --keep \\
        --steps analyse,notebook                                   # again on a kept run folder

For each size N: fixture data in the six sources' real schemas (`write_fixtures`, reused from
`<out>/fixtures/` when there; the same tiny BPE tokenizer, with a chat template, for every size),
then a params file like params/demo.yaml (counts per source summing to N, `max_prompt_tokens:
1536`, `model.path` the tokenizer's folder, `engine.flavor: external` pointing at the instant
server of `benchmarks/instant_server.py`, started once in its own process: distinct ~1,500-character
answers that compress like prose, with a usage block) and the steps, each importing the kit next to
this script (PYTHONPATH), offline (HF_HUB_OFFLINE):

1. `plan`: `ensure_plan` (what `kit generate` runs first: prompts.parquet, plan.json and the
   stamp; nothing read back), from a small child script, with an empty datasets cache (its size is recorded);
2. `generate`: `kit generate PARAMS` (rows/s end to end and over the kit's own generating time,
   shards, the server's CPU seconds);
3. `rerun`: `kit generate PARAMS` again, nothing left to do;
4. `analyse`: `kit analyse PARAMS`;
5. `notebook`: `kit run PARAMS --stages analyse` (notebook 04 in a kernel, then the report);
6. `report`: `kit report outputs/<run>`;
7. `load`: the README's `datasets.load_dataset("parquet", data_files="outputs/<run>/generations/
   *.parquet")` in a child, with a fresh cache_dir whose size is recorded, then removed;
8. `load_streaming`: the same with `streaming=True`, iterating every row.

Each step (and the fixtures, timed but not a step) runs under a fresh wrapper process of this
script: it starts the command, samples every 0.2 s the summed RSS of every process below it (the
plan's token-counting workers, notebook kernels) and what they read and wrote (`rchar` / `wchar`,
sampled: the last 0.2 s of a process is missed), and ends with `getrusage(RUSAGE_CHILDREN)`:
`ru_maxrss` is the largest single process (the wrapper is a child subreaper, so orphans count too);
the tree's peak is given as summed RSS and as summed PSS (`/proc/<pid>/smaps_rollup`: pages shared
between processes, such as a forked token worker's inherited heap, split between them instead of
counted in each).
Load average before and after each step. A failing step records its exit code and the tail of its
log (`<out>/logs/`); the others still run. `--steps` without `plan` reuses the run folder kept by
an earlier `--keep`. Results: `<out>/bench_scale.json` (written after every step) and a Markdown
table on stdout. Fixtures are kept for the next run. Disk at 2M: about 3.2 GB of fixture JSONL
(1.15 KB a row, 1.39 rows per prompt), as much again for the plan's datasets cache, about 1.1 GB
of shards and 5 GB for the `load` step's cache (removed after it): some 13 GB free.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KIT = Path(sys.executable).parent / "kit"
"""The kit command of the venv running this script; every step imports the kit next to this script."""
STEPS = ("plan", "generate", "rerun", "analyse", "notebook", "report", "load", "load_streaming")
SAMPLE_S = 0.2
KEEP_RATE = 0.72
"""Share of a fixture file the plan keeps at worst (Infinity-Instruct: a sixth in Chinese, a twelfth
planted duplicates, one in fifty too long); fixture rows per source = count / KEEP_RATE."""
FIXTURE_BYTES_PER_ROW = 1150
MAX_PROMPT_TOKENS = 1536
SAMPLING = {"max_tokens": 1024, "temperature": 0.7, "top_p": 0.95, "seed": 0}
MB = 2**20


# --- the orchestrator ---------------------------------------------------------------------------


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return CHILDREN[sys.argv[2]](*sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="results, fixtures, run folders, logs")
    ap.add_argument("--sizes", type=int, nargs="+", default=[200_000, 2_000_000], help="prompts per run")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    ap.add_argument("--keep", action="store_true", help="keep the run folders and the plan's datasets cache")
    args = ap.parse_args()
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        ap.error(f"unknown steps {unknown}; choose from {','.join(STEPS)}")
    args.steps = [s for s in STEPS if s in steps]
    args.out = args.out.resolve()
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "commit": _git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)",
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "steps": args.steps,
        "sizes": {},
    }
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import instant_server

    ready = args.out / "instant_server.port"
    ready.unlink(missing_ok=True)
    with open(args.out / "logs" / "instant_server.log", "ab") as log:
        server, port = instant_server.start(str(ready), log=log)
    results["server"] = {"url": f"http://127.0.0.1:{port}", "pid": server.pid}
    try:
        for size in args.sizes:
            results["sizes"][str(size)] = entry = {}
            bench_size(args, size, port, server.pid, entry, lambda: _save(args.out, results))
    finally:
        server.terminate()
        server.wait(15)
        _save(args.out, results)
    print(markdown(results))


def _save(out: Path, results: dict) -> None:
    tmp = out / "bench_scale.json.tmp"
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(out / "bench_scale.json")


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return done.stdout.strip()


def counts_for(size: int) -> list[int]:
    """`size` prompts split over the six sources (the first ones take the remainder)."""
    return [size // 6 + (i < size % 6) for i in range(6)]


def bench_size(args: argparse.Namespace, size: int, port: int, server_pid: int, entry: dict, save) -> None:
    from kit.demo.fixtures import SOURCES

    counts = counts_for(size)
    per_source = math.ceil(max(counts) / KEEP_RATE) + 12
    data = args.out / "fixtures" / f"rows-{per_source}"
    tokenizer = args.out / "tokenizer"
    run = f"scale-{size}"
    runs = args.out / "runs"
    run_dir = runs / run
    hf_cache = args.out / "work" / f"hf-{size}"
    entry.update(prompts=size, counts=dict(zip(SOURCES, counts, strict=True)))
    entry["fixture_rows_per_source"] = per_source
    print(f"== {size:,} prompts ({per_source:,} fixture rows per source)", file=sys.stderr, flush=True)

    done = data / "done.json"
    if done.exists() and (tokenizer / "tokenizer.json").exists():
        entry["fixtures"] = {**json.loads(done.read_text()), "reused": True}
    else:
        need = 6 * per_source * FIXTURE_BYTES_PER_ROW
        free = shutil.disk_usage(args.out).free
        if free < 2 * need:
            print(f"warning: {free / 2**30:.1f} GiB free, fixtures need {need / 2**30:.1f}", file=sys.stderr)
        fx = measure(
            [sys.executable, __file__, "--child", "fixtures", str(data), str(per_source), str(tokenizer)],
            args.out / "logs" / f"{size}-fixtures.log",
            {**os.environ, "PYTHONPATH": str(ROOT)},
        )
        fx["bytes"] = _du(data)
        if fx["rc"] == 0:
            done.write_text(json.dumps(fx) + "\n")
        entry["fixtures"] = {**fx, "reused": False}
        save()
        if fx["rc"] != 0:
            return

    runs.mkdir(parents=True, exist_ok=True)
    params = runs / f"{run}.yaml"
    params.write_text(params_yaml(run, runs, tokenizer, data, counts, port))
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(hf_cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    if "plan" in args.steps:  # a fresh run folder and a cold datasets cache, as a first real run has
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(hf_cache, ignore_errors=True)
    entry["free_disk_gib_before"] = round(shutil.disk_usage(args.out).free / 2**30, 1)
    entry["steps"] = {}
    for step in args.steps:
        print(f"   {step} ...", file=sys.stderr, flush=True)
        log = args.out / "logs" / f"{size}-{step}.log"
        log.unlink(missing_ok=True)
        res = run_step(step, params, run_dir, hf_cache, args.out / "work", env, log, port, server_pid)
        entry["steps"][step] = res
        save()
        print(f"   {step}: {_cell(step, res)}", file=sys.stderr, flush=True)
    entry["free_disk_gib_after"] = round(shutil.disk_usage(args.out).free / 2**30, 1)
    entry["run_dir_mb"] = round(_du(run_dir) / MB, 1)
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(hf_cache, ignore_errors=True)
    save()


def params_yaml(run: str, runs: Path, tokenizer: Path, data: Path, counts: list[int], port: int) -> str:
    from kit.demo.fixtures import SOURCES

    sources = []
    for name, count in zip(SOURCES, counts, strict=True):
        src = {"name": name, "adapter": name, "dataset": "json", "data_files": [str(data / f"{name}.jsonl")]}
        src["count"] = count
        if name == "infinity_instruct":
            src["language"] = "en"
        sources.append(src)
    params = {
        "run": run,
        "output_dir": str(runs),
        "model": {"path": str(tokenizer)},
        "engine": {"flavor": "external", "base_url": f"http://127.0.0.1:{port}", "startup_timeout_s": 60},
        "data": {"seed": 0, "max_prompt_tokens": MAX_PROMPT_TOKENS, "sources": sources},
        "generate": {"sampling": SAMPLING},
    }
    return (
        "# Written by benchmarks/bench_scale.py: the instant server, fixture data, the tiny tokenizer.\n"
        + json.dumps(params, indent=2)
        + "\n"
    )


def run_step(
    step: str,
    params: Path,
    run_dir: Path,
    hf_cache: Path,
    work: Path,
    env: dict,
    log: Path,
    port: int,
    server_pid: int,
) -> dict[str, Any]:
    """Run one step under the measuring wrapper and add what it produced."""
    import psutil

    py = sys.executable
    cmds = {
        "plan": [py, __file__, "--child", "plan", str(params)],
        "generate": [str(KIT), "generate", str(params)],
        "rerun": [str(KIT), "generate", str(params)],
        "analyse": [str(KIT), "analyse", str(params)],
        "notebook": [str(KIT), "run", str(params), "--stages", "analyse"],
        "report": [str(KIT), "report", str(run_dir)],
    }
    facts: dict[str, Any] = {}
    if step in ("load", "load_streaming"):
        cache = work / f"load-cache-{run_dir.name}"
        shutil.rmtree(cache, ignore_errors=True)
        facts_path = work / f"{step}-{run_dir.name}.json"
        facts_path.unlink(missing_ok=True)
        mode = "stream" if step == "load_streaming" else "arrow"
        cmd = [py, __file__, "--child", "load", str(run_dir), str(cache), mode, str(facts_path)]
        res = measure(cmd, log, {**env, "HF_DATASETS_CACHE": str(cache)})
        facts["datasets_cache_mb"] = round(_du(cache) / MB, 1)
        if facts_path.exists():
            facts.update(json.loads(facts_path.read_text()))
            facts_path.unlink()
        shutil.rmtree(cache, ignore_errors=True)
        return {**res, **facts}
    server = psutil.Process(server_pid)
    cpu0, served0 = sum(server.cpu_times()[:2]), _served(port)
    res = measure(cmds[step], log, env)
    if step in ("generate", "rerun"):
        facts["server_cpu_s"] = round(sum(server.cpu_times()[:2]) - cpu0, 2)
        facts["server_requests"] = _served(port) - served0
        manifest = run_dir / "manifest.json"
        if manifest.exists():
            m = json.loads(manifest.read_text())
            keys = ("status", "rows", "rows_this_session", "left", "failures", "shards", "generating_s")
            facts.update({k: m.get(k) for k in keys})
            facts["concurrency"] = m.get("concurrency")
            session = m.get("rows_this_session") or 0
            facts["rows_per_s"] = round(session / res["wall_s"]) if session else None
            gen_s = m.get("generating_s")
            facts["rows_per_generating_s"] = round(session / gen_s) if session and gen_s else None
        facts["generations_mb"] = round(_du(run_dir / "generations") / MB, 1)
    elif step == "plan":
        facts["prompts_mb"] = round(_size(run_dir / "prompts.parquet") / MB, 2)
        facts["datasets_cache_mb"] = round(_du(hf_cache) / MB, 1)
        if (run_dir / "plan.json").exists():
            plan = json.loads((run_dir / "plan.json").read_text())
            facts["planned_prompts"] = plan.get("prompts")
            facts["plan_warnings"] = len(plan.get("warnings") or [])
    elif step == "analyse":
        facts["summary_kb"] = round(_size(run_dir / "summary.json") / 1024, 1)
        facts["figures"] = len(list((run_dir / "figures").glob("*"))) if (run_dir / "figures").is_dir() else 0
    elif step in ("notebook", "report"):
        facts["report_mb"] = round(_du(run_dir / "report") / MB, 2)
    return {**res, **facts}


def _served(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as r:
        return int(json.loads(r.read())["requests"])


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _du(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def measure(cmd: list[str], log: Path, env: dict) -> dict[str, Any]:
    """Run `cmd` under a fresh wrapper process (`--child measure`) and return what it measured."""
    result = log.with_suffix(".measure.json")
    result.unlink(missing_ok=True)
    wrapper = [sys.executable, __file__, "--child", "measure", str(result), str(log), *cmd]
    subprocess.run(wrapper, env=env, check=False)
    if not result.exists():
        return {"rc": None, "error": "the measuring wrapper wrote no result"}
    res = json.loads(result.read_text())
    result.unlink()
    if res["rc"] != 0:
        res["log_tail"] = _tail(log)
    return res


def _tail(log: Path, chars: int = 3000) -> str:
    if not log.exists():
        return ""
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - chars))
        return f.read().decode("utf-8", "replace")


# --- the Markdown table -------------------------------------------------------------------------


def markdown(results: dict) -> str:
    sizes = list(results["sizes"])
    head = (
        f"bench_scale: commit {results['commit']}{' (dirty)' if results.get('dirty') else ''}, "
        f"{results['date']}, {results['cpus']} cores, {results['mem_gib']} GiB, instant server "
        f"{results['server']['url']}\n\n"
    )
    lines = ["| step | " + " | ".join(f"{int(s):,} prompts" for s in sizes) + " |"]
    lines.append("|---" * (len(sizes) + 1) + "|")
    fixtures = []
    for s in sizes:
        fx = results["sizes"][s].get("fixtures", {})
        what = "reused" if fx.get("reused") else f"{fx.get('wall_s', 0):.0f} s"
        fixtures.append(f"{what}, {fx.get('bytes', 0) / MB:,.0f} MB JSONL")
    lines.append("| fixtures (not a step) | " + " | ".join(fixtures) + " |")
    for step in STEPS:
        cells = [results["sizes"][s].get("steps", {}).get(step) for s in sizes]
        if any(cells):
            lines.append(f"| {step} | " + " | ".join(_cell(step, c) if c else "" for c in cells) + " |")
    detail = [
        "| size | step | rc | wall s | CPU s | peak RSS main MB | peak RSS tree MB | peak PSS tree MB | "
        "procs | read MB | written MB | load 1 min before -> after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        for step, r in results["sizes"][s].get("steps", {}).items():
            detail.append(
                f"| {int(s):,} | {step} | {r.get('rc')} | {r.get('wall_s', 0):.1f} | "
                f"{r.get('cpu_s', 0):.1f} | {r.get('peak_rss_main_mb', 0):,.0f} | "
                f"{r.get('peak_rss_tree_mb', 0):,.0f} | {r.get('peak_pss_tree_mb', 0):,.0f} | "
                f"{r.get('procs_max', 0)} | {r.get('read_mb', 0):,.0f} | {r.get('written_mb', 0):,.0f} | "
                f"{r.get('loadavg_before', [0])[0]:.2f} -> {r.get('loadavg_after', [0])[0]:.2f} |"
            )
    return head + "\n".join(lines) + "\n\n" + "\n".join(detail) + "\n"


def _cell(step: str, r: dict) -> str:
    if r.get("rc") is None:
        return f"no result ({r.get('error')})"
    text = f"{r['wall_s']:.1f} s, {r['peak_rss_main_mb']:,.0f} MB (tree {r['peak_rss_tree_mb']:,.0f} MB"
    text += f", PSS {r['peak_pss_tree_mb']:,.0f} MB)" if r.get("peak_pss_tree_mb") else ")"
    extra = []
    if r["rc"] != 0:
        extra.append(f"**exit {r['rc']}**")
    if step == "plan":
        extra.append(f"prompts.parquet {r.get('prompts_mb', 0):,.1f} MB")
        extra.append(f"datasets cache {r.get('datasets_cache_mb', 0):,.0f} MB")
    elif step in ("generate", "rerun"):
        if r.get("rows_per_s"):
            extra.append(f"{r['rows_per_s']:,} rows/s ({r.get('rows_per_generating_s') or 0:,} generating)")
        extra.append(f"{r.get('rows_this_session') or 0:,} rows this session, {r.get('shards')} shards")
        if r.get("rows_this_session"):
            extra.append(f"concurrency {r.get('concurrency')}, server {r.get('server_cpu_s', 0):.1f} CPU s")
    elif step in ("load", "load_streaming"):
        extra.append(f"{r.get('rows', 0):,} rows")
        if step == "load":
            extra.append(f"datasets cache {r.get('datasets_cache_mb', 0):,.0f} MB")
    return text + ("; " + ", ".join(extra) if extra else "")


# --- children: the measuring wrapper and the steps without a CLI --------------------------------


def proportional_set_size(pid: int) -> int:
    """Bytes of memory process `pid` holds, pages shared with others (a forked worker's, a library's)
    split between them: summed over a tree, each page once (summed RSS counts shared pages twice)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def child_measure(result: str, log: str, *cmd: str) -> None:
    """Run `cmd`; sample its process tree; write wall, CPU, peak RSS (largest process and tree sum)."""
    import psutil

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here
    me = psutil.Process()
    peak = {"tree": 0, "pss": 0, "procs": 0}
    io: dict[tuple[int, float], tuple[int, int]] = {}
    stop = threading.Event()

    def sample() -> None:
        while True:
            total, pss, n = 0, 0, 0
            for p in me.children(recursive=True):
                try:
                    with p.oneshot():
                        total += p.memory_info().rss
                        c = p.io_counters()
                        io[(p.pid, p.create_time())] = (c.read_chars, c.write_chars)
                    pss += proportional_set_size(p.pid)
                    n += 1
                except (psutil.Error, OSError):
                    pass
            peak["tree"], peak["procs"] = max(peak["tree"], total), max(peak["procs"], n)
            peak["pss"] = max(peak["pss"], pss)
            if stop.wait(SAMPLE_S):
                return

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        left = _reap_orphans(me)
        stop.set()
        sampler.join()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = {
        "rc": rc,
        "wall_s": round(wall, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_rss_main_mb": round(ru.ru_maxrss / 1024),
        "peak_rss_tree_mb": round(peak["tree"] / MB),
        "peak_pss_tree_mb": round(peak["pss"] / MB),
        "procs_max": peak["procs"],
        "read_mb": round(sum(r for r, _ in io.values()) / MB, 1),
        "written_mb": round(sum(w for _, w in io.values()) / MB, 1),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cmd": " ".join(cmd),
    }
    if left:
        res["left_running"] = left
    Path(result).write_text(json.dumps(res) + "\n")


def _reap_orphans(me, wait_s: float = 15.0) -> list[str]:  # noqa: ANN001
    """Wait for descendants still running after the command exited (orphans reparented here); after
    `wait_s`, terminate them (they are this step's own) and return their names."""
    import psutil

    deadline = time.monotonic() + wait_s
    left: list[str] = []
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:  # none left
            return left
        late = time.monotonic() - deadline
        if late > 0:
            kids = me.children(recursive=True)
            left = left or [f"{p.pid} {p.name()}" for p in kids if p.status() != psutil.STATUS_ZOMBIE]
            for p in kids:
                try:
                    p.kill() if late > 5 else p.terminate()
                except psutil.Error:
                    pass
        time.sleep(0.1)


def child_fixtures(data: str, per_source: str, tokenizer: str) -> None:
    from kit.demo.fixtures import write_fixtures
    from kit.demo.tiny_tokenizer import write_tokenizer

    if not (Path(tokenizer) / "tokenizer.json").exists():
        write_tokenizer(Path(tokenizer))
    shutil.rmtree(data, ignore_errors=True)
    write_fixtures(Path(data), rows_per_source=int(per_source))


def child_plan(params_path: str) -> None:
    """The plan alone, as `kit generate` runs it first (there is no plan-only command)."""
    import pyarrow.parquet as pq

    from kit import stages
    from kit.params import load_params
    from kit.prompts.prompt_set import ensure_plan

    params = load_params(Path(params_path), None)
    folder = stages.prepare(params, save=False)
    t0 = time.perf_counter()
    path = ensure_plan(params, folder)
    rows = pq.ParquetFile(path).metadata.num_rows
    print(json.dumps({"prompts": rows, "ensure_plan_s": round(time.perf_counter() - t0, 2)}))


def child_load(run_dir: str, cache: str, mode: str, facts: str) -> None:
    """The README's loading line (`mode` arrow), or the same streamed over every row (`stream`)."""
    t0 = time.perf_counter()
    import datasets

    import_s = time.perf_counter() - t0
    files = f"{run_dir}/generations/*.parquet"
    t0 = time.perf_counter()
    if mode == "stream":
        ds = datasets.load_dataset("parquet", data_files=files, streaming=True, cache_dir=cache)
        rows = sum(1 for _ in ds["train"])
    else:
        ds = datasets.load_dataset("parquet", data_files=files, cache_dir=cache)
        rows = ds["train"].num_rows
    out = {"rows": rows, "import_s": round(import_s, 2), "load_s": round(time.perf_counter() - t0, 2)}
    Path(facts).write_text(json.dumps(out) + "\n")


CHILDREN = {"measure": child_measure, "fixtures": child_fixtures, "plan": child_plan, "load": child_load}


if __name__ == "__main__":
    main()
