"""`RunParams`: a whole params file, one section per top-level key, and the run's folder and
interpreter derived from it. Reading a file into it is kit/params/load.py."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import Field, model_validator

from kit.engines.flavor_names import BACKEND_SETTINGS
from kit.params.engine import EngineParams, ModelParams
from kit.params.section import Section
from kit.params.stages import (
    AnalyseParams,
    DataParams,
    DecideParams,
    ExportParams,
    GenerateParams,
    ProbeParams,
    ReportParams,
)


class RunParams(Section):
    run: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """Run name: outputs go to `<output_dir>/<run>/`."""
    output_dir: Path = Path("../outputs")
    model: ModelParams
    engine: EngineParams = EngineParams()
    probe: ProbeParams = ProbeParams()
    decide: DecideParams = DecideParams()
    data: DataParams = DataParams()
    generate: GenerateParams = GenerateParams()
    analyse: AnalyseParams = AnalyseParams()
    export: ExportParams = ExportParams()
    report: ReportParams = ReportParams()
    source_file: Path | None = None
    """Where these params were read from (set by `load_params`)."""

    @model_validator(mode="after")
    def _backends_spelt_by_the_flavor(self) -> RunParams:
        spelt = BACKEND_SETTINGS[self.engine.flavor]
        unknown = [k for k in self.decide.backends if k not in spelt]
        if unknown:
            can = f"it can measure {', '.join(spelt)}" if spelt else "it measures none"
            raise ValueError(
                f"decide.backends names {', '.join(unknown)}, which {self.engine.flavor} cannot be "
                f"launched with ({can}): remove it from decide.backends, or use flavor sglang"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return self.output_dir / self.run

    @property
    def engine_python(self) -> Path:
        return self.engine.python or Path(sys.executable)
