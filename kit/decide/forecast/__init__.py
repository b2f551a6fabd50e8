"""The job in hours: stage 3's wall time and GPU-hours per arm, with an interval (decision.json's
`forecast`), and that forecast judged against what stage 3 then took.

- job.py       the arithmetic: the plan's lengths, the sweep's ladders, the job simulated per arm
- inputs.py    what the forecast rests on, read from the run: planned requests, running cap,
               replicas, the pilot's answers
- history.py   the interval widened by comparable judged runs' wall-time errors (split conformal)
- check.py     the forecast against what stage 3 took, and which input missed (summary.json)
- jobhours.py  notebook 02's job in hours: another number of requests or replicas

Imports choose/ and measure/ below it; nothing of checks/ or views/. Importing the package loads
nothing: each module is imported by name.
"""
