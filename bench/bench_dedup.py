"""Exact + near dedup at scale: time and peak memory from 100k to 1M documents of ~500 characters.

Documents are phrases of real text (the standard library's sources), ~3% of them near-copies
(a few words changed) and ~2% exact copies, so LSH has real work. Baseline for the growth: the
100k run; a linear pipeline keeps seconds-per-document constant. Verification (exact Jaccard of
every LSH candidate, the default) is on unless --no-verify.

    python bench/bench_dedup.py [--sizes 100000,300000,1000000] [--workers 2] [--no-verify]
"""

from __future__ import annotations

import argparse
import os
import sysconfig
import time
from pathlib import Path

import resource

import numpy as np

from lib.curation.dedup import deduplicate


def make_docs(n: int, seed: int = 0) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    words: list[str] = []
    for p in sorted(root.rglob("*.py")):
        words += p.read_text(encoding="utf-8", errors="replace").split()
        if len(words) > 3_000_000:
            break
    rng = np.random.default_rng(seed)
    # ten 8-word phrases from random places: real words, ~500 characters, and unrelated documents
    # rarely share a 5-gram (a single 80-word window per document would overlap its neighbours)
    starts = rng.integers(0, len(words) - 10, size=(n, 10))
    docs = [" ".join(" ".join(words[s : s + 8]) for s in row) for row in starts]
    for i in rng.choice(n, size=n // 33, replace=False):  # near-copies
        j = int(rng.integers(0, n))
        w = docs[j].split(" ")
        w[int(rng.integers(0, len(w)))] = "edited"
        docs[i] = " ".join(w)
    for i in rng.choice(n, size=n // 50, replace=False):  # exact copies
        docs[i] = docs[int(rng.integers(0, n))]
    return docs


def run(n: int, workers: int, verify: bool) -> tuple[float, float, int]:
    docs = make_docs(n)
    t = time.perf_counter()
    res = deduplicate(docs, 0.8, 128, 5, "word", verify, workers=workers)
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # includes building the documents
    dropped = int((res.representative != np.arange(n)).sum())
    return seconds, peak / 1e9, dropped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,300000,1000000")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-verify", action="store_true", help="LSH candidates without the exact-Jaccard check")
    args = ap.parse_args()
    deduplicate(make_docs(100), workers=1)  # load the numba kernels from their cache outside the timing
    first = None
    for n in (int(s) for s in args.sizes.split(",")):
        seconds, peak_gb, dropped = run(n, args.workers, not args.no_verify)
        per = seconds / n
        first = first or per
        print(f"{n:>9,} docs: {seconds:7.1f} s  ({per * 1e6:.1f} us/doc, {per / first:.2f}x the first size's cost per doc)  "
              f"peak RSS {peak_gb:.2f} GB  duplicates dropped {dropped:,}  (load %.1f/%.1f/%.1f)" % os.getloadavg())


if __name__ == "__main__":
    main()
