"""One finding of the probe: a checked fact with a status a person can act on (kit.artifacts.Finding)."""

from __future__ import annotations

from typing import Any, Literal

from kit.artifacts import Finding, ProbeSummary

Status = Literal["ok", "warn", "fail"]
STATUSES = ("ok", "warn", "fail")


def finding(section: str, name: str, status: Status, value: Any, reason: str, action: str = "") -> Finding:
    """A finding as stored in probe.json; warn and fail carry an `action` saying what to do."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    if status != "ok" and not action:
        raise ValueError(f"finding {section}/{name} is {status} but says nothing about what to do")
    return Finding(section=section, name=name, status=status, value=value, reason=reason, action=action)


def summarize(findings: list[Finding]) -> ProbeSummary:
    """Go when nothing failed; the names of failures and warnings, `section/name`."""
    fails = [f.key for f in findings if f.status == "fail"]
    warns = [f.key for f in findings if f.status == "warn"]
    return ProbeSummary(go=not fails, fails=fails, warns=warns)
