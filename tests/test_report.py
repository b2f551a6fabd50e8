"""`kit report`: executed notebooks to offline HTML, checked in headless Chromium with the network off."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_analyse_fixture import build_run  # noqa: E402

from kit.errors import KitError  # noqa: E402
from kit.report import WIDGET_VIEW, network_references, render_report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
H200_PROBE = REPO / "docs" / "lab" / "h200" / "probe.json"
SPEC_DECISION = {
    "chosen_arm": "spec_k3",
    "decided_by": "measured",
    "engine_settings": {"spec_k": 3, "client_concurrency": 16},
    "speculation_unavailable_reason": None,
    "table": [
        {"arm": "plain", "spec_k": 0, "concurrency": 16, "predicted_tok_s": 90.0, "measured_tok_s": 80.0,
         "status": "ok"},
        {"arm": "spec_k3", "spec_k": 3, "concurrency": 4, "predicted_tok_s": 60.0, "measured_tok_s": 61.0,
         "status": "ok"},
        {"arm": "spec_k3", "spec_k": 3, "concurrency": 16, "predicted_tok_s": 110.0, "measured_tok_s": 120.0,
         "status": "ok"},
    ],
}  # fmt: skip
NO_ALT = "No description has been provided for this image"  # what nbconvert writes for a missing alt
LONG_FLOAT = re.compile(r"\d\.\d{4,}")


def readability_problems(page: str) -> list[str]:
    """What a reader should not meet on a rendered page: stderr blocks, pandas index columns, floats
    with more than 3 decimals in table cells (sample rows' own text aside), images without alt text."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page, "html.parser")
    problems = [f"stderr block: {b.get_text()[:80]!r}" for b in soup.select('[data-mime-type*="stderr"]')]
    for t in soup.find_all("table"):
        rows = t.find_all("tr")
        head = t.thead.find_all("tr") if t.thead else rows[:1]
        for r in head:
            first = r.find(["th", "td"])
            if first is not None and not first.get_text(strip=True):
                problems.append(f"blank first header cell (an index): {r.get_text(' ', strip=True)[:80]!r}")
        problems += [
            f"row header (an index): {r.get_text(' ', strip=True)[:80]!r}"
            for r in rows
            if r not in head and r.find("th")
        ]
        if "kit-samples" not in (t.get("class") or []):
            problems += [
                f"long float: {td.get_text()!r}"
                for td in t.find_all("td")
                if LONG_FLOAT.search(td.get_text())
            ]
    for img in soup.find_all("img"):
        if not img.get("alt") or img["alt"] == NO_ALT:
            problems.append(f"image without alt text: {str(img)[:60]}")
    return problems


CELLS = [
    ("code", "run_dir = ''", ["parameters"]),
    ("markdown", "# Analysis of a fixture run\n\nInline math $E = (1 - a^{k+1}) / (1 - a)$.", []),
    (
        "code",
        "from pathlib import Path\nfrom IPython.display import display\n"
        "from kit.analyse import analyse_run, read_run, sample_browser\nfrom kit.runfolder import RunFolder\n"
        "from kit.analyse.view import analysis_figures, analysis_tables\n"
        "folder = RunFolder(Path(run_dir))\nsummary = analyse_run(folder)\n"
        "for t in analysis_tables(summary):\n    display(t)\n"
        "for image in analysis_figures(summary)[:3]:\n    display(image)",
        [],
    ),
    (
        "code",
        "import logging, sys\nfrom tqdm.std import tqdm\n"
        "for _ in tqdm(range(3), desc='BAR_MARKER', file=sys.stderr, mininterval=0):\n    pass\n"
        "logging.getLogger('kit.test').warning('WARNED_MARKER: a reader must see this')",
        [],
    ),
    ("code", "data = read_run(folder)\nsample_browser(data, n=4)", []),
    ("code", "SECRET_CODE_MARKER = 1\nprint('rows', summary['rows'])", []),
]


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src, tags in CELLS:
        cell = nbformat.v4.new_code_cell(src) if kind == "code" else nbformat.v4.new_markdown_cell(src)
        cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


@pytest.fixture(scope="module")
def executed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fixture run whose analysis notebook was executed by papermill, as the stages do."""
    papermill = pytest.importorskip("papermill")
    run = build_run(tmp_path_factory.mktemp("report") / "run")
    run.notebooks.mkdir(parents=True, exist_ok=True)
    source = run.root / "04_analyse.ipynb"
    nbformat.write(_notebook(), source)
    papermill.execute_notebook(
        str(source),
        str(run.notebooks / "04_analyse.ipynb"),
        parameters={"run_dir": str(run.root)},
        kernel_name="python3",
        progress_bar=False,
    )
    return run.root


@pytest.mark.slow
def test_render_report_is_self_contained(executed_run: Path) -> None:
    index = render_report(executed_run, hide_code=True)
    page = (index.parent / "04_analyse.html").read_text()
    assert network_references(page) == []
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?://""", page, re.IGNORECASE)
    images = re.findall(r"<img[^>]+src=\"([^\"]+)\"", page)
    assert len(images) >= 3 and all(s.startswith("data:image/png;base64,") for s in images)
    assert "SECRET_CODE_MARKER" not in page  # code hidden
    assert "kit-samples" in page  # the sample browser's static table replaced the widget
    assert "application/vnd.jupyter.widget" not in page
    assert "WARNED_MARKER: a reader must see this" in page and "BAR_MARKER" not in page
    assert readability_problems(page) == []
    text = index.read_text()
    assert "04_analyse.html" in text and "20 rows in 2 parquet shard(s)" in text
    assert "decision.json is missing: stage 2 has not run" in text  # a stage not run is named
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?://""", text, re.IGNORECASE)


@pytest.mark.slow
def test_render_report_can_show_code(executed_run: Path) -> None:
    index = render_report(executed_run, hide_code=False)
    assert "SECRET_CODE_MARKER" in (index.parent / "04_analyse.html").read_text()


def test_missing_notebooks_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="no executed notebooks"):
        render_report(tmp_path)


def test_network_references_finds_fetching_tags() -> None:
    page = (
        '<script src="https://cdn.x/require.js"></script><link rel="stylesheet" href="//fonts.y/css">'
        '<img src="data:image/png;base64,AAA"><a href="https://example.org">a link is not fetched</a>'
        '<style>@import "https://z/a.css"; .a{background:url(http://w/b.png)}</style>'
    )
    assert network_references(page) == [
        "https://cdn.x/require.js",
        "//fonts.y/css",
        "https://z/a.css",
        "http://w/b.png",
    ]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)
CHECKER = """<!DOCTYPE html><html><body><iframe id="f" src="{url}" width="1200" height="900"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => setTimeout(() => {{
  let out;
  try {{
    const imgs = Array.from(document.getElementById('f').contentDocument.images);
    const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
    out = 'IMAGES ' + imgs.length + ' LOADED ' + ok;
  }} catch (e) {{ out = 'ERROR ' + e; }}
  const p = document.createElement('pre'); p.id = 'result'; p.textContent = out; document.body.appendChild(p);
}}, 300));
</script></body></html>
"""


def _chromium(tmp: Path, *args: str) -> str:
    """Run headless Chromium with every network name unresolvable; return its stdout."""
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--allow-file-access-from-files",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def require_chromium() -> None:
    """Skip without Chromium, or fail when KIT_REQUIRE_ENGINES=1 (CI installs it: .ci/run)."""
    if CHROMIUM is None:
        message = "chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get("KIT_REQUIRE_ENGINES") == "1":
            pytest.fail(message)
        pytest.skip(message)


FIRST_SCREEN = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="{url}" width="1280" height="800" style="border:0"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => setTimeout(() => {{
  const d = document.getElementById('f').contentDocument;
  const items = d.querySelectorAll('ul.answers > li');
  const bottom = Math.max(...Array.from(items).map(e => e.getBoundingClientRect().bottom));
  const p = document.createElement('pre'); p.id = 'result';
  p.textContent = 'ANSWERS ' + items.length + ' BOTTOM ' + Math.round(bottom);
  document.body.appendChild(p);
}}, 300));
</script></body></html>
"""


def first_screen(index: Path) -> dict[str, int]:
    """How many answers the index shows and where the last one ends, in a 1280 x 800 window."""
    require_chromium()
    with tempfile.TemporaryDirectory() as tmp:
        checker = Path(tmp) / "first-screen.html"
        checker.write_text(FIRST_SCREEN.format(url=index.resolve().as_uri()))
        dom = _chromium(Path(tmp), "--virtual-time-budget=10000", "--dump-dom", checker.as_uri())
    found = re.search(r"ANSWERS (\d+) BOTTOM (-?\d+)", dom)
    assert found, f"checker did not report: {dom[-500:]}"
    return {"answers": int(found.group(1)), "bottom": int(found.group(2))}


def screenshots(pages: list[Path], name: str) -> list[Path]:
    """Screenshots of `pages` in headless Chromium (network blocked), kept as test artifacts under
    $KIT_TEST_ARTIFACTS (default outputs/test-artifacts/report/); the index at one screen's height."""
    require_chromium()
    out = Path(os.environ.get("KIT_TEST_ARTIFACTS", REPO / "outputs" / "test-artifacts")) / "report"
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with tempfile.TemporaryDirectory() as tmp:
        for page in pages:
            shot = out / f"{name}-{page.stem}.png"
            size = "1280,800" if page.stem == "index" else "1280,2400"
            _chromium(
                Path(tmp), f"--window-size={size}", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri()
            )
            assert shot.read_bytes()[:4] == b"\x89PNG"
            print(f"screenshot: {shot}")
            shots.append(shot)
    return shots


def _images_loaded(tmp: Path, page: Path) -> tuple[int, int]:
    """(images on the page, images that decoded) as seen by Chromium after the page loaded."""
    checker = tmp / f"check-{page.stem}.html"
    checker.write_text(CHECKER.format(url=page.resolve().as_uri()))
    dom = _chromium(tmp, "--virtual-time-budget=10000", "--dump-dom", checker.as_uri())
    found = re.search(r"IMAGES (\d+) LOADED (\d+)", dom)
    assert found, f"checker did not report: {dom[-500:]}"
    return int(found.group(1)), int(found.group(2))


@needs_chromium
def test_checker_sees_blocked_network(tmp_path: Path) -> None:
    """The browser check can fail: a remote image does not load with the network blocked."""
    page = tmp_path / "control.html"
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    page.write_text(f'<img src="data:image/png;base64,{pixel}"><img src="https://example.com/x.png">')
    assert _images_loaded(tmp_path, page) == (2, 1)


@pytest.mark.slow
@needs_chromium
def test_report_opens_offline_in_chromium(executed_run: Path, tmp_path: Path) -> None:
    index = render_report(executed_run, hide_code=True)
    dom = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", index.as_uri())
    links = re.findall(r'<a href="([^"]+\.html)"', dom)
    assert links == ["04_analyse.html"] and "20 rows in 2 parquet shard(s)" in dom
    for name in links:
        total, loaded = _images_loaded(tmp_path, index.parent / name)
        assert total >= 3 and loaded == total
    for page in (index, index.parent / links[0]):
        shot = tmp_path / f"{page.stem}.png"
        _chromium(
            tmp_path, "--window-size=1200,1600", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri()
        )
        assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 5000
        print(f"screenshot: {shot}")


def test_answers_from_every_json(tmp_path: Path) -> None:
    from kit.analyse import analyse_run
    from kit.index_page import run_answers
    from kit.runfolder import write_json_atomic

    run = build_run(tmp_path / "run")
    analyse_run(run)
    write_json_atomic(run.probe, json.loads(H200_PROBE.read_text()))
    write_json_atomic(run.decision, SPEC_DECISION)
    answers = {a.topic: a for a in run_answers(run)}
    env = answers["Environment"]
    assert env.headline == "NO-GO" and env.status == "fail"
    assert "3 of " in env.detail and "on 1 x NVIDIA H200" in env.detail
    assert "no *.safetensors weights in the directory" in env.detail and "Do: download" in env.detail
    decision = answers["Decision"]
    assert decision.headline == "MTP k=3 (measured)"
    assert "Measured by the sweep: 120 output tok/s at concurrency 16" in decision.detail
    assert "50% more than the best of plain decoding (80 tok/s at concurrency 16)" in decision.detail
    assert answers["Generation"].headline == "20 of 20 rows" and "complete" in answers["Generation"].detail
    failures = answers["Failures"]  # stage 4's count: the retried-then-done id is not a failure
    assert failures.headline == "3 failed" and "2 timeout, 1 server error" in failures.detail
    assert (
        answers["Throughput"].headline.endswith("output tok/s")
        and "over 20.0 s" in answers["Throughput"].detail
    )
    # the decision states the sweep's figure with its interval; the run's tokens/s is read against
    # it, not said twice on the first screen; no one-sample "peak"
    assert "120 output tok/s at concurrency 16 (measured once: no interval)" in decision.detail
    against = "; below the sweep's one measurement of MTP k=3 at 16 (the decision)"
    assert against in answers["Throughput"].detail and "120" not in answers["Throughput"].detail
    assert "; peak" not in answers["Throughput"].detail
    run.decision.write_text("{broken")
    assert {a.topic: a for a in run_answers(run)}["Decision"].status == "missing"


def test_the_index_leads_with_the_rows_kit_export_keeps(tmp_path: Path) -> None:
    """A complete run with no failed request whose answers are half unusable (cut at max_tokens,
    empty, repeated, a broken tool call): the index opens with the share `kit export` keeps, the
    reasons for the rest and where the export is; "Failures: none" does not read as all well."""
    from kit.analyse import run_analysis
    from kit.export import ExportOptions, export_run
    from kit.export.fitness import with_fitness
    from kit.index_page import index_html, run_answers

    run = build_run(tmp_path / "run", failures=False)
    fitness = with_fitness(run, run_analysis(run, progress=False)).summary.fitness
    assert run.read_summary().fitness == fitness  # written to summary.json
    result = export_run(run.root, ExportOptions(to=run.dataset), progress=False)  # as notebook 04 does
    assert fitness.usable == result.splits["train"] and fitness.rows == 20
    assert fitness.dropped == {r: n for r, n in result.reasons.items() if n}
    assert list(fitness.dropped)[0] == "truncated"  # most first

    answers = run_answers(run)
    data = answers[0]
    share = f"{100 * result.splits['train'] / 20:.0f}%"
    assert (data.topic, data.headline) == ("Data", f"{result.splits['train']} of 20 rows usable ({share})")
    left = 20 - fitness.usable  # the index names the rules; notebook 04 says what each means
    assert (
        data.status == "warn"
        and f"leave out {left}: {fitness.dropped['truncated']} truncated, " in data.detail
    )
    assert "Exported to dataset/ in the run folder (`train`: these rows;" in data.detail
    failures = {a.topic: a for a in answers}["Failures"]
    assert failures.headline == "none" and failures.status == "warn"
    assert f"{20 - result.splits['train']} answer(s) are not fit to keep" in failures.detail
    page = index_html(run, [])
    assert page.index("rows usable") < page.index("Environment")  # the first answer on the page
    assert f"datasets.load_dataset(&quot;{run.dataset.resolve()}&quot;)" in page
    assert readability_problems(page) == []
    from kit.analyse.view import analysis_verdict  # notebook 04 opens with the same

    verdict = analysis_verdict(run.read_summary())
    assert (
        verdict.startswith(f"## Verdict: {data.headline}, ")
        and f"**Fit to train on: {data.headline}.**" in verdict
    )
    assert f"{fitness.dropped['truncated']} truncated: cut by max_tokens (finish_reason length); " in verdict


def test_the_key_figure_fits_its_title_and_names_every_line() -> None:
    """The index's figure: its title inside the canvas (a long one was cut at both ends), the dotted
    curves and the shading in the legend, and the legend under the axes, covering no point."""
    import struct

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from kit.artifacts import Decision
    from kit.decide.costmodel.validation import ErrorBand
    from kit.decide.views.plots import throughput_curves
    from kit.index_page import key_figure_png

    rows = [dict(r, predicted_before_tok_s=r["predicted_tok_s"] * 1.5) for r in SPEC_DECISION["table"]]
    decision = Decision.from_json(
        {**SPEC_DECISION, "table": rows, "efficiency": {"source": "fit to the sweep"}}
    )
    band = ErrorBand(-0.38, 0.38, 24)
    fig = Figure(figsize=(6.4, 3.8))
    ax = throughput_curves(decision, fig.subplots(), "MTP", band)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    title = ax.title.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.x1, (title, fig.bbox)
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert "predicted before measuring (dotted)" in labels and f"shaded: {band.label}" in labels
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert dotted and any(getattr(h, "get_linestyle", lambda: "")() == ":" for h in legend.legend_handles)
    assert legend.get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0  # under the axes
    png = key_figure_png(decision, "MTP", band)
    width, height = struct.unpack(">II", png[16:24])
    assert width >= title.width and height > 380  # the legend under the axes made the image taller


def test_a_plan_left_short_is_said_once_in_stage_3s_outcome(tmp_path: Path) -> None:
    """The plan's warning (a source short of its count) is said where it matters, stage 3's outcome
    and the index, from plan.json: not as a log warning on the page of whichever stage planned."""
    from kit.generate.view import generation_verdict
    from kit.index_page import run_answers
    from kit.runfolder import write_json_atomic

    run = build_run(tmp_path / "run")
    warning = "source 'chat' gave 13 of 15 planned prompts; filter duplicate dropped 2 rows. To fix: ..."
    write_json_atomic(run.plan, {**json.loads(run.plan.read_text()), "warnings": [warning]})
    generation = {a.topic: a for a in run_answers(run)}["Generation"]
    assert generation.status == "warn" and generation.headline == "20 of 20 rows"
    assert generation.detail.endswith(
        "The plan holds fewer prompts than asked: chat 13 of 15 (the Generate page says why)."
    )
    verdict = generation_verdict(run)
    assert verdict.count(warning) == 1 and f"- **Plan:** {warning}" in verdict


def test_index_of_a_run_with_no_stage_says_what_is_missing(tmp_path: Path) -> None:
    from kit.index_page import index_html, run_answers
    from kit.runfolder import RunFolder

    folder = RunFolder(tmp_path / "empty").ensure()
    answers = run_answers(folder)
    assert [a.status for a in answers] == ["missing"] * 6
    page = index_html(folder, [])
    for said in ("stage 1 has not run", "stage 2 has not run", "stage 3 has not run", "not rendered"):
        assert said in page
    assert "<img" not in page and readability_problems(page) == []


def test_a_measured_headline_states_its_interval_and_the_run_is_read_against_it() -> None:
    """Issue 60: the index led with one number (242 tok/s) from a sweep at ±43% noise; it states the
    level's 90% interval, and the run's own tokens/s says where it fell against it."""
    from kit.artifacts import Decision
    from kit.decide.views.verdict import against_sweep, decision_answer

    row = {"arm": "plain", "spec_k": 0, "concurrency": 16, "measured_tok_s": 242.4, "measured_lo": 160.2,
           "measured_hi": 310.0, "repetitions": 3, "status": "ok"}  # fmt: skip
    decision = Decision.from_json({"chosen_arm": "plain", "decided_by": "measured", "table": [row]})
    detail = decision_answer(decision).detail
    assert "242 output tok/s at concurrency 16 (90% interval 160-310, 3 repetitions)" in detail
    said = [against_sweep(decision, v) for v in (100.0, 200.0, 400.0)]
    assert [s.split(" the sweep's 90% interval")[0] for s in said] == ["below", "within", "above"]
    assert said[0].endswith("interval for plain decoding at 16 (the decision)")


def test_predicted_decision_and_speculation_not_measured() -> None:
    from kit.artifacts import Decision
    from kit.decide.views.verdict import decision_answer

    table = [
        {"arm": "plain", "spec_k": 0, "concurrency": 8, "predicted_tok_s": 100.0, "status": "not measured"},
        {"arm": "spec_k2", "spec_k": 2, "concurrency": 8, "predicted_tok_s": 150.0, "status": "skipped",
         "reason": "the checkpoint lacks its MTP weights"},
    ]  # fmt: skip
    decision = {
        "chosen_arm": "plain",
        "decided_by": "predicted",
        "engine_settings": {"spec_k": 0, "client_concurrency": 8},
        "speculation_unavailable_reason": "the checkpoint lacks its MTP weights",
        "table": table,
    }
    a = decision_answer(Decision.from_json(decision), "MTP", worth="If MTP could run here, ...")
    assert a.headline == "plain decoding (predicted only)" and a.status == "warn"
    assert "Predicted, nothing measured: 100 output tok/s at concurrency 8" in a.detail
    assert "MTP k=2 would give 50% more (150 tok/s at concurrency 8), but it cannot run here." in a.detail
    assert "Speculation could not be measured: the checkpoint lacks its MTP weights." in a.detail
    assert a.detail.endswith("If MTP could run here, ...")
    runs = decision_answer(Decision.from_json({**decision, "speculation_unavailable_reason": None}), "n-gram")
    assert "n-gram k=2 would give 50% more" in runs.detail and "within the run-to-run noise" in runs.detail


def test_stderr_becomes_messages_without_progress_bars() -> None:
    from kit.report import for_reading, printed_messages

    stream = [  # what papermill saved from notebook 02 of the demo: plan and sweep bars, one warning
        "\rplan infinity_instruct:   0%|          | 0/20 [00:00<?, ?it/s]",
        "\r                                                              ",
        "\rsource 'infinity_instruct' gave 17 of 20 planned prompts; lower the count.\n",
        "\rsweep:   8%|▊         | 1/12 [01:10<12:58, 70.76s/level]",
        "\rsweep: 100%|██████████| 12/12 [01:37<00:00,  8.11s/level]",
        "\rgenerate: 5row [00:01,  3.20row/s]",
        "\n",
    ]
    assert printed_messages("".join(stream)) == [
        "source 'infinity_instruct' gave 17 of 20 planned prompts; lower the count."
    ]
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=t) for t in stream]
    cell.outputs.insert(2, nbformat.v4.new_output("display_data", data={"text/plain": "table"}))
    bars_only = nbformat.v4.new_code_cell("y")
    widget = {WIDGET_VIEW: {"model_id": "m"}, "text/plain": "Generating train split: 0 examples [00:00, ?]"}
    bars_only.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=stream[0]),
        nbformat.v4.new_output("display_data", data=widget),  # datasets' progress widget
        nbformat.v4.new_output("stream", name="stdout", text="rows 20\nstep: 50%|##  | 1/2 [00:01<00:01]\n"),
    ]
    nb.cells = [cell, bars_only]
    for_reading(nb)
    kinds = [(o.output_type, o.get("name")) for o in cell.outputs]
    assert kinds == [("display_data", None), ("display_data", None)]
    assert "gave 17 of 20" in cell.outputs[0].data["text/html"]
    assert cell.outputs[1].data["text/plain"] == "table"
    assert [(o.output_type, o.get("text")) for o in bars_only.outputs] == [("stream", "rows 20\n")]


def test_table_for_reading() -> None:
    import pandas as pd

    from kit.display import gib, number, percent, seconds, table

    assert [number(0.85), number(1234.56), number(7.0), seconds(119.6), gib(3 * 1024**3)] == [
        "0.85",
        "1,235",
        "7",
        "2 min 0 s",
        "3.0 GiB",
    ]

    df = pd.DataFrame(
        {"output_tok_s": [6.910904, 24.316822, 143.47], "spec_k": [0, 1, 2], "share": [0.5, 0.25, 1.0]},
        index=["a", "b", "c"],
    )
    t = table(df, "Levels", formats={"share": percent}, index_name="source")
    assert list(t.frame.columns) == ["source", "output tok/s", "draft length k", "share"]
    assert t.frame["output tok/s"].tolist() == ["6.9", "24.3", "143.5"]
    assert t.frame["share"].tolist() == ["50.0%", "25.0%", "100.0%"]
    page = t._repr_html_()
    assert "<details" not in page and readability_problems(page) == []
    long = table(pd.DataFrame({"x": range(30)}), "Long", summary="30 levels")
    assert long._repr_html_().startswith("<h3>Long</h3><details class='kit-fold'><summary>30 levels")


NOTEBOOK_04 = Path(__file__).resolve().parents[1] / "notebooks" / "04_analyse_outputs.ipynb"


def test_the_stage_notebooks_read_without_warnings() -> None:
    """papermill validates each stage notebook as it reads it: a cell without an id printed nbformat's
    MissingIDFieldWarning on every `kit run`; every cell has its own id."""
    import warnings

    for path in sorted(NOTEBOOK_04.parent.glob("*.ipynb")):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            nb = nbformat.read(path, as_version=4)
            nbformat.validate(nb)
        assert [str(w.message)[:80] for w in seen] == [], path.name
        ids = [c.get("id") for c in nb.cells]
        assert all(ids) and len(set(ids)) == len(ids), path.name


@pytest.mark.slow
@pytest.mark.skipif(not NOTEBOOK_04.exists(), reason="notebooks/04_analyse_outputs.ipynb not written yet")
def test_notebook_04_through_papermill(tmp_path: Path) -> None:
    """The stage 4 notebook, run headless on a fixture run, writes summary.json and renders offline."""
    papermill = pytest.importorskip("papermill")
    run = build_run(tmp_path / "out" / "fx")
    run.notebooks.mkdir(parents=True, exist_ok=True)
    params = tmp_path / "fx.yaml"
    params.write_text(
        "run: fx\noutput_dir: out\nmodel: {path: no-model}\n"
        "engine: {flavor: external, base_url: 'http://127.0.0.1:9'}\n"
    )
    executed = run.notebooks / NOTEBOOK_04.name
    papermill.execute_notebook(
        str(NOTEBOOK_04),
        str(executed),
        parameters={"params_path": str(params)},
        cwd=str(NOTEBOOK_04.parent),
        kernel_name="python3",
        progress_bar=False,
    )
    summary = json.loads(run.summary.read_text())
    assert summary["rows"] == 20 and summary["flags"]["tool_call_broken"] == 2
    page = (render_report(run.root).parent / f"{NOTEBOOK_04.stem}.html").read_text()
    images = re.findall(r"<img[^>]+src=\"([^\"]+)\"", page)
    assert len(images) == len(summary["figures"])  # each once: the filter section draws none again
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page, "html.parser")
    alts = [img.get("alt") for img in soup.find_all("img")]
    assert len(set(alts)) == len(alts) and len(soup.select("table.kit-samples")) == 1
    assert all(s.startswith("data:image/png") for s in images)
    assert "filters (source, flag, finish reason) are live when this notebook runs in JupyterLab" in page
    assert network_references(page) == []
