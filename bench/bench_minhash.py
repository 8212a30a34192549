"""MinHash signatures: lib.minhash (vectorised numpy) vs datasketch, same documents and parameters.

Baseline: datasketch `MinHash(num_perm=128).update_batch(shingles)` per document, shingles = the
same word 5-grams of the normalised text, encoded to bytes. One process each. Prints MB/s and the ratio.

    python bench/bench_minhash.py [--docs 600] [--num-perm 128]
"""

from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path

from datasketch import MinHash

from lib.minhash import MinHasher, normalize_text


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
    ap.add_argument("--baseline-docs", type=int, default=150, help="datasketch is slow: time it on a prefix")
    args = ap.parse_args()
    docs = [normalize_text(t) for t in stdlib_docs(args.docs)]
    mb = sum(len(d.encode()) for d in docs) / 1e6

    hasher = MinHasher(args.num_perm)
    t = time.perf_counter()
    hasher.signatures(docs, normalized=True)
    cold = mb / (time.perf_counter() - t)  # includes loading (or compiling) the numba kernels
    t = time.perf_counter()
    hasher.signatures(docs, normalized=True)
    ours = mb / (time.perf_counter() - t)

    base_docs = docs[: args.baseline_docs]
    base_mb = sum(len(d.encode()) for d in base_docs) / 1e6
    t = time.perf_counter()
    for d in base_docs:
        words = d.split(" ")
        shingles = [" ".join(words[i : i + 5]).encode() for i in range(max(1, len(words) - 4))]
        m = MinHash(num_perm=args.num_perm)
        m.update_batch(shingles)
    base = base_mb / (time.perf_counter() - t)
    print(f"documents: {len(docs)} ({mb:.1f} MB) for lib.minhash, {len(base_docs)} ({base_mb:.1f} MB) for datasketch")
    print(f"lib.minhash first call (numba kernels loaded from its cache, or compiled): {cold:.1f} MB/s")
    print(f"lib.minhash: {ours:.1f} MB/s   datasketch update_batch: {base:.2f} MB/s   ratio: {ours / base:.1f}x (target >= 25x)")


if __name__ == "__main__":
    main()
