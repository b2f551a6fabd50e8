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
from array import array
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.analyse.reasoning import split_row
from kit.engines.openai_json import AssistantMessage, ChatCompletion, Choice, Usage
from kit.errors import DataError, ExportError
from kit.export.facts import SKIP_CODE, ExportFacts, failure_samples
from kit.export.result import ExportResult
from kit.export.rows import openai_calls
from kit.params import RunParams
from kit.prompts.datafiles import local_files
from kit.prompts.openai_batch import parse_line
from kit.prompts.records import BatchRequest
from kit.runfolder import RunFolder

OUTPUT = "output.jsonl"
ADAPTER = "openai_batch"
LOOSE_ID = re.compile(r'"custom_id"\s*:\s*"([^"\\]*)"')


class BatchResponse(TypedDict):
    status_code: int
    request_id: str
    body: ChatCompletion


class BatchError(TypedDict):
    code: str
    """not_generated, invalid_request, duplicate_custom_id, or the failure's reason."""
    message: str


class BatchLine(TypedDict):
    """One line of `output.jsonl`: an answer (`response`, `error` null) or an error (the reverse)."""

    id: str
    custom_id: str | None
    response: BatchResponse | None
    error: BatchError | None


def batch_id(custom_id: str) -> str:
    return "batch_req_" + hashlib.sha256(custom_id.encode()).hexdigest()[:24]


def completion_body(row: dict[str, Any], model: str) -> ChatCompletion:
    """A generated row as an OpenAI chat completion object."""
    thought, _, answer, _ = split_row(row.get("reasoning"), str(row.get("completion") or ""))
    calls, answer = openai_calls(row.get("tool_calls"), answer, row.get("tools"), str(row["id"]))
    message = AssistantMessage(role="assistant", content=answer)
    if thought is not None:
        message["reasoning_content"] = thought
    if calls:
        message["tool_calls"] = calls
    finished = row.get("finished_at")
    prompt, completion = int(row.get("prompt_tokens") or 0), int(row.get("completion_tokens") or 0)
    return ChatCompletion(
        id=f"chatcmpl-{row['id']}",
        object="chat.completion",
        created=int(finished.timestamp()) if isinstance(finished, datetime) else 0,
        model=model,
        choices=[Choice(index=0, message=message, finish_reason=row.get("finish_reason"), logprobs=None)],
        usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion),
    )


def answer_line(custom_id: str, row: dict[str, Any], model: str) -> BatchLine:
    return BatchLine(
        id=batch_id(custom_id),
        custom_id=custom_id,
        response=BatchResponse(status_code=200, request_id=str(row["id"]), body=completion_body(row, model)),
        error=None,
    )


def error_line(custom_id: str | None, code: str, message: str) -> BatchLine:
    return BatchLine(
        id=batch_id(custom_id or message),
        custom_id=custom_id,
        response=None,
        error=BatchError(code=code, message=message),
    )


def _custom_ids(folder: RunFolder, batch_sources: set[str]) -> dict[str, str]:
    """prompt id -> custom_id of the batch sources' planned prompts whose id is not their custom_id
    (prompts.parquet's source_row_id: a run planned before a line's custom_id became its row's id);
    empty for a run of today, so it holds nothing a row."""
    if not batch_sources or not folder.prompts.exists():
        return {}
    out: dict[str, str] = {}
    for batch in pq.ParquetFile(folder.prompts).iter_batches(columns=["id", "source", "source_row_id"]):
        table = pa.Table.from_batches([batch])
        mask = pc.and_(
            pc.is_in(table.column("source"), value_set=pa.array(sorted(batch_sources))),
            pc.not_equal(table.column("id"), table.column("source_row_id")),
        )
        table = table.filter(pc.fill_null(mask, False))
        out.update(
            zip(table.column("id").to_pylist(), table.column("source_row_id").to_pylist(), strict=True)
        )
    return out


def _rows(facts: ExportFacts) -> Iterator[dict[str, Any]]:
    """The rows exported (each id once), shard by shard."""
    for rows, codes in facts.coded_batches():
        yield from (row for row, code in zip(rows, codes.tolist(), strict=True) if code != SKIP_CODE)


def line_digest(source: str, custom_id: str) -> int:
    """A 64-bit digest of (source, custom_id): what `answered` holds, 8 bytes a row."""
    return int.from_bytes(
        hashlib.blake2b(f"{source}\0{custom_id}".encode(), digest_size=8).digest(), "little"
    )


def write_batch_output(
    folder: RunFolder, facts: ExportFacts, params: RunParams | None, root: Path, progress: bool
) -> ExportResult:
    """Write `output.jsonl` into `root`; an ExportResult with the lines answered and the errors."""
    if params is None:
        raise ExportError(f"{folder.params} is missing or no longer valid: the batch input files are unknown")
    sources = {s.name: s for s in params.data.sources if s.adapter == ADAPTER}
    custom = _custom_ids(folder, set(sources))
    model = params.model.served_name or Path(params.model.path).name
    answered = array("Q")  # digests of (source, custom_id) answered: one buffer, 8 bytes a row
    counts = {"answered": 0, "errors": 0}
    out = root / OUTPUT
    with out.open("w", encoding="utf-8") as f:

        def put(line: BatchLine) -> None:
            f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            counts["answered" if line["error"] is None else "errors"] += 1

        for row in _rows(facts):
            pid, index = str(row.get("prompt_id") or row["id"]), int(row.get("sample_index") or 0)
            cid = custom.get(pid, pid)
            cid = cid if index == 0 else f"{cid}.{index}"
            if str(row["source"]) in sources:
                answered.append(line_digest(str(row["source"]), cid))
            put(answer_line(cid, row, model))
        done = np.sort(np.frombuffer(answered, dtype=np.uint64)) if len(answered) else np.zeros(0, np.uint64)
        del answered
        failures = _failures(facts, custom)
        for name, source in sources.items():
            for line in _unanswered(
                name, source, done, failures, bool(facts.manifest and facts.manifest.complete)
            ):
                put(line)
    return ExportResult(
        folder=root,
        splits={"answered": counts["answered"], "errors": counts["errors"]},
        reasons={},
        files=[out],
        complete=True,
    )


def _failures(facts: ExportFacts, custom: dict[str, str]) -> dict[str, tuple[str, str]]:
    """custom_id -> (reason, error) of the requests that failed for good."""
    out = {}
    failures = facts.failures
    if not len(failures):
        return out
    for rec, (pid, index) in zip(failures.to_dict("records"), failure_samples(failures), strict=True):
        cid = custom.get(pid, pid) + (f".{index}" if index else "")
        out[cid] = (str(rec.get("reason") or "failed"), str(rec.get("error") or "")[:500])
    return out


def _lines(source: Any) -> Iterator[tuple[str, str, BatchRequest | DataError | None]]:
    """(where, text, the parsed line or why not; None for a blank line) of a batch source's files."""
    for path in local_files(source):
        with path.open(encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, start=1):
                try:
                    yield f"{path.name} line {number}", text, parse_line(text)
                except DataError as e:
                    yield f"{path.name} line {number}", text, e if text.strip() else None


def _unanswered(
    name: str,
    source: Any,
    answered: np.ndarray,
    failures: dict[str, tuple[str, str]],
    finished: bool,
) -> Iterator[BatchLine]:
    """Error lines for the lines of a batch source's files that no row answers.

    Two reads of the files: the first takes a digest of each good line's custom_id (8 bytes a line,
    in one buffer), sorted to find the lines whose custom_id repeats an earlier line's; the second
    writes the error lines. `answered` holds the sorted digests of (source, custom_id) answered."""
    digests = array("Q")
    for _, _, line in _lines(source):
        if isinstance(line, dict):
            digests.append(line_digest(name, line["custom_id"]))
    keys = np.frombuffer(digests, dtype=np.uint64) if len(digests) else np.zeros(0, np.uint64)
    first_of: dict[int, int] = {}  # a good line whose custom_id repeats -> the first good line with it
    if len(keys):
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        new = np.concatenate(([True], ordered[1:] != ordered[:-1]))
        first = order[np.flatnonzero(new)][np.cumsum(new) - 1]
        again = np.flatnonzero(~new)
        first_of = dict(zip(order[again].tolist(), first[again].tolist(), strict=True))
    found = np.zeros(len(keys), dtype=bool)
    if len(keys) and len(answered):
        at = np.minimum(np.searchsorted(answered, keys), len(answered) - 1)
        found = answered[at] == keys
    del keys
    wanted_where = set(first_of.values())
    where_of: dict[int, str] = {}
    good = -1
    for where, text, line in _lines(source):
        if line is None:
            continue
        if isinstance(line, DataError):  # the plan dropped it for the same reason: say it, lose nothing else
            yield error_line(_loose_id(text), "invalid_request", f"{where}: {line}")
            continue
        good += 1
        cid = line["custom_id"]
        if good in wanted_where:
            where_of[good] = where
        if good in first_of:
            yield error_line(
                cid, "duplicate_custom_id", f"{where}: custom_id repeats {where_of[first_of[good]]}"
            )
            continue
        if found[good]:
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
