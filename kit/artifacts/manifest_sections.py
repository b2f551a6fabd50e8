"""manifest.json's sections that stage 3 builds as dicts, spelled once: the identity the rows were
made with (`engine`, also `_run.json`), the order sent (`order`), the decision's premises checked live
(`premises`) and a Ray job's report (`ray`).

TypedDicts, not records: each section is written to manifest.json as the dict itself, so the file
keeps its keys and their order, and a manifest of an earlier kit reads as it is (a key an earlier kit
did not write is absent: readers ask with `.get`). Standard library only, as the rest of
kit.artifacts (types of other packages are named for annotations only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from kit.engines.flavors.base import SpeculativeJson


# ---- the identity (kit.generate.work.engine_identity; `_run.json`, manifest.json's `engine`) ----
class EngineIdentity(TypedDict):
    """What makes rows comparable, of the engine and model (kit.generate.work.engine_identity)."""

    flavor: str
    model: str
    """The model's folder, as text."""
    model_config_hash: str | None
    """sha256 (16 digits) of its config.json; None where the folder has none (an external server)."""
    speculative: SpeculativeJson | None
    """engine.speculative as JSON (None: plain decoding)."""
    thinking: bool | None
    tool_call_parser: str | None
    reasoning_parser: str | None
    row_schema: int


class RunIdentity(EngineIdentity):
    """The identity a run folder is bound to and every row is stamped with (its `engine` column):
    the engine's, the sampling settings' and the data section's hashes, the batch files' digests."""

    sampling_hash: str
    data_hash: str
    batch_files: NotRequired[dict[str, str]]
    """sha256 (16 digits) of each batch source's file, by path; only where the data has one."""


class StoredIdentity(RunIdentity):
    """`_run.json`: the identity, with the settings behind its hashes (an earlier kit's file may lack
    them, and keys of the identity: read with `.get`)."""

    settings: NotRequired[dict[str, Any]]
    """Flat params keys (`generate.sampling.temperature`) and their values: one per leaf of the
    params' sampling and data sections, so their keys are the params' (kit.generate.setting_changes)."""


# ---- the order sent (kit.generate.order) --------------------------------------------------------
FittedBasis = TypedDict("FittedBasis", {"from": str, "rows": int, "mean_tokens": float})
"""What a fitted source's predicted lengths rest on (kit.prompts.lengths.LengthModel.describe): `from`
made rows, pilot answers or sweep answers, how many, their mean output tokens."""
CapBasis = TypedDict("CapBasis", {"from": str, "cap": int | None})
"""A source predicted by its cap (`from`: max_tokens; None: no cap)."""
SourceBasis = FittedBasis | CapBasis
"""What one source's predicted lengths rest on, one or the other."""


class OrderReport(TypedDict, total=False):
    """manifest.json's `order`: the order sent and, for `longest_first`, what its prediction rested on."""

    order: str
    items: int
    predicted_tokens_first: float | None
    predicted_tokens_last: float | None
    predicted_tokens_mean: float | None
    changed: bool
    """Whether the order differs from the plan's."""
    by_source: dict[str, SourceBasis]


# ---- the premises checked live (kit.generate.premises, kit.generate.premise_kinds) --------------
class When(TypedDict):
    """When a premise was checked: seconds into the session, the session, the time of day (ISO)."""

    t_s: float | None
    session: int
    at: str | None


class Evidence(When):
    """What one check of a premise saw (each premise adds its figures: AcceptEvidence, ...)."""

    contradicted: NotRequired[bool]
    """Set once judged (a premise's `first` and `last`)."""


class AcceptEvidence(Evidence):
    accept_length: float
    window_s: float
    samples: int
    sweep_lo: float
    sweep_hi: float
    expected_lo: float
    expected_hi: float
    sweep_levels: dict[int, float]
    implausible_samples: int


class CapacityEvidence(Evidence):
    capacity: int
    running: float
    queued: float | None
    in_flight: float
    remaining: int | None
    token_usage: float | None
    below_for_s: NotRequired[float]
    """The rest only once running stayed below the capacity long enough to judge."""
    below_samples: NotRequired[int]
    running_median: NotRequired[float]
    queued_median: NotRequired[float]
    in_flight_median: NotRequired[float]


class StreakPoint(TypedDict):
    """One steady sample below the capacity: CapacityEvidence's medians are over these."""

    t_s: float
    running: float
    queued: float | None
    in_flight: float


class ThroughputEvidence(Evidence):
    tok_s: float
    concurrency: float
    window_s: float
    rows_in_window: float
    sweep_concurrency: int
    sweep_tok_s: float
    sweep_lo: float
    sweep_hi: float
    sweep_widened: str | None
    expected_lo: float
    expected_hi: float
    gen_throughput: float | None


class PremiseFindings(TypedDict):
    """One premise in the manifest (kit.generate.premise_kinds.Premise.as_dict)."""

    checked: bool
    status: str
    """not checked, contradicted or ok."""
    why_not: str | None
    rule: str
    checks: int
    contradicted_checks: int
    first_contradicted_t_s: float | None
    first_contradicted_session: int | None
    first_contradicted_at: str | None
    first_contradiction: Evidence | None
    last: Evidence | None
    warning: str | None


class PremiseSamples(TypedDict):
    """How the samples judged split: all of them, warm-up, the tail and steady state."""

    samples: int
    warm_up: int
    tail: int
    steady: int


class PremiseReport(TypedDict):
    """manifest.json's `premises` (kit.generate.premises.PremiseCheck.report)."""

    arm: str | None
    arm_label: str
    decision_arm: str | None
    arm_is_decision: bool | None
    engine_capacity: int | None
    replicas: int
    samples: PremiseSamples
    premises: dict[str, PremiseFindings]
    """By premise: accept_length, capacity, throughput."""
    warnings: list[str]


# ---- a Ray job (kit.generate.raydriver, kit.generate.rayactor) ----------------------------------
class ActorOptions(TypedDict):
    """The Ray options of one engine actor (passed to `.options`): its CPUs, and GPUs where it uses them."""

    num_cpus: float
    num_gpus: NotRequired[int]


class ActorInfo(TypedDict, total=False):
    """Where an actor runs and its engine's capacity (EngineActor.start's answer, the actor's about
    file): its place (kit.generate.rayactor.ActorPlace), a `Capacity`'s keys
    (kit.engines.flavors.base.CapacityFacts), its loop; empty until the actor has answered."""

    actor: int
    pid: int
    host: str
    engine_capacity: int | None
    capacity_source: str
    concurrency: int
    server_log: str
    reaper_pid: int | None
    """The kit's wrapper process: its child leads the server's process group."""


class ActorReport(ActorInfo, total=False):
    """One actor in the manifest: its ActorInfo and what it did."""

    blocks_done: int
    found_work: bool | None
    """Whether blocks were waiting when it was first ready (None: it never was; an earlier kit: absent)."""
    rows: int
    failures: int
    server_restarts: int
    died: str | None


class RayReport(TypedDict):
    """manifest.json's `ray`: the cluster, the actors' options, the blocks (kit.generate.blocks
    BlockBook.summary) and each actor."""

    address: str
    actor_options: ActorOptions
    blocks: int
    blocks_done: int
    blocks_handed_again: int
    items_found_on_disk_when_handed_again: int
    actors: list[ActorReport]
