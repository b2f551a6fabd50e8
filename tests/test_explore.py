"""Notebook 04's explorer (kit.analyse.explore) over a run read the way stage 4 reads it: filters
narrow the selection as a pandas filter of the facts would, the caption and the sample list follow,
an empty selection says so, reports get inline figures, and only the rows shown have their text read."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fixtures_outputs import write_run  # noqa: E402

from kit.analyse.explore import LIVE_NOTE, NO_MATCH, explore  # noqa: E402
from kit.analyse.run import RunData, read_run  # noqa: E402
from kit.errors import KitError  # noqa: E402
from kit.report import network_references  # noqa: E402

ROW_ID = re.compile(r"\b(?:think_text|think|hermes_text|hermes|chat)-\d{3}\b")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    return read_run(write_run(tmp_path_factory.mktemp("explore") / "run"), progress=False)


@pytest.fixture
def reads(data: RunData, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The labels of every `data.rows` call (the only way row text is read)."""
    calls: list[list[int]] = []
    real = data.rows

    def spy(index: pd.Index) -> pd.DataFrame:
        calls.append(list(index))  # a call for every row (index=None) fails here
        return real(index)

    monkeypatch.setattr(data, "rows", spy)
    return calls


def pandas_filter(data: RunData, source: str, flag: str, finish: str) -> pd.Index:
    """The labels of the facts a researcher's own pandas filter keeps."""
    df, flags = data.df, data.flags
    keep = pd.Series(True, index=df.index)
    if source != "all":
        keep &= df["source"].astype(str) == source
    if finish != "all":
        keep &= df["finish_reason"].astype(str) == finish
    if flag == "any flag":
        keep &= flags.any(axis=1)
    elif flag != "any row":
        keep &= flags[flag]
    return df.index[keep]


def shown_ids(page: str) -> set[str]:
    return set(ROW_ID.findall(page))


@pytest.mark.parametrize(
    ("source", "flag", "finish", "rows"),
    [
        ("all", "any row", "all", 24),
        ("think", "any row", "all", 5),
        ("all", "any row", "length", 4),
        ("all", "refusal", "all", 1),
        ("hermes", "tool_call_broken", "all", 3),
        ("all", "any flag", "length", 4),
        ("chat", "unterminated_think", "length", 1),
    ],
)
def test_filters_narrow_the_selection_like_a_pandas_filter(
    data: RunData, source: str, flag: str, finish: str, rows: int
) -> None:
    explorer = explore(data, n=3, interactive=False)
    selection = explorer.filter(source=source, flag=flag, finish=finish)
    assert selection is explorer.selection and len(selection) == rows
    assert selection.index.equals(pandas_filter(data, source, flag, finish))
    assert explorer.caption == f"{rows} of 24 rows · source={source} · flag={flag} · finish={finish}"
    assert shown_ids(explorer.samples) <= set(selection["id"])
    assert len(shown_ids(explorer.samples)) == min(rows, 3)


def test_only_the_rows_shown_have_their_text_read(data: RunData, reads: list[list[int]]) -> None:
    explorer = explore(data, n=4, interactive=False)
    assert len(reads) == 1 and len(reads[0]) == 4  # the default state: four rows of 24
    hermes = explorer.filter(source="hermes", flag="any flag")
    assert len(reads) == 2 and set(reads[1]) <= set(hermes.index) and len(reads[1]) == 3
    assert "completion" not in explorer.selection.columns  # the facts only, never every row's text


def test_an_empty_selection_says_no_rows_match(data: RunData, reads: list[list[int]]) -> None:
    explorer = explore(data, n=4, interactive=False)
    before = len(reads)
    empty = explorer.filter(source="hermes", finish="length")
    assert empty.empty and explorer.images == [] and explorer.samples == ""
    assert NO_MATCH in explorer.body_html and "<img" not in explorer.body_html
    assert explorer.caption == "0 of 24 rows · source=hermes · flag=any row · finish=length"
    assert len(reads) == before  # nothing to read


def test_the_static_html_draws_nothing_twice_and_says_the_filters_are_live(data: RunData) -> None:
    """Every row selected: the figures and samples are notebook 04's own sections' (a report showed
    the length and finish-reason figures and the sample list twice); they are at hand, not drawn."""
    explorer = explore(data, n=5, interactive=False)
    assert explorer.widget is None
    page = explorer._repr_html_()
    assert "<img" not in page and "kit-samples" not in page
    assert len(explorer.images) == 2 and "kit-samples" in explorer.samples
    assert "live when this notebook runs in JupyterLab" in LIVE_NOTE and LIVE_NOTE in page
    assert (
        '<span class="kit-explore-caption">24 of 24 rows · source=all · flag=any row · finish=all</span>'
        in page
    )
    assert network_references(page) == []  # opens offline
    bundle = explorer._repr_mimebundle_()
    assert WIDGET_VIEW not in bundle and bundle["text/html"] == page


def test_the_widget_redraws_on_every_change(data: RunData, reads: list[list[int]]) -> None:
    pytest.importorskip("ipywidgets")
    explorer = explore(data, n=2, interactive=True)
    assert WIDGET_VIEW in explorer._repr_mimebundle_()
    box = explorer.widget
    (controls, caption, out) = box.children
    source, flag, finish = controls.children
    assert "kit-explore" in box._dom_classes
    for control, key in ((source, "source"), (flag, "flag"), (finish, "finish")):
        assert f"kit-explore-{key}" in control._dom_classes and control.description == key
    assert source.options[0] == ("all (24)", "all") and ("hermes (6)", "hermes") in source.options
    assert (
        flag._options_labels[:2] == ("any row (24)", "any flag (9)") and "refusal (1)" in flag._options_labels
    )
    assert [v for _, v in flag.options][2:] == list(data.flags.columns)
    assert "length (4)" in finish._options_labels

    finish.value = "length"
    assert len(explorer.selection) == 4 and explorer.filters["finish"] == "length"
    assert caption.value == (
        '<span class="kit-explore-caption">4 of 24 rows · source=all · flag=any row · finish=length</span>'
    )
    kinds = [next(k for k in o["data"] if k != "text/plain") for o in out.outputs]
    assert kinds == ["image/png", "image/png", "text/html"]
    assert shown_ids(out.outputs[-1]["data"]["text/html"]) <= set(explorer.selection["id"])
    assert set(reads[-1]) <= set(explorer.selection.index)

    source.value = "hermes"  # hermes rows never ran out of tokens
    assert explorer.selection.empty and "0 of 24 rows · source=hermes" in caption.value
    assert len(out.outputs) == 1 and NO_MATCH in out.outputs[0]["data"]["text/html"]

    explorer.filter(source="think", flag="unterminated_think")  # the Dropdowns follow a call
    assert (source.value, flag.value, finish.value) == ("think", "unterminated_think", "all")
    assert explorer.selection["id"].tolist() == ["think-001"]
    assert "1 of 24 rows · source=think · flag=unterminated_think · finish=all" in caption.value


def test_a_value_not_in_the_run_names_the_choices(data: RunData) -> None:
    explorer = explore(data, n=1, interactive=False)
    with pytest.raises(KitError, match=r"source='gsm8k' is not in this run; pick one of \['all', 'chat'"):
        explorer.filter(source="gsm8k")
    with pytest.raises(KitError, match="pass the RunData|takes the RunData"):
        explore(data.df)  # type: ignore[arg-type]
