"""How often does the sweep's disturbance check flag a quiet machine, old check against new?

    python3 benchmarks/bench_disturbance.py --out DIR      # about 80 s; prints a JSON summary
    python3 benchmarks/bench_disturbance.py --out DIR --rejudge docs/lab/h200/sglang   # recorded sweeps

Uses the kit of this checkout (kit.decide.machine.watch; psutil, and nvidia-ml-py where the box has GPUs),
no engine and no GPU work. A synthetic engine (a child process that computes one core's worth while
a "level" runs, idle between levels, free to run on any CPU as a real server is) stands in for the
measured server; the kit's process runs a client thread during each level, as the sweep's client
does. Around each level, the sweep's two readings (`MachineReading.now` / `interference`).

1. canary: the CPU canary alone and beside two busy threads of the kit's own process (one holding
   the GIL, one hashing without it), in turns: the old canary (`time.process_time`, every thread of
   the process) against the new (`time.thread_time`, the fastest of 5 slices).
2. quiet: `--readings` levels with nothing else running; then as many with two threads of the kit
   left busy through the readings (the client's leftovers, a tokenizer's pool): the share of
   levels each check flags. Old: others > 10% of the CPU, the other arms' servers > 10%, or the
   process-time canary 1.3x its median. New: `kit.decide.machine.watch.judge` on the reading's signals
   with the thread-time canary's slowdown (on a box with GPUs the canary alone flags only past 2x).
3. hog: `--hog-readings` levels with the synthetic engine pinned to two CPUs and two busy-looping
   processes pinned to the same two: both checks must flag every one, the new one saying why.

On a GPU box the readings also carry what NVML says (the GPUs, foreign processes on them, throttle
reasons, the SM clock). Writes DIR/bench_disturbance.json (the summary) and DIR/readings.jsonl
(every reading's signals).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the kit of this checkout

from kit.decide.machine import gpu_watch  # noqa: E402
from kit.decide.machine import watch as machine  # noqa: E402
from kit.decide.machine.watch import (  # noqa: E402
    CANARY_LOOPS,
    DISTURBED_CPU,
    SLOW_CANARY,
    MachineReading,
    canary_ms,
    interference,
    judge,
    slowdowns,
)

ENGINE = """
import os, select, sys, time
busy = False
while True:
    ready, _, _ = select.select([0], [], [], 0 if busy else None)
    if ready:
        c = os.read(0, 1)
        if not c:
            break
        busy = c == b"1"
    if busy:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.005:
            pass
"""
SPIN = "while True:\n    pass\n"


def old_canary_ms() -> float:
    """The canary as it was: the whole loop in the process's CPU time (every thread's)."""
    t0 = time.process_time()
    x = 0
    for i in range(CANARY_LOOPS):
        x += i
    return 1000 * (time.process_time() - t0)


@contextlib.contextmanager
def busy_threads(n_python: int = 1, n_native: int = 1) -> Iterator[None]:
    """Threads of this process kept busy: pure Python (holding the GIL) and native (hashing a large
    buffer, which releases it, as a tokenizer's pool or a compression library would)."""
    stop = threading.Event()
    buf = b"x" * (4 << 20)

    def python_loop() -> None:
        while not stop.is_set():
            sum(range(1000))

    def native_loop() -> None:
        while not stop.is_set():
            hashlib.sha256(buf).digest()

    threads = [threading.Thread(target=python_loop, daemon=True) for _ in range(n_python)]
    threads += [threading.Thread(target=native_loop, daemon=True) for _ in range(n_native)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


T0 = time.monotonic()


def say(line: str) -> None:
    """Progress on stderr as it happens (seconds since start): a run cut by a time limit shows where."""
    print(f"[{time.monotonic() - T0:7.1f} s] {line}", file=sys.stderr, flush=True)


def part_canary(rounds: int) -> dict:
    """Old and new canary, alone and beside the kit's own busy threads, in turns."""
    got: dict[str, list[float]] = {"old_alone": [], "new_alone": [], "old_beside": [], "new_beside": []}
    for _ in range(rounds):
        for beside in (False, True):
            ctx = busy_threads() if beside else contextlib.nullcontext()
            with ctx:
                time.sleep(0.02)
                for _ in range(3):
                    got["old_beside" if beside else "old_alone"].append(old_canary_ms())
                    got["new_beside" if beside else "new_alone"].append(canary_ms())
    out = {}
    for which in ("old", "new"):
        alone, beside = got[f"{which}_alone"], got[f"{which}_beside"]
        med = statistics.median(alone)
        out[which] = {
            "alone_median_ms": round(med, 3),
            "beside_median_ms": round(statistics.median(beside), 3),
            "beside_over_alone": round(statistics.median(beside) / med, 2),
            "alone_over_1_3x": round(sum(c > SLOW_CANARY * med for c in alone) / len(alone), 3),
            "beside_over_1_3x": round(sum(c > SLOW_CANARY * med for c in beside) / len(beside), 3),
            "readings": len(alone) + len(beside),
        }
    return out


class Engine:
    """The synthetic engine: one core's worth of computing while `working`, idle otherwise."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", ENGINE], stdin=subprocess.PIPE)

    def working(self, on: bool) -> None:
        self.proc.stdin.write(b"1" if on else b"0")
        self.proc.stdin.flush()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def client_level(engine: Engine, seconds: float) -> None:
    """A level: the engine computes, and a thread of the kit's process works beside it (the client)."""
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            sum(range(200))
            time.sleep(0.0005)

    t = threading.Thread(target=client, daemon=True)
    engine.working(True)
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    engine.working(False)


def levels(engine: Engine, n: int, level_s: float, phase: str) -> list[dict]:
    rows = []
    for i in range(n):
        say(f"{phase} level {i + 1} of {n}")
        old_before = old_canary_ms()
        before = MachineReading.now([engine.proc.pid])
        client_level(engine, level_s)
        seen = interference(before, [engine.proc.pid])
        old_after = old_canary_ms()
        rows.append(
            {
                "phase": phase,
                "i": i,
                **seen.signals(),
                "why_at_reading": seen.why,
                "old_canary_ms": round(max(old_before, old_after), 3),
            }
        )
    return rows


def judged(rows: list[dict]) -> list[dict]:
    """Each row with the old check's verdict and the new one's (slowdowns over the rows' medians)."""
    old_slow = slowdowns([r["old_canary_ms"] for r in rows])
    new_slow = slowdowns([r["canary_ms"] for r in rows])
    out = []
    for r, so, sn in zip(rows, old_slow, new_slow, strict=True):
        cpu = r["foreign_cpu"] > DISTURBED_CPU or r["neighbour_cpu"] > DISTURBED_CPU
        old_why = [n for n, hit in (("cpu", cpu), ("canary", so > SLOW_CANARY)) if hit]
        why = judge(r, sn)
        as_cpu_box = judge(r | {"gpus": None}, sn)  # what the CPU-box rules would say of the same
        out.append(
            r
            | {
                "old_slowdown": round(so, 3),
                "slowdown": round(sn, 3),
                "old_disturbed": bool(old_why),
                "old_why": ",".join(old_why),
                "disturbed": bool(why),
                "why": why,
                "as_cpu_box": as_cpu_box,
            }
        )
    return out


def share(rows: list[dict], key: str) -> float:
    return round(sum(bool(r[key]) for r in rows) / len(rows), 3) if rows else 0.0


def summary(rows: list[dict]) -> dict:
    foreign = [r["foreign_cpu"] for r in rows]
    # the levels where no other process took the CPU: what either check flags there is a false alarm
    calm = [
        r
        for r in rows
        if r["foreign_cpu"] <= DISTURBED_CPU and (r["engine_core_foreign_cpu"] or 0) <= DISTURBED_CPU
    ]
    return {
        "calm_readings": len(calm),
        "old_flagged_of_calm": share(calm, "old_disturbed"),
        "new_flagged_of_calm": share(calm, "disturbed"),
        "new_flagged_of_calm_with_cpu_box_rules": share(calm, "as_cpu_box"),
        "readings": len(rows),
        "old_flagged": share(rows, "old_disturbed"),
        "new_flagged": share(rows, "disturbed"),
        "old_flagged_by_canary_alone": round(sum(r["old_why"] == "canary" for r in rows) / len(rows), 3),
        "new_flagged_by_canary": round(sum("canary" in r["why"] for r in rows) / len(rows), 3),
        "new_flagged_with_cpu_box_rules": share(rows, "as_cpu_box"),
        "foreign_cpu_median_pct": round(100 * statistics.median(foreign), 2),
        "foreign_cpu_max_pct": round(100 * max(foreign), 2),
        "old_slowdown_max": max(r["old_slowdown"] for r in rows),
        "new_slowdown_max": max(r["slowdown"] for r in rows),
        "new_whys": sorted({r["why"] for r in rows if r["why"]})[:6],
    }


def part_hog(n: int, level_s: float) -> tuple[dict, list[dict]]:
    """The engine pinned to two CPUs, two busy-looping processes on the same two."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    engine = Engine()
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    try:
        os.sched_setaffinity(engine.proc.pid, cores)
        for h, c in zip(hogs, cores * 2, strict=False):
            os.sched_setaffinity(h.pid, [c])
        time.sleep(0.3)
        rows = levels(engine, n, level_s, "hog")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        engine.stop()
    rows = judged(rows)
    on_cores = [r["engine_core_foreign_cpu"] for r in rows if r["engine_core_foreign_cpu"] is not None]
    return {
        "readings": len(rows),
        "engine_cores": cores,
        "old_flagged": share(rows, "old_disturbed"),
        "new_flagged": share(rows, "disturbed"),
        "engine_core_foreign_cpu_min_pct": round(100 * min(on_cores), 1) if on_cores else None,
        "foreign_cpu_min_pct": round(100 * min(r["foreign_cpu"] for r in rows), 1),
        "whys": sorted({r["why"] for r in rows}),
    }, rows


def gpu_context() -> dict:
    g = gpu_watch.read_gpus({os.getpid()})
    if g is None:
        return {"gpus": None}
    names = gpu_watch.throttle_names(g.reasons) if g.reasons is not None else None
    return {"gpus": g.gpus, "foreign_processes": g.foreign, "sm_mhz": g.sm_mhz, "throttle_now": names}


def rejudge(folder: Path) -> dict:
    """Every sweep_runs.parquet under `folder` (measured on a box with GPUs) judged again: the
    measurements flagged as recorded, and by the new judgement (needs pandas)."""
    import pandas as pd

    out: dict = {"sweeps": 0, "measurements": 0, "recorded_flagged": 0, "new_flagged": 0, "flagged": []}
    for f in sorted(folder.rglob("sweep_runs.parquet")):
        runs = pd.read_parquet(f)
        recorded = runs.disturbed.fillna(False).astype(bool)
        new = machine.judge_runs(runs.drop(columns=["why"], errors="ignore").assign(disturbed=False, gpus=1))
        out["sweeps"] += 1
        out["measurements"] += len(runs)
        out["recorded_flagged"] += int(recorded.sum())
        out["new_flagged"] += int(new.disturbed.sum())
        for i in runs.index[recorded]:
            out["flagged"].append(
                {
                    "sweep": str(f.relative_to(folder).parent),
                    "slowdown": round(float(new.slowdown[i]), 2),
                    "foreign_cpu_pct": round(100 * float(runs.foreign_cpu[i]), 1),
                    "new_why": new.why[i],
                }
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--readings", type=int, default=40, help="levels per quiet variant")
    ap.add_argument("--level-s", type=float, default=0.75, help="seconds of a synthetic level")
    ap.add_argument("--canary-rounds", type=int, default=12)
    ap.add_argument("--hog-readings", type=int, default=5)
    ap.add_argument("--rejudge", type=Path, help="only judge again the sweep_runs.parquet under this folder")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.rejudge:
        result = rejudge(a.rejudge)
        (a.out / "rejudge.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        return 0
    t0 = time.monotonic()
    load = os.getloadavg()
    say("reading the GPUs (NVML)")
    result: dict = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": [round(x, 2) for x in load],
        "gpu": gpu_context(),
    }
    say(f"gpu: {result['gpu']}; canary, {a.canary_rounds} rounds")
    result["canary"] = part_canary(a.canary_rounds)
    say("starting the synthetic engine")
    engine = Engine()
    try:
        quiet = judged(levels(engine, a.readings, a.level_s, "quiet"))
        with busy_threads():
            busy = judged(levels(engine, a.readings, a.level_s, "busy_kit_threads"))
    finally:
        engine.stop()
    result["quiet"] = summary(quiet)
    result["busy_kit_threads"] = summary(busy)
    say("hog: the engine pinned beside two busy loops")
    result["hog"], hog = part_hog(a.hog_readings, a.level_s)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["command"] = " ".join(["python3", "benchmarks/bench_disturbance.py", *sys.argv[1:]])
    (a.out / "bench_disturbance.json").write_text(json.dumps(result, indent=2) + "\n")
    with (a.out / "readings.jsonl").open("w") as f:
        for r in quiet + busy + hog:
            f.write(json.dumps(r) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
