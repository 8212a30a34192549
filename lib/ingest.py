"""Ingest: tonight's memory buffer files → validated documents, bad input quarantined, never twice.

- First the buffer's write-ahead logs of stopped writers are replayed into parquet files
  (`MemoryBuffer.flush`), so records that `add` returned for are part of the night.
- Every `buffers/*.parquet` file is identified by the xxh3-128 of its bytes. The lineage registry
  says whether that content was consumed or quarantined already (skipped) or is pending from a
  night that did not promote (used again). New content is registered as pending.
- A file that cannot be read, has no `text` column, a `text` column that is not a string, or no
  rows is moved to `quarantine/` beside a `<name>.reason.json` and recorded as quarantined. Null
  texts are bad rows: they go to `quarantine/<name>.bad-rows.parquet`, the rest of the file goes on.
- Files are split across `world_size` ranks by position in the sorted list (datatrove style).
  A rank running as its own task records its registry changes in a `DeferredRegistry` instead
  of writing the DuckDB file (one writing process at a time); the reduce step applies them.

Trade-off: hashing every file costs one read of the buffer per night (~2 GB/s with xxh3), and buys
"same input" meaning the same bytes whatever the file is called.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq

from lib.buffer import MemoryBuffer, content_hash
from lib.lineage import Lineage
from lib.workspace import Workspace


@dataclass
class IngestResult:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    sources: list[str | None] = field(default_factory=list)
    # (position of the file in the full sorted list) << 32 | row: "earliest" across all ranks
    order: list[int] = field(default_factory=list)
    file_hashes: list[str] = field(default_factory=list)  # buffer files whose rows are in this result
    counts: dict[str, int] = field(default_factory=dict)


def _bump(counts: dict[str, int], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def quarantine_file(ws: Workspace, lineage: Lineage, path: Path, digest: str, reason: str) -> Path:
    """Move a bad buffer file out of the buffer, with its reason beside it."""
    ws.quarantine.mkdir(parents=True, exist_ok=True)
    target = ws.quarantine / path.name
    nbytes = path.stat().st_size
    shutil.move(str(path), target)
    (ws.quarantine / f"{path.name}.reason.json").write_text(
        json.dumps({"file": path.name, "content_hash": digest, "reason": reason}, indent=1)
    )
    lineage.quarantine_buffer_file(digest, target, reason, nbytes)
    return target


def _read(path: Path) -> pa.Table:
    table = pq.read_table(path)
    if "text" not in table.column_names:
        raise ValueError(f"no `text` column (columns: {', '.join(table.column_names) or 'none'})")
    ttype = table.schema.field("text").type
    if not (pa.types.is_string(ttype) or pa.types.is_large_string(ttype)):
        raise ValueError(f"`text` column has type {ttype}, expected string")
    if table.num_rows == 0:
        raise ValueError("empty file (no rows)")
    return table


class DeferredRegistry:
    """The registry calls `ingest` makes, recorded instead of written: a shard task reads the
    statuses it was given and hands its changes back as plain dicts (`events`) for `apply`."""

    def __init__(self, statuses: dict[str, str]):
        self.statuses = dict(statuses)
        self.events: list[dict] = []

    def buffer_files(self) -> list:
        return [SimpleNamespace(content_hash=h, status=s) for h, s in self.statuses.items()]

    def register_buffer_file(self, content_hash: str, path: str | Path, rows: int | None, nbytes: int | None) -> bool:
        if content_hash in self.statuses:
            return False
        self.statuses[content_hash] = "pending"
        self.events.append({"op": "register", "content_hash": content_hash, "path": str(path), "rows": rows, "bytes": nbytes})
        return True

    def quarantine_buffer_file(self, content_hash: str, path: str | Path, reason: str, nbytes: int | None = None) -> None:
        self.statuses[content_hash] = "quarantined"
        self.events.append({"op": "quarantine", "content_hash": content_hash, "path": str(path), "reason": reason, "bytes": nbytes})


def apply_registry_events(lineage: Lineage, events: list[dict]) -> None:
    """Write what a `DeferredRegistry` recorded (idempotent: registering known content is a no-op)."""
    for e in events:
        if e["op"] == "register":
            lineage.register_buffer_file(e["content_hash"], e["path"], e["rows"], e["bytes"])
        elif e["op"] == "quarantine":
            lineage.quarantine_buffer_file(e["content_hash"], e["path"], e["reason"], e["bytes"])
        else:
            raise ValueError(f"unknown registry event {e['op']!r}")


def flush_buffer(ws: Workspace) -> None:
    """Replay the write-ahead logs of stopped writers into parquet files (before listing them)."""
    if ws.buffers.is_dir():
        MemoryBuffer(ws.buffers).close(flush=True)


def buffer_files(ws: Workspace) -> list[Path]:
    """The buffer's parquet files in the order every rank agrees on."""
    return sorted(p for p in ws.buffers.glob("*.parquet") if not p.name.startswith(".")) if ws.buffers.is_dir() else []


def ingest(
    ws: Workspace, lineage: Lineage | DeferredRegistry, rank: int = 0, world_size: int = 1, flush: bool = True,
    files: list[Path] | None = None,
) -> IngestResult:
    """Documents of the pending buffer files of this rank, in file order then row order
    (`files`: the full sorted list to split, default the buffer folder's files)."""
    if flush:
        flush_buffer(ws)
    files = buffer_files(ws) if files is None else [Path(f) for f in files]
    files = files[rank::world_size]
    status = {b.content_hash: b.status for b in lineage.buffer_files()}
    out = IngestResult()
    counts = out.counts
    for k, path in enumerate(files):
        file_pos = rank + k * world_size
        _bump(counts, "files")
        digest = content_hash(path)
        known = status.get(digest)
        if known in ("consumed", "quarantined"):
            _bump(counts, f"files_already_{known}")
            continue
        try:
            table = _read(path)
        except Exception as exc:  # corrupt parquet, wrong schema, empty: never fatal to the night
            quarantine_file(ws, lineage, path, digest, f"{type(exc).__name__}: {exc}")
            _bump(counts, "files_quarantined")
            continue
        texts = table.column("text").to_pylist()
        ids = table.column("id").to_pylist() if "id" in table.column_names else [None] * len(texts)
        sources = table.column("source").to_pylist() if "source" in table.column_names else [None] * len(texts)
        bad = [i for i, t in enumerate(texts) if t is None or not t.strip()]
        if bad:
            ws.quarantine.mkdir(parents=True, exist_ok=True)
            pq.write_table(table.take(bad), ws.quarantine / f"{path.stem}.bad-rows.parquet")
            (ws.quarantine / f"{path.stem}.bad-rows.reason.json").write_text(
                json.dumps({"file": path.name, "content_hash": digest, "rows": bad, "reason": "null or blank text"}, indent=1)
            )
            _bump(counts, "rows_quarantined", len(bad))
        bad_set = set(bad)
        if known is None:
            lineage.register_buffer_file(digest, path, table.num_rows, path.stat().st_size)
        out.file_hashes.append(digest)
        for i, text in enumerate(texts):
            if i in bad_set:
                continue
            out.ids.append(ids[i] or f"{digest[:16]}:{i}")
            out.texts.append(text)
            out.sources.append(sources[i])
            out.order.append((file_pos << 32) | i)
        _bump(counts, "files_ingested")
        _bump(counts, "rows_in", table.num_rows)
    counts["docs_out"] = len(out.texts)
    return out


def atomic_write_table(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
