"""Exact and near (MinHash-LSH) deduplication, within one batch and against earlier nights.

- Exact: xxh3-64 of the normalised text (NFKC, lower case, collapsed whitespace); the earliest
  document of each hash survives, and a hash already in the persisted index drops the document.
- Near: MinHash signatures (lib.minhash; threads over text chunks), LSH bands chosen for the
  threshold, candidate pairs = documents sharing a band bucket, connected components with
  scipy's union-find equivalent (`connected_components`), survivor = smallest index.
- Optional verification drops candidate pairs whose exact Jaccard (same shingles) is below the
  threshold before the union, so chains of near-misses do not merge clusters.
- `DedupIndex` persists, under `workspace.index`, the exact hashes and the signatures of what
  earlier nights kept; band keys are rebuilt from signatures, so a new threshold needs no rehash.

Trade-off: no verification by default: the S-curve at t=0.8 with (9 bands, 13 rows) admits a
pair of Jaccard 0.6 with probability 1.1%, and verification costs ~20 us per candidate pair.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from lib.minhash import (
    HASH_VERSION,
    MinHasher,
    band_keys,
    estimated_jaccard,
    normalize_text,
    optimal_bands,
    s_curve,
    shingle_hashes,
    text_chunks,
)

log = logging.getLogger(__name__)


# -- exact ------------------------------------------------------------------------------------

def exact_hashes(texts: list[str], normalized: bool = False) -> np.ndarray:
    """uint64 xxh3-64 of each normalised text."""
    h = xxhash.xxh3_64_intdigest
    norm = texts if normalized else (normalize_text(t) for t in texts)
    return np.fromiter((h(t.encode("utf-8", "surrogatepass")) for t in norm), dtype=np.uint64, count=len(texts))


def first_occurrence(keys: np.ndarray) -> np.ndarray:
    """For each position, the index of the first position holding the same key."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int64)


def exact_duplicate_clusters(texts: list[str]) -> np.ndarray:
    """Index of each document's kept representative (the earliest with the same normalised text)."""
    return first_occurrence(exact_hashes(list(texts)))


# -- signatures -------------------------------------------------------------------------------

def resolve_workers(workers: int | None) -> int:
    if workers is None:
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return workers


def compute_signatures(
    norm_texts: list[str], num_perm: int = 128, ngram: int = 5, shingle: str = "word", seed: int = 1,
    workers: int | None = None,
) -> np.ndarray:
    """uint32[n, num_perm] for normalised texts; chunks of ~4 MB of text go to `workers` threads
    (the compiled kernel releases the GIL, so threads scale without copying texts to processes)."""
    workers = resolve_workers(workers)
    hasher = MinHasher(num_perm, seed)
    chunks = text_chunks(norm_texts)
    if workers == 1 or len(chunks) < 2:
        return hasher.signatures(norm_texts, ngram, shingle, normalized=True)
    out = np.empty((len(norm_texts), num_perm), dtype=np.uint32)

    def one(chunk: tuple[int, int]) -> None:
        lo, hi = chunk
        out[lo:hi] = hasher.signatures(norm_texts[lo:hi], ngram, shingle, normalized=True)

    with ThreadPoolExecutor(min(workers, len(chunks))) as pool:
        list(pool.map(one, chunks))
    return out


# -- LSH --------------------------------------------------------------------------------------

def candidate_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (u, v), u < v, between documents that share a bucket in any band (a star per bucket
    around its first member, enough for connected components)."""
    us, vs = [], []
    n = keys.shape[0]
    for band in range(keys.shape[1]):
        col = keys[:, band]
        order = np.argsort(col, kind="stable")
        sorted_keys = col[order]
        new_run = np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]])
        run_id = np.cumsum(new_run) - 1
        run_head = order[np.flatnonzero(new_run)]
        head = run_head[run_id]
        dup = ~new_run
        if dup.any():
            us.append(head[dup])
            vs.append(order[dup])
    if not us:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, v = np.concatenate(us), np.concatenate(vs)
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    pairs = np.unique(lo.astype(np.int64) * n + hi)
    return pairs // n, pairs % n


def components_min_index(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Union of the edges; each node maps to the smallest index of its component."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if len(u) == 0:
        return np.arange(n, dtype=np.int64)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(u), dtype=np.int8), (u, v)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    rep = np.full(labels.max() + 1, n, dtype=np.int64)
    np.minimum.at(rep, labels, np.arange(n, dtype=np.int64))
    return rep[labels]


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard of two shingle-hash sets (unique arrays)."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def verify_pairs(norm_texts: list[str], u: np.ndarray, v: np.ndarray, threshold: float, ngram: int, shingle: str) -> np.ndarray:
    """Mask of the pairs whose exact Jaccard on the same shingles reaches `threshold`."""
    involved = np.unique(np.concatenate([u, v]))
    hashes, offsets = shingle_hashes([norm_texts[i] for i in involved], ngram, shingle)
    sets = {int(d): np.unique(hashes[offsets[k] : offsets[k + 1]]) for k, d in enumerate(involved)}
    return np.array([exact_jaccard(sets[int(a)], sets[int(b)]) >= threshold for a, b in zip(u, v)], dtype=bool)


@dataclass
class NearDedupResult:
    representative: np.ndarray  # index of the kept representative per document
    signatures: np.ndarray
    bands: int
    rows: int
    candidate_pairs: int
    verified_pairs: int


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) for the threshold, logged with the S-curve values around it."""
    bands, rows = optimal_bands(threshold, num_perm)
    curve = {f"{s:.1f}": round(float(s_curve(s, bands, rows)), 4) for s in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)}
    log.info("LSH threshold %.2f, %d perms -> %d bands x %d rows; P(candidate | Jaccard) = %s",
             threshold, num_perm, bands, rows, json.dumps(curve))
    return bands, rows


def near_dedup(
    norm_texts: list[str] | None, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5, shingle: str = "word",
    verify: bool = False, workers: int | None = None, signatures: np.ndarray | None = None, seed: int = 1,
) -> NearDedupResult:
    """Near-duplicate clusters of normalised texts (signatures computed unless given; the texts
    may be None when signatures are given and `verify` is off)."""
    bands, rows = lsh_params(threshold, num_perm)
    if signatures is None and norm_texts is None:
        raise ValueError("near_dedup needs the normalised texts or their signatures")
    if verify and norm_texts is None:
        raise ValueError("near_dedup(verify=True) needs the normalised texts")
    sig = signatures if signatures is not None else compute_signatures(norm_texts, num_perm, ngram, shingle, seed, workers)
    keys = band_keys(sig, bands, rows)
    u, v = candidate_pairs(keys)
    n_candidates = len(u)
    if verify and n_candidates:
        ok = verify_pairs(norm_texts, u, v, threshold, ngram, shingle)
        u, v = u[ok], v[ok]
    rep = components_min_index(sig.shape[0], u, v)
    return NearDedupResult(rep, sig, bands, rows, n_candidates, len(u))


def near_duplicate_clusters(
    texts: list[str], threshold: float = 0.8, num_perm: int = 128, ngram: int = 5, workers: int | None = None,
    shingle: str = "word", verify: bool = False,
) -> np.ndarray:
    """Index of each document's kept representative among its near-duplicates (MinHash-LSH)."""
    norm = [normalize_text(t) for t in texts]
    return near_dedup(norm, threshold, num_perm, ngram, shingle, verify, workers).representative


def signature_params(num_perm: int, ngram: int, shingle: str, seed: int) -> dict:
    """What makes two signatures comparable; stored beside every persisted night."""
    return {"num_perm": num_perm, "ngram": ngram, "shingle": shingle, "seed": seed, "hash": HASH_VERSION}


# -- persisted index of earlier nights --------------------------------------------------------

class DedupIndex:
    """What earlier nights kept: `exact_hashes.npy` (sorted uint64) and `minhash/<run>.npz`
    (signatures + ids + parameters), under `workspace.index`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def exact_path(self) -> Path:
        return self.root / "exact_hashes.npy"

    @property
    def minhash_dir(self) -> Path:
        return self.root / "minhash"

    def exact(self) -> np.ndarray:
        return np.load(self.exact_path) if self.exact_path.exists() else np.zeros(0, np.uint64)

    def signatures(self, num_perm: int, ngram: int, shingle: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, signatures) of every committed night made with the same parameters."""
        ids, sigs = [], []
        for path in sorted(self.minhash_dir.glob("*.npz")):
            with np.load(path, allow_pickle=False) as z:
                params = json.loads(str(z["params"]))
                if params != signature_params(num_perm, ngram, shingle, seed):
                    log.warning("dedup index %s was built with %s; skipped for these parameters", path, params)
                    continue
                ids.append(z["ids"])
                sigs.append(z["signatures"])
        if not sigs:
            return np.zeros(0, dtype=str), np.zeros((0, num_perm), np.uint32)
        return np.concatenate(ids), np.concatenate(sigs)

    def add(self, name: str, exact: np.ndarray, ids: np.ndarray, sigs: np.ndarray, params: dict) -> bool:
        """Commit one night's kept documents; False if `name` was committed already."""
        self.minhash_dir.mkdir(parents=True, exist_ok=True)
        target = self.minhash_dir / f"{name}.npz"
        if target.exists():
            return False
        merged = np.union1d(self.exact(), exact.astype(np.uint64))
        tmp = self.exact_path.with_suffix(".tmp.npy")
        np.save(tmp, merged)
        tmp_sig = self.minhash_dir / f".{name}.tmp.npz"
        np.savez(tmp_sig, ids=np.asarray(ids, dtype=str), signatures=sigs, params=np.array(json.dumps(params, sort_keys=True)))
        os.replace(tmp, self.exact_path)
        os.replace(tmp_sig, target)  # last: its presence marks the night as committed
        return True


def match_history(
    sig: np.ndarray, hist_ids: np.ndarray, hist_sig: np.ndarray, bands: int, rows: int,
    min_jaccard: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each signature, the index into the history of a document sharing a band bucket
    (-1 if none) and the estimated Jaccard with it. With `min_jaccard`, matches whose estimate is
    lower are discarded (the history keeps signatures, not texts)."""
    n = sig.shape[0]
    match = np.full(n, -1, dtype=np.int64)
    est = np.zeros(n, dtype=np.float64)
    if n == 0 or hist_sig.shape[0] == 0:
        return match, est
    keys, hkeys = band_keys(sig, bands, rows), band_keys(hist_sig, bands, rows)
    for band in range(bands):
        order = np.argsort(hkeys[:, band], kind="stable")
        sorted_h = hkeys[order, band]
        pos = np.searchsorted(sorted_h, keys[:, band])
        pos_c = np.minimum(pos, len(sorted_h) - 1)
        hit = (sorted_h[pos_c] == keys[:, band]) & (match < 0)
        if not hit.any():
            continue
        cand = order[pos_c[hit]]
        e = estimated_jaccard(sig[hit], hist_sig[cand])
        ok = e >= min_jaccard if min_jaccard is not None else np.ones(len(e), bool)
        idx = np.flatnonzero(hit)[ok]
        match[idx], est[idx] = cand[ok], e[ok]
    return match, est
