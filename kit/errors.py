"""The kit's own exceptions: each message says what is wrong and what to do."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path


class KitError(Exception):
    """Base of every error a user can meet; the CLI prints its message without a traceback."""


class ParamsError(KitError):
    """A params file is missing, unreadable, or holds an unknown key or a wrong value."""


class ModelDirError(KitError):
    """The model directory is missing or is not a Hugging Face model directory."""


class EngineError(KitError):
    """An inference server failed to start, died, or answered in a way the kit cannot use."""


class EngineStartError(EngineError):
    """The server did not become ready; the message carries the tail of its log."""


class DataError(KitError):
    """A dataset could not be loaded or a row does not fit its adapter's schema."""


class RunFolderError(KitError):
    """The run folder holds work that the requested action would overwrite or mix with."""


class ExportError(KitError):
    """A run cannot be exported as asked (incomplete, an output folder in the way, a bad option)."""


class CostModelError(KitError):
    """Inputs to the cost model are out of range (acceptance, accept length, batch beyond memory...)."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""The errno values of a full disk (or a quota): turned into one message, not a traceback."""


def disk_full_message(e: OSError, root: Path) -> str:
    where = e.filename or f"in {root}"
    try:
        free = f"{shutil.disk_usage(root).free / 2**20:.0f} MiB free now"
    except OSError:
        free = "free space unknown"
    return (
        f"the disk is full ({os.strerror(e.errno or errno.ENOSPC)}, writing {where}; {free}). Rows "
        "written before are kept: free some space (or move the run with output_dir) and rerun the same "
        "command to resume."
    )
