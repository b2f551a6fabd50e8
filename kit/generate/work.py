"""What is left to do in a run: its identity, --fresh archiving, --shard, and the pending work items.

Kept apart from the loop so that resuming stays a cheap question: only the ids of finished rows
are read, and work items are materialised a batch at a time.
"""

from __future__ import annotations

import hashlib
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kit.artifacts.manifest_sections import EngineIdentity, RunIdentity, StoredIdentity
from kit.errors import ParamsError, RunFolderError
from kit.generate.rowsampling import item_sampling
from kit.generate.setting_changes import describe_changes
from kit.generate.store import ROW_SCHEMA_VERSION, row_id
from kit.generate.work_item import WorkItem
from kit.params import RunParams
from kit.prompts.plan import tools_list
from kit.runfolder import RunFolder, read_json, stamp, write_json_atomic

if TYPE_CHECKING:
    from kit.engines.flavors.base import SpeculativeJson


def engine_identity(params: RunParams) -> EngineIdentity:
    """What makes rows comparable: engine flavor, model (with its config's hash), speculation,
    thinking on or off, the parsers that split reasoning and tool calls out, and the row schema."""
    cfg = Path(params.model.path) / "config.json"
    cfg_hash = hashlib.sha256(cfg.read_bytes()).hexdigest()[:16] if cfg.is_file() else None
    eng = params.engine
    spec = cast("SpeculativeJson", eng.speculative.model_dump(mode="json", exclude_none=True))
    return {
        "flavor": eng.flavor,
        "model": str(params.model.path),
        "model_config_hash": cfg_hash,
        "speculative": spec or None,
        "thinking": params.generate.sampling.thinking,
        "tool_call_parser": eng.tool_call_parser,
        "reasoning_parser": eng.reasoning_parser,
        "row_schema": ROW_SCHEMA_VERSION,
    }


def archive_outputs(folder: RunFolder) -> Path | None:
    """Move earlier generation outputs into `archive/<timestamp>/` (nothing is deleted)."""
    present = folder.generation_outputs()
    if not present:
        return None
    dest = folder.archive / stamp()
    dest.mkdir(parents=True)
    for p in present:
        shutil.move(str(p), dest / p.name)
    return dest


def check_identity(folder: RunFolder, identity: RunIdentity, settings: dict[str, Any]) -> None:
    """Refuse to mix rows from another model, engine, sampling or prompt plan into this run, naming
    each setting that changed with its old and new value (`settings`: this run's, behind the hashes).

    Only a folder that holds results (shards, failures) is bound to its identity: a run that
    stopped before its first row (a plan that failed, a server that never started) binds nothing.
    """
    path = folder.identity
    if not path.exists() or not _holds_results(folder):
        return
    old: StoredIdentity = read_json(path)
    changed = [k for k in identity if old.get(k) != identity[k]]
    if "batch_files" in changed:
        was, now = old.get("batch_files") or {}, identity["batch_files"] or {}
        files = sorted(p for p in {*was, *now} if was.get(p) != now.get(p))
        raise RunFolderError(
            f"{folder.root} holds rows made from other contents of {', '.join(files)} (a line's prompt or "
            "sampling changed since, or a file was added or removed): its rows are not the file's now. "
            "Put the file back as it was to resume, or use a new run name, or pass --fresh to archive "
            "the earlier outputs and start anew."
        )
    if "row_schema" in changed:
        raise RunFolderError(
            f"{folder.root} holds rows of another row schema (version {old.get('row_schema') or 1}; "
            f"this kit writes version {identity['row_schema']}, with reasoning and tool_calls columns): "
            "one run never mixes the two. Use a new run name, or pass --fresh to archive the earlier "
            "outputs and start anew (they stay readable)."
        )
    if changed:
        details = "; ".join(describe_changes(folder, old, identity, settings))
        raise RunFolderError(
            f"{folder.root} already holds generations made with other settings ({details}). "
            "Use a new run name, or pass --fresh to archive the earlier outputs and start anew."
        )


def record_identity(folder: RunFolder, identity: RunIdentity, settings: dict[str, Any]) -> None:
    """Bind the run folder to `identity`, with the `settings` behind its hashes (which a refusal
    names); called once the prompt plan exists, before the first row."""
    path = folder.identity
    if _holds_results(folder) and path.exists():
        return
    folder.generations.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**identity, "settings": settings})


def _holds_results(folder: RunFolder) -> bool:
    failures = folder.failures
    return bool(folder.shard_paths()) or (failures.exists() and failures.stat().st_size > 0)


def parse_shard(spec: str | None) -> tuple[int, int]:
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ParamsError(f"--shard must look like I/N (e.g. 0/4), got {spec!r}") from None
    if not 0 <= i < n:
        raise ParamsError(f"--shard {spec}: I must be in 0..N-1")
    return i, n


def pending_work(
    ids: pa.Array | pa.ChunkedArray | list[str],
    n_samples: int,
    skip: pa.Array | pa.ChunkedArray | set[str],
    shard: tuple[int, int],
    limit: int | None,
) -> list[tuple[int, int]]:
    """(row of the prompt set, sample index) of every work item still to do, from the prompt ids
    alone: what is left is known without reading the prompts' text. Ids and `skip` (the rows done)
    are matched as Arrow arrays, so two million of each cost tens of MB, not a Python set."""
    ids = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(ids, type=pa.string())
    skip = skip if isinstance(skip, (pa.Array, pa.ChunkedArray)) else pa.array(list(skip), type=pa.string())
    if limit is not None:
        ids = ids.slice(0, limit)
    keep = np.ones(len(ids), dtype=bool)
    i, n = shard
    if n > 1:  # crc32 of the whole id: an even split whatever the ids look like, the same on every node
        keep = np.array([zlib.crc32(x.encode()) % n == i for x in ids.to_pylist()], dtype=bool)
    work: list[tuple[int, int]] = []
    for k in range(n_samples):
        rid = ids if k == 0 else pc.binary_join_element_wise(ids, pa.scalar(f".{k}"), "")  # row_id
        done = pc.is_in(rid, value_set=skip).to_numpy(zero_copy_only=False) if len(skip) else False
        work += [(int(r), k) for r in np.flatnonzero(keep & ~done)]
    return work


def select_rows(prompts: pa.Table, work: list[tuple[int, int]]) -> tuple[pa.Table, list[tuple[int, int]]]:
    """The prompts the work items need, and the items renumbered to rows of that smaller table."""
    rows_needed = sorted({r for r, _ in work})
    if len(rows_needed) == prompts.num_rows:
        return prompts, work
    remap = {r: j for j, r in enumerate(rows_needed)}
    return prompts.take(pa.array(rows_needed, type=pa.int64())), [(remap[r], k) for r, k in work]


def pending_items(
    prompts: pa.Table, n_samples: int, skip: set[str], shard: tuple[int, int], limit: int | None
) -> tuple[pa.Table, list[tuple[int, int]]]:
    """The prompts still to generate and, for each work item, (row in that table, sample index)."""
    work = pending_work(prompts.column("id"), n_samples, skip, shard, limit)
    return select_rows(prompts, work)


def iter_items(prompts: pa.Table, work: list[tuple[int, int]], batch: int = 512) -> Iterator[WorkItem]:
    """Materialise work items a batch at a time, so memory stays flat for large plans."""
    for start in range(0, len(work), batch):
        chunk = work[start : start + batch]
        rows = prompts.take(pa.array([r for r, _ in chunk], type=pa.int64())).to_pylist()
        for row, (_, k) in zip(rows, chunk, strict=True):
            tools = row.get("tools")
            yield {
                "id": row_id(row["id"], k),
                "prompt_id": row["id"],
                "sample_index": k,
                "source": row["source"],
                "messages": row["messages"],
                "tools": tools,
                "tools_list": tools_list(row),  # "[]": no tools
                "prompt_tokens": row.get("prompt_tokens"),
                "sampling": item_sampling(row.get("metadata")),  # a batch line's own, or None
            }
