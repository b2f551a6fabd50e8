"""Notebook 04 for reading: the verdict, the summary's tables with human titles and units, and the
saved figures with alt text that carries their numbers. Reads summary.json's content only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from kit.analyse.health import PEAK_WINDOW_S
from kit.analyse.tables import NearDuplicates, summary_tables
from kit.analyse.tail import speculation_clause
from kit.analyse.tail_words import rate_words
from kit.artifacts import Fitness, Health, Summary, TailSpeculation, TailSummary
from kit.display import Answer, Table, file_image, hours, number, percent, seconds, table

TITLES = {
    "per source": "Rows and tokens per source",
    "finish reasons (share of rows)": "Finish reasons (share of rows)",
    "quality flags (rows)": "Quality flags (rows)",
    "thinking (rows)": "Thinking (rows)",
    "reasoning and answer lengths (p50, p90)": "Reasoning and answer lengths (p50, p90)",
    "tool calls (rows)": "Tool calls (rows)",
    "gaps": "Gaps: what could not be read",
}
NOTES = {
    "quality flags (rows)": "Rows per flag; 'function calling' counts rows whose prompt offered tools.",
    "reasoning and answer lengths (p50, p90)": "Characters, and tokens where the engine reported them.",
}


def _seconds_line(entry: Any) -> str:
    entry = entry or {}
    if entry.get("p50") is None:
        return "–"
    return f"p50 {seconds(entry['p50'])}, p90 {seconds(entry['p90'])}, max {seconds(entry['max'])}"


def _window(health: Health) -> str:
    return hours(health.output_tok_s_peak_window_s or PEAK_WINDOW_S)


def peak_words(health: Health) -> str:
    """The peak sustained over its window, or why there is none: a session shorter than the window."""
    if health.output_tok_s_peak is not None:
        return number(health.output_tok_s_peak)
    return f"none: no session lasted {_window(health)}"


def health_table(health: Health) -> Table:
    """Run health as named lines with units."""
    by_reason = health.failures_by_reason or {}
    rows = {
        "complete": "yes" if health.complete else "no",
        "time generating": seconds(health.duration_s),
        "rows/s": number(health.rows_s),
        "output tok/s (mean)": number(health.output_tok_s),
        f"output tok/s (peak over {_window(health)})": peak_words(health),
        "latency per request": _seconds_line(health.latency_s),
        "time to first token": _seconds_line(health.ttft_s),
        "failed requests": number(health.failures)
        + (" (" + ", ".join(f"{k} {v}" for k, v in by_reason.items()) + ")" if by_reason else ""),
        "duplicate ids": number(health.duplicate_ids),
        "accept length (mean)": number(health.accept_length_mean),
        "timeline from": str(health.timeline_from or "–"),
    }
    return table(pd.DataFrame({"measure": list(rows), "value": list(rows.values())}), "Run health")


MEASURED_FROM = {
    "timeline": "the timeline stage 3 sampled",
    "rows": "the rows' start and finish times",
}


def _idle_line(t: TailSummary) -> str:
    unit = "GPU" if t.device_unit == "GPU" else "replica"
    count = f"{t.devices} {unit}(s): {t.devices_source}"
    return f"{number(t.idle_minutes)} {unit}-minutes, over {count}"


def _speculation_line(spec: TailSpeculation) -> str:
    if spec.status not in ("saves", "no win"):
        return speculation_clause(spec) or "–"
    x = spec.crossover
    won = f"wins up to concurrency {x}" if x else "wins at no concurrency"
    return (
        f"{seconds(spec.saved_s)} ({seconds(spec.saved_low_s)} to "
        f"{seconds(spec.saved_high_s)}, ±{percent(spec.model_error, 0)} on the ratio) with "
        f"{spec.name} k={spec.spec_k}, which the decision predicts {won}"
    )


def tail_table(tail: TailSummary) -> Table:
    """The tail of the last session (kit.analyse.tail) as named lines with units."""
    if not tail.known:
        rows = {"tail": f"unknown, because {tail.reason}"}
    else:
        session = f"session {tail.session} of {tail.sessions}" if tail.session else "the run"
        rows = {
            "measured on": f"{session}, from {MEASURED_FROM.get(tail.measured_from or '', '–')}",
            "full load": f"{number(tail.full_load_in_flight)} in flight: {tail.full_load_source}",
            "tail (start to end)": f"{seconds(tail.start_s)} to {seconds(tail.end_s)} "
            f"of {seconds(tail.session_s)}",
            "tail duration (share)": f"{seconds(tail.duration_s)} ({percent(tail.share, 0)} of the session)",
            "output tokens/s": rate_words(tail),
            "rows finished in the tail": number(tail.rows_in_tail),
            "capacity left idle": _idle_line(tail),
        }
        if tail.speculation is not None:
            rows["speculation there (predicted)"] = _speculation_line(tail.speculation)
    note = "The batch draining at the end of the last session: fewer requests than the engine runs at once."
    return table(pd.DataFrame({"measure": list(rows), "value": list(rows.values())}), "The tail", note=note)


def near_duplicate_table(entry: NearDuplicates) -> Table:
    """Near-duplicate clusters of prompts and answers (summary.json's `near_duplicates`), per source too."""
    kinds = ("prompts", "answers")
    measures = {
        "clusters": "clusters",
        "rows": "rows in clusters",
        "extra_rows": "rows beyond one per cluster",
        "exact_rows": "of those, exact copies",
    }
    frame = pd.DataFrame(
        {kind: {label: entry.get(kind, {}).get(key) for key, label in measures.items()} for kind in kinds}
    )
    for source, counts in (entry.get("rows_in_clusters_by_source") or {}).items():
        frame.loc[f"rows in clusters: {source}"] = [counts.get(k) for k in kinds]
    note = (
        f"MinHash LSH on word {entry.get('ngram')}-grams, Jaccard threshold {entry.get('threshold')} "
        f"({entry.get('bands')} bands of {entry.get('rows_per_band')}); `kit export --drop "
        "near_duplicate` keeps one row of each answer cluster."
    )
    return table(frame, "Near-duplicates", note=note, index_name="measure")


def analysis_tables(summary: Summary) -> list[Table]:
    """Notebook 04's tables for reading: human titles and columns, shares as %, no index."""
    shares = {"share_with_calls": percent}
    out = []
    for key, frame in summary_tables(summary).items():
        if key == "run health":
            out.append(health_table(summary.health))
            continue
        formats = {c: percent for c in frame.columns} if key.startswith("finish reasons") else shares
        index_name = None if key == "gaps" else "source"
        out.append(
            table(
                frame, TITLES.get(key, key), formats=formats, note=NOTES.get(key, ""), index_name=index_name
            )
        )
    if summary.tail is not None:
        out.append(tail_table(summary.tail))
    if summary.near_duplicates:
        out.append(near_duplicate_table(summary.near_duplicates))
    return out


USABLE_OK, USABLE_POOR = 0.9, 0.5
"""A run whose rows `kit export` keeps at this share or more reads ok; below the second, a failure."""
BUDGET_RULES = {"truncated", "unterminated_think"}
"""Drop rules a larger output budget cures."""


def fitness_answer(fitness: Fitness, explain: bool = False) -> Answer:
    """The rows fit to train on (what `kit export` keeps by default) against the rows made, the
    reasons for the rest, most first, by the rule names `kit export --drop` takes (`explain`: with
    what each means; the index, whose answers fit one screen, gives the names alone), and what to
    change where the output budget is the cause."""
    share = fitness.share
    head = f"{fitness.usable:,} of {fitness.rows:,} rows usable" + (
        f" ({percent(share, 0)})" if share is not None else ""
    )
    left = fitness.rows - fitness.usable
    if not left:
        detail = "`kit export` keeps every row made (its default drop rules leave none out)."
    else:
        reasons = ("; " if explain else ", ").join(
            f"{n:,} {r}" + (f": {fitness.means.get(r, r)}" if explain else "")
            for r, n in fitness.dropped.items()
        )
        detail = f"`kit export`'s default drop rules leave out {left:,}: {reasons}."
        if sum(n for r, n in fitness.dropped.items() if r in BUDGET_RULES) >= left / 2:
            detail += " Raise generate.sampling.max_tokens (or turn thinking off) and generate again."
    if fitness.failed:
        detail += f" {fitness.failed:,} more request(s) failed and have no row."
    return Answer("Data", head, detail, _fitness_status(share))


def _fitness_status(share: float | None) -> str:
    if share is None or share < USABLE_POOR:
        return "fail"
    return "ok" if share >= USABLE_OK else "warn"


def analysis_verdict(summary: Summary) -> str:
    """Notebook 04's opening, as Markdown: rows analysed, truncation, flags, failures, gaps."""
    flags = {k: v for k, v in summary.flags.items() if v and k != "function_calling"}
    cut = summary.finish_reasons.get("length", 0.0)
    health = summary.health
    fit = fitness_answer(summary.fitness, explain=True) if summary.fitness is not None else None
    lines = [
        f"## Verdict: {fit.headline if fit else f'{summary.rows:,} rows'}, {sum(flags.values()):,} quality "
        f"flags, {number(health.failures or 0)} failed",
        "",
        *(
            [f"- **Fit to train on: {fit.headline}.** {fit.detail} The export below keeps them in `train`."]
            if fit
            else []
        ),
        f"- **{summary.rows:,} rows analysed** from {len(summary.sources)} sources; "
        f"{percent(cut)} were cut at max_tokens"
        + (" (raise generate.sampling.max_tokens if that matters)." if cut > 0.05 else "."),
        "- **Quality flags:** "
        + (", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in flags.items()) if flags else "none")
        + ".",
        f"- **Failed requests:** {number(health.failures or 0)}; "
        f"**throughput** {number(health.output_tok_s)} output tok/s.",
    ]
    if summary.tail is not None and summary.tail.sentence:
        lines.append(f"- {summary.tail.sentence}")
    if summary.gaps:
        lines.append(f"- **Gaps:** {len(summary.gaps)} part(s) of the run could not be read (table below).")
    return "\n".join(lines)


def _dist(entry: Any, unit: str = "") -> str:
    entry = entry or {}
    if entry.get("p50") is None:
        return "none"
    return ", ".join(f"{q} {number(entry[q])}{unit}" for q in ("p50", "p90", "max"))


def _per_source(summary: Summary, key: str, unit: str = "") -> str:
    return "; ".join(f"{s}: {_dist(getattr(v, key), unit)}" for s, v in summary.sources.items())


def _finish_alt(summary: Summary) -> str:
    parts = [
        f"{s}: " + ", ".join(f"{r} {percent(v)}" for r, v in e.finish_reasons.items())
        for s, e in summary.sources.items()
    ]
    return "Bars: share of rows per finish reason and source. " + "; ".join(parts)


def _health_alt(summary: Summary, what: str) -> str:
    h = summary.health
    if what == "throughput":
        return (
            f"Lines: rows/s and output tokens/s over the run; mean {number(h.output_tok_s)} tok/s, "
            f"peak over {_window(h)}: {peak_words(h)}, {number(h.rows_s)} rows/s."
        )
    if what == "accept":
        return f"Line: accept length over the run; mean {number(h.accept_length_mean)} tokens per step."
    return f"Histogram: request latency per source; overall {_dist(h.latency_s, ' s')}."


def _counts_alt(counts: Any, what: str) -> str:
    counts = {k: v for k, v in (counts or {}).items() if v}
    listed = ", ".join(f"{k} {v:,}" for k, v in counts.items()) or "none"
    return f"Bars: {what} per source; in all: {listed}."


def _tail_alt(summary: Summary) -> str:
    t = summary.tail
    if t is None or not t.known:
        return "Line: requests in flight over the run."
    return (
        f"Line: requests in flight over the last session, a dashed line at full load "
        f"({number(t.full_load_in_flight)}), the tail shaded from {seconds(t.start_s)} to "
        f"{seconds(t.end_s)}. {t.sentence}"
    )


def figure_alt(stem: str, summary: Summary) -> str:
    """Alt text for a figure of `run_figures` (by file stem), with the numbers it shows."""
    texts = {
        "completion_tokens_by_source": lambda: (
            "Histogram: completion tokens per request, per source; "
            + _per_source(summary, "completion_tokens")
        ),
        "prompt_tokens_by_source": lambda: (
            "Histogram: prompt tokens per request, per source; " + _per_source(summary, "prompt_tokens")
        ),
        "reasoning_and_answer_by_source": lambda: (
            "Box plots: reasoning and answer lengths per source "
            "(rows that thought); reasoning chars " + _per_source(summary, "reasoning_chars")
        ),
        "finish_reasons_by_source": lambda: _finish_alt(summary),
        "throughput_over_time": lambda: _health_alt(summary, "throughput"),
        "in_flight_and_tail": lambda: _tail_alt(summary),
        "latency": lambda: _health_alt(summary, "latency"),
        "accept_length_over_time": lambda: _health_alt(summary, "accept"),
        "flags_by_source": lambda: _counts_alt(summary.flags, "rows flagged, per flag"),
        "failures_by_reason": lambda: _counts_alt(
            summary.health.failures_by_reason, "failed requests, per reason"
        ),
    }
    return texts.get(stem, lambda: stem.replace("_", " "))()


def analysis_figures(summary: Summary) -> list[Any]:
    """The saved figures of a summary as images with alt text, for notebook 04."""
    return [file_image(p, figure_alt(Path(p).stem, summary)) for p in summary.figures]
