"""Near-duplicate detection at scale: time and peak memory against exact dedup, and what it finds.

    .venv/bin/python benchmarks/bench_neardup.py --rows 200000 --out /tmp/bench_neardup
    .venv/bin/python benchmarks/bench_neardup.py --rows 2000000 --out /tmp/bench_neardup --skip-lsh
    .venv/bin/python benchmarks/bench_neardup.py --rows 5000 --out /tmp/bench_neardup   # a quick check

Each measurement runs in a fresh child process (its own peak RSS, `ru_maxrss`), over texts made
batch by batch as stage 4 reads them (1,024 at a time, never all held):

- `exact`: the hash stage 4 flags exact duplicates with (kit.analyse.scan.completion_hash), per batch;
- `near`: kit.analyse.neardup as stage 4 runs it (MinHash band digests per batch, then clusters);
- `near_sha1`: the same with the signatures made as before (datasketch's SHA-1 of each shingle's
  bytes): the baseline of `near`'s speed and recall, in the same run;
- `minhashlsh`: datasketch's MinHashLSH itself, every signature inserted (the index this replaces);
  left out with --skip-lsh (at 2M rows it would need several GB).

Two corpora: `planted`, texts of 60-200 words drawn from a Zipf vocabulary of 50,000 words, 4% of them
near copies of another row with 1 word, 2%, 5% or 10% of the words replaced (recall per edit level,
with the copies' true Jaccard on word 5-grams); and `fixture`, the demo's fixture answers and requests
(kit.demo.fixture_text: a few hundred template sentences, so near copies are everywhere), for the
share found. Results: `<out>/bench_neardup.json` (docs/neardup.md).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH = 1024
VOCAB = 50_000
PLANTED_SHARE = 0.04
EDITS = ("1 word", "1%", "2%", "5%")
BINS = ((0.9, 1.01), (0.85, 0.9), (0.8, 0.85), (0.0, 0.8))


def zipf_words(rng: np.random.Generator, n: int) -> list[str]:
    ranks = np.minimum(rng.zipf(1.2, n), VOCAB)
    return [f"w{r}" for r in ranks.tolist()]


def edit(words: list[str], level: str, rng: random.Random) -> list[str]:
    out = list(words)
    k = 1 if level == "1 word" else max(1, round(len(words) * float(level.rstrip("%")) / 100))
    for i in rng.sample(range(len(out)), k):
        out[i] = f"x{rng.randrange(VOCAB)}"
    return out


def planted_batches(rows: int, seed: int = 0) -> Iterator[tuple[list[str], list[tuple[int, int, str]]]]:
    """Batches of texts and the planted pairs (original row, copy row, edit level) they hold: a copy
    follows its original within the same batch."""
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    row = 0
    while row < rows:
        texts: list[str] = []
        pairs = []
        while len(texts) < BATCH and row < rows:
            words = zipf_words(nrng, rng.randint(60, 200))
            texts.append(" ".join(words))
            row += 1
            if rng.random() < PLANTED_SHARE / (1 - PLANTED_SHARE) and row < rows:
                level = EDITS[rng.randrange(len(EDITS))]
                texts.append(" ".join(edit(words, level, rng)))
                pairs.append((row - 1, row, level))
                row += 1
        yield texts, pairs


def fixture_batches(rows: int, seed: int = 0) -> Iterator[tuple[list[str], list]]:
    from kit.demo import fixture_text as ft

    rng = random.Random(seed)
    done = 0
    while done < rows:
        n = min(BATCH, rows - done)
        yield [ft.answer(rng) if i % 2 else ft.request(rng) for i in range(n)], []
        done += n


def jaccard(a: str, b: str, n: int = 5) -> float:
    from kit.analyse.neardup import shingles

    x, y = set(shingles(a, n)), set(shingles(b, n))
    return len(x & y) / len(x | y) if x | y else 1.0


def sha1_signatures(texts: list[str], settings) -> tuple[np.ndarray, np.ndarray]:
    """Signatures as stage 4 made them before numpy hashed the n-grams: datasketch's MinHash over
    each shingle's bytes (SHA-1), one text at a time."""
    from datasketch import MinHash

    from kit.analyse.neardup import shingles

    sets = [shingles(t, settings.ngram) for t in texts]
    hashes = MinHash.generator(
        iter(sets), num_perm=settings.num_perm, seed=settings.seed, scheme=settings.scheme
    )
    sig = np.array([m.hashvalues for m in hashes], dtype=np.uint32).reshape(len(texts), settings.num_perm)
    return sig, np.array([bool(x) for x in sets], dtype=bool)


def measure(mode: str, corpus: str, rows: int) -> dict:
    """One measurement, in this (child) process."""
    import pandas as pd

    from kit.analyse.neardup import NearDupSettings, band_digests, clusters, signatures
    from kit.analyse.scan import completion_hash

    settings = NearDupSettings()
    batches = planted_batches(rows) if corpus == "planted" else fixture_batches(rows)
    start = time.perf_counter()
    cpu0 = time.process_time()
    parts, pairs, sample = [], [], {}
    lsh = None
    if mode == "minhashlsh":
        from datasketch import MinHash, MinHashLSH

        w = settings.false_negative_weight
        lsh = MinHashLSH(threshold=settings.threshold, num_perm=settings.num_perm, weights=(1 - w, w))
    first = 0
    for texts, planted in batches:
        pairs += planted
        if corpus == "planted":  # the true Jaccard of every planted copy
            for a, b, _ in planted:
                sample[(a, b)] = jaccard(texts[a - first], texts[b - first])
        if mode == "exact":
            parts.append(completion_hash(pd.Series(texts)))
        elif mode == "near":
            sig, has_text = signatures(texts, settings)
            parts.append(band_digests(sig, has_text, settings))
        elif (
            mode == "near_sha1"
        ):  # the baseline: datasketch's SHA-1 of each shingle's bytes (until 2026-12-03)
            sig, has_text = sha1_signatures(texts, settings)
            parts.append(band_digests(sig, has_text, settings))
        else:
            sig, _ = signatures(texts, settings)
            for i, s in enumerate(sig):
                lsh.insert(
                    first + i, MinHash(num_perm=settings.num_perm, hashvalues=s, scheme=settings.scheme)
                )
        first += len(texts)
    out: dict = {"mode": mode, "corpus": corpus, "rows": first}
    if mode == "exact":
        h = pd.Series(np.concatenate(parts))
        dup = h.duplicated(keep=False) & h.ne(0)
        out["rows_flagged"] = int(dup.sum())
        found = np.zeros(0)
    elif mode.startswith("near"):
        labels = clusters(np.concatenate(parts))
        out["rows_in_clusters"] = int((labels >= 0).sum())
        out["clusters"] = int(len(np.unique(labels[labels >= 0])))
        found = labels
    else:
        out["index_built"] = True
        found = np.zeros(0)
    out["wall_s"] = round(time.perf_counter() - start, 2)
    out["cpu_s"] = round(time.process_time() - cpu0, 2)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["share_found"] = round(out.get("rows_in_clusters", out.get("rows_flagged", 0)) / max(first, 1), 4)
    if corpus == "planted" and mode.startswith("near"):
        planted_rows = {r for a, b, _ in pairs for r in (a, b)}
        out["planted_pairs"] = len(pairs)
        out["recall"] = {
            level: round(float(np.mean([found[a] == found[b] >= 0 for a, b, lv in pairs if lv == level])), 4)
            for level in EDITS
        }
        out["recall_all"] = round(float(np.mean([found[a] == found[b] >= 0 for a, b, _ in pairs])), 4)
        levels = {lv: [sample[(a, b)] for a, b, x in pairs if x == lv] for lv in EDITS}
        out["jaccard_of_copies_median"] = {lv: round(float(np.median(v)), 3) for lv, v in levels.items() if v}
        hit = {(a, b): bool(found[a] == found[b] >= 0) for a, b, _ in pairs}
        by_bin = {}
        for low, high in BINS:
            inside = [hit[k] for k, j in sample.items() if low <= j < high]
            by_bin[f"{low}-{min(high, 1.0)}"] = {
                "pairs": len(inside),
                "recall": round(float(np.mean(inside)), 4) if inside else None,
            }
        out["recall_by_jaccard"] = by_bin
        above = [hit[k] for k, j in sample.items() if j >= settings.threshold]
        out["recall_at_or_above_threshold"] = round(float(np.mean(above)), 4) if above else None
        out["unplanted_rows_in_clusters"] = int(
            sum(1 for r in np.flatnonzero(found >= 0) if r not in planted_rows)
        )
    if corpus == "planted" and mode == "exact":
        out["planted_pairs_flagged"] = 0  # a near copy is never an exact one: what exact dedup misses
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-lsh", action="store_true", help="leave out datasketch's MinHashLSH index")
    ap.add_argument("--corpus", default="planted,fixture")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.rows)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for corpus in args.corpus.split(","):
        for mode in ("exact", "near", "near_sha1") + (() if args.skip_lsh else ("minhashlsh",)):
            cmd = [
                sys.executable,
                __file__,
                "--rows",
                str(args.rows),
                "--out",
                str(args.out),
                "--child",
                mode,
                corpus,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                results.append({"mode": mode, "corpus": corpus, "error": done.stderr[-1500:]})
            else:
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    path = args.out / f"bench_neardup-{args.rows}.json"
    path.write_text(json.dumps({"rows": args.rows, "results": results}, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
