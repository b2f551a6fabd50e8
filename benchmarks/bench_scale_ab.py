"""Two trees of the kit on one run folder, interleaved: rerun, `kit analyse`, notebook 04.

    .venv/bin/python benchmarks/bench_scale_ab.py --before /tmp/orig --after . \\
        --params /tmp/bench_scale/runs/scale-200000.yaml --reps 2

For the same-run baseline of docs/lab/bench_scale.md: `--before` is a copy of an older commit
(`git archive <commit> | tar -x -C DIR`, with `.venv` and `.cache` linked in), `--after` this tree;
the run folder is one `bench_scale.py --keep` left. Each command runs with PYTHONPATH set to its
tree, steps alternate before / after, `--reps` times. Per command: wall time, the largest process
(`ru_maxrss` of the children) and the peak of the summed RSS of its process tree (psutil, every
0.2 s). Prints one JSON line per command and a Markdown table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

STEPS = {
    "rerun": ["generate", "{p}"],
    "analyse": ["analyse", "{p}"],
    "notebook": ["run", "{p}", "--stages", "analyse"],
}
WRAP = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(r.returncode)"
)


def measure(root: Path, args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-c", WRAP, str(root / ".venv/bin/python"), "-m", "kit.cli", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    peak = [0]

    def sample() -> None:
        me = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak[0] = max(peak[0], sum(q.memory_info().rss for q in me.children(recursive=True)))
            except psutil.Error:
                pass
            time.sleep(0.2)

    thread = threading.Thread(target=sample)
    thread.start()
    _, err = proc.communicate()
    thread.join()
    maxrss = [int(line.split()[1]) for line in err.splitlines() if line.startswith("MAXRSS")]
    return {
        "rc": proc.returncode,
        "wall_s": round(time.perf_counter() - t0, 1),
        "main_mb": maxrss[-1] // 1024 if maxrss else None,
        "tree_mb": peak[0] // 2**20,
        "load": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--params", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for rep in range(args.reps):
        for step, template in STEPS.items():
            for name, root in (("before", args.before.resolve()), ("after", args.after.resolve())):
                res = measure(root, [a.format(p=args.params) for a in template])
                rows.append({"rep": rep, "step": step, "code": name, **res})
                print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| step | code | wall s (median) | largest process MB | tree MB | runs |\n|---|---|---|---|---|---|"
    )
    for step in STEPS:
        for name in ("before", "after"):
            mine = [r for r in rows if r["step"] == step and r["code"] == name]
            med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "main_mb", "tree_mb")}
            cells = f"{med['wall_s']:.1f} | {med['main_mb']:,.0f} | {med['tree_mb']:,.0f} | {len(mine)}"
            print(f"| {step} | {name} | {cells} |")


if __name__ == "__main__":
    main()
