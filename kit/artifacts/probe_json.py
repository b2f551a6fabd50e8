"""probe.json (stage 1): the probe report and its sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.artifacts.probe_memory import MemorySection
from kit.artifacts.probe_sections import (
    BackendVerdict,
    DatasheetEntry,
    EngineEnvFacts,
    GpuDevice,
    HostFacts,
    InputsSection,
    ModelFacts,
    TorchInfo,
)
from kit.artifacts.record import JSONObject, Record, optional


@dataclass(frozen=True, kw_only=True)
class Finding(Record):
    """One checked fact of the probe with a status a person can act on (kit.probe.findings.finding)."""

    section: str = ""
    name: str = ""
    status: str = "ok"
    """ok, warn or fail; warn and fail carry an `action`."""
    value: Any = None
    reason: str = ""
    action: str = ""

    @property
    def key(self) -> str:
        """`section/name`, as the summary lists it."""
        return f"{self.section}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class ProbeSummary(Record):
    go: bool = False
    """Go when nothing failed."""
    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class GpuSection(Record):
    devices: list[GpuDevice] = field(default_factory=list)
    """One object per GPU (kit.probe.gpu.GpuFacts.to_dict): name, memory_total_bytes, sm, ..."""
    torch: TorchInfo | None = None
    """What torch said in a child process (its `measured` copy bandwidth and matmul, when asked)."""
    topology: str | None = None
    """`nvidia-smi topo -m`, when nvidia-smi is on PATH."""
    datasheet: DatasheetEntry | None = None
    """The first GPU's datasheet entry (kit/probe/datasheet.yaml), when it is known."""

    @property
    def measured(self) -> JSONObject:
        """The copy bandwidth and bf16 matmul torch measured ({} when not measured)."""
        measured = self.torch.get("measured") if self.torch else None
        return dict(measured) if isinstance(measured, dict) else {}


@dataclass(frozen=True, kw_only=True)
class ProbeSpeculation(Record):
    """Whether speculative decoding can run with this model directory, and why (plus the flavor's
    spelling of the recommended arm in `extra`)."""

    available: bool | None = None
    """True, False, or None where the probe cannot tell (a separate draft model)."""
    why: str = "unknown"
    algorithm: str | None = None


@dataclass(frozen=True, kw_only=True)
class Recommended(Record):
    """The probe's recommended engine settings; None where it cannot tell (no GPU, unreadable model)."""

    attention_backend: str | None = None
    attention_backend_reason: str | None = None
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_running_requests_speculative: int | None = None
    max_running_requests_note: str | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_max_bs_speculative: int | None = None
    mamba_strategy: str | None = None
    mamba_strategy_speculative: str | None = None
    mamba_flag: str | None = None
    speculative: ProbeSpeculation = field(default_factory=ProbeSpeculation)
    context_length: int | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    parsers_reason: str = "unknown"
    thinking_switch: str | None = None
    thinking_note: str | None = None
    commands: dict[str, list[str]] | None = optional()
    """Launch commands with these settings, plain and speculative (`kit probe` adds them)."""


@dataclass(frozen=True, kw_only=True)
class ProbeReport(Record):
    """probe.json: every finding, the GPUs, the model directory, the engine's environment, the memory
    plan, the attention backends, the host, and the recommended settings."""

    version: int = 1
    run: str | None = None
    created_at: str | None = None
    inputs: InputsSection = field(default_factory=lambda: InputsSection())
    summary: ProbeSummary = field(default_factory=ProbeSummary)
    recommended: Recommended = field(default_factory=Recommended)
    findings: list[Finding] = field(default_factory=list)
    gpus: GpuSection = field(default_factory=GpuSection)
    model: ModelFacts = field(default_factory=lambda: ModelFacts())
    """The model directory's facts (kit.probe.model_dir): config, shards, tokenizer, `mtp`."""
    engine_env: EngineEnvFacts = field(default_factory=lambda: EngineEnvFacts())
    """The engine's interpreter, packages and launcher (kit.probe.engine_env)."""
    memory: MemorySection | None = None
    """The memory plan (kit.artifacts.probe_memory), None without a GPU."""
    backends: list[BackendVerdict] = field(default_factory=list)
    host: HostFacts = field(default_factory=lambda: HostFacts())
    """Cores, RAM, disk, /dev/shm, OS and Python (kit.probe.host)."""
    command: str | None = optional()
    """The command that made it, when benchmarks/probe_gpu.py did."""

    @property
    def mtp_status(self) -> str | None:
        """present / declared_missing / absent_from_architecture, or None (the model was unreadable)."""
        mtp = self.model.get("mtp")
        return mtp.get("status") if isinstance(mtp, dict) else None

    @property
    def ram_total_bytes(self) -> int | None:
        return self.host.get("ram_total_bytes")

    @property
    def launcher_help(self) -> str | None:
        """The file that caches the engine launcher's --help (None when it was not read)."""
        launcher = self.engine_env.get("launcher")
        return launcher.get("cached") if isinstance(launcher, dict) else None
