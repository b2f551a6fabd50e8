"""The whole path as a user runs it: `kit run` on the demo params executes the four notebooks
through papermill and renders the report; the test asserts on the artifacts they leave."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from kit.display import hours

pytestmark = pytest.mark.slow
ROW_COLUMNS = {
    "id",
    "source",
    "messages",
    "completion",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "engine",
    "sampling",
    "sampling_hash",
    "finished_at",
}


def test_probe_and_decision(demo_run):
    probe = json.loads((demo_run / "probe.json").read_text())
    assert probe["summary"]["go"] is True
    assert probe["gpus"]["devices"] == []  # no GPU here, reported as a finding, not a crash
    decision = json.loads((demo_run / "decision.json").read_text())
    assert decision["arm"] == {"k": 0, "algorithm": None} and decision["decided_by"] == "measured"
    assert decision["speculation_available"] is False
    sweep = pq.read_table(demo_run / "sweep.parquet").to_pandas()
    plain = sweep[sweep.arm == "plain"]
    assert list(plain.concurrency) == [1, 4] and (plain.output_tok_s > 0).all()
    assert (sweep[sweep.arm != "plain"].status == "skipped").all()
    assert any("transformers serve has no speculative decoding" in r for r in set(sweep.reason))
    cost = decision["sweep_cost"]  # one arm, so nothing for racing to leave out
    runs = pq.read_table(demo_run / "sweep_runs.parquet").to_pandas()
    assert cost["server_starts"] == 1 and cost["skipped"] == 0 and cost["rounds"] == 3, cost
    assert cost["measurements"] == (runs.status != "skipped").sum() and cost["wall_s"] > 0
    assert cost["budget_rule"] == "decide.time_budget_s: 600 s"
    said = f"the sweep took {hours(cost['wall_s'])} (1 server start(s)"
    assert said in html.unescape((demo_run / "report" / "02_decide_mtp.html").read_text())
    index = html.unescape((demo_run / "report" / "index.html").read_text())
    assert "The sweep took" not in index, "one arm, measured in full: nothing it saved to say first"


def test_the_forecast_is_made_in_stage_2_and_judged_in_stage_4(demo_run):
    forecast = json.loads((demo_run / "decision.json").read_text())["forecast"]
    plain = next(a for a in forecast["arms"] if a["arm"] == "plain")
    assert forecast["requests"] == 18 and forecast["chosen"] == "plain"
    assert (
        plain["wall_lo_s"] <= plain["wall_s"] <= plain["wall_hi_s"] and plain["throughput_from"] == "measured"
    )
    assert forecast["pilot"]["answered"] == forecast["pilot"]["sent"] == 18  # 3 planned per source
    check = json.loads((demo_run / "summary.json").read_text())["forecast_check"]
    assert check["judged"] and check["arm"] == "plain" and check["output_tokens"] > 0
    assert check["inside_interval"] or check["missed"], check  # the actual in the interval, or the miss named
    index = (demo_run / "report" / "index.html").read_text()
    assert "Forecast for the whole plan: 18 requests" in html.unescape(index)
    assert "Stage 2 forecast" in html.unescape(index)
    assert forecast["interval_from"] == "the sweep's noise" and forecast["history"]["judged_runs"] == 0
    assert "interval: the sweep's noise only (0 of 4 judged runs)" in html.unescape(index)
    left = pq.read_table(demo_run / "metrics.parquet").to_pandas()["tokens_left"].dropna()
    assert len(left) and left.iloc[-1] < left.iloc[0]  # the time left, in tokens, as the run went


def test_generations(demo_run):
    manifest = json.loads((demo_run / "manifest.json").read_text())
    table = pq.read_table(sorted((demo_run / "generations").glob("part-*.parquet")))
    assert ROW_COLUMNS <= set(table.column_names)
    planned = pq.read_table(demo_run / "prompts.parquet")
    assert manifest["complete"] and manifest["failures"] == 0
    assert table.num_rows == planned.num_rows == manifest["rows"]
    assert set(table.column("source").to_pylist()) == set(planned.column("source").to_pylist())
    assert len(set(planned.column("source").to_pylist())) == 6
    assert (demo_run / "failures.jsonl").read_text() == ""


def test_analysis_and_report(demo_run):
    summary = json.loads((demo_run / "summary.json").read_text())
    assert summary["rows"] == json.loads((demo_run / "manifest.json").read_text())["rows"]
    assert len(list((demo_run / "figures").glob("*.png"))) >= 2
    names = {p.stem for p in (demo_run / "notebooks").glob("*.ipynb")}
    assert names == {"01_probe_environment", "02_decide_mtp", "03_generate", "04_analyse_outputs"}
    report = demo_run / "report"
    assert {p.stem for p in report.glob("*.html")} == names | {"index"}
    index = (report / "index.html").read_text()
    assert all(f"{n}.html" in index for n in names)


def test_report_reads_well(demo_run):
    """The rendered demo report as a reader meets it: no stderr blocks, no index columns, rounded
    numbers, alt text on every image; the index answers the run's questions in its first screen."""
    from test_report import first_screen, readability_problems, screenshots

    report = demo_run / "report"
    for page in sorted(report.glob("*.html")):
        assert readability_problems(page.read_text()) == [], page.name
    index = html.unescape((report / "index.html").read_text())
    for said in (
        "GO</b>: all ",
        "plain decoding (measured)</b>: Measured by the sweep: ",
        "Speculation could not be measured: transformers serve has no speculative decoding",
        "every planned row was generated; the run is complete",
        "no request failed",
        "output tok/s</b>",
        f'datasets.load_dataset("{demo_run.resolve() / "dataset"}")',  # the export notebook 04 made
    ):
        assert said in index, said
    assert re.search(r"<span class='topic'>Data</span> <b>\d+ of \d+ rows usable \(\d+%\)</b>", index)
    assert index.index("rows usable") < index.index("<span class='topic'>Environment")  # first
    top = first_screen(report / "index.html")
    assert top["answers"] == 6 and top["bottom"] <= 800, top
    shots = screenshots([report / "index.html", report / "02_decide_mtp.html"], "demo")
    assert all(p.stat().st_size > 20_000 for p in shots)


def test_a_healthy_run_prints_no_warning(demo_run):
    """What `kit run` printed beside its progress bars: no kernel transport warning, no nbformat
    warning, no premise chatter, no 'capacity None', no raw dict (issue 46)."""
    printed = (demo_run.parents[1] / "kit-run.stderr").read_text()
    lines = [line for line in re.split(r"[\r\n]", printed) if line.strip() and not re.search(r"\d+%\|", line)]
    noise = ("WARNING", "Warning", "without encryption", "is not checked because", "capacity None", "{'")
    assert not [line for line in lines if any(n in line for n in noise)], lines


def test_a_finished_generate_rerun_says_one_sentence(demo_run, tmp_path):
    """A new user's rerun of `kit generate` on a finished run got an 80-line manifest and normal
    information labelled WARNING (issue 33): now one sentence, and the log lines unlabelled."""
    shutil.copytree(demo_run, tmp_path / "outputs" / "demo")  # the session's run stays as it is
    params = yaml.safe_load((demo_run / "params.yaml").read_text())
    params["output_dir"] = str(tmp_path / "outputs")
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(params))
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "generate", str(tmp_path / "demo.yaml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((demo_run / "manifest.json").read_text())["rows"]
    run = tmp_path / "outputs" / "demo"
    assert done.stdout.splitlines() == [
        f"{run}: complete, {rows} of {rows} rows; nothing was left to generate."
    ]
    assert f"engine settings from {run / 'decision.json'}: plain decoding (the decision's arm)" in done.stderr
    assert "{'" not in done.stderr  # said in words, not a raw dict
    assert not [line for line in done.stderr.splitlines() if line.startswith("WARNING")], done.stderr
