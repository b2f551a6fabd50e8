"""Near-duplicates: rows whose prompts, or whose answers, are near copies of another row's.

MinHash LSH (datasketch): each text becomes its set of word n-grams (`ngram`, 5 by default, words
lower-cased), hashed in numpy from its words' hashes (`ngram_hashes`), a MinHash signature of
`num_perm` values (datasketch's permutations and scheme, `minhash_values`), cut into
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

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from datasketch import MinHash
from datasketch.lsh import _optimal_param
from datasketch.minhash import _fmix
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from kit.analyse.tables import ClusterCounts

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
    """The word n-grams of a text (lower-cased words) as text; a text of fewer words is one shingle.
    What a shingle is; `signatures` hashes the same n-grams from the words' hashes instead."""
    words = WORD.findall(text.lower())
    if not words:
        return []
    if len(words) <= n:
        return [" ".join(words).encode()]
    return [" ".join(words[i : i + n]).encode() for i in range(len(words) - n + 1)]


WORD_CACHE = 1 << 17
"""Words whose 64-bit hash is kept between texts, cleared when full (~120 bytes a word: ~16 MB at
most, against stage 4's bounded memory); a run's answers reuse a vocabulary of that order."""
_word_hashes: dict[str, int] = {}
NGRAM_MUL = np.uint64(0x9E3779B97F4A7C15)
"""Odd 64-bit multiplier of the n-gram hash (`h = h * NGRAM_MUL ^ word`, in order)."""
PERM_CHUNK = 4096
"""Shingles permuted at once: a text's work is at most this many rows of `num_perm` values."""


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (wrapping uint64 arithmetic)."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def word_hashes(words: list[str]) -> np.ndarray:
    """A stable 64-bit hash (blake2b) of each word, as uint64; each distinct word hashed once."""
    cache = _word_hashes
    if len(cache) > WORD_CACHE:
        cache.clear()
    for w in set(words).difference(cache):
        cache[w] = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
    return np.fromiter(map(cache.__getitem__, words), dtype=np.uint64, count=len(words))


def ngram_hashes(text: str, n: int) -> np.ndarray:
    """32-bit hashes of the text's word n-grams, the same n-grams as `shingles` (a text of n words
    or fewer: one, of all its words), computed from the words' hashes with numpy: hashing each
    n-gram's bytes (datasketch's SHA-1 per shingle) took 62 of the 157 s stage 4 spent on 229 MB
    of text, and the whole signing 148 s."""
    words = WORD.findall(text.lower())
    if not words:
        return np.zeros(0, dtype=np.uint32)
    w = word_hashes(words)
    m = max(len(w) - n + 1, 1)
    h = np.zeros(m, dtype=np.uint64)
    for j in range(min(n, len(w))):
        h = (h * NGRAM_MUL) ^ w[j : j + m]
    return (_fmix64(h) >> np.uint64(32)).astype(np.uint32)


@functools.lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's own affine permutations (a, b) for these settings."""
    a, b = MinHash(num_perm=num_perm, seed=seed, scheme=scheme).permutations
    return a, b


def minhash_values(hv: np.ndarray, settings: NearDupSettings) -> np.ndarray:
    """The MinHash signature of a set of 32-bit hashes, exactly what datasketch's `MinHash`
    (scheme affine32) holds after `update_batch` of the same values through an identity hashfunc:
    its pre-mix, `a * h + b` per permutation (uint32, wrapping), the minimum of each."""
    if settings.scheme != "affine32":
        raise ValueError(f"near-duplicate signatures are computed for scheme affine32, not {settings.scheme}")
    a, b = _permutations(settings.num_perm, settings.seed, settings.scheme)
    out = np.full(settings.num_perm, np.iinfo(np.uint32).max, dtype=np.uint32)
    hv = _fmix(np.unique(hv), 32)  # a set: a repeated n-gram changes no minimum
    for i in range(0, len(hv), PERM_CHUNK):
        out = np.minimum(out, (hv[i : i + PERM_CHUNK, None] * a + b).min(axis=0))
    return out


def signatures(texts: Iterable[str], settings: NearDupSettings) -> tuple[np.ndarray, np.ndarray]:
    """(MinHash values, one row per text as uint32; whether the text had any word).

    One text at a time, its n-grams as one uint32 array and its permuted values at most
    `PERM_CHUNK` rows: a batch's shingle lists held together had taken ~12 times its text (123 MB for
    the 250 rows of 40,000 characters of a shard of tests/test_analyse_scale.py: issue 33)."""
    rows: list[np.ndarray] = []
    has_text: list[bool] = []
    for t in texts:
        hv = ngram_hashes(t or "", settings.ngram)
        has_text.append(len(hv) > 0)
        rows.append(minhash_values(hv, settings))  # no n-gram: every value stays at its maximum
    sig = np.array(rows, dtype=np.uint32).reshape(len(rows), settings.num_perm)
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


def cluster_counts(cluster: np.ndarray, exact: np.ndarray | None = None) -> ClusterCounts:
    """Clusters, rows in them, rows beyond the first of each (what dropping them would remove), and
    of those how many are exact copies (`exact`: the rows the exact-duplicate flag marks)."""
    in_cluster = cluster >= 0
    extra = in_cluster & _not_first(cluster)
    out = ClusterCounts(
        clusters=int(len(np.unique(cluster[in_cluster]))),
        rows=int(in_cluster.sum()),
        extra_rows=int(extra.sum()),
    )
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
