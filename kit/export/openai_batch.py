"""`kit export --format openai_batch`: the run as an OpenAI batch output file (`output.jsonl`).

One line per request: `{id, custom_id, response: {status_code, request_id, body}, error}` with a
chat completion as `body`, or `response: null` and `error: {code, message}`. Every line of every
`adapter: openai_batch` source's input file is answered once: by its row, else by an error saying
why there is none (the request failed, the plan dropped the line and why, the run has not reached
it yet, its custom_id repeats an earlier line's). Rows of other sources are answered under their
row id. The drop rules do not apply: a batch output holds every answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from kit.analyse.reasoning import split_row
from kit.analyse.run import RunData
from kit.errors import DataError, ExportError
from kit.export.result import ExportResult
from kit.export.rows import openai_calls, shard_batches
from kit.params import RunParams
from kit.prompts.datafiles import local_files
from kit.prompts.openai_batch import parse_line
from kit.runfolder import RunFolder

OUTPUT = "output.jsonl"
ADAPTER = "openai_batch"
LOOSE_ID = re.compile(r'"custom_id"\s*:\s*"([^"\\]*)"')


def batch_id(custom_id: str) -> str:
    return "batch_req_" + hashlib.sha256(custom_id.encode()).hexdigest()[:24]


def completion_body(row: dict[str, Any], model: str) -> dict[str, Any]:
    """A generated row as an OpenAI chat completion object."""
    thought, _, answer, _ = split_row(row.get("reasoning"), str(row.get("completion") or ""))
    calls, answer = openai_calls(row.get("tool_calls"), answer, row.get("tools"), str(row["id"]))
    message: dict[str, Any] = {"role": "assistant", "content": answer}
    if thought is not None:
        message["reasoning_content"] = thought
    if calls:
        message["tool_calls"] = calls
    finished = row.get("finished_at")
    prompt, completion = int(row.get("prompt_tokens") or 0), int(row.get("completion_tokens") or 0)
    return {
        "id": f"chatcmpl-{row['id']}",
        "object": "chat.completion",
        "created": int(finished.timestamp()) if isinstance(finished, datetime) else 0,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": row.get("finish_reason"), "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def answer_line(custom_id: str, row: dict[str, Any], model: str) -> dict[str, Any]:
    return {
        "id": batch_id(custom_id),
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": str(row["id"]), "body": completion_body(row, model)},
        "error": None,
    }


def error_line(custom_id: str | None, code: str, message: str) -> dict[str, Any]:
    return {
        "id": batch_id(custom_id or message),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def _custom_ids(folder: RunFolder, batch_sources: set[str]) -> dict[str, str]:
    """prompt id -> custom_id of the batch sources' planned prompts (prompts.parquet's source_row_id)."""
    if not batch_sources or not folder.prompts.exists():
        return {}
    out: dict[str, str] = {}
    for batch in pq.ParquetFile(folder.prompts).iter_batches(columns=["id", "source", "source_row_id"]):
        for pid, source, rid in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
            if source in batch_sources:
                out[pid] = rid
    return out


def _rows(data: RunData) -> Iterator[dict[str, Any]]:
    kept = data.df[["shard", "row"]].to_numpy()
    wanted = {(int(s), int(r)) for s, r in kept}
    for index, path in enumerate(data.paths):
        position = 0
        for rows in shard_batches(path):
            for row in rows:
                if (index, position) in wanted:
                    yield row
                position += 1


def write_batch_output(
    folder: RunFolder, data: RunData, params: RunParams | None, root: Path, progress: bool
) -> ExportResult:
    """Write `output.jsonl` into `root`; an ExportResult with the lines answered and the errors."""
    if params is None:
        raise ExportError(f"{folder.params} is missing or no longer valid: the batch input files are unknown")
    sources = {s.name: s for s in params.data.sources if s.adapter == ADAPTER}
    custom = _custom_ids(folder, set(sources))
    model = params.model.served_name or Path(params.model.path).name
    answered: dict[tuple[str, str], bool] = {}
    counts = {"answered": 0, "errors": 0}
    out = root / OUTPUT
    with out.open("w", encoding="utf-8") as f:

        def put(line: dict[str, Any]) -> None:
            f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            counts["answered" if line["error"] is None else "errors"] += 1

        for row in _rows(data):
            pid, index = str(row.get("prompt_id") or row["id"]), int(row.get("sample_index") or 0)
            cid = custom.get(pid, str(row["id"]))
            cid = cid if index == 0 else f"{cid}.{index}"
            answered[(str(row["source"]), cid)] = True
            put(answer_line(cid, row, model))
        failures = _failures(data, custom)
        for name, source in sources.items():
            for line in _unanswered(
                name, source, answered, failures, bool(data.manifest and data.manifest.complete)
            ):
                put(line)
    return ExportResult(
        folder=root,
        splits={"answered": counts["answered"], "errors": counts["errors"]},
        reasons={},
        files=[out],
        complete=True,
    )


def _failures(data: RunData, custom: dict[str, str]) -> dict[str, tuple[str, str]]:
    """custom_id -> (reason, error) of the requests that failed for good."""
    out = {}
    for rec in data.failures.to_dict("records") if len(data.failures) else []:
        fid = str(rec.get("id"))
        pid, _, index = fid.partition(".")
        cid = custom.get(pid, fid) + (f".{index}" if index else "")
        out[cid] = (str(rec.get("reason") or "failed"), str(rec.get("error") or "")[:500])
    return out


def _unanswered(
    name: str,
    source: Any,
    answered: dict[tuple[str, str], bool],
    failures: dict[str, tuple[str, str]],
    finished: bool,
) -> Iterator[dict[str, Any]]:
    """Error lines for the lines of a batch source's files that no row answers."""
    seen: dict[str, str] = {}
    for path in local_files(source):
        with path.open(encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, start=1):
                where = f"{path.name} line {number}"
                try:
                    cid = parse_line(text)["custom_id"]
                except DataError as e:  # the plan dropped it for the same reason: say it, lose nothing else
                    if text.strip():
                        yield error_line(_loose_id(text), "invalid_request", f"{where}: {e}")
                    continue
                if cid in seen:
                    yield error_line(cid, "duplicate_custom_id", f"{where}: custom_id repeats {seen[cid]}")
                    continue
                seen[cid] = where
                if answered.get((name, cid)):
                    continue
                if cid in failures:
                    reason, error = failures[cid]
                    yield error_line(cid, reason, f"{where}: the request failed: {error}")
                else:
                    why = (
                        "not generated yet (the run is incomplete)"
                        if not finished
                        else ("not in the run's plan (dropped by a filter: see plan.json)")
                    )
                    yield error_line(cid, "not_generated", f"{where}: {why}")


def _loose_id(text: str) -> str | None:
    """The custom_id of a line that did not pass, when it can still be read (also from broken JSON)."""
    try:
        value = json.loads(text).get("custom_id")
    except (json.JSONDecodeError, AttributeError):
        found = LOOSE_ID.search(text)
        return found.group(1) if found else None
    return value if isinstance(value, str) else None
