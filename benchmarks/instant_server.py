"""An instant OpenAI-compatible server: canned chat completions as fast as one core can answer.

    .venv/bin/python benchmarks/instant_server.py --port 8123                 # serve until stopped
    .venv/bin/python benchmarks/instant_server.py --selftest 40000            # its speed alone (req/s)

A raw asyncio protocol (no framework, HTTP/1.1 keep-alive, request bodies read in full by
Content-Length) standing in for an engine where only the client side is measured
(`benchmarks/bench_scale.py`). It answers:

- `POST /v1/chat/completions`: a chat.completion of about 1,500 characters with a `usage` block
  (prompt tokens: the request body's length / 4; completion tokens: 340-439). The text is one of
  `--texts` (8,192) made at start-up from Zipf-weighted pseudo-words, so that it compresses about
  like prose (zstd ~3x, not the 100x of one repeated answer), after the request's number, so that
  every completion is distinct. `--same-answer`: byte-identical answers, as nginx serving a file.
  With `"stream": true`: SSE chunks (role, the content in pieces, the finish reason), a usage
  chunk with empty `choices`, then `data: [DONE]`.
- `GET /health` (200, empty), `GET /v1/models` (one model, `instant`), `GET /stats` (requests
  answered, as JSON); anything else 404 (so `/metrics` and `/server_info` say "not here", as on
  an engine without them).

`--selftest N` starts the server in a child process and drives it with aiohttp at concurrency 64
(a ~2 KB request body, not streamed): req/s seen by the client, and the server's CPU seconds per
1,000 requests, which gives what the server alone sustains on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import time

TEXT_CHARS = 1500
STREAM_PIECES = 24
STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
MODELS = json.dumps({"object": "list", "data": [{"id": "instant", "object": "model", "owned_by": "bench"}]})


def _response(status: bytes, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status, ctype, len(body)) + body
    )


HEALTH = _response(b"200 OK", b"")
MODELS_RESPONSE = _response(b"200 OK", MODELS.encode())
NOT_FOUND = _response(b"404 Not Found", b'{"detail":"Not Found"}')
LENGTH_REQUIRED = _response(b"411 Length Required", b'{"detail":"Content-Length required"}')


def make_texts(count: int, seed: int = 0, vocabulary: int = 4000) -> list[str]:
    """`count` texts of about TEXT_CHARS characters: sentences of Zipf-weighted pseudo-words."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"] + ["th", "st", "er", "an", "in"]
    words = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(vocabulary)})
    rng.shuffle(words)
    cum, total = [], 0.0
    for rank in range(len(words)):
        total += 1 / (rank + 1)
        cum.append(total)
    texts = []
    for _ in range(count):
        picked = rng.choices(words, cum_weights=cum, k=TEXT_CHARS // 4)
        out, size, i = [], 0, 0
        while size < TEXT_CHARS and i < len(picked):
            n = rng.randint(6, 22)
            sentence = " ".join(picked[i : i + n])
            out.append(sentence[:1].upper() + sentence[1:] + ".")
            size, i = size + len(sentence) + 2, i + n
        texts.append(" ".join(out)[:TEXT_CHARS].rsplit(" ", 1)[0] + ".")
    return texts


class Answers:
    """Builds the completion bodies; counts what it answered."""

    def __init__(self, same: bool, texts: int = 8192) -> None:
        self.same = same
        self.n = 0
        self.texts = make_texts(1 if same else texts)
        self.fixed = self.completion(0, 400)

    def text(self, n: int) -> str:
        return self.texts[0] if self.same else f"Answer {n}. {self.texts[n % len(self.texts)]}"

    def completion(self, n: int, body_len: int) -> bytes:
        text = self.text(n)
        prompt, done = body_len // 4, 340 + n % 100
        return json.dumps(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1767225600,
                "model": "instant",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done},
            },
            separators=(",", ":"),
        ).encode()

    def chat(self, body: bytes) -> bytes:
        self.n += 1
        n = 0 if self.same else self.n
        if STREAM_RE.search(body):
            return self.stream(n, len(body))
        payload = self.fixed if self.same else self.completion(n, len(body))
        return _response(b"200 OK", payload)

    def stream(self, n: int, body_len: int) -> bytes:
        text = self.text(n)
        head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1767225600}
        head["model"] = "instant"
        step = -(-len(text) // STREAM_PIECES)
        deltas = [{"role": "assistant", "content": ""}]
        deltas += [{"content": text[i : i + step]} for i in range(0, len(text), step)]
        events = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        prompt, done = body_len // 4, 340 + n % 100
        usage = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
        events.append({**head, "choices": [], "usage": usage})
        sse = "".join(f"data: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events)
        return _response(b"200 OK", (sse + "data: [DONE]\n\n").encode(), b"text/event-stream")


class Http(asyncio.Protocol):
    """One keep-alive connection: parse pipelined requests out of the buffer, answer each in order."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17 : stop if stop >= 0 else len(head)])
            elif b"\r\ntransfer-encoding:" in head:
                self._send(LENGTH_REQUIRED, close=True)
                return
            total = end + 4 + length
            if len(buf) < total:
                return
            body = bytes(buf[end + 4 : total])
            del buf[:total]
            self._send(self._answer(head, body), close=b"\r\nconnection: close" in head)

    def _answer(self, head: bytes, body: bytes) -> bytes:
        line = head[: head.find(b"\r\n")] if b"\r\n" in head else head
        method, _, rest = line.partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if method == b"post" and path == b"/v1/chat/completions":
            return self.answers.chat(body)
        if method == b"get" and path == b"/health":
            return HEALTH
        if method == b"get" and path == b"/v1/models":
            return MODELS_RESPONSE
        if method == b"get" and path == b"/stats":
            return _response(b"200 OK", json.dumps({"requests": self.answers.n}).encode())
        return NOT_FOUND

    def _send(self, data: bytes, close: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(data)
        if close:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(host: str, port: int, same: bool, texts: int, ready: str | None) -> None:
    loop = asyncio.get_running_loop()
    answers = Answers(same, texts)
    server = await loop.create_server(lambda: Http(answers), host, port, backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = server.sockets[0].getsockname()[1]
    if ready:  # the port it listens on, for a parent that asked for port 0 (written whole, then renamed)
        with open(ready + ".tmp", "w") as f:
            f.write(str(bound))
        os.replace(ready + ".tmp", ready)
    print(f"instant server on http://{host}:{bound}", flush=True)
    async with server:
        await stop.wait()
    print(f"instant server: {answers.n} completions answered", flush=True)


def selftest(requests: int, concurrency: int = 64) -> dict:
    """Start the server in a child process, drive it with aiohttp, report req/s and its CPU cost."""
    import tempfile

    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        server, port = start(os.path.join(tmp, "port"))
        try:
            proc = psutil.Process(server.pid)
            return asyncio.run(_drive(f"http://127.0.0.1:{port}", requests, concurrency, proc))
        finally:
            server.terminate()
            server.wait(10)


def start(ready: str, *extra: str, log=None, timeout_s: float = 30.0):  # noqa: ANN001, ANN201
    """Start the server in its own process on a free port: (Popen, port)."""
    import subprocess
    import sys

    cmd = [sys.executable, os.path.abspath(__file__), "--port", "0", "--ready-file", ready, *extra]
    server = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(ready):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"the instant server did not start (exit code {server.poll()})")
        time.sleep(0.05)
    with open(ready) as f:
        return server, int(f.read())


async def _drive(url: str, requests: int, concurrency: int, proc) -> dict:  # noqa: ANN001
    """The plain aiohttp load generator of bench_client.py (answers read and checked), timed here
    with the server's CPU."""
    from bench_client import drive_aiohttp

    cpu0, t0 = sum(proc.cpu_times()[:2]), time.perf_counter()
    await drive_aiohttp(url, requests, concurrency, stream=False)
    wall, cpu = time.perf_counter() - t0, sum(proc.cpu_times()[:2]) - cpu0
    return {
        "requests": requests,
        "concurrency": concurrency,
        "client_req_s": round(requests / wall),
        "server_cpu_s_per_1000": round(1000 * cpu / requests, 3),
        "server_req_per_cpu_s": round(requests / cpu) if cpu else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8123, help="0: any free port (see --ready-file)")
    ap.add_argument("--same-answer", action="store_true", help="byte-identical answers (no request number)")
    ap.add_argument("--texts", type=int, default=8192, help="distinct answer texts (cycled)")
    ap.add_argument("--ready-file", help="write the bound port here once listening")
    ap.add_argument("--selftest", type=int, metavar="N", help="measure the server alone over N requests")
    args = ap.parse_args()
    if args.selftest:
        print(json.dumps(selftest(args.selftest), indent=2))
        return
    asyncio.run(serve(args.host, args.port, args.same_answer, args.texts, args.ready_file))


if __name__ == "__main__":
    main()
