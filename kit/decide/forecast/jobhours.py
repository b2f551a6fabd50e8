"""Notebook 02's job in hours: stage 2's forecast (kit.decide.forecast.job) for this plan, or for another
number of prompts of the same mix on another number of replicas, so a 2M-prompt job is sized from a
2K-prompt pilot run.

    hours = job_in_hours(folder)              # a widget in a live kernel, a table everywhere
    hours.set(requests=2_000_000, replicas=8) # the Forecast; the view follows
    hours.forecast.sentence

Same model as decision.json's forecast, from the same inputs (the plan's sources and prompt lengths,
the pilot's answers and speed, the sweep's ladders, the sweep's server start-up); more requests than
the plan holds are drawn from its mix. GPU-hours count every replica's GPUs for the whole wall time
(none are said for a run on a CPU).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from kit.artifacts import Forecast
from kit.decide.choose.decision import speculation_label
from kit.decide.forecast.inputs import ForecastInputs, forecast_inputs
from kit.display import hours, in_live_kernel, tok_s
from kit.errors import KitError
from kit.params import saved_params
from kit.runfolder import RunFolder

MAX_REPLICAS = 64


class JobHours:
    """The forecast shown (`forecast`), its table as HTML (`html`), the live `widget` or None; a run
    without a forecast carries only `message`."""

    def __init__(self, inputs: ForecastInputs | None, message: str = "") -> None:
        self.inputs, self.message = inputs, message
        self.widget: Any = None
        self.forecast: Forecast | None = inputs.forecast() if inputs is not None else None
        if inputs is not None and self.forecast is None:
            self.message = "no arm has a measured or predicted throughput to forecast from"

    def set(self, requests: int | None = None, replicas: int | None = None) -> Forecast:
        """The forecast for `requests` requests of this plan's mix on `replicas` replicas (each left
        as it is when not given)."""
        if self.inputs is None or self.forecast is None:
            raise KitError(self.message)
        requests = self.forecast.requests if requests is None else requests
        replicas = self.forecast.replicas if replicas is None else replicas
        if requests < 1 or replicas < 1:
            raise KitError(f"the job needs at least one request and one replica (got {requests}, {replicas})")
        forecast = self.inputs.forecast(requests, replicas)
        assert forecast is not None
        self.forecast = forecast
        if self.widget is not None:
            self.widget.children[-1].value = self.html
        return forecast

    @property
    def html(self) -> str:
        if self.forecast is None:
            return f"<p><i>{html.escape(self.message)}</i></p>"
        f = self.forecast
        gpu_hours = (lambda a: f"<td>{a.gpu_hours:,.2f}</td>") if f.on_gpu else (lambda a: "")
        rows = "".join(
            f"<tr><td>{html.escape(a.label)}</td><td>{hours(a.wall_s)}</td>"
            f"<td>{hours(a.wall_lo_s)} to {hours(a.wall_hi_s)}</td>{gpu_hours(a)}"
            f"<td>{hours(a.startup_s)}</td><td>{hours(a.tail_s)}</td><td>{tok_s(a.full_load_tok_s)}</td></tr>"
            for a in f.arms
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in f.notes)
        gpu_head = "<th>GPU-hours</th>" if f.on_gpu else ""
        return (
            f"<p>{html.escape(f.sentence)}.</p><table><tr><th>arm</th><th>wall time</th><th>interval</th>"
            f"{gpu_head}<th>of it, the server's start</th><th>of it, the tail</th>"
            f"<th>output at full load</th></tr>{rows}</table><ul>{notes}</ul>"
        )

    def _repr_html_(self) -> str:
        return self.html

    def build_widget(self) -> Any:
        """Prompts and replicas as controls; the table re-drawn on each change (ipywidgets)."""
        import ipywidgets as w

        if self.forecast is None:
            return None
        requests = w.BoundedIntText(value=self.forecast.requests, min=1, max=10**9, description="requests")
        replicas = w.IntSlider(value=self.forecast.replicas, min=1, max=MAX_REPLICAS, description="replicas")
        out = w.HTML(self.html)

        def changed(_: Any) -> None:
            self.set(requests.value, replicas.value)

        requests.observe(changed, names="value")
        replicas.observe(changed, names="value")
        self.widget = w.VBox([w.HBox([requests, replicas]), out])
        return self.widget

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        display(self.widget if self.widget is not None else HTML(self.html))


def job_in_hours(folder: RunFolder | str | Path, interactive: bool | None = None) -> JobHours:
    """The job in hours for a run folder whose stage 2 made a forecast; a one-line message otherwise."""
    folder = folder if isinstance(folder, RunFolder) else RunFolder(Path(folder))
    params = saved_params(folder.params)
    decision = folder.read_decision(lenient=True)
    if params is None or decision is None or decision.forecast is None:
        return JobHours(
            None, f"No forecast for run {folder.root.name}: stage 2 (kit decide) with this kit makes one."
        )
    made = decision.forecast
    start = [made.arms[0].startup_s] if made.arms else None
    try:
        inputs = forecast_inputs(params, folder, decision, speculation_label(params), made.pilot, start)
    except (KitError, OSError, ValueError, KeyError) as e:
        return JobHours(None, f"No forecast for run {folder.root.name}: {e}")
    view = JobHours(inputs)
    if interactive is None:
        interactive = in_live_kernel()
    if interactive:
        try:
            view.build_widget()
        except ImportError:
            pass
    return view
