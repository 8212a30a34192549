"""Ingest: tonight's buffer files → validated documents, bad input quarantined, never twice.

- First the buffer's write-ahead logs of stopped writers are recovered into parquet files
  (`Buffer.flush`), so records that `add` returned for are part of the night.
- Every `buffers/*.parquet` file is identified by the xxh3-128 of its bytes, taken once per night
  (`inspect_buffer_file`; ingest and the cache keys reuse it). The lineage registry says whether
  that content was consumed or quarantined already (skipped: `select_pending`, the one rule) or
  is pending from a night that did not promote (used again). New content is registered as pending.
- A file is bad, and moved to `quarantine/` beside a `<name>.reason.json`, whenever reading it
  fully fails for any reason: not parquet, a corrupt footer or page, no `text` column, a `text`,
  `id` or `source` column that is not a string, invalid UTF-8 in any string column, no rows (the
  same rule as `consolidate buffer add`), or anything else pyarrow raises. The night goes on
  with the other files. Bad rows (`bad_rows`, the rule `buffer add` applies too: a null or blank
  text, a text over `buffer.max_text_bytes`) go to `quarantine/<name>.<hash>.bad-rows.parquet`
  with their reasons; the rest of the file goes on.
- Quarantined names never collide: a name already taken in `quarantine/` gets the content hash
  (and, if need be, a counter) before its suffix. The reason file is written before the move, so
  `record_quarantine` can put every quarantine into lineage later even if the process that made
  it failed, was retried or was killed right after the move (and finish a move a kill cut short).
- Files are split across `world_size` ranks by position in the sorted list (datatrove style).
  A rank running as its own task records its registry changes in a `DeferredRegistry` instead
  of writing the DuckDB file (one writing process at a time); `record_ingest` applies them, the
  one place they reach lineage.
  A file that is gone when its rank gets to it (a retried task whose first attempt quarantined
  it) is skipped and counted.

Trade-off: a file is read and checked whole before any of its rows is used (the UTF-8 check,
`Table.validate(full=True)`, ran at ~18 GB/s on the stdlib sources here: 160 MB in 9 ms), so
memory holds one whole file at a time; in exchange no file is ever half-used.
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

from lib.buffer.store import Buffer
from lib.buffer.records import InvalidRecordError, content_hash, validate_text
from lib.files import atomic_path, write_json
from lib.registry.lineage import Lineage
from lib.registry.records import portable_path
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


def _free_name(folder: Path, name: str, digest: str) -> Path:
    """`name` in `folder` if free, else `<stem>.<hash12><suffix>`, then with a counter."""
    stem, dot, suffix = name.partition(".")
    suffix = dot + suffix
    for k in range(1_000_000):
        candidate = folder / (name if k == 0 else f"{stem}.{digest[:12]}{'' if k == 1 else f'.{k}'}{suffix}")
        if not candidate.exists() and not _reason_path(candidate).exists():
            return candidate
    raise FileExistsError(f"no free name for {name} in {folder}")


def _reason_path(target: Path) -> Path:
    return target.with_name(f"{target.name}.reason.json")


def quarantine_file(ws: Workspace, lineage, path: Path, digest: str, reason: str) -> Path:
    """Move a bad buffer file out of the buffer under a free name, with its reason beside it
    (written first: a kill between the two leaves a reason that `record_quarantine` acts on)."""
    ws.quarantine.mkdir(parents=True, exist_ok=True)
    target = _free_name(ws.quarantine, path.name, digest)
    nbytes = path.stat().st_size

    write_json(_reason_path(target), {"file": path.name, "from": portable_path(path, ws.root), "quarantined_as": target.name,
                                      "content_hash": digest, "bytes": nbytes, "reason": reason}, indent=1)
    shutil.move(str(path), target)
    lineage.quarantine_buffer_file(digest, target, reason, nbytes)
    return target


def record_quarantine(ws: Workspace, lineage: Lineage) -> int:
    """Put into lineage every quarantined file whose reason file it does not know yet, finishing a
    move a kill cut short. Idempotent; returns how many it recorded."""
    if not ws.quarantine.is_dir():
        return 0
    known = {b.content_hash for b in lineage.buffer_files("quarantined")}
    recorded = 0
    for reason_file in sorted(ws.quarantine.glob("*.reason.json")):
        try:
            info = json.loads(reason_file.read_text())
            digest, name = info["content_hash"], info["quarantined_as"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a bad-rows note, or not ours
        if digest in known:
            continue
        target, source = ws.quarantine / name, Path(info.get("from") or "")
        if source.is_absolute() and ws.root not in source.parents:  # written before the workspace moved
            source = ws.buffers / source.name
        elif not source.is_absolute():
            source = ws.root / source
        if not target.exists() and source.is_file() and content_hash(source) == digest:
            shutil.move(str(source), target)
        lineage.quarantine_buffer_file(digest, target, info["reason"], info.get("bytes"))
        recorded += 1
    return recorded


class BadBufferFile(ValueError):
    """A buffer file that reads but breaks the contract (columns, types, rows, encoding)."""


def _string_column(table: pa.Table, name: str, required: bool) -> pa.Table:
    """`table` with column `name` as plain strings, or BadBufferFile naming its type."""
    if name not in table.column_names:
        if required:
            raise BadBufferFile(f"no `{name}` column (columns: {', '.join(table.column_names) or 'none'})")
        return table
    t = table.schema.field(name).type
    if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        return table.set_column(table.column_names.index(name), name, table.column(name).cast(pa.string()))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or (not required and pa.types.is_null(t)):
        return table
    raise BadBufferFile(f"`{name}` column has type {t}, expected string")


def read_buffer_table(path: Path) -> tuple[pa.Table, list[str | None], list[str | None], list[str | None]]:
    """A buffer file fully read and checked: (table, texts, ids, sources). Any problem raises
    (BadBufferFile with the reason, or whatever pyarrow raised); nothing is half-read."""
    table = pq.read_table(path)
    for name, required in (("text", True), ("id", False), ("source", False)):
        table = _string_column(table, name, required)
    if table.num_rows == 0:
        raise BadBufferFile("no rows (a buffer file must hold at least one record)")
    try:
        table.validate(full=True)  # invalid UTF-8 anywhere, broken offsets
    except pa.ArrowInvalid as exc:
        raise BadBufferFile(f"invalid data, e.g. text that is not UTF-8 ({exc})") from None
    texts = table.column("text").to_pylist()
    ids = table.column("id").to_pylist() if "id" in table.column_names else [None] * len(texts)
    sources = table.column("source").to_pylist() if "source" in table.column_names else [None] * len(texts)
    return table, texts, ids, sources


DEFAULT_MAX_TEXT_BYTES = 10_000_000  # buffer.max_text_bytes's default


def bad_rows(texts: list, max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> dict[int, str]:
    """The one rule for the rows of a buffer file, whichever way it arrives (`consolidate buffer
    add`, or dropped into `buffers/` and ingested by a night): {row: reason} of every row that
    cannot be a record: a null, empty or whitespace-only text, or a text over `max_text_bytes`
    in UTF-8 (buffer.max_text_bytes). Such rows are set aside with their reasons and the rest of
    the file is used; a problem with the file itself (`read_buffer_table`) refuses it whole."""
    out = {}
    for i, text in enumerate(texts):
        if text is None:
            out[i] = "null text"
            continue
        try:
            validate_text(text, max_text_bytes, "text")
        except InvalidRecordError as exc:
            out[i] = str(exc)
    return out


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
    """Recover the write-ahead logs of stopped writers into parquet files (before listing them)."""
    if ws.buffers.is_dir():
        Buffer(ws.buffers).close(flush=True)


def buffer_files(ws: Workspace) -> list[Path]:
    """The buffer's parquet files in the order every rank agrees on."""
    return sorted(p for p in ws.buffers.glob("*.parquet") if not p.name.startswith(".")) if ws.buffers.is_dir() else []


def inspect_buffer_file(path: str | Path) -> dict:
    """Path, content hash, rows and bytes of one buffer file: the one read that identifies it for
    the night (registry, cache keys, ingest). An unreadable file is reported (`error`), not
    raised: ingest quarantines it with the reason."""
    info: dict = {"path": str(path), "bytes": os.path.getsize(path), "content_hash": content_hash(path)}
    try:
        info["rows"], info["error"] = pq.ParquetFile(path).metadata.num_rows, None
    except Exception as exc:  # a torn or foreign file: counted here, quarantined by ingest
        info["rows"], info["error"] = None, f"{type(exc).__name__}: {exc}"
    return info


def select_pending(inspected: list[dict], statuses: dict[str, str]) -> tuple[list[dict], dict[str, int]]:
    """The night's input: the inspected files the registry (`statuses`: content hash → status)
    does not know as consumed or quarantined (never consume twice), sorted by path, each with its
    registry `status` (pending, or None: new); and the counts of the choice."""
    skip = ("consumed", "quarantined")
    pending = sorted(({**i, "status": statuses.get(i["content_hash"])} for i in inspected
                      if statuses.get(i["content_hash"]) not in skip), key=lambda i: i["path"])
    counts = {
        "files": len(inspected),
        "pending": len(pending),
        "already_consumed": sum(1 for i in inspected if statuses.get(i["content_hash"]) == "consumed"),
        "already_quarantined": sum(1 for i in inspected if statuses.get(i["content_hash"]) == "quarantined"),
        "unreadable": sum(1 for i in pending if i["error"]),
        "rows": sum(i["rows"] or 0 for i in pending),
        "bytes": sum(i["bytes"] for i in pending),
    }
    return pending, counts


def pending_buffer_files(ws: Workspace, lineage: Lineage) -> tuple[list[dict], dict[str, int]]:
    """In one process: the buffer's logs flushed, every file inspected (hashed once), the pending
    ones chosen (`select_pending`). The curation flow runs the same three as tasks."""
    flush_buffer(ws)
    inspected = [inspect_buffer_file(p) for p in buffer_files(ws)]
    return select_pending(inspected, {b.content_hash: b.status for b in lineage.buffer_files()})


def record_ingest(ws: Workspace, lineage: Lineage, events: list[dict]) -> int:
    """The one place registry changes of ingest reach lineage: the events the ranks recorded,
    then every quarantine lineage does not know yet (made by a rank that failed or was killed
    before its events were applied). Idempotent; returns how many quarantines were late."""
    apply_registry_events(lineage, events)
    return record_quarantine(ws, lineage)


def ingest(
    ws: Workspace, lineage: Lineage | DeferredRegistry, rank: int = 0, world_size: int = 1, flush: bool = True,
    files: list[Path] | None = None, digests: dict[str, str] | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
) -> IngestResult:
    """Documents of the pending buffer files of this rank, in file order then row order
    (`files`: the full sorted list to split, default the buffer folder's files; `digests`: the
    content hashes already known by path, so a file is not hashed again). Rows `bad_rows` refuses
    go to quarantine with their reasons."""
    if flush:
        flush_buffer(ws)
    files = buffer_files(ws) if files is None else [Path(f) for f in files]
    files = files[rank::world_size]
    digests = digests or {}
    status = {b.content_hash: b.status for b in lineage.buffer_files()}
    out = IngestResult()
    counts = out.counts
    for k, path in enumerate(files):
        file_pos = rank + k * world_size
        _bump(counts, "files")
        if not path.is_file():  # a retried task: its first attempt quarantined it already
            _bump(counts, "files_gone")
            continue
        digest = digests.get(str(path)) or content_hash(path)
        known = status.get(digest)
        if known in ("consumed", "quarantined"):
            _bump(counts, f"files_already_{known}")
            continue
        try:
            table, texts, ids, sources = read_buffer_table(path)
        except Exception as exc:  # never fatal to the night: the file goes, with its reason
            quarantine_file(ws, lineage, path, digest, f"{type(exc).__name__}: {exc}")
            _bump(counts, "files_quarantined")
            continue
        reasons = bad_rows(texts, max_text_bytes)
        bad = sorted(reasons)
        if bad:
            ws.quarantine.mkdir(parents=True, exist_ok=True)
            rows_file = ws.quarantine / f"{path.stem}.{digest[:12]}.bad-rows.parquet"
            if not rows_file.exists():  # same content, same bad rows: written once
                atomic_write_table(table.take(bad), rows_file)
                write_json(_reason_path(rows_file), {"file": path.name, "content_hash": digest, "rows": bad,
                                                      "reason": "; ".join(sorted(set(reasons.values()))),
                                                      "reasons": {str(i): reasons[i] for i in bad}}, indent=1)
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


def atomic_write_table(table: pa.Table, path: Path, **options) -> None:
    """`table` to `path` through a temporary file and a rename; `options`: pq.write_table's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **options)
