"""The demo's report checked against its run (issue 60): every figure its index and stage pages state
is found in the artifacts behind them within the rounding shown (tests/report_figures.py), and the
figures a reader acts on are read by their labels against the very field they state. The first alone
would have passed "mean 16" for 160 (a 16 is in the run: its concurrency); the second does not.

Reads the session's shrunk demo run (tests/conftest.py `demo_run`), shared with tests/test_pipeline.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from report_figures import Figure, figures_in, page_texts, traced, untraced  # noqa: E402

from kit.display import number  # noqa: E402


def test_every_figure_on_the_pages_is_in_the_artifacts(demo_run: Path) -> None:
    from kit.decide.views.whatif_model import band_for_run
    from kit.decide.views.worth import worth_for_run
    from kit.runfolder import RunFolder

    pages = sorted((demo_run / "report").glob("*.html"))
    assert {p.stem for p in pages} >= {"index", "02_decide_mtp", "04_analyse_outputs"}
    band = band_for_run(RunFolder(demo_run))  # named: the cost model's validated error, a constant of the kit
    named = [100 * band.lo, 100 * band.hi, band.points] if band is not None else []
    flags = json.loads((demo_run / "summary.json").read_text())["flags"]  # named: the verdict's flags fired
    named.append(sum(v for k, v in flags.items() if k != "function_calling"))
    # named: the index's 'If MTP could run here ...', the cost model's band made as the page renders
    worth = worth_for_run(RunFolder(demo_run))
    named += [f.value for f in figures_in(worth.headline())] if worth is not None else []
    missing = untraced(pages, demo_run, named)
    assert missing == [], "\n".join(f"{page}: {f.value:g} in {f.context!r}" for page, f in missing)


def _text(page: Path) -> str:
    return " ".join(page_texts(page))


def _said(pattern: str, text: str) -> list[Figure]:
    """The figures of each match of `pattern` (its groups, in order)."""
    found = []
    for m in re.finditer(pattern, text):
        found += [next(figures_in(g)) for g in m.groups()]
    return found


def _holds(fig: Figure, value: float | None, what: str) -> None:
    assert value is not None, f"{what}: the page says {fig.value:g}, the artifact holds nothing"
    said = f"{what}: the page says {fig.value:g} ({fig.context!r}), the artifact {value}"
    assert traced(fig, [value], scales=[1.0]), said


def test_labelled_figures_state_their_own_field(demo_run: Path) -> None:
    """Each figure read beside its label, against the field it names: the throughput, the peak, the
    tail's rates and share (the same rounding on both pages), the decision's headline and interval,
    and every source's completion lengths in the figure's alt text (where '120.3' once read '12')."""
    summary = json.loads((demo_run / "summary.json").read_text())
    decision = json.loads((demo_run / "decision.json").read_text())
    index, stage4 = (_text(demo_run / "report" / f"{p}.html") for p in ("index", "04_analyse_outputs"))
    health, tail = summary["health"], summary["tail"]
    checked = 0
    for fig in _said(r"([\d,.]+) output tok/s:", index) + _said(r"output tok/s \(mean\) ([\d,.]+)", stage4):
        _holds(fig, health["output_tok_s"], "mean output tok/s")
        checked += 1
    for fig in _said(r"mean ([\d,.]+) tok/s, peak", stage4):
        _holds(fig, health["output_tok_s"], "mean output tok/s (alt text)")
        checked += 1
    for fig in _said(r"peak over [^:]+?\) ([\d,.]+)", stage4):
        _holds(fig, health["output_tok_s_peak"], "sustained peak")
    if health["output_tok_s_peak"] is None:
        assert "none: no session lasted" in stage4
    from kit.artifacts import Decision

    read = Decision.from_json(decision)
    chosen = next(
        r for r in read.table if r.arm == read.arm.name and r.concurrency == read.measured_at_concurrency
    )
    row = chosen.to_json()
    head = _said(r"Measured by the sweep: ([\d,.]+) output tok/s at concurrency (\d+)", index)
    assert len(head) == 2, index
    _holds(head[0], row["measured_tok_s"], "the decision's headline")
    _holds(head[1], row["concurrency"], "its concurrency")
    checked += 2
    spread = _said(r"90% interval ([\d,.]+)-([\d,.]+), (\d+) repetitions", index)
    if row.get("repetitions", 1) >= 2:
        assert len(spread) == 3, "a headline measured more than once states its interval"
        for fig, key in zip(spread, ("measured_lo", "measured_hi", "repetitions"), strict=True):
            _holds(fig, row[key], f"the headline's {key}")
        checked += 3
    if tail["known"] and tail["duration_s"] > 0:
        shares = _said(r"\((\d+)% of the run\)", index) + _said(r"\((\d+)% of the session\)", stage4)
        assert len(shares) == 2 and shares[0].value == shares[1].value, shares
        for fig in shares:
            _holds(fig, 100 * tail["share"], "the tail's share")
        rates = _said(r"([\d,.]+) tok/s in the tail, ([\d,.]+) tok/s at full load", stage4)
        assert len(rates) == 2, stage4
        _holds(rates[0], tail["tok_s_tail"], "the tail's tok/s")
        _holds(rates[1], tail["tok_s_full_load"], "full load's tok/s")
        checked += 4
    for source, entry in summary["sources"].items():
        lengths = entry["completion_tokens"]
        said = _said(rf"{source}: p50 ([\d,.]+), p90 ([\d,.]+), max ([\d,.]+)", stage4)
        assert len(said) >= 3, f"{source}'s completion lengths are not in the alt text"
        for fig, q in zip(said[:3], ("p50", "p90", "max"), strict=True):
            _holds(fig, lengths[q], f"{source}'s completion tokens {q}")
        checked += 3
    assert checked >= 20, checked


@pytest.mark.parametrize(("shown", "value"), [("16", 160.223), ("12", 120.3), ("1,5", 1499.7)])
def test_the_check_sees_the_figures_issue_60_found(shown: str, value: float) -> None:
    """What the labelled check would have said of the page before the fix: each figure is refused."""
    fig = next(figures_in(shown))
    assert not traced(fig, [value], scales=[1.0]) and traced(next(figures_in(number(value))), [value], [1.0])
