"""Every figure a rendered report states, found in the artifacts behind it (issue 60).

`figures(page)` reads the numbers a reader meets on a page: the index's answers, figure captions and
alt texts; on a stage page the notebook's outputs (tables, verdicts, alt texts), not the notebook's
own prose and not the sample rows' text. `untraced(page_figures, values)` keeps those that no value of
the artifacts (`artifact_values`: every number of summary.json, decision.json, manifest.json and
probe.json, and the numbers their sentences state; plan.json and sweep.parquet, named for the stage 3
and decide pages' tables) reads back as within the rounding shown, as it is
or in the unit the page shows it in (a share as %, bytes as GiB, seconds as minutes or hours).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

ARTIFACTS = ("summary.json", "decision.json", "manifest.json", "probe.json")
NAMED = ("plan.json",)
"""Named beside the four: stage 3's plan table (requested, available, kept per source) is plan.json's."""
TABLES = ("sweep.parquet",)
"""And the measured sweep's table on the decide page is sweep.parquet's."""
MADE_ON_THE_PAGE = {
    "What MTP would be worth": "kit.decide.views.worth: the cost model's band for a draft head the run lacks",
    "Predicted speculative / plain": "kit.decide.views.whatif: the cost model at the what-if's settings",
    "· accept length ": "kit.decide.views.whatif: the caption of its figure, the same settings",
}
"""Outputs whose figures no artifact holds because the notebook computes them as the page renders, from
the artifacts' inputs (a live widget's first state), each with its source."""
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]\d+)?(?![\w])")
DURATION = re.compile(r"(?<![\w.])(\d[\d,]*) (h|min) (\d+) (min|s)\b")
STAMP = re.compile(r"\d{4}-\d\d-\d\d( \d\d:\d\d( UTC)?)?|\(\d+ \w+ ago\)")
"""When an artifact was made, and how long before the page: times, not figures of the run."""
SCALES = (1.0, 100.0, 1 / 1024**3, 1 / 60, 1 / 3600, 1e-3, 1e-9)
"""The units a page shows an artifact's number in: as it is, a share as %, bytes as GiB, seconds as
minutes or hours, and thousands / billions (GB/s, GFLOP/s)."""


@dataclass(frozen=True)
class Figure:
    """A number as a page shows it: its value, half a unit of its last digit, and where it stands."""

    value: float
    half: float
    context: str


def _half(shown: str) -> float:
    mantissa, _, exp = shown.lower().partition("e")
    places = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 0.5 * 10.0 ** (-places + (int(exp) if exp else 0))


def figures_in(text: str) -> Iterator[Figure]:
    """The numbers of `text`: durations of two units ('4 min 39 s', '2 h 05 min') as seconds, every other
    number as it is written (thousands separated, decimals, a sign)."""
    spans = []
    for m in DURATION.finditer(text):
        big = float(m[1].replace(",", "")) * (3600 if m[2] == "h" else 60)
        small = float(m[3]) * (60 if m[4] == "min" else 1)
        spans.append(m.span())
        yield Figure(big + small, 30.0 if m[4] == "min" else 0.5, text[max(0, m.start() - 60) : m.end() + 20])
    for m in NUMBER.finditer(text):
        if any(a <= m.start() < b for a, b in spans):
            continue
        shown = m[0].replace(",", "").lstrip("+")
        context = text[max(0, m.start() - 60) : m.end() + 20]
        yield Figure(float(shown), _half(shown), context)


def page_texts(page: Path) -> list[str]:
    """What a reader meets on a report page as figures: on the index its answers, captions and alt texts;
    on a stage page the notebook cells' outputs (not the notebook's prose or the rows' own text)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(), "html.parser")
    for rows in soup.select("table.kit-samples, .kit-explore"):  # the rows' text, not the run's figures
        rows.decompose()
    alts = [img.get("alt", "") for img in soup.find_all("img")]
    for img in soup.find_all("img"):
        img.decompose()
    if page.stem == "index":
        parts = soup.select("ul.answers li, figcaption")
    else:
        parts = soup.select(".jp-OutputArea-output")
    texts = [STAMP.sub("", p.get_text(" ", strip=True)) for p in parts] + alts
    return [t for t in texts if not any(key in t for key in MADE_ON_THE_PAGE)]


def _numbers(value: Any) -> Iterator[float]:
    """Every number of a JSON value, and the numbers its strings state."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        if math.isfinite(value):
            yield float(value)
    elif isinstance(value, str):
        yield from (f.value for f in figures_in(value))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(k) if isinstance(k, str) and k[:1].isdigit() else iter(())
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)


def artifact_values(run: Path) -> list[float]:
    """Every number the run's artifacts hold (`ARTIFACTS`, `TABLES`), sorted."""
    import pyarrow.parquet as pq

    values: set[float] = set()
    for name in ARTIFACTS + NAMED:
        path = run / name
        if path.exists():
            values.update(_numbers(json.loads(path.read_text())))
    for name in TABLES:
        if (run / name).exists():
            values.update(_numbers(pq.read_table(run / name).to_pylist()))
    return sorted(values)


def traced(fig: Figure, values: Iterable[float], scales: Iterable[float] = SCALES) -> bool:
    """Whether some artifact value, in one of the page's units (`scales`), reads as `fig` within its
    rounding (the scaling's own rounding allowed for)."""
    shown = Decimal(repr(fig.value))
    scales = tuple(scales)
    for v in values:
        for scale in scales:
            x = v * scale
            if abs(Decimal(repr(x)) - shown) <= Decimal(repr(fig.half)) * Decimal("1.000001") + Decimal(
                repr(abs(x) * 1e-9)
            ):
                return True
    return False


def untraced(pages: Iterable[Path], run: Path, named: Iterable[float] = ()) -> list[tuple[str, Figure]]:
    """The figures of `pages` that no artifact of `run` holds (nor the values of a `named` source), with
    the page they are on."""
    values = artifact_values(run) + list(named)
    return [
        (page.name, fig)
        for page in pages
        for text in page_texts(page)
        for fig in figures_in(text)
        if not traced(fig, values)
    ]
