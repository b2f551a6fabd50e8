"""`kit report outputs/<run>`: the executed notebooks as self-contained HTML, plus an index.

Reports must open on an air-gapped cluster: images are embedded as data: URIs, and the template
drops every script or stylesheet nbconvert would fetch from a CDN (require.js, MathJax, Mermaid,
the widget manager). Widget views are removed too (the sample browser carries a static table).

A reader sees what the run concluded, not how it got there: progress bars (tqdm frames on stderr
or stdout, progress widgets) are left out, the rest of stderr (warnings) is kept as one message
block per cell, and images carry the alt text the kit gave them (`kit.display.figure_image`).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import jinja2
import nbformat
from nbconvert import HTMLExporter

from kit.errors import KitError
from kit.index_page import index_html
from kit.runfolder import RunFolder, write_text_atomic

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
OFFLINE_TEMPLATE = "kit_offline.html.j2"
PAGE_CSS = """
body.jp-Notebook main{max-width:72em;margin:0 auto}
.kit-nav{font:14px sans-serif;padding:.5em 1em}
.jp-RenderedHTMLCommon h3{margin-top:1.2em}
.jp-RenderedHTMLCommon table.kit-table{font-size:13px;margin:.3em 0 1em;table-layout:auto}
.jp-RenderedHTMLCommon table.kit-table td,
.jp-RenderedHTMLCommon table.kit-table th{text-align:left;padding:.25em .7em}
details.kit-fold>summary{cursor:pointer;color:#1a5fb4;margin:.3em 0}
.kit-messages{border-left:4px solid #c88a00;background:#fff8e6;padding:.4em .8em;margin:.4em 0}
.kit-messages pre{white-space:pre-wrap;margin:.3em 0 0;font-size:12px}
"""
_TEMPLATE_SOURCE = (
    """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_css -%}<style type="text/css">"""
    + PAGE_CSS
    + """</style>{%- endblock html_head_css -%}
{%- block body_header -%}{{ super() }}<nav class="kit-nav"><a href="index.html">&larr; run summary</a></nav>
{%- endblock body_header -%}
{%- block data_png scoped -%}
{%- set alt = output | get_metadata('alt', 'image/png') -%}
{%- if alt -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}" alt="{{ alt | escape_html }}">
</div>
{%- else -%}{{ super() }}{%- endif -%}
{%- endblock data_png -%}
"""
)
FETCHING = re.compile(
    r"""<(?:script|link|img|iframe|source|audio|video|embed|object)\b[^>]*?\b(?:src|href|data)\s*=\s*["']?\s*"""
    r"""((?:https?:)?//[^"'\s>]+)|url\(\s*["']?((?:https?:)?//[^)"']+)|@import\s+["']((?:https?:)?//[^"']+)""",
    re.IGNORECASE,
)
PROGRESS_FRAME = re.compile(r"\[\d+:\d{2}(?::\d{2})?(?:<|,|\])")
"""tqdm's `[elapsed<remaining, rate]` or `[elapsed, rate]`: a progress bar frame, not a message."""


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


def printed_messages(text: str) -> list[str]:
    """The lines of a stderr stream a reader needs: progress-bar frames and blank redraws dropped."""
    lines = (line.strip() for line in re.split(r"[\r\n]", text))
    return list(dict.fromkeys(line for line in lines if line and not PROGRESS_FRAME.search(line)))


def _messages_output(lines: list[str]) -> nbformat.NotebookNode:
    body = html.escape("\n".join(lines))
    page = (
        "<div class='kit-messages'><b>Printed while this step ran</b> (warnings and notes; "
        f"progress bars left out):<pre>{body}</pre></div>"
    )
    return nbformat.v4.new_output("display_data", data={"text/html": page, "text/plain": "\n".join(lines)})


def _is_stream(out: Any, name: str) -> bool:
    return out.get("output_type") == "stream" and out.get("name") == name


def _without_bars(text: str) -> str:
    """stdout as a terminal would leave it (the last frame of each line), progress-bar lines dropped."""
    lines = (line.split("\r")[-1] for line in text.split("\n"))
    return "\n".join(line for line in lines if not PROGRESS_FRAME.search(line))


def _for_reading(outputs: list[Any]) -> list[Any]:
    """A cell's outputs with its stderr streams folded into one message block (none if all were bars),
    progress bars dropped from stdout, and widgets that have no HTML (progress widgets) dropped."""
    stderr = [o for o in outputs if _is_stream(o, "stderr")]
    lines = printed_messages("".join(o.get("text", "") for o in stderr))
    kept, placed = [], False
    for out in outputs:
        data = out.get("data") or {}
        if WIDGET_VIEW in data and "text/html" not in data:
            continue
        if _is_stream(out, "stderr"):
            if lines and not placed:
                kept.append(_messages_output(lines))
            placed = True
            continue
        if _is_stream(out, "stdout"):
            out.text = _without_bars(out.get("text", ""))
            if not out.text.strip():
                continue
        kept.append(out)
    return kept


def for_reading(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The executed notebook as a reader sees it: widget views (which need a CDN) dropped, stderr
    (progress bars, warnings) replaced by a block of the messages alone."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if "outputs" not in cell:
            continue
        cell.outputs = _for_reading(cell.outputs)
        for out in cell.outputs:
            (out.get("data") or {}).pop(WIDGET_VIEW, None)
    return nb


def render_notebook(path: Path, target: Path, hide_code: bool = True) -> tuple[Path, list[str]]:
    """Render one executed notebook to the HTML page `target` without CDN assets.

    Returns the HTML path and the URLs the page still fetches (from the notebook's own content,
    e.g. a remote image in a markdown cell), which the index lists as a warning.
    """
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # nbformat raises several unrelated types for a bad file
        raise KitError(f"{path}: not a readable notebook ({e}); re-run the stage that executed it") from None
    body, _ = _exporter(hide_code).from_notebook_node(
        for_reading(nb), resources={"metadata": {"name": path.stem}}
    )
    write_text_atomic(target, body)
    return target, network_references(body)


def render_report(run_dir: Path, hide_code: bool = True) -> Path:
    """Render the run's executed notebooks (notebooks/*.ipynb) into report/ as offline HTML; write
    and return report/index.html."""
    folder = RunFolder(Path(run_dir))
    notebooks = folder.notebook_paths()
    if not notebooks:
        raise KitError(
            f"no executed notebooks in {folder.notebooks}: execute the stage notebooks first "
            "(papermill writes them there), then run `kit report` again"
        )
    folder.report.mkdir(parents=True, exist_ok=True)
    pages = [render_notebook(nb, folder.report_page(nb.stem), hide_code) for nb in notebooks]
    write_text_atomic(folder.report_index, index_html(folder, pages))
    return folder.report_index
