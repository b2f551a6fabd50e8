"""Stage 2 -> stage 3: the engine settings of decision.json applied to the run's params.

Speculation (on or off, its k) always follows the decision; every other setting fills only what
the params leave unset (see `kit.engines.settings.apply_settings`).
"""

from __future__ import annotations

from typing import Any

from kit.engines.settings import apply_settings
from kit.params import RunParams


def apply_decision(params: RunParams, decision: dict[str, Any]) -> tuple[RunParams, dict[str, Any]]:
    """(params for stage 3, the settings taken from the decision, with the chosen arm)."""
    new, applied = apply_settings(params, decision.get("engine_settings") or {})
    applied["chosen_arm"] = decision.get("chosen_arm")
    return new, applied
