"""`transformers serve` with continuous batching: the kit's default (a CPU and the demo model). Its
command line with a bounded paged cache on a CPU, the sampling it ignores or turns into something
else, and the extended sampling settings it takes only inside a `generation_config`. It has no
speculative decoding and no tensor or data parallelism."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.engines.flavors.base import ExtendedFields, Flavor, SamplingFields, opt
from kit.errors import ParamsError

if TYPE_CHECKING:
    from kit.params import EngineParams, RunParams

CB_PAGE_TOKENS = 256
"""Tokens per page of `transformers serve`'s paged cache (its default `page_size`)."""
CPU_CB_NUM_BLOCKS = 128
CPU_CB_MAX_BATCH_TOKENS = 2048
REFUSED = {
    "presence_penalty": (
        "transformers serve ignores it (with a warning in its log); remove it or use flavor vllm / sglang"
    ),
    "frequency_penalty": (
        "transformers serve turns it into repetition_penalty = 1 + value, which is not a "
        "frequency penalty; set generate.sampling.repetition_penalty instead; remove it or use "
        "flavor vllm / sglang"
    ),
}


@dataclass(frozen=True, eq=False)
class Transformers(Flavor):
    def command(self, params: RunParams, port: int) -> list[str]:
        """`transformers serve MODEL --continuous-batching --device D --host H --port P` (CPU default)."""
        eng = params.engine
        if eng.speculative.algorithm:
            raise ParamsError(
                f"engine.speculative is set but {self.no_speculation}; remove it or use flavor sglang / vllm"
            )
        if eng.tp_size > 1 or eng.dp_size > 1:
            warnings.warn(
                "transformers serve has no tensor / data parallelism: tp_size and dp_size are ignored",
                stacklevel=3,
            )
        self.shape_only_args(params.model.path)  # refuses a folder without weights, saying why
        cmd = cli(params.engine_python) + ["serve", str(params.model.path), "--continuous-batching"]
        cmd += ["--device", eng.device, "--host", eng.host, "--port", str(port)]
        cmd += opt("--attn-implementation", eng.attention_backend)
        if eng.device == "cpu":
            given = {arg.partition("=")[0] for arg in eng.extra_args}
            for flag, value in cpu_cache(eng).items():
                cmd += [] if flag in given else [flag, str(value)]
        return cmd + list(eng.extra_args)

    def env(self, eng: EngineParams) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1"}

    def needs_gpu(self, device: str, packages: Mapping[str, str | None] | None) -> bool:
        return device.startswith("cuda")

    def sampling_body(
        self,
        body: SamplingFields,
        extended: ExtendedFields,
        model_generation_config: dict[str, Any] | None,
    ) -> SamplingFields:
        """top_k, min_p and repetition_penalty only inside a `generation_config`, which replaces the
        model's own: the two are merged."""
        body = body.copy()
        body.pop("presence_penalty", None)
        if extended:
            body["generation_config"] = json.dumps({**(model_generation_config or {}), **extended})
        return body


def cli(python: Path) -> list[str]:
    """How to run the `transformers` CLI of the environment that owns interpreter `python`."""
    script = python.parent / "transformers"
    if script.is_file():
        return [str(script)]
    # The CLI module has a `__main__` guard (transformers 5.x), so this works without the script.
    return [str(python), "-m", "transformers.cli.transformers"]


def cpu_cache(eng: EngineParams) -> dict[str, int]:
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


FLAVOR = Transformers(
    name="transformers",
    title="transformers serve",
    distributions=("transformers",),
    min_version=(
        "5.5",
        "before 5.5 it answers 422 to the `stream_options` the kit sends with every streamed request "
        "(to read its token counts)",
    ),
    no_speculation="transformers serve has no speculative decoding in its continuous-batching server",
    refused_fields=REFUSED,
    # `transformers serve --help` (5.24): --attn-implementation TEXT (eager, sdpa, flash_attention_2,
    # flash_attention_3, flex_attention or a hub kernel; unset: the model's own, sdpa)
    backend_settings={"attention_backend": "--attn-implementation"},
)
