"""The tail of a batch job on the real vLLM (CPU build): plan order vs longest first, and speculation
switched on for the tail.

    make engine-vllm && .venv/bin/kit demo-assets
    .venv/bin/python benchmarks/bench_tail.py --reps 3 --out docs/lab/bench_tail.md

A heavy-tailed plan: the demo's six fixture sources (params/demo-vllm.yaml's counts), where one
source (codefeedback) answers long (`--long-tokens`, 768) and the others short (`--short-tokens`,
24), every answer its full budget (`ignore_eos`), `--samples` (4) per prompt, on a vLLM server that
runs `--capacity` (8) requests at once (`engine.max_running_requests`), so that the job has a
full-load part and a tail.

First a real `kit decide` on the same params (plain vs vLLM's n-gram k=1..3 at 1, 4 and 16 in
flight); its decision.json is copied into every run folder, so stage 3 applies it (plain, here)
and stage 4 predicts what speculation in the tail would have saved. Then, each a `kit generate`
in a new run folder (its own vLLM server, started by the kit; `generate.concurrency` fixed at
twice the capacity, so that only the order differs) and `kit analyse` (summary.json's `tail`):

- `plan`: `generate.order: plan`, the plan's order (ids: long answers scattered through the plan);
- `longest`: `generate.order: longest_first` (the default);

alternating (plan, longest, longest, plan, ...), `--reps` each; then once `plan+spec`: the plan's
order (its tail holds long requests) with `generate.tail_speculation`, so the server restarts
with the n-gram arm once the requests left fall to the decision's crossover. Where the real
decision shows no win outside its noise (usual on a CPU), the switch is still exercised, with a
copy of the decision whose speculative levels at `--force-up-to` (16) requests or fewer are marked
to win (measured interval and prediction; `--no-force-tail` skips the run), and the report says
so; stage 4 on a copy of `plan-0` with that decision gives the saving it predicts, beside what the
switch did.

Reported per run: wall time of generation (`generating_s`), the tail's start, share and tokens/s
against full load, the capacity it left idle, the predicted saving; medians and spreads per order;
for `plan+spec` the switch (when, with how many left, requests cut and sent again).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
KIT = ROOT / ".venv" / "bin" / "kit"
LONG_SOURCE = "codefeedback"


def params_file(work: Path, run: str, args: argparse.Namespace, ngram: bool = False, **generate: Any) -> Path:
    """params/demo-vllm.yaml made heavy-tailed: absolute paths, one long source, every answer its
    full budget, the server's capacity fixed, and `generate` settings on top. `ngram`: keep the
    demo's n-gram speculative section (the sweep's arms; stage 3 then follows decision.json)."""
    p = yaml.safe_load((ROOT / "params" / "demo-vllm.yaml").read_text())
    data = ROOT / ".cache" / "demo" / "data"
    p["run"], p["output_dir"] = run, str(work / "outputs")
    p["model"]["path"] = str(ROOT / ".cache" / "demo" / "model")
    p["engine"]["python"] = str(VLLM_PY)
    p["engine"]["max_running_requests"] = args.capacity
    if not ngram:
        p["engine"].pop("speculative", None)
    p["data"]["demo_fixtures"] = str(data)
    for s in p["data"]["sources"]:
        s["data_files"] = [str(data / Path(f).name) for f in s["data_files"]]
        s["max_tokens"] = args.long_tokens if s["name"] == LONG_SOURCE else args.short_tokens
    p["generate"]["concurrency"] = 2 * args.capacity
    p["generate"]["sampling"].update(
        max_tokens=args.long_tokens, n=args.samples, extra_body={"ignore_eos": True}
    )
    p["generate"].update(generate)
    p["decide"].update(max_tokens=args.short_tokens)
    path = work / f"{run}.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def kit(*argv: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run([str(KIT), *argv], capture_output=True, text=True, timeout=timeout)
    if done.returncode not in (0, 3):
        raise RuntimeError(f"kit {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def one_run(work: Path, run: str, args: argparse.Namespace, decision: Path | None = None, **gen: Any) -> dict:
    """`kit generate` then `kit analyse` on a new run folder; the figures of its tail. With a
    `decision`, it is copied into the run folder and the params keep their n-gram arm."""
    path = params_file(work, run, args, ngram=decision is not None, **gen)
    folder = work / "outputs" / run
    shutil.rmtree(folder, ignore_errors=True)  # a new run, never a resume of an earlier one
    if decision is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "decision.json").write_text(decision.read_text())
    t0 = time.perf_counter()
    kit("generate", str(path))
    wall = time.perf_counter() - t0
    kit("analyse", str(path))
    manifest = json.loads((folder / "manifest.json").read_text())
    summary = json.loads((folder / "summary.json").read_text())
    ids = pq.read_table(folder / "generations", columns=["id"]).column("id").to_pylist()
    return {
        "run": run,
        "order": manifest["order"]["order"],
        "rows": manifest["rows"],
        "unique_ids": len(set(ids)),
        "complete": manifest["complete"],
        "generating_s": manifest["generating_s"],
        "command_s": round(wall, 1),
        "tail": summary.get("tail"),
        "tail_speculation": manifest.get("tail_speculation"),
        "restarts": manifest["server_restarts"],
    }


def decide(work: Path, args: argparse.Namespace) -> tuple[Path, bool, str]:
    """A real `kit decide` on the bench's params; (decision.json for the spec run, forced?, why)."""
    from kit.artifacts import Decision
    from kit.decide.choose.tailarm import tail_arm

    path = params_file(work, "decide", args, ngram=True)
    kit("decide", str(path))
    real = work / "outputs" / "decide" / "decision.json"
    decision = json.loads(real.read_text())
    arm, why = tail_arm(Decision.from_json(decision))
    if arm is not None or not args.force_tail:
        return real, False, why
    plain = {int(r["concurrency"]): r for r in decision["table"] if not r.get("spec_k")}
    for row in decision["table"]:  # forced: every speculative level up to --force-up-to wins
        c = int(row["concurrency"])
        if row.get("spec_k") and c <= args.force_up_to and c in plain:
            row["measured_lo"] = 2 * float(plain[c].get("measured_hi") or plain[c]["predicted_tok_s"])
            row["predicted_tok_s"] = 2 * float(plain[c]["predicted_tok_s"])
    forced = work / "decision-forced.json"
    forced.write_text(json.dumps(decision))
    return forced, True, why


def predicted_with(work: Path, run: str, decision: Path) -> dict | None:
    """Stage 4 on a copy of `run` with `decision`: its tail's speculation entry (the predicted saving)."""
    src, dst = work / "outputs" / run, work / "outputs" / f"{run}-predicted"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    (dst / "decision.json").write_text(decision.read_text())
    from kit.analyse import run_analysis
    from kit.runfolder import RunFolder

    tail = run_analysis(RunFolder(dst), progress=False).summary.tail
    return tail.speculation.to_json() if tail is not None and tail.speculation is not None else None


def spread(values: list[float], digits: int = 1) -> str:
    """Median (min-max)."""
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def tail_value(r: dict, key: str) -> float | None:
    """One figure of a run's tail (summary.json's `tail`); `tok_s_ratio`: tail tokens/s over full load."""
    t = r.get("tail") or {}
    if key == "tok_s_ratio":
        tail, full = t.get("tok_s_tail"), t.get("tok_s_full_load")
        return None if not tail or not full else round(float(tail) / float(full), 3)
    v = t.get(key)
    return None if v is None else float(v)


def saving(r: dict) -> str:
    """Stage 4's predicted saving of speculation in the tail: seconds (low-high), or its status."""
    spec = (r.get("tail") or {}).get("speculation") or {}
    if spec.get("saved_s") is None:
        return str(spec.get("status", "n/a"))
    low, high = spec["saved_low_s"], spec["saved_high_s"]
    return f"{spec['saved_s']:.1f} ({low:.1f}-{high:.1f}), k={spec.get('spec_k')}"


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:g}"


def report(args: argparse.Namespace, runs: list[dict], decided: dict, load: str) -> str:
    lines = [
        "# Benchmark: the tail of a batch job (real vLLM, CPU build)",
        "",
        "```",
        f".venv/bin/python benchmarks/bench_tail.py --reps {args.reps} --capacity {args.capacity} "
        f"--long-tokens {args.long_tokens} --short-tokens {args.short_tokens} --samples {args.samples} "
        f"--out {args.out}",
        "```",
        "",
        __doc__.split("\n\n", 2)[2].strip(),
        "",
        f"Measured on {time.strftime('%Y-%m-%d')}, 2 vCPU, load average {load}.",
        "",
        "## Every run",
        "",
        "| run | order | rows (unique ids) | generating s | tail start s | tail share | "
        "tail / full-load tok/s | idle capacity (min) | speculation in the tail, predicted saving s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['run']} | {r['order']} | {r['rows']} ({r['unique_ids']}) | {r['generating_s']} | "
            f"{fmt(tail_value(r, 'start_s'))} | {fmt(tail_value(r, 'share'))} | "
            f"{fmt(tail_value(r, 'tok_s_ratio'))} | {fmt(tail_value(r, 'idle_minutes'))} | {saving(r)} |"
        )
    lines += ["", "## Plan order against longest first (median, min-max)", ""]
    lines += [
        "| order | runs | generating s | tail share | tail / full-load tok/s |",
        "|---|---|---|---|---|",
    ]
    for order in ("plan", "longest_first"):
        group = [r for r in runs if r["order"] == order and not _switching(r)]
        lines.append(
            f"| {order} | {len(group)} | {spread([r['generating_s'] for r in group])} | "
            f"{spread([tail_value(r, 'share') for r in group], 3)} | "
            f"{spread([tail_value(r, 'tok_s_ratio') for r in group], 2)} |"
        )
    plans = [r for r in runs if r["order"] == "plan" and not _switching(r)]
    longs = [r for r in runs if r["order"] == "longest_first"]
    pairs = [f"{b['generating_s'] / a['generating_s']:.2f}" for a, b in zip(plans, longs, strict=False)]
    lines += [
        "",
        f"Longest first / plan order, generating time, pair by pair as run: {', '.join(pairs)}.",
    ]
    lines += ["", "## Speculation for the tail", ""]
    lines.append(f"Decision: {'forced for the exercise: ' if decided['forced'] else ''}{decided['why']}.")
    plan_runs = [r["generating_s"] for r in runs if r["order"] == "plan" and not _switching(r)]
    for r in runs:
        if _switching(r):
            pred = r.get("predicted_on_plan_0") or {}
            low, high = pred.get("saved_low_s", "n/a"), pred.get("saved_high_s", "n/a")
            saved = f"{pred.get('saved_s', 'n/a')} s ({low} to {high})"
            lines += [
                "",
                f"Run `{r['run']}`: generating {r['generating_s']} s against {spread(plan_runs)} s for "
                f"the plan order without the switch (what happened); stage 4 on `plan-0` with the same "
                f"decision predicted a saving of {saved} from speculating in its tail, not counting "
                "the restart. "
                f"Rows {r['rows']}, unique ids {r['unique_ids']}, complete {r['complete']}.",
                "",
                f"Its tail, as stage 4 says it: {(r.get('tail') or {}).get('sentence', '')}",
                "",
            ]
            lines += ["```json", json.dumps(r["tail_speculation"], indent=1), "```"]
    return "\n".join(lines) + "\n"


def _switching(r: dict) -> bool:
    return bool((r.get("tail_speculation") or {}).get("enabled"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--capacity", type=int, default=8)
    ap.add_argument("--long-tokens", type=int, default=768)
    ap.add_argument("--samples", type=int, default=4, help="samples per prompt (rows = 4 x 104 prompts)")
    ap.add_argument("--short-tokens", type=int, default=24)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_tail"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-force-tail", dest="force_tail", action="store_false")
    ap.add_argument("--force-up-to", type=int, default=16, help="requests at which the forced arm wins")
    ap.add_argument("--spec-only", action="store_true", help="only plan+spec; the rest from an earlier run")
    ap.add_argument("--report-only", action="store_true", help="report an earlier run's bench_tail.json")
    ap.add_argument("--load", default="n/a", help="with --report-only: the load averages the runs saw")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    before = " ".join(open("/proc/loadavg").read().split()[:3])
    real = args.work / "outputs" / "decide" / "decision.json"
    saved = args.work / "bench_tail.json"
    if args.report_only:
        from kit.artifacts import Decision
        from kit.decide.choose.tailarm import tail_arm

        runs = json.loads(saved.read_text())
        forced = (args.work / "decision-forced.json").exists()
        why = tail_arm(Decision.from_json(json.loads(real.read_text())))[1]
        text = report(args, runs, {"forced": forced, "why": why}, args.load)
        print(text)
        if args.out:
            args.out.write_text(text)
        return
    if args.spec_only:  # the decision and the plan / longest runs of an earlier invocation
        runs = [r for r in json.loads(saved.read_text()) if not _switching(r)]
        forced_path = args.work / "decision-forced.json"
        decision, forced = (forced_path, True) if forced_path.exists() else (real, False)
        from kit.artifacts import Decision
        from kit.decide.choose.tailarm import tail_arm

        why = tail_arm(Decision.from_json(json.loads(real.read_text())))[1]
    else:
        decision, forced, why = decide(args.work, args)
        runs = []
    print(f"== decision: {'forced; ' if forced else ''}{why}", flush=True)
    for i in range(0 if args.spec_only else args.reps):
        for order in ("plan", "longest_first") if i % 2 == 0 else ("longest_first", "plan"):
            name = f"{order.split('_')[0]}-{i}"
            print(f"== {name}", flush=True)
            runs.append(one_run(args.work, name, args, decision=real, order=order))
            print(json.dumps(runs[-1], default=str)[:600], flush=True)
    predicted = predicted_with(args.work, "plan-0", decision) if forced else None
    if args.force_tail or not forced:
        print("== plan+spec", flush=True)
        spec = one_run(
            args.work,
            "plan-spec",
            args,
            decision=decision,
            order="plan",
            tail_speculation=True,
            tail_drain_s=0,  # restart at once: requests out are cut and sent again (the path to exercise)
        )
        spec["predicted_on_plan_0"] = predicted
        runs.append(spec)
        print(json.dumps(runs[-1], default=str)[:1200], flush=True)
    after = " ".join(open("/proc/loadavg").read().split()[:3])
    saved.write_text(json.dumps(runs, indent=1, default=str))
    text = report(args, runs, {"forced": forced, "why": why}, f"{before} -> {after}")
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
