"""One source of the prompt plan: load it, walk a seeded shuffle, filter, keep up to its target."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import DataError
from kit.params import DataParams, SourceParams
from kit.progress import progress as progress_bar
from kit.prompts.adapters import PromptRow, get_adapter
from kit.prompts.datafiles import file_problem_after_load, file_problem_before_load, local_files
from kit.prompts.dedup import Deduplicator, dedup_key, prompt_id
from kit.prompts.records import DroppedExample, PromptRecord, SourcePlanSummary
from kit.prompts.tokens import TEMPLATE_ERROR, TokenCounter

CHUNK_MAX = 16384
SUB_BATCH = 2048
"""Rows adapted before their token counting is sent to the workers (when a chunk uses them)."""
SPILL_ROWS = 16384
"""Kept rows a `SourcePlan` with a sink holds before it hands them over (Python rows are large)."""
EXAMPLES_PER_REASON = 3
REASONS = ("language", "malformed", "duplicate", "too_long", "template_error")


def load_source(source: SourceParams, progress: bool = True) -> Any:
    """`datasets.load_dataset(dataset, config, split=..., data_files=...)`, errors made actionable:
    a local data file that is missing, empty or malformed is named, with the line at fault."""
    import datasets

    _raise_for_file(source, file_problem_before_load(source))
    files = [str(p) for p in source.data_files] if source.data_files else None  # None: load_dataset's default
    quiet = not progress and not datasets.are_progress_bars_disabled()
    if quiet:
        datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(source.dataset, source.config, split=source.split, data_files=files)
    except Exception as e:  # the hub, the builders and fsspec raise many types; all mean "cannot load"
        _raise_for_file(source, file_problem_after_load(source))
        cause = f" ({type(e.__cause__).__name__}: {str(e.__cause__)[:300]})" if e.__cause__ else ""
        raise DataError(
            f"source '{source.name}': cannot load dataset '{source.dataset}' (config {source.config!r}, "
            f"split {source.split!r}): {type(e).__name__}: {str(e)[:500]}{cause}. "
            f"To fix: {_load_hint(source)}."
        ) from None
    finally:
        if quiet:
            datasets.enable_progress_bars()


def _raise_for_file(source: SourceParams, problem: tuple[Path, str, str] | None) -> None:
    if problem is not None:
        path, what, fix = problem
        raise DataError(
            f"source '{source.name}': cannot load dataset '{source.dataset}': data file {path} {what}. "
            f"To fix: {fix}."
        )


def _load_hint(source: SourceParams) -> str:
    if source.dataset in ("json", "parquet", "csv", "text", "arrow"):
        return "check data_files (the paths exist and hold that format)"
    return (
        "check the dataset id, config and split; the hub must be reachable (HF_TOKEN for gated datasets "
        "such as BAAI/Infinity-Instruct), or set HF_HUB_OFFLINE=1 with the dataset already cached, or "
        "point `dataset: json|parquet` with data_files at a local copy"
    )


def remapped(dataset: Any) -> Any:
    """The same rows from a fresh memory map of the dataset's Arrow cache files (itself when it has
    none, or an indices mapping).

    A seeded walk reads rows all over the cache file, and every page it touched (with the pages
    around each that the kernel maps in on a fault) stays mapped into this process, counted in its
    resident memory, until the map is closed: one chunk of random rows maps in most of the file,
    and without a fresh map every source walked would stay resident. Mapping afresh after each
    chunk lets those pages go (they stay in the kernel's page cache, so reading them again costs
    no disk read). They are clean file pages the kernel can drop at any time, but RSS counts them.
    """
    files = [f["filename"] for f in getattr(dataset, "cache_files", None) or []]
    if not files or getattr(dataset, "_indices", None) is not None:
        return dataset
    import datasets

    parts = [datasets.Dataset.from_file(f) for f in files]
    fresh = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return fresh if len(fresh) == len(dataset) and fresh.column_names == dataset.column_names else dataset


def source_targets(data: DataParams) -> dict[str, int | None]:
    """Rows wanted per source: `count`, else a weighted share of `data.total`, else all (None).

    With `data.total`, sources without count or weight weigh 1; shares of what the counted sources
    leave are rounded by largest remainder, so the targets add up to the total exactly.
    """
    targets: dict[str, int | None] = {s.name: s.count for s in data.sources}
    weighted = {s.name: (s.weight or 1.0) for s in data.sources if s.count is None}
    if not weighted or data.total is None:
        if any(s.weight is not None for s in data.sources if s.count is None):
            raise DataError(
                "a source has a weight but data.total is not set: set data.total (the number of "
                "prompts the weights share) or give the source a count."
            )
        return targets
    left = data.total - sum(s.count for s in data.sources if s.count is not None)
    if left < 0:
        raise DataError(
            f"data.total ({data.total}) is less than the sum of the sources' counts: raise the total."
        )
    scale = left / sum(weighted.values())
    shares = {name: w * scale for name, w in weighted.items()}
    floors = {name: int(v) for name, v in shares.items()}
    by_remainder = sorted(shares, key=lambda n: (floors[n] - shares[n], n))
    for name in by_remainder[: left - sum(floors.values())]:
        floors[name] += 1
    return {**targets, **floors}


def shuffled_order(seed: int, name: str, n: int) -> np.ndarray:
    """A permutation of range(n) fixed by the plan seed and the source's name."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(n)


class DroppedRows:
    """Every row a source's filters dropped, in the order dropped, held as columns; counts per reason.

    Columns of strings instead of a dict per row (about half the memory); details that repeat
    (`langdetect='zh'`, `1600 tokens > 1536`) share one string.
    """

    def __init__(self) -> None:
        self.source_row_ids: list[str] = []
        self.reasons: list[str] = []
        self.details: list[str] = []
        self.counts: Counter[str] = Counter()
        self.first: dict[str, list[tuple[str, str]]] = {}
        """The first `EXAMPLES_PER_REASON` (source_row_id, detail) per reason."""
        self._shared: dict[str, str] = {}

    def add(self, row_id: str, reason: str, detail: str) -> None:
        if reason in ("language", "too_long", "template_error"):
            detail = self._shared.setdefault(detail, detail)
        self.source_row_ids.append(row_id)
        self.reasons.append(reason)
        self.details.append(detail)
        self.counts[reason] += 1
        first = self.first.setdefault(reason, [])
        if len(first) < EXAMPLES_PER_REASON:
            first.append((row_id, detail))

    def __len__(self) -> int:
        return len(self.reasons)


class LineIndex:
    """Where row `index` of a file-of-lines source (`dataset: text`) came from: `in.jsonl line 3`.

    Lines are counted per file as datasets' text loader splits them (on newlines); when the counts do
    not add up to the rows loaded (a remote file, a pattern), a row is named by its position alone.
    """

    def __init__(self, names: list[str], starts: list[int]) -> None:
        self.names, self.starts = names, starts

    @classmethod
    def of(cls, source: SourceParams, rows: int) -> LineIndex | None:
        files = [p for p in local_files(source) if p.is_file()]
        if not files:
            return None
        counts = [_count_lines(p) for p in files]
        if sum(counts) != rows:
            return None
        names = [p.name for p in files]
        if len(set(names)) < len(names):
            names = [str(p) for p in files]
        return cls(names, np.cumsum([0, *counts]).tolist()[:-1])

    def where(self, index: int) -> str:
        f = int(np.searchsorted(self.starts, index, side="right")) - 1
        return f"{self.names[f]} line {index - self.starts[f] + 1}"


def _count_lines(path: Path) -> int:
    """Lines of a text file as datasets' text loader reads them: one per newline, and a last one
    without a newline."""
    n, last = 0, b"\n"
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


KeptSink = Callable[[list[PromptRecord]], None]
"""Takes a batch of kept rows (`prompts.parquet`'s), in the order kept."""


class SourcePlan:
    """Walks one source's shuffled rows in chunks until its target of kept rows is met.

    With a `sink`, kept rows go to it every `spill_rows` rows (default `SPILL_ROWS`) and at the end
    of `run`, so `kept` never holds more than one batch; without one, `kept` holds them all.
    """

    def __init__(
        self,
        source: SourceParams,
        dataset: Any,
        target: int | None,
        data: DataParams,
        counter: TokenCounter | None,
        dedup: Deduplicator | None,
        sink: KeptSink | None = None,
        spill_rows: int | None = None,
    ) -> None:
        self.source, self.dataset, self.target, self.data = source, dataset, target, data
        self.counter, self.dedup, self.sink = counter, dedup, sink
        self.spill_rows = spill_rows or SPILL_ROWS
        self.available = len(dataset)
        self.adapter = get_adapter(source.adapter)
        columns = list(dataset.column_names)
        self.adapter.check_columns(source.name, columns)
        self.language_column = self.adapter.language_column(columns) if source.language else None
        if source.language and self.language_column is None:
            raise DataError(
                f"source '{source.name}': language '{source.language}' was asked for but the dataset "
                f"has no language column (adapter '{self.adapter.name}' reads "
                f"{list(self.adapter.language_columns) or 'none'}; found {columns}). Remove `language`."
            )
        self.kept: list[PromptRecord] = []
        self.kept_count = 0
        self.dropped = DroppedRows()
        self.examined = 0
        self.languages_seen: Counter[str] = Counter()
        """Values of the language column in the rows the filter looked at."""
        self._ids: set[int] = set()
        """This source's kept ids, as ints (a repeated id is a duplicate even with dedup off)."""
        self._own: dict[str, int] = {}
        """An adapter with its own ids (`Adapter.own_ids`): each id taken, and the row it came from."""
        self._lines = LineIndex.of(source, self.available) if self.adapter.lines else None

    def run(self, progress: bool = True) -> SourcePlan:
        """Process chunks of the shuffled order until the target is met or rows run out."""
        order, pos = shuffled_order(self.data.seed, self.source.name, len(self.dataset)), 0
        total = self.target if self.target is not None else len(order)
        desc = f"plan {self.source.name}"
        with progress_bar(total=total, desc=desc, disable=not progress, leave=False) as bar:
            while pos < len(order) and not self._full():
                need = len(order) if self.target is None else self.target - self.kept_count
                size = min(CHUNK_MAX, int(need * 1.15) + 64)
                before = self.kept_count
                self._process(order[pos : pos + size].tolist())
                pos += size
                bar.update(self.kept_count - before)
                self.dataset = remapped(self.dataset)  # lets the pages this chunk touched go
        self.flush()
        self._check_malformed()
        return self

    def flush(self) -> None:
        """Hand the kept rows held so far to the sink (none: keep them)."""
        if self.sink is not None and self.kept:
            self.sink(self.kept)
            self.kept = []

    def release(self) -> None:
        """Let go of the dataset, the dedup table and this source's ids once the walk is done (counts
        and dropped rows stay)."""
        self.dataset, self.dedup = None, None
        self._ids, self._own = set(), {}

    def _full(self) -> bool:
        return self.target is not None and self.kept_count >= self.target

    def _process(self, indices: list[int]) -> None:
        batch = self.dataset[indices]
        columns = list(batch)
        rows = [dict(zip(columns, values, strict=True)) for values in zip(*batch.values(), strict=True)]
        pooled = self.counter is not None and self.counter.uses_pool(len(rows))
        step = max(SUB_BATCH if pooled else len(rows), 1)
        adapted: list[Any] = []
        keys: list[bytes | None] = []
        pending = []
        for start in range(0, len(rows), step):  # workers count a part while the next is adapted
            part_rows, part_indices = rows[start : start + step], indices[start : start + step]
            part = [self._adapt(r, i) for r, i in zip(part_rows, part_indices, strict=True)]
            part_keys = [self._key(a) for a in part]
            pending.append(self._count(part, part_keys, pooled))
            adapted += part
            keys += part_keys
        tokens = self._wait(pending)
        for row, index, item, key, n in zip(rows, indices, adapted, keys, tokens, strict=True):
            if self._full():
                return
            self.examined += 1
            self._decide(row, index, item, key, n)

    @staticmethod
    def _wait(pending: list[Future[list[int | None]]]) -> list[int | None]:
        return [n for counts in pending for n in counts.result()]

    def _key(self, item: PromptRow | tuple[str, str]) -> bytes | None:
        # a row with its own id (a batch line) is a request to answer: the same text twice is two
        # requests (two seeds, two samples), never a duplicate to drop
        if self.dedup is None or not isinstance(item, PromptRow) or item.id is not None:
            return None
        return dedup_key(item.messages, item.tools)

    def _adapt(self, row: dict[str, Any], index: int) -> PromptRow | tuple[str, str]:
        """The adapted row, or (reason, detail) for a row dropped before it has messages."""
        if self.language_column is not None:
            lang = row.get(self.language_column)
            self.languages_seen[str(lang)] += 1
            if str(lang).lower() != str(self.source.language).lower():
                return ("language", f"{self.language_column}={lang!r}")
        where = self._lines.where(index) if self._lines is not None else None
        try:
            return self.adapter(row, index, self.source.name, where)
        except DataError as e:
            return ("malformed", str(e))

    def _count(self, adapted: list[Any], keys: list[bytes | None], pooled: bool) -> Future[list[int | None]]:
        """Token counts for rows that may be kept (adapted and not already a duplicate), as a future."""
        out: Future[list[int | None]] = Future()
        if self.counter is None:
            out.set_result([None] * len(adapted))
            return out
        todo = [
            i
            for i, a in enumerate(adapted)
            if isinstance(a, PromptRow)
            and (keys[i] is None or self.dedup is None or keys[i] not in self.dedup)
        ]
        counting = self.counter.submit([adapted[i] for i in todo], pool=pooled)

        def place(done: Future[list[int]]) -> None:
            counts: list[int | None] = [None] * len(adapted)
            try:
                for i, n in zip(todo, done.result(), strict=True):
                    counts[i] = n
            except BaseException as e:
                out.set_exception(e)
                return
            out.set_result(counts)

        counting.add_done_callback(place)
        return out

    def _decide(
        self, row: dict[str, Any], index: int, item: Any, key: bytes | None, tokens: int | None
    ) -> None:
        if not isinstance(item, PromptRow):
            return self._drop(self._row_id(row, index), *item)
        if item.id is not None:
            self._take_own_id(item.id, index)
        pid = item.id or prompt_id(self.source.name, item.source_row_id, item.messages, item.tools)
        holder = self.dedup.first_holder(key) if self.dedup is not None and key is not None else None
        number = int(pid, 16) if item.id is None else None
        if holder is not None or (number is not None and number in self._ids):
            return self._drop(item.source_row_id, "duplicate", f"same text as {holder or pid}")
        if tokens == TEMPLATE_ERROR:
            return self._drop(
                item.source_row_id, "template_error", "the chat template refused these messages"
            )
        limit = self.data.max_prompt_tokens
        if limit is not None and tokens is not None and tokens > limit:
            return self._drop(item.source_row_id, "too_long", f"{tokens} tokens > {limit}")
        if self.dedup is not None and key is not None:
            self.dedup.add(key, pid)
        if number is not None:
            self._ids.add(number)
        self.kept_count += 1
        self.kept.append(
            PromptRecord(
                id=pid,
                source=self.source.name,
                source_row_id=item.source_row_id,
                messages=item.messages,
                tools=item.tools,
                metadata=item.metadata,
                prompt_tokens=tokens,
            )
        )
        if self.sink is not None and len(self.kept) >= self.spill_rows:
            self.flush()

    def _take_own_id(self, own: str, index: int) -> None:
        """Note a row's own id (a batch line's custom_id); the same id on two rows stops the plan,
        both named: their answers could not be told apart."""
        first = self._own.setdefault(own, index)
        if first != index:
            a, b = (self._lines.where(i) if self._lines else f"row {i}" for i in sorted((first, index)))
            raise DataError(
                f"source '{self.source.name}': custom_id {own!r} is on two lines, {a} and {b}: "
                "every request of a batch file needs its own custom_id (the answers are matched by it). "
                "To fix: give one of them another custom_id, or remove the repeat."
            )

    def _drop(self, row_id: str, reason: str, detail: str) -> None:
        self.dropped.add(row_id, reason, detail)

    def _row_id(self, row: dict[str, Any], index: int) -> str:
        value = row.get(self.adapter.id_column) if self.adapter.id_column else None
        return str(index if value is None else value)

    def _check_malformed(self) -> None:
        bad = self.dropped.counts["malformed"]
        if bad and bad * 2 > self.examined:
            raise DataError(
                f"source '{self.source.name}': {bad} of {self.examined} rows do not fit adapter "
                f"'{self.adapter.name}', e.g. {self.dropped.first['malformed'][0][1]}. "
                "Pick the adapter for this schema."
            )

    def summary(self) -> SourcePlanSummary:
        """One row of the plan table."""
        n = self.dropped.counts
        return SourcePlanSummary(
            source=self.source.name,
            adapter=self.adapter.name,
            dataset=self.source.dataset,
            config=self.source.config,
            split=self.source.split,
            requested=self.target,
            available=self.available,
            examined=self.examined,
            kept=self.kept_count,
            dropped_language=n.get("language", 0),
            dropped_malformed=n.get("malformed", 0),
            dropped_duplicate=n.get("duplicate", 0),
            dropped_too_long=n.get("too_long", 0),
            dropped_template_error=n.get("template_error", 0),
        )

    def examples(self) -> dict[str, list[DroppedExample]]:
        """The first few dropped rows per reason, for plan.json."""
        return {
            reason: [DroppedExample(source_row_id=row_id, detail=detail[:300]) for row_id, detail in first]
            for reason, first in self.dropped.first.items()
        }
