"""Near-duplicates (kit.analyse.neardup): the clusters are those of datasketch's own MinHashLSH on the
same signatures; planted near copies are found and unrelated texts are not; stage 4 counts them and
shows some; `kit export --drop near_duplicate` keeps one row of each cluster."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasketch import MinHash, MinHashLSH
from fixtures_outputs import NEW_SCHEMA, row_records
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from kit.analyse import read_run, run_analysis, sample_browser
from kit.analyse.neardup import NearDupSettings, band_digests, clusters, ngram_hashes, shingles, signatures
from kit.analyse.view import analysis_tables
from kit.artifacts import Manifest
from kit.export import ExportOptions, export_run
from kit.params import AnalyseParams
from kit.runfolder import RunFolder

WORDS = [f"w{i}" for i in range(3000)]


def text(rng: random.Random, n: int = 80) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def near_copy(rng: random.Random, t: str, edits: int = 1) -> str:
    words = t.split()
    for _ in range(edits):
        words[rng.randrange(len(words))] = rng.choice(WORDS)
    return " ".join(words)


def corpus(seed: int = 0) -> tuple[list[str], list[tuple[int, int]]]:
    """200 unrelated texts and 40 near copies of some of them (one word changed of 80)."""
    rng = random.Random(seed)
    texts = [text(rng) for _ in range(200)]
    planted = []
    for i in range(40):
        planted.append((i, len(texts)))
        texts.append(near_copy(rng, texts[i]))
    return texts, planted


def lsh_components(sig: np.ndarray, settings: NearDupSettings) -> np.ndarray:
    """Connected groups of MinHashLSH.query's candidates, by datasketch itself."""
    w = settings.false_negative_weight
    lsh = MinHashLSH(threshold=settings.threshold, num_perm=settings.num_perm, weights=(1 - w, w))
    hashes = [
        MinHash(num_perm=settings.num_perm, hashvalues=s, seed=settings.seed, scheme=settings.scheme)
        for s in sig
    ]
    for i, m in enumerate(hashes):
        lsh.insert(i, m)
    pairs = [(i, j) for i, m in enumerate(hashes) for j in lsh.query(m) if j != i]
    src, dst = zip(*pairs, strict=True) if pairs else ((), ())
    graph = coo_matrix((np.ones(len(src)), (src, dst)), shape=(len(sig), len(sig)))
    return connected_components(graph, directed=False)[1]


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labelings group the rows alike (singletons as their own groups)."""
    a = np.where(a >= 0, a, -1 - np.arange(len(a)))
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_clusters_are_datasketch_minhashlsh_candidates_connected() -> None:
    texts, planted = corpus()
    settings = NearDupSettings()
    sig, has_text = signatures(texts, settings)
    ours = clusters(band_digests(sig, has_text, settings))
    assert same_partition(ours, lsh_components(sig, settings))
    assert (ours >= 0).sum() >= 2 * 0.95 * len(planted)  # about every planted pair found
    found = sum(ours[i] == ours[j] >= 0 for i, j in planted)
    assert found / len(planted) >= 0.95
    assert (ours[40:200] < 0).all()  # the unrelated texts stay alone


def test_ngram_hashes_are_the_shingles_hashed() -> None:
    """One hash per shingle, equal where the shingles are equal, and (here) nowhere else."""
    rng = random.Random(5)
    for t in [text(rng, n=300), "One two three", "one, TWO three!", "a b c d e a b c d e a b c d e"]:
        grams, hv = shingles(t, 5), ngram_hashes(t, 5)
        assert len(grams) == len(hv) and hv.dtype == np.uint32
        by_gram: dict[bytes, set[int]] = {}
        for g, h in zip(grams, hv.tolist(), strict=True):
            by_gram.setdefault(g, set()).add(h)
        assert all(len(v) == 1 for v in by_gram.values()) and len(set(hv.tolist())) == len(by_gram)
    assert ngram_hashes("One two three", 5).tolist() == ngram_hashes("one, TWO three!", 5).tolist()
    assert ngram_hashes("  !! ", 5).size == 0


def test_shingles_short_and_empty_texts() -> None:
    assert shingles("One two three", 5) == [b"one two three"]
    assert shingles("  ", 5) == [] and shingles("!!", 5) == []
    assert len(shingles(" ".join(WORDS[:10]), 5)) == 6
    settings = NearDupSettings()
    sig, has_text = signatures(["Yes.", "yes!", "", "", "No."], settings)
    assert clusters(band_digests(sig, has_text, settings)).tolist() == [0, 0, -1, -1, -1]


def traced_peak(texts: list[str], settings: NearDupSettings) -> tuple[int, np.ndarray, np.ndarray]:
    """The peak of Python's allocations (tracemalloc: numpy's too) while signing `texts`."""
    tracemalloc.start()
    try:
        sig, has_text = signatures(iter(texts), settings)
        return tracemalloc.get_traced_memory()[1], sig, has_text
    finally:
        tracemalloc.stop()


def test_signatures_hold_one_texts_word_ngrams_at_a_time() -> None:
    """A batch's shingle lists held together took ~12 times its text (123 MB for the 10 MB of one
    shard of tests/test_analyse_scale.py, stage 4's peak: issue 33); one text's at a time, the
    peak is one text's work (its shingles, datasketch's permuted hashes) however many texts there
    are, and the signatures are the same."""
    rng = random.Random(3)
    texts = [text(rng, n=2_000) for _ in range(60)]
    settings = NearDupSettings()
    few, _, _ = traced_peak(texts[:5], settings)
    peak, sig, has_text = traced_peak(texts, settings)
    assert peak < 1.5 * few, f"{peak / 2**20:.1f} MB at peak for 60 texts, {few / 2**20:.1f} MB for 5"
    # datasketch's own MinHash over the same n-gram hashes (identity hashfunc) holds the same values
    one_by_one = [MinHash(num_perm=128, seed=1, hashfunc=int) for _ in texts]
    for m, t in zip(one_by_one, texts, strict=True):
        m.update_batch(ngram_hashes(t, settings.ngram).tolist())
    assert (sig == np.array([m.hashvalues for m in one_by_one], dtype=np.uint32)).all()
    assert has_text.all() and sig.shape == (60, 128)
    empty, none = signatures([], settings)
    assert empty.shape == (0, 128) and none.shape == (0,)


def test_a_higher_threshold_finds_fewer() -> None:
    rng = random.Random(1)
    base = [text(rng) for _ in range(30)]
    texts = base + [near_copy(rng, t, edits=6) for t in base]  # Jaccard about 0.6-0.7
    found = {}
    for threshold in (0.5, 0.95):
        s = NearDupSettings(threshold=threshold)
        sig, has_text = signatures(texts, s)
        found[threshold] = int((clusters(band_digests(sig, has_text, s)) >= 0).sum())
    assert found[0.5] > found[0.95]


@pytest.fixture
def near_run(tmp_path: Path) -> RunFolder:
    """A run whose answers hold three near copies of one answer and whose prompts two near copies."""
    rng = random.Random(2)
    long_answer = text(rng, 120)
    rows = [
        ("chat", f"prompt {i}: " + text(rng, 30), text(rng, 60), None, None, "stop", 9, None)
        for i in range(12)
    ]
    rows[3] = ("chat", rows[3][1], long_answer, None, None, "stop", 9, None)
    rows[5] = ("chat", rows[5][1], near_copy(rng, long_answer), None, None, "stop", 9, None)
    rows[9] = ("other", rows[9][1], near_copy(rng, long_answer, 2), None, None, "stop", 9, None)
    rows[10] = ("other", near_copy(rng, rows[2][1]), rows[10][2], None, None, "stop", 9, None)
    folder = RunFolder(tmp_path / "run").ensure()
    pq.write_table(
        pa.Table.from_pylist(row_records(rows, 0), schema=NEW_SCHEMA),
        folder.generations / "part-00000.parquet",
    )
    folder.shard(0, 1).write_manifest(Manifest(run="run", complete=True, status="complete"))
    return folder


def test_stage_4_counts_near_duplicates_and_shows_clusters(near_run: RunFolder) -> None:
    analysis = run_analysis(near_run, AnalyseParams(), progress=False)
    near = near_run.read_summary().near_duplicates
    assert near["answers"] == {"clusters": 1, "rows": 3, "extra_rows": 2, "exact_rows": 0}
    assert near["prompts"]["rows"] == 2 and near["threshold"] == 0.85 and near["ngram"] == 5
    assert near["rows_in_clusters_by_source"]["other"] == {"prompts": 1, "answers": 1}
    html = sample_browser(analysis.data, interactive=False).html
    assert "answer cluster 0: 3 rows" in html and "chat-003" in html
    assert any(t.title == "Near-duplicates" for t in analysis_tables(near_run.read_summary()))
    off = read_run(near_run, AnalyseParams(near_duplicates=False), progress=False)
    assert (off.df["answer_cluster"] < 0).all()


def test_export_drops_all_but_one_row_of_each_cluster(near_run: RunFolder, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = export_run(near_run.root, ExportOptions(to=out, drop=("near_duplicate",)), progress=False)
    rejected = datasets.load_dataset(str(out), split="rejected")
    assert sorted(rejected["id"]) == ["chat-005", "other-009"] and result.reasons == {"near_duplicate": 2}
    both = export_run(
        near_run.root,
        ExportOptions(to=tmp_path / "b", drop=("near_duplicate", "near_duplicate_prompt")),
        progress=False,
    )
    assert both.reasons == {"near_duplicate": 2, "near_duplicate_prompt": 1}
