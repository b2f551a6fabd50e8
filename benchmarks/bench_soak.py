"""Fault soak: thousands of requests at concurrency 64 against a server that is killed, frozen and
made to misbehave on a schedule; rows lost, rows duplicated, restarts and time lost.

    .venv/bin/python benchmarks/bench_soak.py --out docs/lab/bench_soak.md               # both engines
    .venv/bin/python benchmarks/bench_soak.py --engines fake --prompts 500           # a quick look

Engine `fake`: tests/fake_sglang (an SGLang-shaped stand-in started by the kit as flavor `sglang`;
its answers begin with a digest of their prompt, and it serves bad answers and 500s when told),
so that a restart takes seconds: 2,500 prompts x 2 samples at concurrency 64. Engine `vllm`: the
real vLLM (CPU build, .venv-vllm, `make engine-vllm`) on the demo model, a shorter plan and
schedule, since each of its starts takes a minute or more here. The kit is the real `kit
generate` command. Per engine, two runs of the same plan: a baseline without faults, then the
soak, where a driver watching the rows on disk fires one event per step of the plan: `kill -9`
of the server process, SIGSTOP (lifted after 3 s, or never: the kit must notice), windows of
HTTP 200 answers that are no completion or of HTTP 500s (fake only), a server that answers /health
but makes no token (the fake's stuck fault; on vLLM its engine-core process stopped while the API
server answers), the kit's stderr closed by its reader (a dropped ssh session or log pipe), and one
SIGTERM of the kit itself followed by the same command again (a resume). A fifth of the plan is
Hermes function-calling rows, half of them with no tools (`"tools": "[]"`: vLLM answers 400 to an
empty tools array). Afterwards every planned id must be in the shards exactly once, none of them a
bad answer (and, on the fake, each answering its own prompt).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_sglang"
KIT = [sys.executable, "-m", "kit.cli", "generate"]


@dataclass(frozen=True)
class Engine:
    """How one engine is soaked: its params, how its server process is named, the schedule."""

    flavor: str
    server_match: str
    """A piece of the server process's command line (its reaper's also names it, and is skipped)."""
    schedule: tuple[str, ...]
    """One event each time another share of the plan is on disk."""
    prompts: int
    concurrency: int
    hang_timeout_s: float
    digests: bool
    """Answers begin with `re:<digest of the prompt>` (the fake), so each can be traced to its prompt."""

    def section(self, faults: Path) -> dict:
        if self.flavor == "sglang":
            env = {"PYTHONPATH": str(FAKE), "FAKE_SGLANG_FAULTS": str(faults), "FAKE_SGLANG_STEP_S": "0.005"}
            return {"flavor": "sglang", "startup_timeout_s": 120, "env": env}
        return {
            "flavor": "vllm",
            "python": str(ROOT / ".venv-vllm" / "bin" / "python"),
            "startup_timeout_s": 900,
            "context_length": 2048,
            "extra_args": ["--dtype", "float32"],
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        }


ENGINES = {
    "fake": Engine(
        "sglang",
        "sglang.launch_server",
        (
            "kill",
            "bad_answers",
            "freeze_short",
            "kill",
            "errors",
            "kill",
            "freeze_long",
            "sigterm_kit",
            "kill",
            "bad_answers",
            "freeze_short",
            "kill",
            "freeze_long",
            "stuck",
            "close_stderr",
        ),  # fmt: skip
        prompts=2500,
        concurrency=64,
        hang_timeout_s=5,
        digests=True,
    ),
    "vllm": Engine(
        "vllm",
        "vllm.entrypoints.openai.api_server",
        ("kill", "freeze_short", "close_stderr", "stuck", "sigterm_kit"),
        prompts=900,  # enough rows between events that each has its effect before the next
        concurrency=64,
        hang_timeout_s=20,
        digests=False,
    ),
}


TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    },
}


def hermes_row(i: int) -> dict:
    """A Hermes function-calling row; every other one offers no tools (`"[]"`, as some real rows do)."""
    tools = json.dumps([TOOL]) if i % 2 else "[]"
    return {
        "id": f"h{i}",
        "conversations": [
            {"from": "system", "value": "You are a helpful assistant."},
            {"from": "human", "value": f"Soak request {i}: what is {i} plus {i + 1}?"},
            {"from": "gpt", "value": str(2 * i + 1)},
        ],
        "tools": tools,
    }


def write_params(tmp: Path, name: str, engine: Engine, faults: Path) -> Path:
    data, hermes = tmp / "prompts.jsonl", tmp / "hermes.jsonl"
    n_hermes = engine.prompts // 5
    data.write_text(
        "".join(
            json.dumps({"prompt": f"Soak question {i}: {i} + {i}?"}) + "\n"
            for i in range(engine.prompts - n_hermes)
        )
    )
    hermes.write_text("".join(json.dumps(hermes_row(i)) + "\n" for i in range(n_hermes)))
    params = {
        "run": name,
        "output_dir": str(tmp / "outputs"),
        "model": {"path": str(ROOT / ".cache" / "demo" / "model")},
        "engine": engine.section(faults),
        "data": {
            "seed": 0,
            "sources": [
                {"name": "q", "adapter": "prompt_column", "dataset": "json", "data_files": [str(data)]},
                {"name": "h", "adapter": "hermes_fc", "dataset": "json", "data_files": [str(hermes)]},
            ],
        },
        "generate": {
            "sampling": {"max_tokens": 32, "temperature": 0.7, "seed": 0, "n": 2},
            "concurrency": engine.concurrency,
            "shard_rows": 200,
            "shard_seconds": 1,
            "request_timeout_s": 120,
            "hang_timeout_s": engine.hang_timeout_s,
            "retries": 3,
            "use_decision": False,
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def rows_on_disk(gen: Path) -> int:
    paths = sorted(gen.glob("part-*.parquet"))
    try:
        return pq.read_table(paths, columns=["id"]).num_rows if paths else 0
    except (OSError, ValueError):  # a shard renamed away between listing and reading
        return 0


def servers_of(kit: subprocess.Popen, match: str) -> list[psutil.Process]:
    found = []
    try:
        kids = psutil.Process(kit.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for p in kids:
        try:
            cmdline = " ".join(p.cmdline())
            if match in cmdline and "reaper.py" not in cmdline:  # the server, not its reaper
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def start_kit(params: Path, log: Path) -> subprocess.Popen:
    """`kit generate`, its stdout into `log`, its stderr through a pipe this process reads (into the
    same log) until the `close_stderr` event closes it."""
    return subprocess.Popen([*KIT, str(params)], stdout=log.open("ab"), stderr=subprocess.PIPE)


class StderrReader(threading.Thread):
    """Copies the kit's stderr into the log until told to close the pipe (then the kit's writes to
    stderr fail with EPIPE, as when an ssh session drops)."""

    def __init__(self, kit: subprocess.Popen, log: Path) -> None:
        super().__init__(daemon=True)
        self.pipe, self.log, self.closing = kit.stderr, log, threading.Event()
        self.start()

    def run(self) -> None:
        fd = self.pipe.fileno()  # type: ignore[union-attr]
        with self.log.open("ab") as out:
            while not self.closing.is_set():
                if select.select([fd], [], [], 0.2)[0]:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        return
                    out.write(chunk)
        self.pipe.close()  # type: ignore[union-attr]  # the reader is gone: the kit's next write fails


class Driver:
    """Fires the scheduled events against the server and the kit while the soak runs."""

    def __init__(self, params: Path, faults: Path, log: Path, match: str) -> None:
        self.params, self.faults, self.log, self.match = params, faults, log, match
        self.kit = start_kit(params, log)
        self.reader = StderrReader(self.kit, log)
        self.sessions, self.events, self.exit_codes = 1, [], []
        self.fired_at, self.hung_pids = 0.0, set()
        self.thaw: list[tuple[float, list[psutil.Process]]] = []

    def fire(self, event: str) -> None:
        waits = event in ("kill", "stuck") or event.startswith("freeze")
        servers = self.wait_for_servers() if waits else []
        if event == "stuck" and "sglang" in self.match:  # the fake: this process stops generating
            self.faults.write_text(json.dumps({"stuck_after": 0, "stuck_pid": servers[0].pid}))
        elif event == "stuck":  # vLLM: its engine core stopped, the API server still answers /health
            for p in servers:
                for child in p.children(recursive=True):
                    if "EngineCore" in " ".join(child.cmdline()) or child.name().startswith("VLLM::Engine"):
                        child.suspend()
        elif event == "close_stderr":
            self.reader.closing.set()
        elif event == "kill":
            for p in servers:
                p.kill()
        elif event.startswith("freeze"):
            for p in servers:
                p.suspend()
            if event == "freeze_short":  # lifted before the hang timeout: waited out, no restart
                self.thaw.append((time.monotonic() + 3.0, servers))
        elif event in ("bad_answers", "errors"):
            key = "bad_rate" if event == "bad_answers" else "error_rate"
            self.faults.write_text(json.dumps({key: 0.3}))
            self.thaw.append((time.monotonic() + 3.0, []))
        elif event == "sigterm_kit":
            self.kit.send_signal(signal.SIGTERM)
            self.exit_codes.append(self.kit.wait(300))
            self.reader.closing.set()
            self.kit = start_kit(self.params, self.log)
            self.reader = StderrReader(self.kit, self.log)
            self.sessions += 1
        self.events.append(event)
        self.fired_at, self.hung_pids = time.monotonic(), {p.pid for p in servers}

    def settled(self, hang_timeout_s: float) -> bool:
        """Whether the last event has had its effect, so the next may fire: 2 s after any; after a
        hang (`stuck`, `freeze_long`), once the kit has replaced the server (or 4 hang timeouts on)."""
        if not self.events:
            return True
        waited = time.monotonic() - self.fired_at
        if self.events[-1] in ("stuck", "freeze_long"):
            now = {p.pid for p in servers_of(self.kit, self.match)}
            return (bool(now) and not now & self.hung_pids) or waited > 4 * hang_timeout_s
        return waited > 2.0

    def wait_for_servers(self, timeout_s: float = 900.0) -> list[psutil.Process]:
        """The server processes, once there are some (a restart may be under way)."""
        deadline = time.monotonic() + timeout_s
        while not (servers := servers_of(self.kit, self.match)) and time.monotonic() < deadline:
            if self.kit.poll() is not None:  # the kit finished in between: nothing to fire at
                return []
            time.sleep(0.1)
        if not servers:
            raise RuntimeError(f"no server under the kit after {timeout_s} s; see {self.log}")
        return servers

    def tick(self) -> None:
        now = time.monotonic()
        for due, procs in [t for t in self.thaw if t[0] <= now]:
            self.thaw.remove((due, procs))
            if not procs:
                self.faults.write_text("{}")
            for p in procs:
                try:
                    p.resume()
                except psutil.NoSuchProcess:
                    pass


def run_soak(tmp: Path, engine: Engine, faulty: bool) -> dict:
    name = "soak" if faulty else "baseline"
    faults = tmp / f"faults-{name}.json"
    faults.write_text("{}")
    params = write_params(tmp, name, engine, faults)
    gen = tmp / "outputs" / name / "generations"
    planned = 2 * engine.prompts
    n = len(engine.schedule)
    steps = [planned * (i + 1) // (n + 2) for i in range(n)] if faulty else []
    t0 = time.monotonic()
    driver = Driver(params, faults, tmp / f"{name}.log", engine.server_match)
    while driver.kit.poll() is None or driver.thaw:
        driver.tick()
        ready = driver.settled(engine.hang_timeout_s)
        if steps and ready and rows_on_disk(gen) >= steps[0] and driver.kit.poll() is None:
            steps.pop(0)
            driver.fire(engine.schedule[len(driver.events)])
        time.sleep(0.2)
    driver.exit_codes.append(driver.kit.returncode)
    wall = time.monotonic() - t0
    if driver.exit_codes[-1] == 3:  # rows written off as failures: the documented answer is to rerun
        rerun = subprocess.run([*KIT, str(params)], capture_output=True, text=True)
        driver.exit_codes.append(rerun.returncode)
        driver.sessions += 1
    found = verify(tmp / "outputs" / name, planned, engine.digests)
    return {"wall_s": wall, **found, **vars_of(driver, tmp, name)}


def vars_of(driver: Driver, tmp: Path, name: str) -> dict:
    log = (tmp / "outputs" / name / "logs" / "server-0.log").read_text()
    return {
        "events": driver.events,
        "sessions": driver.sessions,
        "exit_codes": driver.exit_codes,
        "restarts": log.count("start 'server-0'") - driver.sessions,
        "bad_answers_served": sum(
            log.count(f"injected fault {k}") for k in ("no_choices", "null_finish", "abort")
        ),
        "errors_served": log.count("injected fault error"),
    }


def verify(run: Path, planned: int, digests: bool) -> dict:
    table = pq.read_table(sorted((run / "generations").glob("part-*.parquet")))
    rows = table.to_pylist()
    ids = [r["id"] for r in rows]
    plan_ids = pq.read_table(run / "prompts.parquet", columns=["id"]).column("id").to_pylist()
    wanted = {i if k == 0 else f"{i}.{k}" for i in plan_ids for k in (0, 1)}
    wrong = (
        sum(not r["completion"].startswith(f"re:{digest(r['messages'])} ") for r in rows) if digests else "-"
    )
    # an answer cut while thinking has its text in `reasoning` only: not a bad answer
    bad = sum(
        r["finish_reason"] not in ("stop", "length", "tool_calls")
        or not (r["completion"] or r.get("reasoning") or r.get("tool_calls"))
        for r in rows
    )
    failures = (run / "failures.jsonl").read_text().splitlines()
    return {
        "planned": planned,
        "rows": len(ids),
        "lost": len(wanted - set(ids)),
        "duplicated": len(ids) - len(set(ids)),
        "foreign_answers": wrong,
        "bad_answers_stored": bad,
        "failures_recorded": len(failures),
    }


def digest(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]


def sessions(result: dict) -> str:
    return f"{result['sessions']} ({', '.join(map(str, result['exit_codes']))})"


EVENTS = """Events: `kill`: SIGKILL of the server process; `freeze_short`: SIGSTOP lifted after 3 s (within
the hang timeout: waited out); `freeze_long`: SIGSTOP never lifted (the watchdog must restart the
server); `bad_answers` / `errors`: for 3 s, 30% of answers are HTTP 200 without a completion (no
choices, null finish_reason, `abort`) or HTTP 500; `stuck`: the server answers /health but makes
no token (the fake's stuck fault; vLLM's engine-core process stopped); `close_stderr`: the kit's
stderr pipe closed by its reader for the rest of that session; `sigterm_kit`: SIGTERM to the kit,
then the same command again. A fifth of each plan is Hermes rows, half of them without tools."""


def report(name: str, engine: Engine, base: dict, soak: dict) -> str:
    lost_s = soak["wall_s"] - base["wall_s"]
    per_event = lost_s / max(len(soak["events"]), 1)
    counts = {e: soak["events"].count(e) for e in dict.fromkeys(soak["events"])}
    events = ", ".join(f"{n} x {e}" for e, n in counts.items())
    server = (
        "an SGLang-shaped stand-in (tests/fake_sglang)" if name == "fake" else "the real vLLM (CPU build)"
    )
    return f"""## Engine `{name}`: {server}

{2 * engine.prompts:,} requests ({engine.prompts:,} prompts, n = 2), concurrency {engine.concurrency},
hang timeout {engine.hang_timeout_s:g} s. Events in the soak, one each time another share of the
plan was on disk: {events}.

| what | baseline (no faults) | soak |
|---|---|---|
| rows planned | {base["planned"]:,} | {soak["planned"]:,} |
| rows stored | {base["rows"]:,} | {soak["rows"]:,} |
| **rows lost** | {base["lost"]} | **{soak["lost"]}** |
| **rows duplicated** | {base["duplicated"]} | **{soak["duplicated"]}** |
| rows holding another prompt's answer | {base["foreign_answers"]} | {soak["foreign_answers"]} |
| HTTP 200 answers without a completion served | {base["bad_answers_served"]} | {soak["bad_answers_served"]} |
| HTTP 500 answers served | {base["errors_served"]} | {soak["errors_served"]} |
| bad answers stored as rows | {base["bad_answers_stored"]} | {soak["bad_answers_stored"]} |
| failures recorded (retried on rerun) | {base["failures_recorded"]} | {soak["failures_recorded"]} |
| server restarts (by the kit) | {base["restarts"]} | {soak["restarts"]} |
| kit sessions (exit codes) | {sessions(base)} | {sessions(soak)} |
| wall time | {base["wall_s"]:.1f} s | {soak["wall_s"]:.1f} s |
| **time lost to the faults** | | **{lost_s:.1f} s** ({per_event:.1f} s per event) |
| soak / baseline wall time | | {soak["wall_s"] / base["wall_s"]:.2f} |
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="fake,vllm", help="comma-separated: fake, vllm")
    ap.add_argument("--prompts", type=int, default=None, help="prompts in each plan (2 samples each)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/kit-bench-soak"))
    args = ap.parse_args()
    import shutil

    sections, broken = [], False
    for name in args.engines.split(","):
        engine = ENGINES[name]
        if args.prompts:
            engine = replace(engine, prompts=args.prompts)
        tmp = args.tmp / name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        base = run_soak(tmp, engine, faulty=False)
        soak = run_soak(tmp, engine, faulty=True)
        sections.append(report(name, engine, base, soak))
        broken |= bool(soak["lost"] or soak["duplicated"] or soak["bad_answers_stored"])
        broken |= soak["foreign_answers"] not in (0, "-")
    command = " ".join(["benchmarks/bench_soak.py", *sys.argv[1:]])
    text = f"""# Fault soak: the run survives what nights bring

Command: `.venv/bin/python {command}` on {os.cpu_count()} cores shared with other work (wall times are
noisy: compare the soak with the baseline measured just before it).

{EVENTS}

""" + "\n".join(sections)
    print(text)
    if args.out:
        args.out.write_text(text)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
