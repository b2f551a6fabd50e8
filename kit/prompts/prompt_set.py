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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.errors import DataError, RunFolderError
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
        check_sample_ids(folder.prompts, params.generate.sampling.n)
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
    check_sample_ids(folder.prompts, params.generate.sampling.n)
    return folder.prompts


SAMPLE_SUFFIX = r"^(?P<base>.+)\.(?P<k>[1-9][0-9]*)$"
"""A row id of sample k > 0 of a prompt: `<prompt id>.<k>` (kit.generate.store.row_id)."""


def sample_id_clashes(ids: pa.Array | pa.ChunkedArray, n: int) -> list[tuple[str, str, int]]:
    """(prompt id, other prompt id, k) where a prompt's own id (a batch line's custom_id, any text)
    is also the row id `<other>.<k>` of sample k of another prompt, k < n: their rows, failures and
    output lines would share one id. None with n = 1 (sample 0's row id is its prompt id)."""
    if n <= 1 or not len(ids):
        return []
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    parts = pc.extract_regex(ids, SAMPLE_SUFFIX)
    matched = pc.is_valid(parts)
    if not pc.any(matched).as_py():
        return []
    parts = parts.filter(matched)
    own = ids.filter(matched)
    base, k = pc.struct_field(parts, "base"), pc.struct_field(parts, "k")
    small = pc.less(pc.utf8_length(k), 10)  # no overflow; n is far below 10**9
    base, k, own = base.filter(small), k.filter(small), own.filter(small)
    hit = pc.and_(pc.less(pc.cast(k, pa.int64()), n), pc.is_in(base, value_set=ids))
    return [
        (a, b, int(c))
        for a, b, c in zip(
            own.filter(hit).to_pylist(), base.filter(hit).to_pylist(), k.filter(hit).to_pylist(), strict=True
        )
    ]


def check_sample_ids(prompts: Path, n: int) -> None:
    """Refuse a plan in which a prompt's id is another prompt's sample row id under `n` samples."""
    if n <= 1:
        return
    clashes = sample_id_clashes(read_prompt_ids(prompts), n)
    if not clashes:
        return
    named = "; ".join(f"{a!r} is also sample {k} of {b!r}" for a, b, k in clashes[:3])
    more = f" (and {len(clashes) - 3} more)" if len(clashes) > 3 else ""
    raise DataError(
        f"generate.sampling.n = {n} gives sample k of prompt X the row id 'X.k', and {len(clashes)} "
        f"prompt id(s) of the plan already have that shape: {named}{more}. Their rows, failures and "
        "batch output lines would share one id (one would pass for the other's answer). To fix: give "
        "those batch lines a custom_id that does not end in '.<number>' (or not one of another line's "
        "plus '.1' ... '.n-1'), or set generate.sampling.n = 1 and send one line per sample."
    )


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
