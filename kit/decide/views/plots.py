"""Seaborn figures for notebook 02 and the report's index: measured beside predicted output tokens/s
per arm, the predicted speculative / plain ratio, memory per arm. Each comes with its alt text,
written from the numbers it shows."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from kit.artifacts import Decision
from kit.columns import SPEC_K
from kit.decide.costmodel.validation import ErrorBand
from kit.engines.arms import Arm, arm_label


def _table(decision: Decision, name: str) -> pd.DataFrame:
    """The decision's table, arms named for reading (`plain decoding`, `MTP k=2`)."""
    t = pd.DataFrame(decision.table_rows()).sort_values([SPEC_K, "concurrency"])
    t["arm"] = [arm_label(int(k), name) for k in t.spec_k]
    return t


def _chosen(decision: Decision, name: str) -> str:
    return arm_label((decision.arm or Arm(0)).k, name)


def _calibrated(decision: Decision) -> bool:
    return str(decision.efficiency.get("source", "")).startswith("fit to")


def _levels(values: Any) -> str:
    return " / ".join(f"{float(v):,.0f}" for v in values)


def throughput_alt(decision: Decision, name: str = "MTP") -> str:
    """What the measured-vs-predicted figure shows, in words and numbers; `name` labels the
    speculative arms (MTP, n-gram, EAGLE...)."""
    t = _table(decision, name)
    conc = sorted(t.concurrency.unique())
    parts = [
        f"Output tokens/s over concurrency {' / '.join(str(int(c)) for c in conc)}, "
        f"predicted (lines) for {', '.join(dict.fromkeys(t.arm))}"
    ]
    if _calibrated(decision):
        parts[0] += " (calibrated on this sweep's points; dotted: the model before measuring)"
    meas = t[t.measured_tok_s.notna()] if "measured_tok_s" in t else t.iloc[:0]
    for arm, g in meas.groupby("arm", sort=False):
        spans = ""
        if "measured_lo" in g and g.measured_lo.notna().all():
            spans = (
                " (90% intervals "
                + ", ".join(
                    f"{lo:,.0f}-{hi:,.0f}" for lo, hi in zip(g.measured_lo, g.measured_hi, strict=True)
                )
                + ")"
            )
        parts.append(
            f"measured {arm}: {_levels(g.measured_tok_s)} tok/s at "
            f"{' / '.join(str(int(c)) for c in g.concurrency)}{spans}"
        )
    if meas.empty:
        parts.append("nothing measured")
    return "; ".join(parts) + f". Chosen: {_chosen(decision, name)} ({decision.decided_by})."


def throughput_curves(
    decision: Decision, ax: Any = None, name: str = "MTP", band: ErrorBand | None = None
) -> Any:
    """Predicted output tokens/s per arm over concurrency (lines), measured points over them; with a
    `band`, each speculative arm's prediction shaded by the model's held-out error (the plain arm is
    the reference the published ratios were measured against)."""
    t = _table(decision, name)
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    arms = list(dict.fromkeys(t.arm))
    palette = dict(zip(arms, sns.color_palette(n_colors=len(arms)), strict=True))
    calibrated = _calibrated(decision)
    pred = t[t.predicted_tok_s.notna()].astype({"predicted_tok_s": float})
    for arm, g in pred.groupby("arm", sort=False):
        label = f"{arm} predicted" + (" (calibrated)" if calibrated else "")
        ax.plot(g.concurrency, g.predicted_tok_s, "--", color=palette[arm], label=label)
        if band is not None and (g.spec_k > 0).all():
            low, high = zip(*(band.around(y) for y in g.predicted_tok_s), strict=True)
            ax.fill_between(g.concurrency, low, high, color=palette[arm], alpha=0.12, lw=0)
        if "predicted_before_tok_s" in g and g.predicted_before_tok_s.notna().any():
            ax.plot(
                g.concurrency, g.predicted_before_tok_s.astype(float), ":", color=palette[arm], alpha=0.35
            )
    meas = t[t.measured_tok_s.notna()] if "measured_tok_s" in t else t.iloc[:0]
    for arm, g in meas.groupby("arm", sort=False):
        y = g.measured_tok_s.astype(float)
        if {"measured_lo", "measured_hi"} <= set(g) and g.measured_lo.notna().all():
            err = [y - g.measured_lo.astype(float), g.measured_hi.astype(float) - y]
        else:
            err = None
        ax.errorbar(
            g.concurrency, y, yerr=err, fmt="o-", capsize=3, color=palette[arm], markeredgecolor="black",
            label=f"{arm} measured",
        )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(t.concurrency.unique()), [str(int(c)) for c in sorted(t.concurrency.unique())])
    ax.set(
        xlabel="concurrent requests",
        ylabel="output tokens/s",
        title=f"Measured vs predicted output tokens/s\nchosen: {_chosen(decision, name)}",
    )
    ax.set_ylim(bottom=0)
    _legend_below(ax, _key_entries(t, band, pred))
    return ax


def _key_entries(t: pd.DataFrame, band: ErrorBand | None, pred: pd.DataFrame) -> list[Any]:
    """Legend entries for what the lines' colours do not say: the dotted curves (the model before it
    was fit to the sweep) and the shading (its known error), each drawn only where the figure has it."""
    extra: list[Any] = []
    if "predicted_before_tok_s" in t and t.predicted_before_tok_s.notna().any():
        extra.append(Line2D([], [], ls=":", color="grey", label="predicted before measuring (dotted)"))
    if band is not None and (pred.spec_k > 0).any():
        extra.append(Patch(color="grey", alpha=0.12, lw=0, label=f"shaded: {band.label}"))
    return extra


def _legend_below(ax: Any, extra: list[Any]) -> None:
    """The legend under the axes, where it covers no point or bar; the figure grows to hold it when
    saved with bbox_inches="tight" (the index and notebook 02 save it so)."""
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(
        handles=handles + extra,
        fontsize="small",
        ncol=2,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        frameon=False,
    )


def _ratios(decision: Decision, name: str) -> pd.DataFrame:
    t = _table(decision, name)
    plain = t[t.spec_k == 0].set_index("concurrency").predicted_tok_s
    spec = t[(t.spec_k > 0) & t.predicted_tok_s.notna()].copy()
    spec["ratio"] = [
        float(r.predicted_tok_s) / float(plain[r.concurrency]) if pd.notna(plain.get(r.concurrency)) else None
        for r in spec.itertuples()
    ]
    return spec.dropna(subset=["ratio"])


def ratio_alt(decision: Decision, name: str = "MTP") -> str:
    spec = _ratios(decision, name)
    if spec.empty:
        return "Predicted speculative / plain tokens/s: no speculative arm was predicted."
    parts = [
        f"{arm}: " + ", ".join(f"{r:.2f}x at {int(c)}" for c, r in zip(g.concurrency, g.ratio, strict=True))
        for arm, g in spec.groupby("arm", sort=False)
    ]
    return "Predicted speculative / plain output tokens/s over concurrency (1 = break-even): " + "; ".join(
        parts
    )


def ratio_curve(decision: Decision, ax: Any = None, name: str = "MTP") -> Any:
    """Predicted speculative / plain tokens/s per k; the crossover is where a curve meets 1."""
    spec = _ratios(decision, name)
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    if len(spec):
        sns.lineplot(data=spec, x="concurrency", y="ratio", hue="arm", marker="o", ax=ax)
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    levels = sorted(_table(decision, name).concurrency.unique())
    ax.set_xticks(levels, [str(int(c)) for c in levels])
    ax.set(
        xlabel="concurrent requests",
        ylabel="speculative / plain output tokens/s (x)",
        title="Predicted speedup of speculation (below 1: plain decoding wins)",
    )
    return ax


def memory_alt(decision: Decision, name: str = "MTP") -> str:
    t = _table(decision, name).drop_duplicates("arm")
    pairs = ", ".join(f"{a}: {int(m):,}" for a, m in zip(t.arm, t.mem_max_running, strict=True))
    return f"Largest running batch per replica that memory holds, per arm: {pairs} sequences."


def memory_budget(decision: Decision, ax: Any = None, name: str = "MTP") -> Any:
    """Largest running batch per replica that memory allows, per arm."""
    t = _table(decision, name).drop_duplicates("arm")
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    sns.barplot(data=t, x="arm", y="mem_max_running", hue="arm", ax=ax, legend=False)
    ax.set(
        xlabel="arm",
        ylabel="sequences per replica",
        title="Memory budget: running sequences that fit, per arm",
    )
    return ax


FIGURES = {
    "throughput": (throughput_curves, throughput_alt),
    "ratio": (ratio_curve, ratio_alt),
    "memory": (memory_budget, memory_alt),
}


def decision_figures(decision: Decision, name: str = "MTP") -> dict[str, tuple[Any, str]]:
    """All three figures with their alt text, keyed by file stem, for the notebook to show and save;
    `name` labels the speculative arms (MTP, n-gram, EAGLE...)."""
    figs = {}
    for stem, (draw, alt) in FIGURES.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        draw(decision, ax, name)
        fig.tight_layout()
        figs[stem] = (fig, alt(decision, name))
    return figs
