"""MinHash signatures and LSH banding: normalisation, shingling and signatures in compiled passes
over one UTF-8 buffer (numba), no Python loop per document or per shingle.

- Normalise (`normalize_texts`): the texts become one UTF-8 buffer (an Arrow string column's
  layout: bytes + per-document [start, end)). A compiled pass lower-cases ASCII and collapses
  every run of whitespace (Python's `str.isspace` set, multi-byte ones included) to one space,
  stripped. Only documents with non-ASCII characters take a Python step first, NFKC and
  `str.lower` (C code, no per-character Python); ASCII needs neither. The result equals
  `normalize_text` (the reference, NFKC + lower + split/join) byte for byte (tests/test_minhash.py).
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
  reference of the definition above checks both paths (tests/test_minhash.py).
- LSH: (bands b, rows r) with b * r <= num_perm chosen by minimising the weighted false-positive
  + false-negative areas under the S-curve 1 - (1 - s^r)^b (datasketch's `_optimal_param`);
  each band of a signature is folded into one 64-bit bucket key.

Trade-offs:
- 32-bit affine maps replace datasketch's `(a*x + b) mod (2^61 - 1)` in 64 bits: they vectorise as
  8-16 lanes of 32-bit multiply-add-min. The inputs are already fmix64-mixed hashes, so the weaker
  family does not bias the estimate: tests check it within 0.03 of the exact Jaccard.
- polars was measured for the normalisation (`str.normalize("NFKC").str.to_lowercase()
  .str.replace_all(r"\\s+", " ").str.strip_chars()`): 1.2 s on 4,000 real files (23 MB), against
  0.3 s for the Python reference and ~0.03 s for the compiled pass; its `\\s` is Unicode's
  White_Space, not Python's whitespace, so it would not even give the same bytes. Not used here.
- numba: every kernel has one explicit signature (a call with other types is an error, never a
  silent recompilation) and is compiled on its first call, or loaded from numba's on-disk cache
  (`__pycache__` beside this file, or NUMBA_CACHE_DIR). A compilation costs ~5-25 s on the
  2-core machine; `compile_kernels` (`python -m lib.curation.minhash`), which `make install` and the worker
  images run once, makes a night's first call load them instead (~0.3 s, bench/bench_dedup_e2e.py).
  Where no cache directory is writable they compile in every process, with one warning.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
from numba import njit, types

from lib.files import atomic_path

log = logging.getLogger(__name__)

MAX_HASH = np.uint32(0xFFFFFFFF)
HASH_VERSION = 2  # bump when signatures of the same text change (the dedup index keys on it)
# Bytes of text per kernel call (bounds the encoded buffer; threads take chunks of this size).
_TEXT_CHUNK = 4 << 20

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def normalize_text(text: str) -> str:
    """NFKC, lower case, runs of whitespace collapsed to one space, stripped (the reference that
    `normalize_texts` reproduces in a compiled pass)."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _nfkc_lower(text: str) -> str:
    """The part of `normalize_text` that needs Unicode tables (non-ASCII documents only)."""
    return unicodedata.normalize("NFKC", text).lower()


def _fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser on a numpy array (in place)."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


# -- compiled kernels: one explicit signature each, built on first use --------------------------

def _arr(dtype, ndim: int = 1, readonly: bool = False):
    return types.Array(dtype, ndim, "C", readonly=readonly)


_BYTES = _arr(types.uint8, readonly=True)
_INTS = _arr(types.int64, readonly=True)
_KERNELS: list["_Kernel"] = []  # every kernel of lib.curation.minhash and lib.curation.dedup, for compile_kernels
_uncached: list[str] = []  # kernels numba could not cache


class _Kernel:
    """`fn` compiled by numba for one signature on its first call (or loaded from numba's cache:
    `__pycache__` beside the source, NUMBA_CACHE_DIR if set). Where no cache directory is
    writable numba refuses cache=True; it then compiles in memory instead of failing."""

    def __init__(self, fn: Callable, signature):
        self.fn, self.signature, self.jit = fn, signature, None
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__
        self._lock = threading.Lock()
        _KERNELS.append(self)

    def compile(self):
        with self._lock:
            if self.jit is None:
                try:
                    self.jit = njit(self.signature, cache=True, nogil=True)(self.fn)
                except RuntimeError as exc:  # "cannot cache function ...: no locator available"
                    if not _uncached:
                        log.warning("%s; lib.curation.minhash compiles its kernels in every process (seconds). Set "
                                    "NUMBA_CACHE_DIR to a writable directory to keep them.", exc)
                    _uncached.append(self.fn.__name__)
                    self.jit = njit(self.signature, nogil=True)(self.fn)
        return self.jit

    def __call__(self, *args):
        return (self.jit or self.compile())(*args)


def _compiled(signature) -> Callable[[Callable], _Kernel]:
    return lambda fn: _Kernel(fn, signature)


def compile_kernels() -> dict[str, float]:
    """Compile, or load from numba's on-disk cache, every kernel of lib.curation.minhash and lib.curation.dedup;
    seconds per kernel. Run once per installation (`make install`, the worker images: `python -m
    lib.curation.minhash`) so that no night's first call pays the compilation."""
    import lib.curation.dedup  # noqa: F401  (registers its kernels)

    seconds = {"_lower_stable": time.perf_counter()}
    _lower_stable()
    seconds["_lower_stable"] = time.perf_counter() - seconds["_lower_stable"]
    for k in _KERNELS:
        t = time.perf_counter()
        k.compile()
        seconds[k.__name__] = time.perf_counter() - t
    return seconds


@njit(inline="always")
def _fmix(h):
    h ^= h >> _S33
    h *= _C1
    h ^= h >> _S33
    h *= _C2
    h ^= h >> _S33
    return h


@njit(inline="always")
def _wide_space(buf, i, e):
    """Length in bytes of the non-ASCII whitespace character at buf[i] (lead byte >= 0x80), or 0:
    U+0085, U+00A0 (C2 xx), U+1680 (E1 9A 80), U+2000-U+200A, U+2028, U+2029, U+202F, U+205F
    (E2 80/81 xx), U+3000 (E3 80 80): the rest of Python's str.isspace() set."""
    c = buf[i]
    if c == 0xC2:
        return 2 if i + 1 < e and (buf[i + 1] == 0x85 or buf[i + 1] == 0xA0) else 0
    if c < 0xE1 or c > 0xE3 or i + 2 >= e:
        return 0
    c1, c2 = buf[i + 1], buf[i + 2]
    if c == 0xE1:
        return 3 if c1 == 0x9A and c2 == 0x80 else 0
    if c == 0xE3:
        return 3 if c1 == 0x80 and c2 == 0x80 else 0
    if c1 == 0x80 and ((0x80 <= c2 <= 0x8A) or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF):
        return 3
    return 3 if c1 == 0x81 and c2 == 0x9F else 0


# Per byte < 0x80: whitespace (Python's str.isspace) -> 1; and the byte it normalises to.
_SPACE = np.zeros(256, np.uint8)
_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = 1
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32
_LOWER[_SPACE == 1] = 32


@njit(inline="always")
def _space_len(buf, i, e):
    """Length in bytes of the whitespace character at buf[i] (Python's str.isspace), or 0."""
    c = buf[i]
    if c < 0x80:
        return np.int64(_SPACE[c])
    if c < 0xC2 or c > 0xE3:
        return 0
    return _wide_space(buf, i, e)


@_compiled(types.void(_BYTES, _INTS, _INTS, _arr(types.uint8), types.int64, _arr(types.int64), _arr(types.int64),
                      _arr(types.boolean)))
def _normalize_kernel(src, starts, ends, out, base, out_starts, out_ends, non_ascii):
    """Document d of src (bytes starts[d]:ends[d]) with ASCII lower-cased and whitespace runs
    collapsed to one space, stripped, into out[out_starts[d]:out_ends[d]], the documents back to
    back from out[base] (never longer than the input); non_ascii[d]: it has bytes >= 0x80.

    Branch-free per byte: every byte is written, and the write position only advances past a
    whitespace byte that follows a non-whitespace one (a space the next byte may overwrite)."""
    o = base
    for d in range(starts.shape[0]):
        i, e = starts[d], ends[d]
        out_starts[d] = first = o
        high = 0
        for k in range(i, e):  # vectorised: is the document ASCII?
            high |= src[k]
        non_ascii[d] = high >= 0x80
        prev = np.int64(1)  # the byte before was whitespace (so leading whitespace is never kept)
        if high < 0x80:  # ASCII: a plain loop (1.7x faster than the general one below)
            for k in range(i, e):
                c = src[k]
                sp = np.int64(_SPACE[c])
                out[o] = _LOWER[c]
                o += 1 - (sp & prev)
                prev = sp
        else:
            while i < e:
                c = src[i]
                if 0xC2 <= c <= 0xE3:  # lead byte of a possible multi-byte whitespace character
                    k = _wide_space(src, i, e)
                    if k > 0:
                        out[o] = 32
                        o += 1 - prev
                        prev = np.int64(1)
                        i += k
                        continue
                sp = np.int64(_SPACE[c])
                out[o] = _LOWER[c]
                o += 1 - (sp & prev)
                prev = sp
                i += 1
        if prev and o > first:
            o -= 1  # a trailing space
        out_ends[d] = o


@njit(inline="always")
def _space_unit():
    """The hash of the unit " " (one byte 32): what a whitespace run inside a text is in char mode."""
    return _fmix((_FNV_OFFSET ^ np.uint64(32)) * _FNV_PRIME + np.uint64(1))


@njit(inline="always")
def _ascii(buf, i, e) -> bool:
    high = 0
    for k in range(i, e):  # vectorised
        high |= buf[k]
    return high < 0x80


@njit(inline="always")
def _ascii_block(buf, k, e) -> bool:
    """buf[k:k + 32] lies inside the text and is all ASCII (one vectorised test, so a scan can
    skip the ASCII stretches of a non-ASCII text 32 bytes at a time)."""
    if k + 32 > e:
        return False
    high = 0
    for t in range(k, k + 32):
        high |= buf[t]
    return high < 0x80


@njit(inline="always")
def _plain_spaces(buf, i, e) -> bool:
    """True when every whitespace character of buf[i:e] is one ASCII byte (no U+00A0, U+2028,
    U+3000, ...): then a word is a run of bytes that `_SPACE` calls non-space. An ASCII text is
    one vectorised test; in others, ASCII blocks are skipped (`_ascii_block`)."""
    if _ascii(buf, i, e):
        return True
    k = i
    while k < e:
        if _ascii_block(buf, k, e):
            k += 32
            continue
        c = buf[k]
        if 0xC2 <= c <= 0xE3 and _wide_space(buf, k, e) > 0:
            return False
        k += 1
    return True


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
        sp = np.uint64(_SPACE[c])
        units[n] = h + length
        n += np.int64(sp & np.uint64(length != 0))
        keep = sp - np.uint64(1)  # all ones inside a word, 0 on whitespace (which restarts the hash)
        h = (((h ^ np.uint64(_LOWER[c])) * _FNV_PRIME) & keep) | (_FNV_OFFSET & ~keep)
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
        k = np.int64(_SPACE[buf[j]]) if ascii else _space_len(buf, j, e)
        if k == 0:
            break
        j += k
    if j == e:
        return e, e, _FNV_OFFSET
    if char_mode and j > i and i > first:
        return i, j, space_unit
    i = j
    h = (_FNV_OFFSET ^ np.uint64(_LOWER[buf[i]])) * _FNV_PRIME
    j = i + 1
    if char_mode:
        while j < e and (buf[j] & 0xC0) == 0x80:
            h = (h ^ np.uint64(buf[j])) * _FNV_PRIME
            j += 1
    else:
        while j < e and _space_len(buf, j, e) == 0:
            h = (h ^ np.uint64(_LOWER[buf[j]])) * _FNV_PRIME
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
    if not char_mode and _plain_spaces(buf, first, e):
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
    ascii = _ascii(buf, first, e)
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


@_compiled(_arr(types.uint64)(_BYTES, _INTS, _INTS, types.int64, types.boolean, types.int64, _arr(types.int64)))
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


_PERMS = _arr(types.uint32, readonly=True)


@_compiled(types.void(_BYTES, _INTS, _INTS, types.int64, types.boolean, _PERMS, _PERMS, _arr(types.uint32, 2)))
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


# -- the texts as one UTF-8 buffer ----------------------------------------------------------------

@dataclass(frozen=True)
class TextBuffer:
    """Texts as one UTF-8 buffer: text i is buf[starts[i]:ends[i]] (ranges in any order, gaps allowed).

    `normalized`: the bytes are `normalize_text`'s output (`normalize_texts`, or `encode_texts`
    of texts the caller normalised). Otherwise they are prepared (`prepare_texts`): the Unicode
    part is done (NFKC, lower case of non-ASCII texts), ASCII case and whitespace are not, which
    is all the shingle kernels need (they fold both as they read)."""

    buf: np.ndarray  # uint8
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    normalized: bool = True

    def __len__(self) -> int:
        return len(self.starts)

    def bytes(self, i: int) -> bytes:
        return self.buf[self.starts[i] : self.ends[i]].tobytes()

    def __getitem__(self, i: int) -> str:
        return self.bytes(i).decode("utf-8", "surrogatepass")

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def nbytes(self) -> int:
        return int((self.ends - self.starts).sum())

    def take(self, idx: np.ndarray) -> "TextBuffer":
        """The texts at positions `idx` (no copy of the bytes)."""
        return TextBuffer(self.buf, self.starts[idx], self.ends[idx], self.normalized)

    def chunks(self, chunk_bytes: int = _TEXT_CHUNK) -> list[tuple[int, int]]:
        """Consecutive ranges [lo, hi) of about `chunk_bytes` bytes each."""
        return _size_chunks(self.ends - self.starts, chunk_bytes)


def _size_chunks(sizes: np.ndarray, chunk_bytes: int) -> list[tuple[int, int]]:
    if len(sizes) == 0:
        return []
    cum = np.cumsum(np.asarray(sizes, dtype=np.int64) + 1)
    cuts = np.searchsorted(cum, np.arange(chunk_bytes, int(cum[-1]), chunk_bytes), side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.minimum(cuts, len(sizes)), [len(sizes)]]))
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def text_chunks(texts: Sequence[str], chunk_bytes: int = _TEXT_CHUNK) -> list[tuple[int, int]]:
    """Split [0, len(texts)) into consecutive ranges of about `chunk_bytes` characters."""
    if isinstance(texts, TextBuffer):
        return texts.chunks(chunk_bytes)
    return _size_chunks(np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts)), chunk_bytes)


def _arrow_buffer(arr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, starts, ends) of an Arrow string / large_string array, without copying the bytes;
    nulls read as empty texts."""
    if isinstance(arr, pa.ChunkedArray):  # one buffer: 64-bit offsets, so nights over 2 GB fit
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.cast(pa.large_string()).combine_chunks()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        raise TypeError(f"expected an Arrow string column, got {arr.type}")
    _, off_buf, data = arr.buffers()
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(off_buf, dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    buf = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1].copy(), offsets[1:].copy()
    if arr.null_count:
        nulls = arr.is_null().to_numpy(zero_copy_only=False)
        ends[nulls] = starts[nulls]
    return buf, starts, ends


def _utf8(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UTF-8 bytes of the texts back to back, and each text's [start, end)."""
    try:  # Arrow encodes in C (ASCII strings are a copy); the system allocator gives the memory back
        return _arrow_buffer(pa.array(texts, type=pa.large_string(), memory_pool=pa.system_memory_pool()))
    except (UnicodeEncodeError, pa.ArrowException):  # lone surrogates: Python's surrogatepass
        parts = [t.encode("utf-8", "surrogatepass") for t in texts]
        lens = np.fromiter((len(x) for x in parts), dtype=np.int64, count=len(parts))
        ends = np.cumsum(lens)
        buf = np.frombuffer(b"".join(parts), dtype=np.uint8) if parts else np.zeros(0, np.uint8)
        return buf, ends - lens, ends


def encode_texts(texts) -> TextBuffer:
    """Texts the caller already normalised, as they are, in one buffer."""
    if isinstance(texts, TextBuffer):
        return texts
    return TextBuffer(*_utf8(list(texts)))


@lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per thread count for the process (starting threads per call cost ~10 ms each
    on the loaded 2-core machine)."""
    return ThreadPoolExecutor(workers, thread_name_prefix="minhash")


def _threads(fn: Callable[[int, int], Any], chunks: list[tuple[int, int]], workers: int) -> None:
    """fn(lo, hi) for every chunk, in `workers` threads (the kernels release the GIL)."""
    if workers <= 1 or len(chunks) < 2:
        for lo, hi in chunks:
            fn(lo, hi)
        return
    list(_pool(min(workers, 64)).map(lambda c: fn(*c), chunks))


@lru_cache(maxsize=1)
def _lower_stable() -> np.ndarray:
    """uint8[65536]: 1 where the BMP character is its own lower case. Building it takes 65,536
    Python calls (0.1-0.3 s), so `compile_kernels` keeps it beside the kernels' cache, per
    Unicode version, and a night's first call reads it."""
    import os
    from pathlib import Path

    folder = Path(os.environ.get("NUMBA_CACHE_DIR") or Path(__file__).with_name("__pycache__"))
    path = folder / f"minhash-lower-stable-{unicodedata.unidata_version}.npy"
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        pass
    table = np.frombuffer(bytes(chr(c).lower() == chr(c) for c in range(0x10000)), dtype=np.uint8)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, suffix=".npy") as tmp:
            np.save(tmp, table)
    except OSError:  # a read-only install: built in every process
        pass
    return table


@_compiled(types.void(_BYTES, _INTS, _INTS, _BYTES, _arr(types.uint8)))
def _unicode_kernel(buf, starts, ends, lower_stable, out):
    """out[d]: 0 if document d is ASCII; 1 if every non-ASCII character is a BMP character that is
    its own lower case; 2 otherwise (astral characters, upper case, bytes that are not UTF-8)."""
    for d in range(starts.shape[0]):
        i, e = starts[d], ends[d]
        flag = 0
        high = 0
        for k in range(i, e):  # vectorised: most documents are ASCII
            high |= buf[k]
        if high >= 0x80:
            flag = 1
            while i < e:
                if _ascii_block(buf, i, e):
                    i += 32
                    continue
                c = buf[i]
                if c < 0x80:
                    i += 1
                    continue
                if 0xC2 <= c <= 0xDF and i + 1 < e and (buf[i + 1] & 0xC0) == 0x80:
                    cp = (np.int64(c & 0x1F) << 6) | (buf[i + 1] & 0x3F)
                    i += 2
                elif 0xE0 <= c <= 0xEF and i + 2 < e and (buf[i + 1] & 0xC0) == 0x80 and (buf[i + 2] & 0xC0) == 0x80:
                    cp = (np.int64(c & 0x0F) << 12) | (np.int64(buf[i + 1] & 0x3F) << 6) | (buf[i + 2] & 0x3F)
                    i += 3
                else:
                    flag = 2
                    break
                if lower_stable[cp] == 0:
                    flag = 2
                    break
        out[d] = flag


def _unicode_fixes(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, text_of: Callable[[int], str]) -> dict[int, str]:
    """The texts whose bytes `normalize_text`'s Unicode part (NFKC, lower case) changes, by
    position, with their new text. A non-ASCII text whose characters are all their own lower
    case only needs `unicodedata.is_normalized` (a quick check in C), not NFKC and `lower`
    (5x less Python time on real package files); the rest takes both."""
    flags = np.zeros(len(starts), np.uint8)
    _unicode_kernel(buf, starts, ends, _lower_stable(), flags)
    fixes = {}
    for i in np.flatnonzero(flags).tolist():
        text = text_of(i)
        if flags[i] == 2 or not unicodedata.is_normalized("NFKC", text):
            fixed = _nfkc_lower(text)
            if fixed != text:
                fixes[i] = fixed
    return fixes


def _spliced(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, fixes: dict[int, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The buffer with the fixed texts appended after it, their ranges pointing there."""
    if not fixes:
        return buf, starts, ends
    idx = np.fromiter(fixes, dtype=np.int64, count=len(fixes))
    side, side_starts, side_ends = _utf8(list(fixes.values()))
    starts, ends = starts.copy(), ends.copy()
    starts[idx], ends[idx] = side_starts + len(buf), side_ends + len(buf)
    return np.concatenate([buf, side]), starts, ends


def prepare_texts(texts) -> TextBuffer:
    """The texts as one UTF-8 buffer with the Unicode part of `normalize_text` (NFKC, then lower
    case) done where it changes them, in Python for those texts only (C code per text, no loop
    per character); ASCII case and whitespace are left to the compiled passes. A list of str, or
    an Arrow string column (read without a Python object per text)."""
    if isinstance(texts, TextBuffer):
        return texts
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        buf, starts, ends = _arrow_buffer(texts)

        def text_of(i: int) -> str:
            return buf[starts[i] : ends[i]].tobytes().decode("utf-8", "surrogateescape")
        return TextBuffer(*_spliced(buf, starts, ends, _unicode_fixes(buf, starts, ends, text_of)), normalized=False)
    # a list: the texts with a non-ASCII character are checked first (str.isascii is C), then
    # every text is encoded once, the fixed ones in their place (no buffer copied to append them)
    texts = list(texts)
    wide = [i for i, t in enumerate(texts) if not t.isascii()]
    if wide:
        fixes = _unicode_fixes(*_utf8([texts[i] for i in wide]), lambda k: texts[wide[k]])
        if fixes:
            texts = texts.copy()
            for k, fixed in fixes.items():
                texts[wide[k]] = fixed
    return TextBuffer(*_utf8(texts), normalized=False)


def normalize_texts(texts, workers: int = 1) -> TextBuffer:
    """`normalize_text` of every text (a list of str, an Arrow string column or a prepared
    `TextBuffer`), byte for byte, as one buffer: the Unicode part where a text needs it
    (`prepare_texts`), then one compiled pass that lower-cases ASCII and collapses whitespace, in
    `workers` threads over ~4 MB chunks. A list is encoded chunk by chunk into the output's
    place, so the night's text is held once more in UTF-8, not twice."""
    if isinstance(texts, TextBuffer) and texts.normalized:
        return texts
    if isinstance(texts, (TextBuffer, pa.Array, pa.ChunkedArray)):
        src = prepare_texts(texts)
        return _normalize_chunks(src.ends - src.starts, lambda lo, hi: (src.buf, src.starts[lo:hi], src.ends[lo:hi]), workers)
    texts = list(texts)
    # the Unicode part first, for the texts with a non-ASCII character only; with it the exact
    # UTF-8 size of every text is known, so chunks can be encoded straight into their place
    room = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    wide = [i for i, t in enumerate(texts) if not t.isascii()]
    buf, starts, ends = _utf8([texts[i] for i in wide])
    room[wide] = ends - starts
    fixes = {wide[k]: fixed for k, fixed in _unicode_fixes(buf, starts, ends, lambda k: texts[wide[k]]).items()}
    for i, fixed in fixes.items():
        room[i] = len(fixed.encode("utf-8", "surrogatepass"))
    return _normalize_chunks(room, lambda lo, hi: _utf8([fixes[i] if i in fixes else texts[i] for i in range(lo, hi)]), workers)


def _normalize_chunks(room: np.ndarray, source: Callable, workers: int) -> TextBuffer:
    """Run `_normalize_kernel` over chunks [lo, hi) whose bytes `source(lo, hi)` gives, each
    into its own region of one output buffer (`room[d]` bytes at most for text d)."""
    n = len(room)
    ends = np.cumsum(room)
    out = np.empty(int(ends[-1]) if n else 0, np.uint8)  # untouched slack is never resident
    out_starts, out_ends, high = np.empty(n, np.int64), np.empty(n, np.int64), np.zeros(n, bool)

    def one(lo: int, hi: int) -> None:
        buf, s, e = source(lo, hi)
        _normalize_kernel(buf, s, e, out, int(ends[lo] - room[lo]), out_starts[lo:hi], out_ends[lo:hi], high[lo:hi])

    _threads(one, _size_chunks(room, _TEXT_CHUNK), workers)
    return TextBuffer(out, out_starts, out_ends, normalized=True)


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

        _threads(one, norm.chunks(), workers)
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


@_compiled(types.void(_arr(types.uint32, 2, readonly=True), types.int64, types.int64, _arr(types.uint64, 2)))
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


if __name__ == "__main__":  # `python -m lib.curation.minhash`: compile (or load) every kernel once
    import os
    import sys

    from lib.curation.minhash import compile_kernels as _compile  # the module itself, not this __main__ copy

    t0 = time.perf_counter()
    took = _compile()
    where = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ beside lib/curation/minhash.py and lib/curation/dedup.py"
    print(f"numba kernels ready in {time.perf_counter() - t0:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in took.items())}); "
          f"cache: {where}", file=sys.stderr)
