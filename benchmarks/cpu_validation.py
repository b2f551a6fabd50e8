"""The cost model against the real vLLM (CPU build): predicted plain and n-gram tokens/s beside measured.

    .venv/bin/python benchmarks/cpu_validation.py --out docs/lab/cpu_validation.md     # ~8 min on 2 cores

Starts vLLM from `.venv-vllm` (the CPU build: `python -m vllm.entrypoints.openai.api_server`,
`VLLM_CPU_KVCACHE_SPACE=1`, float32, context 2048) on the demo model twice, plain and with n-gram
speculation (k = 3, prompt lookup 2-4), drives each in a closed loop at each concurrency with the
demo's planned prompts (64 output tokens, `ignore_eos`), twice per level (the machine is shared:
both passes are kept and their median used), and reads vLLM's /metrics counters
(`vllm:spec_decode_num_drafts_total`, `..._num_accepted_tokens_total`) for the accept length.

Then three predictions of the same points: *before*, the step model calibrated as `kit decide`
does on a CPU (a step profile of the model, kit.decide.profile.profiler.calibrate); *after*, calibrated on
the sweep's own points (kit.decide.costmodel.fit_to_sweep: per-step overhead, bandwidth, FLOP/s and the
n-gram host cost, 4 constants over 6 points); and *held out*, the first three fitted on the plain
points only and the n-gram arm predicted from its measured accept length.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def start_vllm(python: Path, model: Path, port: int, spec: dict | None, log: Path) -> subprocess.Popen:
    """vLLM's OpenAI server in its own process group, its output in `log`."""
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--dtype", "float32", "--max-model-len", "2048", "--port", str(port), "--host", "127.0.0.1"]
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def wait_ready(proc: subprocess.Popen, url: str, timeout_s: float = 600) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with code {proc.returncode} before answering")
        try:
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise RuntimeError(f"vLLM did not answer within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (this benchmark started it), then SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _level(
    url: str, model: str, prompts: list[list], C: int, n: int, max_tokens: int
) -> tuple[int, float]:
    """Completion tokens and seconds of `n` requests sent by `C` closed-loop clients."""
    queue = list(range(n))
    tokens = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal tokens
        while queue:
            i = queue.pop()
            body = {"model": model, "messages": prompts[i % len(prompts)], "max_tokens": max_tokens}
            body.update(temperature=0.0, ignore_eos=True)
            r = await http.post(f"{url}/v1/chat/completions", json=body, timeout=600)
            r.raise_for_status()
            tokens += r.json()["usage"]["completion_tokens"]

    async with httpx.AsyncClient() as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(C)))
        return tokens, time.perf_counter() - t0


def spec_counters(url: str) -> tuple[float, float]:
    """(drafts, accepted draft tokens) from vLLM's /metrics."""
    from kit.engines.metrics import parse_prometheus

    m = parse_prometheus(httpx.get(f"{url}/metrics", timeout=10).text)
    return m.get("vllm:spec_decode_num_drafts_total", 0.0), m.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )


def measure_arm(args, prompts: list[list], spec: dict | None, port: int) -> list[dict]:  # noqa: ANN001
    """Sweep rows of one arm: both passes at every concurrency."""
    url, arm, k = f"http://127.0.0.1:{port}", ("spec_k3" if spec else "plain"), (3 if spec else 0)
    proc = start_vllm(args.vllm_python, args.model, port, spec, args.logs / f"vllm-{arm}.log")
    rows = []
    try:
        t0 = time.monotonic()
        wait_ready(proc, url)
        ready_s = time.monotonic() - t0
        model = httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["id"]
        asyncio.run(_level(url, model, prompts, 2, 4, args.max_tokens))  # warm-up, untimed
        for C in args.concurrencies:
            for rep in range(args.passes):
                d0, a0 = spec_counters(url)
                tokens, secs = asyncio.run(_level(url, model, prompts, C, max(16, 2 * C), args.max_tokens))
                d1, a1 = spec_counters(url)
                E = 1 + (a1 - a0) / (d1 - d0) if spec and d1 > d0 else None
                rows.append(
                    {
                        "arm": arm,
                        "spec_k": k,
                        "concurrency": C,
                        "pass": rep,
                        "output_tok_s": tokens / secs,
                        "accept_length": E,
                        "status": "ok",
                        "ready_s": ready_s,
                    }
                )
                print(rows[-1], flush=True)
    finally:
        stop(proc)
    return rows


def predictions(sweep: pd.DataFrame, cfg: dict, input_len: int, max_tokens: int) -> dict[str, pd.Series]:
    """Before / after / held-out predicted tok/s for every row of the (median) sweep."""
    from dataclasses import replace

    from kit.arch import arch_from_config
    from kit.decide import costmodel as cm
    from kit.decide.choose.scenario import CPU_NOMINAL
    from kit.decide.profile.profiler import ProfileGrid, calibrate, profile_steps

    arch, work = arch_from_config(cfg), cm.Workload(input_len, max_tokens, 0.9)
    s = cm.Scenario(arch, CPU_NOMINAL, work=work, draft=cm.NGRAM)
    grid = ProfileGrid(
        batch_sizes=(1, *sorted(set(sweep.concurrency))), q_values=(1, 2), contexts=(128,), reps=3
    )
    before = calibrate(profile_steps(cfg, grid, device="cpu"), arch, CPU_NOMINAL)
    free = ("overhead_s", "bw", "flops", "ngram_seq_s")
    after = cm.fit_to_sweep(sweep, s, free)
    plain = sweep[sweep.spec_k == 0]
    held = cm.fit_to_sweep(plain, s, free[:3])
    out = {}
    for name, eff in (("before", before), ("after", after), ("held_out", held)):
        out[name] = pd.Series(cm.predict_sweep(sweep, replace(s, eff=eff)), index=sweep.index)
        out[name + "_eff"] = eff
    return out


def render(sweep: pd.DataFrame, raw: pd.DataFrame, pred: dict, meta: dict) -> str:
    lines = [
        "# Cost model vs the real vLLM on this CPU",
        "",
        f"Command: `{meta['command']}` ({meta['cores']} cores, {meta['elapsed_s']:.0f} s, {meta['date']}; "
        "other work shared the machine, so each level was run twice and the median is used).",
        "",
        f"Engine: vLLM {meta['vllm']} (CPU build, `.venv-vllm`), demo model, float32; prompts: the demo "
        f"plan ({meta['input_len']} prompt tokens on average), {meta['max_tokens']} output tokens with "
        "`ignore_eos`. n-gram arm: k = 3, prompt lookup 2-4; accept length from /metrics.",
        "",
        "| arm | concurrency | measured tok/s (passes) | accept length | before | after | held out |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in sweep.iterrows():
        passes = " / ".join(
            f"{v:.0f}" for v in raw[(raw.arm == r.arm) & (raw.concurrency == r.concurrency)].output_tok_s
        )
        E = f"{r.accept_length:.2f}" if pd.notna(r.accept_length) else "-"
        cells = [
            f"{pred[k][i]:.0f} ({100 * (pred[k][i] / r.output_tok_s - 1):+.0f}%)"
            for k in ("before", "after", "held_out")
        ]
        lines.append(
            f"| {r.arm} | {r.concurrency} | {r.output_tok_s:.0f} ({passes}) | {E} | "
            + " | ".join(cells)
            + " |"
        )
    lines += ["", "Efficiency constants of each prediction:", ""]
    for k in ("before", "after", "held_out"):
        e = pred[k + "_eff"]
        lines.append(
            f"- {k}: overhead {1e3 * e.overhead_s:.2f} ms/step, layer {1e6 * e.layer_s:.0f} us, "
            f"bw {e.bw:.3f}, flops {e.flops:.3f}, n-gram {1e6 * e.ngram_seq_s:.0f} us/seq, "
            f"spec bookkeeping {1e6 * e.spec_seq_s:.0f} us/seq ({e.source})"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    from kit import stages
    from kit.decide.sweep.setup import sweep_prompts
    from kit.params import load_params
    from kit.prompts.prompt_set import ensure_plan

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=ROOT / "params" / "demo.yaml")
    ap.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm" / "bin" / "python")
    ap.add_argument("--concurrencies", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--port", type=int, default=18731)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--from-raw", type=Path, default=None, help="re-predict a saved cpu_validation_raw.csv")
    args = ap.parse_args()
    args.concurrencies = [int(c) for c in args.concurrencies.split(",")]
    started = time.perf_counter()
    params = load_params(args.params, "cpu-validation")
    folder = stages.prepare(params)
    args.model, args.logs = Path(params.model.path), folder.root / "logs"
    args.logs.mkdir(parents=True, exist_ok=True)
    planned = sweep_prompts(ensure_plan(params, folder), params.data.seed, params.decide.num_prompts)
    prompts = [
        json.loads(p["messages"]) if isinstance(p["messages"], str) else p["messages"] for p in planned
    ]
    input_len = int(statistics.mean(p["prompt_tokens"] for p in planned))
    if args.from_raw:
        raw = pd.read_csv(args.from_raw)
    else:
        raw = pd.DataFrame(
            measure_arm(args, prompts, None, args.port) + measure_arm(args, prompts, NGRAM, args.port + 1)
        )
        raw.to_csv(folder.root / "cpu_validation_raw.csv", index=False)
    sweep = raw.groupby(["arm", "spec_k", "concurrency"], as_index=False).agg(
        output_tok_s=("output_tok_s", "median"),
        accept_length=("accept_length", "median"),
        status=("status", "first"),
    )
    cfg = json.loads((args.model / "config.json").read_text())
    pred = predictions(sweep, cfg, input_len, args.max_tokens)
    vllm = subprocess.run(
        [str(args.vllm_python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
    )
    meta = {
        "command": "python3 " + " ".join(["benchmarks/cpu_validation.py", *sys.argv[1:]]),
        "cores": os.cpu_count(),
        "elapsed_s": time.perf_counter() - started,
        "date": time.strftime("%Y-%m-%d"),
        "vllm": vllm.stdout.strip() or "?",
        "input_len": input_len,
        "max_tokens": args.max_tokens,
    }
    text = render(sweep, raw, pred, meta)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
