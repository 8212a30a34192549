"""The texts of a night as one UTF-8 buffer, and their normalisation (NFKC, lower case, one space
per whitespace run) in compiled passes over it, no Python loop per document or per character.

- `TextBuffer`: bytes + per-document [start, end) (an Arrow string column's layout); an Arrow
  `text` column is read without a Python object per text.
- `normalize_texts`: a compiled pass lower-cases ASCII and collapses every run of whitespace
  (Python's `str.isspace` set, multi-byte ones included) to one space, stripped. Only documents
  with non-ASCII characters take a Python step first, NFKC and `str.lower` (C code, no
  per-character Python), and of those only the ones a compiled check cannot clear. The result
  equals `normalize_text` (the reference, NFKC + lower + split/join) byte for byte
  (tests/curation/test_minhash.py).
- `prepare_texts`: the Unicode part only; the shingle kernels (lib/curation/minhash.py) fold ASCII
  case and whitespace as they read, so near dedup alone needs no second copy.
- The byte-level rules (which bytes are whitespace, what a byte lower-cases to) are shared with
  the shingle kernels.

Trade-off: polars was measured for the normalisation (`str.normalize("NFKC").str.to_lowercase()
.str.replace_all(r"\\s+", " ").str.strip_chars()`): 1.2 s on 4,000 real files (23 MB), against
0.3 s for the Python reference and ~0.03 s for the compiled pass; its `\\s` is Unicode's
White_Space, not Python's whitespace, so it would not even give the same bytes. Not used here.
"""

from __future__ import annotations

import os
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
from numba import njit, types

from lib.curation.kernels import BYTES, INTS, arr, compiled, table
from lib.files import atomic_path

# Bytes of text per kernel call (bounds the encoded buffer; threads take chunks of this size).
TEXT_CHUNK = 4 << 20


def normalize_text(text: str) -> str:
    """NFKC, lower case, runs of whitespace collapsed to one space, stripped (the reference that
    `normalize_texts` reproduces in a compiled pass)."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _nfkc_lower(text: str) -> str:
    """The part of `normalize_text` that needs Unicode tables (non-ASCII documents only)."""
    return unicodedata.normalize("NFKC", text).lower()


@njit(inline="always")
def wide_space(buf, i, e):
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
SPACE = np.zeros(256, np.uint8)
SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = 1
LOWER = np.arange(256, dtype=np.uint8)
LOWER[65:91] += 32
LOWER[SPACE == 1] = 32


@njit(inline="always")
def space_len(buf, i, e):
    """Length in bytes of the whitespace character at buf[i] (Python's str.isspace), or 0."""
    c = buf[i]
    if c < 0x80:
        return np.int64(SPACE[c])
    if c < 0xC2 or c > 0xE3:
        return 0
    return wide_space(buf, i, e)


@compiled(types.void(BYTES, INTS, INTS, arr(types.uint8), types.int64, arr(types.int64), arr(types.int64),
                      arr(types.boolean)))
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
                sp = np.int64(SPACE[c])
                out[o] = LOWER[c]
                o += 1 - (sp & prev)
                prev = sp
        else:
            while i < e:
                c = src[i]
                if 0xC2 <= c <= 0xE3:  # lead byte of a possible multi-byte whitespace character
                    k = wide_space(src, i, e)
                    if k > 0:
                        out[o] = 32
                        o += 1 - prev
                        prev = np.int64(1)
                        i += k
                        continue
                sp = np.int64(SPACE[c])
                out[o] = LOWER[c]
                o += 1 - (sp & prev)
                prev = sp
                i += 1
        if prev and o > first:
            o -= 1  # a trailing space
        out_ends[d] = o


@njit(inline="always")
def is_ascii(buf, i, e) -> bool:
    high = 0
    for k in range(i, e):  # vectorised
        high |= buf[k]
    return high < 0x80


@njit(inline="always")
def ascii_block(buf, k, e) -> bool:
    """buf[k:k + 32] lies inside the text and is all ASCII (one vectorised test, so a scan can
    skip the ASCII stretches of a non-ASCII text 32 bytes at a time)."""
    if k + 32 > e:
        return False
    high = 0
    for t in range(k, k + 32):
        high |= buf[t]
    return high < 0x80


@njit(inline="always")
def plain_spaces(buf, i, e) -> bool:
    """True when every whitespace character of buf[i:e] is one ASCII byte (no U+00A0, U+2028,
    U+3000, ...): then a word is a run of bytes that `SPACE` calls non-space. An ASCII text is
    one vectorised test; in others, ASCII blocks are skipped (`ascii_block`)."""
    if is_ascii(buf, i, e):
        return True
    k = i
    while k < e:
        if ascii_block(buf, k, e):
            k += 32
            continue
        c = buf[k]
        if 0xC2 <= c <= 0xE3 and wide_space(buf, k, e) > 0:
            return False
        k += 1
    return True


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

    def chunks(self, chunk_bytes: int = TEXT_CHUNK) -> list[tuple[int, int]]:
        """Consecutive ranges [lo, hi) of about `chunk_bytes` bytes each."""
        return _size_chunks(self.ends - self.starts, chunk_bytes)


def _size_chunks(sizes: np.ndarray, chunk_bytes: int) -> list[tuple[int, int]]:
    if len(sizes) == 0:
        return []
    cum = np.cumsum(np.asarray(sizes, dtype=np.int64) + 1)
    cuts = np.searchsorted(cum, np.arange(chunk_bytes, int(cum[-1]), chunk_bytes), side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.minimum(cuts, len(sizes)), [len(sizes)]]))
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def text_chunks(texts: Sequence[str], chunk_bytes: int = TEXT_CHUNK) -> list[tuple[int, int]]:
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


def in_threads(fn: Callable[[int, int], Any], chunks: list[tuple[int, int]], workers: int) -> None:
    """fn(lo, hi) for every chunk, in `workers` threads (the kernels release the GIL)."""
    if workers <= 1 or len(chunks) < 2:
        for lo, hi in chunks:
            fn(lo, hi)
        return
    list(_pool(min(workers, 64)).map(lambda c: fn(*c), chunks))


@table
@lru_cache(maxsize=1)
def _lower_stable() -> np.ndarray:
    """uint8[65536]: 1 where the BMP character is its own lower case. Building it takes 65,536
    Python calls (0.1-0.3 s), so lib.curation.precompile keeps it beside the kernels' cache, per
    Unicode version, and a night's first call reads it."""
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


@compiled(types.void(BYTES, INTS, INTS, BYTES, arr(types.uint8)))
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
                if ascii_block(buf, i, e):
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

    in_threads(one, _size_chunks(room, TEXT_CHUNK), workers)
    return TextBuffer(out, out_starts, out_ends, normalized=True)
