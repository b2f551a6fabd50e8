"""Does the decision know its own noise? `kit decide` from scratch, again and again, on the real vLLM.

    make engine-vllm && .venv/bin/kit demo-assets
    .venv/bin/python benchmarks/bench_decide.py --runs 3 --out docs/lab/bench_decide.md

Three parts, all on the 2-core development machine with vLLM's CPU build and the demo model:

1. `kit decide params/demo-vllm.yaml` `--runs` times, each in a new run folder (probe, plan, the
   sweep's servers started anew): the chosen arm, whether the difference was measurable, the
   sweep's noise, the drift check, measurements set aside, and each arm's best level with its
   interval. Done when every run chooses the same arm or says "no measurable difference" each time.
2. Servers side by side: plain decoding at concurrency 8 on one server, measured alone and with a
   second (idle) server up beside it, alternating `--pairs` times: whether an idle neighbour changes
   what is measured (the sweep keeps every arm's server up at once on a CPU).
3. The CPU canary (`kit.decide.machine.watch.canary_ms`) every 0.2 s for `--canary-s` seconds with nothing
   else running: how often this shared host is slower than itself, and by how much.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KIT = ROOT / ".venv" / "bin" / "kit"


def demo_params(work: Path, run: str) -> Path:
    """params/demo-vllm.yaml as it is, but with absolute paths and its own output folder."""
    p = yaml.safe_load((ROOT / "params" / "demo-vllm.yaml").read_text())
    p["run"], p["output_dir"] = run, str(work / "outputs")
    p["model"]["path"] = str(ROOT / ".cache" / "demo" / "model")
    p["engine"]["python"] = str(ROOT / ".venv-vllm" / "bin" / "python")
    p["data"]["demo_fixtures"] = str(ROOT / ".cache" / "demo" / "data")
    for s in p["data"]["sources"]:
        s["data_files"] = [str(ROOT / ".cache" / "demo" / "data" / Path(f).name) for f in s["data_files"]]
    path = work / f"{run}.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def _arm(decision: dict[str, Any]) -> str:
    """The arm a decision.json chose, by name (`plain`, `spec_k3`), whichever kit wrote it."""
    from kit.decide.choose.decision import decision_arm

    return decision_arm(decision).name


def decide_runs(work: Path, runs: int) -> list[dict[str, Any]]:
    out = []
    for i in range(runs):
        path = demo_params(work, f"decide-{i}")
        t0 = time.perf_counter()
        done = subprocess.run([str(KIT), "decide", str(path)], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode:
            raise RuntimeError(f"kit decide failed:\n{done.stderr[-3000:]}")
        d = json.loads((work / "outputs" / f"decide-{i}" / "decision.json").read_text())
        out.append({"run": i, "seconds": seconds, "decision": d})
        print(
            f"run {i}: {_arm(d)} (measurable: {d['measured_difference']}) in {seconds:.0f} s",
            flush=True,
        )
    return out


async def _level(url: str, prompts: list[dict], c: int, seconds: float) -> float:
    from kit.engines.client import EngineClient

    tokens, t0, i = 0, time.perf_counter(), 0
    async with EngineClient(url, "vllm") as client:

        async def worker() -> None:
            nonlocal tokens, i
            while time.perf_counter() - t0 < seconds:
                i += 1
                r = await client.chat(prompts[i % len(prompts)]["messages"], max_tokens=32, temperature=0.0)
                tokens += r.completion_tokens or 0

        await asyncio.gather(*(worker() for _ in range(c)))
    return tokens / (time.perf_counter() - t0)


def side_by_side(work: Path, pairs: int, settle_s: float) -> dict[str, list[float]]:
    """Plain at 8 concurrent, 3 s a measurement: alone, then beside an idle server, `pairs` times;
    `settle_s` after the neighbour starts or stops before measuring (a server just up may still be
    busy finishing its start)."""
    from kit.decide.measure.servers import arm_params
    from kit.decide.sweep.setup import sweep_prompts
    from kit.engines import start_server
    from kit.engines.settings import Arm
    from kit.params import load_params
    from kit.prompts.prompt_set import ensure_plan
    from kit.runfolder import RunFolder

    params = load_params(demo_params(work, "side"))
    folder = RunFolder(params.output_dir / params.run).ensure()
    prompts = sweep_prompts(ensure_plan(params, folder), params.data.seed, params.decide.num_prompts)
    plain, other = arm_params(params, Arm(0), False), arm_params(params, Arm(1, "NGRAM"), False)
    seen: dict[str, list[float]] = {"alone": [], "beside an idle server": []}
    with start_server(plain, folder.logs, name="a") as a:
        asyncio.run(_level(a.base_url, prompts, 8, 3))  # warm-up
        for _ in range(pairs):
            seen["alone"].append(asyncio.run(_level(a.base_url, prompts, 8, 3)))
            with start_server(other, folder.logs, name="b"):
                time.sleep(settle_s)
                seen["beside an idle server"].append(asyncio.run(_level(a.base_url, prompts, 8, 3)))
            time.sleep(settle_s)
            print({k: [round(x) for x in v] for k, v in seen.items()}, flush=True)
    return seen


def canary_trace(seconds: float) -> list[float]:
    from kit.decide.machine.watch import canary_ms

    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(canary_ms())
        time.sleep(0.2)
    return out


def span(values: list[float], fmt: str = "{:.0f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def _run_row(r: dict) -> str:
    d = r["decision"]
    noise = d.get("noise") or {}
    comp = noise.get("comparison") or {}
    ratio = comp.get("ratio") or {}
    drift = noise.get("drift") or {}
    spec = "-"
    if comp:
        spec = f"{comp['speculative_arm']}: {ratio['median']:.2f}x ({ratio['lo']:.2f}-{ratio['hi']:.2f})"
    moved = f"{drift.get('change_pct', 0):+.0f}% ({'drifted' if drift.get('drifted') else 'no drift'})"
    cells = [
        r["run"],
        _arm(d),
        d["measured_difference"],
        f"±{noise.get('noise_pct') or 0:.1f}%",
        spec,
        moved,
        len(noise.get("disturbed") or []),
        f"{r['seconds']:.0f} s",
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _bests(r: dict) -> str:
    best = r["decision"].get("measured") or {}
    parts = [
        f"{arm} at {m['concurrency']}: {m['output_tok_s']:.0f} "
        f"({m['output_tok_s_lo']:.0f}-{m['output_tok_s_hi']:.0f})"
        for arm, m in best.items()
    ]
    return f"- run {r['run']}: " + "; ".join(parts)


def report(
    args: argparse.Namespace, runs: list[dict], side: dict[str, list[float]], canary: list[float]
) -> str:
    lines = [
        "# Does the decision know its own noise? (vLLM CPU build, demo model)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_decide.py --runs {args.runs} --pairs {args.pairs} "
        f"--canary-s {args.canary_s:g} --settle-s {args.settle_s:g} --out {args.out}`, "
        f"{time.strftime('%Y-%m-%d')}, 2-core development "
        f"machine shared with other work (load average before / after: {args.load_before} / {load()}).",
        "",
        "## 1. `kit decide params/demo-vllm.yaml` from scratch, again and again",
        "",
        "| run | chosen | measurable difference | sweep noise | spec / plain (interval) | drift "
        "| set aside | decide took |",
        "|---|---|---|---|---|---|---|---|",
        *(_run_row(r) for r in runs),
        "",
        "Each arm at its best level (median tok/s, 90% interval):",
        "",
        *(_bests(r) for r in runs),
    ]
    chosen = sorted({_arm(r["decision"]) for r in runs})
    same = "the same every run" if len(chosen) == 1 else "they differ"
    lines += ["", f"Chosen arms: {', '.join(chosen)} ({same}).", ""] if runs else ["", "(not run)", ""]
    if side:
        lines += [
            "## 2. An idle server beside the one measured",
            "",
            f"Plain decoding, 8 concurrent, 3 s a measurement, alternating, {args.settle_s:g} s after the "
            "neighbour started or stopped (tok/s min / median / max):",
            "",
            *(f"- {k}: {span(v)} ({', '.join(f'{x:.0f}' for x in v)})" for k, v in side.items()),
            "",
        ]
    if canary:
        med = statistics.median(canary)
        slow = [c / med for c in canary]
        share = 100 * sum(x > 1.3 for x in slow) / len(slow)
        lines += [
            "## 3. The CPU canary with nothing else running",
            "",
            f"{len(canary)} readings every 0.2 s: median {med:.2f} ms; {share:.0f}% of them more than 1.3x "
            f"the median (the threshold that sets a measurement aside), the slowest {max(slow):.1f}x.",
            "",
        ]
    return "\n".join(lines)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--canary-s", type=float, default=60)
    ap.add_argument("--settle-s", type=float, default=30, help="wait after a neighbour starts or stops")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    args.load_before = load()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-decide-"))
    work.mkdir(parents=True, exist_ok=True)
    canary = canary_trace(args.canary_s) if args.canary_s else []
    runs = decide_runs(work, args.runs)
    side = side_by_side(work, args.pairs, args.settle_s) if args.pairs else {}
    text = report(args, runs, side, canary)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
