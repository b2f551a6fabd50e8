"""Fault soak: thousands of requests at concurrency 64 against a server that is killed, frozen and
made to misbehave on a schedule; rows lost, rows duplicated, restarts and time lost.

    .venv/bin/python benchmarks/bench_soak.py --out docs/bench_soak.md
    .venv/bin/python benchmarks/bench_soak.py --prompts 500      # a quick look

The server is tests/fake_sglang (an SGLang-shaped stand-in started by the kit as flavor `sglang`,
answers begin with a digest of their prompt) so that a restart takes seconds, not minutes; the
kit is the real `kit generate` command. Two runs of the same plan: a baseline without faults,
then the soak, where a driver watching the rows on disk fires one event per step of the plan:
`kill -9` of the server, SIGSTOP (lifted after a few seconds, or never: the kit must notice),
windows of HTTP 200 answers that are no completion or of HTTP 500s, and one SIGTERM of the kit
itself followed by the same command again (a resume). Afterwards every planned id must be in
the shards exactly once, each answering its own prompt, none of them a bad answer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_sglang"
KIT = [sys.executable, "-m", "kit.cli", "generate"]
# One event each time another share of the plan is on disk (the kit is SIGTERMed once, then resumed).
SCHEDULE = [
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
]


def write_params(tmp: Path, name: str, prompts: int, faults: Path) -> Path:
    data = tmp / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"Soak question {i}: {i} + {i}?"}) + "\n" for i in range(prompts))
    )
    env = {"PYTHONPATH": str(FAKE), "FAKE_SGLANG_FAULTS": str(faults), "FAKE_SGLANG_STEP_S": "0.005"}
    params = {
        "run": name,
        "output_dir": str(tmp / "outputs"),
        "model": {"path": str(ROOT / ".cache" / "demo" / "model")},
        "engine": {"flavor": "sglang", "startup_timeout_s": 120, "env": env},
        "data": {
            "seed": 0,
            "sources": [
                {"name": "q", "adapter": "prompt_column", "dataset": "json", "data_files": [str(data)]}
            ],
        },
        "generate": {
            "sampling": {"max_tokens": 32, "temperature": 0.7, "seed": 0, "n": 2},
            "concurrency": 64,
            "shard_rows": 200,
            "shard_seconds": 1,
            "request_timeout_s": 60,
            "hang_timeout_s": 5,
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


def servers_of(kit: subprocess.Popen) -> list[psutil.Process]:
    found = []
    try:
        kids = psutil.Process(kit.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for p in kids:
        try:
            cmdline = " ".join(p.cmdline())
            if "sglang.launch_server" in cmdline and "reaper.py" not in cmdline:  # the server, not its reaper
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def start_kit(params: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([*KIT, str(params)], stdout=log.open("ab"), stderr=subprocess.STDOUT)


class Driver:
    """Fires the scheduled events against the server and the kit while the soak runs."""

    def __init__(self, params: Path, faults: Path, log: Path) -> None:
        self.params, self.faults, self.log = params, faults, log
        self.kit = start_kit(params, log)
        self.sessions, self.events, self.exit_codes = 1, [], []
        self.thaw: list[tuple[float, list[psutil.Process]]] = []

    def fire(self, event: str) -> None:
        servers = self.wait_for_servers() if event == "kill" or event.startswith("freeze") else []
        if event == "kill":
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
            self.exit_codes.append(self.kit.wait(120))
            self.kit = start_kit(self.params, self.log)
            self.sessions += 1
        self.events.append(event)

    def wait_for_servers(self, timeout_s: float = 60.0) -> list[psutil.Process]:
        """The server processes, once there are some (a restart may be under way)."""
        deadline = time.monotonic() + timeout_s
        while not (servers := servers_of(self.kit)) and time.monotonic() < deadline:
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


def run_soak(tmp: Path, prompts: int, faulty: bool) -> dict:
    name = "soak" if faulty else "baseline"
    faults = tmp / f"faults-{name}.json"
    faults.write_text("{}")
    params = write_params(tmp, name, prompts, faults)
    gen = tmp / "outputs" / name / "generations"
    planned = 2 * prompts
    steps = [planned * (i + 1) // (len(SCHEDULE) + 2) for i in range(len(SCHEDULE))] if faulty else []
    t0 = time.monotonic()
    driver = Driver(params, faults, tmp / f"{name}.log")
    while driver.kit.poll() is None or driver.thaw:
        driver.tick()
        if steps and rows_on_disk(gen) >= steps[0] and driver.kit.poll() is None:
            steps.pop(0)
            driver.fire(SCHEDULE[len(driver.events)])
        time.sleep(0.2)
    driver.exit_codes.append(driver.kit.returncode)
    wall = time.monotonic() - t0
    if driver.exit_codes[-1] == 3:  # rows written off as failures: the documented answer is to rerun
        rerun = subprocess.run([*KIT, str(params)], capture_output=True, text=True)
        driver.exit_codes.append(rerun.returncode)
        driver.sessions += 1
    return {"wall_s": wall, **verify(tmp / "outputs" / name, planned), **vars_of(driver, tmp, name)}


def vars_of(driver: Driver, tmp: Path, name: str) -> dict:
    starts = (tmp / "outputs" / name / "logs" / "server-0.log").read_text().count("start 'server-0'")
    return {
        "events": driver.events,
        "sessions": driver.sessions,
        "exit_codes": driver.exit_codes,
        "restarts": starts - driver.sessions,
    }


def verify(run: Path, planned: int) -> dict:
    table = pq.read_table(sorted((run / "generations").glob("part-*.parquet")))
    rows = table.to_pylist()
    ids = [r["id"] for r in rows]
    plan_ids = pq.read_table(run / "prompts.parquet", columns=["id"]).column("id").to_pylist()
    wanted = {i if k == 0 else f"{i}.{k}" for i in plan_ids for k in (0, 1)}
    wrong = sum(not r["completion"].startswith(f"re:{digest(r['messages'])} ") for r in rows)
    bad = sum(r["finish_reason"] not in ("stop", "length", "tool_calls") or not r["completion"] for r in rows)
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


def report(base: dict, soak: dict, prompts: int) -> str:
    lost_s = soak["wall_s"] - base["wall_s"]
    per_event = lost_s / max(len(soak["events"]), 1)
    counts = {e: soak["events"].count(e) for e in dict.fromkeys(soak["events"])}
    events = ", ".join(f"{n} x {e}" for e, n in counts.items())
    return f"""# Fault soak: the run survives what nights bring

Command: `.venv/bin/python benchmarks/bench_soak.py --prompts {prompts} --out docs/bench_soak.md`
on {os.cpu_count()} cores shared with other work (wall times are noisy; the ratio is what to read).

{2 * prompts:,} requests ({prompts:,} prompts, n = 2), concurrency 64, against an SGLang-shaped
stand-in (tests/fake_sglang) started by the real `kit generate`. Events, one each time another
share of the plan was on disk: {events}. `freeze_short`: SIGSTOP lifted after 3 s (within the
hang timeout of 5 s: waited out); `freeze_long`: SIGSTOP never lifted (the watchdog must restart
the server); `bad_answers` / `errors`: for 3 s, 30% of answers are HTTP 200 without a completion
(no choices, null finish_reason, `abort`) or HTTP 500; `sigterm_kit`: SIGTERM to the kit, then
the same command again.

| what | baseline (no faults) | soak |
|---|---|---|
| rows planned | {base["planned"]:,} | {soak["planned"]:,} |
| rows stored | {base["rows"]:,} | {soak["rows"]:,} |
| **rows lost** | {base["lost"]} | **{soak["lost"]}** |
| **rows duplicated** | {base["duplicated"]} | **{soak["duplicated"]}** |
| rows holding another prompt's answer | {base["foreign_answers"]} | {soak["foreign_answers"]} |
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
    ap.add_argument("--prompts", type=int, default=2500, help="prompts in the plan (2 samples each)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/kit-bench-soak"))
    args = ap.parse_args()
    import shutil

    shutil.rmtree(args.tmp, ignore_errors=True)
    args.tmp.mkdir(parents=True)
    base = run_soak(args.tmp, args.prompts, faulty=False)
    soak = run_soak(args.tmp, args.prompts, faulty=True)
    text = report(base, soak, args.prompts)
    print(text)
    if args.out:
        args.out.write_text(text)
    if soak["lost"] or soak["duplicated"] or soak["foreign_answers"] or soak["bad_answers_stored"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
