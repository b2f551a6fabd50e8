"""Stage 2 -> stage 3: the arm and engine settings of decision.json applied to the run's params.

Speculation (on or off, its k) always follows the decision's arm; every other setting fills only
what the params leave unset (see `kit.engines.settings.apply_settings`).
"""

from __future__ import annotations

from typing import Any

from kit.artifacts import Decision
from kit.engines.arms import Arm
from kit.engines.settings import apply_settings
from kit.params import RunParams


def apply_decision(params: RunParams, decision: Decision) -> tuple[RunParams, dict[str, Any]]:
    """(params for stage 3, the settings taken from the decision, with the chosen arm's name)."""
    arm = decision.arm or Arm(0)
    # apply_settings reads the arm where decided_settings spells it, among the engine settings
    handoff = {"speculative": arm.speculative, "spec_k": arm.k, "algorithm": arm.algorithm}
    new, applied = apply_settings(params, {**decision.engine_settings, **handoff})
    applied["chosen_arm"] = arm.name
    return new, applied
