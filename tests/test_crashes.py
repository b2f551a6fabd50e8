# ruff: noqa: E501  (engine log lines as the engines write them)
"""A server that dies while serving is named by the engine's own error (kit.engines.crashes).

The logs below are in the engines' own formats: SGLang's scheduler logs "Scheduler hit an
exception:" and the traceback (sglang/srt/managers/scheduler.py), its launcher then kills the whole
tree (exit -9, the reaper's 137); vLLM's engine-core process prefixes each line it writes with its
name and pid. The SGLang error is the one seen on the H200 (issue 45).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kit.engines.crashes import last_exception, last_running, read_crash
from kit.engines.process import ServerProcess
from kit.params import RunParams

SGLANG_LOG = """\
[2026-12-03 14:02:11] Decode batch, #running-req: 12, #token: 9812, token usage: 0.14, cuda graph: True, gen throughput (token/s): 610.42, #queue-req: 0
[2026-12-03 14:02:17] Prefill batch, #new-seq: 31, #new-token: 8192, #cached-token: 0, token usage: 0.31, #running-req: 12, #queue-req: 37
[2026-12-03 14:02:17] Scheduler hit an exception: Traceback (most recent call last):
  File "/tmp/site/sglang/srt/managers/scheduler.py", line 3087, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/site/sglang/srt/speculative/eagle_worker.py", line 402, in verify
    self.draft_runner.attn_backend.init_forward_metadata(batch)
  File "/tmp/site/sglang/srt/layers/attention/triton_backend.py", line 612, in _update_target_verify_buffers
    self.cuda_graph_custom_mask[: custom_mask.shape[0]].copy_(custom_mask)
RuntimeError: The expanded size of the tensor (2621440) must match the existing size (2622720) at non-singleton dimension 0.  Target sizes: [2621440].  Tensor sizes: [2622720]

[2026-12-03 14:02:17] Received sigquit from a child process. It usually means the child failed.
"""

VLLM_LOG = """\
(APIServer pid=811) INFO 12-04 10:01:02 [loggers.py:123] Engine 000: Avg prompt throughput: 120.1 tokens/s, Avg generation throughput: 88.0 tokens/s, Running: 7 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%
(EngineCore_DP0 pid=903) ERROR 12-04 10:01:03 [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=903) ERROR 12-04 10:01:03 [core.py:710] Traceback (most recent call last):
(EngineCore_DP0 pid=903)   File "/work/.venv-vllm/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core
(EngineCore_DP0 pid=903)     engine_core.run_busy_loop()
(EngineCore_DP0 pid=903)   File "/work/.venv-vllm/lib/python3.11/site-packages/vllm/v1/worker/cpu_model_runner.py", line 88, in execute_model
(EngineCore_DP0 pid=903)     raise ValueError("bad block table")
(EngineCore_DP0 pid=903) ValueError: bad block table
(APIServer pid=811) ERROR 12-04 10:01:03 [async_llm.py:480] AsyncLLM output_handler failed.
"""


def test_sglang_scheduler_crash_is_named_by_its_own_error() -> None:
    crash = read_crash(SGLANG_LOG, 137, in_flight=43, log="logs/sweep-spec_k3.log")
    assert crash.error is not None and crash.error.startswith(
        "RuntimeError: The expanded size of the tensor (2621440) must match the existing size (2622720)"
    )
    assert crash.where == "sglang/srt/layers/attention/triton_backend.py:612 in _update_target_verify_buffers"
    assert crash.running == 43, "the last status line: its 12 running and the 31 it added"
    line = crash.sentence("spec_k3's server")
    assert line.startswith("spec_k3's server was killed by SIGKILL (exit 137) while serving: RuntimeError")
    assert "the engine last reported 43 running requests" in line and "logs/sweep-spec_k3.log" in line
    advice = crash.advice(speculative=True)
    assert "engine.attention_backend" in advice and "smaller k" in advice and "version" in advice


def test_vllm_engine_core_crash_is_read_through_its_line_prefix() -> None:
    error, where = last_exception(VLLM_LOG)
    assert error == "ValueError: bad block table"
    assert where == "vllm/v1/worker/cpu_model_runner.py:88 in execute_model"
    assert last_running(VLLM_LOG) == 7


def test_a_kill_from_outside_says_there_was_no_error() -> None:
    crash = read_crash("INFO: Uvicorn running on http://127.0.0.1:8000\n", -9)
    assert crash.error is None and crash.where is None and crash.running is None
    assert "was killed by SIGKILL (exit -9)" in crash.sentence() and "no error in its log" in crash.sentence()
    assert "dmesg" in crash.advice(speculative=False)


def test_what_the_engine_says_as_the_kit_stops_it_is_not_why_it_died() -> None:
    """vLLM's API server killed from outside; its engine core, SIGTERMed by the kit's reaper with four
    requests running, aborts them with a traceback of its own (seen in a CI run): not the cause."""
    log = (
        VLLM_LOG.split("(EngineCore_DP0 pid=903) ERROR")[0]
        + "[kit reaper 880] sending SIGTERM to process group 811\n"
        + "(EngineCore_DP0 pid=903) INFO 12-04 10:01:03 [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM\n"
        + "(EngineCore_DP0 pid=903) Traceback (most recent call last):\n"
        + '(EngineCore_DP0 pid=903)   File "/v/site-packages/vllm/distributed/device_communicators/shm_broadcast.py", line 501, in acquire_read\n'
        + "(EngineCore_DP0 pid=903) RuntimeError: cancelled\n"
        + "(EngineCore_DP0 pid=903) Running: 0 reqs, Waiting: 0 reqs\n"
        + "[kit reaper 880] server exited with code -9\n"
    )
    crash = read_crash(log, 137)
    assert crash.error is None and crash.running == 7, crash
    assert "no error in its log" in crash.sentence()
    assert read_crash(
        SGLANG_LOG + "[kit reaper 9] sending SIGKILL to process group 8\n", 137
    ).error.startswith("RuntimeError: The expanded size"), (
        "an error written before the kit stopped the server stays its cause"
    )


def test_the_last_of_several_tracebacks_is_the_one_that_killed_it() -> None:
    earlier = (
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nKeyError: 'x'\nhandled, went on\n"
    )
    assert last_exception(earlier + SGLANG_LOG)[0].startswith("RuntimeError")
    assert read_crash("exit\n", 3).sentence().startswith("the server exited with code 3 while serving")


@pytest.mark.timeout(120)
def test_a_real_process_that_dies_is_seen_at_once_and_read(tmp_path: Path) -> None:
    """ServerProcess.serving() turns false as soon as the server's own process dies (the reaper
    outlives it while it cleans its group), and crash() reads the traceback it wrote."""
    script = tmp_path / "server.py"
    script.write_text(
        "import http.server, sys, threading, time\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
        "    def log_message(self, *a): pass\n"
        "s = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H)\n"
        "threading.Thread(target=s.serve_forever, daemon=True).start()\n"
        "print('Decode batch, #running-req: 5, #token: 10', flush=True)\n"
        "time.sleep(1.5)\n"
        "def verify(): raise RuntimeError('injected: the verify step failed')\n"
        "verify()\n"
    )
    params = RunParams.model_validate(
        {
            "run": "crash",
            "model": {"path": str(tmp_path)},
            "engine": {"flavor": "transformers", "startup_timeout_s": 30},
        }
    )
    server = ServerProcess(params, tmp_path / "logs", name="dies")
    port = server._choose_port()
    server.port = port
    server.command = [sys.executable, str(script), str(port)]
    server._proc = server._launch()
    try:
        server.wait_ready(30)
        assert server.serving()
        t0 = time.monotonic()
        while server.serving() and time.monotonic() - t0 < 20:
            time.sleep(0.05)
        assert not server.serving()
        crash = server.crash(in_flight=2)
        assert crash.error == "RuntimeError: injected: the verify step failed"
        assert crash.where is not None and crash.where.endswith("server.py:10 in verify")
        assert crash.exit_code == 1 and crash.running == 5 and crash.in_flight == 2
    finally:
        server.stop()


def test_a_vllm_worker_killed_while_serving_is_the_cause_not_the_api_servers_exit() -> None:
    """vLLM's API server exits 1 once its worker is gone and logs a traceback of its own shutdown;
    the cause is the worker's death (SIGKILL: the OOM killer), and the advice is memory's (issue 60)."""
    log = (
        VLLM_LOG.splitlines(keepends=True)[0]
        + "(EngineCore_DP0 pid=903) INFO 12-04 10:00:10 [cpu_worker.py:262] Auto set (20.9/23.54) GiB for KV cache on node 0\n"
        + "(EngineCore_DP0 pid=903) ERROR 12-04 10:01:03 [multiproc_executor.py:316] Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.\n"
        + "(APIServer pid=811) ERROR 12-04 10:01:03 [async_llm.py:480] AsyncLLM output_handler failed.\n"
        + "Traceback (most recent call last):\n"
        + '  File "/work/.venv-vllm/lib/python3.11/site-packages/vllm/v1/engine/async_llm.py", line 470, in output_handler\n'
        + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
    )
    crash = read_crash(log, 1, in_flight=8)
    assert crash.sentence("plain's server").startswith(
        "plain's server exited with code 1 while serving: vLLM's worker VllmWorker-0 was killed by SIGKILL (exit code -9)"
    ), crash.sentence()
    advice = crash.advice(speculative=False)
    assert "out-of-memory killer" in advice and "20.9 of the machine's 23.54 GiB" in advice
    assert "VLLM_CPU_KVCACHE_SPACE" in advice and "error inside the engine" not in advice
