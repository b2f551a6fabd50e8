"""A stand-in for `python -m sglang.launch_server`, for tests of the kit's SGLang integration.

Not SGLang: it accepts the launcher flags the kit passes, under the names of SGLang 0.5.23
(`--cuda-graph-max-bs-decode`, `--mamba-radix-cache-strategy`: the kit must rename its own from
the launcher's --help; unknown flags fail as in SGLang),
records its argv in $FAKE_SGLANG_LOG, and serves the endpoints the kit reads: /health,
/v1/models, /server_info, /metrics and /v1/chat/completions with speculative accounting
(spec_verify_ct) when a speculative algorithm is set. Answers are canned and begin with
`re:<digest of the request's messages>`, so a test can check that each completion answers its own
prompt (then "word" repeated, or random hex words with $FAKE_SGLANG_NOISE); a step takes STEP_S
($FAKE_SGLANG_STEP_S), and a speculative step yields ACCEPT tokens, so arms differ measurably.

Faults on a schedule, for the kit's robustness tests: $FAKE_SGLANG_FAULTS names a JSON file,
read again whenever it changes, e.g.
    {"bad_rate": 0.3, "error_rate": 0.1, "bad_first": 12, "bad_marker": "ALWAYS-ABORT"}
bad_rate: the share of chat answers that are HTTP 200 with a body that is no completion (no
`choices`, empty content with a null finish_reason, or finish_reason `abort`, in turn);
bad_first: the first N answers of this process are such bodies;
error_rate: the share answered HTTP 500; bad_marker: a request whose messages contain it always
gets `abort`; stuck_after: from the N-th chat request of this process on, requests hang (no token is
generated, nothing answers) while /health, /v1/models and /metrics still answer (with stuck_pid:
only in the process of that pid, so that a restarted server works); first_compile_s: the first chat
request of this process starts a first-use compile of that many seconds (SGLang's flashinfer
sampler, ~90 s on an H100), during which no request answers, no token is counted and /health
answers 503, as SGLang's does while its scheduler is busy. Each injected fault
is a line in the server log. Kills and freezes come from outside (signals to this process).
"""

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import random
import sys

STEP_S = float(os.environ.get("FAKE_SGLANG_STEP_S", "0.002"))
NOISE = bool(os.environ.get("FAKE_SGLANG_NOISE"))  # random words: answers that do not compress
ACCEPT = {1: 1.8, 2: 2.4, 3: 2.9}
BAD_KINDS = ("no_choices", "null_finish", "abort")


def digest(messages: object) -> str:
    """Short digest of a request's messages: the first word of every answer."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]


class Faults:
    """The fault schedule in $FAKE_SGLANG_FAULTS, re-read when the file changes."""

    def __init__(self, path: str | None) -> None:
        self.path, self.mtime, self.spec = path, None, {}
        self.kinds = itertools.cycle(BAD_KINDS)
        self.seen = 0

    def current(self) -> dict:
        if self.path:
            try:
                mtime = os.stat(self.path).st_mtime_ns
                if mtime != self.mtime:
                    with open(self.path) as f:
                        self.spec, self.mtime = json.load(f), mtime
            except (OSError, ValueError):
                self.spec = {}
        return self.spec

    def pick(self, messages: object) -> str | None:
        """The fault for this request: a bad-body kind, "error", or None for a good answer."""
        spec = self.current()
        marker = spec.get("bad_marker")
        if marker and marker in json.dumps(messages):
            return "abort"
        self.seen += 1
        if self.seen <= spec.get("bad_first", 0):
            return next(self.kinds)
        roll = random.random()
        if roll < spec.get("error_rate", 0.0):
            return "error"
        if roll < spec.get("error_rate", 0.0) + spec.get("bad_rate", 0.0):
            return next(self.kinds)
        return None


def bad_body(kind: str, usage: dict) -> dict:
    if kind == "no_choices":
        return {"id": "x", "object": "chat.completion", "usage": usage}
    reason = None if kind == "null_finish" else "abort"
    message = {"role": "assistant", "content": "" if kind == "null_finish" else None}
    return {"choices": [{"index": 0, "message": message, "finish_reason": reason}], "usage": usage}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    for flag in (
        "--tp-size",
        "--dp-size",
        "--max-running-requests",
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-max-bs-prefill",
        "--context-length",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--speculative-ngram-max-bfs-breadth",
        "--max-total-tokens",
    ):
        p.add_argument(flag, type=int)
    for flag in ("--mem-fraction-static",):
        p.add_argument(flag, type=float)
    for flag in (
        "--attention-backend",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--mamba-radix-cache-strategy",
        "--tool-call-parser",
        "--reasoning-parser",
        "--load-format",
        "--sampling-backend",
        "--grammar-backend",
    ):
        p.add_argument(flag)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    return p.parse_args()


def main() -> None:
    args = parse()
    if os.environ.get("FAKE_SGLANG_LOG"):
        with open(os.environ["FAKE_SGLANG_LOG"], "a") as f:
            f.write(json.dumps(sys.argv[1:]) + "\n")
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()
    faults = Faults(os.environ.get("FAKE_SGLANG_FAULTS"))
    drafted = args.speculative_num_steps or (args.speculative_num_draft_tokens or 1) - 1
    k = drafted if args.speculative_algorithm else 0
    running = args.max_running_requests or (48 if k else 256)
    state = {"running": 0, "tokens": 0, "requests": 0, "compiled_at": None}

    def compiling() -> bool:
        return state["compiled_at"] is not None and asyncio.get_running_loop().time() < state["compiled_at"]

    @app.get("/health")
    async def health():
        from fastapi.responses import JSONResponse

        if compiling():
            return JSONResponse({"error": "the scheduler is compiling"}, status_code=503)
        return {}

    @app.get("/v1/models")
    def models() -> dict:
        return {"data": [{"id": args.model_path}]}

    @app.get("/server_info")
    def server_info() -> dict:
        return {
            # as SGLang 0.5.16 on the H200: the argument as launched (48 once speculation lowered it,
            # null when unset), what the scheduler runs in internal_states
            "max_running_requests": args.max_running_requests or (running if k else None),
            "dp_size": args.dp_size or 1,
            "speculative_algorithm": args.speculative_algorithm,
            "version": "0.0.2-fake",
            "internal_states": [
                {"avg_spec_accept_length": ACCEPT.get(k), "effective_max_running_requests_per_dp": running}
            ],
        }

    @app.get("/metrics")
    def metrics():
        from fastapi.responses import PlainTextResponse

        lines = [
            f'sglang:num_running_reqs{{dp_rank="0"}} {state["running"]}',
            f'sglang:generation_tokens_total{{dp_rank="0"}} {state["tokens"]}',
            'sglang:gen_throughput{dp_rank="0"} 1234.5',
        ]
        if k:
            lines.append(f'sglang:spec_accept_length{{dp_rank="0"}} {ACCEPT[k]}')
        return PlainTextResponse("\n".join(lines) + "\n")

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        from fastapi.responses import JSONResponse

        n = int(body.get("max_tokens") or 16)
        steps = max(1, round(n / ACCEPT[k])) if k else n
        state["requests"] += 1
        spec = faults.current()
        if spec.get("first_compile_s") and state["compiled_at"] is None:
            print(f"fake_sglang: injected fault first_compile ({spec['first_compile_s']} s)", flush=True)
            state["compiled_at"] = asyncio.get_running_loop().time() + float(spec["first_compile_s"])
        if compiling():
            await asyncio.sleep(state["compiled_at"] - asyncio.get_running_loop().time())
        stuck = spec.get("stuck_after") if spec.get("stuck_pid", os.getpid()) == os.getpid() else None
        if stuck is not None and state["requests"] > stuck:
            if state["requests"] == stuck + 1:
                print("fake_sglang: injected fault stuck (requests hang, /health answers)", flush=True)
            await asyncio.Event().wait()  # never set: generation hangs, the process stays healthy
        try:
            await asyncio.sleep(steps * STEP_S)
        finally:
            state["running"] -= 1
        state["tokens"] += n
        usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10}
        if k:
            usage["spec_verify_ct"] = steps
        fault = faults.pick(body.get("messages"))
        if fault:
            print(f"fake_sglang: injected fault {fault}", flush=True)  # counted by the soak benchmark
        if fault == "error":
            return JSONResponse({"error": "injected fault"}, status_code=500)
        if fault:
            return bad_body(fault, usage)
        words = (os.urandom(4).hex() for _ in range(n - 1)) if NOISE else ("word" for _ in range(n - 1))
        content = f"re:{digest(body.get('messages'))} " + " ".join(words)
        return {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}
            ],
            "usage": usage,
        }

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
