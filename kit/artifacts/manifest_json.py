"""manifest.json (stage 3): what a `kit generate` session made and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.artifacts.manifest_sections import OrderReport, PremiseReport, RayReport, RunIdentity
from kit.artifacts.record import JSONObject, Record, optional

if TYPE_CHECKING:
    from kit.engines.flavors.base import SpeculativeJson


@dataclass(frozen=True, kw_only=True)
class TailNote(Record):
    """manifest.json's `tail_speculation`: whether the tail switches to speculation, why, and what the
    switch did (kit.generate.tailswitch)."""

    enabled: bool = False
    why: str | None = None
    switched: bool | None = optional()
    k: int | None = optional()


@dataclass(frozen=True, kw_only=True)
class Manifest(Record):
    """manifest.json, written last by a `kit generate` session: complete or not and its exit code,
    rows, failures, restarts, the identity the rows were made with, the order sent, the tail's
    switch, the decision's premises checked live, a Ray job's actors."""

    run: str | None = None
    complete: bool | None = None
    status: str | None = None
    """complete, incomplete or interrupted (a stop signal: `exit_code` 128 + the signal)."""
    exit_code: int | None = None
    rows: int = 0
    left: int = 0
    planned_prompts: int | None = None
    samples_per_prompt: int = 1
    rows_this_session: int = 0
    failures: int = 0
    never_generated: dict[str, int] = field(default_factory=dict)
    """Rows the engine refuses for good (too long for the context, rejected), by reason."""
    rows_by_source: dict[str, int] = field(default_factory=dict)
    shards: int = 0
    corrupt_shards_set_aside: list[Any] = field(default_factory=list)
    duplicate_shards_set_aside: list[Any] = field(default_factory=list)
    shard: str = "0/1"
    engine: RunIdentity = field(default_factory=dict)
    """The identity the rows were made with (kit.generate.work.engine_identity, `_run.json`); {} in a
    manifest that lacks it."""
    sampling: JSONObject = field(default_factory=dict)
    """generate.sampling as the rows' `sampling` column holds it (the params section's JSON, its keys
    the params')."""
    server_restarts: int = 0
    concurrency: int | None = None
    concurrency_start: int | None = None
    engine_capacity: int | None = None
    capacity_source: str | None = None
    premises: PremiseReport | None = None
    """The decision's premises checked live (kit.generate.premises.PremiseCheck.report)."""
    ray: RayReport | None = None
    """A Ray job's blocks and actors (kit.generate.raydriver)."""
    settings_from_decision: JSONObject | None = None
    """The engine settings stage 3 took from decision.json (kit.engines.settings.AppliedSettings, which
    this standard-library module cannot name at run time: a record's field types are resolved)."""
    order: OrderReport = field(default_factory=dict)
    """The order sent and what its prediction rested on (kit.generate.order)."""
    tail_speculation: TailNote = field(default_factory=TailNote)
    executor: str = "local"
    generating_s: float | None = None
    """Seconds spent generating, over every session of the run."""
    session_started_at: str | None = None
    finished_at: str | None = None
    started_at: str | None = optional()
    """An earlier kit's start of the run."""

    @property
    def speculative(self) -> SpeculativeJson | None:
        """The speculative section the rows were made with (None: plain decoding)."""
        spec = self.engine.get("speculative")
        return spec if isinstance(spec, dict) and spec.get("algorithm") else None
