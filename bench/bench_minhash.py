"""MinHash signatures only: lib.curation.minhash (one compiled numba pass) vs datasketch, same documents and
parameters. Normalisation, LSH and verification are not in this figure; bench_dedup_e2e.py times
the whole near dedup against datasketch doing all of it.

Baseline: datasketch `MinHash(num_perm=128).update_batch(shingles)` per document, shingles = the
same word 5-grams of the normalised text, encoded to bytes. Both run in this process, in alternating
rounds; each side's best round counts (the 2-core machine is shared: a single timing of a ~40 ms
call swings 2-3x). The first call is reported apart: it loads the numba kernels from their cache,
or compiles them in a fresh checkout. Prints MB/s and the ratio.

    python bench/bench_minhash.py [--docs 600] [--num-perm 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sysconfig
import time
from pathlib import Path

from datasketch import MinHash

from lib.curation.minhash import MinHasher
from lib.curation.text import normalize_text


def stdlib_docs(limit: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        out.append(p.read_text(encoding="utf-8", errors="replace"))
        if len(out) >= limit:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-docs", type=int, default=150, help="datasketch is slow: time it on a prefix")
    args = ap.parse_args()
    docs = [normalize_text(t) for t in stdlib_docs(args.docs)]
    mb = sum(len(d.encode()) for d in docs) / 1e6

    hasher = MinHasher(args.num_perm)
    t = time.perf_counter()
    hasher.signatures(docs, normalized=True)
    cold = time.perf_counter() - t  # includes loading (or compiling) the numba kernels

    base_docs = docs[: args.baseline_docs]
    base_mb = sum(len(d.encode()) for d in base_docs) / 1e6
    ours_s, base_s = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        hasher.signatures(docs, normalized=True)
        ours_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        for d in base_docs:
            words = d.split(" ")
            shingles = [" ".join(words[i : i + 5]).encode() for i in range(max(1, len(words) - 4))]
            m = MinHash(num_perm=args.num_perm)
            m.update_batch(shingles)
        base_s.append(time.perf_counter() - t)
    ours, base = mb / min(ours_s), base_mb / min(base_s)
    ours_med, base_med = mb / statistics.median(ours_s), base_mb / statistics.median(base_s)
    print(f"documents: {len(docs)} ({mb:.1f} MB) for lib.curation.minhash, {len(base_docs)} ({base_mb:.1f} MB) for datasketch; "
          f"best of {args.rounds} alternating rounds")
    print(f"lib.curation.minhash first call (numba kernels loaded from their cache, or compiled): {cold:.2f} s ({mb / cold:.1f} MB/s)")
    print(f"median: lib.curation.minhash {ours_med:.1f} MB/s, datasketch {base_med:.2f} MB/s, ratio {ours_med / base_med:.1f}x")
    print(f"signatures only: lib.curation.minhash: {ours:.1f} MB/s   datasketch update_batch: {base:.2f} MB/s   ratio: {ours / base:.1f}x  "
          f"(load %.1f/%.1f/%.1f)" % os.getloadavg())


if __name__ == "__main__":
    main()
