"""The buffer: text captured by day, kept safe until the night's consolidation reads it.

- `add(text, source)` validates the record (a non-empty str that encodes as UTF-8, at most
  `max_text_bytes`), appends it as one framed record (magic, length, CRC32) to this writer's own
  write-ahead log `buffer_dir/wal/<segment>.log`, and fsyncs before it returns.
- When `flush_size` records are pending (or on `flush()`), the segment becomes one parquet file
  `buffer_<segment>.parquet`: written under a temporary name, fsync'd, renamed into place; only
  then is the log deleted. The parquet is named after its segment, so a crash between the rename
  and the delete recovers nothing twice: recovery sees the segment's parquet and drops the log.
- Each writer holds an exclusive `flock` on its log for its whole life. Opening a Buffer
  (and every `flush()`) recovers the logs that no live process holds, i.e. those of dead writers,
  into their parquet files. A lock is released by the kernel when a process dies, even by SIGKILL.
- Recovery reads frames until the first one whose header or checksum does not match: that is a
  torn last write (its `add` never returned), dropped and counted, never half-imported.
- Segment names (UTC time with microseconds, pid, random suffix) never collide, across processes
  or within one second, and sort by the time of the segment's first record.

- The record and its formats (parquet schema, log frames) are lib/buffer/records.py.
- `add_file(texts)` (what `consolidate buffer add` uses) skips the log: the batch becomes one
  parquet file, written under a temporary name, fsync'd and renamed, so a crash leaves all of
  it or none of it.

Trade-off: the fsync makes every returned `add` survive a power cut, at ~0.5-0.8 ms per add on
this machine's disk (~1.2-1.9k adds/s, against ~40-75k/s with `durability="flush"`, which survives
a killed process but not a power cut; bench/bench_buffer_add.py). `add_many` puts a batch under
one fsync, so a 100-record batch costs about what 100 unsynced adds do.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Literal, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lib.buffer.records import (
    LOG_MAGIC, InvalidRecordError, LogContents, Record, encode_frame, new_record_id, parse_log, read_log, records_table,
    validate_source, validate_text,
)
from lib.files import atomic_path, fsync_path
from lib.locks import pid_alive

log = logging.getLogger(__name__)

STALE_NEW_LOG_S = 60.0  # a half-created log older than this belongs to a dead writer

Durability = Literal["fsync", "flush"]


# -- names and ids ---------------------------------------------------------------------------
def new_segment_name() -> str:
    """`YYYYmmdd_HHMMSS_micro_pid_rand`: sorts by time, unique across processes and within a second."""
    t = datetime.now(timezone.utc)
    return f"{t:%Y%m%d_%H%M%S}_{t.microsecond:06d}_{os.getpid()}_{secrets.token_hex(3)}"


# -- file system -----------------------------------------------------------------------------
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _open_if_abandoned(path: Path) -> int | None:
    """An fd holding the exclusive lock of `path` if no live process holds it, else None.
    Checks that `path` still names the locked file: a writer may have flushed and deleted it
    between our open and our lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        same = os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        same = False
    if not same:
        os.close(fd)
        return None
    return fd


class Buffer:
    """Durable buffer of captured text. Thread-safe within a process; any number of processes
    may write to the same folder at once (each into its own log and parquet files)."""

    def __init__(
        self,
        buffer_dir: str | Path,
        flush_size: int = 1000,
        max_text_bytes: int = 10_000_000,
        durability: Durability = "fsync",
        recover: bool = True,
    ):
        if not isinstance(flush_size, int) or flush_size < 1:
            raise ValueError(f"Buffer flush_size must be a positive int, got {flush_size!r}")
        if not isinstance(max_text_bytes, int) or max_text_bytes < 1:
            raise ValueError(f"Buffer max_text_bytes must be a positive int, got {max_text_bytes!r}")
        if durability not in ("fsync", "flush"):
            raise ValueError(f"Buffer durability must be 'fsync' or 'flush', got {durability!r}")
        self.buffer_dir = Path(buffer_dir)
        self.wal_dir = self.buffer_dir / "wal"
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        self.flush_size = flush_size
        self.max_text_bytes = max_text_bytes
        self.durability = durability
        self._lock = threading.RLock()
        self._pending: list[Record] = []
        self._segment: str | None = None
        self._fd: int | None = None
        self._owner_pid = os.getpid()
        self._log_size = 0
        self.recovered = {"segments": 0, "records": 0, "dropped_bytes": 0, "already_flushed": 0}
        if recover:
            self.recover()

    @classmethod
    def from_config(cls, buffer_dir: str | Path, cfg, recover: bool = True) -> "Buffer":
        """From a `lib.config.BufferConfig` (or a whole ConsolidationConfig)."""
        section = getattr(cfg, "buffer", cfg)
        return cls(buffer_dir, section.flush_size, section.max_text_bytes, section.durability, recover)

    # -- paths ---------------------------------------------------------------------------------
    def parquet_path(self, segment: str) -> Path:
        return self.buffer_dir / f"buffer_{segment}.parquet"

    def log_path(self, segment: str) -> Path:
        return self.wal_dir / f"{segment}.log"

    # -- writing -------------------------------------------------------------------------------
    def add(self, text: str, source: str | None = None) -> str:
        """Append one record; returns its id once the record is in the log (fsync'd by default)."""
        return self.add_many([text], source)[0]

    def _validated(self, texts: Iterable[str], source) -> tuple[list[str], list[str | None], list[tuple[bytes, bytes | None]]]:
        if isinstance(texts, (str, bytes)):
            raise InvalidRecordError("add_many expects a list of texts, got a single str; use add()")
        texts = list(texts)
        if isinstance(source, (list, tuple)):
            if len(source) != len(texts):
                raise InvalidRecordError(f"add_many: {len(texts)} texts but {len(source)} sources")
            sources = list(source)
        else:
            sources = [source] * len(texts)
        many = len(texts) > 1
        encoded: list[tuple[bytes, bytes | None]] = []
        for i, (text, src) in enumerate(zip(texts, sources)):
            where = f"record {i}: text" if many else "text"
            encoded.append((validate_text(text, self.max_text_bytes, where), validate_source(src, where)))
        return texts, sources, encoded

    def add_many(self, texts: Iterable[str], source: str | None | Sequence[str | None] = None) -> list[str]:
        """Append a batch under one fsync. `source` is one value for all, or one per text.
        All-or-nothing validation: one bad text refuses the whole batch (nothing is added)."""
        texts, sources, encoded = self._validated(texts, source)
        ids: list[str] = []
        with self._lock:
            i = 0
            while i < len(texts):
                room = max(1, self.flush_size - len(self._pending))
                chunk = range(i, min(len(texts), i + room))
                now_us = time.time_ns() // 1000
                records = [Record(new_record_id(), texts[j], sources[j], now_us) for j in chunk]
                frames = b"".join(encode_frame(r.id, encoded[j][0], encoded[j][1], now_us) for r, j in zip(records, chunk))
                self._append(frames, records)
                ids.extend(r.id for r in records)
                i = chunk.stop
                if len(self._pending) >= self.flush_size:
                    self._flush_own()
        return ids

    def add_file(self, texts: Iterable[str], source: str | None | Sequence[str | None] = None) -> Path | None:
        """Add a batch as ONE new parquet file, written atomically (temporary name, fsync,
        rename): after any crash the batch is in the buffer whole or not at all. No write-ahead
        log (the caller still holds its input until this returns). Validated like `add_many`;
        an empty batch writes nothing and returns None."""
        texts, sources, _ = self._validated(texts, source)
        if not texts:
            return None
        now_us = time.time_ns() // 1000
        records = [Record(new_record_id(), t, s, now_us) for t, s in zip(texts, sources)]
        segment = new_segment_name()
        path = self.parquet_path(segment)
        self._write_parquet(path, records, segment, logged=False)
        return path

    def _forget_if_forked(self) -> None:
        if os.getpid() != self._owner_pid:
            # a forked child: the log, its lock and the pending records belong to the parent;
            # the child starts a log of its own and must never delete the parent's
            self._fd, self._segment, self._pending, self._log_size = None, None, [], 0
            self._owner_pid = os.getpid()

    def _append(self, frames: bytes, records: list[Record]) -> None:
        self._forget_if_forked()
        if self._fd is None:
            self._open_segment()
        try:
            _write_all(self._fd, frames)
            if self.durability == "fsync":
                os.fdatasync(self._fd)
        except BaseException:
            # never leave half a frame before the next record: cut the log back to the last good one
            os.ftruncate(self._fd, self._log_size)
            raise
        self._log_size += len(frames)
        self._pending.extend(records)

    def _open_segment(self) -> None:
        segment = new_segment_name()
        # Created under a name recovery never looks at, locked, then renamed: the lock travels with
        # the inode, so no other process can ever see this log unlocked while we live.
        tmp = self.wal_dir / f".{segment}.log.new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_all(fd, LOG_MAGIC)
            os.replace(tmp, self.log_path(segment))
            if self.durability == "fsync":
                os.fsync(fd)
                fsync_path(self.wal_dir)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self._fd, self._segment, self._log_size = fd, segment, len(LOG_MAGIC)

    def _write_parquet(self, path: Path, records: Sequence[Record], segment: str, logged: bool = True) -> None:
        table = records_table(records).replace_schema_metadata(
            {b"memory_buffer": json.dumps({"format": 1, "segment": segment, "records": len(records)}).encode()}
        )
        # A log-less write (add_file) gets a name `_remove_leftovers` judges by its writer's pid.
        own = None if logged else path.with_name(f".import-{os.getpid()}-{secrets.token_hex(3)}.{path.name}.tmp")
        with atomic_path(path, tmp=own) as tmp:  # logged: `.<name>.<pid>.<random>.tmp`
            pq.write_table(table, tmp, compression="zstd")
        fsync_path(path.parent)

    def _close_segment(self, delete: bool) -> None:
        self._forget_if_forked()
        if self._fd is None:
            return
        if delete:
            self.log_path(self._segment).unlink(missing_ok=True)
            fsync_path(self.wal_dir)
        os.close(self._fd)  # releases the lock last: nobody recovers a log we are still deleting
        self._fd, self._segment, self._log_size, self._pending = None, None, 0, []

    def _flush_own(self) -> Path | None:
        self._forget_if_forked()
        if not self._pending:
            return None
        path = self.parquet_path(self._segment)
        self._write_parquet(path, self._pending, self._segment)
        # From here the parquet holds every record: a crash before the delete below is harmless,
        # recovery finds buffer_<segment>.parquet and drops the log instead of importing it again.
        self._close_segment(delete=True)
        return path

    def flush(self) -> Path | None:
        """Write pending records to a new parquet file (None if none were pending), and recover
        the logs of writers that died since this buffer was opened."""
        with self._lock:
            path = self._flush_own()
            self.recover()
            return path

    def close(self, flush: bool = True) -> None:
        """Flush (default) and release the log. With flush=False the records stay in the log,
        and the next Buffer opened on this folder recovers them."""
        with self._lock:
            if flush:
                self._flush_own()
            self._close_segment(delete=not self._pending)

    def __del__(self) -> None:
        # An abandoned buffer is a dead writer: release the log (records stay in it, recovered by
        # the next Buffer on the folder) instead of holding its lock until the process ends.
        try:
            if self._fd is not None and os.getpid() == self._owner_pid:
                self._close_segment(delete=not self._pending)
        except Exception:
            pass

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close(flush=True)

    # -- recovery ------------------------------------------------------------------------------
    def recover(self) -> dict:
        """Recover every log no live writer holds into `buffer_<segment>.parquet` (exactly once),
        then delete it. Returns this call's counts (also accumulated in `self.recovered`)."""
        report = {"segments": 0, "records": 0, "dropped_bytes": 0, "already_flushed": 0}
        with self._lock:
            for path in sorted(self.wal_dir.glob("*.log")):
                segment = path.stem
                if segment == self._segment:
                    continue
                fd = _open_if_abandoned(path)
                if fd is None:
                    continue
                try:
                    with open(fd, "rb", closefd=False) as f:
                        contents = parse_log(f.read())
                    if contents.foreign:
                        log.warning("%s is not a buffer log (bad header); left in place", path)
                        continue
                    target = self.parquet_path(segment)
                    if target.exists():
                        report["already_flushed"] += 1
                    elif contents.records:
                        self._write_parquet(target, contents.records, segment)
                        report["segments"] += 1
                        report["records"] += len(contents.records)
                    if contents.dropped_bytes:
                        log.warning("%s: dropped a torn tail of %d bytes (a write that never returned)", path, contents.dropped_bytes)
                        report["dropped_bytes"] += contents.dropped_bytes
                    path.unlink(missing_ok=True)
                    fsync_path(self.wal_dir)
                finally:
                    os.close(fd)
            self._remove_leftovers()
        for key, value in report.items():
            self.recovered[key] += value
        return report

    def _remove_leftovers(self) -> None:
        # A temporary parquet whose log is gone was never renamed (its writer died mid-write):
        # while a flush is in flight its log still exists, so this never races a live writer.
        for tmp in self.buffer_dir.glob(".buffer_*.parquet.*.tmp"):
            segment = tmp.name[len(".buffer_") :].split(".parquet.")[0]
            if not self.log_path(segment).exists():
                tmp.unlink(missing_ok=True)
        # A log-less import (add_file) whose writer is gone never renamed its file.
        for tmp in self.buffer_dir.glob(".import-*.tmp"):
            try:
                pid = int(tmp.name.split("-")[1])
            except (IndexError, ValueError):
                continue
            if not pid_alive(pid):
                tmp.unlink(missing_ok=True)
        # A log that was created but never renamed into place holds no records.
        for new in self.wal_dir.glob(".*.log.new"):
            try:
                old = time.time() - new.stat().st_mtime > STALE_NEW_LOG_S
            except FileNotFoundError:
                continue
            if old:
                fd = _open_if_abandoned(new)
                if fd is not None:
                    new.unlink(missing_ok=True)
                    os.close(fd)

    # -- reading -------------------------------------------------------------------------------
    def list_buffers(self) -> list[str]:
        """Flushed parquet files of this folder, sorted (by name, i.e. by time)."""
        return sorted(str(p) for p in self.buffer_dir.glob("*.parquet") if not p.name.startswith("."))

    def pending(self) -> int:
        """Records this writer holds in its log, not yet in a parquet file."""
        return len(self._pending)

    def _other_logs(self) -> list[tuple[Path, LogContents, bool]]:
        """(path, contents, abandoned) for every log that is not this writer's."""
        out = []
        for path in sorted(self.wal_dir.glob("*.log")):
            if path.stem == self._segment:
                continue
            try:
                contents = read_log(path)
            except FileNotFoundError:
                continue  # flushed meanwhile
            fd = _open_if_abandoned(path)
            if fd is not None:
                os.close(fd)
            out.append((path, contents, fd is not None))
        return out

    def total_sequences(self) -> int:
        """Rows in flushed parquet files + records waiting in any write-ahead log."""
        s = self.stats()
        return s["records"] + s["pending_log"]

    def stats(self) -> dict:
        """Counts for `consolidate buffer stats`: files, records and bytes on disk, and what
        waits in the write-ahead logs (this writer's, live writers', dead writers')."""
        with self._lock:
            files, records, nbytes, unreadable = 0, 0, 0, []
            for name in self.list_buffers():
                try:
                    rows = pq.ParquetFile(name).metadata.num_rows
                    size = os.path.getsize(name)
                except (OSError, pa.ArrowException) as exc:
                    unreadable.append(f"{Path(name).name}: {exc}")
                    continue
                files += 1
                records += rows
                nbytes += size
            others = self._other_logs()
            own = len(self._pending)
            return {
                "buffer_dir": str(self.buffer_dir),
                "files": files,
                "records": records,
                "bytes": nbytes,
                "pending_log": own + sum(len(c.records) for _, c, _ in others),
                "pending_own": own,
                "log_segments": len(others) + (self._segment is not None),
                "log_bytes": self._log_size + sum(c.valid_bytes + c.dropped_bytes for _, c, _ in others),
                "abandoned_segments": sum(1 for _, _, dead in others if dead),
                "unreadable_files": unreadable,
                "durability": self.durability,
                "flush_size": self.flush_size,
            }


