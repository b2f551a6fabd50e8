"""Stage 2 -> stage 3: the arm and engine settings of decision.json applied to the run's params.

Speculation (on or off, its k) always follows the decision's arm; every other setting fills only
what the params leave unset (see `kit.engines.settings.apply_settings`). The engine's own adaptive
speculation (`engine.speculative.adaptive`) is never a decision's arm: params that ask for it with a
decision applied are refused rather than run as the decision's arm without it.
"""

from __future__ import annotations

from kit.artifacts import Decision
from kit.engines.arms import Arm, arm_k, arm_label
from kit.engines.settings import AppliedSettings, apply_settings
from kit.errors import ParamsError
from kit.params import RunParams


def check_adaptive_switch(params: RunParams, arm: Arm | None = None) -> None:
    """Refuse params that ask stage 3 for the engine's own adaptive speculation while it applies a
    decision's arm (which spells stage 3's speculation and would drop the switch); `kit run` asks
    before stage 2, so the sweep is not spent first."""
    if not (params.engine.speculative.adaptive and params.generate.use_decision):
        return
    which = arm.name if arm is not None else "plain or a fixed k"
    raise ParamsError(
        "engine.speculative.adaptive asks for the engine's own adaptive speculation, but stage 3 "
        f"applies the decision's arm ({which}), which would drop it: to run the engine's switch set "
        "generate.use_decision: false (the decision's other engine settings are in decision.json's "
        "engine_settings, to copy into engine:), or remove engine.speculative.adaptive to run the "
        "decision's arm"
    )


def apply_decision(params: RunParams, decision: Decision) -> tuple[RunParams, AppliedSettings]:
    """(params for stage 3, the settings taken from the decision, with the chosen arm's name)."""
    arm = decision.arm or Arm(0)
    check_adaptive_switch(params, arm)
    new, applied = apply_settings(params, arm, decision.engine_settings)
    applied["chosen_arm"] = arm.name
    return new, applied


def applied_words(applied: AppliedSettings, name: str = "MTP") -> str:
    """The settings `apply_decision` took, as a line a person reads: 'plain decoding (the decision's
    arm); dp_size 1, tp_size 1, mem_fraction_static 0.85' (it printed the raw dict); `name` labels
    the speculative arm (MTP, n-gram, EAGLE...)."""
    chosen = str(applied.get("chosen_arm") or "plain")
    k = arm_k(chosen) or 0
    arm = arm_label(k, name)
    spec = applied.get("speculative")
    rest = [
        f"{key} {value}"
        for key, value in applied.items()
        if key not in ("chosen_arm", "speculative") and value is not None
    ]
    if isinstance(spec, dict) and spec:
        said = ", ".join(f"{key} {value}" for key, value in spec.items() if value is not None)
        rest.append(f"speculative ({said})")
    return f"{arm} (the decision's arm)" + (f"; {', '.join(rest)}" if rest else "")
