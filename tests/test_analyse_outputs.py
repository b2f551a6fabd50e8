"""Stage 4 on the row schema that keeps reasoning and tool calls: real parquet shards written in the
new schema (`reasoning`, `tool_calls`, `reasoning_tokens`) beside an older shard without them
(tests/fixtures_outputs.py plants the rows and holds the expected answers)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fixtures_outputs import (  # noqa: E402
    EXPECTED,
    NEW_SCHEMA,
    OLD_ROWS,
    OLD_SCHEMA,
    ROWS,
    TOOLS,
    UNTERMINATED,
    row_records,
    tool_call,
    write_run,
)

from kit.analyse import analyse_run, compare_runs, load_generations, row_parts, sample_browser, split_think
from kit.analyse.browser import static_table
from kit.analyse.flags import compute_flags
from kit.analyse.reasoning import split_row
from kit.analyse.run import read_run
from kit.analyse.tables import summary_tables
from kit.artifacts import Summary
from kit.generate.view import outputs_table
from kit.runfolder import RunFolder


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    return write_run(tmp_path / "run")


def test_split_think_shapes() -> None:
    assert split_think("<think>\nhm\n</think>\n\nYes.") == ("hm", "Yes.", False)
    assert split_think("opened by the template</think>Yes.") == ("opened by the template", "Yes.", False)
    assert split_think("<think>cut here") == ("cut here", "", True)
    assert split_think("No thinking.") == (None, "No thinking.", False)
    # closed twice: no think tag is left in the answer (a kept row had a stray `</think>`, issue 60)
    assert split_think("<think>a</think>b\n</think>\n\nYes.") == ("a\nb", "Yes.", False)
    assert split_think("opened</think>more<think>again</think>Yes.") == ("opened\nmore\nagain", "Yes.", False)


def test_a_parsers_row_keeps_all_its_thinking_and_one_that_stopped_thinking_is_unterminated() -> None:
    """transformers serve's parser, seen on the demo: reasoning split early with the rest of the
    thinking and its `</think>` left in the content (that thinking was lost from the answer and the
    reasoning both), and the model ending its turn inside its thinking (finish `stop`, reasoning
    ending in `<|im_end|>`, no content): 8 rows counted `empty`, whose thinking never closed."""
    assert split_row("I should explain.", "More thought.\n</think>\n\nThe answer.") == (
        "I should explain.\nMore thought.",
        "parser",
        "The answer.",
        False,
    )
    rows = [  # completion, reasoning, finish
        ("", "Thinking on and on.<|im_end|>", "stop"),  # stopped while thinking
        ("", "Thinking on and on", "length"),  # cut while thinking
        ("The answer.", "Thought.", "stop"),
        ("More thought.\n</think>", "Thought.", "stop"),  # closed, on nothing: empty, not unterminated
    ]
    df = pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(len(rows))],
            "source": "s",
            "messages": [[{"role": "user", "content": "Tell me."}]] * len(rows),
            "tools": None,
            "completion": [r[0] for r in rows],
            "reasoning": [r[1] for r in rows],
            "tool_calls": None,
            "finish_reason": [r[2] for r in rows],
            "completion_tokens": 10,
            "reasoning_tokens": None,
        }
    )
    flags = compute_flags(df)
    assert flags["unterminated_think"].tolist() == [True, True, False, False]
    assert flags["empty"].tolist() == [True, True, False, True]


def test_old_and_new_shards_load_together(run: RunFolder) -> None:
    df, gaps = load_generations(run)
    assert len(df) == EXPECTED["rows"]
    assert len(gaps) == 1 and "3 row(s) in 1 shard(s) written without the reasoning / tool_calls" in gaps[0]
    old = df["source"].eq("chat")
    assert df.loc[old, ["reasoning", "tool_calls"]].isna().all().all()
    assert all(v is None for v in df.loc[old, "reasoning"])  # None, not NaN
    assert df.loc[old, "reasoning_tokens"].isna().all()
    assert df["reasoning"].dtype == object and df["tool_calls"].dtype == object
    assert str(df["reasoning_tokens"].dtype) == "Int64"
    assert df.loc[df["id"] == "think-000", "reasoning_tokens"].item() == 15


def test_dtypes_do_not_depend_on_which_shards_exist(tmp_path: Path) -> None:
    new_only, _ = load_generations(write_run(tmp_path / "new", old_shard=False))
    old_run = RunFolder(tmp_path / "old").ensure()
    pq.write_table(
        pa.Table.from_pylist(row_records(OLD_ROWS, 0), schema=OLD_SCHEMA),
        old_run.generations / "part-00001.parquet",
    )
    old_only, gaps = load_generations(old_run)
    assert "written without the reasoning / tool_calls columns" in gaps[0]
    for col in ("reasoning", "tool_calls", "reasoning_tokens", "completion_tokens"):
        assert new_only[col].dtype == old_only[col].dtype, col
    assert old_only["reasoning"].isna().all()


def test_lengths_of_reasoning_and_answer(run: RunFolder) -> None:
    df, _ = load_generations(run)
    parts = row_parts(df).set_index(df["id"])
    assert parts.loc["think-000", ["reasoning_chars", "answer_chars"]].tolist() == [32, 1]
    assert parts.loc["think-000", ["reasoning_tokens", "answer_tokens"]].tolist() == [15, 5]
    assert parts.loc["think-001", "answer_tokens"] == 0  # all 64 tokens went to thinking
    assert parts.loc["think-002", "answer_tokens"] == 3  # did not think: every token is answer
    assert pd.isna(parts.loc["think-003", "answer_tokens"])  # thought, no reasoning_tokens reported
    assert parts.loc["think-004", "reasoning_from"] is None  # whitespace reasoning is no reasoning
    assert parts.loc["think_text-005", ["reasoning_text", "answer_text"]].tolist() == [
        "I should say hi.",
        "Hi there.",
    ]
    assert parts.loc["think_text-008", "reasoning_from"] == "text"
    assert parts.loc["chat-021", "reasoning_chars"] == len("pondering")
    assert (
        parts.groupby(df["source"].to_numpy())["reasoning_text"].count().to_dict()
        == EXPECTED["reasoning_rows"]
    )


def test_engine_zero_reasoning_tokens_without_a_split(run: RunFolder) -> None:
    """An engine that reports 0 reasoning tokens for text it did not split: the count is not used."""
    df, _ = load_generations(run)
    df["reasoning_tokens"] = pd.array([0] * len(df), dtype="Int64")
    parts = row_parts(df).set_index(df["id"])
    assert pd.isna(parts.loc["think_text-005", "answer_tokens"])  # thought in text: split unknown
    assert pd.isna(parts.loc["think_text-005", "reasoning_tokens"])
    assert parts.loc["think_text-007", "answer_tokens"] == 6  # did not think: all tokens are answer
    assert parts.loc["think-000", "answer_tokens"] == 20  # the parser's row: 20 - 0


def test_flags_on_reasoning_and_tool_calls(run: RunFolder) -> None:
    df, _ = load_generations(run)
    flags = compute_flags(df).set_index(df["id"])
    for name in ("empty", "duplicate", "repeats_prompt", "refusal", "tool_call_broken", "unterminated_think"):
        assert int(flags[name].sum()) == EXPECTED[name], name
    assert set(flags.index[flags["unterminated_think"]]) == {"think-001", "think_text-006", "chat-022"}
    broken = set(flags.index[flags["tool_call_broken"]])
    assert broken == {"hermes-011", "hermes-012", "hermes-015", "hermes_text-017", "hermes_text-018"}
    assert not flags.loc["hermes-010", "empty"]  # an empty completion with a parsed call is an answer
    assert not flags.loc["hermes_text-020", "tool_call_broken"]  # broken text inside the reasoning only


def test_summary_json_and_tables(run: RunFolder) -> None:
    summary = analyse_run(run)
    on_disk = json.loads(run.summary.read_text())
    assert on_disk["flags"]["unterminated_think"] == EXPECTED["unterminated_think"]
    for source, expected in EXPECTED["tool_calls"].items():
        assert on_disk["sources"][source]["tool_calls"] == expected, source
    think = on_disk["sources"]["think"]
    assert think["reasoning"] == {"rows": 3, "from_parser": 3, "from_text": 0, "unterminated_think": 1}
    assert think["reasoning_tokens"]["total"] == 15 + 64 and think["answer_tokens"]["max"] == 5
    assert on_disk["sources"]["think_text"]["reasoning"]["from_text"] == 4
    assert on_disk["reasoning"]["rows"] == sum(EXPECTED["reasoning_rows"].values())
    assert on_disk["reasoning_chars"]["max"] == len(UNTERMINATED.strip())
    stems = {Path(p).stem for p in summary["figures"]}
    assert "reasoning_and_answer_by_source" in stems
    tables = summary_tables(Summary.from_json(on_disk))
    assert tables["thinking (rows)"].loc["think"].tolist() == [3, 3, 0, 1]
    assert tables["reasoning and answer lengths (p50, p90)"].loc["think", "reasoning tokens p50"] == 39.5
    calls = tables["tool calls (rows)"]
    assert set(calls.index) == {"hermes", "hermes_text"}  # sources without tools or calls are left out
    assert calls.loc["hermes", "share_with_calls"] == pytest.approx(0.6667)
    assert calls.loc["hermes", "rows_with_calls"] == 4
    assert tables["quality flags (rows)"].loc["chat", "unterminated_think"] == 1


def test_no_thinking_no_tools_run_has_no_reasoning_figure(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "plain").ensure()
    rows = [r for r in ROWS if r[0] == "think" and r[3] is None] + [OLD_ROWS[2]]
    pq.write_table(
        pa.Table.from_pylist(row_records(rows, 0), schema=NEW_SCHEMA),
        folder.generations / "part-00001.parquet",
    )
    summary = analyse_run(folder)
    assert not any("reasoning_and_answer" in p for p in summary["figures"])
    assert summary["tool_calls"]["share_with_calls"] is None
    assert "tool calls (rows)" not in summary_tables(summary)
    assert "thinking (rows)" not in summary_tables(summary)


def test_browser_shows_answer_first_then_collapsed_reasoning_and_calls(run: RunFolder) -> None:
    df, _ = load_generations(run)
    rows = df[df["id"].isin(["think-000", "hermes-010", "think_text-005"])]
    page = static_table(rows, compute_flags(rows), n=3)
    assert page.count("<details class='kit-reasoning'>") == 3
    assert page.count("<details class='kit-tool-calls'>") == 1
    assert "<details open" not in page and " open>" not in page  # collapsed until clicked
    cell = page.split("Hi there.")[1]
    assert "the &lt;think&gt; text of the completion" in cell.split("</details>")[0]
    assert "<think>" not in page  # reasoning text escaped, answer shown without its block
    hermes = page[page.index("hermes-010") :]
    assert (
        hermes.index("(no answer text)") < hermes.index("User wants weather.") < hermes.index("get_weather")
    )
    assert "&quot;city&quot;: &quot;Paris&quot;" in hermes  # arguments decoded from their JSON text
    assert "tool calls (1: get_weather)" in hermes


def test_browser_widget_renders_reasoning(run: RunFolder) -> None:
    pytest.importorskip("ipywidgets")
    df, _ = load_generations(run)
    browser = sample_browser(df, interactive=True)
    controls, view = browser.widget.children
    source, _, flag, _ = controls.children
    source.value, flag.value = "think", "unterminated_think"
    assert "1 rows match" in view.value
    label = f"<summary>reasoning ({len(UNTERMINATED.strip())} chars, split out by the engine)"
    assert "<details class='kit-reasoning'>" + label in view.value


def test_unreadable_tool_calls_are_shown_raw(run: RunFolder) -> None:
    df, _ = load_generations(run)
    page = static_table(df[df["id"] == "hermes-015"], None, n=1)
    assert "tool calls (unreadable: tool_calls is not valid JSON" in page


def test_compare_runs_parser_on_and_off(tmp_path: Path) -> None:
    a = write_run(tmp_path / "on", old_shard=False)
    b = write_run(tmp_path / "off")
    table, figs = compare_runs(a, b)
    assert table.loc["reasoning_rows", "on"] == 9 and table.loc["reasoning_rows", "off"] == 11
    assert table.loc["flag_unterminated_think", "diff"] == 1
    assert "compare_reasoning_and_answer" in figs


def test_notebook_03_outputs_table(run: RunFolder) -> None:
    (run.generations / "part-00004.parquet").write_bytes(b"PAR1 truncated")
    table, unreadable = outputs_table(run)
    assert unreadable == ["part-00004.parquet"]
    assert table.loc["hermes", "tool calls (parsed)"] == 5  # the damaged text is still text
    assert table.loc["hermes_text", "<tool_call> in text"] == 4
    assert table.loc["think", "reasoning (parsed)"] == 3
    assert table.loc["think_text", "<think> in text"] == 4 and table.loc["chat", "<think> in text"] == 2
    assert table.loc["think", "no answer"] == 1 and table.loc["chat", "cut at max_tokens"] == 1
    assert int(table["rows"].sum()) == EXPECTED["rows"]


def test_read_run_keeps_parts(run: RunFolder) -> None:
    data = read_run(run)
    assert data.parts is not None and len(data.parts) == len(data.df)
    assert data.parts["parsed_calls"].sum() == 5 - 1  # the damaged tool_calls text parses to nothing


NOTEBOOK_04 = Path(__file__).resolve().parents[1] / "notebooks" / "04_analyse_outputs.ipynb"
DETAILS_CHECK = """<!DOCTYPE html><html><body><iframe id="f" src="{url}" width="1200" height="900"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => setTimeout(() => {{
  const d = document.getElementById('f').contentDocument;
  const blocks = Array.from(d.querySelectorAll('details.kit-reasoning, details.kit-tool-calls'));
  const height = e => e.getBoundingClientRect().height;
  const shown = () => blocks.filter(b => height(b) > height(b.querySelector('summary')) + 2).length;
  const before = shown();
  blocks[0].querySelector('summary').click();
  const p = document.createElement('pre'); p.id = 'result';
  p.textContent = 'DETAILS ' + blocks.length + ' SHOWN ' + before + ' AFTER_CLICK ' + shown();
  document.body.appendChild(p);
}}, 300));
</script></body></html>
"""


@pytest.fixture(scope="module")
def thinking_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Notebook 04 executed by papermill on the thinking run, rendered as the offline report page."""
    papermill = pytest.importorskip("papermill")
    from kit.report import render_report

    tmp = tmp_path_factory.mktemp("thinking")
    run = write_run(tmp / "out" / "fx")
    run.notebooks.mkdir(parents=True, exist_ok=True)
    params = tmp / "fx.yaml"
    params.write_text(
        "run: fx\noutput_dir: out\nmodel: {path: no-model}\n"
        "engine: {flavor: external, base_url: 'http://127.0.0.1:9'}\n"
    )
    papermill.execute_notebook(
        str(NOTEBOOK_04),
        str(run.notebooks / NOTEBOOK_04.name),
        parameters={"params_path": str(params)},
        cwd=str(NOTEBOOK_04.parent),
        kernel_name="python3",
        progress_bar=False,
    )
    return render_report(run.root).parent / f"{NOTEBOOK_04.stem}.html"


@pytest.mark.slow
def test_notebook_04_report_shows_reasoning_and_tool_calls(thinking_report: Path) -> None:
    page = thinking_report.read_text()
    for heading in ("Thinking (rows)", "Reasoning and answer lengths (p50, p90)", "Tool calls (rows)"):
        assert f"{heading}</h3>" in page or f">{heading}<" in page, heading
    assert "<th>unterminated think</th>" in page and "<th>share with calls</th>" in page
    assert page.count("<details class='kit-reasoning'>") + page.count('<details class="kit-reasoning">') >= 1
    assert "<details open" not in page


@pytest.mark.slow
def test_report_details_are_collapsed_in_chromium(thinking_report: Path, tmp_path: Path) -> None:
    """In a real browser the reasoning and tool calls take no room until their summary is clicked."""
    from test_report import CHROMIUM, _chromium

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
    checker = tmp_path / "check-details.html"
    checker.write_text(DETAILS_CHECK.format(url=thinking_report.resolve().as_uri()))
    dom = _chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", checker.as_uri())
    found = re.search(r"DETAILS (\d+) SHOWN (\d+) AFTER_CLICK (\d+)", dom)
    assert found, f"checker did not report: {dom[-500:]}"
    blocks, shown, after = map(int, found.groups())
    assert blocks >= 2 and shown == 0 and after == 1


def test_tool_names_and_call_problems() -> None:
    from kit.analyse.toolcalls import call_problem, load_calls, tool_names

    assert tool_names(TOOLS) == {"get_weather", "get_time"}
    assert tool_names(None) == frozenset() and tool_names("[]") == frozenset()
    assert tool_names("{not json") is None and tool_names('[{"no": "name"}]') is None  # names unknown
    offered = tool_names(TOOLS)
    assert call_problem(tool_call("get_time", ""), offered) is None  # no arguments: {}
    assert "not a JSON object" in call_problem(tool_call("get_time", "[1, 2]"), offered)
    assert "not among the prompt's tools (none)" in call_problem(tool_call("get_time", "{}"), frozenset())
    assert call_problem(tool_call("anything", "{}"), None) is None  # tools unreadable: names not judged
    assert call_problem({"function": {"arguments": "{}"}}, offered) == "a call without a function name"
    assert (
        load_calls("[]") == (None, None) and load_calls('{"a": 1}')[1] == "tool_calls is not a list but dict"
    )
