"""Run parameters: one YAML file per run, validated into frozen, typed sections. Import from here:

    from kit.params import RunParams, load_params
    params = load_params("params/demo.yaml")      # every bad key and missing path in one ParamsError

- `load.py`: reading a file (`load_params`, `saved_params` for a run folder's copy, `dump_params`);
  a key given twice is refused, relative paths are read from the file's folder.
- `paths.py`: the file's paths checked whole as it loads (every input exists; nothing the kit makes
  starts a new tree at the filesystem root).
- `run_params.py`: `RunParams`, the whole file, one section per top-level key.
- `engine.py`: the model and the engine that serves it (`ModelParams`, `EngineParams`,
  `SpeculativeParams`).
- `stages.py`: the stages' sections (`ProbeParams`, `DecideParams`, `DataParams`, `GenerateParams`,
  `AnalyseParams`, ...).
- `section.py`: their base: unknown keys are errors, values are frozen once read.

Each module imports only those listed below it, none imports this package, and none the flavor
registry, whose modules name these types (kit/engines/flavor_names.py has the flavors' names).
"""

from __future__ import annotations

from kit.params.engine import SECRET_WORDS, EngineParams, FlavorName, ModelParams, SpeculativeParams
from kit.params.load import DuplicateKeyError, dump_params, load_params, saved_params
from kit.params.run_params import RunParams
from kit.params.stages import (
    AnalyseParams,
    DataParams,
    DecideParams,
    ExportParams,
    GenerateParams,
    ProbeParams,
    RayParams,
    ReportParams,
    SamplingParams,
    SourceParams,
)

__all__ = [
    "SECRET_WORDS",
    "AnalyseParams",
    "DataParams",
    "DecideParams",
    "DuplicateKeyError",
    "EngineParams",
    "ExportParams",
    "FlavorName",
    "GenerateParams",
    "ModelParams",
    "ProbeParams",
    "RayParams",
    "ReportParams",
    "RunParams",
    "SamplingParams",
    "SourceParams",
    "SpeculativeParams",
    "dump_params",
    "load_params",
    "saved_params",
]
