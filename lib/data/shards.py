"""Token shards: the one on-disk format of tokenized training data.

A shard is three files next to each other, named by a stem such as `shards/corpus/shard-00003`:

- `<stem>.bin`: every document's token ids, concatenated, flat little-endian `uint16` when the
  vocabulary has at most 65,536 ids, else `uint32`. No BOS/EOS separators: the packer adds BOS.
- `<stem>.idx`: little-endian `uint64` document-end offsets (in tokens): document i spans
  `tokens[idx[i-1]:idx[i]]` (idx[-1] reads as 0), so `idx[-1] == num_tokens`.
- `<stem>.json`: metadata `{"format": "token-shard", "version": 1, "dtype", "num_tokens",
  "num_docs", "tokenizer_hash", "vocab_size"}` plus whatever the writer adds (source, input hash).

Reading maps `.bin` and `.idx` with `np.memmap`, so opening a shard costs no copy and a loader
touches only the documents it packs. `read_shard` checks the three files agree (sizes, counts,
monotone index) and raises `ShardError` naming the file before any training step sees the data.

Trade-off: uint16 halves disk and page-cache use against int32 (a 1 GB corpus of text is ~0.5 GB
of tokens instead of 1 GB), at the cost of a second dtype for vocabularies over 65,536.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from lib.files import write_bytes

FORMAT = "token-shard"
VERSION = 1


class ShardError(ValueError):
    """A token shard whose files disagree, or that was written by another tokenizer."""


def shard_stem(path: str | Path) -> Path:
    """`shard-00001`, `shard-00001.bin`, `.idx` or `.json` all name the same shard."""
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".bin", ".idx", ".json") else p


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def write_shard_arrays(
    tokens: np.ndarray,
    doc_ends: np.ndarray,
    path: str | Path,
    *,
    tokenizer_hash: str | None = None,
    vocab_size: int | None = None,
    extra: dict | None = None,
) -> Path:
    """Write a shard from a flat token array and its document-end offsets; returns the stem."""
    stem = shard_stem(path)
    stem.parent.mkdir(parents=True, exist_ok=True)
    tokens = np.asarray(tokens)
    doc_ends = np.asarray(doc_ends, dtype="<u8")
    if vocab_size is None:
        vocab_size = int(tokens.max()) + 1 if tokens.size else 1
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ShardError(f"{stem}.bin: token ids must lie in [0, {vocab_size}), got [{int(tokens.min())}, {int(tokens.max())}]")
    dtype = token_dtype(vocab_size)
    if doc_ends.size and int(doc_ends[-1]) != tokens.size:
        raise ShardError(f"{stem}.idx: last document end {int(doc_ends[-1])} != {tokens.size} tokens")
    write_bytes(stem.with_suffix(".bin"), np.ascontiguousarray(tokens, dtype=dtype).data)
    write_bytes(stem.with_suffix(".idx"), np.ascontiguousarray(doc_ends).data)
    meta = {
        "format": FORMAT, "version": VERSION, "dtype": dtype.name,
        "num_tokens": int(tokens.size), "num_docs": int(doc_ends.size),
        "tokenizer_hash": tokenizer_hash, "vocab_size": int(vocab_size),
    }
    meta.update(extra or {})
    # The .json goes last: its presence says the shard is complete.
    write_bytes(stem.with_suffix(".json"), (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
    return stem


def write_shard(
    token_lists: Iterable[Sequence[int]],
    path: str | Path,
    *,
    tokenizer_hash: str | None = None,
    vocab_size: int | None = None,
    extra: dict | None = None,
) -> Path:
    """Write documents (each a sequence of token ids, no BOS) as one shard; returns the stem."""
    docs = [np.asarray(d, dtype=np.int64).reshape(-1) for d in token_lists]
    lengths = np.fromiter((d.size for d in docs), dtype=np.uint64, count=len(docs))
    tokens = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    return write_shard_arrays(tokens, np.cumsum(lengths, dtype=np.uint64), path,
                              tokenizer_hash=tokenizer_hash, vocab_size=vocab_size, extra=extra)


def read_shard_meta(path: str | Path) -> dict:
    stem = shard_stem(path)
    meta_path = stem.with_suffix(".json")
    if not meta_path.is_file():
        raise ShardError(f"{meta_path} does not exist: shard {stem} is missing or was not completely written")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ShardError(f"{meta_path} is not valid JSON: {exc}") from exc
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ShardError(f"{meta_path}: not a token shard of format {FORMAT} v{VERSION} (got {meta.get('format')} v{meta.get('version')})")
    return meta


def read_shard(path: str | Path, *, tokenizer_hash: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Memory-map a shard: (tokens, doc_ends). Raises ShardError naming the file when the token
    file, index and metadata disagree, or when `tokenizer_hash` is given and differs."""
    stem = shard_stem(path)
    meta = read_shard_meta(stem)
    bin_path, idx_path = stem.with_suffix(".bin"), stem.with_suffix(".idx")
    if tokenizer_hash is not None and meta.get("tokenizer_hash") != tokenizer_hash:
        raise ShardError(
            f"{bin_path} was written by tokenizer {str(meta.get('tokenizer_hash'))[:12]}…, but the model's tokenizer is "
            f"{tokenizer_hash[:12]}…: re-run the data preparation with the model's tokenizer"
        )
    dtype = np.dtype(meta["dtype"]).newbyteorder("<")
    n_tok, n_doc = int(meta["num_tokens"]), int(meta["num_docs"])
    for p, expected in ((bin_path, n_tok * dtype.itemsize), (idx_path, n_doc * 8)):
        if not p.is_file():
            raise ShardError(f"{p} does not exist")
        size = p.stat().st_size
        if size != expected:
            raise ShardError(f"{p} has {size} bytes, but {stem}.json promises {expected}: the shard is truncated or from another write")
    tokens = np.memmap(bin_path, dtype=dtype, mode="r", shape=(n_tok,)) if n_tok else np.zeros(0, dtype=dtype)
    doc_ends = np.memmap(idx_path, dtype="<u8", mode="r", shape=(n_doc,)) if n_doc else np.zeros(0, dtype="<u8")
    if n_doc and (int(doc_ends[-1]) != n_tok or (n_doc > 1 and bool(np.any(np.diff(doc_ends.astype(np.int64)) < 0)))):
        raise ShardError(f"{idx_path} disagrees with {bin_path}: document ends must rise to {n_tok}, last is {int(doc_ends[-1])}")
    if not n_doc and n_tok:
        raise ShardError(f"{idx_path} is empty but {bin_path} holds {n_tok} tokens")
    return tokens, doc_ends


def doc_starts(doc_ends: np.ndarray) -> np.ndarray:
    """int64 start offset of every document (0 for the first)."""
    starts = np.zeros(len(doc_ends), dtype=np.int64)
    if len(doc_ends) > 1:
        starts[1:] = doc_ends[:-1]
    return starts
