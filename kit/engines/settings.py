"""The engine settings of an arm, whether it can run here, and the settings a decision hands to stage 3.

The sweep (which arms to launch), the decision (what decision.json says), `apply_settings`
(decision.json -> stage 3's params), the probe's recommendations and the tail switch all turn an
`Arm(k, algorithm)` into engine params here, and only here does the flavor spell it
(`Flavor.spell_arm`: SGLang's steps / top-k / draft tokens, vLLM's `num_speculative_tokens`):

    arm = Arm(k=3, algorithm="MTP")
    spec = speculative_params(arm, flavor("sglang"), params.engine.speculative)
    eng = arm_engine(params, arm, hybrid=False)      # the engine params the sweep launches the arm with

Request fields live in `kit.engines.request_fields`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, cast

from kit.artifacts.decision_json import EngineSettings
from kit.engines import flavors
from kit.engines.arms import DEFAULT_ALGORITHM, Algorithm, Arm, resolve_algorithm, section_algorithm
from kit.engines.flavors.base import ArmSpelling, SpeculativeJson
from kit.params import EngineParams, RunParams, SpeculativeParams

__all__ = [
    "SETTING_FIELDS",
    "Arm",
    "Speculation",
    "EngineSettings",
    "AppliedSettings",
    "apply_settings",
    "arm_engine",
    "decided_settings",
    "engine_speculation",
    "engine_unavailable_reason",
    "speculation",
    "speculative_params",
    "sweep_arms",
    "unavailable_reason",
]
SPELT = tuple(ArmSpelling.__annotations__)
"""The fields of `engine.speculative` a flavor spells an arm's k in (`ArmSpelling`'s keys: num_steps,
eagle_topk, num_draft_tokens, adaptive); those the flavor leaves out are unset."""


def sweep_arms(params: RunParams) -> list[Arm]:
    """Plain, then one speculative arm per draft length in `decide.spec_steps`, then the engine's own
    adaptive speculation up to `decide.adaptive_k` when the params ask for it."""
    name = section_algorithm(params.engine.speculative).name
    ceiling = params.decide.adaptive_k
    adaptive = [Arm(ceiling, name, adaptive=True)] if ceiling else []
    return [Arm(0), *(Arm(k, name) for k in params.decide.spec_steps), *adaptive]


def speculative_params(
    arm: Arm, flavor: flavors.Flavor, base: SpeculativeParams | None = None
) -> SpeculativeParams:
    """The params' speculative section for `arm` on `flavor` (empty for plain decoding). The flavor
    spells k; the draft model path of `base` is kept."""
    if not arm.speculative:
        return SpeculativeParams()
    base = base or SpeculativeParams()
    update: dict[str, Any] = dict.fromkeys(SPELT)
    update["algorithm"] = arm.algorithm or base.algorithm or DEFAULT_ALGORITHM
    return base.model_copy(update=update | flavor.spell_arm(arm))


# ---- can an arm run here --------------------------------------------------------------------
def unavailable_reason(
    flavor: str, algo: Algorithm, has_draft_model: bool, mtp_status: str | None
) -> str | None:
    """Why speculative arms of `algo` cannot run with this engine and model directory, or None.

    `mtp_status` is the probe's: present, missing / declared_missing, absent_from_architecture.
    """
    fl = flavors.flavor(flavor)
    if not fl.can_speculate:
        return fl.no_speculation
    if algo.draft == "none":
        return None
    if algo.draft == "model":
        if not has_draft_model:
            return f"{algo.name} drafts with a separate model: set engine.speculative.draft_model_path"
        return None
    if mtp_status in ("missing", "declared_missing"):
        return (
            "the config declares MTP layers but the checkpoint lacks their weights (no mtp.* tensors); "
            "fetch them to enable MTP, or try algorithm NGRAM (needs no weights)"
        )
    if mtp_status not in (None, "present"):
        return (
            "the model has no multi-token-prediction layers (no mtp_num_hidden_layers / "
            "num_nextn_predict_layers) and no draft model is given; try algorithm NGRAM"
        )
    return None


def engine_unavailable_reason(eng: EngineParams, mtp_status: str | None) -> str | None:
    """`unavailable_reason` for the engine params of a run."""
    return engine_speculation(eng, mtp_status).unavailable


@dataclass(frozen=True)
class Speculation:
    """The speculation a run's engine would run, read once: the engine's flavor (its name), the
    algorithm of the speculative arms, and why they cannot run with this engine and model directory
    (None: they can)."""

    flavor: str
    algo: Algorithm
    unavailable: str | None

    @property
    def label(self) -> str:
        """What the speculative arms are called (MTP, n-gram, EAGLE, draft model)."""
        return self.algo.label


def speculation(
    flavor: str, mtp_status: str | None, algorithm: str | None = None, draft_model: bool = False
) -> Speculation:
    """`Speculation` of `algorithm` (default MTP) on this flavor, for the probe's `mtp_status`."""
    algo = resolve_algorithm(algorithm, draft_model)
    return Speculation(flavor, algo, unavailable_reason(flavor, algo, draft_model, mtp_status))


def engine_speculation(eng: EngineParams, mtp_status: str | None) -> Speculation:
    """`Speculation` of a run's engine params."""
    spec = eng.speculative
    return speculation(eng.flavor, mtp_status, spec.algorithm, spec.draft_model_path is not None)


# ---- the engine of one arm, and the settings a decision hands to stage 3 ---------------------
def arm_engine(params: RunParams, arm: Arm, hybrid: bool, running_cap: int | None = None) -> EngineParams:
    """Engine params of one sweep arm. Max running requests is always explicit: SGLang lowers it to
    48 under speculation when it is unset, which would cap the concurrency ladder silently. An arm
    whose server cannot hold the top level (`running_cap`, `kit.decide.sweep.layout.running_caps`) is
    started with that cap when the params set none: the levels above it queue, as stage 3 would."""
    eng = params.engine
    fl = flavors.flavor(eng.flavor)
    if not fl.can_speculate:
        return eng
    top = max(params.decide.concurrencies)
    running = eng.max_running_requests or min(top, running_cap or top)
    update = EngineUpdate(
        max_running_requests=running,
        cuda_graph_max_bs=eng.cuda_graph_max_bs or min(running, 512),
        speculative=speculative_params(arm, fl, eng.speculative),
    )
    if arm.speculative and hybrid:
        update["mamba_strategy"] = eng.mamba_strategy or "extra_buffer"
    return eng.model_copy(update=update)


SETTING_FIELDS = (
    "max_running_requests",
    "cuda_graph_max_bs",
    "mem_fraction_static",
    "dp_size",
    "tp_size",
    "attention_backend",
    "sampling_backend",
    "mamba_strategy",
)
"""Engine fields a decision may resolve; in stage 3 each fills only what the params leave unset."""


class SettingValues(TypedDict, total=False):
    """Values of `SETTING_FIELDS` (engine params, kit.params `EngineParams`), those set."""

    max_running_requests: int
    cuda_graph_max_bs: int
    mem_fraction_static: float
    dp_size: int
    tp_size: int
    attention_backend: str
    sampling_backend: str
    mamba_strategy: str


assert tuple(SettingValues.__annotations__) == SETTING_FIELDS, "SettingValues names SETTING_FIELDS"


class AppliedSettings(SettingValues, total=False):
    """What stage 3 took from decision.json (`apply_settings`; manifest.json's
    `settings_from_decision`): each of SETTING_FIELDS the params left unset and the decision sets,
    the speculative section the decision's arm spells (None: plain decoding), and the arm's name
    (`chosen_arm`, added by kit.decide.choose.apply)."""

    speculative: SpeculativeJson | None
    chosen_arm: str


class EngineUpdate(SettingValues, total=False):
    """Engine params an arm or a decision sets (`arm_engine`, `apply_settings`): the pydantic
    `model_copy(update=...)` of `EngineParams`, its speculative section whole."""

    speculative: SpeculativeParams


def decided_settings(
    arm: Arm,
    *,
    flavor: str,
    memory_running: int,
    cap_running: int | None = None,
    cap_reason: str = "the level above which the sweep measured throughput fall",
    mem_fraction: float,
    dp_size: int,
    tp_size: int,
    attention_backend: str | None,
    hybrid: bool,
    measured_at: int | None = None,
) -> EngineSettings:
    """The `engine_settings` of decision.json for the chosen arm (the arm itself travels beside them,
    as decision.json's `arm`; `measured_at`: the sweep's level it was best at).

    The decision picks the arm; it never lowers the engine's batch below its capacity. Max running
    requests stays the engine's own (unset) except: a flavor that lowers it under speculation when
    unset (SGLang, to 48) gets what memory holds per replica (`memory_running`); and `cap_running`
    (per replica) caps it for every engine, for `cap_reason`: a level above which the sweep measured
    throughput fall, or the latency bound of a latency-bound objective.
    """
    fl = flavors.flavor(flavor)
    running, why = None, "the engine's own capacity (the decision sets no limit)"
    if arm.speculative and fl.spec_max_running is not None:
        running = max(memory_running, 1)
        why = (
            f"what memory holds per replica under speculation ({running}): unset, {fl.title} lowers it "
            f"to {fl.spec_max_running} when speculation is on"
        )
    if cap_running is not None and (running is None or cap_running < running):
        running, why = max(cap_running, 1), cap_reason
    return EngineSettings(
        max_running_requests=running,
        max_running_requests_source=why,
        mem_fraction_static=mem_fraction,
        dp_size=dp_size,
        tp_size=tp_size,
        attention_backend=attention_backend,
        mamba_strategy="extra_buffer" if arm.speculative and hybrid else None,
        measured_at_concurrency=measured_at,
    )


def apply_settings(
    params: RunParams, arm: Arm, settings: EngineSettings
) -> tuple[RunParams, AppliedSettings]:
    """Stage 3's params with a decision's arm and engine settings, and what was taken from them.

    Speculation (on or off, its k) always follows the decision's arm: it is what the sweep was run
    to find out (the params' algorithm, when they name one, spells it). Every other setting fills a
    field the params leave unset; a value the user wrote wins. A setting the decision leaves unset
    (max running requests, most often) stays the engine's own default, so stage 3 runs the engine
    at its full capacity.
    """
    eng = params.engine
    older = settings.older_plain_cap and not arm.speculative  # that cap at the sweep's level: no more
    dropped = ("max_running_requests", "cuda_graph_max_bs") if older else ()
    unset = [k for k in SETTING_FIELDS if k not in eng.model_fields_set and k not in dropped]
    update = cast(EngineUpdate, {k: v for k in unset if (v := getattr(settings, k)) is not None})
    spelt = Arm(arm.k, eng.speculative.algorithm or arm.algorithm)
    update["speculative"] = speculative_params(spelt, flavors.flavor(eng.flavor), eng.speculative)
    applied = cast(AppliedSettings, {key: v for key, v in update.items() if key != "speculative"})
    section = update["speculative"].model_dump(mode="json", exclude_none=True)
    applied["speculative"] = cast(SpeculativeJson, section) or None
    return params.model_copy(update={"engine": eng.model_copy(update=update)}), applied
