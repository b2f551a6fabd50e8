"""Progress bars: a widget in JupyterLab, plain text in the terminal and in headless notebook runs.

`kit run` executes the notebooks through papermill with KIT_PROGRESS=text: a widget there would be
saved in the executed notebook in its first state, showing 0%; text lines on stderr show the last
state instead, and papermill echoes them to the terminal running `kit run`. The HTML report
(kit.report) leaves every progress-bar frame out and keeps the other stderr lines as messages.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "KIT_PROGRESS"


def progress(*args: Any, **kwargs: Any) -> Any:
    """A tqdm bar of the right kind for where the kit runs (same arguments as tqdm)."""
    if os.environ.get(ENV) == "text":
        from tqdm.std import tqdm

        kwargs.setdefault("mininterval", 10.0)
    else:
        from tqdm.auto import tqdm
    return tqdm(*args, **kwargs)
