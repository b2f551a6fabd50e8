"""The cost model: predicted decode-step times and tokens/s per arm, from a model's config and a
GPU's datasheet, with no engine running.

    from kit.decide import costmodel as cm
    s = cm.Scenario(arch, cm.Hardware(4.8e12, 989e12, 141e9, "H200"), work=cm.Workload(1024, 1024))
    cm.step_time(s, B=64, q=4, L=2048)                      # seconds of one verify step
    cm.predict_ladder(s, [1, 8, 64], ks=[1, 3], accept_lengths={3: 2.6})

- hardware.py    `Hardware` (datasheet figures) and `Efficiency` (how far kernels get from them)
- scenario.py    `Scenario`: arch, hardware, efficiency, `Workload`, `Draft`; what every function takes
- step.py        step time T(B, q, L) as named terms; `MODEL_ERROR`, the error the validation supports
- drafts.py      draft cost per kind: MTP, EAGLE / EAGLE-3, draft model, self-speculation, n-gram
- engines.py     speculative fixed costs per engine family (draft pass, iteration, sequence), sourced
- validation.py  the model's measured error on held-out published tables, and what it was checked on
- acceptance.py  accept length <-> acceptance rate, checked against the draft length
- predict.py     tokens/s over a concurrency ladder, the crossover, the best arm
- fit.py         the efficiency fitted to a measured sweep or a step profile (least squares)

Needs numpy and pandas (scipy for a fit), not the kit's stage dependencies (pydantic, the engines'
client), so benchmarks/profile_step.py runs it on a GPU box that has only torch and those.
"""

from kit.decide.costmodel.acceptance import (
    accept_length,
    accept_length_for,
    acceptance_rate,
    check_accept_length,
)
from kit.decide.costmodel.drafts import draft_for, draft_from_config, draft_time, draft_weight_bytes
from kit.decide.costmodel.engines import ENGINE_COSTS, EngineCosts, engine_costs, with_engine
from kit.decide.costmodel.fit import fit_efficiency, fit_to_sweep, predict_sweep
from kit.decide.costmodel.hardware import DEFAULT_EFFICIENCY, Efficiency, Hardware
from kit.decide.costmodel.predict import (
    Capacity,
    arm_capacity,
    best_arm,
    crossover,
    default_capacity,
    iteration_shares,
    iteration_time,
    predict_ladder,
    throughput,
    with_ratio,
    workload_dict,
)
from kit.decide.costmodel.scenario import MTP, NGRAM, PLAIN_SHAPE, Draft, Scenario, StepShape, Workload
from kit.decide.costmodel.step import (
    MODEL_ERROR,
    StepTerms,
    attention_dims,
    attention_flops,
    is_compute_bound,
    param_split,
    prefill_time,
    step_bytes,
    step_terms,
    step_time,
    weight_bytes,
)

__all__ = [
    "DEFAULT_EFFICIENCY",
    "ENGINE_COSTS",
    "MODEL_ERROR",
    "MTP",
    "NGRAM",
    "PLAIN_SHAPE",
    "Capacity",
    "Draft",
    "Efficiency",
    "EngineCosts",
    "Hardware",
    "Scenario",
    "StepShape",
    "StepTerms",
    "Workload",
    "accept_length",
    "accept_length_for",
    "acceptance_rate",
    "attention_dims",
    "attention_flops",
    "best_arm",
    "check_accept_length",
    "crossover",
    "arm_capacity",
    "default_capacity",
    "draft_for",
    "draft_from_config",
    "draft_time",
    "draft_weight_bytes",
    "engine_costs",
    "fit_efficiency",
    "fit_to_sweep",
    "is_compute_bound",
    "iteration_shares",
    "iteration_time",
    "param_split",
    "predict_ladder",
    "predict_sweep",
    "prefill_time",
    "step_bytes",
    "step_terms",
    "step_time",
    "throughput",
    "weight_bytes",
    "with_engine",
    "with_ratio",
    "workload_dict",
]
