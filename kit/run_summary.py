"""A run's questions answered in sentences, from whichever artifacts its folder holds.

Go or no-go (probe.json), the decoding decision and why (decision.json), rows generated against
planned (manifest.json), failures by reason (failures.jsonl), throughput (summary.json or the
manifest), and where the data is. A stage that has not run is an answer too: it says what is
missing and which command writes it. The index page (kit.report) shows these first.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.display import number, seconds
from kit.runfolder import RunFolder

FAILURE_REASONS = {
    "context_overflow": "prompt longer than the model's context",
    "rejected": "rejected by the server",
    "transient": "server error, retries used up",
}


@dataclass(frozen=True)
class Answer:
    """One of the run's questions: a topic, its short answer, the sentence behind it, a status
    (ok / warn / fail / missing) for the page's colour."""

    topic: str
    headline: str
    detail: str
    status: str = "ok"


def read_json_or_none(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`, or None when it is absent or unreadable (the page says so)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def gpu_line(probe: dict[str, Any]) -> str:
    """`2 x NVIDIA H200`, or `no GPU (CPU)`."""
    devices = (probe.get("gpus") or {}).get("devices") or []
    names = [str(d.get("name")) for d in devices if isinstance(d, dict) and d.get("name")]
    if not names:
        return "no GPU (CPU)"
    return " + ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def probe_answer(probe: dict[str, Any] | None) -> Answer:
    """GO / NO-GO with the first failure (or warning) and what to do about it."""
    if not probe or "summary" not in probe:
        return Answer("Environment", "not probed", "probe.json is missing: stage 1 has not run.", "missing")
    findings = probe.get("findings") or []
    fails = [f for f in findings if f.get("status") == "fail"]
    warns = [f for f in findings if f.get("status") == "warn"]
    where = f"on {gpu_line(probe)}"
    if fails:
        f = fails[0]
        detail = (
            f"{len(fails)} of {len(findings)} checks failed {where}; the first: "
            f"{f.get('section')}/{f.get('name')}: {f.get('reason')}. Do: {f.get('action')}"
        )
        return Answer("Environment", "NO-GO", detail, "fail")
    if warns:
        w = warns[0]
        detail = (
            f"{len(findings) - len(warns)} checks passed {where}, {len(warns)} warned; the first: "
            f"{w.get('section')}/{w.get('name')}: {w.get('reason')}."
        )
        return Answer("Environment", "GO", detail, "warn")
    return Answer("Environment", "GO", f"all {len(findings)} checks passed {where}.")


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and not math.isnan(x)


def arm_label(spec_k: int, name: str) -> str:
    """`plain decoding` or `MTP k=2` (name: the speculative algorithm's label)."""
    return "plain decoding" if spec_k == 0 else f"{name} k={spec_k}"


def _best(rows: list[dict[str, Any]], col: str, spec: bool) -> dict[str, Any] | None:
    rows = [r for r in rows if (int(r.get("spec_k") or 0) > 0) == spec and _num(r.get(col))]
    return max(rows, key=lambda r: float(r[col])) if rows else None


def _not_measured(decision: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    """Why no speculative arm was measured, or None when one was."""
    spec = [r for r in rows if int(r.get("spec_k") or 0) > 0]
    if not spec or any(r.get("status") == "ok" and _num(r.get("measured_tok_s")) for r in spec):
        return None
    why = decision.get("speculation_unavailable_reason")
    if not why:
        failed = [str(r.get("reason") or "").splitlines() for r in spec if r.get("reason")]
        why = failed[0][0] if failed and failed[0] else "the sweep did not run its arms"
    return f"Speculation could not be measured: {why}."


def _chosen_row(decision: dict[str, Any], rows: list[dict[str, Any]], col: str) -> dict[str, Any] | None:
    """The table row of the chosen arm at the chosen concurrency (else that arm's best)."""
    arm = decision.get("chosen_arm")
    level = (decision.get("engine_settings") or {}).get("client_concurrency")
    mine = [r for r in rows if r.get("arm") == arm and _num(r.get(col))]
    at_level = [r for r in mine if r.get("concurrency") == level]
    return at_level[0] if at_level else max(mine, key=lambda r: float(r[col]), default=None)


def _lead(
    win: dict[str, Any], other: dict[str, Any] | None, col: str, label: str, name: str, runs: bool
) -> str:
    """How far the chosen arm is ahead of the best arm of the other kind, or why it is kept if behind
    (`runs`: whether speculation can run with this engine and model)."""
    if other is None:
        return ""
    other_label = arm_label(int(other["spec_k"]), name)
    theirs = f"{number(float(other[col]), 0)} tok/s at concurrency {int(other['concurrency'])}"
    ratio = float(win[col]) / float(other[col])
    if ratio >= 1:
        return f"That is {100 * (ratio - 1):.0f}% more than the best of {other_label} ({theirs})."
    ahead = f"{other_label} would give {100 * (1 / ratio - 1):.0f}% more ({theirs})"
    if not runs and int(other["spec_k"]) > 0:
        return f"{ahead}, but it cannot run here."
    return (
        f"{ahead}, but {label} is kept: the margin is within the run-to-run noise or the cost model's "
        "error (see the decision page)."
    )


def decision_answer(decision: dict[str, Any] | None, name: str = "MTP", worth: str | None = None) -> Answer:
    """The chosen arm, measured or predicted, and its lead over the best arm of the other kind;
    why speculation was not measured, and what MTP would be worth (`worth`) when given."""
    if not decision or "chosen_arm" not in decision:
        return Answer("Decision", "not decided", "decision.json is missing: stage 2 has not run.", "missing")
    rows = decision.get("table") or []
    measured = decision.get("decided_by") == "measured"
    col = "measured_tok_s" if measured else "predicted_tok_s"
    k = int((decision.get("engine_settings") or {}).get("spec_k") or 0)
    label = arm_label(k, name)
    win = _chosen_row(decision, rows, col)
    text = ""
    if win:
        how = "Measured" if measured else "Predicted, nothing measured"
        text = f"{how}: {number(float(win[col]), 0)} output tok/s at concurrency {int(win['concurrency'])}. "
        runs = not decision.get("speculation_unavailable_reason")
        text += _lead(win, _best(rows, col, k == 0), col, label, name, runs)
    text = " ".join(t for t in (text.strip(), _not_measured(decision, rows), worth) if t)
    headline = f"{label} ({'measured' if measured else 'predicted only'})"
    return Answer("Decision", headline, text, "ok" if measured else "warn")


def generation_answer(folder: RunFolder, manifest: dict[str, Any] | None) -> Answer:
    """Rows generated against planned, and whether the run finished."""
    if manifest is None:
        shards = folder.shard_paths()
        if not shards:
            return Answer("Generation", "not run", "no generations yet: stage 3 has not run.", "missing")
        return Answer(
            "Generation",
            "unfinished",
            f"{len(shards)} shard(s) written but no manifest.json: the run stopped before its end; "
            "rerun `kit generate PARAMS` to resume.",
            "warn",
        )
    rows, left = int(manifest.get("rows") or 0), int(manifest.get("left") or 0)
    planned = rows + left
    head = f"{rows:,} of {planned:,} rows"
    restarts = int(manifest.get("server_restarts") or 0)
    extra = f" The server was restarted {restarts} time(s) and the run went on." if restarts else ""
    if manifest.get("complete"):
        return Answer("Generation", head, f"every planned row was generated; the run is complete.{extra}")
    return Answer(
        "Generation",
        head,
        f"the run is not complete: {left:,} rows left; rerun `kit generate PARAMS` to resume.{extra}",
        "warn",
    )


def failures_by_reason(folder: RunFolder, summary: dict[str, Any] | None) -> dict[str, int] | None:
    """Failed requests per reason: stage 4's count (ids without a row), else the last record of each
    id in failures.jsonl; None when neither exists."""
    health = (summary or {}).get("health") or {}
    if isinstance(health.get("failures_by_reason"), dict):
        return {str(k): int(v) for k, v in health["failures_by_reason"].items()}
    if not folder.failures.exists():
        return None
    from kit.generate.store import FailureLog

    last = {r.get("id"): r for r in FailureLog(folder.failures).read()}
    return dict(Counter(str(r.get("reason")) for r in last.values()))


def failure_answer(by_reason: dict[str, int] | None) -> Answer:
    """Failed requests counted by reason."""
    if by_reason is None:
        return Answer("Failures", "unknown", "failures.jsonl is missing: stage 3 has not run.", "missing")
    total = sum(by_reason.values())
    if not total:
        return Answer("Failures", "none", "no request failed.")
    ordered = sorted(by_reason.items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{n:,} {FAILURE_REASONS.get(k, k.replace('_', ' '))}" for k, n in ordered)
    return Answer(
        "Failures",
        f"{total:,} failed",
        f"{parts}. Each is a line of failures.jsonl with its error; "
        "`kit generate PARAMS --retry-failures` tries them again.",
        "warn",
    )


def throughput_answer(
    summary: dict[str, Any] | None, manifest: dict[str, Any] | None, output_tokens: int | None = None
) -> Answer:
    """Output tokens/s and rows/s over the time spent generating: stage 4's figures, else the
    manifest's time with the session's rows (and `output_tokens`, the rows' completion tokens)."""
    health = (summary or {}).get("health") or {}
    tok_s, rows_s, duration = health.get("output_tok_s"), health.get("rows_s"), health.get("duration_s")
    if duration is None and manifest:
        duration = manifest.get("generating_s")
        if duration and manifest.get("rows_this_session"):
            rows_s = manifest["rows_this_session"] / duration
        if duration and output_tokens and manifest.get("rows_this_session") == manifest.get("rows"):
            tok_s = output_tokens / duration
    if not _num(duration):
        return Answer("Throughput", "unknown", "no timing yet: stage 3 (or stage 4) has not run.", "missing")
    parts = [f"over {seconds(duration)} of generation"]
    if _num(rows_s):
        parts.insert(0, f"{number(float(rows_s))} rows/s")
    peak = health.get("output_tok_s_peak")
    tail = f"; peak {number(float(peak), 0)} tok/s" if _num(peak) else ""
    head = f"{number(float(tok_s), 0)} output tok/s" if _num(tok_s) else "rows/s only"
    return Answer("Throughput", head, " ".join(parts) + tail + ".")


def data_answer(folder: RunFolder, manifest: dict[str, Any] | None) -> Answer:
    """Where the rows are and the one line that loads them."""
    shards = folder.shard_paths()
    where = folder.generations.resolve()
    if not shards:
        return Answer("Data", "none yet", f"no parquet shards under {where}.", "missing")
    rows = f"{int(manifest['rows']):,} rows in " if manifest and manifest.get("rows") is not None else ""
    return Answer("Data", f"{rows}{len(shards)} parquet shard(s)", f"under {where}/.")


def load_snippet(folder: RunFolder) -> str:
    """The Python line that loads the run's rows with Hugging Face datasets."""
    return f'datasets.load_dataset("parquet", data_files="{folder.generations.resolve()}/*.parquet")'
