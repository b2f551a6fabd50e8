"""Stage 4 reads a run shard by shard and keeps each row's facts, never all of its text.

A batch of rows (at most `BATCH_ROWS`, read with only the columns stage 4 uses) is split into
reasoning and answer, judged by the quality flags, and reduced to numbers, short categories and
two hashes (of the id, of the completion); then its text is dropped. Memory grows with the row
count by a few hundred bytes a row, not by the ~10 KB a row's text, messages and JSON take, and
one shard however large is never read whole. The sample browser reads back only the rows it shows
(`read_rows`, one row group at a time).

Why pyarrow's own reader and not DuckDB or Polars: the per-row work (the `<think>` split, tool-call
JSON, refusal patterns, the echo check) is Python whatever engine reads the rows, so a query
engine would only replace the reading, which pyarrow (the kit's parquet layer already) does batch
by batch with column projection; the statistics over the facts (quantiles and counts per source)
are pandas over a few numeric columns. No new dependency, one reader for stage 3 and stage 4.

Duplicates are found by hash: `completion_hash` (64-bit, pandas' SipHash of the text) over every
non-empty completion; at 2M rows the chance of one false match is about 1e-7. Near-duplicates
(kit.analyse.neardup): each batch's last user messages and answers become MinHash band digests
(64 bytes a row and text), clustered once every shard is read: `prompt_cluster` and
`answer_cluster` in the facts (-1: no near copy).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from kit.analyse import neardup
from kit.analyse.flags import FLAGS, compute_flags, last_user_text
from kit.analyse.load import GENERATION_COLUMNS, KEPT_OUTPUTS, normalise_rows, unreadable_gap
from kit.analyse.reasoning import row_parts
from kit.params import AnalyseParams

BATCH_ROWS = 1024
"""Rows judged at once: a batch's text is the only text in memory."""
READ_COLUMNS = tuple(c for c in GENERATION_COLUMNS if c not in ("engine", "sampling"))
"""Columns stage 4 reads (engine and sampling, the same JSON on every row, are left on disk)."""
FACT_COLUMNS = (
    "id",
    "source",
    "finish_reason",
    "sample_index",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "latency_s",
    "ttft_s",
    "accept_length",
    "finished_at",
)
PART_FACTS = (
    "reasoning_from",
    "reasoning_chars",
    "answer_chars",
    "reasoning_tokens",
    "answer_tokens",
    "text_unterminated",
    "function_calling",
    "parsed_calls",
    "text_calls",
    "has_call",
    "call_problem",
)
"""Columns of kit.analyse.reasoning.row_parts kept per row (the texts are dropped)."""
CHUNK = 64
"""Batches concatenated at once while reading (the per-frame overhead of thousands is not small)."""
COMPACT = {
    "sample_index": "int32",
    "latency_s": "float32",
    "ttft_s": "float32",
    "accept_length": "float32",
    "source": "category",
    "finish_reason": "category",
    "reasoning_from": "category",
    "call_problem": "category",
    "reasoning_chars": "Int32",
    "answer_chars": "Int32",
    "reasoning_tokens": "Int32",
    "answer_tokens": "Int32",
}
"""Narrower types for the facts kept per row (token totals stay 64-bit: they are summed; a few
distinct texts become categories, unified when frames are concatenated)."""
SHOW_COLUMNS = ("id", "source", "finish_reason", "messages", "tools", "completion", "reasoning", "tool_calls")
"""Columns the sample browser reads back for the rows it shows."""


@dataclass
class Scan:
    """The facts of every readable row: `df` (numbers and categories, plus `shard`, `row` and
    `completion_hash`), `parts` and `flags` aligned with it, the shards read and the gaps met."""

    df: pd.DataFrame
    parts: pd.DataFrame
    flags: pd.DataFrame
    paths: list[Path]
    gaps: list[str] = field(default_factory=list)
    older_rows: int = 0
    older_shards: int = 0


def completion_hash(completion: pd.Series) -> np.ndarray:
    """64-bit hashes of the completions; 0 where the completion is empty or whitespace (never a duplicate)."""
    hashes = pd.util.hash_pandas_object(completion, index=False).to_numpy(dtype=np.uint64)
    return np.where(completion.str.strip().ne("").to_numpy(), hashes, np.uint64(0))


def batch_facts(
    table: pa.Table, params: AnalyseParams, shard: int, first_row: int, gaps: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(facts, parts, flags) of one batch of rows read from shard number `shard`."""
    df = normalise_rows(table.to_pandas(), gaps)
    parts = row_parts(df)
    flags = compute_flags(df, params, parts)
    facts = _compact(df[list(FACT_COLUMNS)])
    facts["shard"] = np.int32(shard)
    facts["row"] = np.arange(first_row, first_row + len(df), dtype=np.int32)
    facts["completion_hash"] = completion_hash(df["completion"])
    if params.near_duplicates:
        settings = near_settings(params)
        texts = {"prompt": [last_user_text(m) for m in df["messages"]], "answer": parts["answer_text"]}
        for kind, values in texts.items():
            digests = neardup.text_digests(list(values), settings)
            for j in range(digests.shape[1]):
                facts[f"_{kind}_band{j}"] = digests[:, j]
    # astype copies: a selection may be a view of the batch's blocks, which would keep its text alive
    return facts, _compact(parts[list(PART_FACTS)]), flags.copy()


def near_settings(params: AnalyseParams) -> neardup.NearDupSettings:
    """The near-duplicate settings of stage 4's params."""
    return neardup.NearDupSettings(
        params.near_duplicate_threshold, params.near_duplicate_ngram, params.near_duplicate_num_perm
    )


NEAR_KINDS = ("prompt", "answer")


def add_near_clusters(df: pd.DataFrame) -> pd.DataFrame:
    """`prompt_cluster` and `answer_cluster` from the band digests the batches left (which go)."""
    for kind in NEAR_KINDS:
        bands = [c for c in df.columns if c.startswith(f"_{kind}_band")]
        if bands:
            df[f"{kind}_cluster"] = neardup.clusters(df[bands].to_numpy(dtype=np.uint64))
            df = df.drop(columns=bands)
        else:
            df[f"{kind}_cluster"] = np.full(len(df), -1, dtype=np.int32)
    return df


def _compact(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({c: t for c, t in COMPACT.items() if c in frame.columns})


def _iter_batches(pf: pq.ParquetFile, columns: list[str]) -> Iterator[pa.Table]:
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
        yield pa.Table.from_batches([batch])


def _scan_shard(
    path: Path, index: int, params: AnalyseParams, gaps: list[str]
) -> tuple[list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]], bool] | None:
    """The batches of one shard, and whether it lacks the reasoning / tool_calls columns; None
    (with a gap) when any part of it cannot be read: a shard counts whole or not at all."""
    try:
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        out, start = [], 0
        for table in _iter_batches(pf, [c for c in READ_COLUMNS if c in names]):
            out.append(batch_facts(table, params, index, start, gaps))
            start += table.num_rows
    except (OSError, pa.ArrowException, ValueError) as e:
        gaps.append(unreadable_gap(path, e))
        return None
    return out, start > 0 and not set(KEPT_OUTPUTS) <= names


def scan_shards(paths: list[Path], params: AnalyseParams | None = None, progress: bool = True) -> Scan:
    """The facts of every readable shard in `paths`; an unreadable shard is a gap, its rows left out."""
    params = params or AnalyseParams()
    gaps: list[str] = []
    done: list[list[pd.DataFrame]] = [[], [], []]  # facts, parts, flags: concatenated every CHUNK batches
    batches: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]] = []
    older_rows = older_shards = 0
    bar = tqdm(paths, desc="analyse", unit="shard", disable=not progress or len(paths) < 2)
    for i, path in enumerate(bar):
        scanned = _scan_shard(path, i, params, gaps)
        if scanned is None:
            continue
        shard_batches, older = scanned
        batches += shard_batches
        if older:
            older_shards += 1
            older_rows += sum(len(f) for f, _, _ in shard_batches)
        if len(batches) >= CHUNK:  # a few large frames, not thousands of small ones
            _merge(batches, done)
    _merge(batches, done)
    facts, parts, flags = done
    df, parts_df, flags_df = (_concat(x) for x in (facts, parts, flags))
    if df.empty:
        df = _empty_facts()
        parts_df = pd.DataFrame(columns=list(PART_FACTS))
        flags_df = pd.DataFrame(columns=list(FLAGS), dtype=bool)
    flags_df["duplicate"] = duplicated_completions(df["completion_hash"])
    df = add_near_clusters(df)
    return Scan(df, parts_df, flags_df, list(paths), list(dict.fromkeys(gaps)), older_rows, older_shards)


def _merge(
    batches: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]], done: list[list[pd.DataFrame]]
) -> None:
    """Concatenate the pending batches onto `done` (facts, parts, flags) and empty `batches`."""
    if batches:
        for kept, frames in zip(done, zip(*batches, strict=True), strict=True):
            kept.append(_concat(list(frames)))
        batches.clear()


def duplicated_completions(hashes: pd.Series) -> pd.Series:
    """True for every row whose non-empty completion (by hash) also appears in another row."""
    return hashes.duplicated(keep=False) & hashes.ne(0)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames one under the other; categorical columns keep one union of categories (pandas would
    fall back to object for frames whose categories differ)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    for col in frames[0].columns:
        if isinstance(frames[0][col].dtype, pd.CategoricalDtype):
            union = list(dict.fromkeys(c for f in frames for c in f[col].cat.categories))
            for f in frames:
                f[col] = f[col].cat.set_categories(union)
    return pd.concat(frames, ignore_index=True)


def _empty_facts() -> pd.DataFrame:
    df = normalise_rows(pd.DataFrame(columns=list(READ_COLUMNS)), [])
    df = df[list(FACT_COLUMNS)].copy()
    df["shard"] = pd.Series(dtype=np.int32)
    df["row"] = pd.Series(dtype=np.int64)
    df["completion_hash"] = pd.Series(dtype=np.uint64)
    return df


def read_rows(paths: list[Path], facts: pd.DataFrame, columns: Iterable[str] = SHOW_COLUMNS) -> pd.DataFrame:
    """The full rows (text included) behind some facts rows, indexed like `facts`.

    Only the row groups that hold them are read, shard by shard.
    """
    columns = list(columns)
    frames = []
    for shard, group in facts.groupby("shard", sort=True):
        pf = pq.ParquetFile(paths[int(shard)])
        wanted = [c for c in columns if c in pf.schema_arrow.names]
        frames.append(_rows_of_shard(pf, wanted, group["row"].to_numpy()).set_axis(group.index))
    if not frames:
        return normalise_rows(pd.DataFrame(columns=columns), []).iloc[:0]
    rows = pd.concat(frames).reindex(facts.index)
    return normalise_rows(rows, [])


def _rows_of_shard(pf: pq.ParquetFile, columns: list[str], rows: np.ndarray) -> pd.DataFrame:
    """Rows at positions `rows` of one shard, in that order, reading only their row groups."""
    meta = pf.metadata
    starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    group_of = np.searchsorted(starts, rows, side="right") - 1
    groups = np.unique(group_of)
    table = pf.read_row_groups(groups.tolist(), columns=columns)
    first_in_table = np.cumsum(np.r_[0, starts[groups + 1] - starts[groups]])[:-1]
    local = first_in_table[np.searchsorted(groups, group_of)] + rows - starts[group_of]
    return table.take(pa.array(local, type=pa.int64())).to_pandas()
