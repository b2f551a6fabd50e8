"""How far is stage 2's forecast of stage 3 from what stage 3 then takes?

    python3 benchmarks/bench_forecast.py --params params/demo-vllm.yaml --counts 10 40 --repeats 2 --out DIR
    python3 benchmarks/bench_forecast.py --params params/demo.yaml --counts 20 --repeats 2 --out DIR
    python3 benchmarks/bench_forecast.py --params params/demo-vllm.yaml --counts 40 --samples 4 \
        --plain-only --repeats 3 --out DIR       # longer jobs: 960 requests, plain decoding only
    ... --levels 1 16 128                        # the sweep up to stage 3's own batch (vLLM CPU: 128)

`--samples N` sends every prompt N times (generate.sampling.n: the demo's fixtures hold 40 prompts
a source, so this is how a CPU job lasts long enough to time); `--plain-only` sweeps plain decoding
alone (the forecast of the arm stage 3 runs, in a quarter of the sweep's time).

For each count (prompts per source: plan sizes) and repeat, a fresh run folder: `kit probe`, `kit
decide` (the sweep, the pilot, the forecast in decision.json), `kit generate` (the decided arm, the
whole plan), `kit analyse` (summary.json's `forecast_check`). Each run's forecast against the
actual: time generating, output tokens, speed, the error in percent, inside the interval or not,
and the input that missed. Writes DIR/bench_forecast.json (every run) and prints a Markdown table.
Target (issue 48): the median wall-time error within +-15%, the actual inside the interval in at
least 4 of 5 runs. Every run's forecast counts the judged runs already under DIR as its history
(kit/decide/forecast/history.py): the later runs' intervals carry the earlier runs' errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def params_for(
    base: Path,
    count: int,
    out: Path,
    run: str,
    samples: int = 1,
    plain_only: bool = False,
    levels: list[int] | None = None,
) -> Path:
    """The params file with every source at `count` prompts (each sent `samples` times), writing to
    `out`, its paths absolute; `plain_only`: no speculative arm; `levels`: the sweep's concurrencies
    (e.g. up to stage 3's own batch, so that the forecast reads its speed off a measured level)."""
    p = yaml.safe_load(base.read_text())
    here = base.resolve().parent

    def absolute(x: str) -> str:
        return (
            os.path.normpath(here / x) if not Path(x).is_absolute() else x
        )  # not resolve(): a venv's python is a link

    p["run"], p["output_dir"] = run, str(out)
    p["model"]["path"] = absolute(p["model"]["path"])
    if p.get("engine", {}).get("python"):
        p["engine"]["python"] = absolute(p["engine"]["python"])
    p["data"]["demo_fixtures"] = absolute(p["data"]["demo_fixtures"])
    p["generate"]["sampling"]["n"] = samples
    if levels:
        p["decide"]["concurrencies"] = levels
    if plain_only:
        p["engine"].pop("speculative", None)
        p["decide"]["spec_steps"] = [1]  # no speculative algorithm: its arms are skipped
    for s in p["data"]["sources"]:
        s["count"] = count
        s["data_files"] = [absolute(f) for f in s.get("data_files", [])]
    path = out / f"{run}.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def kit(stage: str, params: Path) -> float:
    t = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", stage, str(params)], capture_output=True, text=True
    )
    if done.returncode not in (0, 3):
        raise SystemExit(f"kit {stage} {params} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.monotonic() - t


def one(
    base: Path,
    count: int,
    rep: int,
    out: Path,
    samples: int = 1,
    plain_only: bool = False,
    levels: list[int] | None = None,
) -> dict:
    run = f"fc-{base.stem}-{count}x{samples}-{rep}"
    params = params_for(base, count, out, run, samples, plain_only, levels)
    seconds = {stage: round(kit(stage, params), 1) for stage in ("probe", "decide", "generate", "analyse")}
    folder = out / run
    forecast = json.loads((folder / "decision.json").read_text())["forecast"]
    check = json.loads((folder / "summary.json").read_text())["forecast_check"]
    return {
        "params": str(base),
        "count_per_source": count,
        "samples": samples,
        "plain_only": plain_only,
        "levels": levels,
        "repeat": rep,
        "requests": forecast["requests"],
        "seconds": seconds,
        "calibration": forecast.get("calibration"),
        "pilot": forecast.get("pilot"),
        "lengths_from": forecast.get("lengths_from"),
        "interval_from": forecast.get("interval_from"),
        "history": forecast.get("history"),  # the judged runs under --out that widened the interval
        "check": check,
    }


HEAD = (
    "| params | requests | forecast generating (interval) | took | error | inside "
    "| tokens forecast / made | speed forecast / measured | missed |"
)


def row_line(r: dict) -> str:
    c, name = r["check"], Path(r["params"]).name
    if not c.get("judged"):
        return f"| {name} | {r['requests']} | not judged: {c.get('why')} |||||||"
    forecast = f"{c['forecast_s']:.0f} s ({c['forecast_lo_s']:.0f}-{c['forecast_hi_s']:.0f})"
    inside = "yes" if c["inside_interval"] else "no"
    tokens = f"{c['forecast_output_tokens']:,} / {c['output_tokens']:,} ({c['tokens_error_pct']:+.0f}%)"
    speed = f"{c['forecast_output_tok_s']:.0f} / {c['output_tok_s']:.0f} ({c['speed_error_pct']:+.0f}%)"
    took = f"{c['generating_s']:.0f} s | {c['wall_error_pct']:+.1f}%"
    missed = ", ".join(c["missed"]) or "-"
    return f"| {name} | {r['requests']} | {forecast} | {took} | {inside} | {tokens} | {speed} | {missed} |"


def table(rows: list[dict]) -> str:
    lines = [HEAD, "|---|---:|---|---:|---:|---|---|---|---|", *(row_line(r) for r in rows)]
    judged = [r["check"] for r in rows if r["check"].get("judged")]
    if judged:
        errors = statistics.median(abs(c["wall_error_pct"]) for c in judged)
        inside = sum(bool(c["inside_interval"]) for c in judged)
        lines.append(
            f"\nmedian |wall-time error| {errors:.1f}%; inside the interval {inside} of {len(judged)}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=Path, action="append", required=True)
    ap.add_argument("--counts", type=int, nargs="+", default=[10, 40], help="prompts per source: plan sizes")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--samples", type=int, default=1, help="answers per prompt (generate.sampling.n)")
    ap.add_argument("--plain-only", action="store_true", help="sweep plain decoding alone")
    ap.add_argument("--levels", type=int, nargs="+", help="the sweep's concurrencies (decide.concurrencies)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for rep in range(a.repeats):
        for base in a.params:
            for count in a.counts:
                rows.append(one(base, count, rep, a.out, a.samples, a.plain_only, a.levels))
                print(table(rows[-1:]).splitlines()[2], flush=True)
                (a.out / "bench_forecast.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
