"""A source's local data files, checked so that a bad one is named: missing, empty, or not its format.

`datasets.load_dataset("json", data_files=...)` answers an empty file with a bare StopIteration and a
malformed one with "An error occurred while generating the dataset", naming neither. The checks
before loading are cheap (existence, a few bytes); the search for the bad line runs only after a
load failed.
"""

from __future__ import annotations

import codecs
import glob
import json
from pathlib import Path

from kit.params import SourceParams

JSON_BUILDERS = ("json",)
JSON_LAYOUT = "JSON Lines of objects (one row per line) or one JSON array of objects"
PEEK_BYTES = 4096


def local_files(source: SourceParams) -> list[Path]:
    """The source's data files, glob patterns expanded (a pattern that matches nothing is kept as is)."""
    out: list[Path] = []
    for entry in source.data_files or []:
        text = str(entry)
        matches = sorted(glob.glob(text)) if any(c in text for c in "*?[") else []
        out += [Path(m) for m in matches] or [Path(text)]
    return out


def file_problem_before_load(source: SourceParams) -> tuple[Path, str, str] | None:
    """(file, what is wrong, what to do) for the first data file that is missing or holds nothing."""
    for path in local_files(source):
        if any(c in str(path) for c in "*?["):
            return path, "matches no file", "correct the pattern in data_files"
        if not path.exists():
            return path, "does not exist", "correct the path in data_files (relative to the params file)"
        if path.is_file() and _is_blank(path):
            return path, "is empty", "fill it, or remove it from data_files"
        if path.is_file() and source.dataset in JSON_BUILDERS and (bad := _not_utf8(path)):
            # pyarrow's JSON reader takes such bytes and the first read of the row fails deep inside
            return (
                path,
                bad,
                "save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`), or remove it from data_files",
            )
    return None


def _not_utf8(path: Path, block: int = 1 << 20) -> str | None:
    """Why `path` is not UTF-8 text (the byte offset of the first bad byte), or None; read in blocks."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with path.open("rb") as f:
        while True:
            chunk = f.read(block)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                return f"is not UTF-8 text ({e.reason} at byte {offset + e.start})"
            if not chunk:
                return None
            offset += len(chunk)


def file_problem_after_load(source: SourceParams) -> tuple[Path, str, str] | None:
    """(file, what is wrong, what to do) for the first JSON data file that does not parse as rows."""
    if source.dataset not in JSON_BUILDERS:
        return None
    for path in local_files(source):
        problem = json_rows_problem(path) if path.is_file() else None
        if problem:
            return path, problem, f"correct that file (`dataset: json` reads {JSON_LAYOUT})"
    return None


def json_rows_problem(path: Path) -> str | None:
    """Why `path` is neither JSON Lines of objects nor a JSON array of objects; None when it is."""
    try:
        with path.open(encoding="utf-8") as f:
            head = f.read(PEEK_BYTES).lstrip()
            if head.startswith("["):
                return _array_problem(head + f.read())
            f.seek(0)
            return _lines_problem(f)
    except UnicodeDecodeError as e:
        return f"is not UTF-8 text ({e.reason} at byte {e.start})"


def _array_problem(text: str) -> str | None:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        return f"is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        return f"is a JSON array whose item {bad} is a {type(rows[bad]).__name__}, not an object (a row)"
    return "is an empty JSON array" if not rows else None


def _lines_problem(lines) -> str | None:  # noqa: ANN001 - a text file object
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            return f"line {number} is not valid JSON ({e.msg} at column {e.colno}): {line.strip()[:80]!r}"
        if not isinstance(row, dict):
            return f"line {number} is a JSON {type(row).__name__}, not an object (a row)"
    return None


def _is_blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (read in small blocks: stops at the first byte)."""
    with path.open("rb") as f:
        while block := f.read(PEEK_BYTES):
            if block.strip():
                return False
    return True
