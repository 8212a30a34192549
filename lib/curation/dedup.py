"""Exact and near (MinHash-LSH) deduplication, within one batch and against earlier nights.

- Texts are normalised once into one UTF-8 buffer (lib.curation.minhash's `normalize_texts`, compiled;
  `prepare_texts` when only shingles are needed: the kernels fold case and whitespace as they
  read), and every later pass reads that buffer: no Python string per document in between.
- Exact: xxh3-64 of the normalised text (NFKC, lower case, collapsed whitespace); the earliest
  document of each hash survives, and a hash already in the persisted index drops the document.
- Near: MinHash signatures (lib.curation.minhash; threads over text chunks), LSH bands chosen for the
  threshold, candidate pairs = documents sharing a band bucket, connected components with
  a compiled union-find whose roots are the smallest indices, survivor = smallest index.
- Verification (`curation.verify_jaccard`, on by default): the LSH is banded for a lower
  candidate threshold (`candidate_threshold`: 0.6 for 0.8), every pair sharing a bucket is checked
  with the exact Jaccard of the same shingle sets (a compiled merge of sorted hashes), and only
  pairs at or above the threshold are joined. Without it, a bucket star is an edge, as in
  datasketch's MinHashLSH.
- `DedupIndex` persists, under `workspace.index`, the exact hashes and the signatures of what
  earlier nights kept; band keys are rebuilt from signatures, so a new threshold needs no rehash.
  Earlier nights keep no texts, so they are matched on the estimated Jaccard (not verified).

Trade-off: verification hashes the shingles of every candidate again (from the buffer, only the
documents in a pair) and costs ~1 us per pair after that; it buys what banding alone cannot: at t=0.8 the (9 bands, 13 rows) curve
finds a pair at exactly 0.8 only ~50% of the time and admits pairs at 0.75 ~20% of the time
(bench/bench_dedup_quality.py: precision 0.53, recall 0.57 on real package sources, the same as
datasketch), where candidates at 0.6 plus the exact check give precision 1.0 and recall ~0.997.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from numba import types

from lib.curation.kernels import INTS, arr, compiled
from lib.curation.minhash import (
    HASH_VERSION, MinHasher, band_keys, estimated_jaccard, optimal_bands, s_curve, shingle_hashes,
)
from lib.curation.text import TextBuffer, encode_texts, normalize_texts, prepare_texts
from lib.files import atomic_path

log = logging.getLogger(__name__)


# -- exact ------------------------------------------------------------------------------------

def exact_hashes(texts, normalized: bool = False) -> np.ndarray:
    """uint64 xxh3-64 of each normalised text's UTF-8 bytes (raw texts are normalised here unless
    `normalized`; a normalised `TextBuffer` is hashed straight from its buffer)."""
    norm = encode_texts(texts) if normalized and not isinstance(texts, TextBuffer) else normalize_texts(texts)
    h, mv = xxhash.xxh3_64_intdigest, memoryview(norm.buf)
    return np.fromiter((h(mv[s:e]) for s, e in zip(norm.starts.tolist(), norm.ends.tolist())), dtype=np.uint64, count=len(norm))


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
    norm_texts, num_perm: int = 128, ngram: int = 5, shingle: str = "word", seed: int = 1,
    workers: int | None = None,
) -> np.ndarray:
    """uint32[n, num_perm] for normalised texts (a `TextBuffer` or a list of str); chunks of
    ~4 MB of text go to `workers` threads (the compiled kernel releases the GIL, so threads scale
    without copying texts to processes)."""
    return MinHasher(num_perm, seed).signatures(norm_texts, ngram, shingle, normalized=True, workers=resolve_workers(workers))


# -- LSH --------------------------------------------------------------------------------------

def candidate_pairs(keys: np.ndarray, all_pairs: bool = False, max_bucket: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Edges (u, v), u < v, between documents that share a bucket in any band.

    Without `all_pairs`: a star per bucket around its first member (enough for connected
    components when every edge is accepted). With it (edges that will be verified one by one):
    every pair of a bucket of up to `max_bucket` members, and for larger buckets the star plus a
    path through the members, so the number of checks stays linear in the bucket size."""
    us, vs = [], []
    n = keys.shape[0]
    for band in range(keys.shape[1]):
        col = keys[:, band]
        order = np.argsort(col, kind="stable")
        sorted_keys = col[order]
        new_run = np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]])
        run_start = np.flatnonzero(new_run)
        run_len = np.diff(np.append(run_start, n))
        run_id = np.cumsum(new_run) - 1
        head = order[run_start][run_id]
        dup = ~new_run
        if not dup.any():
            continue
        if not all_pairs:
            us.append(head[dup])
            vs.append(order[dup])
            continue
        for length in np.unique(run_len[run_len > 1]):
            starts = run_start[run_len == length]
            if length <= max_bucket:
                members = order[starts[:, None] + np.arange(length)[None, :]]
                a, b = np.triu_indices(int(length), 1)
                us.append(members[:, a].ravel())
                vs.append(members[:, b].ravel())
            else:
                idx = starts[:, None] + np.arange(length)[None, :]
                us += [order[idx[:, :1]].repeat(length - 1, axis=1).ravel(), order[idx[:, 1:-1]].ravel()]
                vs += [order[idx[:, 1:]].ravel(), order[idx[:, 2:]].ravel()]
    if not us:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, v = np.concatenate(us).astype(np.int64), np.concatenate(vs).astype(np.int64)
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    pairs = np.unique(lo * n + hi)
    return pairs // n, pairs % n


@compiled(types.void(INTS, INTS, arr(types.int64)))
def _union_min(u, v, parent):
    """Union-find over the edges (u[i], v[i]); every root is the smallest index of its set, so
    after the final pass parent[x] is the smallest index of x's component."""
    for i in range(u.shape[0]):
        a, b = u[i], v[i]
        while parent[a] != a:  # find with path halving
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    for x in range(parent.shape[0]):  # parents are smaller than their children: one pass resolves all
        parent[x] = parent[parent[x]]


def components_min_index(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Union of the edges; each node maps to the smallest index of its component."""
    parent = np.arange(n, dtype=np.int64)
    if n and len(u):
        _union_min(np.ascontiguousarray(u, np.int64), np.ascontiguousarray(v, np.int64), parent)
    return parent


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard of two shingle-hash sets (unique arrays)."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


@compiled(types.void(arr(types.uint64), INTS))
def _sort_segments(values, offsets):
    """Sort each segment values[offsets[k]:offsets[k+1]] in place."""
    for k in range(offsets.shape[0] - 1):
        a, b = offsets[k], offsets[k + 1]
        if b - a > 1:
            values[a:b] = np.sort(values[a:b])


@compiled(types.void(arr(types.uint64, readonly=True), INTS, INTS, INTS, arr(types.float64)))
def _pair_jaccard(values, offsets, u, v, out):
    """Exact Jaccard of the sets of sorted segments u[i] and v[i] (duplicates counted once)."""
    for i in range(u.shape[0]):
        a, ae = offsets[u[i]], offsets[u[i] + 1]
        b, be = offsets[v[i]], offsets[v[i] + 1]
        inter, na, nb = 0, 0, 0
        while a < ae or b < be:
            if b >= be or (a < ae and values[a] < values[b]):
                x = values[a]
                na += 1
                while a < ae and values[a] == x:
                    a += 1
            elif a >= ae or values[b] < values[a]:
                x = values[b]
                nb += 1
                while b < be and values[b] == x:
                    b += 1
            else:
                x = values[a]
                inter += 1
                na += 1
                nb += 1
                while a < ae and values[a] == x:
                    a += 1
                while b < be and values[b] == x:
                    b += 1
        union = na + nb - inter
        out[i] = 1.0 if union == 0 else inter / union


def pair_jaccards(norm_texts, u: np.ndarray, v: np.ndarray, ngram: int, shingle: str) -> np.ndarray:
    """Exact Jaccard of each pair (u[i], v[i]) on the same shingles as the signatures.
    `norm_texts`: a `TextBuffer`, anything with `take(indices) -> TextBuffer` (only the
    documents in a pair are read), or a list of normalised str."""
    if len(u) == 0:
        return np.zeros(0, dtype=np.float64)
    involved = np.unique(np.concatenate([u, v]))
    if hasattr(norm_texts, "take"):
        sub = norm_texts.take(involved)
    else:
        sub = encode_texts([norm_texts[int(i)] for i in involved])
    hashes, offsets = shingle_hashes(sub, ngram, shingle)
    _sort_segments(hashes, offsets)
    out = np.empty(len(u), dtype=np.float64)
    _pair_jaccard(hashes, offsets, np.searchsorted(involved, u), np.searchsorted(involved, v), out)
    return out


def verify_pairs(norm_texts, u: np.ndarray, v: np.ndarray, threshold: float, ngram: int, shingle: str) -> np.ndarray:
    """Mask of the pairs whose exact Jaccard on the same shingles reaches `threshold`."""
    return pair_jaccards(norm_texts, u, v, ngram, shingle) >= threshold


def candidate_threshold(threshold: float) -> float:
    """LSH threshold of the candidates that exact verification then filters at `threshold`: 0.2
    lower, so pairs at the threshold are candidates with probability ~0.99, not ~0.5."""
    return round(max(0.3, threshold - 0.2), 6)


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
    norm_texts, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5, shingle: str = "word",
    verify: bool = False, workers: int | None = None, signatures: np.ndarray | None = None, seed: int = 1,
) -> NearDedupResult:
    """Near-duplicate clusters of normalised texts (signatures computed unless given).

    verify=False: LSH banded for `threshold`, every bucket star is an edge (datasketch's
    behaviour: pairs at the threshold are found about half the time, pairs just below it often).
    verify=True: LSH banded for `candidate_threshold(threshold)`, every pair of a bucket checked
    with the exact Jaccard, edges only at or above `threshold`. `norm_texts` may be None when
    signatures are given and verify is off; with verify it may be any indexable (lazy) sequence."""
    if signatures is None and norm_texts is None:
        raise ValueError("near_dedup needs the normalised texts or their signatures")
    if verify and norm_texts is None:
        raise ValueError("near_dedup(verify=True) needs the normalised texts")
    bands, rows = lsh_params(candidate_threshold(threshold) if verify else threshold, num_perm)
    sig = signatures if signatures is not None else compute_signatures(norm_texts, num_perm, ngram, shingle, seed, workers)
    keys = band_keys(sig, bands, rows)
    u, v = candidate_pairs(keys, all_pairs=verify)
    n_candidates = len(u)
    if verify and n_candidates:
        ok = verify_pairs(norm_texts, u, v, threshold, ngram, shingle)
        u, v = u[ok], v[ok]
    rep = components_min_index(sig.shape[0], u, v)
    return NearDedupResult(rep, sig, bands, rows, n_candidates, len(u))


def near_duplicate_clusters(
    texts, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5, workers: int | None = None,
    shingle: str = "word", verify: bool = True,
) -> np.ndarray:
    """Index of each document's kept representative among its near-duplicates, end to end from raw
    texts: Unicode normalisation where a text needs it (`prepare_texts`), then compiled passes
    that fold case and whitespace as they shingle: signatures, LSH candidates, verification with
    the exact Jaccard unless verify=False."""
    return near_dedup(prepare_texts(texts), threshold, num_perm, ngram, shingle, verify, workers).representative


@dataclass
class DedupResult:
    representative: np.ndarray  # index of each document's kept copy (itself if kept)
    exact: np.ndarray  # bool: dropped as an exact copy (of an earlier document)
    near: NearDedupResult  # the near dedup of the exact survivors (`alive`)
    alive: np.ndarray  # indices of the exact survivors, in order


def deduplicate(
    texts, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5, shingle: str = "word",
    verify: bool = True, workers: int | None = None, seed: int = 1,
) -> DedupResult:
    """Exact then near dedup of one batch of raw texts (what `consolidate dedup` runs): normalised
    once (compiled), exact copies by xxh3 of the normalised bytes, near copies among the rest."""
    norm = normalize_texts(texts, resolve_workers(workers))
    rep = first_occurrence(exact_hashes(norm))
    alive = np.flatnonzero(rep == np.arange(len(rep)))
    near = near_dedup(norm.take(alive), threshold, num_perm, ngram, shingle, verify, workers, seed=seed)
    exact = np.ones(len(rep), dtype=bool)
    exact[alive] = False
    rep[alive] = alive[near.representative]
    return DedupResult(rep, exact, near, alive)


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
        with atomic_path(self.exact_path, suffix=".npy") as tmp:
            np.save(tmp, merged)
        with atomic_path(target, suffix=".npz") as tmp:  # last: its presence marks the night as committed
            np.savez(tmp, ids=np.asarray(ids, dtype=str), signatures=sigs, params=np.array(json.dumps(params, sort_keys=True)))
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
