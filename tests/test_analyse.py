"""Stage 4 on fabricated run folders with known answers (see tests/test_analyse_fixture.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_analyse_fixture import EXPECTED, build_run, generation_frame, metrics_frame  # noqa: E402

from kit.analyse import (  # noqa: E402
    analyse_run,
    compare_runs,
    compute_flags,
    finish_reason_table,
    load_generations,
    load_metrics,
    sample_browser,
    summary_tables,
)
from kit.artifacts import Summary  # noqa: E402
from kit.errors import ParamsError, RunFolderError  # noqa: E402
from kit.params import AnalyseParams  # noqa: E402
from kit.runfolder import RunFolder  # noqa: E402


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    return build_run(tmp_path / "run")


def test_load_reads_all_shards(run: RunFolder) -> None:
    df, gaps = load_generations(run)
    assert gaps == []
    assert len(df) == EXPECTED["rows"]
    assert df["source"].value_counts().to_dict() == EXPECTED["sources"]
    assert str(df["finished_at"].dtype).startswith("datetime64")


def test_flags_find_planted_rows(run: RunFolder) -> None:
    df, _ = load_generations(run)
    flags = compute_flags(df, AnalyseParams())
    for name in ("empty", "duplicate", "repeats_prompt", "refusal", "tool_call_broken"):
        assert int(flags[name].sum()) == EXPECTED[name], name
    broken = set(df.loc[flags["tool_call_broken"], "id"])
    assert all(i.startswith("tools-") for i in broken)
    assert not flags.loc[df["completion"].str.contains("not json"), "tool_call_broken"].any()


def test_refusal_patterns_are_configurable(run: RunFolder) -> None:
    df, _ = load_generations(run)
    flags = compute_flags(df, AnalyseParams(refusal_patterns=[r"^Poem \d+"]))
    assert int(flags["refusal"].sum()) == 12 - 3 - 2 - 3 - 1 - 2 + 3  # 'Poem i: waves.' rows incl. cut ones
    with pytest.raises(ParamsError, match="not a valid regex"):
        compute_flags(df, AnalyseParams(refusal_patterns=["(unclosed"]))


def test_finish_reason_shares(run: RunFolder) -> None:
    df, _ = load_generations(run)
    shares = finish_reason_table(df)
    assert shares.loc["chat", "length"] == pytest.approx(EXPECTED["length"]["chat"] / 12, abs=1e-4)
    assert shares.loc["tools", "length"] == pytest.approx(EXPECTED["length"]["tools"] / 8, abs=1e-4)
    assert shares.sum(axis=1).round(3).eq(1).all()


def test_analyse_run_writes_summary_and_figures(run: RunFolder) -> None:
    summary = analyse_run(run, AnalyseParams())
    on_disk = json.loads(run.summary.read_text())
    assert on_disk["rows"] == summary["rows"] == EXPECTED["rows"]
    assert summary["gaps"] == []
    assert set(summary["sources"]) == {"chat", "tools"}  # plan.json's other keys are not sources
    chat = summary["sources"]["chat"]
    assert (chat["requested"], chat["planned"], chat["generated"], chat["failed"]) == (15, 13, 12, 1)
    tokens = generation_frame().groupby("source")["completion_tokens"]
    assert chat["completion_tokens"]["total"] == int(tokens.sum()["chat"])
    assert chat["completion_tokens"]["max"] == 64
    assert summary["flags"]["duplicate"] == EXPECTED["duplicate"]
    assert summary["health"]["failures_by_reason"] == EXPECTED["failures"]
    assert summary["health"]["complete"] is True
    assert summary["health"]["duration_s"] == 20
    assert summary["health"]["accept_length_mean"] == 2.5
    stems = {Path(p).stem for p in summary["figures"]}
    assert {"completion_tokens_by_source", "finish_reasons_by_source", "throughput_over_time"} <= stems
    for p in summary["figures"]:
        assert Path(p).is_absolute() and Path(p).parent == run.figures.resolve()
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tables = summary_tables(Summary.from_json(on_disk))
    assert tables["per source"].loc["tools", "failed"] == 2
    assert tables["quality flags (rows)"].loc["tools", "tool_call_broken"] == EXPECTED["tool_call_broken"]
    assert tables["finish reasons (share of rows)"].loc["chat", "length"] == 0.25
    assert "gaps" not in tables


def test_damaged_run_is_analysed_with_gaps(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", shards=3, metrics=False, failures=False, manifest=False)
    shard = run.shard_paths()[1]
    shard.write_bytes(shard.read_bytes()[: len(shard.read_bytes()) // 2])  # truncated mid-write
    (run.root / "plan.json").write_text("{not json")
    summary = analyse_run(run, AnalyseParams())
    gaps = "\n".join(summary["gaps"])
    assert "part-00001.parquet: unreadable" in gaps
    for part in (
        "metrics.parquet missing",
        "failures.jsonl missing",
        "manifest.json missing",
        "plan.json is not",
    ):
        assert part in gaps
    assert summary["rows"] == EXPECTED["rows"] - len(generation_frame().iloc[1::3])
    assert summary["health"]["timeline_from"] == "rows"
    assert summary["health"]["complete"] is False
    assert any("throughput_over_time" in p for p in summary["figures"])


def test_a_copied_shard_is_counted_once_and_said(tmp_path: Path) -> None:
    """`kit analyse` before a resume, on a folder holding a copy of a shard: every id counts once
    (it reported 2,723 rows against 2,623 planned), and the gap names what happened."""
    run = build_run(tmp_path / "run", shards=3)
    first = run.shard_paths()[0]
    first.with_name("part-99999.parquet").write_bytes(first.read_bytes())  # `cp part-00000 part-99999`
    summary = analyse_run(run, AnalyseParams())
    assert summary["rows"] == EXPECTED["rows"]
    assert any("repeat the id of a row in another shard" in g for g in summary["gaps"])


def test_empty_run_folder_gives_gaps_not_traceback(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "empty").ensure()
    summary = analyse_run(run, AnalyseParams())
    assert summary["rows"] == 0
    assert any("no generation shards" in g for g in summary["gaps"])
    with pytest.raises(RunFolderError, match="does not exist"):
        analyse_run(RunFolder(tmp_path / "nowhere"), AnalyseParams())


def test_compare_runs_differences(tmp_path: Path) -> None:
    a = build_run(tmp_path / "plain")
    fast = generation_frame().assign(latency_s=lambda d: d["latency_s"] / 2)
    b = build_run(tmp_path / "mtp", frame=fast.iloc[:10])
    table, figs = compare_runs(a, b, out_dir=tmp_path / "cmp")
    assert table.loc["rows", "plain"] == 20 and table.loc["rows", "mtp"] == 10
    assert table.loc["rows", "diff"] == -10
    assert table.loc["latency_p50_s", "ratio"] < 1
    assert {"compare_completion_tokens", "compare_throughput"} <= set(figs)
    assert len(list((tmp_path / "cmp").glob("*.png"))) == len(figs)


def test_sample_browser_static_fallback(run: RunFolder) -> None:
    df, _ = load_generations(run)
    df.loc[0, "completion"] = "<script>alert(1)</script>"
    browser = sample_browser(df, n=6)
    assert browser.widget is None  # not in a kernel
    assert browser.html.count("<i></i>") <= 3  # flags computed by default: flagged rows come first
    assert browser.html.count("<tr>") == 7
    assert "<script>" not in browser.html
    assert "&lt;script&gt;" in browser.html or "alert" not in browser.html


def test_sample_browser_widget_filters(run: RunFolder) -> None:
    pytest.importorskip("ipywidgets")
    df, _ = load_generations(run)
    browser = sample_browser(df, flags=compute_flags(df), interactive=True)
    bundle = browser._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "text/html" in bundle
    controls, view = browser.widget.children
    source, reason, flag, _ = controls.children
    reason.value = "length"
    assert "4 rows match" in view.value
    source.value, flag.value = "tools", "tool_call_broken"
    assert "1 rows match" in view.value


def test_flags_on_messages_as_arrays() -> None:
    df = pd.DataFrame(
        {
            "completion": ["hello there friend of mine", "x"],
            "tools": [None, "[]"],
            "messages": [[{"role": "user", "content": "Hello there friend of mine"}], None],
        }
    )
    flags = compute_flags(df)
    assert flags["repeats_prompt"].tolist() == [True, False]
    assert flags["tool_call_broken"].tolist() == [False, False]


def test_resumed_run_timeline_uses_wall_clock(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", metrics=False)
    start = pd.Timestamp("2026-01-01", tz="UTC")
    sessions = pd.DataFrame(
        {
            "session": [1, 1, 2, 2],
            "at": [start + pd.Timedelta(seconds=s) for s in (1, 2, 100, 101)],
            "t_s": [1.0, 2.0, 0.5, 1.5],  # the second session's clock restarts
            "rows_done": [1, 2, 3, 4],
            "output_tokens_done": [10, 20, 30, 40],
            "tok_s": [10.0, 10.0, 20.0, 20.0],
        }
    )
    sessions.to_parquet(run.metrics, index=False)
    metrics, gaps = load_metrics(run)
    assert gaps == [] and metrics["t_s"].tolist() == [0.0, 1.0, 99.0, 100.0]
    assert metrics["rows_done"].is_monotonic_increasing
    run.metrics.write_bytes(b"PAR1 not really parquet")
    metrics, gaps = load_metrics(run)
    assert metrics is None and "metrics.parquet: unreadable" in gaps[0]


def test_resumed_run_counts_generating_time_not_the_night_between(tmp_path: Path) -> None:
    """Two sessions a day apart: throughput divides by the time spent generating in both."""
    run = build_run(tmp_path / "resumed")
    first, second = metrics_frame(20), metrics_frame(10)
    start = pd.Timestamp("2026-11-28T20:00:00Z")
    first = first.assign(session=1, at=start + pd.to_timedelta(first["t_s"], unit="s"))
    second = second.assign(
        session=2, at=start + pd.Timedelta(days=1) + pd.to_timedelta(second["t_s"], unit="s")
    )
    pd.concat([first, second], ignore_index=True).to_parquet(run.metrics, index=False)
    manifest = json.loads(run.manifest.read_text())
    manifest.pop("generating_s", None)
    run.manifest.write_text(json.dumps(manifest))
    health = analyse_run(run, AnalyseParams())["health"]
    assert health["duration_s"] == 30.0  # 20 s + 10 s, not a day
    manifest["generating_s"] = 31.5  # what the sessions' own clocks measured wins
    run.manifest.write_text(json.dumps(manifest))
    assert analyse_run(run, AnalyseParams())["health"]["duration_s"] == 31.5


def test_no_legend_covers_a_bar(run: RunFolder) -> None:
    """The finish-reason and flag bars of the fixture run, drawn and laid out as saved: no legend
    overlaps a bar (inside the axes it hid a source's bar that reached 1.0)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from kit.analyse import plots, read_run
    from kit.analyse.flags import FLAGS, flag_counts

    data = read_run(run, progress=False)
    counts = flag_counts(data.df, data.flags, data.row_parts()).reindex(columns=list(FLAGS))
    # the demo's shares: bars to 1.0 or near it at the top, the middle and the bottom
    stops = {"agent": 20, "infinity": 10, "code": 20, "hermes": 15, "math": 1, "web": 2}
    finish = [(s, "stop" if i < n else "length") for s, n in stops.items() for i in range(20)]
    full = pd.DataFrame(finish, columns=["source", "finish_reason"]).astype({"source": "category"})
    full["source"] = full["source"].cat.reorder_categories(list(stops))  # the plan's order, as read
    drawn = (plots.finish_reasons(full), plots.finish_reasons(data.df), plots.counts_bar(counts, "flags"))
    for fig in drawn:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent(renderer)
        bars = [p.get_window_extent(renderer) for p in ax.patches if p.get_width() > 0]
        assert bars and not [b for b in bars if b.overlaps(legend)], ax.get_title()
