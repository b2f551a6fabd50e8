"""Stage 3's outcome in sentences, for notebook 03 and the report's index: rows generated against
planned, failures by reason, throughput, where the data is and how to load it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kit.artifacts import Health, Manifest, Summary
from kit.display import Answer, is_number, number, seconds
from kit.generate.store import FailureLog
from kit.runfolder import RunFolder, read_json

FAILURE_REASONS = {
    "context_overflow": "prompt longer than the model's context",
    "rejected": "rejected by the server",
    "transient": "server error, retries used up",
}


def plan_warnings(folder: RunFolder) -> list[str]:
    """What the prompt plan warned of (plan.json's warnings: a source left short of its count, with
    the filter responsible and what to do); said once, in stage 3's outcome, not where it was built."""
    plan = read_json(folder.plan) if folder.plan.exists() else {}
    return [str(w) for w in plan.get("warnings") or []] if isinstance(plan, dict) else []


def _short_sources(folder: RunFolder) -> str:
    """'infinity_instruct 17 of 20': the sources the plan left short of their count."""
    plan = read_json(folder.plan) if folder.plan.exists() else {}
    sources = plan.get("sources") or [] if isinstance(plan, dict) else []
    short = [
        f"{e['source']} {e['kept']:,} of {e['requested']:,}"
        for e in sources
        if isinstance(e, dict)
        and isinstance(e.get("requested"), int)
        and (e.get("kept") or 0) < e["requested"]
    ]
    return ", ".join(short)


def generation_answer(folder: RunFolder, manifest: Manifest | None) -> Answer:
    """Rows generated against planned, whether the run finished, and the sources the plan left short
    (the Generate page says why and what to do)."""
    answer = _rows_answer(folder, manifest)
    short = _short_sources(folder) if plan_warnings(folder) else ""
    if not short or answer.status == "missing":
        return answer
    detail = f"{answer.detail} The plan holds fewer prompts than asked: {short} (the Generate page says why)."
    return Answer(answer.topic, answer.headline, detail, "warn")


def _rows_answer(folder: RunFolder, manifest: Manifest | None) -> Answer:
    if manifest is None:
        shards = folder.shard_paths()
        if not shards:
            why = "no generations yet: stage 3 has not run (`kit generate PARAMS`)."
            return Answer("Generation", "not run", why, "missing")
        return Answer(
            "Generation",
            "unfinished",
            f"{len(shards)} shard(s) written but no manifest.json: the run stopped before its end; "
            "rerun `kit generate PARAMS` to resume.",
            "warn",
        )
    rows, left = int(manifest.rows or 0), int(manifest.left or 0)
    planned = rows + left
    head = f"{rows:,} of {planned:,} rows"
    restarts = int(manifest.server_restarts or 0)
    extra = f" The server was restarted {restarts} time(s) and the run went on." if restarts else ""
    if manifest.complete:
        return Answer("Generation", head, f"every planned row was generated; the run is complete.{extra}")
    return Answer(
        "Generation",
        head,
        f"the run is not complete: {left:,} rows left; rerun `kit generate PARAMS` to resume.{extra}",
        "warn",
    )


def failures_by_reason(folder: RunFolder, summary: Summary | None) -> dict[str, int] | None:
    """Failed requests per reason: stage 4's count (ids without a row), else the last record of each
    id in failures.jsonl; None when neither exists."""
    if summary is not None and "failures_by_reason" in summary.health:
        return {str(k): int(v) for k, v in summary.health.failures_by_reason.items()}
    if not folder.failures.exists():
        return None
    last = {r.get("id"): r for r in FailureLog(folder.failures).read()}
    return dict(Counter(str(r.get("reason")) for r in last.values()))


def failure_answer(by_reason: dict[str, int] | None) -> Answer:
    """Failed requests counted by reason."""
    if by_reason is None:
        why = "failures.jsonl is missing: stage 3 has not run (`kit generate PARAMS`)."
        return Answer("Failures", "unknown", why, "missing")
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
    summary: Summary | None,
    manifest: Manifest | None,
    output_tokens: int | None = None,
    baseline: str | None = None,
) -> Answer:
    """Output tokens/s and rows/s over the time spent generating: stage 4's figures, else the
    manifest's rows over its time generating (summed over sessions), with `output_tokens` (the
    rows' completion tokens) for tokens/s; beside it `baseline`, the run against what the sweep
    measured for the arm it used (kit.decide.views.verdict.against_sweep). No peak: one timeline
    sample's rate (rows and their tokens count when a row finishes) is no number to act on beside
    the mean."""
    health = summary.health if summary is not None else Health()
    tok_s, rows_s, duration = health.output_tok_s, health.rows_s, health.duration_s
    if duration is None and manifest is not None and manifest.generating_s:
        duration = float(manifest.generating_s)
        rows_s = float(manifest.rows or 0) / duration
        tok_s = output_tokens / duration if output_tokens is not None else None
    if not is_number(duration):
        why = "no timing yet: stage 3 has not finished (`kit generate PARAMS`, then `kit analyse PARAMS`)."
        return Answer("Throughput", "unknown", why, "missing")
    parts = [f"over {seconds(duration)} of generation"]
    if is_number(rows_s):
        parts.insert(0, f"{number(float(rows_s))} rows/s")
    tail = f"; {baseline}" if baseline else ""
    head = f"{number(float(tok_s), 0)} output tok/s" if is_number(tok_s) else parts[0]
    return Answer("Throughput", head, " ".join(parts) + tail + ".")


def data_answer(folder: RunFolder, manifest: Manifest | None) -> Answer:
    """Where the rows are and the one line that loads them."""
    shards = folder.shard_paths()
    where = folder.generations.resolve()
    if not shards:
        return Answer("Data", "none yet", f"no parquet shards under {where}.", "missing")
    rows = f"{int(manifest.rows):,} rows in " if manifest is not None and "rows" in manifest else ""
    return Answer("Data", f"{rows}{len(shards)} parquet shard(s)", f"under {where}/.")


def load_snippet(folder: RunFolder) -> str:
    """The Python line that loads the run's rows with Hugging Face datasets, streamed: the cached
    form first copies every row into the Hugging Face cache (~4.6x the shards; docs/lab/bench_scale.md)."""
    where = folder.generations.resolve()
    return f'datasets.load_dataset("parquet", data_files="{where}/*.parquet", streaming=True)'


def session_sentence(root: Path, manifest: Manifest) -> str:
    """What `kit generate` prints at its end: one sentence (the details are in manifest.json)."""
    rows, left = int(manifest.rows or 0), int(manifest.left or 0)
    head = f"{root}: {'complete' if manifest.complete else 'not complete'}, {rows:,} of {rows + left:,} rows"
    made = int(manifest.rows_this_session or 0)
    if manifest.complete:
        tail = "nothing was left to generate" if made == 0 else f"{made:,} made in this session"
        return f"{head}; {tail}."
    return (
        f"{head} ({made:,} made in this session), {left:,} left: failures.jsonl says why; "
        "rerun the same command to retry them."
    )
