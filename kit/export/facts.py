"""The first pass of `kit export` in flat memory: each row's drop reason from a few numbers a row.

    data, reasons = export_facts(folder, analyse, rules)

Stage 4's scan (kit.analyse.scan) keeps some 600 bytes of facts a row (1.2 GB at 2M rows), which
the export does not need: it judges each batch with the same code (`batch_facts`: the flags, the
finish reason, the completion's hash) and keeps, per row, its shard and position, its source (a
code), the hashes of its id and of its completion, and a bit per drop rule it meets; the text goes
with the batch. About 30 bytes a row (60 MB at 2M), and the rules are then applied in their order
(`duplicate` over the completion hashes of the rows no earlier rule dropped, as
`kit.export.drops.drop_reasons` does). A row whose id repeats an earlier shard's row is left out
(stage 4 counts each id once). The near-duplicate rules need stage 4's clusters over every row:
`kit export` reads the run with stage 4's scan for them (kit.export.run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kit.analyse import load
from kit.analyse.load import KEPT_OUTPUTS, unreadable_gap
from kit.analyse.run import RunData
from kit.analyse.scan import READ_COLUMNS, _iter_batches, batch_facts
from kit.artifacts import Manifest
from kit.export.drops import NEAR_RULES, _repeated
from kit.params import AnalyseParams
from kit.progress import progress as progress_bar
from kit.runfolder import RunFolder

BIT_RULES = ("empty", "truncated", "unterminated_think", "tool_call_broken", "refusal", "repeats_prompt")
"""Rules a row meets on its own, one bit each (`duplicate` needs every row's completion hash)."""


class _Columns:
    """Per-row numbers of the rows read, as numpy arrays appended a batch at a time."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("shard", "row", "id", "hash", "bits", "src")
        }

    def add(self, **arrays: np.ndarray) -> None:
        for k, v in arrays.items():
            self.parts[k].append(v)

    def extend(self, other: _Columns) -> None:
        """Take `other`'s rows as one array per column: a shard's batches joined, so what stays is a
        few large arrays (given back whole when freed) instead of thousands of small ones, which
        left the heap fragmented (RSS grew by ~100 bytes a row more at 2M rows)."""
        for k, v in other.parts.items():
            if v:
                self.parts[k].append(np.concatenate(v))

    def take(self, key: str, dtype: type, keep: np.ndarray | None = None) -> np.ndarray:
        """Column `key` of every row (only the rows `keep` marks), its pieces let go."""
        got = self.parts.pop(key)
        out = np.concatenate(got) if got else np.zeros(0, dtype=dtype)
        del got
        return out if keep is None else out[keep]


def export_facts(
    folder: RunFolder, params: AnalyseParams, rules: tuple[str, ...], progress: bool = True
) -> tuple[RunData, np.ndarray]:
    """(the run as the export needs it, each row's drop reason or None) without near-duplicates;
    `data.df` holds `shard`, `row` and `source` of each row kept once per id."""
    if any(r in NEAR_RULES for r in rules):
        raise ValueError("the near-duplicate rules need stage 4's scan (kit.analyse.read_run)")
    params = params.model_copy(update={"near_duplicates": False})
    paths = folder.shard_paths()
    gaps: list[str] = [] if paths else [f"no generation shards in {folder.generations}"]
    sources: dict[str, int] = {}
    cols = _Columns()
    older_rows = older_shards = 0
    bar = progress_bar(total=len(paths), desc="export: judge", unit="shard", disable=not progress)
    with bar:
        for index, path in enumerate(paths):
            shard = _judge_shard(path, index, params, sources, gaps)
            bar.update(1)
            if shard is None:
                continue
            part, rows, older = shard
            cols.extend(part)
            if older:
                older_rows, older_shards = older_rows + rows, older_shards + 1
    gaps += load.older_schema_gap(older_rows, older_shards)
    ids = cols.take("id", np.uint64)
    first = ~pd.Series(ids).duplicated(keep="first").to_numpy()
    ids = ids[first]
    if not first.all():
        gaps.append(
            f"generations: {int((~first).sum())} row(s) repeat the id of a row in another shard (a copied "
            "shard?); each id is counted once. `kit generate` sets such shards aside in "
            "generations/duplicate/"
        )
    names = np.array(sorted(sources, key=sources.get), dtype=object)
    src = cols.take("src", np.int32, first)
    df = pd.DataFrame(
        {
            "shard": cols.take("shard", np.int32, first),
            "row": cols.take("row", np.int32, first),
            "source": pd.Categorical.from_codes(src, categories=names) if len(names) else pd.Categorical([]),
        }
    )
    reasons = _reasons(cols.take("bits", np.uint8, first), cols.take("hash", np.uint64, first), rules)
    failures, g_fail = load.load_failures(folder)
    failures = _outstanding(failures, ids)
    found, g_man = load.load_json_part(folder.manifest, "the run did not finish (or is still running)")
    manifest = Manifest.from_json(found) if found is not None else None
    plan, g_plan = load.load_json_part(folder.plan, "requested counts per source are unknown")
    prompt_counts, g_pr = load.load_prompt_counts(folder) if plan is None else ({}, [])
    gaps += g_fail + g_man + g_plan + g_pr
    data = RunData(
        df,
        pd.DataFrame(index=df.index),
        failures,
        None,
        manifest,
        plan,
        prompt_counts,
        gaps,
        None,
        paths,
        folder,
    )
    return data, reasons


def _judge_shard(
    path: Path, index: int, params: AnalyseParams, sources: dict[str, int], gaps: list[str]
) -> tuple[_Columns, int, bool] | None:
    """One shard's per-row numbers, its rows and whether it lacks the newer columns; None (a gap)
    when any part of it cannot be read: a shard counts whole or not at all."""
    out, start = _Columns(), 0
    try:
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        for table in _iter_batches(pf, [c for c in READ_COLUMNS if c in names]):
            facts, _, flags = batch_facts(table, params, index, start, gaps)
            n = len(facts)
            bits = np.zeros(n, dtype=np.uint8)
            truncated = facts["finish_reason"].astype(str).eq("length").to_numpy()
            for b, rule in enumerate(BIT_RULES):
                hit = truncated if rule == "truncated" else flags[rule].to_numpy(dtype=bool)
                bits |= hit.astype(np.uint8) << np.uint8(b)
            codes = np.array([sources.setdefault(str(s), len(sources)) for s in facts["source"]], np.int32)
            out.add(
                shard=np.full(n, index, dtype=np.int32),
                row=np.arange(start, start + n, dtype=np.int32),
                id=pd.util.hash_array(facts["id"].astype(str).to_numpy(dtype=object)),
                hash=facts["completion_hash"].to_numpy(dtype=np.uint64),
                bits=bits,
                src=codes,
            )
            start += n
    except (OSError, pa.ArrowException, ValueError) as e:
        gaps.append(unreadable_gap(path, e))
        return None
    return out, start, start > 0 and not set(KEPT_OUTPUTS) <= names


def _reasons(bits: np.ndarray, hashes: np.ndarray, rules: tuple[str, ...]) -> np.ndarray:
    """Each row's first rule met, in the rules' order (None: kept), as `drop_reasons` judges."""
    reason = np.full(len(bits), None, dtype=object)
    for rule in rules:
        free = pd.isna(reason)
        if rule == "duplicate":
            hit = _repeated(hashes, free)
        elif rule in BIT_RULES:
            hit = (bits >> np.uint8(BIT_RULES.index(rule))) & np.uint8(1) == 1
        else:
            continue
        reason[free & hit] = rule
    return reason


def _outstanding(failures: pd.DataFrame, id_hashes: np.ndarray) -> pd.DataFrame:
    """The last failure record of each id with no row (as `load.outstanding_failures`, on id hashes)."""
    if failures.empty or "id" not in failures.columns:
        return failures
    last = failures.drop_duplicates(subset="id", keep="last")
    done = pd.util.hash_array(last["id"].astype(str).to_numpy(dtype=object))
    return last[~np.isin(done, id_hashes)].reset_index(drop=True)
