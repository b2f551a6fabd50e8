"""Measuring: one level of one arm on its server, the servers, the journal, the tables the sweep
writes and the statistics that read them (the sweep's rounds are kit.decide.sweep's).

- slots.py       one measurement at a time (an arm at a level), bracketed by the box watch, journaled,
                 said in sweep.log (`run_slots`, `SweepLog`)
- level.py       one level measured: a closed loop of clients at one concurrency against one server
- servers.py     the arms' servers: side by side or in turn, warmed up, paused, restarted after a crash
- journal.py     every finished measurement as a line, so a stopped sweep goes on where it stopped
- pilot.py       the records the sweep exchanges (`SweepPrompt`, `Answer`, `PilotFigures`) and the
                 pilot: a few prompts answered as stage 3 samples them
- tables.py      the sweep's tables: columns (`SweepRow`), a level's figure, the rounds a lead pairs
- noise.py       what a measured sweep can tell apart: intervals, paired leads, drift
- arm_status.py  which arms the sweep measured, which not and why; every crash of an arm's server
- adaptive.py    the engine's own adaptive arm: its rows marked in the sweep's tables, compared after

Imports machine/ below it (the box watch during each measurement), nothing else of kit.decide.
Importing the package loads nothing: each module is imported by name.
"""
