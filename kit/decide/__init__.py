"""Stage 2, decide MTP: a cost model of decode steps, a step-time profiler and the decision with reasons.

Importing the package loads only the cost model (no pydantic, no engines), so benchmarks/profile_step.py
runs on a bare GPU box; `decide` is imported on first use.
"""

from typing import Any

from kit.decide.acceptance import accept_length, acceptance_rate
from kit.decide.costmodel import Efficiency, Hardware, step_time
from kit.decide.predict import Workload, predict_ladder

__all__ = [
    "Efficiency",
    "Hardware",
    "Workload",
    "accept_length",
    "acceptance_rate",
    "decide",
    "predict_ladder",
    "step_time",
]


def __getattr__(name: str) -> Any:
    if name == "decide":
        from kit.decide.decision import decide

        return decide
    raise AttributeError(f"module 'kit.decide' has no attribute {name!r}")
