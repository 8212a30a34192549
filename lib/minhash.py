"""MinHash signatures and LSH banding: one compiled pass over the text (numba), no Python loop
per shingle and no shingle array in between.

- Normalise: NFKC, lower case, whitespace collapsed to single spaces (`normalize_text`).
- Units: words (runs of non-whitespace bytes) or characters (a UTF-8 lead byte and its
  continuation bytes) of the normalised text's UTF-8 bytes. Each unit is hashed once: FNV-1a over
  its bytes, finalised with murmur3's fmix64 (with the unit's length mixed in).
- Shingles: n consecutive units (default word 5-grams); the shingle hash chains the n unit hashes
  in order (FNV-style multiply, then fmix64), so it depends on the units and their order, never on
  the position. A document with fewer than n units is one shingle of all of them; an empty one has
  none (its signature stays all MAX_HASH).
- Permutations: on the high 32 bits x of each shingle hash, h_i(x) = (a_i * x + b_i) mod 2^32
  with a_i odd (a bijection of the 32-bit values); signature = min over the document's shingles,
  SIMD lanes over the shingles (or over the permutations, for documents under 128 shingles).
  `signatures` runs all of it in `_signature_kernel` (compiled once, cached on disk by numba; it
  releases the GIL, so threads scale), keeping the last n unit hashes in a mirrored ring buffer
  so a shingle is n contiguous reads; `shingle_hashes` exposes the same 64-bit shingle hashes for
  exact-Jaccard checks, and `signatures_from_hashes(shingle_hashes(t))` equals `signatures(t)`.
- LSH: (bands b, rows r) with b * r <= num_perm chosen by minimising the weighted false-positive
  + false-negative areas under the S-curve 1 - (1 - s^r)^b (datasketch's `_optimal_param`);
  each band of a signature is folded into one 64-bit bucket key.

Trade-off: 32-bit affine maps replace datasketch's `(a*x + b) mod (2^61 - 1)` in 64 bits: they
vectorise as 8 lanes of 32-bit multiply-add-min per AVX2 instruction. The inputs are already
fmix64-mixed hashes, so the weaker family does not bias the estimate: tests/test_dedup.py and
tests/test_minhash.py check it within 0.03 of the exact Jaccard. Second cost: numba. The first call
in a fresh checkout compiles the two kernels (~5-10 s on the 2-core machine); numba caches them in
`__pycache__` (or NUMBA_CACHE_DIR), and a later process's first call takes ~1 s, mostly numba's own
start-up. Where no cache directory is writable the kernels compile in every process, with one warning.
"""

from __future__ import annotations

import logging
import math
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

log = logging.getLogger(__name__)

MAX_HASH = np.uint32(0xFFFFFFFF)
HASH_VERSION = 2  # bump when signatures of the same text change (the dedup index keys on it)
# Bytes of text per kernel call (bounds the encoded buffer; threads take chunks of this size).
_TEXT_CHUNK = 4 << 20
# Below this many shingles a document's minima are updated shingle by shingle (lanes over the
# permutations); above it permutation by permutation (lanes over the shingles). Measured crossover.
_SHORT_DOC = 128

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def normalize_text(text: str) -> str:
    """NFKC, lower case, runs of whitespace collapsed to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser on a numpy array (in place)."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


_uncached: list[str] = []  # kernels numba could not cache


def _compiled(fn):
    """njit with numba's on-disk cache (NUMBA_CACHE_DIR if set, else `__pycache__` beside this
    file, else ~/.cache/numba). Where none is writable numba refuses cache=True at decoration; we
    then compile in memory instead of failing the import (a few seconds in every process)."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError as exc:  # "cannot cache function ...: no locator available"
        if not _uncached:
            log.warning("%s; lib.minhash compiles its kernels in every process (seconds). Set "
                        "NUMBA_CACHE_DIR to a writable directory to keep them.", exc)
        _uncached.append(fn.__name__)
        return njit(nogil=True)(fn)


@njit(inline="always")
def _fmix(h):
    h ^= h >> _S33
    h *= _C1
    h ^= h >> _S33
    h *= _C2
    h ^= h >> _S33
    return h


@njit(inline="always")
def _is_space(c) -> bool:
    return c == 32 or c == 10 or c == 9 or c == 13


@njit(inline="always")
def _next_unit(buf, i, e, char_mode):
    """(start, end, hash) of the unit at or after byte i, or start == e when there is none."""
    if not char_mode:
        while i < e and _is_space(buf[i]):
            i += 1
        if i == e:
            return e, e, _FNV_OFFSET
    h = (_FNV_OFFSET ^ np.uint64(buf[i])) * _FNV_PRIME
    j = i + 1
    if char_mode:
        while j < e and (buf[j] & 0xC0) == 0x80:
            h = (h ^ np.uint64(buf[j])) * _FNV_PRIME
            j += 1
    else:
        while j < e and not _is_space(buf[j]):
            h = (h ^ np.uint64(buf[j])) * _FNV_PRIME
            j += 1
    return i, j, _fmix(h + np.uint64(j - i))


@njit(inline="always")
def _chain(ring, first, count):
    """Shingle hash of the `count` unit hashes ring[first:first + count], in order."""
    s = _GOLD * np.uint64(count)
    for k in range(count):
        s = (s ^ ring[first + k]) * _FNV_PRIME
    return _fmix(s)


@njit(inline="always")
def _push(ring, w, h, ngram):
    """Store unit hash h at slot w and its mirror w + ngram, so that the last ngram units are
    always the contiguous ring[w':w' + ngram] (w' = the returned next slot): no modulo per read."""
    ring[w] = h
    ring[w + ngram] = h
    w += 1
    return 0 if w == ngram else w


@_compiled
def _shingle_kernel(buf, starts, ends, ngram, char_mode, out, offsets):
    """Shingle hashes of documents buf[starts[d]:ends[d]]. With `out` of length 0 it only counts
    them into offsets[d + 1]; otherwise it fills out[offsets[d]:offsets[d + 1]]."""
    ring = np.empty(2 * ngram, np.uint64)
    fill = out.shape[0] > 0
    for d in range(starts.shape[0]):
        i, e = starts[d], ends[d]
        n_units, w, pos = 0, 0, offsets[d]
        while True:
            u0, u1, h = _next_unit(buf, i, e, char_mode)
            if u0 == e:
                break
            w = _push(ring, w, h, ngram)
            n_units += 1
            if n_units >= ngram:
                if fill:
                    out[pos] = _chain(ring, w, ngram)
                pos += 1
            i = u1
        if 0 < n_units < ngram:
            if fill:
                out[pos] = _chain(ring, 0, n_units)
            pos += 1
        if not fill:
            offsets[d + 1] = offsets[d] + (pos - offsets[d])


@_compiled
def _signature_kernel(buf, starts, ends, ngram, char_mode, a, b, out):
    """out[d] = MinHash signature of document buf[starts[d]:ends[d]] (all MAX_HASH if empty)."""
    n_perm = a.shape[0]
    ring = np.empty(2 * ngram, np.uint64)
    xs = np.empty(4096, np.uint32)
    m = np.empty(n_perm, np.uint32)
    for d in range(starts.shape[0]):
        i, e = starts[d], ends[d]
        n_units, w, nx = 0, 0, 0
        while True:
            u0, u1, h = _next_unit(buf, i, e, char_mode)
            if u0 == e:
                break
            w = _push(ring, w, h, ngram)
            n_units += 1
            if n_units >= ngram:
                if nx == xs.shape[0]:
                    grown = np.empty(2 * nx, np.uint32)
                    grown[:nx] = xs
                    xs = grown
                xs[nx] = np.uint32(_chain(ring, w, ngram) >> _S32)
                nx += 1
            i = u1
        if 0 < n_units < ngram:
            xs[0] = np.uint32(_chain(ring, 0, n_units) >> _S32)
            nx = 1
        row = out[d]
        if nx < _SHORT_DOC:
            # few shingles: SIMD lanes over the permutations, one pass per shingle (the other
            # order pays a reduction tail per permutation: ~1.3x slower on 500-character documents)
            m[:] = np.uint32(0xFFFFFFFF)
            for k in range(nx):
                x = xs[k]
                for p in range(n_perm):
                    v = np.uint32(a[p] * x + b[p])
                    if v < m[p]:
                        m[p] = v
            row[:] = m
            continue
        for p in range(n_perm):
            ap, bp = a[p], b[p]
            mp = np.uint32(0xFFFFFFFF)
            for k in range(nx):  # contiguous: 32-bit multiply-add-min in SIMD lanes
                v = np.uint32(ap * xs[k] + bp)
                if v < mp:
                    mp = v
            row[p] = mp


def _encode(norm_texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UTF-8 bytes of the texts back to back, and each text's [start, end) byte range."""
    parts = [t.encode("utf-8", "surrogatepass") for t in norm_texts]
    lens = np.fromiter((len(x) for x in parts), dtype=np.int64, count=len(parts))
    ends = np.cumsum(lens)
    buf = np.frombuffer(b"".join(parts), dtype=np.uint8) if parts else np.zeros(0, np.uint8)
    return buf, ends - lens, ends


def _check(ngram: int, shingle: str) -> bool:
    if shingle not in ("word", "char"):
        raise ValueError(f"shingle must be 'word' or 'char', got {shingle!r}")
    if ngram < 1:
        raise ValueError(f"ngram must be at least 1, got {ngram}")
    return shingle == "char"


def shingle_hashes(norm_texts: list[str], ngram: int = 5, shingle: str = "word") -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the shingles of already normalised texts.

    Returns (hashes uint64[S], offsets int64[n + 1]): document i owns hashes[offsets[i]:offsets[i+1]].
    """
    char_mode = _check(ngram, shingle)
    buf, starts, ends = _encode(norm_texts)
    offsets = np.zeros(len(norm_texts) + 1, dtype=np.int64)
    _shingle_kernel(buf, starts, ends, ngram, char_mode, np.zeros(0, np.uint64), offsets)
    hashes = np.empty(int(offsets[-1]), dtype=np.uint64)
    if len(hashes):
        _shingle_kernel(buf, starts, ends, ngram, char_mode, hashes, offsets)
    return hashes, offsets


@dataclass(frozen=True)
class MinHasher:
    """`num_perm` multiply-shift permutations drawn from `seed` (same seed: same signatures)."""

    num_perm: int = 128
    seed: int = 1

    @property
    def params(self) -> tuple[np.ndarray, np.ndarray]:
        return _perm_params(self.num_perm, self.seed)

    def signatures_from_hashes(self, hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """uint32[n_docs, num_perm] from `shingle_hashes` output; a document without shingles
        gets all MAX_HASH. (numpy; `signatures` does the same in one compiled pass.)"""
        a, b = self.params
        n_docs = len(offsets) - 1
        sig = np.full((n_docs, self.num_perm), MAX_HASH, dtype=np.uint32)
        x32 = (hashes >> np.uint64(32)).astype(np.uint32)
        for d in np.flatnonzero(np.diff(offsets) > 0):
            x = x32[offsets[d] : offsets[d + 1]]
            sig[d] = (a[:, None] * x[None, :] + b[:, None]).min(axis=1)
        return sig

    def signatures(self, texts: list[str], ngram: int = 5, shingle: str = "word", normalized: bool = False) -> np.ndarray:
        """Signatures of raw texts (normalised here unless `normalized`), chunked by text size."""
        char_mode = _check(ngram, shingle)
        norm = texts if normalized else [normalize_text(t) for t in texts]
        a, b = self.params
        out = np.empty((len(norm), self.num_perm), dtype=np.uint32)
        for lo, hi in text_chunks(norm):
            buf, starts, ends = _encode(norm[lo:hi])
            _signature_kernel(buf, starts, ends, ngram, char_mode, a, b, out[lo:hi])
        return out


def text_chunks(texts: list[str], chunk_bytes: int = _TEXT_CHUNK) -> list[tuple[int, int]]:
    """Split [0, len(texts)) into consecutive ranges of about `chunk_bytes` characters."""
    out, lo, size = [], 0, 0
    for i, t in enumerate(texts):
        size += len(t) + 1
        if size >= chunk_bytes:
            out.append((lo, i + 1))
            lo, size = i + 1, 0
    if lo < len(texts):
        out.append((lo, len(texts)))
    return out


@lru_cache(maxsize=8)
def _perm_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.integers(0, 1 << 31, size=num_perm, dtype=np.uint32) << np.uint32(1)) | np.uint32(1)  # odd
    b = rng.integers(0, 1 << 32, size=num_perm, dtype=np.uint64).astype(np.uint32)
    return a, b


# -- LSH banding ------------------------------------------------------------------------------

def _area(xs: np.ndarray, ys: np.ndarray) -> float:
    return float(np.trapezoid(ys, xs))


def s_curve(s: float | np.ndarray, bands: int, rows: int):
    """Probability that two documents of Jaccard s share at least one band."""
    return 1.0 - (1.0 - np.asarray(s, dtype=float) ** rows) ** bands


def optimal_bands(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimising fp_weight * FP area + fn_weight * FN area (datasketch's method)."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    return _optimal_bands(round(threshold, 6), num_perm, fp_weight, fn_weight)


@lru_cache(maxsize=32)
def _optimal_bands(threshold: float, num_perm: int, fp_weight: float, fn_weight: float) -> tuple[int, int]:
    best, best_err = (1, num_perm), math.inf
    lo, hi = np.linspace(0.0, threshold, 1001), np.linspace(threshold, 1.0, 1001)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = _area(lo, s_curve(lo, b, r))
            fn = _area(hi, 1.0 - s_curve(hi, b, r))
            err = fp_weight * fp + fn_weight * fn
            if err < best_err:
                best, best_err = (b, r), err
    return best


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64[n, bands]: each band's `rows` signature values folded into one key."""
    n = sig.shape[0]
    keys = np.empty((n, bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for band in range(bands):
            h = np.full(n, np.uint64(band) * np.uint64(0x9E3779B97F4A7C15), dtype=np.uint64)
            for j in range(rows):
                h ^= sig[:, band * rows + j].astype(np.uint64)
                h *= np.uint64(0x100000001B3)
                h = _fmix64(h) if j == rows - 1 else h
            keys[:, band] = h
    return keys


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Share of equal signature entries, row by row."""
    return (sig_a == sig_b).mean(axis=-1)
