"""A server that will not start is one sentence naming the setting to change (issue 18, item 5).

The log excerpts are the engines' own words: the first was written by vLLM 0.32's CPU build on this
machine (started without an explicit KV cache size while other work held memory); the others are
the messages of vLLM 0.32, SGLang 0.5 and Python as their sources word them. The real vLLM case
is also started for real in tests/test_vllm_engine.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.engines.start_failures import explain_start_failure

H200_SGLANG = Path(__file__).parent.parent / "docs/lab/h200/sglang"
H200_FLASHINFER = H200_SGLANG / "eagle3-flashinfer/server-spec_k1-tail.log"
H200_QWEN36 = H200_SGLANG / "qwen3.6-27b/sweep-plain-tail.log"

VLLM_CPU = (
    "(VllmWorker-0 pid=3739) ERROR 12-01 09:54:58 [multiproc_executor.py:953] ValueError: Available memory "
    "on node 0 (11.23/12.59 GiB) on startup is less than desired CPU memory utilization (0.92, 11.58 GiB). "
    "On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved "
    "(despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization "
    "0.5`) or reduce CPU memory used by other processes.\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
    "{'EngineCore': 1}\n"
)


@pytest.mark.parametrize(
    ("log", "says"),
    [
        (VLLM_CPU, ["engine.mem_fraction_static", "0.92", "11.23 of 12.59 GiB", "VLLM_CPU_KVCACHE_SPACE"]),
        (
            "ValueError: Available memory on node 0 (0.50/12.59 GiB) on kv cache allocation is less than "
            "requested memory for kv (4.00 GiB). Decrease --kv-cache-memory-bytes",
            ["4.00 GiB of KV cache", "VLLM_CPU_KVCACHE_SPACE"],
        ),
        (
            "ValueError: Free memory on device cuda:0 (20.1/139.8 GiB) on startup is less than desired GPU "
            "memory utilization (0.9, 125.8 GiB). Decrease GPU memory utilization or reduce GPU memory",
            ["engine.mem_fraction_static", "20.1 of 139.8 GiB", "nvidia-smi"],
        ),
        (
            "ValueError: To serve at least one request with the model's max seq len (262144), (16.0 GiB KV "
            "cache is needed, which is larger than the available KV cache memory (8.1 GiB). Based on the "
            "available memory, the estimated maximum model length is 132000. Try increasing",
            ["262144 tokens", "about 132000 fit", "engine.context_length"],
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            ["raise engine.mem_fraction_static"],
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            ["ran out of memory", "engine.mem_fraction_static"],
        ),
        ("OSError: [Errno 98] Address already in use", ["engine.port"]),
        (
            "api_server.py: error: unrecognized arguments: --speculative-num-stepz 3",
            ["--speculative-num-stepz 3", "engine.extra_args", "kit probe"],
        ),
        ("ModuleNotFoundError: No module named 'flashinfer'", ["'flashinfer'", "engine.python"]),
    ],
)
def test_each_known_start_failure_names_the_setting_to_change(log: str, says: list[str]) -> None:
    sentence = explain_start_failure("INFO starting\n" + log)
    assert sentence is not None
    for part in says:
        assert part in sentence, (part, sentence)


def test_an_unknown_failure_is_left_to_the_log_tail() -> None:
    assert explain_start_failure("Traceback ...\nRuntimeError: something new\n") is None


def test_sglangs_flashinfer_workspace_overflow_names_the_graph_batch_to_lower() -> None:
    """The log of a real SGLang 0.5.16 EAGLE-3 server on the H200 (flashinfer backend, Qwen3-8B shape)
    that died capturing its CUDA graphs: the kit had said only "exited with code 137"."""
    sentence = explain_start_failure(H200_FLASHINFER.read_text())
    assert sentence is not None
    for part in ("512 MiB", "542 MiB", "--cuda-graph-max-bs", "engine.attention_backend"):
        assert part in sentence, (part, sentence)


def test_sglangs_missing_multimodal_processor_names_the_import_that_failed() -> None:
    """A real SGLang 0.5.16 on the H200 (transformers 5.17, the Qwen3.6-27B shape): it exited with code
    1 and "No processor registered"; the cause is an import error logged a hundred lines before."""
    sentence = explain_start_failure(H200_QWEN36.read_text())
    assert sentence is not None
    for part in ("Qwen3_5ForConditionalGeneration", "module qwen_vl failed", "Qwen2_5_VisionRotaryEmbedding"):
        assert part in sentence, (part, sentence)


def test_sglangs_spec_state_reservation_names_the_running_requests_to_lower() -> None:
    """The Qwen3.6-27B shape's MTP k=3 server at 256 running requests on the H200 (SGLang 0.5.16):
    SGLang's own hint (raise the fraction above 0.408) cannot help at 0.85; the state per request
    and per draft token is what filled it."""
    log = Path(__file__).parent.parent / "docs/lab/h200/sglang/qwen3.6-27b-mtp-256/sweep-spec_k3-tail.log"
    sentence = explain_start_failure(log.read_text())
    assert sentence and "mem_fraction_static 0.85" in sentence, sentence
    assert "engine.max_running_requests" in sentence and "per draft token" in sentence


def test_the_same_reservation_without_speculation_does_not_blame_a_draft() -> None:
    """The same shape's plain server at 256 on an 80 GB H100 (SGLang 0.5.16, 2026-12-06): 51 GiB of
    weights and 256 recurrent states did not fit; the sentence names the running requests and the
    probe's plain figure, and speaks of draft tokens only as what speculation adds."""
    log = H200_SGLANG / "2026-12-06/qwen3.6-27b-h100/sweep-plain-tail.log"
    sentence = explain_start_failure(log.read_text())
    assert sentence and "mem_fraction_static 0.85" in sentence, sentence
    assert "engine.max_running_requests" in sentence and "max_seqs," in sentence
    assert "target and draft" not in sentence and "under speculation once more per draft token" in sentence


VLLM_CPU_OOM = (
    "(EngineCore_DP0 pid=811) INFO 12-07 14:02:11 [cpu_worker.py:262] Auto set (20.9/23.54) GiB for KV "
    "cache on node 0, with 21.66 GiB requested memory for the worker. 0.76 GiB memory was consumed by "
    "non-kv usages.\n"
    "(EngineCore_DP0 pid=811) ERROR 12-07 14:02:40 [multiproc_executor.py:316] Worker proc VllmWorker-0 "
    "died unexpectedly (exit code: -9), shutting down executor.\n"
    "(EngineCore_DP0 pid=811) ERROR 12-07 14:02:40 [core.py:1120] EngineCore failed to start.\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)
"""vLLM 0.32's CPU build started with no VLLM_CPU_KVCACHE_SPACE on a shared 23.5 GiB machine (issue 60):
its worker sized the KV cache itself, then the kernel's OOM killer ended the worker. The words are
vLLM's own (v1/worker/cpu_worker.py, v1/executor/multiproc_executor.py); the figures the issue's."""


def test_a_vllm_worker_killed_for_memory_is_named_with_what_to_set() -> None:
    """The decision and the notebook said only "exited with code 1 before answering" (issue 60)."""
    sentence = explain_start_failure(VLLM_CPU_OOM)
    assert sentence is not None and sentence.startswith(
        "vLLM's worker VllmWorker-0 was killed by SIGKILL (exit code -9): SIGKILL from no one else is the "
        "kernel's out-of-memory killer"
    ), sentence
    for part in ("20.9 of the machine's 23.54 GiB", "VLLM_CPU_KVCACHE_SPACE", "engine.mem_fraction_static"):
        assert part in sentence, (part, sentence)
    other = explain_start_failure("Worker proc VllmWorker-1 died unexpectedly (exit code: 1), shutting down")
    assert other is not None and other.startswith("vLLM's worker VllmWorker-1 exited with code 1: its log")
    assert "VLLM_CPU_KVCACHE_SPACE" not in other  # not a memory kill: not memory advice
