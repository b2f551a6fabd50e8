"""Command lines and environments that start each engine flavor's server.

Each flavor has one builder registered with `@flavor(name)`; `server_command` looks it up.
Builders emit only the flags whose value is set in the params, so the engine's own defaults apply
otherwise. Speculative flags come from `kit.engines.settings`, parser flags from
`kit.engines.parsers`; flags that moved between engine versions are renamed at start by
`kit.engines.launcher.adapt_flags`, from the installed launcher's own `--help`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

from kit.engines import parsers
from kit.engines.settings import (
    NO_SPEC_REASONS,
    SGLANG_SPEC_MAX_RUNNING,
    sglang_spec_flags,
    vllm_spec_config,
)
from kit.errors import EngineError, ParamsError
from kit.params import EngineParams, RunParams

Builder = Callable[[RunParams, int], list[str]]
_BUILDERS: dict[str, Builder] = {}

CB_PAGE_TOKENS = 256
"""Tokens per page of `transformers serve`'s paged cache (its default `page_size`)."""
CPU_CB_NUM_BLOCKS = 128
CPU_CB_MAX_BATCH_TOKENS = 2048


def flavor(name: str) -> Callable[[Builder], Builder]:
    """Register `fn(params, port) -> argv` as the command builder of engine flavor `name`."""

    def register(fn: Builder) -> Builder:
        _BUILDERS[name] = fn
        return fn

    return register


def flavors() -> list[str]:
    """Names of the flavors that the kit can start (`external` is not started, so not listed)."""
    return sorted(_BUILDERS)


def server_command(params: RunParams, port: int) -> list[str]:
    """The argv that starts the server of `params.engine.flavor` on `port`."""
    name = params.engine.flavor
    if name == "external":
        raise EngineError("flavor 'external' runs no command: the kit talks to engine.base_url as it is.")
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ParamsError(f"unknown engine flavor {name!r}; known: {', '.join(flavors())}, external")
    return builder(params, port)


def server_env(params: RunParams) -> dict[str, str]:
    """Environment variables to add to the current environment for the server process."""
    eng = params.engine
    env: dict[str, str] = {}
    if eng.flavor == "transformers":
        env["HF_HUB_OFFLINE"] = "1"
    if eng.flavor == "vllm" and eng.attention_backend:
        env["VLLM_ATTENTION_BACKEND"] = eng.attention_backend
    env.update(eng.env)
    return env


def speculation_unsupported(flavor_name: str) -> str | None:
    """Why `flavor_name` cannot run speculative decoding, or None when it can."""
    return NO_SPEC_REASONS.get(flavor_name)


def _opt(flag: str, value: object) -> list[str]:
    """`[flag, str(value)]` when value is set, else nothing."""
    return [] if value is None else [flag, str(value)]


def _parser_flags(params: RunParams, tool_flags: list[str]) -> list[str]:
    """The tool-call / reasoning parser flags (`auto` resolved from the model's chat template)."""
    chosen = parsers.resolve(params.engine, params.model.path)
    out = [*tool_flags, "--tool-call-parser", chosen.tool_call] if chosen.tool_call else []
    return out + (["--reasoning-parser", chosen.reasoning] if chosen.reasoning else [])


@flavor("sglang")
def sglang_command(params: RunParams, port: int) -> list[str]:
    """`python -m sglang.launch_server ...` (flags as in SGLang's server_args.py)."""
    eng, spec = params.engine, params.engine.speculative
    cmd = [str(params.engine_python), "-m", "sglang.launch_server", "--model-path", str(params.model.path)]
    cmd += [
        "--host",
        eng.host,
        "--port",
        str(port),
        "--tp-size",
        str(eng.tp_size),
        "--dp-size",
        str(eng.dp_size),
    ]
    cmd += _opt("--mem-fraction-static", eng.mem_fraction_static)
    cmd += _opt("--max-running-requests", eng.max_running_requests)
    cmd += _opt("--cuda-graph-max-bs", eng.cuda_graph_max_bs)
    cmd += _opt("--attention-backend", eng.attention_backend)
    cmd += sglang_spec_flags(spec)
    if spec.algorithm and eng.max_running_requests is None:
        warnings.warn(
            f"speculative decoding is on and engine.max_running_requests is unset: SGLang will lower "
            f"it to {SGLANG_SPEC_MAX_RUNNING}. Set engine.max_running_requests to keep a larger batch.",
            stacklevel=3,
        )
    cmd += _opt("--mamba-scheduler-strategy", eng.mamba_strategy)
    if eng.enable_metrics:
        cmd.append("--enable-metrics")
    cmd += _opt("--context-length", eng.context_length)
    cmd += _parser_flags(params, [])
    return cmd + list(eng.extra_args)


def vllm_speculative_config(eng: EngineParams) -> dict[str, object] | None:
    """vLLM's `--speculative-config` for the params' speculative settings (None when off)."""
    return vllm_spec_config(eng.speculative)


@flavor("vllm")
def vllm_command(params: RunParams, port: int) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server ...`; the attention backend goes in the env."""
    eng = params.engine
    cmd = [
        str(params.engine_python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(params.model.path),
    ]
    cmd += ["--host", eng.host, "--port", str(port)]
    cmd += ["--tensor-parallel-size", str(eng.tp_size), "--data-parallel-size", str(eng.dp_size)]
    cmd += _opt("--gpu-memory-utilization", eng.mem_fraction_static)
    cmd += _opt("--max-num-seqs", eng.max_running_requests)
    cmd += _opt("--max-model-len", eng.context_length)
    spec = vllm_speculative_config(eng)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    cmd += _opt("--max-cudagraph-capture-size", eng.cuda_graph_max_bs)
    if eng.mamba_strategy is not None:
        warnings.warn("engine.mamba_strategy has no vLLM flag and is ignored for vllm", stacklevel=3)
    cmd += _parser_flags(params, ["--enable-auto-tool-choice"])
    return cmd + list(eng.extra_args)


def transformers_cli(python: Path) -> list[str]:
    """How to run the `transformers` CLI of the environment that owns interpreter `python`."""
    script = python.parent / "transformers"
    if script.is_file():
        return [str(script)]
    # The CLI module has a `__main__` guard (transformers 5.x), so this works without the script.
    return [str(python), "-m", "transformers.cli.transformers"]


@flavor("transformers")
def transformers_command(params: RunParams, port: int) -> list[str]:
    """`transformers serve MODEL --continuous-batching --device D --host H --port P` (CPU default)."""
    eng = params.engine
    if eng.speculative.algorithm:
        raise ParamsError(
            f"engine.speculative is set but {speculation_unsupported('transformers')}; "
            "remove it or use flavor sglang / vllm"
        )
    if eng.tp_size > 1 or eng.dp_size > 1:
        warnings.warn(
            "transformers serve has no tensor / data parallelism: tp_size and dp_size are ignored",
            stacklevel=3,
        )
    cmd = transformers_cli(params.engine_python) + ["serve", str(params.model.path), "--continuous-batching"]
    cmd += ["--device", eng.device, "--host", eng.host, "--port", str(port)]
    if eng.device == "cpu":
        given = {arg.partition("=")[0] for arg in eng.extra_args}
        for flag, value in transformers_cpu_cache(eng).items():
            cmd += [] if flag in given else [flag, str(value)]
    return cmd + list(eng.extra_args)


def transformers_cpu_cache(eng: EngineParams) -> dict[str, int]:
    """Bounded paged-cache flags for `transformers serve` on a CPU.

    Left alone, it takes 60% of the machine's RAM for the KV cache and builds attention masks sized
    by it: 8 GB resident and a 15-20 s first request for the 1M-parameter demo model on a 23 GB
    box, against 0.76 GB and 0.5 s with these values, at the same throughput. The cache holds
    `max_running_requests x context_length` tokens when both are set, else 128 pages of 256 tokens.
    """
    blocks = CPU_CB_NUM_BLOCKS
    if eng.max_running_requests and eng.context_length:
        blocks = -(-eng.max_running_requests * eng.context_length // CB_PAGE_TOKENS)
    return {"--cb-num-blocks": blocks, "--cb-max-batch-tokens": CPU_CB_MAX_BATCH_TOKENS}
