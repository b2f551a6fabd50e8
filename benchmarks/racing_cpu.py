"""Racing measured on the CPU with the real vLLM: `kit decide` of params/demo-vllm.yaml (the demo model,
plain and n-gram k=1, 3; levels 1 and 8; three rounds), racing on and off in pairs, the order of each
pair alternating (on-off, off-on, ...). Per run: the arm chosen, the sweep's wall time, its
measurements and those racing left out (decision.json's `sweep_cost`). Prints how often the pair
chose the same arm and the sweep time racing saved (median of the pairs' ratios, with their range).

    make venv engine-vllm && .venv/bin/kit demo-assets
    .venv/bin/python benchmarks/racing_cpu.py --pairs 10 --out /tmp/racing-cpu

Findings in docs/decision.md ("Racing"), raw in docs/lab/racing/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def params_for(out: Path, racing: bool, i: int) -> Path:
    """params/demo-vllm.yaml shrunk as tests/test_vllm_engine.py shrinks it, racing on or off."""
    p = yaml.safe_load((REPO / "params" / "demo-vllm.yaml").read_text())
    run = f"racing-{'on' if racing else 'off'}-{i}"
    p.update(run=run, output_dir=str(out))
    p["model"]["path"] = str(REPO / ".cache" / "demo" / "model")
    p["engine"]["python"] = str(REPO / ".venv-vllm" / "bin" / "python")
    p["engine"]["extra_args"] += ["--enforce-eager"]
    p["data"]["demo_fixtures"] = str(REPO / ".cache" / "demo" / "data")
    for s in p["data"]["sources"]:
        s["data_files"] = [str(REPO / ".cache" / "demo" / "data" / Path(f).name) for f in s["data_files"]]
    p["decide"].update(
        concurrencies=[1, 8], num_prompts=8, max_tokens=32, spec_steps=[1, 3], level_s=2, repetitions=3,
        pilot_per_source=0, racing=racing, time_budget_s=3600,
    )  # fmt: skip
    path = out / f"{run}.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def one(out: Path, racing: bool, i: int) -> dict:
    """`kit decide --fresh` of one run; what its decision.json says of the arm and the sweep's cost."""
    params = params_for(out, racing, i)
    t = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "decide", str(params), "--fresh"], capture_output=True, text=True
    )
    wall = time.monotonic() - t
    folder = out / params.stem
    if done.returncode != 0 or not (folder / "decision.json").exists():
        return {"run": params.stem, "racing": racing, "error": done.stderr[-2000:], "wall_s": round(wall, 1)}
    d = json.loads((folder / "decision.json").read_text())
    cost = d.get("sweep_cost") or {}
    arm = d.get("arm") or {}
    return {
        "run": params.stem,
        "racing": racing,
        "arm": f"{arm.get('algorithm') or 'plain'} k={arm.get('k', 0)}",
        "sweep_wall_s": cost.get("wall_s"),
        "measurements": cost.get("measurements"),
        "skipped": cost.get("skipped"),
        "rounds": cost.get("rounds"),
        "noise_pct": (d.get("noise") or {}).get("noise_pct"),
        "disturbed": len((d.get("noise") or {}).get("disturbed") or []),
        "kit_decide_s": round(wall, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        pair = {racing: one(args.out, racing, i) for racing in order}
        for racing in order:
            rows.append(pair[racing])
            print(json.dumps(pair[racing]), flush=True)
        (args.out / "racing_cpu.json").write_text(json.dumps(rows, indent=1))
    pairs = [(on, off) for on, off in zip(rows[0::2], rows[1::2], strict=True)]
    pairs = [(a, b) if a["racing"] else (b, a) for a, b in pairs]
    ok = [(on, off) for on, off in pairs if "error" not in on and "error" not in off]
    same = sum(on["arm"] == off["arm"] for on, off in ok)
    ratios = [on["sweep_wall_s"] / off["sweep_wall_s"] for on, off in ok]
    summary = {
        "pairs": len(pairs),
        "both_decided": len(ok),
        "same_arm": same,
        "sweep_time_on_over_off_median": round(statistics.median(ratios), 3) if ratios else None,
        "sweep_time_on_over_off_range": [round(min(ratios), 3), round(max(ratios), 3)] if ratios else None,
        "measurements_on_median": statistics.median(on["measurements"] for on, _ in ok) if ok else None,
        "measurements_off_median": statistics.median(off["measurements"] for _, off in ok) if ok else None,
    }
    print(json.dumps(summary, indent=1))
    (args.out / "racing_cpu.json").write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
