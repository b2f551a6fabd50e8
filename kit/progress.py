"""Progress bars: a widget in JupyterLab, plain text in the terminal and in headless notebook runs,
and a line now and then in a log that is not a terminal.

`kit run` executes the notebooks through papermill with KIT_PROGRESS=text: a widget there would be
saved in the executed notebook in its first state, showing 0%; text lines on stderr show the last
state instead, and papermill echoes them to the terminal running `kit run`. The HTML report
(kit.report) leaves every progress-bar frame out and keeps the other stderr lines as messages.
Outside a notebook, where stderr is not a terminal (`kit generate p.yaml 2> log`, a scheduler's
log), a bar redrawn in place would write a carriage-return frame ten times a second into the file:
there each redraw is a line of its own (`PlainLines`), at most one per `LOG_INTERVAL_S`.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

ENV = "KIT_PROGRESS"
TEXT_INTERVAL_S = 10.0
"""Seconds between redraws of a bar under KIT_PROGRESS=text."""
LOG_INTERVAL_S = 30.0
"""Seconds between the lines of a bar written to a file or pipe."""


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


class PlainLines:
    """A file for tqdm that writes each redraw as a line of its own: the carriage return that would
    draw it over the last one, and the blank frames that clear it, are left out."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        for frame in text.replace("\n", "\r").split("\r"):
            if frame.strip():
                self.stream.write(frame.rstrip() + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (where tqdm.auto draws a widget)."""
    return "ipykernel.zmqshell" in sys.modules


def progress(*args: Any, **kwargs: Any) -> Any:
    """A tqdm bar of the right kind for where the kit runs (same arguments as tqdm)."""
    stream = kwargs.setdefault("file", SafeStream())
    if os.environ.get(ENV) == "text":
        from tqdm.std import tqdm

        kwargs.setdefault("mininterval", TEXT_INTERVAL_S)
    elif in_notebook() or _isatty(stream):
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm

        kwargs["file"] = PlainLines(stream)
        kwargs.setdefault("mininterval", LOG_INTERVAL_S)
        kwargs.setdefault("maxinterval", LOG_INTERVAL_S)
        kwargs.setdefault("ascii", True)
    return tqdm(*args, **kwargs)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
