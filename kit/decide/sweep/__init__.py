"""The sweep: every arm at a ladder of concurrencies, in interleaved rounds, raced and within a time
budget, and what it hands back.

- sweep.py    `run_sweep`: the arms' servers, the rounds, the end check, the pilot; sweep.parquet,
              sweep_runs.parquet and sweep_answers.parquet
- rounds.py   the rounds: each after the first measures only what is still open, while the budget
              allows; what was left out and the sweep's cost (decision.json's `sweep_cost`)
- racing.py   which (arm, level) pairs a round's measurements already settle (the decision's own
              noise rule), and a recorded sweep replayed as racing would have measured it
- budget.py   the time budget: the params', else a share of the job it decides for
- setup.py    `SweepSetup`, built once by the stage and handed down (the checks read it too), and
              `SweepResult`, what the sweep hands back

Imports measure/ and forecast/ below it (the budget sizes the job as the forecast does).
Importing the package loads nothing: each module is imported by name.
"""
