"""Stage 3 on Ray against the one-process loop: the executor's cost per row, and 1 vs 2 actors.

    .venv/bin/python benchmarks/bench_ray.py --out docs/lab/bench_ray.md           # about 17 min on 2 cores
    .venv/bin/python benchmarks/bench_ray.py --parts instant --niceness-ab --out docs/lab/bench_ray.md
    .venv/bin/python benchmarks/bench_ray.py --rounds 1 --instant-rows 3000 --demo-rows 120  # a quick check

Run it from a checkout whose `.venv` has the `ray` extra (`pip install -e '.[ray]'`); the kit
imported is the one next to this script (cwd and PYTHONPATH), in the driver and in the actors.

One Ray cluster on this machine for the whole benchmark (`ray start --head`, as tests/test_ray.py
starts it: token authentication, the actors' PYTHONPATH the kit next to this script), started
before the first cell and so in no cell's time (a job joins a running cluster); it is stopped by
pid at the end (not `ray stop`, which stops every Ray instance of the user, another session's
tests' included), and started again before a cell if another session's `ray stop` took it down.
Every cell is a real `kit generate PARAMS` (the driver, as a user runs it) in a new run folder
whose prompt plan is already frozen (`--*-rows` synthetic one-message prompts, bench_client's
`kit_generate_command` way), so no cell plans anything. The cells of a part run one after
another in a round, in an order rotated each round (`--rounds`, 3), so that machine load drifts
over every cell alike; ratios are taken within a round.

Part 1, the instant server (`benchmarks/instant_server.py`, flavor `external`): one server
process for every cell. Ray hands every actor the same params, so the same `engine.base_url`:
one server per actor is not something the executor can be told. The server answers a request
in well under the client's CPU per row, so it is not the limit of any cell (its CPU per row is
in the tables). At the same total in flight `C` (`--instant-concurrency`, 64):

- `local`: `generate.executor: local`, the one-process loop, C in flight;
- `ray-1`: `executor: ray`, 1 actor, C in flight;
- `ray-2`: 2 actors, C/2 in flight each;
- with `--niceness-ab`, `ray-1-nice0`: 1 actor, C in flight, on a second head started with
  `RAY_worker_niceness=0` (Ray starts its workers, and so the actors' loops and the servers they
  start, at niceness 15).

Part 2, the demo engine (the tiny model of `.cache/demo/model` under `transformers serve` on the
CPU, started by the kit: by the driver on one machine, by each actor on Ray), `--demo-rows`
answers of `--demo-max-tokens` tokens, the same total in flight (`--demo-concurrency`, 16):
`local-1` (engine.replicas 1), `ray-1`, `ray-2` (C/2 each), `local-2` (engine.replicas 2, one
loop over both servers: what 2 replicas give without Ray). Every server runs
`--engine-threads` (1) torch threads (`engine.env.OMP_NUM_THREADS`), so that a replica is one
core wherever it runs: Ray would otherwise give an actor's server `OMP_NUM_THREADS` =
`cpus_per_actor` while a server of the local loop takes torch's default (every core).

Measured per cell, from outside the kit: the rows themselves (`finished_at` and `latency_s` of
every row: *generating* is from the first request sent to the last row received, the same clock
for both executors; *steady* is the rate between the 5% and 95% rows; *idle* adds up the gaps
over 0.1 s between two rows received), the wall time of the command (so *start* = first request
- launch: imports, joining Ray, starting actors and servers; *end* = exit - last row: flush,
manifest, actors and servers stopped), the manifest's
`generating_s`, and the CPU seconds of each process (psutil, every 0.25 s: the driver, the actors,
the Ray daemons and idle workers, the engine), per 1,000 rows and as cores while generating. Every
cell checks that each planned id is on disk exactly once. Raw results: `<--work>/bench_ray.json`
(after every cell); `--keep` keeps every cell's run folder.

Overhead per row of an executor = (time per row on Ray - time per row local) / time per row
local = rows/s local / rows/s Ray - 1, per round; scaling efficiency = rows/s with 2 / (2 x rows/s
with 1), per round, for Ray (ray-2 against ray-1) and for the one-process loop (local-2 against
local-1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RAY = Path(sys.executable).parent / "ray"
DEMO_MODEL = ROOT / ".cache" / "demo" / "model"
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
SAMPLE_S = 0.25
IDLE_GAP_S = 0.1
"""A gap longer than this between two rows received counts as idle (at 64 in flight and thousands of
rows/s the gaps are well under a millisecond; on the demo engine, a decoding step of 16 answers)."""
INSTANT_CELLS = ("local", "ray-1", "ray-2")
NICE0 = "ray-1-nice0"
"""With --niceness-ab: 1 actor on a second head whose workers run at niceness 0 (RAY_worker_niceness)."""
DEMO_CELLS = ("local-1", "ray-1", "ray-2", "local-2")


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the Ray cluster ------------------------------------------------------------------------------


class RayHead:
    """`ray start --head` for the benchmark (4 logical CPUs: two actors and room), stopped at exit.

    The actors' workers import the kit next to this script (PYTHONPATH), as the driver does. Its
    processes are told apart from any other Ray instance on the machine by their session folder
    (every daemon's command line names it; workers and agents are the raylet's children), and
    are stopped by pid: `ray stop` would stop every Ray instance of this user, another session's
    tests' included. Another session's `ray stop` can take this one down too: `ensure` starts it
    again before a Ray cell (counted in `restarts`)."""

    def __init__(self, niceness: int | None = None) -> None:
        self.niceness = niceness
        self.restarts = 0
        self.session = ""
        self.address = ""
        self.start_s = 0.0

    def __enter__(self) -> RayHead:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from bench_client import free_port

        env = {**os.environ, **RAY_ENV, "PYTHONPATH": str(ROOT)}
        if self.niceness is not None:
            env["RAY_worker_niceness"] = str(self.niceness)
        port = free_port()
        cmd = [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=4", "--include-dashboard=false"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        self.start_s = time.perf_counter() - t0
        found = set(re.findall(r"--address='([^']+)'", done.stdout + done.stderr))
        self.address = found.pop() if len(found) == 1 else f"127.0.0.1:{port}"
        self.session = self._session(port)
        if done.returncode != 0 or not self.session:
            self.stop()
            raise RuntimeError(f"ray start failed:\n{done.stderr[-3000:]}")

    def _session(self, port: int) -> str:
        """The session folder's name, from the command line of this head's GCS server or of a
        daemon that joins it (also when `ray start` failed half-way: its daemons are stopped)."""
        import psutil

        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            mine = f"--gcs-address={self.address}" in cmd or f"--gcs_server_port={port} " in cmd
            if mine and (m := re.search(r"session_[0-9_-]+", cmd)):
                return m.group(0)
        return ""

    def members(self) -> list[Any]:
        """This head's processes: the daemons that name its session folder and all their children."""
        import psutil

        if not self.session:
            return []
        found: dict[int, Any] = {}
        for p in psutil.process_iter(["cmdline"]):
            if self.session in " ".join(p.info["cmdline"] or []):
                found[p.pid] = p
                try:
                    found.update((c.pid, c) for c in p.children(recursive=True))
                except psutil.Error:
                    continue
        return list(found.values())

    def alive(self) -> bool:
        names = set()
        for p in self.members():
            try:
                names.add(p.name())
            except Exception:  # noqa: BLE001 (gone meanwhile)
                continue
        return {"gcs_server", "raylet"} <= names

    def ensure(self) -> None:
        """Start the head again if it is gone (another session's `ray stop`)."""
        if not self.alive():
            print("the Ray head is gone (another session's `ray stop`?): starting it again", flush=True)
            self.stop()
            self.start()
            self.restarts += 1

    def stop(self) -> None:
        import psutil

        procs = self.members()
        for p in procs:
            try:
                p.terminate()
            except psutil.Error:
                continue
        _, left = psutil.wait_procs(procs, timeout=10)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(left, timeout=10)


# --- CPU of every process of a cell -------------------------------------------------------------


class CpuSampler(threading.Thread):
    """CPU seconds by kind of process during a cell: `kit` (the driver and its children but the
    engine), `actors` (Ray's EngineActor workers), `ray` (daemons and idle workers), `engine` (the
    instant server or a `transformers serve`). A process that exits loses its last SAMPLE_S."""

    def __init__(self, driver: int, roots: list[Any], server: int | None) -> None:
        import psutil

        super().__init__(daemon=True)
        self.psutil, self.driver, self.roots, self.server = psutil, driver, roots, server
        self.base: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.names: dict[int, str] = {}
        self.series: list[tuple[float, dict[str, float]]] = []
        """(time, CPU s so far by kind) at every sample."""
        self.stop = threading.Event()
        for p in self._processes(first=True):
            self.base[p.pid] = self._cpu(p) or 0.0

    def _processes(self, first: bool = False) -> list[Any]:
        ps = self.psutil
        found: dict[int, Any] = {}
        tops = list(self.roots)
        if self.server is not None:
            tops.append(ps.Process(self.server))
        if not first:
            try:
                tops.append(ps.Process(self.driver))
            except ps.Error:
                pass
        for top in tops:
            try:
                found[top.pid] = top
                for child in top.children(recursive=True):
                    found[child.pid] = child
            except ps.Error:
                continue
        return list(found.values())

    def _cpu(self, p: Any) -> float | None:
        try:
            t = p.cpu_times()
            return t.user + t.system
        except self.psutil.Error:
            return None

    def _kind(self, p: Any, driver_tree: set[int]) -> str:
        try:
            cmd = " ".join(p.cmdline())
        except self.psutil.Error:
            return "gone"
        if not cmd:
            return "gone"
        if p.pid == self.server or ("transformers" in cmd and " serve " in cmd):
            return "engine"
        if cmd.startswith("ray::EngineActor"):
            return "actors"
        if p.pid in driver_tree:
            return "kit"
        return "ray"

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_S)

    def sample(self) -> None:
        ps = self.psutil
        try:
            driver_tree = {self.driver, *(c.pid for c in ps.Process(self.driver).children(recursive=True))}
        except ps.Error:
            driver_tree = {self.driver}
        for p in self._processes():
            cpu, kind = self._cpu(p), self._kind(p, driver_tree)
            before = self.last.get(p.pid, ("", 0.0))[0]
            if before in ("engine", "actors") or kind == "gone":
                kind = before or kind  # an exited process (a zombie) has no command line left
            if cpu is not None and kind != "gone":
                self.last[p.pid] = (kind, cpu)
                if p.pid not in self.names:
                    try:
                        self.names[p.pid] = " ".join(p.cmdline())[:120]
                    except ps.Error:
                        pass
        self.series.append((time.time(), self._sum()))

    def _sum(self) -> dict[str, float]:
        out = {"kit": 0.0, "actors": 0.0, "ray": 0.0, "engine": 0.0}
        for pid, (kind, cpu) in self.last.items():
            out[kind] += max(cpu - self.base.get(pid, 0.0), 0.0)
        return out

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU s by kind between two times (the samples nearest them)."""

        def at(t: float) -> dict[str, float]:
            return min(self.series, key=lambda x: abs(x[0] - t))[1] if self.series else self._sum()

        a, b = at(t0), at(t1)
        return {k: max(b[k] - a[k], 0.0) for k in a}

    def totals(self) -> dict[str, float]:
        self.stop.set()
        self.join(5)
        return self._sum()

    def top(self, n: int = 8) -> list[tuple[str, str, float]]:
        """The processes that took the most CPU in the cell: (kind, command line, CPU s)."""
        used = [
            (k, self.names.get(pid, "?"), c - self.base.get(pid, 0.0)) for pid, (k, c) in self.last.items()
        ]
        return sorted(used, key=lambda x: -x[2])[:n]


# --- one cell -------------------------------------------------------------------------------------


def params_for(work: Path, part: str, cell: str, args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    """The params of one cell: the executor, actors or replicas and in flight per loop."""
    kind, _, rest = cell.partition("-")
    loops = int(rest.split("-")[0] or 1)
    if part == "instant":
        (work / "model").mkdir(parents=True, exist_ok=True)
        model, engine = str(work / "model"), {"flavor": "external", "base_url": url}
        total, sampling = args.instant_concurrency, {"max_tokens": 512}
    else:
        model = str(DEMO_MODEL)
        engine = {
            "flavor": "transformers",
            "device": "cpu",
            "startup_timeout_s": 300,
            "env": {"OMP_NUM_THREADS": str(args.engine_threads)},
        }
        total = args.demo_concurrency
        sampling = {"max_tokens": args.demo_max_tokens, "temperature": 0.7, "seed": 0}
    generate: dict[str, Any] = {"sampling": sampling, "request_timeout_s": 300}
    if kind == "ray":
        generate.update(executor="ray", concurrency=max(total // loops, 1))
        generate["ray"] = {"actors": loops, "cpus_per_actor": 1}
    else:
        generate.update(executor="local", concurrency=total)
        engine["replicas"] = loops
    return {
        "run": "bench",
        "output_dir": str(work / "out"),
        "model": {"path": model},
        "engine": engine,
        "generate": generate,
    }


def prepare(work: Path, params: dict[str, Any], n: int) -> list[str]:
    """A run folder with an `n`-prompt plan frozen (no planning in the cell); the command."""
    import pyarrow.parquet as pq
    import yaml
    from bench_generate import prompts_table

    from kit.params import load_params
    from kit.prompts.prompt_set import data_hash
    from kit.runfolder import RunFolder

    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    p = load_params(path)
    folder = RunFolder(p.run_dir).ensure()
    pq.write_table(prompts_table(n), folder.prompts)
    (folder.root / "prompts.hash").write_text(data_hash(p))
    return [sys.executable, "-m", "kit.cli", "generate", str(path)]


def row_times(run: Path) -> dict[str, Any]:
    """From the rows on disk: first request sent, last row, the 5% / 95% rows' times, tokens, ids."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(run / "generations", columns=["id", "finished_at", "latency_s", "completion_tokens"])
    done = t.column("finished_at").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy() / 1e6
    sent = done - t.column("latency_s").to_numpy(zero_copy_only=False)
    ids = t.column("id").to_pylist()
    order = np.sort(done)
    lo, hi = order[int(0.05 * len(order))], order[int(0.95 * len(order)) - 1]
    gaps = np.diff(order)
    return {
        "rows": len(ids),
        "unique_ids": len(set(ids)),
        "first_sent": float(sent.min()),
        "last_done": float(done.max()),
        "steady_rows_s": float((int(0.95 * len(order)) - int(0.05 * len(order)) - 1) / max(hi - lo, 1e-9)),
        "idle_s": float(gaps[gaps > IDLE_GAP_S].sum()),
        "tokens": int(sum(v or 0 for v in t.column("completion_tokens").to_pylist())),
    }


def one_cell(
    part: str,
    cell: str,
    n: int,
    args: argparse.Namespace,
    heads: dict[str, RayHead],
    server: Any,
    url: str | None,
) -> dict[str, Any]:
    head = heads[NICE0] if cell == NICE0 else heads["default"]
    work = Path(tempfile.mkdtemp(prefix=f"{part}-{cell}-", dir=args.work))
    cmd = prepare(work, params_for(work, part, cell, args, url), n)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if cell.startswith("ray"):
        env.update(RAY_ENV, RAY_ADDRESS=head.address)
    load = os.getloadavg()[0]
    with open(work / "kit.log", "wb") as log:
        launched = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        roots = [p for h in heads.values() for p in h.members()]
        sampler = CpuSampler(proc.pid, roots, server.pid if server is not None else None)
        sampler.start()
        code = proc.wait()
        ended = time.time()
        cpu = sampler.totals()
    run = work / "out" / "bench"
    if code != 0:
        tail = (work / "kit.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{part} {cell}: kit generate exited {code}; {work / 'kit.log'}:\n{tail}")
    manifest = json.loads((run / "manifest.json").read_text())
    rt = row_times(run)
    if not (manifest["complete"] and rt["rows"] == rt["unique_ids"] == n):
        raise RuntimeError(f"{part} {cell}: {rt['rows']} rows, {rt['unique_ids']} ids, {n} planned")
    generating = rt["last_done"] - rt["first_sent"]
    out = {
        "part": part,
        "cell": cell,
        "rows": n,
        "load_1m": load,
        "wall_s": ended - launched,
        "start_s": rt["first_sent"] - launched,
        "generating_s": generating,
        "end_s": ended - rt["last_done"],
        "manifest_generating_s": manifest["generating_s"],
        "rows_s": n / generating,
        "steady_rows_s": rt["steady_rows_s"],
        "idle_s": rt["idle_s"],
        "wall_rows_s": n / (ended - launched),
        "tok_s": rt["tokens"] / generating,
        "cpu_s": cpu,
        "cpu_generating_s": sampler.between(rt["first_sent"], rt["last_done"]),
        "cpu_top": sampler.top(),
    }
    ray = manifest.get("ray") or {}
    if ray:
        out["blocks"] = ray["blocks"]
        out["actor_rows"] = [a["rows"] for a in ray["actors"]]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


# --- the parts ------------------------------------------------------------------------------------


def run_part(
    part: str,
    cells: tuple[str, ...],
    n: int,
    args: argparse.Namespace,
    heads: dict[str, RayHead],
    results: list,
) -> None:
    import instant_server

    server, url = None, None
    if part == "instant":
        ready = args.work / "instant.port"
        ready.unlink(missing_ok=True)  # a file left by an earlier run would give its port
        server, port = instant_server.start(str(ready), log=open(args.work / "instant.log", "ab"))
        url = f"http://127.0.0.1:{port}"
    try:
        for rnd in range(args.rounds):
            k = rnd % len(cells)
            for cell in cells[k:] + cells[:k]:
                head = heads[NICE0] if cell == NICE0 else heads["default"]
                for attempt in (0, 1):
                    head.ensure()
                    try:
                        r = one_cell(part, cell, n, args, heads, server, url)
                        break
                    except RuntimeError as e:
                        if attempt or head.alive():
                            raise
                        print(
                            f"{part} {cell}: the Ray head went away under it ({e!s:.200}); again", flush=True
                        )
                r["round"], r["attempt"] = rnd, attempt
                results.append(r)
                (args.work / "bench_ray.json").write_text(json.dumps(results, indent=1))
                print(
                    f"{part} round {rnd} {cell:<8} {r['rows_s']:8.1f} rows/s generating "
                    f"({r['steady_rows_s']:.1f} steady, {r['wall_rows_s']:.1f} wall); "
                    f"start {r['start_s']:.1f} s, generating {r['generating_s']:.1f} s, "
                    f"end {r['end_s']:.1f} s; load {r['load_1m']:.2f}",
                    flush=True,
                )
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


# --- the report -----------------------------------------------------------------------------------


def spread(values: list[float], fmt: str = ",.1f", suffix: str = "") -> str:
    """Median (min to max)."""
    if not values:
        return "n/a"
    med, lo, hi = statistics.median(values), min(values), max(values)
    if len(values) == 1:
        return f"{med:{fmt}}{suffix}"
    return f"{med:{fmt}}{suffix} ({lo:{fmt}} to {hi:{fmt}})"


def by_cell(results: list[dict], part: str) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for r in results:
        if r["part"] == part:
            out.setdefault(r["cell"], {})[r["round"]] = r
    return out


def paired(cells: dict[str, dict[int, dict]], a: str, b: str, f: Any) -> list[float]:
    """f(cell a's result, cell b's result) for every round that has both."""
    if a not in cells or b not in cells:
        return []
    return [f(cells[a][k], cells[b][k]) for k in sorted(cells[a]) if k in cells[b]]


KIT = ("kit", "actors")
"""The kit's own processes: the driver (on one machine: the loop) and the actors (on Ray: the loops)."""


def cpu_per_k(r: dict, kinds: tuple[str, ...], phase: str = "cpu_generating_s") -> float:
    """CPU s per 1,000 rows of these kinds of process, while generating (or over the whole cell)."""
    return 1000 * sum(r[phase][k] for k in kinds) / r["rows"]


def cores_used(r: dict, kinds: tuple[str, ...]) -> float:
    """CPU s of these kinds of process while generating / the time generating: the cores they had."""
    return sum(r["cpu_generating_s"][k] for k in kinds) / r["generating_s"]


def fmt_cpu(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.0f}"


def cell_table(cells: dict[str, dict[int, dict]], order: tuple[str, ...], tokens: bool) -> list[str]:
    head = "| cell | rows/s generating | rows/s steady (5-95%) | " + ("tok/s | " if tokens else "")
    head += "generating s | of which idle s | start s | end s | wall s | manifest generating_s | "
    head += "CPU s / 1k rows while generating: kit, Ray, engine | cores while generating: kit, engine "
    head += "| CPU s in the cell: kit, Ray |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for cell in order:
        rs = list(cells.get(cell, {}).values())
        if not rs:
            continue
        row = [f"`{cell}`", spread([r["rows_s"] for r in rs]), spread([r["steady_rows_s"] for r in rs])]
        row += [spread([r["tok_s"] for r in rs], ",.0f")] if tokens else []
        row += [spread([r[k] for r in rs]) for k in ("generating_s", "idle_s", "start_s", "end_s", "wall_s")]
        row.append(spread([r["manifest_generating_s"] for r in rs]))
        per_k = [statistics.median(cpu_per_k(r, kinds) for r in rs) for kinds in (KIT, ("ray",), ("engine",))]
        row.append(", ".join(fmt_cpu(v) for v in per_k))
        cores = [statistics.median(cores_used(r, kinds) for r in rs) for kinds in (KIT, ("engine",))]
        row.append(", ".join(f"{v:.2f}" for v in cores))
        whole = [
            statistics.median(sum(r["cpu_s"][k] for k in kinds) for r in rs) for kinds in (KIT, ("ray",))
        ]
        row.append(", ".join(f"{v:.1f}" for v in whole))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def every_run(results: list[dict], part: str) -> list[str]:
    lines = [
        "| round | cell | load (1 min) | rows/s generating | steady | generating s | start s | end s "
        "| wall s | CPU s in the cell: driver, actors, Ray, engine | rows per actor (blocks) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["part"] != part:
            continue
        actors = " + ".join(str(x) for x in r.get("actor_rows", []))
        actors = f"{actors} ({r['blocks']})" if actors else "-"
        cpu = ", ".join(f"{r['cpu_s'][k]:.1f}" for k in ("kit", "actors", "ray", "engine"))
        lines.append(
            f"| {r['round']} | `{r['cell']}` | {r['load_1m']:.2f} | {r['rows_s']:,.1f} "
            f"| {r['steady_rows_s']:,.1f} | {r['generating_s']:.1f} | {r['start_s']:.1f} "
            f"| {r['end_s']:.1f} | {r['wall_s']:.1f} | {cpu} | {actors} |"
        )
    return lines


def overhead(local: dict, ray: dict, key: str = "rows_s") -> float:
    """(time per row on Ray - time per row local) / time per row local, in %."""
    return 100 * (local[key] / ray[key] - 1)


def cpu_overhead(local: dict, ray: dict) -> float:
    """(CPU per row of the kit and Ray on Ray - the one-process loop's) / the loop's, while generating, %."""
    mine = (*KIT, "ray")
    return 100 * (cpu_per_k(ray, mine) / cpu_per_k(local, mine) - 1)


def efficiency(one: dict, two: dict, key: str = "rows_s") -> float:
    return 100 * two[key] / (2 * one[key])


def overhead_rows(cells: dict[str, dict[int, dict]], pairs: list[tuple[str, str]]) -> list[str]:
    lines = [
        "| | rows/s generating | rows/s steady | rows/s over the wall time | CPU per row while generating "
        "(kit + Ray) |",
        "|---|---|---|---|---|",
    ]
    for local, ray in pairs:
        if local not in cells or ray not in cells:
            continue
        cols = [
            spread(paired(cells, local, ray, lambda a, b, k=k: overhead(a, b, k)), "+.1f", "%")
            for k in ("rows_s", "steady_rows_s", "wall_rows_s")
        ]
        cols.append(spread(paired(cells, local, ray, cpu_overhead), "+.0f", "%"))
        lines.append(f"| `{ray}` against `{local}` | " + " | ".join(cols) + " |")
    return lines


def efficiency_rows(cells: dict[str, dict[int, dict]], pairs: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| | rows/s generating | rows/s steady | rows/s over the wall time |", "|---|---|---|---|"]
    for name, one, two in pairs:
        cols = [
            spread(paired(cells, one, two, lambda a, b, k=k: efficiency(a, b, k)), ".0f", "%")
            for k in ("rows_s", "steady_rows_s", "wall_rows_s")
        ]
        lines.append(f"| {name}: `{two}` / (2 x `{one}`) | " + " | ".join(cols) + " |")
    return lines


def report(args: argparse.Namespace, results: list[dict], ctx: dict[str, Any]) -> str:
    cmd = " ".join([".venv/bin/python benchmarks/bench_ray.py", *sys.argv[1:]])
    nice = "Ray's default, 15" + (
        f" (`{NICE0}`: a second head started with RAY_worker_niceness=0)" if args.niceness_ab else ""
    )
    lines = [
        f"## Run of {ctx['date']}",
        "",
        "```",
        cmd,
        "```",
        "",
        f"Commit {ctx['commit']}, {os.cpu_count()} cores shared with other "
        f"sessions' work; load average (1 / 5 / 15 min) at start {ctx['load_start']}, at end "
        f"{ctx['load_end']}; `ray start --head` took {ctx['ray_start_s']:.1f} s (in no cell; started "
        f"again {ctx.get('ray_restarts', 0)} time(s) after another session's `ray stop` took it down). "
        f"Ray workers' niceness: {nice}. "
        f"{args.rounds} round(s); every figure is a median with (min to max) over rounds. CPU kinds: "
        "*kit* = the `kit generate` process (and, on Ray, the actors' workers), *Ray* = Ray's daemons "
        "and idle workers, *engine* = the server(s).",
    ]
    inst = by_cell(results, "instant")
    if inst:
        c = args.instant_concurrency
        lines += [
            "",
            f"### The instant server: {args.instant_rows:,} rows a cell, {c} in flight in all",
            "",
            *cell_table(inst, (*INSTANT_CELLS, NICE0), tokens=False),
            "",
            "The executor's overhead per row against the one-process loop, per round:",
            "",
            *overhead_rows(
                inst, [("local", "ray-1"), ("local", "ray-2"), ("local", NICE0), ("ray-1", NICE0)]
            ),
            "",
            *efficiency_rows(inst, [("Ray", "ray-1", "ray-2")]),
        ]
    demo = by_cell(results, "demo")
    if demo:
        c = args.demo_concurrency
        lines += [
            "",
            f"### The demo engine: {args.demo_rows:,} rows of {args.demo_max_tokens} tokens a cell, {c} in "
            f"flight in all, {args.engine_threads} torch thread(s) per server",
            "",
            *cell_table(demo, DEMO_CELLS, tokens=True),
            "",
            "The executor's overhead per row against the one-process loop with as many replicas, per round:",
            "",
            *overhead_rows(demo, [("local-1", "ray-1"), ("local-2", "ray-2")]),
            "",
            "Scaling efficiency, per round:",
            "",
            *efficiency_rows(demo, [("Ray", "ray-1", "ray-2"), ("one process", "local-1", "local-2")]),
        ]
    for part, title in (("instant", "the instant server"), ("demo", "the demo engine")):
        if by_cell(results, part):
            lines += ["", f"#### Every run, {title}", "", *every_run(results, part)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", nargs="+", default=["instant", "demo"], choices=["instant", "demo"])
    ap.add_argument("--instant-rows", type=int, default=50_000, help="rows per cell, instant server")
    ap.add_argument("--instant-concurrency", type=int, default=64, help="in flight in all, instant server")
    ap.add_argument("--demo-rows", type=int, default=600, help="rows per cell, demo engine")
    ap.add_argument("--demo-concurrency", type=int, default=16, help="in flight in all, demo engine")
    ap.add_argument("--demo-max-tokens", type=int, default=32)
    ap.add_argument("--engine-threads", type=int, default=1, help="torch threads of each demo server")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench_ray")
    ap.add_argument(
        "--niceness-ab",
        action="store_true",
        help=f"add `{NICE0}` to the instant server's cells: 1 actor on a second Ray head started with "
        "RAY_worker_niceness=0 (Ray runs its workers, and so the actors' servers, at niceness 15)",
    )
    ap.add_argument("--out", type=Path, help="append the results (markdown) to this file")
    ap.add_argument("--keep", action="store_true", help="keep every cell's run folder under --work")
    ap.add_argument("--commit", help="the commit measured (default: git rev-parse of this checkout)")
    ap.add_argument("--report-only", action="store_true", help="report <work>/bench_ray.json again")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    commit = (
        args.commit
        or subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    ctx: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or "n/a",
        "load_start": load_average(),
    }
    saved = args.work / "bench_ray.json"
    if args.report_only:
        results = json.loads(saved.read_text())
        ctx.update(json.loads((args.work / "context.json").read_text()))
    else:
        results: list[dict] = []
        with ExitStack() as stack:
            heads = {"default": stack.enter_context(RayHead())}
            if args.niceness_ab:
                heads[NICE0] = stack.enter_context(RayHead(niceness=0))
            head = heads["default"]
            ctx["ray_start_s"] = head.start_s
            print(f"Ray head at {head.address} ({head.start_s:.1f} s); load {load_average()}", flush=True)
            if "instant" in args.parts:
                cells = INSTANT_CELLS + ((NICE0,) if args.niceness_ab else ())
                run_part("instant", cells, args.instant_rows, args, heads, results)
            if "demo" in args.parts:
                run_part("demo", DEMO_CELLS, args.demo_rows, args, heads, results)
            ctx["ray_restarts"] = sum(h.restarts for h in heads.values())
        ctx["load_end"] = load_average()
        (args.work / "context.json").write_text(json.dumps(ctx))
    text = report(args, results, ctx)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
