"""Stage 2, decide on speculative decoding: a measured sweep of the real engine beside a cost model
of decode steps, and the decision with its reasons (decision.json).

- costmodel/   the cost model: a `Scenario` (model, GPU, efficiency, workload, draft) -> step times,
               tokens/s per arm; numpy and pandas only, so it runs on a GPU box without the kit
- profile/     the step profiler: measured step times of a random-weight model, calibration
- the stage:   run.py (decision.json), sweep.py, machine.py, noise.py, measured.py, decision.py, apply.py
               (stage 3's settings); view.py, verdict.py, plots.py, worth.py, whatif.py, whatif_model.py
               (notebook 02); tailarm.py (stage 3's tail)

Importing the package loads nothing: each module is imported by name.
"""
