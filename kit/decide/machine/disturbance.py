"""What else the machine did during one measurement, as a record: the signals kit.decide.machine.watch reads
(`Interference.signals`), its verdict (`Interference.as_dict`) and the columns of sweep_runs.parquet
they become (kit.decide.measure.tables.SweepRow). A leaf, so that both can name it."""

from __future__ import annotations

from typing import TypedDict


class Disturbance(TypedDict, total=False):
    """The signals of one measurement (each described in kit.decide.machine.watch), then `disturbed` and
    `why` (`Interference.as_dict`; `Interference.signals` has all but those two). Keys optional only
    because a sweep row of an arm that never ran has none of them."""

    foreign_cpu: float
    load_1m: float
    cpu_mhz: float | None
    gpu_foreign_processes: int | None
    canary_ms: float
    neighbour_cpu: float
    engine_cores: int | None
    engine_core_foreign_cpu: float | None
    gpus: int | None
    gpu_foreign_seen: int | None
    gpu_throttle: str | None
    gpu_throttle_s: float | None
    gpu_sm_mhz: float | None
    disturbed: bool
    why: str
