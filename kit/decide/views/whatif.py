"""Notebook 02's what-if control: the cost model's speculative / plain ratio over concurrency for a
scenario a researcher sets by moving controls (accept length, draft length k, concurrency range,
context length, GPU) instead of editing YAML, the sweep's measured ratios fixed on the figure.

    from kit.decide.views.whatif import what_if
    w = what_if(folder)        # the run's own scenario first; a widget in a live kernel
    w.ladder, w.crossover      # the scenario the controls show now, for the next cell
    w.set(gpu="B200", accept_length=2.2)

The predictions are kit.decide.views.whatif_model's; this module draws them. As with kit.analyse.explore,
reports show the default state as static HTML and say the controls are live in JupyterLab.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from kit.columns import SPEC_K
from kit.decide.views.whatif_model import (
    COLUMNS,
    K_MAX,
    SCENARIO_KEYS,
    Prediction,
    RunBasis,
    WhatIfScenario,
    caption_text,
    context_label,
    predict_scenario,
)
from kit.display import figure_image, image_html, in_live_kernel, live_bundle
from kit.errors import KitError
from kit.runfolder import RunFolder

if TYPE_CHECKING:
    from ipywidgets import Dropdown, FloatSlider, IntSlider, SelectionRangeSlider, SelectionSlider


class Controls(TypedDict, total=False):
    """The live view's controls (`WhatIf.build_widget`; none before it is built)."""

    accept: FloatSlider
    k: IntSlider
    concurrency: SelectionRangeSlider
    context: SelectionSlider
    gpu: Dropdown


LIVE_NOTE = (
    "The controls (accept length, draft length k, concurrency range, context length, GPU) are live when "
    "this notebook runs in JupyterLab; this page shows the run's own scenario."
)


def draw(basis: RunBasis, p: Prediction, ax: Any = None) -> Any:
    """Ratio vs concurrency (log2 axis) for the scenario, shaded where the truth lay given the model's
    error on held-out published tables (kit.decide.costmodel.validation), the 1.0 line, the crossover
    marked, the sweep's measured ratios as points (the same whatever the scenario)."""
    s, m = p.scenario, basis.measured
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    colors = sns.color_palette(n_colors=max([K_MAX, s.k, *m.spec_k]) + 1)
    t = p.ladder.dropna(subset=["ratio"])
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    label = f"predicted {basis.name} k={s.k}, accept length {s.accept_length:.2f}"
    ax.plot(t.concurrency, t.ratio, "o-", ms=3, color=colors[s.k], label=label)
    low, high = zip(*(p.band.around(r) for r in t.ratio), strict=True) if len(t) else ((), ())
    outside = " (scenario outside what it was checked on)" if p.band.outside else ""
    band = f"the model's {p.band.label}{outside}"
    ax.fill_between(t.concurrency, low, high, color=colors[s.k], alpha=0.15, lw=0, label=band)
    if p.crossover:
        ax.axvline(p.crossover, color=colors[s.k], ls=":", lw=1.2)
        left = p.crossover**2 > s.concurrency[0] * s.concurrency[1]  # right half: text to the left
        ax.annotate(
            f"wins up to {p.crossover}", (p.crossover, 0.97), xycoords=("data", "axes fraction"),
            xytext=(-4 if left else 4, 0), textcoords="offset points", ha="right" if left else "left",
            va="top", color=colors[s.k],
        )  # fmt: skip
    full = _memory_full(p.ladder, basis.work.dp_size)
    if full:
        label = f"memory full: {full[1]} sequences per replica (plain)"
        ax.axvline(full[0], color="grey", ls="-.", lw=0.8, label=label)
    for k, g in m.groupby(SPEC_K):
        label = f"measured {basis.name} k={int(k)} ({basis.run_hw.name})"
        ax.scatter(g.concurrency, g.ratio, s=36, marker="D", color=colors[int(k)], ec="black", label=label)
    _axes(ax, p, m, t)
    ax.set_title(f"{s.gpu}: predicted {basis.name} / plain (below 1: plain decoding wins)")
    return ax


def _memory_full(ladder: pd.DataFrame, dp: int) -> tuple[int, int] | None:
    """(concurrency, sequences per replica) where plain decoding's memory is full, if in the range:
    beyond it requests queue and the curves flatten."""
    running = ladder.running_plain.dropna()
    if running.empty or ladder.concurrency.max() <= dp * running.max():
        return None
    return int(dp * running.max()), int(running.max())


def _axes(ax: Any, p: Prediction, measured: pd.DataFrame, shown: pd.DataFrame) -> None:
    """Log2 concurrency over the range and the measured points; ratio from 0 over both."""
    lo = min([p.scenario.concurrency[0], *measured.concurrency])
    hi = max([p.scenario.concurrency[1], *measured.concurrency])
    ticks = [2**i for i in range(hi.bit_length() + 1) if lo <= 2**i <= hi]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(c) for c in ticks])
    ax.minorticks_off()
    ax.set_xlim(lo / 1.3, hi * 1.3)
    top = max([1.5, *(1.1 * shown.ratio.map(lambda r: p.band.around(r)[1])), *(1.1 * measured.ratio)])
    ax.set_ylim(0, top)
    ax.set(xlabel="concurrent requests", ylabel="speculative / plain output tokens/s (x)")
    ax.legend(fontsize="small", loc="best")


def figure_alt(basis: RunBasis, p: Prediction) -> str:
    """What the figure shows, in words and numbers (the caption, the predicted ratio at powers of two)."""
    t = p.ladder.dropna(subset=["ratio"])
    t = t[(t.concurrency & (t.concurrency - 1)) == 0]  # powers of two
    pred = ", ".join(f"{r:.2f}x at {int(c)}" for c, r in zip(t.concurrency, t.ratio, strict=True))
    meas = ", ".join(
        f"k={int(r.spec_k)} {r.ratio:.2f}x at {int(r.concurrency)}" for r in basis.measured.itertuples()
    )
    return (
        f"Predicted speculative / plain output tokens/s over concurrency ({caption_text(basis, p)}). "
        f"Predicted: {pred or 'nothing fits'}. Measured: {meas or 'none'}."
    )


class WhatIf:
    """The what-if control of one run: the scenario the controls show (`scenario`, `ladder`,
    `crossover`, `caption`), `html` the run's own scenario as static HTML, `widget` the live view or
    None; a run with nothing to predict carries only `message`."""

    def __init__(self, basis: RunBasis | None, message: str = "") -> None:
        self.basis, self.message = basis, message
        self.widget: Any = None
        self.prediction: Prediction | None = None
        self.caption, self.image = message, None
        self._controls = Controls()
        self._setting = False
        if basis is None:
            self.html = f"<p class='kit-whatif-unavailable'><i>{html.escape(message)}</i></p>"
            return
        self._draw(predict_scenario(basis))
        self.html = (
            f"<div class='kit-whatif kit-whatif-static'>{image_html(self.image)}<p>{self.caption_html}</p>"
            f"<p class='kit-whatif-note'><i>{html.escape(LIVE_NOTE)}</i></p></div>"
        )

    @property
    def ladder(self) -> pd.DataFrame:
        return self.prediction.ladder if self.prediction else pd.DataFrame(columns=COLUMNS)

    @property
    def crossover(self) -> int | None:
        return self.prediction.crossover if self.prediction else None

    @property
    def scenario(self) -> WhatIfScenario | None:
        return self.prediction.scenario if self.prediction else None

    @property
    def caption_html(self) -> str:
        return f'<span class="kit-whatif-caption">{html.escape(self.caption)}</span>'

    def set(self, **changes: Any) -> Prediction:
        """Change the scenario (gpu, accept_length or acceptance, k, concurrency, context; the rest
        stays as it is), re-draw, and return the prediction; the widget's controls follow where they
        can show the value (a concurrency range of powers of two, a context the slider offers)."""
        if self.basis is None or self.prediction is None:
            raise KitError(self.message)
        unknown = set(changes) - {*SCENARIO_KEYS, "acceptance"}
        if unknown:
            raise KitError(f"what-if: unknown setting(s) {sorted(unknown)}; use {', '.join(SCENARIO_KEYS)}")
        current = vars(self.prediction.scenario)
        if "acceptance" in changes:
            current = current | {"accept_length": None}
        p = predict_scenario(self.basis, **(current | changes))
        self._draw(p)
        return p

    def _draw(self, p: Prediction) -> None:
        """Keep the prediction, its caption and figure; push them to the widget when there is one."""

        assert self.basis is not None
        self.prediction, self.caption = p, caption_text(self.basis, p)
        self.image = figure_image(draw(self.basis, p).figure, figure_alt(self.basis, p))
        self._show()

    def _show(self) -> None:
        """Push the scenario into the controls (without re-drawing), the caption and the figure."""
        if self.widget is None or self.scenario is None:
            return
        s, c = self.scenario, self._controls
        self._setting = True
        try:
            c["k"].max = max(c["k"].max, s.k)
            c["k"].value = s.k
            c["accept"].max = s.k + 1.0
            c["accept"].value = s.accept_length
            c["gpu"].value = s.gpu
            if set(s.concurrency) <= {v for _, v in c["concurrency"].options}:
                c["concurrency"].value = s.concurrency
            if s.context in {v for _, v in c["context"].options}:
                c["context"].value = s.context
        finally:
            self._setting = False
        self._caption(self.caption_html)
        out = self.widget.children[-1]
        out.outputs = ()  # clears in a live kernel and outside one (Output.clear_output needs a kernel)
        out.append_display_data(self.image)

    def _caption(self, value: str) -> None:
        self.widget.children[-2].value = value

    def build_widget(self) -> Any:
        """The live view: sliders for accept length, k, concurrency range and context, a GPU Dropdown,
        the caption and an Output with the figure; each change re-draws."""
        import ipywidgets as w

        assert self.basis is not None and self.scenario is not None
        s, b = self.scenario, self.basis
        top = max(s.concurrency[1], b.default.concurrency[1])
        style = {"description_width": "initial"}
        powers = [(str(2**i), 2**i) for i in range(top.bit_length())]
        controls = Controls(
            accept=w.FloatSlider(
                value=s.accept_length,
                min=1.0,
                max=s.k + 1.0,
                step=0.05,
                readout_format=".2f",
                description="accept length",
            ),
            k=w.IntSlider(value=s.k, min=1, max=max(K_MAX, s.k), description="draft length k"),
            concurrency=w.SelectionRangeSlider(
                options=powers, value=s.concurrency, description="concurrency"
            ),
            context=w.SelectionSlider(
                options=[(context_label(c), c) for c in b.contexts], value=s.context, description="context"
            ),
            gpu=w.Dropdown(options=b.gpus, value=s.gpu, description="GPU"),
        )
        for name, control in controls.items():
            control.style, control.continuous_update = style, False
            control.add_class(f"kit-whatif-{name}")
            control.observe(self._changed, names="value")
        self._controls = controls
        rows = [
            w.HBox([controls["accept"], controls["k"], controls["gpu"]]),
            w.HBox([controls["concurrency"], controls["context"]]),
        ]
        box = w.VBox([*rows, w.HTML(), w.Output()])
        box.add_class("kit-whatif")
        self.widget = box
        self._show()
        return box

    def _changed(self, _: Any = None) -> None:
        """A control moved: predict and re-draw; a scenario the model rejects is said in the caption."""
        if self._setting:
            return
        c = self._controls
        try:
            self.set(
                accept_length=c["accept"].value,
                k=c["k"].value,
                concurrency=tuple(c["concurrency"].value),
                context=c["context"].value,
                gpu=c["gpu"].value,
            )
        except KitError as e:
            self._caption(
                f'<span class="kit-whatif-caption">cannot predict this: {html.escape(str(e))}</span>'
            )

    def _repr_html_(self) -> str:
        return self.html

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return live_bundle(self.html, f"<WhatIf: {self.caption}>", self.widget, **kwargs)


def _why(e: Exception) -> str:
    if isinstance(e, KeyError):
        return f"decision.json has no {e.args[0]!r}: rerun stage 2 (kit decide) with this kit"
    text = str(e).strip().splitlines()
    first = text[0] if text else type(e).__name__
    return first if isinstance(e, KitError) else f"{type(e).__name__}: {first}"


def what_if(folder: RunFolder | str | Path, interactive: bool | None = None) -> WhatIf:
    """The what-if control for a run folder: its own scenario first (decision.json, params.yaml), a
    widget in a live kernel with ipywidgets (interactive=None), static HTML everywhere; a run with
    nothing to predict (no decision, no model config) gives a one-line message instead."""

    folder = folder if isinstance(folder, RunFolder) else RunFolder(Path(folder))
    try:
        whatif = WhatIf(RunBasis.from_folder(folder))
    except (KitError, OSError, ValueError, KeyError, TypeError) as e:
        return WhatIf(None, f"What if: nothing to predict for run {folder.root.name} ({_why(e)}).")
    if interactive is None:
        interactive = in_live_kernel()
    if interactive:
        try:
            whatif.build_widget()
        except ImportError:
            pass
    return whatif
