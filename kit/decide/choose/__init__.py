"""Choose plain or speculative decoding: the arm, its engine settings and the reasons
(decision.json), and how stage 3 applies them.

- measured.py  the measured choice: the simplest arm not beaten outside the noise, the fall, drift
- decision.py  decision.json: the arm (stored once), engine settings, the reasons; the cost model
               fills in for arms the sweep could not measure
- reasons.py   the reasons in sentences: arms not measured, compute-bound verify, crossover, gaps
- apply.py     decision.json -> stage 3's params (the params the user set win)
- tailarm.py   the speculative arm for a batch job's tail: the crossover where it wins

Imports measure/ (the sweep's tables and statistics), costmodel/ and profile/ below it; nothing of
checks/, forecast/ or views/ above it. Importing the package loads nothing: each module is imported
by name.
"""
