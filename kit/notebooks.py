"""Execute the four stage notebooks headless with papermill, into `outputs/<run>/notebooks/`.

Each notebook gets two parameters, `params_path` and `run_name`; everything else comes from
the params file, so an executed notebook shows exactly which file drove it.

Ctrl-C, SIGTERM and SIGHUP while a notebook runs are passed to its kernel as an interrupt, so
the stage in it saves its finished work and stops its servers before `kit run` stops; a kernel
that dies (killed, out of memory) is one message, not a traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil

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
                parameters={"params_path": str(params.source_file), "run_name": params.run},
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
    return out


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
