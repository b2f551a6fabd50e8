"""The first pass of `kit export` in flat memory: each row's drop reason as a one-byte code.

    facts = export_facts(folder, analyse, rules)      # ExportFacts: codes, shards, failures, gaps
    facts = facts_from_run(data, reasons, rules)      # the same from stage 4's read (notebook 04)

Stage 4's scan (kit.analyse.scan) keeps some 600 bytes of facts a row (1.2 GB at 2M rows), which
the export does not need. This pass judges each batch with the same code (`batch_facts`: the flags,
the finish reason, the completion's hash) and writes, per row, a few fixed-width numbers to files in
a temporary folder instead of keeping them: the row's drop-rule bits and source code (one file), and
(digest of its id, position) and (completion hash, position) pairs hash-partitioned into
`PARTITIONS` files each. The two exact dedups then run one partition at a time (a stable sort of
its digests: the first row of each repeated digest in run order stays, as pandas' `duplicated(keep=
"first")` kept it), and the rules are applied in their order into one uint8 code a row: 0 kept,
`i + 1` the rule `rules[i]`, `SKIP_CODE` a row whose id repeats an earlier shard's row (a copied
shard; stage 4 counts each id once; it is not exported). Memory: 1 byte a row for the codes and one
partition at a time (16 bytes a row of 1/PARTITIONS of the run), besides one batch of the scan.
The near-duplicate rules need stage 4's clusters over every row: `kit export` reads the run with
stage 4's scan for them (kit.export.run) and turns its reasons into the same codes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kit.analyse import load
from kit.analyse.load import KEPT_OUTPUTS, unreadable_gap
from kit.analyse.run import RunData
from kit.analyse.scan import READ_COLUMNS, _iter_batches, batch_facts
from kit.artifacts import Manifest
from kit.export.drops import NEAR_RULES, RULES, kept_flag_counts
from kit.export.rows import shard_batches
from kit.params import AnalyseParams
from kit.progress import progress as progress_bar
from kit.prompts.records import PlanReport
from kit.runfolder import RunFolder

BIT_RULES = ("empty", "truncated", "unterminated_think", "tool_call_broken", "refusal", "repeats_prompt")
"""Rules a row meets on its own, one bit each (`duplicate` needs every row's completion hash)."""
KEPT_CODE = 0
SKIP_CODE = 255
"""The code of a row left out of the export (its id repeats a row of an earlier shard)."""
PARTITIONS = 64
"""Files each dedup's (digest, position) pairs are spread over by their digest's top bits: a dedup
holds one of them at a time (~31K rows of a 2M-row run)."""
PAIR = np.dtype([("key", "<u8"), ("pos", "<u8")])
ROW = np.dtype([("bits", "u1"), ("src", "<u4")])
CHUNK = 1 << 20
"""Rows of the per-row file read at a time after the scan."""


@dataclass
class ExportFacts:
    """What the export's writing pass needs of a run: each row's code, and the run's other parts.

    `codes[start:end]` are shard `paths[i]`'s rows in order, `(start, end) = shards[i]` (absent: the
    shard was not read, or none of its rows is exported)."""

    rules: tuple[str, ...]
    codes: np.ndarray
    shards: dict[int, tuple[int, int]]
    sources: dict[str, int]
    """Rows generated per source (each id once)."""
    failures: pd.DataFrame
    manifest: Manifest | None
    plan: PlanReport | None
    prompt_counts: dict[str, int]
    paths: list[Path]
    gaps: list[str] = field(default_factory=list)
    kept_flags: dict[str, int | None] = field(default_factory=dict)
    """Rows kept in `train` that meet a rule this export did not apply (refusals, answers that
    repeat the prompt...), per such rule; None: not looked for (the near-duplicate rules)."""

    def labels(self) -> np.ndarray:
        """code -> drop reason (None: kept; `skip` for SKIP_CODE), an object array of 256."""
        out = np.full(256, None, dtype=object)
        out[SKIP_CODE] = "skip"
        out[1 : 1 + len(self.rules)] = list(self.rules)
        return out

    def shard_codes(self, index: int) -> np.ndarray | None:
        span = self.shards.get(index)
        return None if span is None else self.codes[span[0] : span[1]]

    def coded_batches(self) -> Iterator[tuple[list[dict[str, Any]], np.ndarray]]:
        """Each shard's rows a batch at a time, shard by shard, beside their codes: `SKIP_CODE` for a
        row past the codes read (written after the facts were gathered); a shard with no codes is passed
        over."""
        for index, path in enumerate(self.paths):
            codes = self.shard_codes(index)
            if codes is None:
                continue
            start = 0
            for rows in shard_batches(path):
                batch = codes[start : start + len(rows)]
                start += len(rows)
                yield rows, np.pad(batch, (0, len(rows) - len(batch)), constant_values=SKIP_CODE)

    def exported(self) -> int:
        """Rows exported (each id once)."""
        return int(len(self.codes) - np.count_nonzero(self.codes == SKIP_CODE))

    def counts(self) -> dict[str, int]:
        """Rows per drop rule (all of `rules`, 0 where none)."""
        n = np.bincount(self.codes, minlength=256)
        return {rule: int(n[1 + i]) for i, rule in enumerate(self.rules)}

    def reasons(self) -> np.ndarray:
        """Each exported row's drop reason or None, in run order (as `drop_reasons` gives them)."""
        kept = self.codes[self.codes != SKIP_CODE]
        return self.labels()[kept]

    def positions(self) -> list[tuple[int, int]]:
        """(shard, row) of each exported row, in run order (for tests and small runs)."""
        out = []
        for index, (start, end) in sorted(self.shards.items()):
            rows = np.flatnonzero(self.codes[start:end] != SKIP_CODE)
            out += [(index, int(r)) for r in rows]
        return out


def rule_codes(reasons: np.ndarray, rules: tuple[str, ...]) -> np.ndarray:
    """Drop reasons (None: kept) as codes of `rules`."""
    codes = np.zeros(len(reasons), dtype=np.uint8)
    for i, rule in enumerate(rules):
        codes[reasons == rule] = i + 1
    return codes


def facts_from_run(data: RunData, reasons: np.ndarray, rules: tuple[str, ...]) -> ExportFacts:
    """The same codes from stage 4's read of the run (its rows and `drop_reasons` of them): a
    shard's rows that stage 4 left out are SKIP_CODE."""
    df = data.df
    shard, row = df["shard"].to_numpy(dtype=np.int64), df["row"].to_numpy(dtype=np.int64)
    codes_of = rule_codes(np.asarray(reasons, dtype=object), rules)
    spans, parts, start = {}, [], 0
    for s in np.unique(shard):
        at = np.flatnonzero(shard == s)
        part = np.full(int(row[at].max()) + 1, SKIP_CODE, dtype=np.uint8)
        part[row[at]] = codes_of[at]
        spans[int(s)] = (start, start + len(part))
        parts.append(part)
        start += len(part)
    kept = pd.isna(np.asarray(reasons, dtype=object))
    return ExportFacts(
        rules=rules,
        codes=np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8),
        shards=spans,
        sources={str(k): int(v) for k, v in df["source"].astype(str).value_counts().items()},
        failures=data.failures,
        manifest=data.manifest,
        plan=data.plan,
        prompt_counts=data.prompt_counts,
        paths=list(data.paths),
        gaps=list(data.gaps),
        kept_flags=kept_flag_counts(df[kept], data.flags[kept], rules),
    )


class _Spill:
    """Per-row numbers written to files a shard at a time (a shard is judged whole before its rows
    get positions): nothing of them stays in memory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rows: BinaryIO = (root / "rows").open("wb")
        self.ids = [(root / f"id-{p:02d}").open("wb") for p in range(PARTITIONS)]
        self.hashes = [(root / f"hash-{p:02d}").open("wb") for p in range(PARTITIONS)]
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.total = 0

    def add(self, ids: np.ndarray, hashes: np.ndarray, bits: np.ndarray, src: np.ndarray) -> None:
        self.pending.append((ids, hashes, bits, src))

    def drop_pending(self) -> None:
        """Forget what was added since the last `commit` (a shard that could not be read whole)."""
        self.pending = []

    def commit(self) -> int:
        """Write what was added (its rows get the next positions); the rows written in all."""
        if not self.pending:
            return self.total
        ids, hashes, bits, src = (np.concatenate(c) for c in zip(*self.pending, strict=True))
        self.pending = []
        pos = np.arange(self.total, self.total + len(ids), dtype=np.uint64)
        self.total += len(ids)
        rows = np.empty(len(ids), dtype=ROW)
        rows["bits"], rows["src"] = bits, src
        rows.tofile(self.rows)
        for files, keys in ((self.ids, ids), (self.hashes, hashes)):
            pairs = np.empty(len(keys), dtype=PAIR)
            pairs["key"], pairs["pos"] = keys, pos
            part = _partition(keys)
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(PARTITIONS + 1))
            for p in range(PARTITIONS):
                if bounds[p] < bounds[p + 1]:
                    pairs[order[bounds[p] : bounds[p + 1]]].tofile(files[p])
        return self.total

    def close(self) -> None:
        for f in (self.rows, *self.ids, *self.hashes):
            f.close()

    def pairs(self, kind: str, p: int) -> np.ndarray:
        return np.fromfile(self.root / f"{kind}-{p:02d}", dtype=PAIR)

    def row_chunks(self) -> Any:
        """(start, rows) of the per-row file, CHUNK rows at a time."""
        for start in range(0, self.total, CHUNK):
            yield (
                start,
                np.fromfile(
                    self.root / "rows",
                    dtype=ROW,
                    count=min(CHUNK, self.total - start),
                    offset=start * ROW.itemsize,
                ),
            )


def _partition(keys: np.ndarray) -> np.ndarray:
    """The partition of each digest: its top log2(PARTITIONS) bits."""
    return (keys >> np.uint64(64 - (PARTITIONS.bit_length() - 1))).astype(np.int64)


def _repeats(pairs: np.ndarray) -> np.ndarray:
    """Positions of the pairs whose key an earlier pair (lower position) has: a stable sort by key
    of pairs already in position order."""
    if len(pairs) < 2:
        return np.zeros(0, dtype=np.uint64)
    order = np.argsort(pairs["key"], kind="stable")
    keys = pairs["key"][order]
    later = np.concatenate(([False], keys[1:] == keys[:-1]))
    return pairs["pos"][order[later]]


def id_digests(ids: Any) -> np.ndarray:
    """64-bit digests of row ids (pandas' hash of the text)."""
    return pd.util.hash_array(np.asarray(ids, dtype=object).astype(str).astype(object))


def export_facts(
    folder: RunFolder, params: AnalyseParams, rules: tuple[str, ...], progress: bool = True
) -> ExportFacts:
    """Each row's code (see the module's docstring) and the run's other parts, without the
    near-duplicate rules."""
    if any(r in NEAR_RULES for r in rules):
        raise ValueError("the near-duplicate rules need stage 4's scan (kit.analyse.read_run)")
    params = params.model_copy(update={"near_duplicates": False})
    paths = folder.shard_paths()
    gaps: list[str] = [] if paths else [f"no generation shards in {folder.generations}"]
    sources: dict[str, int] = {}
    spans: dict[int, tuple[int, int]] = {}
    older_rows = older_shards = 0
    with tempfile.TemporaryDirectory(prefix="kit-export-") as tmp:
        spill = _Spill(Path(tmp))
        try:
            bar = progress_bar(total=len(paths), desc="export: judge", unit="shard", disable=not progress)
            with bar:
                for index, path in enumerate(paths):
                    start = spill.total
                    judged = _judge_shard(path, index, params, sources, gaps, spill)
                    bar.update(1)
                    if judged is None:
                        spill.drop_pending()
                        continue
                    end = spill.commit()
                    if end > start:
                        spans[index] = (start, end)
                    if judged:
                        older_rows, older_shards = older_rows + end - start, older_shards + 1
        finally:
            spill.close()
        gaps += load.older_schema_gap(older_rows, older_shards)
        failures, g_fail = load.load_failures(folder)
        codes, outstanding, repeated = _codes(spill, rules, failures)
        kept_flags = _kept_flags(spill, codes, rules)
        counts = np.zeros(len(sources), dtype=np.int64)
        for start, rows in spill.row_chunks():
            once = codes[start : start + len(rows)] != SKIP_CODE
            counts += np.bincount(rows["src"][once], minlength=len(sources)).astype(np.int64)
    if repeated:
        gaps.append(
            f"generations: {repeated} row(s) repeat the id of a row in another shard (a copied "
            "shard?); each id is counted once. `kit generate` sets such shards aside in "
            "generations/duplicate/"
        )
    found, g_man = load.load_json_part(folder.manifest, "the run did not finish (or is still running)")
    manifest = Manifest.from_json(found) if found is not None else None
    plan, g_plan = load.load_json_part(folder.plan, "requested counts per source are unknown")
    prompt_counts, g_pr = load.load_prompt_counts(folder) if plan is None else ({}, [])
    gaps += g_fail + g_man + g_plan + g_pr
    return ExportFacts(
        rules=rules,
        codes=codes,
        shards=spans,
        sources={name: int(counts[code]) for name, code in sources.items() if counts[code]},
        failures=outstanding,
        manifest=manifest,
        plan=plan,
        prompt_counts=prompt_counts,
        paths=paths,
        gaps=gaps,
        kept_flags=kept_flags,
    )


def _kept_flags(spill: _Spill, codes: np.ndarray, rules: tuple[str, ...]) -> dict[str, int | None]:
    """`ExportFacts.kept_flags` from the spilled bits and completion hashes, a chunk (a partition)
    at a time; the near-duplicate rules need stage 4's clusters: None."""
    out: dict[str, int | None] = {r: 0 for r in RULES if r not in rules and r != "failed"}
    for start, rows in spill.row_chunks():
        kept = codes[start : start + len(rows)] == KEPT_CODE
        for b, rule in enumerate(BIT_RULES):
            if rule in out:
                out[rule] = int(out[rule] or 0) + int(np.count_nonzero(kept & ((rows["bits"] >> b) & 1 == 1)))
    if "duplicate" in out:
        for p in range(PARTITIONS):
            pairs = spill.pairs("hash", p)
            pairs = pairs[(pairs["key"] != 0) & (codes[pairs["pos"]] == KEPT_CODE)]
            out["duplicate"] = int(out["duplicate"] or 0) + len(_repeats(pairs))
    return {r: (None if r in NEAR_RULES else n) for r, n in out.items()}


def _judge_shard(
    path: Path, index: int, params: AnalyseParams, sources: dict[str, int], gaps: list[str], spill: _Spill
) -> bool | None:
    """Judge one shard into `spill` (not committed); whether it lacks the newer columns, or None
    (a gap) when any part of it cannot be read: a shard counts whole or not at all."""
    start = 0
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
            codes = pd.Categorical(facts["source"].astype(str))
            known = np.array([sources.setdefault(s, len(sources)) for s in codes.categories], np.uint32)
            spill.add(
                id_digests(facts["id"].to_numpy(dtype=object)),
                facts["completion_hash"].to_numpy(dtype=np.uint64),
                bits,
                known[codes.codes] if len(known) else np.zeros(n, np.uint32),
            )
            start += n
    except (OSError, pa.ArrowException, ValueError) as e:
        gaps.append(unreadable_gap(path, e))
        return None
    return start > 0 and not set(KEPT_OUTPUTS) <= names


def _codes(
    spill: _Spill, rules: tuple[str, ...], failures: pd.DataFrame
) -> tuple[np.ndarray, pd.DataFrame, int]:
    """(each row's code, the failures with no row, rows whose id repeats), one partition at a time."""
    codes = np.zeros(spill.total, dtype=np.uint8)
    if (
        not failures.empty and "id" in failures.columns
    ):  # the last record of each id (load.outstanding_failures)
        failures = failures.drop_duplicates(subset="id", keep="last")
        fail_keys = id_digests(failures["id"].to_numpy(dtype=object))
    else:
        fail_keys = np.zeros(0, dtype=np.uint64)
    fail_part = _partition(fail_keys)
    has_row = np.zeros(len(fail_keys), dtype=bool)
    repeated = 0
    for p in range(PARTITIONS):
        pairs = spill.pairs("id", p)
        again = _repeats(pairs)
        codes[again] = SKIP_CODE
        repeated += len(again)
        mine = np.flatnonzero(fail_part == p)
        if len(mine):
            has_row[mine] = np.isin(fail_keys[mine], pairs["key"])
        del pairs
    for i, rule in enumerate(rules):
        code = np.uint8(i + 1)
        if rule == "duplicate":
            for p in range(PARTITIONS):
                pairs = spill.pairs("hash", p)
                pairs = pairs[(pairs["key"] != 0) & (codes[pairs["pos"]] == KEPT_CODE)]
                codes[_repeats(pairs)] = code
        elif rule in BIT_RULES:
            bit = np.uint8(BIT_RULES.index(rule))
            for start, rows in spill.row_chunks():
                part = codes[start : start + len(rows)]  # a view: written in place
                hit = (rows["bits"] >> bit) & np.uint8(1) == 1
                part[(part == KEPT_CODE) & hit] = code
    return codes, failures[~has_row].reset_index(drop=True), repeated


def failure_samples(failures: pd.DataFrame) -> list[tuple[str, int]]:
    """(prompt id, sample index) of each failure record: its own `prompt_id` and `sample_index`
    (stage 3 writes both), else read from its id (`<prompt id>.<k>`, an older log), which a prompt
    id with a dot in it (a batch line's custom_id) would mislead."""
    out = []
    cols = failures.columns
    for rec in failures.to_dict("records"):
        fid, pid, index = str(rec.get("id")), rec.get("prompt_id") if "prompt_id" in cols else None, None
        if "sample_index" in cols and pd.notna(rec.get("sample_index")):
            index = int(rec["sample_index"])
        if isinstance(pid, str) and index is not None:
            out.append((pid, index))
            continue
        head, dot, tail = fid.rpartition(".")
        out.append((head, int(tail)) if dot and tail.isdigit() else (fid, 0))
    return out
