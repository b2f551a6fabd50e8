"""Seaborn figures of one run (or of two runs overlaid, with a `run` column as hue).

Every function takes tidy data and returns a matplotlib Figure, or None when there is nothing
to draw; `save_figure` writes it as PNG. The Agg backend is selected unless one is already set,
so headless code (papermill, `kit analyse`) never needs a display.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import matplotlib
from matplotlib import MatplotlibDeprecationWarning

if "MPLBACKEND" not in os.environ:
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from kit.generate.timeline_sample import IN_FLIGHT  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")


def save_figure(fig: Figure, path: Path) -> Path:
    """Write `fig` as PNG at `path` (folders created) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def legend_outside(ax: plt.Axes) -> None:
    """The legend right of the axes, where it covers no bar (inside, it hid a bar that reached 1.0);
    the figures are saved with bbox_inches="tight", which holds it."""
    if ax.get_legend() is not None:
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1), frameon=False)


def length_distribution(
    df: pd.DataFrame, column: str = "completion_tokens", hue: str = "source"
) -> Figure | None:
    """Histogram of a token-count column per source (or per run), each normalised on its own."""
    data = df.dropna(subset=[column])
    if data.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    sns.histplot(data=data, x=column, hue=hue, element="step", stat="density", common_norm=False, ax=ax)
    ax.set(
        title=f"{column.replace('_', ' ').capitalize()} per {hue}",
        xlabel=f"{column.replace('_', ' ')} per request",
        ylabel=f"density (area 1 per {hue})",
    )
    legend_outside(ax)
    return fig


def finish_reasons(df: pd.DataFrame, by: str = "source") -> Figure | None:
    """Share of each finish reason per source (or per run), as horizontal bars."""
    if df.empty:
        return None
    shares = df.groupby(by)["finish_reason"].value_counts(normalize=True).rename("share").reset_index()
    fig, ax = plt.subplots(figsize=(8, 0.6 * shares[by].nunique() + 1.5))
    sns.barplot(data=shares, y=by, x="share", hue="finish_reason", orient="h", ax=ax)
    ax.set_xlim(0, 1)
    ax.set(
        title="Finish reasons ('length' = cut at max_tokens)",
        xlabel="share of rows (0-1)",
        ylabel="",
    )
    legend_outside(ax)
    return fig


def throughput(timeline: pd.DataFrame, hue: str | None = None) -> Figure | None:
    """Rows/s and output tokens/s over time, one panel each."""
    cols = [c for c in ("rows_s", "tok_s") if c in timeline.columns and timeline[c].notna().any()]
    if timeline.empty or not cols:
        return None
    fig, axes = plt.subplots(len(cols), 1, figsize=(8, 3 * len(cols)), sharex=True, squeeze=False)
    for ax, col in zip(axes[:, 0], cols, strict=True):
        sns.lineplot(data=timeline, x="t_s", y=col, hue=hue, ax=ax)
        ax.set_ylabel({"rows_s": "rows/s", "tok_s": "output tokens/s"}[col])
    axes[-1, 0].set_xlabel("time since start (s)")
    axes[0, 0].set_title("Throughput over time")
    return fig


def latency(df: pd.DataFrame, hue: str = "source") -> Figure | None:
    """Distribution of request latency (seconds) per source (or per run)."""
    data = df.dropna(subset=["latency_s"])
    if data.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    sns.histplot(data=data, x="latency_s", hue=hue, element="step", stat="density", common_norm=False, ax=ax)
    ax.set(title="Request latency", xlabel="latency per request (s)", ylabel=f"density (area 1 per {hue})")
    legend_outside(ax)
    return fig


def accept_length(timeline: pd.DataFrame, hue: str | None = None) -> Figure | None:
    """Speculative accept length over time, where the engine reported it."""
    if timeline.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 3))
    sns.lineplot(data=timeline, x="t_s", y="accept_length", hue=hue, ax=ax)
    ax.set(
        title="Accept length over time",
        xlabel="time since start (s)",
        ylabel="tokens accepted per step",
    )
    return fig


def counts_bar(table: pd.DataFrame, title: str, xlabel: str = "rows") -> Figure | None:
    """Bars of a count table (rows: sources, columns: categories such as flags or failure reasons)."""
    if table.empty or not table.to_numpy().any():
        return None
    tidy = table.reset_index().melt(id_vars=table.index.name or "index", var_name="kind", value_name="n")
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(tidy["kind"].unique()) * max(len(table), 1) * 0.5 + 2))
    sns.barplot(data=tidy, y="kind", x="n", hue=table.index.name or "index", orient="h", ax=ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("")
    ax.set_title(title)
    legend_outside(ax)
    return fig


def _parts_tidy(df: pd.DataFrame, parts: pd.DataFrame, hue: str) -> pd.DataFrame:
    """Long form: one row per (row, part) with chars and tokens, for the rows that thought."""
    thought = parts["reasoning_chars"].notna()
    frames = []
    for part in ("reasoning", "answer"):
        frames.append(
            pd.DataFrame(
                {
                    hue: df.loc[thought, hue].to_numpy(),
                    "part": part,
                    "chars": parts.loc[thought, f"{part}_chars"].astype("Float64").to_numpy(),
                    "tokens": parts.loc[thought, f"{part}_tokens"].astype("Float64").to_numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True).astype({"chars": float, "tokens": float})


def reasoning_and_answer(df: pd.DataFrame, parts: pd.DataFrame, hue: str = "source") -> Figure | None:
    """Lengths of reasoning and answer per source (rows that thought), in chars and, where the
    engine reported `reasoning_tokens`, in tokens; None when no row thought."""
    if df.empty or not parts["reasoning_chars"].notna().any():
        return None
    tidy = _parts_tidy(df, parts, hue)
    units = ["chars"] + (["tokens"] if tidy["tokens"].notna().any() else [])
    order = sorted(tidy[hue].unique())
    fig, axes = plt.subplots(
        1, len(units), figsize=(6 * len(units), 0.7 * len(order) + 2), squeeze=False, sharey=True
    )
    for ax, unit in zip(axes[0], units, strict=True):
        with warnings.catch_warnings():  # seaborn 0.13 passes matplotlib 3.11 a deprecated `vert`
            warnings.simplefilter("ignore", MatplotlibDeprecationWarning)
            sns.boxplot(
                data=tidy.dropna(subset=[unit]), y=hue, x=unit, hue="part", order=order, orient="h", ax=ax
            )
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlim(left=0)
        ax.set_xlabel(f"length ({unit}, symlog scale)")
        ax.set_ylabel("")
    for ax in axes[0, 1:]:
        ax.get_legend().remove()
    axes[0, 0].set_title("Reasoning and answer lengths (rows that thought)")
    return fig


def in_flight_tail(
    load: pd.DataFrame, level: float, level_label: str, tail: tuple[float, float], title: str
) -> Figure | None:
    """Requests in flight over time (`load`: t_s, in_flight) with the full-load line (the engine's
    capacity) and the tail shaded: the batch draining at the end, GPUs running ever fewer requests."""
    if load.empty:
        return None
    minutes = float(load["t_s"].max()) > 600
    scale, unit = (60.0, "min") if minutes else (1.0, "s")
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(load["t_s"] / scale, load[IN_FLIGHT], lw=1.2, label="requests in flight")
    ax.axhline(level, color="grey", ls="--", lw=1, label=level_label)
    if tail[1] > tail[0]:
        ax.axvspan(tail[0] / scale, tail[1] / scale, color="tab:orange", alpha=0.2, lw=0, label="tail")
    ax.set(title=title, xlabel=f"time since the session's start ({unit})", ylabel="requests in flight")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize="small")
    return fig
