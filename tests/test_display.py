"""The display helpers read back as the value they were given, within the rounding they show, at every
magnitude and sign (issue 60: `number` showed 160.223 as "16", 1,499.7 as "1,5"). Each test reads the
shown text as a person would (a reader of the page knows nothing of the code) and checks that the
value lies within half a unit of the last digit shown."""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.display import GIB, MISSING, gib, hours, number, percent, seconds, signed_percent, tok_s

FINITE = st.floats(allow_nan=False, allow_infinity=False)
"""Every finite double: from 5e-324 to 1.8e308, both signs, zeros of both signs."""
MAGNITUDES = st.builds(
    lambda m, e: m * 10.0**e, st.floats(-10, 10, allow_nan=False), st.integers(min_value=-12, max_value=15)
)
"""Values spread evenly over the magnitudes pages show (1e-12 to 1e16), where FINITE piles up at
the extremes."""
VALUES = FINITE | MAGNITUDES
SLACK = Decimal("1e-12")
"""Relative slack for helpers that scale before rounding (x 100, / 2**30): the scaling's own rounding."""

GROUPED = re.compile(r"-?\d{1,3}(,\d{3})*(\.\d+)?")
SCIENTIFIC = re.compile(r"-?\d\.\d+e[-+]\d+")


def read_number(shown: str) -> tuple[Decimal, Decimal]:
    """What a reader takes from `shown`: its value and half a unit of its last digit. Thousands must be
    grouped by three ("3,815,39" is no number)."""
    if SCIENTIFIC.fullmatch(shown):
        mantissa, exp = shown.split("e")
        places = len(mantissa.split(".")[1])
        return Decimal(shown), Decimal(5) * Decimal(10) ** (int(exp) - places - 1)
    assert GROUPED.fullmatch(shown), f"{shown!r} does not read as a number"
    places = len(shown.split(".")[1]) if "." in shown else 0
    return Decimal(shown.replace(",", "")), Decimal(5) * Decimal(10) ** (-places - 1)


def assert_reads_back(x: float, value: Decimal, half: Decimal, scale: Decimal = Decimal(1)) -> None:
    """`x` x `scale` lies within `half` of `value` (plus the scaling's own rounding where it scales)."""
    with localcontext(prec=800):  # exact for every double (Decimal's default keeps 28 digits)
        exact = Decimal(x) * scale
        slack = SLACK * abs(exact) if scale != 1 else Decimal(0)
        assert abs(exact - value) <= half + slack, (x, value, half)


def assert_sign(x: float, value: Decimal) -> None:
    """A value shown other than zero has the sign of `x`."""
    assert value == 0 or (value > 0) == (x > 0), (x, value)


@given(VALUES)
@example(160.223)
@example(100.4)
@example(1_499.7)
@example(3_815_389.8)
@example(-100.4)
@example(99.96)
def test_number_reads_back_within_its_rounding(x: float) -> None:
    shown = number(x)
    value, half = read_number(shown)
    assert_reads_back(x, value, half)
    assert_sign(x, value)
    if x != 0:  # a number that is not zero never reads as zero
        assert value != 0, (x, shown)


@given(VALUES, st.integers(min_value=0, max_value=6))
def test_number_with_decimals_reads_back(x: float, decimals: int) -> None:
    shown = number(x, decimals)
    value, half = read_number(shown)
    assert_reads_back(x, value, half)
    assert_sign(x, value)
    if not float(x).is_integer():
        assert len(shown.partition(".")[2]) == decimals, shown


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_integers_stay_whole_and_exact(n: int) -> None:
    for x in (n, np.int64(max(min(n, 2**63 - 1), -(2**63)))):
        value, half = read_number(number(x))
        assert value == int(x) and half == Decimal("0.5")


def test_number_of_what_is_not_a_finite_number() -> None:
    assert [number(None), number(float("nan")), number(True), number("n/a")] == [
        MISSING,
        MISSING,
        "yes",
        "n/a",
    ]
    assert number(np.float32(160.223)) == "160" and number(np.float64(-0.0)) == "0"


@given(VALUES.filter(lambda x: math.isfinite(100 * x)), st.integers(min_value=0, max_value=3))
def test_percent_reads_back(x: float, decimals: int) -> None:
    shown = percent(x, decimals)
    assert shown.endswith("%"), shown
    value, half = read_number(shown[:-1])
    assert_reads_back(x, value, half, Decimal(100))
    assert_sign(x, value)


@given(VALUES)
def test_signed_percent_says_its_sign(x: float) -> None:
    shown = signed_percent(x)
    assert shown.endswith("%"), shown
    body = shown[:-1]
    value, half = read_number(body.lstrip("+"))
    assert_reads_back(x, value, half)
    assert body[0] in "+-" or value == 0, shown  # a change shows its sign; nothing has none
    assert_sign(x, value)


def read_duration(shown: str) -> tuple[Decimal, Decimal]:
    """'2 h 05 min', '1 min 40 s', '12 min', '40 s', '0.25 s' (each may have a minus): seconds, and half
    the smallest unit shown."""
    if shown.startswith("-"):
        value, half = read_duration(shown[1:])
        assert value > 0, f"{shown!r}: minus nothing"
        return -value, half
    if m := re.fullmatch(r"([\d,]+) h (\d\d) min", shown):
        assert int(m[2]) < 60, shown
        return 3600 * read_number(m[1])[0] + 60 * int(m[2]), Decimal(30)
    if m := re.fullmatch(r"([\d,]+) min (\d+) s", shown):
        assert int(m[2]) < 60, shown
        return 60 * read_number(m[1])[0] + int(m[2]), Decimal("0.5")
    if m := re.fullmatch(r"([\d,]+) min", shown):
        return 60 * read_number(m[1])[0], Decimal(30)
    m = re.fullmatch(r"([\d.,]+) s", shown)
    assert m, f"{shown!r} does not read as a duration"
    return read_number(m[1])


DURATIONS = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False) | MAGNITUDES


@given(DURATIONS)
@example(59.5)
@example(59.49)
@example(-100.0)
@example(-0.001)
@example(119.6)
@example(599.6)
@example(0.004)
def test_seconds_reads_back(x: float) -> None:
    value, half = read_duration(seconds(x))
    assert_reads_back(x, value, half)


@given(DURATIONS)
@example(59.6)
@example(599.6)
@example(3599.9)
@example(7800)
def test_hours_reads_back(x: float) -> None:
    value, half = read_duration(hours(x))
    assert_reads_back(x, value, half)


def test_durations_of_nothing() -> None:
    assert [seconds(None), hours(None), hours(float("nan"))] == [MISSING] * 3


@given(VALUES)
def test_gib_reads_back(x: float) -> None:
    shown = gib(x)
    assert shown.endswith(" GiB"), shown
    value, half = read_number(shown.removesuffix(" GiB"))
    assert_reads_back(x, value, half, Decimal(1) / Decimal(GIB))


@given(VALUES)
@example(160.223)
@example(0.4)
def test_tok_s_reads_back(x: float) -> None:
    shown = tok_s(x)
    assert shown.endswith(" tok/s"), shown
    value, half = read_number(shown.removesuffix(" tok/s"))
    assert_reads_back(x, value, half)
    assert_sign(x, value)


@pytest.mark.parametrize(
    ("x", "shown"),
    [(160.223, "160"), (100.4, "100"), (1_499.7, "1,500"), (3_815_389.8, "3,815,390"), (2.5, "2.5")],
)
def test_the_values_issue_60_saw(x: float, shown: str) -> None:
    """The figures the demo's pages showed wrong: the mean 160 as '16', and three more."""
    assert number(x) == shown
