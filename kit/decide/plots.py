"""Seaborn figures for notebook 02: predicted curves with measured points, memory per arm, crossover."""

from __future__ import annotations

from typing import Any

import pandas as pd


def _table(decision: dict) -> pd.DataFrame:
    return pd.DataFrame(decision["table"])


def throughput_curves(decision: dict, ax: Any = None) -> Any:
    """Predicted output tokens/s per arm over concurrency (lines), measured points over them."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    t = _table(decision)
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    pred = t[t.predicted_tok_s.notna()].astype({"predicted_tok_s": float})
    sns.lineplot(
        data=pred, x="concurrency", y="predicted_tok_s", hue="arm", style="arm", ax=ax, markers=False
    )
    meas = t[t.measured_tok_s.notna()] if "measured_tok_s" in t else t.iloc[:0]
    if len(meas):
        sns.scatterplot(
            data=meas.astype({"measured_tok_s": float}),
            x="concurrency",
            y="measured_tok_s",
            hue="arm",
            ax=ax,
            s=60,
            legend=False,
            edgecolor="black",
        )
    ax.set(
        xscale="log",
        xlabel="concurrency",
        ylabel="output tokens/s",
        title=f"predicted (lines) vs measured (points); chosen: {decision['chosen_arm']}",
    )
    return ax


def ratio_curve(decision: dict, ax: Any = None) -> Any:
    """Predicted speculative / plain tokens/s per k; the crossover is where a curve meets 1."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    t = _table(decision)
    plain = t[t.spec_k == 0].set_index("concurrency").predicted_tok_s
    spec = t[(t.spec_k > 0) & t.predicted_tok_s.notna()].copy()
    spec["ratio"] = [
        float(r.predicted_tok_s) / float(plain[r.concurrency]) if pd.notna(plain.get(r.concurrency)) else None
        for r in spec.itertuples()
    ]
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    sns.lineplot(data=spec.dropna(subset=["ratio"]), x="concurrency", y="ratio", hue="arm", marker="o", ax=ax)
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    ax.set(
        xscale="log", ylabel="speculative / plain tokens/s", title="crossover: below 1, plain decoding wins"
    )
    return ax


def memory_budget(decision: dict, ax: Any = None) -> Any:
    """Largest running batch per replica that memory allows, per arm."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    t = _table(decision).drop_duplicates("arm")
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    sns.barplot(data=t, x="arm", y="mem_max_running", hue="arm", ax=ax, legend=False)
    ax.set(ylabel="max running sequences / replica", title="memory budget per arm")
    return ax


def decision_figures(decision: dict) -> dict[str, Any]:
    """All three figures, keyed by file stem, for the notebook to show and save."""
    import matplotlib.pyplot as plt

    figs = {}
    for name, fn in (("throughput", throughput_curves), ("ratio", ratio_curve), ("memory", memory_budget)):
        fig, ax = plt.subplots(figsize=(7, 4))
        fn(decision, ax)
        fig.tight_layout()
        figs[name] = fig
    return figs
