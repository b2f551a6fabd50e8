"""What every engine flavor answers: the interface behind `kit.engines.flavors`, one module per flavor.

A flavor is one frozen object: its facts are fields (its launcher, the distributions it installs
as, the request fields it refuses, the metrics it exposes, ...), its rules are methods (its command
line, how it spells a speculative `Arm`, its capacity, the GPUs it needs). The defaults here are
those of an OpenAI-compatible server that the kit neither tunes nor speculates with; each flavor's
module overrides what is true of it. The rest of the kit asks the flavor and never compares its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from kit.engines.arms import Arm
from kit.engines.compile_cache import TORCH_CACHE_VARS
from kit.errors import EngineError
from kit.modelshape import shape_of

if TYPE_CHECKING:  # annotations only: the flavors load without pydantic (benchmarks/probe_gpu.py)
    from kit.params import EngineParams, RunParams, SamplingParams

DEFAULT_CPU_CACHE_GIB = 4.0
"""KV cache a server on a CPU is assumed to take when its flavor says nothing else."""


class CapacityFacts(TypedDict):
    """A `Capacity` under the keys a run's records give it (the Ray driver's actor facts)."""

    engine_capacity: int | None
    capacity_source: str


@dataclass(frozen=True)
class Capacity:
    """Requests the engine(s) of a run can hold running at once, and where the figure came from."""

    total: int | None
    source: str

    def as_dict(self) -> CapacityFacts:
        return CapacityFacts(engine_capacity=self.total, capacity_source=self.source)

    def words(self) -> str:
        """The figure and where it came from, for a log line; where there is none, why (its source
        says it: never "engine capacity None")."""
        return f"engine capacity {self.total:,} ({self.source})" if self.total is not None else self.source


class ArmSpelling(TypedDict, total=False):
    """How a flavor spells a speculative arm's k: fields of `engine.speculative` (kit.params
    `SpeculativeParams`), only those the flavor sends (none for plain decoding). Its keys are the ones
    `kit.engines.settings.speculative_params` clears before it writes a spelling."""

    num_steps: int
    """Draft steps per verify step: k, on every flavor."""
    eagle_topk: int
    num_draft_tokens: int
    """SGLang's chain: top-k 1 and k + 1 tokens verified per step."""
    adaptive: bool
    """The engine's own adaptive speculation, `num_steps` its ceiling (an adaptive `Arm`)."""


class SpeculativeJson(ArmSpelling, total=False):
    """`engine.speculative` (kit.params `SpeculativeParams`) as JSON, its unset fields left out: the
    algorithm, the flavor's spelling of k and the draft model's folder."""

    algorithm: str
    draft_model_path: str


class ExtendedFields(TypedDict, total=False):
    """Sampling settings beyond OpenAI's (`kit.engines.request_fields.EXTENDED_FIELDS`)."""

    top_k: int
    min_p: float
    repetition_penalty: float


class SamplingFields(ExtendedFields, total=False):
    """The sampling fields of a chat completion's body as a flavor takes them: OpenAI's
    (`request_fields.OPENAI_FIELDS`), the extended ones beside them, or inside a `generation_config`
    (JSON text) where the flavor takes them only there."""

    temperature: float
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    stop: list[str]
    seed: int
    generation_config: str


class ToolFields(TypedDict, total=False):
    """Fields a request that offers tools adds (`Flavor.tool_request_fields`)."""

    tool_choice: str


class RequestFields(SamplingFields, ToolFields, total=False):
    """The fields of a chat completion's body beside model, messages and max_tokens, as the kit sends
    them (kit.engines.request_fields.request_fields; kit.engines.client.EngineClient.chat): the
    flavor's sampling fields, the chat template's variables and, on a request that offers tools,
    `ToolFields`. `generate.sampling.extra_body` adds fields of the user's own, sent as written: they
    travel beside these keys (a TypedDict names the keys the kit writes, it does not close the dict)."""

    chat_template_kwargs: dict[str, Any]
    """`generate.sampling.chat_template_kwargs` and the thinking switch: the template's variables."""


@dataclass(frozen=True, eq=False)
class Flavor:
    """What is true of one engine flavor (`engine.flavor` in the params names it)."""

    name: str
    title: str
    """How messages name it ("SGLang", "transformers serve")."""
    started: bool = True
    """Whether the kit starts (and restarts) its server; else it talks to `engine.base_url` as it is."""
    launcher: str | None = None
    """The module run with `python -m` whose `--help` the kit reads to adapt and check its flags
    (None: the kit reads no launcher of this flavor, and tunes none of its flags)."""
    help_flags: tuple[str, ...] = ("--help",)
    """What asks the launcher for every flag it takes, in the order tried."""
    distributions: tuple[str, ...] = ()
    """Package names it is installed under, its main one first."""
    min_version: tuple[str, str] | None = None
    """(oldest version the kit works with, what goes wrong before it); None: no floor known."""
    no_speculation: str | None = None
    """Why it cannot run speculative decoding; None when it can."""
    refused_fields: Mapping[str, str] = field(default_factory=dict)
    """Sampling settings it rejects or ignores, each with why and what to do instead."""
    parser_names: Mapping[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """(tool-call, reasoning) parser it launches with, per chat-template family
    (`kit.engines.parsers.family`); empty: it takes no parser flags."""
    server_info: bool = False
    """Whether it may answer `/server_info` with its arguments and capacity (SGLang's own route)."""
    attention_backends: bool = False
    """Whether the probe's GPU attention backends (SGLang's names: fa3, flashinfer, triton, ...) reach it
    through `engine.attention_backend` (a flag or an environment variable)."""
    backend_settings: Mapping[str, str | None] = field(default_factory=dict)
    """The engine settings `decide.backends` can measure on it (`attention_backend`, `sampling_backend`),
    each with the launch flag that spells it (None: an environment variable, see `env`)."""
    capacity_flag: str | None = None
    """The launch flag `engine.max_running_requests` becomes: requests it runs at once."""
    spec_max_running: int | None = None
    """What it lowers its running requests to under speculation when the flag is unset."""
    spec_metrics: tuple[str, ...] = ()
    """The `/metrics` series its speculative decoding shows up in (`kit.engines.spec_metrics`)."""
    dummy_weights_args: tuple[str, ...] = ()
    """The flags that load random weights for a config (a shape-only model folder, kit.modelshape);
    empty: it cannot serve such a folder."""
    kv_cap_flag: str | None = None
    """The launch flag that sizes a server's KV cache in tokens, whatever memory is free when it
    starts (`kv_cap_args`); None: the kit knows none, and its servers never share a GPU."""
    backend_files: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    """Attention backends that load a library of their own: backend -> (the package holding it, a
    glob of its file there, the distribution that ships it). The probe looks for the file without
    importing the package; a trimmed install without it cannot run that backend."""
    no_prefix_cache_args: tuple[str, ...] = ()
    """The flags that turn its prefix cache off: the sweep's servers get them, since the sweep sends
    its prompts again at every level and stage 3 sends each prompt once (a cached prompt skips its
    prefill, so a level's tokens/s would depend on what the server measured before it)."""
    spec_state_up_front: bool = False
    """Whether, for a hybrid (recurrent-state) model under speculation, it reserves at start the
    state of every running request and of each of its draft tokens (so a server asked to run more
    requests than that fits does not start), rather than growing into its pool as requests come."""
    speculative_modules: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """Python modules its server imports only once a speculative algorithm starts: module ->
    (the distribution that installs it, the `--speculative-algorithm` values that import it). The
    probe looks for them, so that a missing one is said before stage 2's arms fail to start."""
    compile_cache_vars: Mapping[str, str] = field(default_factory=lambda: dict(TORCH_CACHE_VARS))
    """Where its compile caches go: variable -> subfolder of the kit's one folder (compile_cache.py)."""

    @property
    def can_speculate(self) -> bool:
        return self.no_speculation is None

    # ---- its server ------------------------------------------------------------------------------
    def command(self, params: RunParams, port: int) -> list[str]:
        """The argv that starts its server on `port`."""
        raise EngineError(f"flavor {self.name!r} runs no command: the kit talks to engine.base_url as it is.")

    def shape_only_args(self, model_path: str | Path) -> list[str]:
        """Its dummy-weight flags when `model_path` is a shape-only folder (kit.modelshape), else none."""
        shape = shape_of(model_path)
        if shape is None:
            return []
        if not self.dummy_weights_args:
            raise EngineError(
                f"{model_path} is shape only ({shape.get('shape')}: a config without weights) and "
                f"{self.title} cannot load random weights: serve it with flavor sglang or vllm "
                "(--load-format dummy), or point model.path at the real weights"
            )
        return list(self.dummy_weights_args)

    def env(self, eng: EngineParams) -> dict[str, str]:
        """Environment variables of its own for the server process (`engine.env` is added over them)."""
        return {}

    def start_parts(self, log: str) -> dict[str, float]:
        """Seconds its server's start spent on each part `log` (its output since the start) shows:
        `weights_s`, `graphs_s`, `compile_s`, ... (kit.engines.start_parts); none by default."""
        return {}

    def needs_gpu(self, device: str, packages: Mapping[str, str | None] | None) -> bool:
        """Whether its server runs on GPUs; `packages`: versions installed in its environment (None:
        not known)."""
        return False

    # ---- speculation ------------------------------------------------------------------------------
    def spell_arm(self, arm: Arm) -> ArmSpelling:
        """The speculative fields of `engine.speculative` that run `arm` on this flavor (none for plain
        decoding): the draft length k as `num_steps` (an adaptive arm: its ceiling, and `adaptive`)."""
        if not arm.speculative:
            return ArmSpelling()
        return ArmSpelling(num_steps=arm.k, adaptive=True) if arm.adaptive else ArmSpelling(num_steps=arm.k)

    def adaptive_problem(self, eng: EngineParams) -> str | None:
        """Why its own adaptive speculation cannot run with these engine params (None: it can)."""
        return (
            f"{self.title} has no adaptive speculation the kit can run (it knows SGLang's "
            "--speculative-adaptive and vLLM's num_speculative_tokens_per_batch_size)"
        )

    def accept_gauge_ranks(self, eng: EngineParams) -> int:
        """How many accept-length gauges a scrape of all its servers sums (1: none, or one value)."""
        return 1

    # ---- requests -------------------------------------------------------------------------------
    def sampling_problems(
        self, sampling: SamplingParams, *, speculative: bool = False, distribution: str | None = None
    ) -> list[str]:
        """Sampling settings it would reject, ignore or crash on, each as `generate.sampling.<key>: why`
        (`distribution`: the installed engine package)."""
        return [
            f"generate.sampling.{key}: {why}"
            for key, why in self.refused_fields.items()
            if getattr(sampling, key) is not None
        ]

    def sampling_body(
        self,
        body: SamplingFields,
        extended: ExtendedFields,
        model_generation_config: dict[str, Any] | None,
    ) -> SamplingFields:
        """The request body with the settings beyond OpenAI's (top_k, min_p, repetition_penalty);
        `model_generation_config`: the model's generation_config.json as read (None: it has none)."""
        return {**body, **extended}

    def tool_request_fields(self, params: RunParams) -> ToolFields:
        """Fields a request that offers tools adds."""
        return ToolFields()

    # ---- capacity and room ------------------------------------------------------------------------
    def capacity(
        self, eng: EngineParams, *, distribution: str | None, gpus: Callable[[], list[Any]]
    ) -> Capacity:
        """Requests its servers run at once: from the launch flag the kit passed, else its own default
        (`distribution`: the installed package; `gpus`: the GPUs' facts, asked only when needed)."""
        servers = eng.dp_size * eng.replicas
        running = eng.max_running_requests
        if self.capacity_flag and running:
            return Capacity(running * servers, f"launch flag {self.capacity_flag} {running} x {servers}")
        return Capacity(None, f"{self.name} does not say how many requests it runs at once")

    def apart_on_cpu(self, eng: EngineParams) -> str | None:
        """Why its servers cannot run side by side on a CPU, or None."""
        return None

    def kv_cap_args(self, tokens: int) -> list[str] | None:
        """Flags that give a server a KV cache of `tokens` tokens whatever memory is free when it
        starts (so that several can share one GPU), or None when the kit knows none."""
        return [self.kv_cap_flag, str(tokens)] if self.kv_cap_flag else None

    def cpu_kv_variable(self, eng: EngineParams, distribution: str | None) -> str | None:
        """The environment variable that sizes its KV cache on a CPU, where the engine as `eng` sets it
        up (its installed `distribution`) would size it from all of the machine's memory instead;
        None when it would not (kit.engines.cpu_kv)."""
        return None

    def cpu_cache_gib(self, eng: EngineParams) -> float:
        """GiB of KV cache one of its servers takes on a CPU."""
        return DEFAULT_CPU_CACHE_GIB


def opt(flag: str, value: object) -> list[str]:
    """`[flag, str(value)]` when value is set, else nothing."""
    return [] if value is None else [flag, str(value)]
