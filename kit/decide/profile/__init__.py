"""The step profiler: measured decode-step times `T(B, q, L)` of a random-weight model built from a
config.json, and the cost model's efficiency calibrated on them.

- profiler.py        `profile_steps` over a `ProfileGrid` (transformers model or synthetic step), `calibrate`
- synthetic_step.py  a serving engine's decode step, shape for shape (in-place KV, GQA-packed SDPA)
- steptimer.py       eager and CUDA-graph timing, scaling a few layers to full depth
- budget.py          how deep a CPU profile can go in the memory this machine has

Needs torch, numpy and pandas (transformers for the `hf` backend), not pydantic:
benchmarks/profile_step.py runs it on a bare GPU box.
"""
