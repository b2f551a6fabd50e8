"""A sample browser: ipywidgets in a live kernel (filter by source, finish reason and flag; step
through rows and read the messages and the answer), and a static HTML table everywhere else.

A row shows its answer first; its reasoning and the engine's parsed tool calls follow in HTML
`<details>` blocks, collapsed until clicked.

`SampleBrowser` carries both: in JupyterLab the widget view is shown; nbconvert / papermill
reports show the static table (the report renderer drops widget views, which would need a CDN).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

import pandas as pd

from kit.analyse.flags import FLAGS, compute_flags, last_user_text
from kit.analyse.reasoning import split_row
from kit.analyse.run import RunData
from kit.analyse.toolcalls import load_calls
from kit.display import in_live_kernel, live_bundle
from kit.errors import RunFolderError
from kit.params import AnalyseParams

ALL = "(all)"
CLIP = 1200
CLIP_REASONING = 4 * CLIP


def _clip(text: str, limit: int = CLIP) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"


def _pre(text: str, limit: int = CLIP) -> str:
    return f'<pre style="white-space:pre-wrap;margin:0">{html.escape(_clip(text, limit))}</pre>'


def _details(kind: str, summary: str, body: str) -> str:
    """A collapsed block (closed until clicked; no `open` attribute)."""
    return f"<details class='kit-{kind}'><summary>{html.escape(summary)}</summary>{body}</details>"


def _readable_call(call: Any) -> Any:
    """One parsed call as {name, arguments} with its arguments decoded where they are JSON text."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return call
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"name": fn.get("name"), "arguments": args}


def tool_calls_html(value: Any) -> str:
    """The engine's parsed calls as a collapsed block ('' when there are none)."""
    calls, problem = load_calls(value)
    if problem:
        return _details("tool-calls", f"tool calls (unreadable: {problem})", _pre(str(value)))
    if not calls:
        return ""
    names = ", ".join(str(_readable_call(c).get("name")) if isinstance(c, dict) else "?" for c in calls)
    text = "\n".join(json.dumps(_readable_call(c), indent=2, ensure_ascii=False, default=str) for c in calls)
    return _details("tool-calls", f"tool calls ({len(calls)}: {names})", _pre(text, CLIP_REASONING))


def answer_html(row: Any) -> str:
    """A row's answer, then its reasoning and parsed tool calls, each collapsed."""
    reasoning, source, answer, unterminated = split_row(row.get("reasoning"), str(row["completion"]))
    body = _pre(answer) if answer else "<i>(no answer text)</i>"
    if reasoning is not None:
        where = "split out by the engine" if source == "parser" else "the <think> text of the completion"
        cut = ", never closed" if unterminated else ""
        label = f"reasoning ({len(reasoning)} chars, {where}{cut})"
        body += _details("reasoning", label, _pre(reasoning, CLIP_REASONING))
    return body + tool_calls_html(row.get("tool_calls"))


def _flag_names(flags: pd.DataFrame | None, idx: Any) -> str:
    if flags is None or idx not in flags.index:
        return ""
    return ", ".join(f for f in flags.columns if bool(flags.at[idx, f]))


def pick_samples(df: pd.DataFrame, flags: pd.DataFrame | None, n: int, seed: int = 0) -> pd.DataFrame:
    """Up to `n` rows: flagged rows first (up to half), the rest a seeded random sample."""
    if df.empty or n <= 0:
        return df.iloc[:0]
    flagged = df.index[flags.any(axis=1)] if flags is not None and len(flags.columns) else df.index[:0]
    first = (
        df.loc[flagged].sample(min(len(flagged), n // 2 or 1), random_state=seed)
        if len(flagged)
        else df.iloc[:0]
    )
    rest = df.drop(index=first.index)
    more = rest.sample(min(len(rest), n - len(first)), random_state=seed)
    return pd.concat([first, more]).sort_index()


def messages_html(messages: Any) -> str:
    """The chat messages as role-labelled blocks."""
    parts = []
    for m in list(messages) if messages is not None else []:
        if isinstance(m, dict):
            parts.append(f"<b>{html.escape(str(m.get('role')))}</b>{_pre(str(m.get('content') or ''))}")
    return "".join(parts)


Fetch = Callable[[pd.Index], pd.DataFrame]
"""Reads the full rows (messages, completion, reasoning, tool calls) behind some facts rows."""


def static_table(
    df: pd.DataFrame, flags: pd.DataFrame | None = None, n: int = 20, fetch: Fetch | None = None
) -> str:
    """A self-contained HTML table of sample rows: id, source, finish reason, flags, messages, and the
    answer with its reasoning and tool calls collapsed. `df` holds the rows, or only their facts
    when `fetch` reads the shown rows' text (kit.analyse.run.RunData.rows)."""
    picked = pick_samples(df, flags, n)
    shown = fetch(picked.index) if fetch is not None and len(picked) else picked
    rows = []
    for idx, r in shown.iterrows():
        meta = (
            f"{html.escape(str(r['id']))}<br>{html.escape(str(r['source']))}<br>"
            f"{html.escape(str(r['finish_reason']))}<br><i>{html.escape(_flag_names(flags, idx))}</i>"
        )
        rows.append(
            f"<tr><td style='vertical-align:top'>{meta}</td>"
            f"<td style='vertical-align:top'>{messages_html(r['messages'])}</td>"
            f"<td style='vertical-align:top'>{answer_html(r)}</td></tr>"
        )
    head = "<tr><th>row</th><th>messages</th><th>answer (reasoning, tool calls: click to open)</th></tr>"
    caption = f"<caption>{len(rows)} of {len(df)} rows (flagged rows first)</caption>"
    return f"<table class='kit-samples' border='1'>{caption}{head}{''.join(rows)}</table>"


def _filtered(
    df: pd.DataFrame, flags: pd.DataFrame | None, source: str, reason: str, flag: str
) -> pd.DataFrame:
    mask = pd.Series(True, index=df.index)
    if source != ALL:
        mask &= df["source"].eq(source)
    if reason != ALL:
        mask &= df["finish_reason"].eq(reason)
    if flag != ALL and flags is not None:
        mask &= flags[flag].reindex(df.index, fill_value=False)
    return df[mask]


def _build_widget(df: pd.DataFrame, flags: pd.DataFrame | None, fetch: Fetch) -> Any:
    import ipywidgets as w

    def dropdown(label: str, values: list[str]) -> Any:
        return w.Dropdown(options=[ALL, *values], description=label)

    src = dropdown("source", sorted(df["source"].unique()))
    reason = dropdown("finish", sorted(df["finish_reason"].unique()))
    flag = dropdown("flag", list(flags.columns) if flags is not None else list(FLAGS))
    pos = w.BoundedIntText(value=0, min=0, max=0, description="row")
    view = w.HTML()

    def refresh(_: Any = None) -> None:
        rows = _filtered(df, flags, src.value, reason.value, flag.value)
        pos.max = max(len(rows) - 1, 0)
        if rows.empty:
            view.value = "<i>no rows match</i>"
            return
        idx = rows.index[min(pos.value, len(rows) - 1)]
        r = fetch(pd.Index([idx])).iloc[0]  # only the row shown is read
        view.value = (
            f"<p>{len(rows)} rows match · id {html.escape(str(r['id']))} · {html.escape(str(r['source']))}"
            f" · {html.escape(str(r['finish_reason']))} · <i>{html.escape(_flag_names(flags, idx))}</i></p>"
            f"{messages_html(r['messages'])}<b>answer</b>{answer_html(r)}"
        )

    for control in (src, reason, flag, pos):
        control.observe(refresh, names="value")
    refresh()
    return w.VBox([w.HBox([src, reason, flag, pos]), view])


def near_duplicate_html(data: RunData, clusters: int = 3, per_cluster: int = 3) -> str:
    """A few near-duplicate clusters (answers, then prompts), each with some of its rows: id, source
    and the text that was near-copied ('' when the run has none or stage 4 did not look)."""
    parts = []
    for kind, column in (("answer", "answer_cluster"), ("prompt", "prompt_cluster")):
        if column not in data.df.columns:
            continue
        cluster = data.df[column]
        sizes = cluster[cluster >= 0].value_counts()
        if sizes.empty:
            continue
        picked = sizes.sort_values(ascending=False, kind="stable").index[:clusters]
        blocks = []
        for c in picked:
            index = cluster.index[cluster.eq(c)][:per_cluster]
            rows = data.rows(index)
            items = []
            for _, r in rows.iterrows():
                if kind == "answer":
                    text = split_row(r.get("reasoning"), str(r["completion"]))[2]
                else:
                    text = last_user_text(r["messages"])
                who = f"{html.escape(str(r['id']))} · {html.escape(str(r['source']))}"
                items.append(f"<li>{who}{_pre(text, CLIP // 3)}</li>")
            blocks.append(
                _details(
                    "near-duplicates", f"{kind} cluster {c}: {sizes[c]} rows", f"<ul>{''.join(items)}</ul>"
                )
            )
        parts.append(
            f"<p><b>Near-duplicate {kind}s</b>: {len(sizes)} clusters, {int(sizes.sum())} rows "
            f"(the {len(picked)} largest below)</p>" + "".join(blocks)
        )
    return "<div class='kit-near-duplicates'>" + "".join(parts) + "</div>" if parts else ""


class SampleBrowser:
    """The widget (when available) plus the static HTML table; Jupyter shows the best it can."""

    def __init__(self, html_table: str, widget: Any = None) -> None:
        self.html = html_table
        self.widget = widget

    def _repr_html_(self) -> str:
        return self.html

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        plain = f"<SampleBrowser: {self.html.count('<tr>') - 1} rows>"
        return live_bundle(self.html, plain, self.widget, **kwargs)


def sample_browser(
    rows: pd.DataFrame | RunData,
    n: int = 20,
    flags: pd.DataFrame | None = None,
    params: AnalyseParams | None = None,
    interactive: bool | None = None,
) -> SampleBrowser:
    """A browser over generation rows: a run as read by stage 4 (`RunData`: only the rows shown are
    read from the shards) or rows in memory (a DataFrame as from `load_generations`).

    `flags` default to the run's, or `compute_flags(df, params)`. interactive=None: a widget when
    running in a live kernel with ipywidgets; always a static table of `n` samples (flagged rows
    first) for reports and headless runs.
    """
    if isinstance(rows, RunData):
        df, flags, fetch = rows.df, rows.flags if flags is None else flags, rows.rows
    else:
        df = rows
        if "completion" not in df.columns and "shard" in df.columns:
            raise RunFolderError(
                "sample_browser got a run's facts (RunData.df: no text): pass the RunData itself, "
                "sample_browser(data), and it reads the rows it shows from the shards"
            )
        flags = compute_flags(df, params) if flags is None and len(df) else flags
        fetch = df.loc.__getitem__
    table = static_table(df, flags, n, fetch)
    if isinstance(rows, RunData):
        table += near_duplicate_html(rows)
    if interactive is None:
        interactive = in_live_kernel()
    widget = None
    if interactive and len(df):
        try:
            widget = _build_widget(df, flags, fetch)
        except ImportError:
            widget = None
    return SampleBrowser(table, widget)
