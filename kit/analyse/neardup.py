"""Near-duplicates: rows whose prompts, or whose answers, are near copies of another row's.

MinHash LSH (datasketch): each text becomes its set of word n-grams (`ngram`, 5 by default, words
lower-cased), a MinHash signature of `num_perm` values (datasketch's `MinHash.bulk`), cut into
`b` bands of `r` values, (b, r) chosen by datasketch's own optimiser for the Jaccard `threshold`
(`datasketch.lsh._optimal_param`, the one `MinHashLSH` uses), weighing a missed near copy 9 times
a false one (`MinHashLSH(weights=(0.1, 0.9))`): at 0.85 and 128 permutations 11 bands of 11, which
finds 87% of the pairs at Jaccard 0.85, 98% at 0.9, and 20% of those at 0.7. Two texts are candidates when one
band of theirs is equal, as in `MinHashLSH.query`; a cluster is a connected group of candidates.

What differs from `MinHashLSH` is where the bands are kept: not in its dict of sets (about 4 KB a
row at 128 permutations: 8 GB at 2M rows), but as one 8-byte digest per band and row in a numpy
array (88 bytes a row), grouped by sorting. The clusters are the same (tests/test_neardup.py
compares them with `MinHashLSH.query` on the same signatures). Texts are hashed batch by batch as
stage 4 reads them, so memory holds the digests, never the texts.

Why 0.85 on word 5-grams: docs/neardup.md (what a threshold finds on planted copies, and why
shorter n-grams call unrelated short answers near copies).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from datasketch import MinHash
from datasketch.lsh import _optimal_param
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

WORD = re.compile(r"\w+", re.UNICODE)
NO_TEXT = np.uint64(0)
"""The digest of a text with no words (never a near-duplicate)."""


@dataclass(frozen=True)
class NearDupSettings:
    """How near copies are found: Jaccard threshold on word n-grams, signature size and seed."""

    threshold: float = 0.85
    ngram: int = 5
    num_perm: int = 128
    seed: int = 1
    false_negative_weight: float = 0.9
    """datasketch's `weights=(1 - w, w)`: how much more a missed near copy costs than a false one."""
    scheme: str = "affine32"
    """datasketch's hashing scheme (its default since 2.0), named so that signatures stay comparable."""

    @property
    def bands(self) -> tuple[int, int]:
        """(b, r): bands and values per band, datasketch's optimum for the threshold."""
        w = self.false_negative_weight
        b, r = _optimal_param(self.threshold, self.num_perm, 1 - w, w)
        return int(b), int(r)


def shingles(text: str, n: int) -> list[bytes]:
    """The word n-grams of a text (lower-cased words); a text of fewer words is one shingle."""
    words = WORD.findall(text.lower())
    if not words:
        return []
    if len(words) <= n:
        return [" ".join(words).encode()]
    return [" ".join(words[i : i + n]).encode() for i in range(len(words) - n + 1)]


def signatures(texts: Iterable[str], settings: NearDupSettings) -> tuple[np.ndarray, np.ndarray]:
    """(MinHash values, one row per text as uint32; whether the text had any word).

    One text's shingles at a time: a batch's shingle lists held together took ~12 times its text
    (a bytes object of ~70 bytes a word), 123 MB for the 250 rows of 40,000 characters of a shard of
    tests/test_analyse_scale.py, which was stage 4's peak (issue 33)."""
    has_text: list[bool] = []

    def sets() -> Iterable[list[bytes]]:
        for t in texts:
            words = shingles(t or "", settings.ngram)
            has_text.append(bool(words))
            yield words

    hashes = MinHash.generator(sets(), num_perm=settings.num_perm, seed=settings.seed, scheme=settings.scheme)
    values = [m.hashvalues for m in hashes]
    sig = np.array(values, dtype=np.uint32).reshape(len(values), settings.num_perm)
    return sig, np.array(has_text, dtype=bool)


def band_digests(sig: np.ndarray, has_text: np.ndarray, settings: NearDupSettings) -> np.ndarray:
    """One 8-byte digest (blake2b) of each band of each signature; NO_TEXT for texts without words."""
    b, r = settings.bands
    out = np.zeros((len(sig), b), dtype=np.uint64)
    for i in np.flatnonzero(has_text):
        row = sig[i]
        for j in range(b):
            digest = hashlib.blake2b(row[j * r : (j + 1) * r].tobytes(), digest_size=8).digest()
            out[i, j] = int.from_bytes(digest, "little") | 1  # never NO_TEXT
    return out


def text_digests(texts: list[str], settings: NearDupSettings) -> np.ndarray:
    """Band digests of a batch of texts (rows: texts, columns: bands)."""
    sig, has_text = signatures(texts, settings)
    return band_digests(sig, has_text, settings)


def clusters(digests: np.ndarray) -> np.ndarray:
    """Cluster number of each row (0, 1, ... in order of first row), -1 for a row that shares no
    band with another. Rows sharing one band digest are linked; a cluster is a connected group."""
    n = len(digests)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    src, dst = [], []
    for j in range(digests.shape[1]):
        col = digests[:, j]
        order = np.argsort(col, kind="stable")
        keys = col[order]
        same = (keys[1:] == keys[:-1]) & (keys[1:] != NO_TEXT)
        if not same.any():
            continue
        # each row of a run of equal digests links to the run's first row
        starts = np.r_[True, ~same]
        first = order[np.maximum.accumulate(np.where(starts, np.arange(n), 0))]
        linked = np.flatnonzero(~starts)
        src.append(order[linked])
        dst.append(first[linked])
    if not src:
        return np.full(n, -1, dtype=np.int32)
    s, d = np.concatenate(src), np.concatenate(dst)
    graph = coo_matrix((np.ones(len(s), dtype=np.int8), (s, d)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    sizes = np.bincount(labels)
    labels = np.where(sizes[labels] > 1, labels, -1)
    return _renumber(labels)


def _renumber(labels: np.ndarray) -> np.ndarray:
    """Clusters numbered 0, 1, ... in order of their first row; -1 kept."""
    out = np.full(len(labels), -1, dtype=np.int32)
    in_cluster = labels >= 0
    if in_cluster.any():
        _, first, inverse = np.unique(labels[in_cluster], return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first))
        out[in_cluster] = rank[inverse]
    return out


def cluster_counts(cluster: np.ndarray, exact: np.ndarray | None = None) -> dict[str, int]:
    """Clusters, rows in them, rows beyond the first of each (what dropping them would remove), and
    of those how many are exact copies (`exact`: the rows the exact-duplicate flag marks)."""
    in_cluster = cluster >= 0
    extra = in_cluster & _not_first(cluster)
    out = {
        "clusters": int(len(np.unique(cluster[in_cluster]))),
        "rows": int(in_cluster.sum()),
        "extra_rows": int(extra.sum()),
    }
    if exact is not None:
        out["exact_rows"] = int((in_cluster & exact).sum())
    return out


def _not_first(cluster: np.ndarray) -> np.ndarray:
    """True for each row of a cluster but its first."""
    seen = np.zeros(len(cluster), dtype=bool)
    in_cluster = np.flatnonzero(cluster >= 0)
    if len(in_cluster):
        _, first = np.unique(cluster[in_cluster], return_index=True)
        seen[in_cluster] = True
        seen[in_cluster[first]] = False
    return seen


def extra_in_clusters(cluster: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """True for the rows to drop so that one row of each cluster stays: the first `eligible` row
    of a cluster stays (ineligible rows are dropped for another reason already)."""
    out = np.zeros(len(cluster), dtype=bool)
    rows = np.flatnonzero((cluster >= 0) & eligible)
    if len(rows):
        _, first = np.unique(cluster[rows], return_index=True)
        out[rows] = True
        out[rows[first]] = False
    return out
