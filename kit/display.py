"""What a reader sees: tables with human column names and units, rounded numbers, no index, long
tables folded; figures as PNG with alt text. Shared by the four stage notebooks and the index.

    from kit.columns import OUTPUT_TOK_S
    from kit.display import table, figure_image
    display(table(df, "Measured sweep", columns={OUTPUT_TOK_S: "output tok/s"}))
    display(figure_image(fig, "Output tokens/s per arm over concurrency"))
"""

from __future__ import annotations

import base64
import html
import io
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kit.columns import OUTPUT_TOK_S, SPEC_K

GIB = 1024**3
FOLD_AFTER = 12
"""Tables longer than this are folded into a <details> block with a one-line summary."""
MISSING = "–"

NAMES = {
    "arm": "arm",
    SPEC_K: "draft length k",
    "concurrency": "concurrency",
    OUTPUT_TOK_S: "output tok/s",
    "predicted_tok_s": "predicted tok/s",
    "measured_tok_s": "measured tok/s",
    "error_pct": "prediction error",
    "latency_p50_s": "latency p50 (s)",
    "accept_length": "accept length",
    "mem_fraction_static": "memory fraction for weights + KV",
    "max_running_requests": "max running requests",
    "cuda_graph_max_bs": "CUDA graph max batch",
    "dp_size": "data-parallel replicas",
    "tp_size": "tensor-parallel GPUs",
    "attention_backend": "attention backend",
    "sampling_backend": "sampling backend",
    "client_concurrency": "client concurrency",
    "measured_at_concurrency": "best measured at concurrency",
    "max_running_requests_source": "max running requests, because",
    "speculative": "speculative decoding",
    "mem_max_running": "sequences memory holds",
    "compute_bound": "compute-bound",
    "algorithm": "speculative algorithm",
    "eagle_topk": "EAGLE top-k",
    "num_draft_tokens": "draft tokens per step",
}
"""Human names of the raw keys the kit writes (others: underscores become spaces)."""


def human_name(key: str) -> str:
    """A column or setting name a reader understands: `spec_k` -> `draft length k`."""
    if key in NAMES:
        return NAMES[key]
    for suffix, unit in (("_tok_s", " tok/s"), ("_bytes", " (GiB)"), ("_pct", " (%)"), ("_s", " (s)")):
        if key.endswith(suffix):
            return key[: -len(suffix)].replace("_", " ") + unit
    return key.replace("_", " ")


@dataclass(frozen=True)
class Answer:
    """One of the run's questions: a topic, its short answer, the sentence behind it, a status
    (ok / warn / fail / missing) for the page's colour."""

    topic: str
    headline: str
    detail: str
    status: str = "ok"


def _missing(x: Any) -> bool:
    return x is None or x is pd.NA or x is pd.NaT or (isinstance(x, float) and math.isnan(x))


def _is_bool(x: Any) -> bool:
    return isinstance(x, bool) or type(x).__name__ == "bool_"


def finite(x: Any) -> float | None:
    """`x` as a finite float, or None (missing, NaN as parquet gives it back, not a number)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def is_number(x: Any) -> bool:
    """A real number (not a bool, not missing)."""
    return isinstance(x, numbers.Real) and not _is_bool(x) and not _missing(x)


def decimals_for(values: Any) -> int:
    """Decimals that show a column's magnitude without noise: 0 from 100, 1 from 10, 2 from 1, else 3."""
    nums = [abs(float(v)) for v in values if is_number(v)]
    if not nums:
        return 0
    typical = sorted(nums)[len(nums) // 2]
    return 0 if typical >= 100 else 1 if typical >= 10 else 2 if typical >= 1 else 3


def _unsigned_zero(shown: str) -> str:
    """`shown` without the minus of a value that rounded to zero ("-0.0" reads as a loss of nothing)."""
    return shown[1:] if shown.startswith("-") and not any(c in "123456789" for c in shown) else shown


def _fraction_trimmed(shown: str) -> str:
    """`shown` without the trailing zeros of its fraction ("2.50" -> "2.5", "3.00" -> "3"); the zeros
    of a whole number are its magnitude and stay ("160" is not "16")."""
    return shown.rstrip("0").rstrip(".") if "." in shown else shown


def number(x: Any, decimals: int | None = None) -> str:
    """A number rounded for reading (thousands separated); integers stay whole; missing is a dash.
    Without `decimals`, as many as its magnitude needs (`decimals_for`), trailing zeros of the fraction
    dropped; below 0.001, two significant digits (`4.2e-04`)."""
    if _missing(x):
        return MISSING
    if _is_bool(x):
        return "yes" if x else "no"
    if not is_number(x):
        return str(x)
    if isinstance(x, numbers.Integral) or (decimals is None and float(x).is_integer()):
        return f"{int(x):,}"
    if decimals is None and 0 < abs(float(x)) < 0.001:
        return f"{float(x):.1e}"
    if decimals is None:  # a lone number: no trailing zeros in its fraction
        return _unsigned_zero(_fraction_trimmed(f"{float(x):,.{decimals_for([x])}f}"))
    return _unsigned_zero(f"{float(x):,.{decimals}f}")


def percent(x: Any, decimals: int = 1) -> str:
    """A share (0..1) as a percentage."""
    return MISSING if _missing(x) else _unsigned_zero(f"{100 * float(x):,.{decimals}f}%")


def signed_percent(x: Any) -> str:
    """A value already in percent, with its sign: +7.7% (0.0% where it rounds to nothing)."""
    if _missing(x):
        return MISSING
    shown = f"{float(x):+,.1f}%"
    return "0.0%" if shown in ("+0.0%", "-0.0%") else shown


def tok_s(x: Any) -> str:
    """A throughput in output tokens per second, rounded as `number` rounds: 160 tok/s, 2.5 tok/s."""
    return MISSING if _missing(x) else f"{number(x)} tok/s"


def gib(x: Any) -> str:
    """Bytes in GiB."""
    return MISSING if _missing(x) else f"{float(x) / GIB:,.1f} GiB"


def _negative(shown: str) -> str:
    """A duration shown for minus what it measured (`shown` of its size), unless that rounds to nothing."""
    return shown if shown.strip("0.,s ") == "" else f"-{shown}"


def seconds(x: Any) -> str:
    """Seconds, as minutes and seconds from a minute on: 0.25 s, 12.5 s, 2 min 0 s (a negative one with
    its minus: -1 min 40 s)."""
    if _missing(x):
        return MISSING
    s = float(x) + 0.0  # -0.0 is 0.0
    if s < 0:
        return _negative(seconds(-s))
    if s >= 59.5:
        whole = round(s)
        return f"{whole // 60:,} min {whole % 60} s"
    return f"{s:.1f} s" if s >= 1 else f"{s:.2f} s"


def hours(seconds: float | None) -> str:
    """2 h 05 min, 12 min, 1 min 40 s, 40 s (a negative one with its minus); missing is a dash."""
    if _missing(seconds):
        return MISSING
    seconds = float(seconds) + 0.0  # -0.0 is 0.0
    if seconds < 0:
        return _negative(hours(-seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s" if s else f"{m} min"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h:,} h {m:02d} min" if h else f"{m} min"


def timestamp(value: Any) -> str:
    """An ISO timestamp as `2026-11-29 23:08 UTC` (the kit writes them in UTC)."""
    s = str(value or "")
    return f"{s[:10]} {s[11:16]} UTC" if len(s) >= 16 and s[10] == "T" else s or MISSING


def text(x: Any) -> str:
    """Anything else: yes / no, a dash for missing, lists joined."""
    if _missing(x):
        return MISSING
    if _is_bool(x):
        return "yes" if x else "no"
    if isinstance(x, list | tuple):
        return ", ".join(str(v) for v in x) or MISSING
    return number(x) if is_number(x) else str(x)


def _format_column(values: pd.Series, fmt: Callable[[Any], str] | None) -> list[str]:
    """Cells of one column: `fmt`, else numbers with the column's decimals (a mixed column's numbers
    each on their own), everything else as text."""
    if fmt is not None:
        return [fmt(v) for v in values]
    numeric = all(is_number(v) or _missing(v) for v in values)
    floats = [v for v in values if is_number(v) and not float(v).is_integer()]
    d = decimals_for(floats) if floats and numeric else None
    return [number(v, d) if is_number(v) and not isinstance(v, numbers.Integral) else text(v) for v in values]


@dataclass(frozen=True)
class Table:
    """A titled table of strings for reading; folded into <details> when longer than `fold_after`."""

    title: str
    frame: pd.DataFrame
    note: str = ""
    summary: str = ""
    fold_after: int = FOLD_AFTER

    @property
    def folded(self) -> bool:
        return len(self.frame) > self.fold_after

    def _repr_html_(self) -> str:
        body = self.frame.to_html(index=False, border=0, classes="kit-table", na_rep=MISSING)
        body = body.replace("<table ", '<table style="table-layout:auto" ', 1)  # Jupyter's CSS fixes widths
        head = f"<h3>{html.escape(self.title)}</h3>" if self.title else ""
        if self.note:
            head += f"<p>{html.escape(self.note)}</p>"
        if self.folded:
            line = self.summary or f"{len(self.frame)} rows"
            body = (
                f"<details class='kit-fold'><summary>{html.escape(line)} "
                f"(click to show the table)</summary>{body}</details>"
            )
        return head + body

    def __repr__(self) -> str:
        return f"{self.title}\n{self.frame.to_string(index=False)}"


def table(
    df: pd.DataFrame,
    title: str = "",
    columns: Mapping[str, str] | None = None,
    formats: Mapping[str, Callable[[Any], str]] | None = None,
    note: str = "",
    summary: str = "",
    index_name: str | None = None,
    fold_after: int = FOLD_AFTER,
) -> Table:
    """`df` for reading: a meaningful index becomes the first column (`index_name`), raw column names
    become human ones (`columns`, else `human_name`), numbers rounded (`formats` per raw column)."""
    frame = df.copy()
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.name:
        name = index_name or frame.index.name or "name"
        frame = frame.rename_axis(name).reset_index()
    else:
        frame = frame.reset_index(drop=True)
    formats = formats or {}
    out = pd.DataFrame(
        {str(c): _format_column(frame[c], formats.get(str(c))) for c in frame.columns}, index=frame.index
    )
    names = {**{c: human_name(c) for c in out.columns}, **(columns or {})}
    return Table(title, out.rename(columns=names), note, summary, fold_after)


def figure_image(fig: Any, alt: str, dpi: int = 100) -> Any:
    """A matplotlib figure as an IPython PNG image carrying `alt` text (the report renders it as the
    <img> alt attribute); the figure is closed, so Jupyter's inline backend does not show it twice."""
    import matplotlib.pyplot as plt
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png", alt=alt)


def image_html(image: Any) -> str:
    """An IPython PNG image as an <img> with its data inline (a report opens offline)."""
    data = base64.b64encode(image.data).decode()
    alt = html.escape(image.alt or "", quote=True)
    return f"<img src='data:image/png;base64,{data}' alt='{alt}' style='max-width:100%'>"


def live_bundle(html_text: str, plain: str, widget: Any, **kwargs: Any) -> dict[str, Any]:
    """A display bundle of static HTML (what reports keep) and, when there is one, a widget's view
    (what a live kernel shows); Jupyter shows the richest it can."""
    bundle = {"text/html": html_text, "text/plain": plain}
    if widget is not None:
        data = widget._repr_mimebundle_(**kwargs)
        bundle.update({k: v for k, v in data.items() if k != "text/plain"})
    return bundle


def in_live_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (where a widget can show), not a plain interpreter."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def file_image(path: Any, alt: str) -> Any:
    """A saved PNG as an IPython image carrying `alt` text."""
    from IPython.display import Image

    return Image(filename=str(path), alt=alt)
