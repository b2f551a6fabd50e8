"""Stage 3 at the engine's ceiling, on the real vLLM (CPU build): offline, a plain client, the kit.

    make engine-vllm && .venv/bin/kit demo-assets
    .venv/bin/python benchmarks/bench_ceiling.py --rounds 3 --out docs/lab/bench_ceiling.md

One plan for every cell: params/demo-vllm.yaml (the demo model, its six fixture sources, 64 output
tokens at temperature 0.7, chat messages with tools) with `--samples` samples per prompt, planned
once by the kit. Each round runs every cell, in an order rotated from round to round so that
machine load hits every cell alike:

- `offline`: vLLM's own `LLM.generate` over the same prompts, rendered by the model's chat template
  with the same tools and switches (no HTTP at all: the engine's ceiling on this machine);
- `client xF`: a plain aiohttp client sending the kit's exact request bodies to a vLLM server
  started by hand with the kit's flags, F x the engine's capacity in flight (1, 1.5, 2, 3: the
  queue depth stage 3 should keep);
- `kit`: `kit decide` then `kit generate` on the demo's params, in a new run folder each round,
  exactly as a user runs them (the decision picks the arm; stage 3 sizes its own concurrency).

Throughput is output tokens over the time from the first request to the last answer (for the kit,
`generating_s` of its manifest; offline, the `generate` call). While a served cell runs, a
separate process reads the server's /metrics every 0.25 s: the share of samples, between 10% and
90% of the run, in which the engine ran its full capacity, and in which requests were waiting.
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
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
KIT = ROOT / ".venv" / "bin" / "kit"
DEPTHS = (1.0, 1.5, 2.0, 3.0)

SAMPLER = r"""
import re, sys, time, urllib.request
url, out = sys.argv[1], open(sys.argv[2], "w")
while True:
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=2).read().decode()
        run = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)", text, re.M)
        wait = re.search(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)", text, re.M)
        if run and wait:
            out.write(f"{time.time():.3f} {run.group(1)} {wait.group(1)}\n")
            out.flush()
    except Exception:
        pass
    time.sleep(0.25)
"""

OFFLINE = r"""
import json, sys, time
from transformers import AutoTokenizer
from vllm import LLM, SamplingParams
job = json.load(open(sys.argv[1]))
tok = AutoTokenizer.from_pretrained(job["model"])
texts = [tok.apply_chat_template(r["messages"], tools=r["tools"], add_generation_prompt=True,
                                 tokenize=False, **job["template_kwargs"]) for r in job["requests"]]
llm = LLM(model=job["model"], max_model_len=job["max_model_len"], dtype="float32")
params = [SamplingParams(max_tokens=r["max_tokens"], temperature=job["temperature"], top_p=job["top_p"])
          for r in job["requests"]]
t0 = time.perf_counter()
outs = llm.generate(texts, params, use_tqdm=False)
dt = time.perf_counter() - t0
tokens = sum(len(o.outputs[0].token_ids) for o in outs)
print("RESULT " + json.dumps({"tokens": tokens, "seconds": dt, "requests": len(outs)}))
"""


# --- the plan and the requests, as the kit makes them --------------------------------------------


def bench_params(work: Path, run: str, samples: int, port: int | None) -> Path:
    """params/demo-vllm.yaml with absolute paths, `samples` per prompt and a fixed server port."""
    p = yaml.safe_load((ROOT / "params" / "demo-vllm.yaml").read_text())
    p["run"], p["output_dir"] = run, str(work / "outputs")
    p["model"]["path"] = str(ROOT / ".cache" / "demo" / "model")
    p["engine"]["python"] = str(VLLM_PY)
    if port:
        p["engine"]["port"] = port
    p["data"]["demo_fixtures"] = str(ROOT / ".cache" / "demo" / "data")
    for s in p["data"]["sources"]:
        s["data_files"] = [str(ROOT / ".cache" / "demo" / "data" / Path(f).name) for f in s["data_files"]]
    p["generate"]["sampling"]["n"] = samples
    path = work / f"{run}.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def plan_items(params_path: Path) -> tuple[Any, list[dict[str, Any]]]:
    """(params, every work item of the plan), planned by the kit in a run folder of its own."""
    from kit.generate.work import iter_items, pending_items
    from kit.params import SpeculativeParams, load_params
    from kit.prompts.prompt_set import ensure_prompts
    from kit.runfolder import RunFolder

    params = load_params(params_path)
    plain = params.engine.model_copy(update={"speculative": SpeculativeParams()})
    params = params.model_copy(update={"engine": plain})  # the plain arm: what a plain decision runs
    folder = RunFolder(params.output_dir / params.run)
    folder.ensure()
    prompts = ensure_prompts(params, folder)
    todo, work = pending_items(prompts, params.generate.sampling.n, set(), (0, 1), None)
    return params, list(iter_items(todo, work))


def request_bodies(params: Any, items: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The chat completion bodies stage 3 sends for these items (GenerationLoop._send)."""
    from kit.engines.request_fields import run_request_fields, tool_request_fields

    fields, tool_fields = run_request_fields(params), tool_request_fields(params)
    budgets = {s.name: s.max_tokens for s in params.data.sources if s.max_tokens}
    bodies = []
    for it in items:
        body = {"model": model, "messages": it["messages"], "stream": False, **fields}
        body["max_tokens"] = budgets.get(it["source"], params.generate.sampling.max_tokens)
        if it["tools_list"]:
            body.update(tools=it["tools_list"], **tool_fields)
        bodies.append(body)
    return bodies


# --- measuring a served cell from outside ----------------------------------------------------------


class Gauges:
    """The server's running / waiting gauges, read every 0.25 s by a separate process."""

    def __init__(self, url: str, work: Path) -> None:
        self.url, self.path = url, work / f"gauges-{time.monotonic_ns()}.txt"

    def __enter__(self) -> Gauges:
        self.proc = subprocess.Popen([sys.executable, "-c", SAMPLER, self.url, str(self.path)])
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()

    def shares(self, capacity: int) -> dict[str, float | None]:
        rows = [tuple(map(float, line.split())) for line in self.path.read_text().splitlines() if line]
        busy = [r for r in rows if r[1] > 0 or r[2] > 0]
        mid = busy[len(busy) // 10 : len(busy) * 9 // 10]
        if not mid:
            return {"at_capacity": None, "queued": None, "samples": 0}
        return {
            "at_capacity": sum(r[1] >= capacity for r in mid) / len(mid),
            "queued": sum(r[2] >= 1 for r in mid) / len(mid),
            "full_or_queued": sum(r[1] + r[2] >= capacity for r in mid) / len(mid),
            "samples": len(mid),
        }


def wait_ready(url: str, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


async def plain_client(url: str, bodies: list[dict[str, Any]], in_flight: int) -> dict[str, Any]:
    """A plain aiohttp load generator: `in_flight` workers over the bodies, JSON answers."""
    import aiohttp

    todo, tokens = iter(bodies), 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal tokens
        for body in todo:
            async with session.post(url + "/v1/chat/completions", json=body) as r:
                r.raise_for_status()
                tokens += (await r.json())["usage"]["completion_tokens"]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(in_flight)))
        return {"tokens": tokens, "seconds": time.perf_counter() - t0}


# --- the cells ---------------------------------------------------------------------------------------


def offline_cell(params: Any, items: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    from kit.engines.request_fields import run_request_fields

    fields = run_request_fields(params)
    budgets = {s.name: s.max_tokens for s in params.data.sources if s.max_tokens}
    job = {
        "model": str(params.model.path),
        "max_model_len": params.engine.context_length,
        "temperature": fields.get("temperature", 0.7),
        "top_p": fields.get("top_p", 1.0),
        "template_kwargs": fields.get("chat_template_kwargs", {}),
        "requests": [
            {
                "messages": it["messages"],
                "tools": it["tools_list"],
                "max_tokens": budgets.get(it["source"], params.generate.sampling.max_tokens),
            }
            for it in items
        ],
    }
    path = work / "offline-job.json"
    path.write_text(json.dumps(job))
    env = {**os.environ, **params.engine.env}
    done = subprocess.run([str(VLLM_PY), "-c", OFFLINE, str(path)], capture_output=True, text=True, env=env)
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not found:
        raise RuntimeError(f"offline vLLM failed:\n{done.stderr[-3000:]}")
    return json.loads(found[-1][7:])


def client_cells(params: Any, items: list[dict[str, Any]], work: Path, capacity: int) -> dict[str, dict]:
    """A server started by hand with the kit's flags; the plain client at each depth, in turn."""
    from kit.engines.flavors import server_command, server_env
    from kit.engines.process import free_port

    port = free_port()
    argv = server_command(params, port)
    log = open(work / f"hand-server-{port}.log", "wb")
    env = {**os.environ, **server_env(params)}
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    out: dict[str, dict] = {}
    try:
        wait_ready(url)
        model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"]
        bodies = request_bodies(params, items, model)
        asyncio.run(plain_client(url, bodies[:64], 16))  # warm-up, not measured
        for depth in DEPTHS:
            with Gauges(url, work) as gauges:
                result = asyncio.run(plain_client(url, bodies, int(depth * capacity)))
            out[f"client x{depth:g}"] = {**result, **gauges.shares(capacity)}
    finally:
        os.killpg(server.pid, 15)
        server.wait(60)
    return out


def kit_cell(work: Path, round_no: int, samples: int, capacity: int) -> dict[str, Any]:
    """`kit decide` then `kit generate`, as a user runs them, in a new run folder."""
    from kit.decide.choose.decision import decision_arm
    from kit.engines.process import free_port

    port = free_port()
    path = bench_params(work, f"kit-r{round_no}", samples, port)
    t0 = time.perf_counter()
    decide = subprocess.run([str(KIT), "decide", str(path)], capture_output=True, text=True)
    if decide.returncode:
        raise RuntimeError(f"kit decide failed:\n{decide.stderr[-3000:]}")
    decide_s = time.perf_counter() - t0
    with Gauges(f"http://127.0.0.1:{port}", work) as gauges:
        gen = subprocess.run([str(KIT), "generate", str(path)], capture_output=True, text=True)
    if gen.returncode:
        raise RuntimeError(f"kit generate failed:\n{gen.stderr[-3000:]}")
    run = work / "outputs" / f"kit-r{round_no}"
    manifest = json.loads((run / "manifest.json").read_text())
    decision = json.loads((run / "decision.json").read_text())
    shards = sorted((run / "generations").glob("part-*.parquet"))
    tokens = pc.sum(pq.read_table(shards, columns=["completion_tokens"]).column(0)).as_py()
    return {
        "tokens": tokens,
        "seconds": manifest["generating_s"],
        "decide_s": decide_s,
        "chosen_arm": decision_arm(decision).name,
        "engine_capacity": manifest["engine_capacity"],
        "concurrency": manifest["concurrency"],
        **gauges.shares(manifest["engine_capacity"] or capacity),
    }


# --- rounds and the report ---------------------------------------------------------------------------


def run_rounds(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    from kit.engines.flavors.vllm import CPU_SERVER_SEQS as VLLM_CPU_SERVER_SEQS

    params, items = plan_items(bench_params(work, "plan", args.samples, None))
    capacity = VLLM_CPU_SERVER_SEQS
    args.requests = len(items)
    print(f"{len(items)} requests per cell; engine capacity {capacity}", flush=True)
    cells = ["offline", "client", "kit"]
    results = []
    for r in range(args.rounds):
        order = cells[r % len(cells) :] + cells[: r % len(cells)]
        for cell in order:
            t0 = time.perf_counter()
            if cell == "offline":
                got = {"offline": offline_cell(params, items, work)}
            elif cell == "client":
                got = client_cells(params, items, work, capacity)
            else:
                got = {"kit": kit_cell(work, r, args.samples, capacity)}
            for name, m in got.items():
                m = {"round": r, "cell": name, "tok_s": m["tokens"] / m["seconds"], **m}
                results.append(m)
                print(json.dumps(m), flush=True)
            print(f"round {r} {cell}: {time.perf_counter() - t0:.0f} s", flush=True)
    return results


def span(values: list[float], fmt: str = "{:.0f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def report(args: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    by_cell: dict[str, list[dict]] = {}
    for m in results:
        by_cell.setdefault(m["cell"], []).append(m)
    best_client = {
        r: max(m["tok_s"] for m in results if m["round"] == r and m["cell"].startswith("client"))
        for r in range(args.rounds)
    }
    # the best of four noisy client cells is biased upward by the noise itself: the median client
    # cell of the round is the fair yardstick for one draw such as the kit's
    median_client = {
        r: statistics.median(
            m["tok_s"] for m in results if m["round"] == r and m["cell"].startswith("client")
        )
        for r in range(args.rounds)
    }
    offline = {m["round"]: m["tok_s"] for m in by_cell.get("offline", [])}
    lines = [
        "# Stage 3 at the engine's ceiling (vLLM CPU build, demo model)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_ceiling.py --rounds {args.rounds} "
        f"--samples {args.samples} --out {args.out}`, {time.strftime('%Y-%m-%d')}, on the 2-core "
        f"development machine (load average before / after: {args.load_before} / {load_average()}).",
        "",
        f"{args.requests} requests per cell (params/demo-vllm.yaml, {args.samples} samples per prompt, "
        "64 output tokens, temperature 0.7, tools on the function-calling prompts). Rounds interleave "
        "the cells; ratios are taken within a round against that round's best plain client.",
        "",
        "| cell | output tok/s min / median / max | x best plain client (per round) "
        "| x median plain client (per round) | x offline "
        "| running = capacity | requests waiting | engine full (running = capacity, or waiting) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell, ms in by_cell.items():
        ratio = [m["tok_s"] / best_client[m["round"]] for m in ms]
        to_median = [m["tok_s"] / median_client[m["round"]] for m in ms]
        off = [m["tok_s"] / offline[m["round"]] for m in ms if m["round"] in offline]
        cap = [m["at_capacity"] for m in ms if m.get("at_capacity") is not None]
        queued = [m["queued"] for m in ms if m.get("queued") is not None]
        full = [m["full_or_queued"] for m in ms if m.get("full_or_queued") is not None]
        lines.append(
            f"| {cell} | {span([m['tok_s'] for m in ms])} | {span(ratio, '{:.2f}')} | "
            f"{span(to_median, '{:.2f}')} | "
            f"{span(off, '{:.2f}') if off else '-'} | {span(cap, '{:.0%}') if cap else '-'} | "
            f"{span(queued, '{:.0%}') if queued else '-'} | {span(full, '{:.0%}') if full else '-'} |"
        )
    kit = by_cell.get("kit", [])
    if kit:
        lines += [
            "",
            "The kit's cell: "
            + "; ".join(
                f"round {m['round']}: decided {m['chosen_arm']} in {m['decide_s']:.0f} s, engine capacity "
                f"{m['engine_capacity']}, {m['concurrency']} in flight"
                for m in kit
            )
            + ".",
        ]
    return "\n".join(lines) + "\n"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=12, help="samples per prompt")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    ap.add_argument("--results", type=Path, default=None, help="render the report of a results.json only")
    args = ap.parse_args()
    if args.results:  # the table again from a finished run's measurements
        results = json.loads(args.results.read_text())
        args.rounds = 1 + max(m["round"] for m in results)
        args.requests = next(m["requests"] for m in results if m["cell"] == "offline")
        args.load_before = "(not recorded)"
    else:
        if not (VLLM_PY.parent.parent / ".ready").is_file():
            sys.exit("the vLLM environment is not built: make engine-vllm")
        args.load_before = load_average()
        work = args.work or Path(tempfile.mkdtemp(prefix="bench-ceiling-"))
        work.mkdir(parents=True, exist_ok=True)
        results = run_rounds(args, work)
        (work / "results.json").write_text(json.dumps(results, indent=1))
    text = report(args, results)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
