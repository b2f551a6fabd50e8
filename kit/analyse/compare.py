"""Two runs side by side (e.g. the MTP arm and the plain arm, or two models): a table of
differences and the same figures with the two runs overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kit.analyse import health, plots
from kit.analyse.run import RunData, read_run, summarise, with_forecast_check
from kit.artifacts import Summary
from kit.columns import OUTPUT_TOK_S
from kit.params import AnalyseParams
from kit.runfolder import RunFolder

HEADLINE = (
    ("rows", ("rows",)),
    ("failures", ("health", "failures")),
    ("duration_s", ("health", "duration_s")),
    ("rows_s", ("health", "rows_s")),
    (OUTPUT_TOK_S, ("health", OUTPUT_TOK_S)),
    ("latency_p50_s", ("health", "latency_s", "p50")),
    ("latency_p90_s", ("health", "latency_s", "p90")),
    ("accept_length_mean", ("health", "accept_length_mean")),
    ("completion_tokens_p50", ("completion_tokens", "p50")),
    ("completion_tokens_p90", ("completion_tokens", "p90")),
    ("completion_tokens_total", ("completion_tokens", "total")),
    ("share_length", ("finish_reasons", "length")),
    ("reasoning_rows", ("reasoning", "rows")),
    ("reasoning_chars_p50", ("reasoning_chars", "p50")),
    ("reasoning_tokens_p50", ("reasoning_tokens", "p50")),
    ("answer_chars_p50", ("answer_chars", "p50")),
    ("answer_tokens_p50", ("answer_tokens", "p50")),
    ("tool_call_share", ("tool_calls", "share_with_calls")),
    ("forecast_generating_s", ("forecast_check", "forecast_s")),
    ("generating_s", ("forecast_check", "generating_s")),
    ("forecast_error_pct", ("forecast_check", "wall_error_pct")),
    ("forecast_tokens_error_pct", ("forecast_check", "tokens_error_pct")),
    ("forecast_speed_error_pct", ("forecast_check", "speed_error_pct")),
)
PER_SOURCE = (
    ("generated",),
    ("completion_tokens", "p50"),
    ("finish_reasons", "length"),
    ("reasoning_chars", "p50"),
    ("answer_chars", "p50"),
)


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _metric_rows(sa: dict[str, Any], sb: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    rows = [(name, _get(sa, p), _get(sb, p)) for name, p in HEADLINE]
    for flag in sa.get("flags", {}):
        rows.append((f"flag_{flag}", sa["flags"].get(flag), sb.get("flags", {}).get(flag)))
    for src in sorted(set(sa.get("sources", {})) | set(sb.get("sources", {}))):
        for key in PER_SOURCE:
            name = f"{src}:{'_'.join(key)}"
            rows.append((name, _get(sa, ("sources", src, *key)), _get(sb, ("sources", src, *key))))
    return rows


def difference_table(sa: Summary, sb: Summary, names: tuple[str, str] = ("a", "b")) -> pd.DataFrame:
    """Metric by metric: value in each run, b - a, and b / a (NaN where undefined), read along the
    paths of summary.json (HEADLINE, PER_SOURCE)."""
    rows = _metric_rows(sa.to_json(), sb.to_json())
    table = pd.DataFrame(rows, columns=["metric", *names]).set_index("metric")
    a, b = (pd.to_numeric(table[n], errors="coerce") for n in names)
    table["diff"] = b - a
    table["ratio"] = (b / a.where(a != 0)).round(4)
    return table


def _stack(runs: dict[str, RunData]) -> pd.DataFrame:
    return pd.concat([d.df.assign(run=name) for name, d in runs.items()], ignore_index=True)


def _timelines(runs: dict[str, RunData], fn: Any) -> pd.DataFrame:
    return pd.concat([fn(d.metrics, d.df).assign(run=name) for name, d in runs.items()], ignore_index=True)


def overlay_figures(runs: dict[str, RunData]) -> dict[str, Figure]:
    """The run figures with one hue per run."""
    both = _stack(runs)
    figs = {
        "compare_completion_tokens": plots.length_distribution(both, "completion_tokens", hue="run"),
        "compare_finish_reasons": plots.finish_reasons(both, by="run"),
        "compare_throughput": plots.throughput(_timelines(runs, health.throughput_timeline), hue="run"),
        "compare_latency": plots.latency(both, hue="run"),
        "compare_reasoning_and_answer": plots.reasoning_and_answer(
            both, pd.concat([d.row_parts() for d in runs.values()], ignore_index=True), hue="run"
        ),
        "compare_accept_length": plots.accept_length(
            _timelines(runs, health.accept_length_timeline), hue="run"
        ),
    }
    return {k: v for k, v in figs.items() if v is not None}


def _run_names(a: RunFolder, b: RunFolder) -> tuple[str, str]:
    na, nb = a.root.name, b.root.name
    return (na, nb) if na != nb else (f"a:{na}", f"b:{nb}")


def compare_runs(
    a: RunFolder, b: RunFolder, params: AnalyseParams | None = None, out_dir: Path | None = None
) -> tuple[pd.DataFrame, dict[str, Figure]]:
    """Differences between two runs (b relative to a) and overlaid figures by name.

    With `out_dir`, the figures are also saved there as PNG (and closed).
    """
    names = _run_names(a, b)
    runs = {names[0]: read_run(a, params), names[1]: read_run(b, params)}
    sa, sb = (with_forecast_check(summarise(runs[n]), runs[n]) for n in names)  # stage 2's forecast judged
    table = difference_table(sa, sb, names)
    figs = overlay_figures(runs)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for stem, fig in figs.items():
            fig.savefig(Path(out_dir) / f"{stem}.png", dpi=100, bbox_inches="tight")
    return table, figs
