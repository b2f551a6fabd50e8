"""The frozen prompt set of a run: planned once from the params' data section, stamped with that
section's hash, and reused by every stage that needs prompts (the sweep of stage 2, stage 3).

    prompts = ensure_prompts(params, folder)   # prompts.parquet, planned now or reused
    path = ensure_plan(params, folder)         # the same, without reading it
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kit.errors import RunFolderError
from kit.params import RunParams
from kit.prompts.datafiles import local_files
from kit.prompts.plan import build_plan, read_prompts
from kit.runfolder import RunFolder

log = logging.getLogger(__name__)


def data_hash(params: RunParams) -> str:
    """A short hash of the params' data section (and of the batch files' contents, where a source
    is one: a line that changes changes the plan): the same section plans the same prompts."""
    data = params.data.model_dump(mode="json")
    files = batch_file_digests(params)
    text = json.dumps({**data, "batch_files": files} if files else data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_prompts(params: RunParams, folder: RunFolder) -> pa.Table:
    """The frozen prompt set: reused when the data params are unchanged, else planned anew."""
    return read_prompts(ensure_plan(params, folder))


def ensure_plan(params: RunParams, folder: RunFolder) -> Path:
    """`prompts.parquet`, reused when the data params are unchanged, else planned anew; its path
    (nothing read: a resume reads the ids first and the prompts only when some are left)."""
    stamp = folder.prompts_stamp
    wanted = data_hash(params)
    stamped = stamp.read_text().strip() if stamp.exists() else None
    if folder.prompts.exists() and stamped == wanted:
        return folder.prompts
    if folder.shard_paths():
        if stamped != wanted:
            raise RunFolderError(
                f"the data section of the params changed but {folder.generations} already holds rows of "
                "the old prompt plan. Use a new run name, or pass --fresh to archive them and start anew."
            )
        log.warning(
            "%s is missing; planning again from the same data params (same seed, same ids)", folder.prompts
        )
    stamp.unlink(missing_ok=True)  # a plan that fails half-way leaves no stamp claiming it
    build_plan(params.data, Path(params.model.path), folder.prompts, folder.plan)
    stamp.write_text(wanted)
    return folder.prompts


def read_prompt_ids(path: Path) -> pa.ChunkedArray:
    """The ids of a frozen prompt set, in its order, reading that one column only."""
    try:
        return pq.read_table(path, columns=["id"]).column("id")
    except (OSError, pa.ArrowException, KeyError):
        read_prompts(path)  # raises the DataError saying what is wrong with the file
        raise


def batch_file_digests(params: RunParams) -> dict[str, str] | None:
    """sha256 (16 digits) of each file of the params' batch sources, by path; None without any.

    Part of the run's identity and of the plan's stamp: a line's prompt or sampling that changes
    changes the file's digest."""
    out: dict[str, str] = {}
    for source in params.data.sources:
        if source.adapter != "openai_batch":
            continue
        for path in local_files(source):
            out[str(path)] = _digest(path)
    return out or None


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _digest(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "missing"
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()[:16]
    return _DIGESTS[key]
