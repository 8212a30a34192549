"""Near dedup end to end on real documents: lib.curation.dedup against datasketch doing the same work.

The work, on both sides, from raw texts to each document's kept representative:
normalise (NFKC, lower case, whitespace collapsed) -> word 5-gram shingles -> 128-permutation
MinHash -> LSH with the same (bands, rows) (banded for the candidate threshold 0.6: 18 x 7) ->
every candidate pair checked with the exact Jaccard of its shingle sets, >= 0.8 joined ->
connected components, the smallest index survives.

- ours: `lib.curation.dedup.near_duplicate_clusters` (compiled normalisation, signatures in threads,
  numpy LSH, compiled verification), in 1 thread and in `--workers` threads.
- datasketch 2.0: `normalize_text` per document, the same shingles as strings, `MinHash.update_batch`,
  `MinHashLSH(params=(bands, rows))` insert + query, Python sets for the exact Jaccard of each
  candidate pair, the same connected components (scipy).
- Truth: every pair with exact Jaccard >= 0.8 (all-pairs prefix-filter join of
  bench_dedup_quality.ShingleSets), union-find -> the documents exact Jaccard would drop.
  Precision / recall of the dropped documents, and the share of truth pairs put in one cluster.
- Documents: `--docs` real files of 300-20,000 characters (a seeded sample of the standard
  library's and the installed packages' .py/.md/.rst/.txt, bench/real_text.py), and the
  synthetic ~500-character documents of bench_dedup.py (`--synthetic` of them).
- Timing: alternating rounds (both sides see the same load), best and median of `--rounds`;
  the load average is printed with the figures. The ratio is datasketch's time over ours.
- First call: fresh processes (`--fresh`) import lib.curation.dedup and time their first call and then
  the steady state on the same documents: once with the numba cache as installed (`make
  install` ran `python -m lib.curation.precompile`), once with an empty NUMBA_CACHE_DIR (what every process
  of a checkout without the warm-up, and every fresh container, paid before).

    .venv/bin/python bench/bench_dedup_e2e.py [--docs 4000] [--synthetic 20000] [--rounds 3] [--workers 2] [--stages]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from real_text import sample  # noqa: E402

THRESHOLD, NUM_PERM, NGRAM = 0.8, 128, 5


def load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


def ours(texts: list[str], workers: int) -> np.ndarray:
    from lib.curation.dedup import near_duplicate_clusters

    return near_duplicate_clusters(texts, THRESHOLD, NUM_PERM, NGRAM, workers=workers, verify=True)


def datasketch_clusters(texts: list[str], bands: int, rows: int) -> np.ndarray:
    """The same pipeline with datasketch's MinHash and MinHashLSH and Python sets."""
    from datasketch import MinHash, MinHashLSH

    from lib.curation.dedup import components_min_index
    from lib.curation.text import normalize_text

    shingles = []
    for text in texts:
        words = normalize_text(text).split(" ")
        shingles.append([" ".join(words[i : i + NGRAM]).encode() for i in range(max(1, len(words) - NGRAM + 1))])
    lsh = MinHashLSH(num_perm=NUM_PERM, params=(bands, rows))
    hashes = []
    for i, sh in enumerate(shingles):
        m = MinHash(num_perm=NUM_PERM)
        m.update_batch(sh)
        lsh.insert(i, m)
        hashes.append(m)
    pairs = {(i, j) for i, m in enumerate(hashes) for j in lsh.query(m) if j > i}
    sets: dict[int, set] = {}
    u, v = [], []
    for i, j in pairs:
        a = sets.setdefault(i, set(shingles[i]))
        b = sets.setdefault(j, set(shingles[j]))
        if len(a & b) >= THRESHOLD * len(a | b):
            u.append(i)
            v.append(j)
    return components_min_index(len(texts), np.array(u, np.int64), np.array(v, np.int64))


def truth(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from bench_dedup_quality import ShingleSets

    from lib.curation.dedup import components_min_index
    from lib.curation.text import normalize_text

    sets = ShingleSets([normalize_text(t) for t in texts], NGRAM)
    u, v, _, _ = sets.pairs_at_least(THRESHOLD)
    return u, v, components_min_index(len(texts), u, v)


def quality(rep: np.ndarray, tu: np.ndarray, tv: np.ndarray, truth_rep: np.ndarray) -> tuple[float, float, float]:
    idx = np.arange(len(rep))
    dropped, should = rep != idx, truth_rep != idx
    both = int((dropped & should).sum())
    precision = both / dropped.sum() if dropped.any() else 1.0
    recall = both / should.sum() if should.any() else 1.0
    pair_recall = float((rep[tu] == rep[tv]).mean()) if len(tu) else 1.0
    return precision, recall, pair_recall


def timed_rounds(fns: dict, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def documents(kind: str, n: int) -> list[str]:
    if kind == "real":
        return sample(n)[0]
    from bench_dedup import make_docs

    return make_docs(n)


def fresh(kind: str, n: int, workers: int) -> None:
    """Child process: import, first call, steady state; one JSON line."""
    t0 = time.perf_counter()
    import lib.curation.dedup  # noqa: F401

    import_s = time.perf_counter() - t0
    texts = documents(kind, n)
    t1 = time.perf_counter()
    ours(texts, workers)
    t2 = time.perf_counter()
    steady = []
    for _ in range(3):
        t = time.perf_counter()
        ours(texts, workers)
        steady.append(time.perf_counter() - t)
    print(json.dumps({"import_s": import_s, "first_s": t2 - t1, "steady_s": min(steady)}))


def run_fresh(kind: str, n: int, workers: int, cache_dir: str | None) -> dict:
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    out = subprocess.run([sys.executable, __file__, "--fresh", kind, "--docs", str(n), "--synthetic", str(n),
                          "--workers", str(workers)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(kind: str, texts: list[str], rounds: int, workers: int) -> None:
    from lib.curation.dedup import candidate_threshold, lsh_params

    mb = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6
    sizes = np.array([len(t) for t in texts])
    bands, rows = lsh_params(candidate_threshold(THRESHOLD), NUM_PERM)
    tu, tv, truth_rep = truth(texts)
    print(f"\n{kind}: {len(texts):,} documents, {mb:.1f} MB, {sizes.min():,}-{sizes.max():,} characters (median "
          f"{int(np.median(sizes)):,}); truth: {len(tu):,} pairs with exact Jaccard >= {THRESHOLD}, "
          f"{int((truth_rep != np.arange(len(texts))).sum()):,} documents to drop")
    ours(texts[:50], 1)  # the numba kernels: loaded from their cache (the fresh-process lines show that cost)
    results = {"ours, 1 thread": lambda: ours(texts, 1), f"ours, {workers} threads": lambda: ours(texts, workers),
               "datasketch": lambda: datasketch_clusters(texts, bands, rows)}
    reps = {name: fn() for name, fn in results.items()}  # also a first round outside the timing
    before = load()
    times = timed_rounds(results, rounds)
    after = load()
    base_best, base_med = min(times["datasketch"]), statistics.median(times["datasketch"])
    print(f"  {'':<22}{'best s':>9}{'median s':>10}{'MB/s':>8}{'x datasketch':>14}{'(median)':>10}"
          f"{'drop prec.':>12}{'drop recall':>12}{'pair recall':>12}")
    for name, ts in times.items():
        p, r, pr = quality(reps[name], tu, tv, truth_rep)
        best, med = min(ts), statistics.median(ts)
        print(f"  {name:<22}{best:>9.3f}{med:>10.3f}{mb / best:>8.1f}{base_best / best:>13.1f}x{base_med / med:>9.1f}x"
              f"{p:>12.4f}{r:>12.4f}{pr:>12.4f}")
    print(f"  {rounds} alternating rounds; {before} before, {after} after (2 cores); LSH {bands} bands x {rows} rows both sides")


def stages(kind: str, texts: list[str], rounds: int) -> None:
    """Where one thread's time goes: each stage of `near_duplicate_clusters` timed on its own,
    best of `rounds` (the stages' sum is close to the end-to-end time above)."""
    from lib.curation import dedup, minhash, text

    prep = text.prepare_texts(texts)
    sig = dedup.compute_signatures(prep, NUM_PERM, NGRAM, "word", 1, 1)
    bands, rows = dedup.lsh_params(dedup.candidate_threshold(THRESHOLD), NUM_PERM)
    keys = dedup.band_keys(sig, bands, rows)
    u, v = dedup.candidate_pairs(keys, all_pairs=True)
    offsets = np.zeros(len(prep) + 1, np.int64)
    steps = {
        "prepare the texts (UTF-8, Unicode check, NFKC + lower where needed)": lambda: text.prepare_texts(texts),
        "signatures (shingling + 128-permutation minima)": lambda: dedup.compute_signatures(prep, NUM_PERM, NGRAM, "word", 1, 1),
        "  of which shingling alone (shingle_hashes)": lambda: minhash._shingle_kernel(
            prep.buf, prep.starts, prep.ends, NGRAM, False, prep.nbytes // 2 + len(prep), offsets),
        "LSH band keys": lambda: dedup.band_keys(sig, bands, rows),
        "candidate pairs": lambda: dedup.candidate_pairs(keys, all_pairs=True),
        f"verification ({len(u):,} pairs, exact Jaccard)": lambda: dedup.verify_pairs(prep, u, v, THRESHOLD, NGRAM, "word"),
    }
    times = timed_rounds(steps, rounds)
    print(f"\n{kind}: one thread, stage by stage (best of {rounds}; {load()})")
    for name, ts in times.items():
        print(f"  {name:<72} {min(ts):.4f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=4000, help="real documents (300-20,000 characters)")
    ap.add_argument("--synthetic", type=int, default=20000, help="synthetic ~500-character documents (0: skip)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fresh", choices=["real", "synthetic"], help=argparse.SUPPRESS)
    ap.add_argument("--no-cold", action="store_true", help="skip the fresh process with an empty numba cache (~30 s)")
    ap.add_argument("--stages", action="store_true", help="also time each stage of one thread's run")
    args = ap.parse_args()
    if args.fresh:
        fresh(args.fresh, args.docs if args.fresh == "real" else args.synthetic, args.workers)
        return

    print(f"near dedup end to end, threshold {THRESHOLD}, {NUM_PERM} permutations, word {NGRAM}-grams; {load()}")
    kinds = [("real", args.docs)] + ([("synthetic", args.synthetic)] if args.synthetic else [])
    for kind, n in kinds:
        texts = documents(kind, n)
        compare(kind, texts, args.rounds, args.workers)
        if args.stages:
            stages(kind, texts, max(args.rounds, 5))

    print("\nfirst call in a fresh process (import lib.curation.dedup, then near_duplicate_clusters on the same documents):")
    runs = ["numba cache as installed"] + ([] if args.no_cold else ["empty NUMBA_CACHE_DIR (no warm-up)"])
    for kind, n in kinds:
        for label in runs:
            cache = tempfile.mkdtemp(prefix="numba-cold-") if label.startswith("empty") else None
            r = run_fresh(kind, n, args.workers, cache)
            extra = r["first_s"] - r["steady_s"]
            verdict = "met" if extra <= 2.0 else "NOT MET"
            print(f"  {kind:<9} {label:<36} import {r['import_s']:.2f} s, first call {r['first_s']:.2f} s, steady "
                  f"{r['steady_s']:.3f} s: first call {extra:+.2f} s over steady (target <= 2 s: {verdict}); {load()}")


if __name__ == "__main__":
    main()
