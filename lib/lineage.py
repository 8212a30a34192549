"""The registry: one DuckDB file that says what exists and in which state.

- Tables: buffer files (content hash, rows, pending / consumed by which version / quarantined),
  checkpoint versions, aliases (`champion`, `latest`), runs, manifests, metrics, gate decisions.
- The schema carries a version (`schema_version`); `MIGRATIONS[i]` takes a file from version i to
  i + 1, applied in one transaction when the file is opened, so an old workspace upgrades itself.
- Every write that changes more than one row runs in a transaction (`Lineage.transaction()`):
  a crash leaves either all of a version's records or none.
- DuckDB lets one process at a time hold the file open for writing, so connections are short:
  opened per operation, retried for a while when another process holds the lock.

Trade-off: short connections cost ~1 ms each, negligible next to a nightly run, and let the
server, the CLI and the flow share the file without a daemon.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import duckdb

SCHEMA_VERSION = 1

# MIGRATIONS[i] upgrades a file at schema version i to i + 1. Version 0 is an empty file.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE buffer_files (
            content_hash VARCHAR PRIMARY KEY,   -- xxh3-128 hex of the file's bytes
            path VARCHAR NOT NULL,
            rows BIGINT,
            bytes BIGINT,
            status VARCHAR NOT NULL,            -- pending | consumed | quarantined
            reason VARCHAR,                     -- why quarantined
            run_id VARCHAR,                     -- the run that last ingested it
            consumed_by VARCHAR,                -- version that consumed it
            registered_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL
        )""",
        """CREATE TABLE versions (
            version VARCHAR PRIMARY KEY,
            parent VARCHAR,
            path VARCHAR NOT NULL,
            digest VARCHAR,                     -- sha256 of model.safetensors
            status VARCHAR NOT NULL,            -- candidate | accepted | rejected
            run_id VARCHAR,
            storage VARCHAR,                    -- full | delta
            created_at TIMESTAMPTZ NOT NULL,
            meta JSON
        )""",
        """CREATE TABLE aliases (
            alias VARCHAR PRIMARY KEY,          -- champion | latest | ...
            version VARCHAR NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL
        )""",
        """CREATE TABLE alias_history (
            alias VARCHAR NOT NULL,
            version VARCHAR NOT NULL,
            previous VARCHAR,
            actor VARCHAR,                      -- gate | promote | rollback | bootstrap
            reason VARCHAR,
            moved_at TIMESTAMPTZ NOT NULL
        )""",
        """CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            flow_run_id VARCHAR,                -- orchestrator's id (Prefect flow run), if any
            kind VARCHAR,                       -- bootstrap | nightly | curate | train
            parent VARCHAR,
            version VARCHAR,                    -- version produced
            status VARCHAR NOT NULL,            -- running | completed | failed
            config JSON,
            code_version VARCHAR,
            timings JSON,
            started_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ
        )""",
        """CREATE TABLE run_inputs (
            run_id VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,      -- a buffer file the run trained on
            PRIMARY KEY (run_id, content_hash)
        )""",
        """CREATE TABLE manifests (
            manifest_hash VARCHAR PRIMARY KEY,
            run_id VARCHAR,
            path VARCHAR,
            stats JSON,
            created_at TIMESTAMPTZ NOT NULL
        )""",
        """CREATE TABLE metrics (
            version VARCHAR NOT NULL,
            dataset VARCHAR NOT NULL,           -- old_val | new_heldout | new_train | probes | ...
            metric VARCHAR NOT NULL,            -- bpb | loss | exact_match | ...
            value DOUBLE,
            run_id VARCHAR,
            recorded_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (version, dataset, metric)
        )""",
        """CREATE TABLE gate_decisions (
            version VARCHAR NOT NULL,
            run_id VARCHAR,
            passed BOOLEAN NOT NULL,
            rules JSON,                         -- each rule: measured value, limit, passed, reason
            actor VARCHAR,                      -- gate | person (override)
            decided_at TIMESTAMPTZ NOT NULL
        )""",
    ],
]


def now() -> datetime:
    return datetime.now(timezone.utc)


class LineageError(RuntimeError):
    """The registry refused an operation (unknown version, inconsistent state)."""


@dataclass(frozen=True)
class BufferFile:
    content_hash: str
    path: str
    rows: int | None
    bytes: int | None
    status: str
    reason: str | None
    run_id: str | None
    consumed_by: str | None


class Lineage:
    """Registry of one workspace. Cheap to construct; every method opens its own connection."""

    def __init__(self, db_path: str | Path, lock_timeout_s: float = 60.0):
        self.db_path = Path(db_path)
        self.lock_timeout_s = lock_timeout_s
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        with self.transaction() as con:
            self._migrate(con)

    # -- connections -------------------------------------------------------------------------
    def _connect(self, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.01
        while True:
            try:
                if read_only and not self.db_path.exists():
                    read_only = False
                return duckdb.connect(str(self.db_path), read_only=read_only)
            except duckdb.IOException as exc:  # another process holds the write lock
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All statements inside commit together or not at all."""
        con = self._connect()
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        finally:
            con.close()

    @contextlib.contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self._connect(read_only=True)
        try:
            yield con
        finally:
            con.close()

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL)")
        row = con.execute("SELECT max(version) FROM schema_version").fetchone()
        current = row[0] if row and row[0] is not None else 0
        if current > SCHEMA_VERSION:
            raise LineageError(
                f"{self.db_path} has schema version {current}, newer than this code's {SCHEMA_VERSION}: upgrade the package"
            )
        for version in range(current, SCHEMA_VERSION):
            for statement in MIGRATIONS[version]:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version + 1, now()])

    def schema_version(self) -> int:
        with self.reading() as con:
            return con.execute("SELECT max(version) FROM schema_version").fetchone()[0]

    # -- buffer files ------------------------------------------------------------------------
    def register_buffer_file(self, content_hash: str, path: str | Path, rows: int | None, nbytes: int | None) -> bool:
        """Record a buffer file as pending. False (and no change) if this content is known:
        the same bytes are never ingested twice, whatever the file is called."""
        with self.transaction() as con:
            if con.execute("SELECT 1 FROM buffer_files WHERE content_hash = ?", [content_hash]).fetchone():
                return False
            t = now()
            con.execute(
                "INSERT INTO buffer_files VALUES (?, ?, ?, ?, 'pending', NULL, NULL, NULL, ?, ?)",
                [content_hash, str(path), rows, nbytes, t, t],
            )
            return True

    def quarantine_buffer_file(self, content_hash: str, path: str | Path, reason: str, nbytes: int | None = None) -> None:
        """Record (or move) a file to quarantined with its reason."""
        with self.transaction() as con:
            t = now()
            if con.execute("SELECT 1 FROM buffer_files WHERE content_hash = ?", [content_hash]).fetchone():
                con.execute(
                    "UPDATE buffer_files SET status = 'quarantined', reason = ?, path = ?, updated_at = ? WHERE content_hash = ?",
                    [reason, str(path), t, content_hash],
                )
            else:
                con.execute(
                    "INSERT INTO buffer_files VALUES (?, ?, NULL, ?, 'quarantined', ?, NULL, NULL, ?, ?)",
                    [content_hash, str(path), nbytes, reason, t, t],
                )

    def buffer_files(self, status: str | None = None) -> list[BufferFile]:
        query = "SELECT content_hash, path, rows, bytes, status, reason, run_id, consumed_by FROM buffer_files"
        params: list[Any] = []
        if status is not None:
            query += " WHERE status = ?"
            params.append(status)
        query += " ORDER BY registered_at, path"
        with self.reading() as con:
            return [BufferFile(*row) for row in con.execute(query, params).fetchall()]

    def known_hashes(self) -> set[str]:
        with self.reading() as con:
            return {row[0] for row in con.execute("SELECT content_hash FROM buffer_files").fetchall()}

    def mark_consumed(self, content_hashes: list[str], version: str, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Pending files become consumed by `version`. Pass `con` to make it part of a larger
        transaction (promotion records the alias and the consumption together)."""
        if con is None:
            with self.transaction() as own:
                return self.mark_consumed(content_hashes, version, own)
        t = now()
        for h in content_hashes:
            con.execute(
                "UPDATE buffer_files SET status = 'consumed', consumed_by = ?, updated_at = ? WHERE content_hash = ? AND status = 'pending'",
                [version, t, h],
            )

    # -- versions and aliases ----------------------------------------------------------------
    def get_version(self, version: str) -> dict[str, Any] | None:
        with self.reading() as con:
            row = con.execute(
                "SELECT version, parent, path, digest, status, run_id, storage, created_at, meta FROM versions WHERE version = ?",
                [version],
            ).fetchone()
        if row is None:
            return None
        keys = ("version", "parent", "path", "digest", "status", "run_id", "storage", "created_at", "meta")
        out = dict(zip(keys, row))
        if isinstance(out["meta"], str):
            out["meta"] = json.loads(out["meta"])
        return out

    def alias(self, alias: str) -> str | None:
        """The version an alias (`champion`, `latest`) points at, or None."""
        with self.reading() as con:
            row = con.execute("SELECT version FROM aliases WHERE alias = ?", [alias]).fetchone()
        return row[0] if row else None

    def set_alias(
        self, alias: str, version: str, actor: str, reason: str = "", con: duckdb.DuckDBPyConnection | None = None
    ) -> None:
        """Point `alias` at `version` and record the move in alias_history (one transaction;
        pass `con` to join a larger one)."""
        if con is None:
            with self.transaction() as own:
                return self.set_alias(alias, version, actor, reason, own)
        if not con.execute("SELECT 1 FROM versions WHERE version = ?", [version]).fetchone():
            raise LineageError(f"unknown version {version!r}")
        prev = con.execute("SELECT version FROM aliases WHERE alias = ?", [alias]).fetchone()
        t = now()
        con.execute("DELETE FROM aliases WHERE alias = ?", [alias])
        con.execute("INSERT INTO aliases VALUES (?, ?, ?)", [alias, version, t])
        con.execute(
            "INSERT INTO alias_history VALUES (?, ?, ?, ?, ?, ?)", [alias, version, prev[0] if prev else None, actor, reason, t]
        )


def to_json(value: Any) -> str:
    """JSON for the registry's JSON columns (paths and datetimes as strings)."""
    return json.dumps(value, default=str, sort_keys=True)

