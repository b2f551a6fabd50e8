"""Progress bars: a widget in JupyterLab, plain text in the terminal and in headless notebook runs.

`kit run` executes the notebooks through papermill with KIT_PROGRESS=text: a widget there would be
saved in the executed notebook in its first state, showing 0%; text lines on stderr show the last
state instead, and papermill echoes them to the terminal running `kit run`. The HTML report
(kit.report) leaves every progress-bar frame out and keeps the other stderr lines as messages.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

ENV = "KIT_PROGRESS"


class SafeStream:
    """stderr for progress bars, such that a closed pipe (a dropped `ssh`, a log reader that quit)
    never stops the work: the first write that fails with EPIPE (or on a closed file) turns every
    later one into nothing."""

    def __init__(self, stream: Any = None) -> None:
        self._stream = stream
        self.broken = False

    @property
    def stream(self) -> Any:
        return self._stream if self._stream is not None else sys.stderr

    def write(self, text: str) -> int:
        if not self.broken:
            self._guarded(lambda: self.stream.write(text))
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            self._guarded(self.stream.flush)

    def _guarded(self, op: Any) -> None:
        try:
            op()
        except (BrokenPipeError, ValueError):  # ValueError: the file is closed
            self.broken = True
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            self.broken = True

    def isatty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def progress(*args: Any, **kwargs: Any) -> Any:
    """A tqdm bar of the right kind for where the kit runs (same arguments as tqdm)."""
    if os.environ.get(ENV) == "text":
        from tqdm.std import tqdm

        kwargs.setdefault("mininterval", 10.0)
    else:
        from tqdm.auto import tqdm
    kwargs.setdefault("file", SafeStream())
    return tqdm(*args, **kwargs)
