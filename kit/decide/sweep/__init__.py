"""The sweep: every arm at a ladder of concurrencies, in interleaved rounds, raced and within a time
budget; the stage's set-up it runs from, and what it hands back.

- setup.py    `sweep_setup` -> `SweepSetup`, built once by the stage and handed down (the checks read it
              too): the sweep's prompts and the pilot's; `SweepResult`, what the sweep hands back
- layout.py   how the arms' servers run: side by side or in turn, memory's running caps, the flags
              the sweep adds to stage 3's
- sweep.py    `run_sweep`: the arms' servers, the rounds, the disturbed levels again, the end check,
              the pilot; sweep.parquet, sweep_runs.parquet and sweep_answers.parquet
- rounds.py   the rounds: each after the first measures only what is still open, while the budget
              allows; what was left out and the sweep's cost (decision.json's `sweep_cost`)
- limits.py   what the sweep leaves out: the (arm, level) pairs a round already settles (racing, by
              the decision's own noise rule), the rounds the time budget has no room for (the
              params', else a share of the job); a recorded sweep replayed as racing would measure it

Imports measure/, choose/ (an arm's name), forecast/ (the budget sizes the job as the forecast
does) and costmodel/ below it. Importing the package loads nothing: each module is imported by name.
"""
