"""Execute the four stage notebooks headless with papermill, into `outputs/<run>/notebooks/`.

Each notebook gets three parameters, `params_path`, `run_name` and `rerun=True` (the stage runs);
everything else comes from the params file, so an executed notebook shows exactly which file drove
it. Once executed, the injected `rerun` line is turned to False with a comment saying so: the
executed notebook, opened in JupyterLab (`kit lab`) and run again, opens the artifacts this run
left instead of measuring or generating again.

Ctrl-C, SIGTERM and SIGHUP while a notebook runs are passed to its kernel as an interrupt, so
the stage in it saves its finished work and stops its servers before `kit run` stops; a kernel
that dies (killed, out of memory) is one message, not a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import nbformat
import papermill as pm
import papermill.iorw as pm_io
import papermill.parameterize as pm_params
import psutil
from jupyter_core.paths import jupyter_runtime_dir
from traitlets.config import Config

from kit.asyncrun import Terminated
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


SOCKET_PATH_MAX = 107
"""Bytes of a Unix socket's path (Linux's sun_path, less its terminating NUL)."""


def kernel_config() -> Config:
    """The stage kernels talk to papermill over IPC (Unix sockets in Jupyter's runtime folder, which
    only the user opens), not over TCP: ipykernel 7 warns on every kernel reached over TCP without
    CurveZMQ keys ("[IPKernelApp] WARNING ... TCP without encryption"), four times a `kit run`, and
    the user can do nothing about it. TCP where the runtime folder's path is too long for a socket."""
    longest = len(os.fsencode(jupyter_runtime_dir())) + len(
        "/kernel-00000000-0000-0000-0000-000000000000-ipc-65535"
    )
    return Config({"KernelManager": {"transport": "ipc" if longest <= SOCKET_PATH_MAX else "tcp"}})


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
    name = STAGES[stage]
    src = notebooks_dir() / f"{name}.ipynb"
    out = folder.notebook(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ[PROGRESS_ENV] = "text"  # inherited by the kernel: text bars, not frozen widgets
    try:
        with _signals_to_kernel() as received:
            pm.execute_notebook(
                str(src),
                str(out),
                cwd=str(src.parent),
                kernel_name="python3",
                progress_bar=False,
                stdout_file=sys.stdout,
                stderr_file=sys.stderr,
                parameters={"params_path": str(params.source_file), "run_name": params.run, "rerun": True},
                config=kernel_config(),
            )
    except pm.PapermillExecutionError as e:
        if received:
            raise _interrupt(received[0]) from None
        raise KitError(f"notebook {name} failed: {e.ename}: {e.evalue}\n(executed copy: {out})") from None
    except Exception as e:
        if type(e).__name__ != "DeadKernelError":  # nbclient's, raised through papermill
            raise
        raise KitError(
            f"the kernel running notebook {name} died ({e}): killed, or out of memory? Work the stage "
            f"finished is saved; rerun the same command to resume. (executed copy: {out})"
        ) from None
    if received:
        raise _interrupt(received[0])
    open_on_rerun(out)
    return out


MOVED_MODULES = {
    "kit.decide.adaptive": "kit.decide.measure.adaptive",
    "kit.decide.answers_check": "kit.decide.checks.answers",
    "kit.decide.apply": "kit.decide.choose.apply",
    "kit.decide.arm_status": "kit.decide.measure.arm_status",
    "kit.decide.backend_choice": "kit.decide.checks.settings_choice",
    "kit.decide.backends": "kit.decide.checks.settings_sweep",
    "kit.decide.decision": "kit.decide.choose.decision",
    "kit.decide.disturbance": "kit.decide.machine.disturbance",
    "kit.decide.forecast_check": "kit.decide.forecast.check",
    "kit.decide.forecast_history": "kit.decide.forecast.history",
    "kit.decide.forecast_inputs": "kit.decide.forecast.inputs",
    "kit.decide.gpu_watch": "kit.decide.machine.gpu_watch",
    "kit.decide.jobhours": "kit.decide.forecast.jobhours",
    "kit.decide.levels": "kit.decide.measure.tables",
    "kit.decide.measured": "kit.decide.choose.measured",
    "kit.decide.noise": "kit.decide.measure.noise",
    "kit.decide.pilot": "kit.decide.measure.pilot",
    "kit.decide.plots": "kit.decide.views.plots",
    "kit.decide.reasons": "kit.decide.choose.reasons",
    "kit.decide.sweep_journal": "kit.decide.measure.journal",
    "kit.decide.sweep_level": "kit.decide.measure.level",
    "kit.decide.sweep_servers": "kit.decide.measure.servers",
    "kit.decide.tailarm": "kit.decide.choose.tailarm",
    "kit.decide.verdict": "kit.decide.views.verdict",
    "kit.decide.view": "kit.decide.views.notebook",
    "kit.decide.whatif": "kit.decide.views.whatif",
    "kit.decide.whatif_model": "kit.decide.views.whatif_model",
    "kit.decide.worth": "kit.decide.views.worth",
}
"""Stage 2's modules as a kit before its subpackages named them, and where they are now: an executed
notebook of an older run imports them by the old name, and `open_on_rerun` (`kit lab`) writes the new
one, so the run opens and runs again. kit.decide.machine, kit.decide.forecast and kit.decide.sweep are not
here: those names are packages now (and no stage notebook ever imported them)."""
_OLD_IMPORT = re.compile(
    r"^(\s*(?:from|import)\s+)("
    + "|".join(map(re.escape, MOVED_MODULES))
    + r")(?=\s+import\b|\s+as\b|\s*,|\s*$)",
    re.M,
)


def moved_imports(source: str) -> str:
    """A code cell's imports of stage 2's modules under their old names, written with the new ones."""
    return _OLD_IMPORT.sub(lambda m: m.group(1) + MOVED_MODULES[m.group(2)], source)


REOPEN = "rerun = False  # kit run ran this with rerun = True; run again here, it opens the artifacts"


def open_on_rerun(notebook: Path) -> None:
    """Turn the `rerun = True` papermill injected into an executed notebook to False (with a comment):
    the notebook keeps its outputs, and running it again opens the run's artifacts (an older run's
    imports of stage 2's modules written as they are named now: `MOVED_MODULES`)."""
    book = nbformat.read(notebook, as_version=4)
    for cell in book.cells:
        if cell.get("cell_type") == "code":
            cell.source = moved_imports(cell.source)
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            lines = [REOPEN if line.strip() == "rerun = True" else line for line in cell.source.splitlines()]
            cell.source = "\n".join(lines)
    nbformat.write(book, notebook)


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


@contextlib.contextmanager
def _signals_to_kernel() -> Iterator[list[int]]:
    """While a notebook runs: SIGINT, SIGTERM and SIGHUP interrupt its kernel (the cell stops the
    way Ctrl-C stops it, saving finished work) and are listed in the yielded list."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    wanted = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    old = {sig: signal.getsignal(sig) for sig in wanted if signal.getsignal(sig) != signal.SIG_IGN}

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for kernel in _kernels():
            with contextlib.suppress(psutil.Error):
                kernel.send_signal(signal.SIGINT)

    for sig in old:
        signal.signal(sig, forward)
    try:
        yield received
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _kernels() -> list[psutil.Process]:
    """The Jupyter kernels this process started."""
    kids = psutil.Process().children(recursive=True)
    return [p for p in kids if "ipykernel_launcher" in " ".join(_cmdline(p))]


def _cmdline(p: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return p.cmdline()
    return []


def execute_all(params: RunParams, folder: RunFolder, stages: list[str] | None = None) -> list[Path]:
    """Execute the stage notebooks in order (all four by default)."""
    chosen = stages or list(STAGES)
    unknown = sorted(set(chosen) - set(STAGES))
    if unknown:
        raise KitError(f"unknown stage(s) {unknown}; choose from {list(STAGES)}")
    return [execute_stage(params, s, folder) for s in STAGES if s in chosen]


def prepare_lab(folder: RunFolder) -> Path:
    """The run's notebooks folder, ready to open in JupyterLab: every executed notebook set to open
    the artifacts when run again, and for a stage run from the CLI (no executed copy) the stage
    notebook with this run's saved params injected and `rerun = False`."""
    if not folder.params.exists():
        raise KitError(
            f"{folder.root} holds no params.yaml: pass the folder of a run (outputs/<run>), "
            "made by `kit run` or a stage command"
        )
    folder.notebooks.mkdir(parents=True, exist_ok=True)
    for name in STAGES.values():
        out = folder.notebook(name)
        if out.exists():
            open_on_rerun(out)
            continue
        book = pm_io.load_notebook_node(str(notebooks_dir() / f"{name}.ipynb"))
        values = {"params_path": str(folder.params.resolve()), "run_name": folder.root.name, "rerun": False}
        nbformat.write(pm_params.parameterize_notebook(book, values, kernel_name="python3"), out)
    return folder.notebooks
