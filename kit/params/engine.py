"""The params sections of the model and the engine that serves it (`model`, `engine`,
`engine.speculative`): what stage 1 probes, stage 2 sweeps and stage 3 starts. Each section's
validators check what one section can; a flavor's names and its two facts the checks need come from
kit/engines/flavor_names.py, not the flavor registry, whose modules name these types.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from kit.engines.flavor_names import BACKEND_SETTINGS, FLAVOR_NAMES, KV_CAP_FLAGS, NOT_STARTED
from kit.errors import ParamsError
from kit.params.section import Section


class ModelParams(Section):
    path: Path
    """A local Hugging Face model directory (config.json, weights, tokenizer)."""
    demo: bool = False
    """Build the embedded demo model at `path` when it is absent (no download, a few MB)."""
    served_name: str | None = None
    """The model name sent in requests; defaults to what the server lists at /v1/models."""


class SpeculativeParams(Section):
    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "MTP"] | None = None
    num_steps: int | None = Field(default=None, ge=1, le=16)
    eagle_topk: int | None = Field(default=None, ge=1, le=16)
    num_draft_tokens: int | None = Field(default=None, ge=1, le=64)
    draft_model_path: Path | None = None
    adaptive: bool | None = None
    """The engine's own adaptive speculation, num_steps its ceiling (the sweep's `decide.adaptive_k` arm
    sets it; SGLang `--speculative-adaptive`, vLLM a batch-size schedule: docs/decision.md)."""


SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"}
"""Words of an environment variable's name (split at `_`) that mark it as a secret."""


FlavorName = Literal[FLAVOR_NAMES]  # type: ignore[valid-type]
"""An engine flavor's name: one per module of kit/engines/flavors/ (kit/engines/flavor_names.py, which
its registry `FLAVORS` checks itself against)."""


class EngineParams(Section):
    flavor: FlavorName = "transformers"
    python: Path | None = None
    """Interpreter of the engine's own environment (often another venv); default: this one."""
    base_url: str | None = None
    """For `external`: the URL of a server someone else runs, e.g. http://10.0.0.5:30000."""
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port to bind; default: a free port chosen at start."""
    startup_timeout_s: float = Field(default=600.0, gt=0)
    device: str = "cpu"
    """transformers flavor only: the torch device (`cpu`, `cuda`)."""
    tp_size: int = Field(default=1, ge=1)
    dp_size: int = Field(default=1, ge=1)
    mem_fraction_static: float | None = Field(default=None, gt=0, lt=1)
    max_running_requests: int | None = Field(default=None, ge=1)
    cuda_graph_max_bs: int | None = Field(default=None, ge=1)
    context_length: int | None = Field(default=None, ge=1)
    attention_backend: str | None = None
    sampling_backend: str | None = None
    """SGLang's `--sampling-backend` (flashinfer, pytorch); unset: the engine's own choice."""
    mamba_strategy: Literal["no_buffer", "extra_buffer", "extra_buffer_lazy"] | None = None
    enable_metrics: bool = True
    tool_call_parser: str | None = "auto"
    """The engine's tool-call parser (sglang, vllm): `auto` picks it from the model's chat template
    (docs/engines.md), null launches without one, any other name is passed as it is."""
    reasoning_parser: str | None = "auto"
    """The engine's reasoning parser, which splits the `<think>` block out of the answer: `auto`
    picks it when the chat template can think, null keeps the thinking inside the completion."""
    replicas: int = Field(default=1, ge=1)
    """Independent servers to start, one per GPU group, balanced by the client (SGLang's own
    `dp_size` is usually simpler: one server, N replicas behind one port)."""
    gpus_per_replica: int | None = Field(default=None, ge=1)
    """With `replicas > 1`: GPUs each server gets through CUDA_VISIBLE_DEVICES (default tp_size)."""
    replica_gpus: list[str] | None = None
    """With `replicas > 1`: each server's CUDA_VISIBLE_DEVICES, one entry per replica, where the
    contiguous groups of `gpus_per_replica` do not fit: `["0,1", "4,5"]` skips busy GPUs, `["0", "0"]`
    puts two servers on one GPU (each then needs a KV cache of its own size in `extra_args`, e.g.
    SGLang's `--max-total-tokens`: an engine sizes its cache from the memory free at its start).
    The local executor only: on Ray each actor is given its GPUs by Ray."""
    speculative: SpeculativeParams = SpeculativeParams()
    extra_args: list[str] = []
    """Flags passed through verbatim to the launcher, after the kit's own."""
    env: dict[str, str] = {}
    """Extra environment variables for the server process (saved in params.yaml: no secrets here;
    the server inherits the kit's own environment)."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the key of a server started with `--api-key`
    (sent as `Authorization: Bearer`). The key itself is never written to the run folder."""

    @model_validator(mode="after")
    def _external_needs_url(self) -> EngineParams:
        if self.flavor in NOT_STARTED and not self.base_url:
            raise ValueError(f"flavor {self.flavor!r} needs engine.base_url (the server's URL)")
        return self

    @model_validator(mode="after")
    def _spelt_by_the_flavor(self) -> EngineParams:
        if self.sampling_backend and "sampling_backend" not in BACKEND_SETTINGS[self.flavor]:
            raise ValueError(
                f"engine.sampling_backend is set, but {self.flavor} has no sampling backend to choose: "
                "remove it (only flavor sglang takes --sampling-backend)"
            )
        return self

    @model_validator(mode="after")
    def _one_gpu_group_per_replica(self) -> EngineParams:
        groups = self.replica_gpus
        if groups is None:
            return self
        if len(groups) != self.replicas:
            raise ValueError(
                f"engine.replica_gpus names {len(groups)} GPU group(s) for {self.replicas} replica(s): "
                "give one CUDA_VISIBLE_DEVICES value per replica, or set engine.replicas to match"
            )
        seen = [g.strip() for group in groups for g in group.split(",")]
        cap = KV_CAP_FLAGS.get(self.flavor)
        if len(seen) != len(set(seen)) and cap and cap not in self.extra_args:
            raise ValueError(
                f"engine.replica_gpus puts two servers on one GPU ({groups}), and {self.flavor} sizes its KV "
                f"cache from the memory free when it starts, so the later one would find none: add "
                f"{cap} N to engine.extra_args (N tokens of KV cache each, small enough for all to fit)"
            )
        return self

    @model_validator(mode="after")
    def _no_secret_in_the_run_folder(self) -> EngineParams:
        if any(a == "--api-key" or a.startswith("--api-key=") for a in self.extra_args):
            raise ValueError(
                "engine.extra_args holds --api-key: it would be saved in params.yaml and the server's "
                "log. Export the key in an environment variable and name it in engine.api_key_env"
            )
        secret = [k for k in self.env if SECRET_WORDS & set(k.upper().split("_"))]
        if secret:
            raise ValueError(
                f"engine.env sets {', '.join(secret)}: params.yaml keeps engine.env, so a secret there "
                "lands in the run folder. Export it in the shell instead (the server inherits the kit's "
                "environment); a server key goes in a variable named by engine.api_key_env"
            )
        return self

    def api_key(self) -> str | None:
        """The key named by `api_key_env`, read from the environment now (None without one)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ParamsError(
                f"engine.api_key_env is {self.api_key_env}, but no such environment variable is set: "
                f"export {self.api_key_env}=<the server's key> before running the kit"
            )
        return key
