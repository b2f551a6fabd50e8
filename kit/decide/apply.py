"""Stage 2 -> stage 3: the engine settings of decision.json applied to the run's params.

Speculation (on or off, its k) always follows the decision: it is what the sweep was run to
find out, and `engine.speculative.algorithm` in the params only names the algorithm to try.
Every other setting the decision resolved fills a field the params leave unset; a value the
user wrote in the params file wins.
"""

from __future__ import annotations

from typing import Any

from kit.params import RunParams, SpeculativeParams

FILLED = (
    "max_running_requests",
    "cuda_graph_max_bs",
    "mem_fraction_static",
    "dp_size",
    "tp_size",
    "attention_backend",
    "mamba_strategy",
)


def apply_decision(params: RunParams, decision: dict[str, Any]) -> tuple[RunParams, dict[str, Any]]:
    """(params for stage 3, the settings taken from the decision)."""
    s = decision.get("engine_settings") or {}
    eng = params.engine
    update: dict[str, Any] = {
        k: s[k] for k in FILLED if k not in eng.model_fields_set and s.get(k) is not None and k in s
    }
    if s.get("speculative"):
        spec = eng.speculative
        update["speculative"] = spec.model_copy(
            update={
                "algorithm": spec.algorithm or s.get("algorithm"),
                "num_steps": int(s["spec_k"]),
                "eagle_topk": int(s.get("eagle_topk") or 1),
                "num_draft_tokens": int(s.get("num_draft_tokens") or int(s["spec_k"]) + 1),
            }
        )
    else:
        update["speculative"] = SpeculativeParams()
    applied = {k: v for k, v in update.items() if k != "speculative"}
    applied["speculative"] = update["speculative"].model_dump(mode="json", exclude_none=True) or None
    applied["chosen_arm"] = decision.get("chosen_arm")
    return params.model_copy(update={"engine": eng.model_copy(update=update)}), applied
