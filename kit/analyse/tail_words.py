"""The tail of a batch job in sentences: summary.json's `tail.sentence` ("The tail: the last 4 min 10 s
... ran below capacity ..."), and the clause on what speculation would have saved there (notebook 04,
the index). What they say is measured and predicted in kit/analyse/tail.py, which re-exports both.
"""

from __future__ import annotations

from kit.artifacts import TailSpeculation, TailSummary
from kit.display import percent, seconds, tok_s

MIN_IDLE_MINUTES = 0.05
"""Idle device time below this (3 s) is left unsaid: it rounds to nothing a reader could win back."""


MIN_SAVED_S = 1.0
"""A predicted saving below this is said by its upper bound only (a central 0.07 s is noise)."""


def _minutes(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def rate_words(entry: TailSummary) -> str:
    """The tail's and full load's tokens/s for the stage 4 table, with the tail's share of full load's
    where it means something (`_ratio_words`' rule), and how the tokens were counted where they were
    counted as rows finished (which a tail shorter than a request's life inflates)."""
    tail, full = entry.tok_s_tail, entry.tok_s_full_load
    said = f"{tok_s(tail)} in the tail, {tok_s(full)} at full load"
    if tail is not None and full and tail <= full:
        said += f" (the tail at {percent(tail / full, 0)})"
    if entry.tok_s_from != "rows' lives":
        said += "; tokens counted as requests finished (the rows do not say when they ran)"
    return said


def _ratio_words(entry: TailSummary) -> str:
    """The tail's tokens/s as a share of full load's, where that share means something: tokens count
    when a row finishes, so a full-load phase shorter than a request's life saw few rows finish and
    reads slower than the tail (the demo's "1847% of full-load tokens/s"); no share over 100% is said."""
    tail, full = entry.tok_s_tail, entry.tok_s_full_load
    if tail is None or not full or tail > full:
        return ""
    return f" at {percent(tail / full, 0)} of full-load tokens/s"


def _idle_words(entry: TailSummary) -> str:
    idle = entry.idle_minutes or 0.0
    if idle < MIN_IDLE_MINUTES:
        return ""
    return f", leaving {_minutes(idle)} {'GPU' if entry.device_unit == 'GPU' else 'replica'}-minutes idle"


def _full_load_words(entry: TailSummary) -> str:
    """What full load was: the engine's capacity, or the peak in flight (and why)."""
    level, cap = entry.full_load_in_flight, entry.engine_capacity
    if cap is not None and level >= cap:
        return f"capacity ({cap:,} requests)"
    said = f"the engine's capacity, {cap:,}, was never reached" if cap else "the engine's capacity is unknown"
    return f"the peak of {level:,.0f} in flight ({said})"


def speculation_clause(spec: TailSpeculation | None) -> str:
    """What speculation would have done in the tail, as a clause of the tail's sentence."""
    spec = spec or TailSpeculation()
    status, name = spec.status, spec.name or "speculation"
    if status == "saves":
        were = "" if spec.available else ", were it available here"
        rule = spec.switch_rule or {}
        switch = (
            "; generate.tail_speculation would not switch: no win outside the decision's noise"
            if rule and not rule.get("would_switch")
            else ""
        )
        if (spec.saved_s or 0) < MIN_SAVED_S:  # "0.07 s (0.00 s to 2.4 s)": its bound is what to act on
            most = seconds(spec.saved_high_s)
            return f"{name} k={spec.spec_k} there would have saved at most {most} (predicted{were}{switch})"
        return (
            f"{name} k={spec.spec_k} there would have saved {seconds(spec.saved_s)} "
            f"({seconds(spec.saved_low_s)} to {seconds(spec.saved_high_s)}, predicted{were}{switch})"
        )
    if status == "no win":
        x = spec.crossover
        where = f"k={spec.spec_k} wins only up to concurrency {x}" if x else "no k wins on its ladder"
        return (
            f"{name} there would have saved nothing: no win predicted at the tail's concurrencies ({where})"
        )
    k = f" k={spec.spec_k}" if spec.spec_k else ""
    if status == "already speculating":
        return f"the run already speculated there ({name}{k})"
    if status == "switched":
        return f"the run switched to {name}{k} for it (generate.tail_speculation)"
    if status in ("no decision", "no ladder"):
        return f"what speculation would have saved there is unknown: {spec.reason}"
    return ""


def tail_sentence(entry: TailSummary, speculation: bool = True) -> str:
    """One sentence for the tail, e.g. "The tail: the last 4 min 10 s (12% of the run) ran below capacity
    (256 requests) at 38% of full-load tokens/s, leaving 21 GPU-minutes idle; MTP k=2 there would have
    saved 1 min 30 s (50.0 s to 2 min 5 s, predicted)." (`speculation`: with what speculation would
    have done there)."""
    if not entry.known:
        return f"The tail: unknown, because {entry.reason}."
    of = "the run" if (entry.sessions or 1) <= 1 else f"its last session, {entry.session}"
    if entry.duration_s <= 0:
        return (
            f"The tail: none; {of} ended with {entry.in_flight_at_end:,.0f} requests in flight, "
            f"at or above {_full_load_words(entry)}: nothing idled at its end."
        )
    clause = speculation_clause(entry.speculation) if speculation else ""
    return (
        f"The tail: the last {seconds(entry.duration_s)} ({percent(entry.share, 0)} of {of}) ran "
        f"below {_full_load_words(entry)}{_ratio_words(entry)}{_idle_words(entry)}"
        + (f"; {clause}." if clause else ".")
    )
