"""SGLang's own decode step times, read from its server log's `Decode batch` lines.

    python benchmarks/sglang_step_times.py docs/lab/h200/sglang/eagle3/server-*.log [--json]

SGLang logs one `Decode batch` line every `--decode-log-interval` steps (40 by default) with the
running requests, the accept length (speculative servers) and the generation throughput over that
interval. Tokens per step are running x accept length, so the interval's mean step time is

    step_s = running * accept_len / gen_throughput

which excludes HTTP, prefill batches and the ramp of a benchmark level: the engine's own figure for
the step the cost model predicts. A line counts only when the line before it had the same number of
running requests (a steady batch through the whole interval); the figure per level is the median
of those lines. Used for docs/lab/h200/sglang/README.md's step table and issue 32's fixed costs
(tests/test_costmodel.py re-derives the SGLang figures from the committed logs).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

LINE = re.compile(
    r"Decode batch, #running-req: (?P<running>\d+),.*?"
    r"(?:accept len: (?P<accept>[\d.]+),.*?)?"
    r"gen throughput \(token/s\): (?P<tput>[\d.]+)"
)


def step_times(lines: list[str]) -> dict[int, dict]:
    """{running requests: {"step_ms": median, "accept_len": median, "intervals": n}} over steady lines."""
    per: dict[int, list[tuple[float, float]]] = {}
    previous = None
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        running, tput = int(m["running"]), float(m["tput"])
        accept = float(m["accept"]) if m["accept"] else 1.0
        if previous == running and tput > 0:
            per.setdefault(running, []).append((running * accept / tput, accept))
        previous = running
    return {
        r: {
            "step_ms": round(1000 * statistics.median(s for s, _ in v), 3),
            "accept_len": round(statistics.median(a for _, a in v), 3),
            "intervals": len(v),
        }
        for r, v in sorted(per.items())
    }


def read_log(path: Path) -> dict[int, dict]:
    return step_times(path.read_text(errors="replace").splitlines())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--min-intervals", type=int, default=2, help="levels with fewer steady lines left out")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {
        p.stem: {r: v for r, v in read_log(p).items() if v["intervals"] >= a.min_intervals} for p in a.logs
    }
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for name, levels in out.items():
        cells = ", ".join(f"{r}: {v['step_ms']:.2f} ms (n={v['intervals']})" for r, v in levels.items())
        print(f"{name}: {cells}")


if __name__ == "__main__":
    main()
