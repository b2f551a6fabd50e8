"""Stage 2, decide MTP: a roofline cost model, a step-time profiler and the decision with reasons."""

from kit.decide.acceptance import accept_length, accept_length_positional, acceptance_rate
from kit.decide.costmodel import Efficiency, Hardware, step_time
from kit.decide.decision import decide
from kit.decide.predict import Workload, predict_ladder

__all__ = [
    "Efficiency",
    "Hardware",
    "Workload",
    "accept_length",
    "accept_length_positional",
    "acceptance_rate",
    "decide",
    "predict_ladder",
    "step_time",
]
