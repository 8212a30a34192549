"""MinHash signatures and LSH banding: shingling and signatures in compiled passes over one UTF-8
buffer (numba; lib/curation/text.py builds it), no Python loop per document or per shingle.

- Units: words (runs of non-whitespace bytes) or characters (a UTF-8 lead byte and its
  continuation bytes) of the normalised bytes. Each unit is hashed once: FNV-1a over its bytes,
  finalised with murmur3's fmix64 (with the unit's length mixed in).
- Shingles: n consecutive units (default word 5-grams); the shingle hash chains the n unit hashes
  in order (FNV-style multiply, then fmix64), so it depends on the units and their order, never on
  the position. A document with fewer than n units is one shingle of all of them; an empty one has
  none (its signature stays all MAX_HASH).
- Permutations: on the high 32 bits x of each shingle hash, h_i(x) = (a_i * x + b_i) mod 2^32
  with a_i odd (a bijection of the 32-bit values); signature = min over the document's shingles,
  SIMD lanes over the permutations, four shingles per pass. `_signature_kernel` runs units,
  shingles and minima per document in one call: in word mode, when the text's whitespace is all
  single bytes (every ASCII text, nearly every other), a branch-free pass over the bytes hashes
  every word (no mispredicted branch at each word's end: 2x faster signatures on real files),
  then each shingle chains n consecutive unit hashes; otherwise a unit at a time, the last n in a
  mirrored ring buffer. `shingle_hashes` exposes the same 64-bit shingle hashes for exact-Jaccard
  checks, and `signatures_from_hashes(shingle_hashes(t))` equals `signatures(t)`; a plain-Python
  reference of the definition above checks both paths (tests/curation/test_minhash.py).
- LSH: (bands b, rows r) with b * r <= num_perm chosen by minimising the weighted false-positive
  + false-negative areas under the S-curve 1 - (1 - s^r)^b (datasketch's `_optimal_param`);
  each band of a signature is folded into one 64-bit bucket key.

Trade-offs:
- 32-bit affine maps replace datasketch's `(a*x + b) mod (2^61 - 1)` in 64 bits: they vectorise as
  8-16 lanes of 32-bit multiply-add-min. The inputs are already fmix64-mixed hashes, so the weaker
  family does not bias the estimate: tests check it within 0.03 of the exact Jaccard.
- The kernels are compiled once per installation (lib/curation/kernels.py,
  `python -m lib.curation.precompile`): a compilation costs ~5-25 s on the 2-core machine, loading
  it from numba's cache ~0.3 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit, types

from lib.curation.kernels import BYTES, INTS, arr, compiled
from lib.curation.text import LOWER, SPACE, encode_texts, in_threads, is_ascii, plain_spaces, prepare_texts, space_len

MAX_HASH = np.uint32(0xFFFFFFFF)
HASH_VERSION = 2  # bump when signatures of the same text change (the dedup index keys on it)

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser on a numpy array (in place)."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(inline="always")
def _fmix(h):
    h ^= h >> _S33
    h *= _C1
    h ^= h >> _S33
    h *= _C2
    h ^= h >> _S33
    return h


@njit(inline="always")
def _space_unit():
    """The hash of the unit " " (one byte 32): what a whitespace run inside a text is in char mode."""
    return _fmix((_FNV_OFFSET ^ np.uint64(32)) * _FNV_PRIME + np.uint64(1))


@njit(inline="always")
def _word_units(buf, i, e, units):
    """The unit hashes of the words of buf[i:e] (a text whose whitespace is single bytes) into
    units[:n]; returns n. Branch-free per byte: every byte stores the running word's hash at
    units[n] and n only advances at a word's end, so the unpredictable word ends cost no branch
    (2x faster than a loop per word on real files). units needs len(buf[i:e]) // 2 + 2 slots."""
    n = 0
    h = _FNV_OFFSET
    length = np.uint64(0)
    for k in range(i, e):
        c = buf[k]
        sp = np.uint64(SPACE[c])
        units[n] = h + length
        n += np.int64(sp & np.uint64(length != 0))
        keep = sp - np.uint64(1)  # all ones inside a word, 0 on whitespace (which restarts the hash)
        h = (((h ^ np.uint64(LOWER[c])) * _FNV_PRIME) & keep) | (_FNV_OFFSET & ~keep)
        length = (length + np.uint64(1)) & keep
    if length != 0:
        units[n] = h + length
        n += 1
    for k in range(n):
        units[k] = _fmix(units[k])
    return n


@njit(inline="always")
def _next_unit(buf, i, first, e, char_mode, space_unit, ascii):
    """(start, end, hash) of the next unit at or after byte i of the document buf[first:e], or
    start == e when there is none. The unit is that of the normalised text (ASCII lower-cased,
    whitespace runs one space, stripped), whether the bytes were normalised or only prepared
    (`prepare_texts`): words split at any whitespace; in char mode a whitespace run between two
    characters is one space unit. `ascii`: the document has no byte >= 0x80 (a table lookup per
    byte then tells whitespace: ~1.5x faster than the general test; word mode on texts whose
    whitespace is single bytes goes to `_word_units` instead)."""
    j = i
    while j < e:
        k = np.int64(SPACE[buf[j]]) if ascii else space_len(buf, j, e)
        if k == 0:
            break
        j += k
    if j == e:
        return e, e, _FNV_OFFSET
    if char_mode and j > i and i > first:
        return i, j, space_unit
    i = j
    h = (_FNV_OFFSET ^ np.uint64(LOWER[buf[i]])) * _FNV_PRIME
    j = i + 1
    if char_mode:
        while j < e and (buf[j] & 0xC0) == 0x80:
            h = (h ^ np.uint64(buf[j])) * _FNV_PRIME
            j += 1
    else:
        while j < e and space_len(buf, j, e) == 0:
            h = (h ^ np.uint64(LOWER[buf[j]])) * _FNV_PRIME
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


@njit(inline="always")
def _grown(hs, n):
    """hs with room for at least n values (doubled, the first values kept)."""
    if n <= hs.shape[0]:
        return hs
    grown = np.empty(max(n, 2 * hs.shape[0]), np.uint64)
    grown[: hs.shape[0]] = hs
    return grown


@njit(inline="always")
def _doc_shingles(buf, first, e, ngram, char_mode, space_unit, ring, units, hs):
    """The 64-bit shingle hashes of document buf[first:e], in order, into hs[:n]; returns
    (units, hs, n), the scratch arrays grown when too small. One text of fewer than ngram units
    is one shingle of what it has.

    Word mode on a text whose whitespace is single bytes (all ASCII texts and nearly every other
    one) takes the fast path: every unit hash first (`_word_units`), then each shingle chains
    ngram consecutive ones. Otherwise a unit at a time (`_next_unit`), the last ngram kept in a
    mirrored ring buffer. Both give the same hashes."""
    if not char_mode and plain_spaces(buf, first, e):
        if units.shape[0] < (e - first) // 2 + 2:
            units = np.empty(2 * ((e - first) // 2 + 2), np.uint64)
        n_units = _word_units(buf, first, e, units)
        if n_units == 0:
            return units, hs, 0
        if n_units < ngram:
            hs[0] = _chain(units, 0, n_units)
            return units, hs, 1
        n = n_units - ngram + 1
        hs = _grown(hs, n)
        for k in range(n):
            hs[k] = _chain(units, k, ngram)
        return units, hs, n
    n_units, w, n, i = 0, 0, 0, first
    ascii = is_ascii(buf, first, e)
    while True:
        u0, i, h = _next_unit(buf, i, first, e, char_mode, space_unit, ascii)
        if u0 == e:
            break
        w = _push(ring, w, h, ngram)
        n_units += 1
        if n_units >= ngram:
            hs = _grown(hs, n + 1)
            hs[n] = _chain(ring, w, ngram)
            n += 1
    if 0 < n_units < ngram:
        hs[0] = _chain(ring, 0, n_units)
        n = 1
    return units, hs, n


@compiled(arr(types.uint64)(BYTES, INTS, INTS, types.int64, types.boolean, types.int64, arr(types.int64)))
def _shingle_kernel(buf, starts, ends, ngram, char_mode, capacity, offsets):
    """Shingle hashes of documents buf[starts[d]:ends[d]], back to back; document d's are
    [offsets[d], offsets[d + 1]). `capacity` bounds their number (only the pages written become
    resident, so a generous bound costs no memory)."""
    ring = np.empty(2 * ngram, np.uint64)
    units = np.empty(4096, np.uint64)
    hs = np.empty(4096, np.uint64)
    out = np.empty(capacity, np.uint64)
    space_unit = _space_unit()
    offsets[0] = 0
    for d in range(starts.shape[0]):
        units, hs, n = _doc_shingles(buf, starts[d], ends[d], ngram, char_mode, space_unit, ring, units, hs)
        out[offsets[d] : offsets[d] + n] = hs[:n]
        offsets[d + 1] = offsets[d] + n
    return out[: offsets[starts.shape[0]]]


_PERMS = arr(types.uint32, readonly=True)


@compiled(types.void(BYTES, INTS, INTS, types.int64, types.boolean, _PERMS, _PERMS, arr(types.uint32, 2)))
def _signature_kernel(buf, starts, ends, ngram, char_mode, a, b, out):
    """out[d] = MinHash signature of document buf[starts[d]:ends[d]] (all MAX_HASH if empty):
    the minimum over its shingles of each permutation of the shingle hash's high 32 bits."""
    n_perm = a.shape[0]
    ring = np.empty(2 * ngram, np.uint64)
    units = np.empty(4096, np.uint64)
    hs = np.empty(4096, np.uint64)
    m = np.empty(n_perm, np.uint32)
    space_unit = _space_unit()
    for d in range(starts.shape[0]):
        units, hs, nx = _doc_shingles(buf, starts[d], ends[d], ngram, char_mode, space_unit, ring, units, hs)
        # minima: lanes over the permutations, four shingles per pass, so each running minimum
        # is loaded and stored once per four shingles (2.7x faster than one shingle per pass on
        # documents of ~100 shingles, as fast as lanes over the shingles on long ones)
        m[:] = np.uint32(0xFFFFFFFF)
        k = 0
        while k + 4 <= nx:
            x0, x1 = np.uint32(hs[k] >> _S32), np.uint32(hs[k + 1] >> _S32)
            x2, x3 = np.uint32(hs[k + 2] >> _S32), np.uint32(hs[k + 3] >> _S32)
            for p in range(n_perm):
                ap, bp = a[p], b[p]
                v = min(min(np.uint32(ap * x0 + bp), np.uint32(ap * x1 + bp)),
                        min(np.uint32(ap * x2 + bp), np.uint32(ap * x3 + bp)))
                m[p] = min(m[p], v)
            k += 4
        while k < nx:
            x0 = np.uint32(hs[k] >> _S32)
            for p in range(n_perm):
                m[p] = min(m[p], np.uint32(a[p] * x0 + b[p]))
            k += 1
        out[d, :] = m


def _check(ngram: int, shingle: str) -> bool:
    if shingle not in ("word", "char"):
        raise ValueError(f"shingle must be 'word' or 'char', got {shingle!r}")
    if ngram < 1:
        raise ValueError(f"ngram must be at least 1, got {ngram}")
    return shingle == "char"


def shingle_hashes(norm_texts, ngram: int = 5, shingle: str = "word") -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the shingles of normalised texts: a list of str (normalised, or at least
    NFKC + lower case: ASCII case and whitespace are folded as the kernel reads) or a `TextBuffer`.

    Returns (hashes uint64[S], offsets int64[n + 1]): document i owns hashes[offsets[i]:offsets[i+1]].
    """
    char_mode = _check(ngram, shingle)
    t = encode_texts(norm_texts)
    offsets = np.zeros(len(t) + 1, dtype=np.int64)
    # at most one shingle per character (char mode) or per word and its separator (word mode)
    capacity = t.nbytes // (1 if char_mode else 2) + len(t)
    return _shingle_kernel(t.buf, t.starts, t.ends, ngram, char_mode, capacity, offsets), offsets


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

    def signatures(self, texts, ngram: int = 5, shingle: str = "word", normalized: bool = False,
                   workers: int = 1) -> np.ndarray:
        """Signatures of the normalised texts: raw texts are prepared here (`prepare_texts`)
        unless `normalized` or given as a `TextBuffer`; the kernel folds ASCII case and
        whitespace as it reads, in `workers` threads over chunks of ~4 MB."""
        char_mode = _check(ngram, shingle)
        norm = encode_texts(texts) if normalized else prepare_texts(texts)
        a, b = self.params
        out = np.empty((len(norm), self.num_perm), dtype=np.uint32)

        def one(lo: int, hi: int) -> None:
            _signature_kernel(norm.buf, norm.starts[lo:hi], norm.ends[lo:hi], ngram, char_mode, a, b, out[lo:hi])

        in_threads(one, norm.chunks(), workers)
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


@compiled(types.void(arr(types.uint32, 2, readonly=True), types.int64, types.int64, arr(types.uint64, 2)))
def _band_keys_kernel(sig, bands, rows, out):
    for i in range(sig.shape[0]):
        for band in range(bands):
            h = np.uint64(band) * _GOLD
            for j in range(rows):
                h = (h ^ np.uint64(sig[i, band * rows + j])) * _FNV_PRIME
            out[i, band] = _fmix(h)


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64[n, bands]: each band's `rows` signature values folded into one key (FNV-style
    multiply per value, fmix64 at the end), in one compiled pass over the signatures."""
    if bands * rows > sig.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows need {bands * rows} permutations, the signatures have {sig.shape[1]}")
    keys = np.empty((sig.shape[0], bands), dtype=np.uint64)
    _band_keys_kernel(np.ascontiguousarray(sig, dtype=np.uint32), bands, rows, keys)
    return keys


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Share of equal signature entries, row by row."""
    return (sig_a == sig_b).mean(axis=-1)
