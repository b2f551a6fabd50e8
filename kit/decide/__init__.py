"""Stage 2, decide on speculative decoding: a measured sweep of the real engine beside a cost model
of decode steps, and the decision with its reasons (decision.json).

The map, one floor above another: a subpackage imports only those on the floors below it (pinned
by tests/test_layout.py, `DECIDE_FLOORS`), and run.py, the stage's entry, sits above them all.

- run.py      `run_decision`: probe facts + the sweep + the cost model -> decision.json
- views/      notebook 02 and the index page: the decision in sentences, figures, what-if, worth
- checks/     after the choice, with servers of their own: the answers check, the settings sweep
- sweep/      the sweep's rounds, raced and within its time budget; its set-up and what it hands back
- forecast/   the job in hours per arm (decision.json's `forecast`), judged after stage 3
- choose/     the arm, its settings and reasons (decision.json); apply.py: stage 3's params; the tail arm
- measure/    one measurement, the servers, the journal, the pilot, the tables, the noise, arm status
              and the engine's own adaptive arm
- machine/    the box watch during each measurement: CPU, canary, GPUs, the disturbance record
- profile/    the step profiler: measured step times of a random-weight model, calibration
- costmodel/  the cost model: a `Scenario` (model, GPU, efficiency, workload, draft) -> step times,
              tokens/s per arm; numpy and pandas only, so it runs on a GPU box without the kit

Importing the package loads nothing: each module is imported by name.
"""
