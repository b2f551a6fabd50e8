"""Execute the four stage notebooks headless with papermill, into `outputs/<run>/notebooks/`.

Each notebook gets two parameters, `params_path` and `run_name`; everything else comes from
the params file, so an executed notebook shows exactly which file drove it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kit.errors import KitError
from kit.params import RunParams
from kit.progress import ENV as PROGRESS_ENV
from kit.runfolder import RunFolder

STAGES = {
    "probe": "01_probe_environment",
    "decide": "02_decide_mtp",
    "generate": "03_generate",
    "analyse": "04_analyse_outputs",
}


def notebooks_dir() -> Path:
    here = Path(__file__).resolve().parent.parent / "notebooks"
    if not here.is_dir():
        raise KitError(
            f"stage notebooks not found at {here}: install the kit from its repository checkout "
            "(pip install -e .), or run the stages without notebooks: "
            "kit probe|decide|generate|analyse PARAMS"
        )
    return here


def execute_stage(params: RunParams, stage: str, folder: RunFolder) -> Path:
    """Run one stage notebook; a failing cell becomes a KitError naming the cell's error."""
    import papermill as pm

    name = STAGES[stage]
    src = notebooks_dir() / f"{name}.ipynb"
    out = folder.notebooks / f"{name}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ[PROGRESS_ENV] = "text"  # inherited by the kernel: text bars, not frozen widgets
    try:
        pm.execute_notebook(
            str(src),
            str(out),
            cwd=str(src.parent),
            kernel_name="python3",
            progress_bar=False,
            stdout_file=sys.stdout,
            stderr_file=sys.stderr,
            parameters={"params_path": str(params.source_file), "run_name": params.run},
        )
    except pm.PapermillExecutionError as e:
        raise KitError(f"notebook {name} failed: {e.ename}: {e.evalue}\n(executed copy: {out})") from None
    return out


def execute_all(params: RunParams, folder: RunFolder, stages: list[str] | None = None) -> list[Path]:
    """Execute the stage notebooks in order (all four by default)."""
    chosen = stages or list(STAGES)
    unknown = sorted(set(chosen) - set(STAGES))
    if unknown:
        raise KitError(f"unknown stage(s) {unknown}; choose from {list(STAGES)}")
    return [execute_stage(params, s, folder) for s in STAGES if s in chosen]
