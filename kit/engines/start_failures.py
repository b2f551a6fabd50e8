"""The usual reasons an engine server will not start, read from its log, as one sentence to act on.

A server that dies at start leaves a traceback tail in its log; the kit shows that tail, but a
person at 2 a.m. needs the line before it: what went wrong and which setting to change. Each
`StartFailure` matches the log of one known cause (the engine's own message, as vLLM 0.32 and
SGLang 0.5 word it) and says what to do in the kit's terms: `engine.mem_fraction_static` (which the
vLLM command carries as `--gpu-memory-utilization`), `engine.context_length`, `engine.port`, ...
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StartFailure:
    """One known cause: a pattern of the server's log and the sentence it becomes."""

    name: str
    pattern: re.Pattern[str]
    advice: Callable[[re.Match[str]], str]


def _vllm_cpu_memory(m: re.Match[str]) -> str:
    return (
        f"vLLM's CPU backend reserves engine.mem_fraction_static (its --gpu-memory-utilization, here "
        f"{m['fraction']}) of the node's memory, {m['want']} GiB, but only {m['free']} of {m['total']} GiB "
        "is free: lower engine.mem_fraction_static (e.g. 0.5), or set an explicit KV cache size "
        "(engine.env VLLM_CPU_KVCACHE_SPACE: GiB, which skips this check), or stop what else uses memory"
    )


WORKER_DIED = re.compile(r"Worker proc (?P<worker>\S+) died unexpectedly \(exit code: (?P<code>-?\d+)\)")
"""vLLM's executor when one of its worker processes ends (vLLM 0.32, v1/executor/multiproc_executor.py)."""
AUTO_KV = re.compile(r"Auto set \((?P<kv>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache")
"""vLLM's CPU worker sizing its KV cache itself (no VLLM_CPU_KVCACHE_SPACE)."""
KILLED_BY_MEMORY = signal.SIGKILL


def worker_death(log_text: str) -> str | None:
    """What vLLM's log says of a worker process that died, as the start of a sentence ("vLLM's worker
    VllmWorker-0 was killed by SIGKILL (exit code -9)"), or None when no worker died."""
    m = WORKER_DIED.search(log_text)
    if m is None:
        return None
    code = int(m["code"])
    try:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    except ValueError:
        how = f"ended with code {code}"
    return f"vLLM's worker {m['worker']} {how}" + (f" (exit code {code})" if code < 0 else "")


def worker_death_advice(log_text: str) -> str:
    """What to do after a worker's death: for SIGKILL, the memory it most likely ran out of."""
    m = WORKER_DIED.search(log_text)
    if m is None or int(m["code"]) != -KILLED_BY_MEMORY:
        return "its log says why (the lines before it); if it repeats, report it to vLLM's maintainers"
    auto = AUTO_KV.search(log_text)
    sized = (
        f"; vLLM's CPU build had sized its KV cache at {auto['kv']} of the machine's {auto['total']} GiB "
        "(engine.mem_fraction_static, default 0.92, of all the memory, whatever else runs)"
        if auto
        else ""
    )
    return (
        "SIGKILL from no one else is the kernel's out-of-memory killer (`dmesg` names the process)"
        f"{sized}: give it a KV cache that fits beside what else runs, engine.env VLLM_CPU_KVCACHE_SPACE "
        "(whole GiB; on a CPU the kit sets one itself where neither it nor engine.mem_fraction_static "
        "is set), or a lower engine.mem_fraction_static, or fewer running requests, or stop what else "
        "uses the memory"
    )


def _vllm_gpu_memory(m: re.Match[str]) -> str:
    return (
        f"vLLM wants engine.mem_fraction_static (its --gpu-memory-utilization, here {m['fraction']}) of "
        f"the GPU, {m['want']} GiB, but only {m['free']} of {m['total']} GiB is free: another process "
        "holds GPU memory (nvidia-smi shows it; a server left from an earlier run?), or lower "
        "engine.mem_fraction_static"
    )


def _vllm_kv_too_small(m: re.Match[str]) -> str:
    fits = re.search(r"estimated maximum model length is (\d+)", m.string[m.end() : m.end() + 600])
    return (
        f"the KV cache left after the weights cannot hold one sequence of {m['len']} tokens"
        + (f" (about {fits[1]} fit)" if fits else "")
        + ": set engine.context_length lower, or raise engine.mem_fraction_static, or add GPUs "
        "(engine.tp_size)"
    )


def _no_mm_processor(m: re.Match[str]) -> str:
    """SGLang registers its multimodal processors by importing each module and skips one that fails;
    the import error, logged earlier, is the cause (SGLang 0.5.16 on transformers 5.17: the Qwen-VL
    family's module, Qwen3.5 / 3.6 included, lacks `Qwen2_5_VisionRotaryEmbedding`)."""
    failed = re.findall(
        r"Ignore import error when loading sglang\.srt\.multimodal\.processors\.(\w+): ([^\n]+)", m.string
    )
    arch = m["arch"].lower()
    # the module of this architecture's family (qwen_vl for Qwen3_5...), else one that transformers broke
    ranked = sorted(failed, key=lambda f: (f[0][:4] not in arch, "transformers" not in f[1]))
    why = f" (its module {ranked[0][0]} failed to import: {ranked[0][1].strip()[:160]})" if ranked else ""
    return (
        f"SGLang found no multimodal processor for {m['arch']}{why}, which it loads at start even for "
        "text-only use: the engine's transformers is likely not the version this SGLang pins (`pip show "
        "sglang` lists it); install that version in engine.python's environment"
    )


FAILURES: tuple[StartFailure, ...] = (
    StartFailure(
        "vllm_cpu_free_memory",
        re.compile(
            r"Available memory on node \d+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup "
            r"is less than desired CPU memory utilization \((?P<fraction>[\d.]+), (?P<want>[\d.]+) GiB\)"
        ),
        _vllm_cpu_memory,
    ),
    StartFailure(
        "vllm_cpu_kv_space",
        re.compile(
            r"Available memory on node \d+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv cache allocation "
            r"is less than requested memory for kv \((?P<want>[\d.]+) GiB\)"
        ),
        lambda m: (
            f"vLLM's CPU backend was asked for {m['want']} GiB of KV cache but only {m['free']} GiB is free: "
            "lower VLLM_CPU_KVCACHE_SPACE in engine.env, or stop what else uses memory"
        ),
    ),
    StartFailure(
        "vllm_worker_died",
        WORKER_DIED,
        lambda m: f"{worker_death(m.string)}: {worker_death_advice(m.string)}",
    ),
    StartFailure(
        "vllm_gpu_free_memory",
        re.compile(
            r"Free memory on device \S+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than "
            r"desired GPU memory utilization \((?P<fraction>[\d.]+), (?P<want>[\d.]+) GiB\)"
        ),
        _vllm_gpu_memory,
    ),
    StartFailure(
        "vllm_kv_too_small",
        re.compile(r"To serve at least one request with the model's max seq len \((?P<len>\d+)\)"),
        _vllm_kv_too_small,
    ),
    StartFailure(
        "sglang_no_pool_memory",
        re.compile(
            r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=(?P<f>[\d.]+)"
        ),
        lambda m: (
            f"the weights (and a draft's, with speculation) left no memory for the KV cache under "
            f"mem_fraction_static {m['f']}. On a hybrid model (recurrent-state layers: Qwen3.5 / 3.6, "
            "Qwen3-Next) SGLang first reserves each running request's state, and under speculation "
            "once more per draft token, so the number of running requests is what to lower (SGLang's "
            "own hint, to raise the fraction, cannot help when it is already above the figure it "
            "names): set engine.max_running_requests to what `kit probe` gives (memory: max_seqs, "
            "max_seqs_spec with speculation) or fewer, or fewer draft tokens, or add GPUs "
            "(engine.tp_size)"
        ),
    ),
    StartFailure(
        "no_kv_memory",
        re.compile(r"No available memory for the cache blocks|Not enough memory\. Please try to increase"),
        lambda m: (
            "the weights leave no memory for the KV cache: raise engine.mem_fraction_static, or spread "
            "the model over more GPUs (engine.tp_size), or use a smaller checkpoint"
        ),
    ),
    StartFailure(
        "flashinfer_workspace",
        re.compile(
            r"Buffer overflow when allocating memory for (?P<buffer>\w+) with size (?P<want>\d+) "
            r"and alignment \d+, but only (?P<have>\d+) bytes available in AlignedAllocator"
        ),
        lambda m: (
            f"FlashInfer's workspace ({int(m['have']) / 2**20:.0f} MiB) is too small for the CUDA graph of "
            f"the largest batch ({m['buffer']} needs {int(m['want']) / 2**20:.0f} MiB; speculation's verify "
            "step needs the most, and SGLang fixes the workspace at 512 MiB for Qwen2/Qwen3 whatever "
            "SGLANG_FLASHINFER_WORKSPACE_SIZE says): set engine.attention_backend to fa3 or triton, or add "
            "[--cuda-graph-max-bs, 128] to engine.extra_args, which every arm and stage 3 then run with: "
            "larger batches run without a graph (on an H200, Qwen3-8B, plain decoding at 256 running "
            "took 31.6 ms a step so, against 11.1 ms with a graph)"
        ),
    ),
    StartFailure(
        "cuda_oom",
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA"),
        lambda m: (
            "the GPU ran out of memory while the server started: lower engine.mem_fraction_static, "
            "engine.context_length or engine.max_running_requests (CUDA graphs and activations live "
            "outside the static fraction), or add GPUs (engine.tp_size)"
        ),
    ),
    StartFailure(
        "port_in_use",
        re.compile(r"\[Errno 98\][^\n]*|address already in use", re.I),
        lambda m: (
            "the server's port is already taken: remove engine.port from the params so the kit picks a "
            "free one, or stop what listens there (`ss -ltnp` shows it)"
        ),
    ),
    StartFailure(
        "unknown_flag",
        re.compile(r"error: unrecognized arguments: (?P<flags>[^\n]+)"),
        lambda m: (
            f"the installed engine does not know {m['flags'].strip()}: remove it from engine.extra_args, "
            "or update the engine (`kit probe` lists the flags this version accepts)"
        ),
    ),
    StartFailure(
        "no_mm_processor",
        re.compile(r"No processor registered for architecture: \[?'?(?P<arch>\w+)"),
        _no_mm_processor,
    ),
    StartFailure(
        "missing_module",
        re.compile(r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'"),
        lambda m: (
            f"the engine's environment lacks the Python module {m['module']!r}: install it there "
            "(engine.python's own pip), or point engine.python at the environment that has it"
        ),
    ),
)


def explain_start_failure(log_text: str) -> str | None:
    """One sentence naming the cause of a failed start and the setting to change, or None when the
    log shows none of the known causes."""
    found = _first_failure(log_text)
    return found[0].advice(found[1]) if found else None


def start_failure_name(log_text: str) -> str | None:
    """The name of the known cause the log shows ('port_in_use', 'cuda_oom', ...), or None."""
    found = _first_failure(log_text)
    return found[0].name if found else None


def _first_failure(log_text: str) -> tuple[StartFailure, re.Match[str]] | None:
    for failure in FAILURES:
        m = failure.pattern.search(log_text)
        if m:
            return failure, m
    return None
