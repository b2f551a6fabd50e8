"""`kit report outputs/<run>`: the executed notebooks as self-contained HTML, plus an index.

Reports must open on an air-gapped cluster: images are embedded as data: URIs, and the template
drops every script or stylesheet nbconvert would fetch from a CDN (require.js, MathJax, Mermaid,
the widget manager). Widget views are removed too (the sample browser carries a static table).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import jinja2
import nbformat
from nbconvert import HTMLExporter

from kit.errors import KitError
from kit.runfolder import write_text_atomic

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
OFFLINE_TEMPLATE = "kit_offline.html.j2"
_TEMPLATE_SOURCE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
FETCHING = re.compile(
    r"""<(?:script|link|img|iframe|source|audio|video|embed|object)\b[^>]*?\b(?:src|href|data)\s*=\s*["']?\s*"""
    r"""((?:https?:)?//[^"'\s>]+)|url\(\s*["']?((?:https?:)?//[^)"']+)|@import\s+["']((?:https?:)?//[^"']+)""",
    re.IGNORECASE,
)


def network_references(page: str) -> list[str]:
    """URLs a browser would fetch from the network to show `page` (scripts, styles, images, frames)."""
    return [next(g for g in m.groups() if g) for m in FETCHING.finditer(page)]


def _exporter(hide_code: bool) -> HTMLExporter:
    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[jinja2.DictLoader({OFFLINE_TEMPLATE: _TEMPLATE_SOURCE})],
        embed_images=True,
        exclude_input=hide_code,
        exclude_input_prompt=hide_code,
        exclude_output_prompt=hide_code,
    )
    exporter.template_file = OFFLINE_TEMPLATE
    return exporter


def _drop_widgets(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data and WIDGET_VIEW in data and len(data) > 1:
                data.pop(WIDGET_VIEW)
    return nb


def render_notebook(path: Path, out_dir: Path, hide_code: bool = True) -> tuple[Path, list[str]]:
    """Render one executed notebook to `out_dir/<stem>.html` without CDN assets.

    Returns the HTML path and the URLs the page still fetches (from the notebook's own content,
    e.g. a remote image in a markdown cell), which the index lists as a warning.
    """
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # nbformat raises several unrelated types for a bad file
        raise KitError(f"{path}: not a readable notebook ({e}); re-run the stage that executed it") from None
    body, _ = _exporter(hide_code).from_notebook_node(
        _drop_widgets(nb), resources={"metadata": {"name": path.stem}}
    )
    target = out_dir / f"{path.stem}.html"
    write_text_atomic(target, body)
    return target, network_references(body)


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _dig(d: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _chosen_arm(decision: dict[str, Any]) -> Any:
    arm = decision.get("chosen_arm")
    if arm is None:
        return None
    by = decision.get("decided_by")
    return f"{arm} ({by})" if by else arm


def _gpu_line(probe: dict[str, Any]) -> str | None:
    devices = _dig(probe, "gpus", "devices")
    if not isinstance(devices, list):
        devices = probe.get("gpus") if isinstance(probe.get("gpus"), list) else []
    names = [str(d.get("name")) for d in devices if isinstance(d, dict) and d.get("name")]
    if not names:
        return "none (CPU)" if probe else None
    return " + ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def headline_numbers(run_dir: Path) -> dict[str, Any]:
    """Rows generated, failures, output tok/s, chosen arm and GPU, from whichever JSON files exist."""
    summary, manifest = _load(run_dir / "summary.json"), _load(run_dir / "manifest.json")
    rows = summary.get("rows", manifest.get("rows"))
    failures = _dig(summary, "health", "failures")
    return {
        "run": run_dir.name,
        "rows generated": rows,
        "failures": failures if failures is not None else manifest.get("failures"),
        "output tok/s": _dig(summary, "health", "output_tok_s"),
        "complete": manifest.get("complete") if manifest else None,
        "chosen arm": _chosen_arm(_load(run_dir / "decision.json")),
        "GPU": _gpu_line(_load(run_dir / "probe.json")),
        "gaps": summary.get("gaps", []),
    }


INDEX = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3em .8em;text-align:left}}
.warn{{color:#a40}}</style></head>
<body><h1>{title}</h1>
<h2>Headline</h2><table>{numbers}</table>
{gaps}
<h2>Reports</h2><ul>{links}</ul>
</body></html>
"""


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def index_html(run_dir: Path, pages: list[tuple[Path, list[str]]]) -> str:
    """The index page: headline numbers, gaps from summary.json, and one link per report."""
    numbers = headline_numbers(run_dir)
    gaps = numbers.pop("gaps") or []
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in numbers.items()
    )
    gap_html = (
        (
            "<h2>Gaps</h2><ul>"
            + "".join(f"<li class='warn'>{html.escape(str(g))}</li>" for g in gaps)
            + "</ul>"
        )
        if gaps
        else ""
    )
    links = []
    for page, remote in pages:
        warn = (
            (
                f" <span class='warn'>(fetches {len(remote)} resource(s) from the network: "
                f"{html.escape(', '.join(remote[:3]))})</span>"
            )
            if remote
            else ""
        )
        links.append(f"<li><a href='{html.escape(page.name)}'>{html.escape(page.stem)}</a>{warn}</li>")
    return INDEX.format(
        title=html.escape(f"Run {run_dir.name}"), numbers=rows, gaps=gap_html, links="".join(links)
    )


def render_report(run_dir: Path, hide_code: bool = True) -> Path:
    """Render run_dir/notebooks/*.ipynb into run_dir/report/ as offline HTML; write and return index.html."""
    run_dir = Path(run_dir)
    notebooks = sorted((run_dir / "notebooks").glob("*.ipynb"))
    if not notebooks:
        raise KitError(
            f"no executed notebooks in {run_dir / 'notebooks'}: execute the stage notebooks first "
            "(papermill writes them there), then run `kit report` again"
        )
    out_dir = run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = [render_notebook(nb, out_dir, hide_code) for nb in notebooks]
    index = out_dir / "index.html"
    write_text_atomic(index, index_html(run_dir, pages))
    return index
