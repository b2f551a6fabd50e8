"""Stage 2 -> stage 3: the arm and engine settings of decision.json applied to the run's params.

Speculation (on or off, its k) always follows the decision's arm; every other setting fills only
what the params leave unset (see `kit.engines.settings.apply_settings`).
"""

from __future__ import annotations

from kit.artifacts import Decision
from kit.engines.arms import Arm, arm_k, arm_label
from kit.engines.settings import AppliedSettings, apply_settings
from kit.params import RunParams


def apply_decision(params: RunParams, decision: Decision) -> tuple[RunParams, AppliedSettings]:
    """(params for stage 3, the settings taken from the decision, with the chosen arm's name)."""
    arm = decision.arm or Arm(0)
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
