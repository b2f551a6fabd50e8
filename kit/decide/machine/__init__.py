"""The box watch: what else the machine did while the sweep measured, so that a disturbed measurement
is set aside rather than read as the engine's speed.

- watch.py        `MachineReading` before and after each measurement, the `Interference` between
                  them (others' CPU, idle neighbours, load, a CPU canary), its verdict; idle servers paused
- gpu_watch.py    the servers' GPUs as NVML says it: foreign processes, throttle reasons, SM clock
- disturbance.py  `Disturbance`, the record of one measurement's signals and verdict (a leaf)

Imports nothing of kit.decide: the lowest floor of the stage, beside costmodel/ and profile/.
Importing the package loads nothing: each module is imported by name.
"""
