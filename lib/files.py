"""File mechanics: atomic writes, folder publishing, content hashes, hard-link-or-copy.

This is the one place for them; every writer in lib/, tasks/, flows/ and cli/ calls these.

- Atomic writes go to a temporary sibling with a unique name (`.<name>.<pid>.<random>.tmp`, so two
  writers never share one), are flushed and fsynced, then `os.replace`d over the target: a reader
  sees the old file or the new one, never half of either. A write that fails midway removes its
  temporary and leaves the old file as it was.
- A folder is published the same way: built under `.<name>.tmp-<random>` beside it, then renamed
  into place (`publish_folder`). Sweepers of killed runs look for that pattern.
- Content hashes stream the file. Two stored formats exist and keep their values: `sha256` (hex) for
  model weights, checkpoints, snapshots and the manifest; `xxh3_128` (hex) for buffer files, corpus
  shards and tokenize inputs (the lineage registry's `content_hash`).
- `link_or_copy` hard-links a file that is never modified in place and copies it where the file
  system refuses the link (another device, no link support).
- `json_lines` reads JSON Lines (buffer inputs, replay corpora, eval probes): one object per
  non-blank line, or an error that names the line and what is wrong with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Literal

import xxhash

Algorithm = Literal["sha256", "xxh3_128"]
_CHUNK = 1 << 22


# -- atomic writes --------------------------------------------------------------------------------
def temp_sibling(path: str | Path, suffix: str = "") -> Path:
    """A fresh temporary name beside `path`: `.<name>.<pid>.<random>.tmp<suffix>`. `suffix` is for
    writers that append an ending of their own (numpy's `.npy`/`.npz`)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp{suffix}")


def fsync_path(path: str | Path) -> None:
    """fsync a file (or a folder, so a rename in it is durable) by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path, suffix: str = "", tmp: Path | None = None) -> Iterator[Path]:
    """Yield a temporary path for a library that writes by name (pyarrow, numpy); on a clean exit
    it is fsynced and renamed over `path`, on an error removed. `tmp` overrides the temporary
    name, for a writer whose leftovers a sweeper recognises by a name of its own."""
    path = Path(path)
    tmp = Path(tmp) if tmp is not None else temp_sibling(path, suffix)
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_open(path: str | Path, mode: Literal["w", "wb"] = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """`open()` for writing, atomically: the data reaches `path` only when the block ends cleanly."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=encoding if "b" not in mode else None) as fh:
            yield fh
            fh.flush()


def write_bytes(path: str | Path, data: bytes | memoryview) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)


def write_json(path: str | Path, value: Any, *, newline: bool = False, **dumps: Any) -> None:
    """`json.dumps(value, **dumps)` (plus a final newline if asked) written atomically. The value is
    serialised before anything is opened: one that fails to serialise leaves `path` untouched."""
    write_text(path, json.dumps(value, **dumps) + ("\n" if newline else ""))


# -- folders --------------------------------------------------------------------------------------
def temp_folder(final: str | Path) -> Path:
    """The build name of a folder published by `publish_folder`: `.<name>.tmp-<random>`."""
    final = Path(final)
    return final.with_name(f".{final.name}.tmp-{secrets.token_hex(4)}")


def swap_in(building: str | Path, final: str | Path) -> None:
    """Put the finished folder `building` in place of `final`: readers see the old folder or the new
    one, never a half-written mix (an existing `final` is moved aside, then removed)."""
    building, final = Path(building), Path(final)
    old = final.parent / f".{final.name}.old-{os.getpid()}-{secrets.token_hex(3)}"
    if final.exists():
        os.replace(final, old)
    os.replace(building, final)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def publish_folder(final: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; when the block ends cleanly it replaces
    `final` (`swap_in`), when it raises it is removed and `final` is left as it was."""
    final = Path(final)
    tmp = temp_folder(final)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        swap_in(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- content hashes -------------------------------------------------------------------------------
def _hasher(algorithm: Algorithm):
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "xxh3_128":
        return xxhash.xxh3_128()
    raise ValueError(f"unknown hash algorithm {algorithm!r}: use 'sha256' or 'xxh3_128'")


def file_hash(path: str | Path, algorithm: Algorithm = "sha256") -> str:
    """Hex digest of a file's bytes, read in 4 MiB blocks."""
    h = _hasher(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def copy_hashed(src: str | Path, dst: str | Path, algorithm: Algorithm = "sha256") -> str:
    """Copy `src` to `dst` atomically in one read, returning the digest of the bytes copied."""
    h = _hasher(algorithm)
    with open(src, "rb") as fi, atomic_open(dst, "wb") as fo:
        while block := fi.read(_CHUNK):
            h.update(block)
            fo.write(block)
    return h.hexdigest()


# -- links ----------------------------------------------------------------------------------------
def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """Hard-link `src` at `dst` (creating its folder), or copy it where the file system refuses the
    link. Only for files never modified in place: the two names share one inode. An existing
    `dst` is replaced."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() or dst.is_symlink():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not supported
        shutil.copy2(src, dst)


# -- JSON Lines -----------------------------------------------------------------------------------
class JsonLineError(ValueError):
    """A line of a JSON Lines file that is not UTF-8, not JSON, or not an object: `line` is its
    1-based number, `problem` what is wrong (callers prefix the file's name)."""

    def __init__(self, line: int, problem: str):
        super().__init__(f"line {line}: {problem}")
        self.line, self.problem = line, problem


def json_lines(lines: Iterable[str | bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line; bytes are decoded as UTF-8 line by line (a
    file opened in binary mode streams without being read whole)."""
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise JsonLineError(n, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JsonLineError(n, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise JsonLineError(n, f"expected a JSON object, got {type(obj).__name__}")
        yield n, obj
