"""Notebook 04's explorer: filters by source, quality flag and finish reason that re-draw the length
and finish-reason figures and a sample list for the rows they select, without editing a cell.

    from kit.analyse.explore import explore
    explorer = explore(rows)         # rows: the RunData stage 4 read (analysis.data)
    explorer.selection               # the facts of the rows the filters select, for the next cell

It works on each row's facts and flags (`RunData.df`, `RunData.flags`), never on every row's text:
only the rows of the sample list are read back from the shards (`RunData.rows`), so a run of
millions of rows costs no more memory than stage 4 itself. As with kit.analyse.browser, a live
kernel with ipywidgets gets a widget (three Dropdowns, a caption, an Output re-drawn on each change);
reports show the default state (every row) as static HTML: its caption and a note, since notebook 04
shows that state's figures and samples in sections of their own (`images` and `samples` hold them).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kit.analyse import plots
from kit.analyse.browser import static_table
from kit.analyse.run import RunData
from kit.analyse.tables import distribution
from kit.display import figure_image, image_html, in_live_kernel, live_bundle, number, percent
from kit.errors import KitError

if TYPE_CHECKING:
    from ipywidgets import Dropdown

ALL = "all"
"""No filter on source or finish reason."""
ANY_ROW = "any row"
"""No filter on flags."""
ANY_FLAG = "any flag"
"""Rows with at least one quality flag."""
FILTERS = ("source", "flag", "finish")
DEFAULTS = {"source": ALL, "flag": ANY_ROW, "finish": ALL}
NO_MATCH = "no rows match"
LIVE_NOTE = (
    "The filters (source, flag, finish reason) are live when this notebook runs in JupyterLab, where "
    "they redraw the length and finish-reason figures and the sample list for the rows they select. "
    "With every row selected, as on this page, those are the figures and samples it shows in their "
    "own sections: they are not drawn twice."
)
LENGTH = "completion_tokens"
"""The column of the length distribution figure."""


def selection_mask(
    df: pd.DataFrame, flags: pd.DataFrame, source: str = ALL, flag: str = ANY_ROW, finish: str = ALL
) -> np.ndarray:
    """True for the rows of `df` the three filters keep (`flags` aligned with `df` row for row)."""
    mask = np.ones(len(df), dtype=bool)
    if source != ALL:
        mask &= df["source"].eq(source).to_numpy(dtype=bool)
    if finish != ALL:
        mask &= df["finish_reason"].eq(finish).to_numpy(dtype=bool)
    if flag == ANY_FLAG:
        mask &= flags.to_numpy(dtype=bool).any(axis=1) if len(flags.columns) else False
    elif flag != ANY_ROW:
        mask &= flags[flag].to_numpy(dtype=bool)
    return mask


def caption_text(shown: int, total: int, source: str, flag: str, finish: str) -> str:
    """'412 of 1,000 rows · source=gsm8k · flag=refusal · finish=length'."""
    return f"{shown:,} of {total:,} rows · source={source} · flag={flag} · finish={finish}"


def filter_options(df: pd.DataFrame, flags: pd.DataFrame) -> dict[str, list[tuple[str, str]]]:
    """Each filter's choices as (label with its rows in the whole run, value): sources and finish
    reasons present in the run, sorted; every flag column, in its order."""

    def present(column: str) -> list[tuple[str, str]]:
        counts = df[column].astype(str).value_counts()
        return [(f"{k} ({v:,})", str(k)) for k, v in sorted(counts.items()) if v]

    table = flags.to_numpy(dtype=bool)
    flagged = int(table.any(axis=1).sum()) if table.shape[1] else 0
    everything = f"({len(df):,})"
    return {
        "source": [(f"{ALL} {everything}", ALL), *present("source")],
        "flag": [
            (f"{ANY_ROW} {everything}", ANY_ROW),
            (f"{ANY_FLAG} ({flagged:,})", ANY_FLAG),
            *[(f"{f} ({int(flags[f].sum()):,})", str(f)) for f in flags.columns],
        ],
        "finish": [(f"{ALL} {everything}", ALL), *present("finish_reason")],
    }


def _plot_frame(selection: pd.DataFrame) -> pd.DataFrame:
    """The columns the figures draw, categories absent from the selection dropped (no empty bars)."""
    frame = selection[["source", "finish_reason", LENGTH]]
    cats = [c for c in ("source", "finish_reason") if isinstance(frame[c].dtype, pd.CategoricalDtype)]
    return frame.assign(**{c: frame[c].cat.remove_unused_categories() for c in cats})


def _quantiles(values: pd.Series) -> str:
    d = distribution(values)
    return "none" if d["p50"] is None else ", ".join(f"{q} {number(d[q])}" for q in ("p50", "p90", "max"))


def length_alt(frame: pd.DataFrame) -> str:
    """Alt text of the length figure: p50, p90 and max completion tokens per source of the selection."""
    per = "; ".join(f"{s}: {_quantiles(v)}" for s, v in frame.groupby("source", observed=True)[LENGTH])
    return f"Histogram: completion tokens per request, per source, of the {len(frame):,} rows selected; {per}"


def finish_alt(frame: pd.DataFrame) -> str:
    """Alt text of the finish-reason figure: the share of each finish reason per source."""
    parts = []
    for s, reasons in frame.groupby("source", observed=True)["finish_reason"]:
        shares = reasons.value_counts(normalize=True)
        parts.append(f"{s}: " + ", ".join(f"{r} {percent(v)}" for r, v in shares.items() if v))
    return "Bars: share of rows per finish reason and source, of the rows selected. " + "; ".join(parts)


def selection_figures(selection: pd.DataFrame) -> list[Any]:
    """The length distribution and the finish-reason (truncation) figure of the selected rows, as
    PNG images with alt text (kit.display.figure_image); a figure with nothing to draw is left out."""
    frame = _plot_frame(selection)
    drawn = [
        (plots.length_distribution(frame, LENGTH), length_alt),
        (plots.finish_reasons(frame), finish_alt),
    ]
    return [figure_image(fig, alt(frame)) for fig, alt in drawn if fig is not None]


def no_match_html() -> str:
    """What an empty selection shows instead of empty figures."""
    return (
        f"<p class='kit-explore-empty'><i>{NO_MATCH}</i>: widen a filter "
        f"(source {ALL}, flag {ANY_ROW}, finish {ALL})</p>"
    )


def _aligned_flags(data: RunData) -> pd.DataFrame:
    if data.flags.index.equals(data.df.index):
        return data.flags
    return data.flags.reindex(data.df.index, fill_value=False)


class RunExplorer:
    """Filters over a run's rows and what they select: `selection` (the facts of the selected rows),
    `caption`, `images` (the two figures) and `samples` (an HTML table of up to `n` of the selected
    rows, flagged first); `html` the default state as static HTML, `widget` the live view or None."""

    def __init__(self, data: RunData, n: int = 20) -> None:
        self.data, self.n = data, n
        self.flags = _aligned_flags(data)
        self.options = filter_options(data.df, self.flags)
        self.filters = dict(DEFAULTS)
        self.widget: Any = None
        self._controls: dict[str, Dropdown] = {}  # the live view's filters (build_widget)
        self._setting = False
        self.filter()
        self.html = (
            f"<div class='kit-explore'><p>{self.caption_html}</p>"
            f"<p class='kit-explore-note'>{html.escape(LIVE_NOTE)}</p></div>"
        )
        """The static view (reports, headless runs): the default state selects every row, whose length
        and finish-reason figures and samples notebook 04 shows in its Figures and Samples sections;
        drawn here too, a report showed each twice."""

    @property
    def caption_html(self) -> str:
        return f'<span class="kit-explore-caption">{html.escape(self.caption)}</span>'

    @property
    def body_html(self) -> str:
        """The figures and the sample list of the selection as HTML, or the no-match message."""
        if self.selection.empty:
            return no_match_html()
        return "".join(image_html(i) for i in self.images) + self.samples

    def filter(self, source: str = ALL, flag: str = ANY_ROW, finish: str = ALL) -> pd.DataFrame:
        """Set the three filters (the widget's Dropdowns follow), re-draw, and return `selection`."""
        wanted = {"source": source, "flag": flag, "finish": finish}
        for key, value in wanted.items():
            choices = [v for _, v in self.options[key]]
            if value not in choices:
                raise KitError(f"explore: {key}={value!r} is not in this run; pick one of {choices}")
        self._setting = True
        try:
            for key, control in self._controls.items():
                control.value = wanted[key]
        finally:
            self._setting = False
        self._draw(wanted)
        return self.selection

    def _draw(self, wanted: dict[str, str]) -> None:
        """Select the rows, re-draw the figures and the sample list (reading only the rows it shows)."""
        self.filters = dict(wanted)
        df = self.data.df
        mask = selection_mask(df, self.flags, **wanted)
        self.selection = df if mask.all() else df[mask]
        self.caption = caption_text(len(self.selection), len(df), **wanted)
        self.images, self.samples = [], ""
        if not self.selection.empty:
            self.images = selection_figures(self.selection)
            flags = self.flags if mask.all() else self.flags[mask]
            self.samples = static_table(self.selection, flags, self.n, self.data.rows)
        self._show()

    def _show(self) -> None:
        """Push the caption, figures and samples into the widget, when there is one."""
        if self.widget is None:
            return
        from IPython.display import HTML

        caption, out = self.widget.children[1:]
        caption.value = self.caption_html
        out.outputs = ()  # clears in a live kernel and outside one (Output.clear_output needs a kernel)
        for image in self.images:
            out.append_display_data(image)
        out.append_display_data(HTML(self.samples if not self.selection.empty else no_match_html()))

    def build_widget(self) -> Any:
        """The live view: three Dropdowns, the caption and an Output, showing the current filters."""
        import ipywidgets as w

        for key in FILTERS:
            control = w.Dropdown(options=self.options[key], value=self.filters[key], description=key)
            control.add_class(f"kit-explore-{key}")
            control.observe(self._changed, names="value")
            self._controls[key] = control
        box = w.VBox([w.HBox(list(self._controls.values())), w.HTML(), w.Output()])
        box.add_class("kit-explore")
        self.widget = box
        self._show()
        return box

    def _changed(self, _: Any = None) -> None:
        if not self._setting:
            self._draw({key: control.value for key, control in self._controls.items()})

    def _repr_html_(self) -> str:
        return self.html

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return live_bundle(self.html, f"<RunExplorer: {self.caption}>", self.widget, **kwargs)


def explore(data: RunData, n: int = 20, interactive: bool | None = None) -> RunExplorer:
    """Filters by source, flag and finish reason over a run as stage 4 read it (`analysis.data`),
    re-drawing the length and finish-reason figures and up to `n` sample rows (flagged first).

    interactive=None: a widget when running in a live kernel with ipywidgets; the default state
    (every row) is always kept as static HTML for reports and headless runs.
    """
    if not isinstance(data, RunData):
        raise KitError(
            f"explore takes the RunData stage 4 read (analysis.data, or read_run(folder)), "
            f"not a {type(data).__name__}"
        )
    explorer = RunExplorer(data, n)
    if interactive is None:
        interactive = in_live_kernel()
    if interactive and len(data.df):
        try:
            explorer.build_widget()
        except ImportError:
            pass
    return explorer
