"""The registry: one DuckDB file that says what exists and in which state.

- Tables: buffer files (content hash, rows, pending / consumed by which version / quarantined),
  checkpoint versions, aliases (`champion`, `latest`), runs, manifests, metrics, gate decisions.
- The schema carries a version (`schema_version`); `MIGRATIONS[i]` takes a file from version i to
  i + 1, applied in one transaction when the file is opened, so an old workspace upgrades itself.
- Every write that changes more than one row runs in a transaction (`Lineage.transaction()`):
  a crash leaves either all of a version's records or none.
- DuckDB lets one process at a time hold the file open for writing, so connections are short:
  opened per operation, retried for a while when another process holds the lock.
- A night records: `start_run` -> `record_version` (the version row, its run's buffer files,
  manifest and both sides' metrics, together) -> `lib.promotion.conclude` (decision, status,
  aliases, consumption, together) -> `finish_run`. Every write is an upsert keyed by run id /
  version, and `next_version(run_id)` hands a replayed run its own id again, so re-running a
  night killed between any two steps completes it without duplicate rows.
- Reading: `versions()`, `ancestry(v)` (back to the root, with data, metrics, decisions),
  `diff(a, b)`, `metrics(v, run_id)`, `alias_history()`.

Trade-off: short connections cost ~1 ms each, negligible next to a nightly run, and let the
server, the CLI and the flow share the file without a daemon.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import duckdb

from lib.files import file_hash

SCHEMA_VERSION = 4

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
            status VARCHAR NOT NULL,            -- candidate | accepted | rejected | rolled_back
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
            run_id VARCHAR NOT NULL,            -- the run that measured it ('' if none): a night
                                                -- measures parent and candidate on ITS data
            version VARCHAR NOT NULL,
            dataset VARCHAR NOT NULL,           -- old_val | new_heldout | new_train | probes | ...
            metric VARCHAR NOT NULL,            -- bpb | loss | exact_match | ...
            value DOUBLE,
            recorded_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, version, dataset, metric)
        )""",
        """CREATE TABLE gate_decisions (
            version VARCHAR NOT NULL,
            run_id VARCHAR,
            passed BOOLEAN NOT NULL,
            rules JSON,                         -- each rule: measured value, limit, passed, reason
            actor VARCHAR NOT NULL,             -- gate | person (override)
            reason VARCHAR,                     -- a person's reason for an override
            decided_at TIMESTAMPTZ NOT NULL
        )""",
    ],
    [
        """CREATE TABLE corpora (
            name VARCHAR PRIMARY KEY,           -- folder under corpora/
            kind VARCHAR NOT NULL,              -- stdlib | replay | generated
            content_hash VARCHAR,               -- sha256 over the shards' content hashes
            docs BIGINT,
            bytes BIGINT,
            info JSON,                          -- corpus.json: inputs, splits, rejected files and why
            created_at TIMESTAMPTZ NOT NULL
        )""",
    ],
    [
        """CREATE TABLE memory_nights (
            version VARCHAR PRIMARY KEY,        -- the accepted version that learned this night
            run_id VARCHAR,
            path VARCHAR NOT NULL,              -- <workspace>/memory/<version>/
            docs BIGINT,                        -- trained documents, replayed on later nights
            heldout_docs BIGINT,                -- this night's retention eval set
            heldout_cut VARCHAR,                -- the night's held-out hash cut (uint64 as text)
            added_at TIMESTAMPTZ NOT NULL
        )""",
        """CREATE TABLE memory_exposures (
            night VARCHAR NOT NULL,             -- memory_nights.version the document came with
            doc_id VARCHAR NOT NULL,
            exposures BIGINT NOT NULL,          -- times drawn into accepted trainings, its own night included
            last_version VARCHAR,               -- the last accepted version that trained on it
            PRIMARY KEY (night, doc_id)
        )""",
    ],
    [
        """CREATE TABLE rollouts (
            version VARCHAR NOT NULL,           -- the champion pushed (or not) to the serving engine
            kind VARCHAR NOT NULL,              -- none | command | sglang | vllm (serve.rollout.kind)
            target VARCHAR,                     -- the engine's URL, or the command line
            status VARCHAR NOT NULL,            -- live | failed | skipped
            detail VARCHAR,                     -- the engine's answer, or why not live
            attempt INTEGER NOT NULL,           -- 1, 2, ... (a failed push is retried)
            run_id VARCHAR,                     -- the night (or '' for a push by hand)
            started_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ NOT NULL
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


@contextlib.contextmanager
def _ctrl_c_stays_ctrl_c() -> Iterator[None]:
    """DuckDB turns a SIGINT that lands during a query into `RuntimeError: Query interrupted`
    (duckdb 2.0). Raise it as the KeyboardInterrupt it was, so a Ctrl-C'd night is left stopped
    for the next trigger to resume, not closed as failed, and the CLI exits 130."""
    try:
        yield
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt from exc
    except RuntimeError as exc:
        if str(exc).startswith("Query interrupted"):
            raise KeyboardInterrupt from exc
        raise


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
            except duckdb.ConnectionException as exc:
                # This process already has the file open with the other mode (a transaction in
                # another thread, or a read inside a transaction): a read shares the read-write
                # instance; a write waits for the read-only connection to close.
                if "different configuration" not in str(exc):
                    raise
                if read_only:
                    read_only = False
                    continue
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All statements inside commit together or not at all."""
        with _ctrl_c_stays_ctrl_c():
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
        with _ctrl_c_stays_ctrl_c():
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

    def resolve_version(self, name: str) -> str:
        """A version id or an alias (`champion`, `latest`) -> the version id; unknown: LineageError."""
        with self.reading() as con:
            row = con.execute("SELECT version FROM aliases WHERE alias = ?", [name]).fetchone()
            if row:
                return row[0]
            if con.execute("SELECT 1 FROM versions WHERE version = ?", [name]).fetchone():
                return name
        raise LineageError(f"unknown version or alias {name!r} in {self.db_path}: see `consolidate lineage ls`")

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

    # -- runs --------------------------------------------------------------------------------
    def start_run(
        self,
        run_id: str,
        kind: str = "nightly",
        parent: str | None = None,
        flow_run_id: str | None = None,
        config: dict[str, Any] | None = None,
        code_version: str | None = None,
    ) -> None:
        """Record a run as running. Idempotent: re-running a night with the same run id updates
        the one row (keeping its first start time) instead of adding a second."""
        with self.transaction() as con:
            t = now()
            con.execute(
                """INSERT INTO runs VALUES (?, ?, ?, ?, NULL, 'running', ?, ?, NULL, ?, NULL)
                   ON CONFLICT (run_id) DO UPDATE SET flow_run_id = coalesce(excluded.flow_run_id, runs.flow_run_id),
                     kind = excluded.kind, parent = excluded.parent, status = 'running',
                     config = coalesce(excluded.config, runs.config),
                     code_version = coalesce(excluded.code_version, runs.code_version), finished_at = NULL""",
                [run_id, flow_run_id, kind, parent, None if config is None else to_json(config), code_version or code_version_string(), t],
            )

    def finish_run(self, run_id: str, status: str = "completed", version: str | None = None, timings: dict[str, float] | None = None) -> None:
        """Close a run; `timings` (stage -> seconds) merge into what earlier attempts recorded."""
        if status not in ("completed", "failed"):
            raise LineageError(f"run status {status!r}: expected completed or failed")
        with self.transaction() as con:
            row = con.execute("SELECT timings FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise LineageError(f"unknown run {run_id!r}: start_run first")
            merged = {**_json(row[0] or "{}"), **(timings or {})}
            con.execute(
                "UPDATE runs SET status = ?, version = coalesce(?, version), timings = ?, finished_at = ? WHERE run_id = ?",
                [status, version, to_json(merged), now(), run_id],
            )

    def incomplete_runs(self, kind: str | None = "nightly") -> list[dict[str, Any]]:
        """Runs still marked running (the process died), oldest first, each with the status of the
        version it recorded (None: killed before its candidate was recorded). A night that finds
        one resumes it under the same run id instead of starting a second."""
        query = """SELECT r.run_id, r.version, v.status, r.started_at FROM runs r
                   LEFT JOIN versions v ON v.version = r.version WHERE r.status = 'running'"""
        params: list[Any] = []
        if kind is not None:
            query += " AND r.kind = ?"
            params.append(kind)
        with self.reading() as con:
            rows = con.execute(query + " ORDER BY r.started_at", params).fetchall()
        return [dict(zip(("run_id", "version", "version_status", "started_at"), r)) for r in rows]

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self.reading() as con:
            return _run_row(con, run_id)

    def record_inputs(self, run_id: str, content_hashes: list[str], con: duckdb.DuckDBPyConnection | None = None) -> None:
        """The buffer files (by content hash) a run trains on. Re-recording is a no-op."""
        if con is None:
            with self.transaction() as own:
                return self.record_inputs(run_id, content_hashes, own)
        for h in content_hashes:
            con.execute("INSERT INTO run_inputs VALUES (?, ?) ON CONFLICT DO NOTHING", [run_id, h])

    def run_inputs(self, run_id: str) -> list[BufferFile]:
        with self.reading() as con:
            return _inputs(con, run_id)

    def record_manifest(
        self, manifest_hash: str, run_id: str | None, path: str | Path | None, stats: dict[str, Any] | None = None,
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        if con is None:
            with self.transaction() as own:
                return self.record_manifest(manifest_hash, run_id, path, stats, own)
        con.execute(
            """INSERT INTO manifests VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (manifest_hash) DO UPDATE SET run_id = excluded.run_id, path = excluded.path, stats = excluded.stats""",
            [manifest_hash, run_id, None if path is None else str(path), to_json(stats or {}), now()],
        )

    # -- corpora -----------------------------------------------------------------------------
    def record_corpus(self, name: str, kind: str, info: dict[str, Any]) -> None:
        """A replay corpus as ingested (`info` is its corpus.json); re-recording replaces it."""
        digest = hashlib.sha256("".join(s.get("hash", "") for s in info.get("shards", [])).encode()).hexdigest()
        with self.transaction() as con:
            con.execute(
                """INSERT INTO corpora VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, content_hash = excluded.content_hash,
                     docs = excluded.docs, bytes = excluded.bytes, info = excluded.info""",
                [name, kind, digest, info.get("docs"), info.get("bytes"), to_json(info), now()],
            )

    def corpus(self, name: str) -> dict[str, Any] | None:
        with self.reading() as con:
            row = con.execute("SELECT name, kind, content_hash, docs, bytes, info, created_at FROM corpora WHERE name = ?",
                              [name]).fetchone()
        if row is None:
            return None
        out = dict(zip(("name", "kind", "content_hash", "docs", "bytes", "info", "created_at"), row))
        if isinstance(out["info"], str):
            out["info"] = json.loads(out["info"])
        return out

    # -- the memory: accepted nights, replayed ---------------------------------------------------
    def record_memory_night(self, version: str, run_id: str | None, path: str | Path, docs: int, heldout_docs: int,
                            heldout_cut: int, exposures: dict[str, int]) -> None:
        """An accepted night joins the memory: its row and the first exposures of its documents,
        in one transaction (idempotent: a replayed promotion records it once)."""
        with self.transaction() as con:
            if con.execute("SELECT 1 FROM memory_nights WHERE version = ?", [version]).fetchone():
                return
            con.execute("INSERT INTO memory_nights VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [version, run_id, str(path), docs, heldout_docs, str(heldout_cut), now()])
            self._add_exposures(con, version, version, exposures)

    def record_replay_exposures(self, version: str, by_night: dict[str, dict[str, int]]) -> None:
        """Documents of earlier nights that `version` (accepted) trained on again, and how often.
        Idempotent per version: a second call for the same version adds nothing."""
        with self.transaction() as con:
            if con.execute("SELECT 1 FROM memory_exposures WHERE last_version = ? AND night <> ? LIMIT 1",
                           [version, version]).fetchone():
                return
            for night, counts in by_night.items():
                self._add_exposures(con, night, version, counts)

    @staticmethod
    def _add_exposures(con, night: str, version: str, counts: dict[str, int]) -> None:
        rows = [(night, d, int(n), version) for d, n in counts.items() if n]
        if rows:
            con.executemany(
                """INSERT INTO memory_exposures VALUES (?, ?, ?, ?)
                   ON CONFLICT (night, doc_id) DO UPDATE SET exposures = memory_exposures.exposures + excluded.exposures,
                     last_version = excluded.last_version""", rows)

    def memory_nights(self) -> list[dict[str, Any]]:
        """Accepted nights in the order they were learnt (oldest first)."""
        with self.reading() as con:
            rows = con.execute("SELECT version, run_id, path, docs, heldout_docs, heldout_cut, added_at FROM memory_nights "
                               "ORDER BY added_at, version").fetchall()
        keys = ("version", "run_id", "path", "docs", "heldout_docs", "heldout_cut", "added_at")
        return [{**dict(zip(keys, r)), "heldout_cut": int(r[5])} for r in rows]

    def memory_exposures(self) -> dict[tuple[str, str], int]:
        """{(night, doc_id): exposures} of every document in the memory."""
        with self.reading() as con:
            return {(n, d): int(e) for n, d, e in con.execute("SELECT night, doc_id, exposures FROM memory_exposures").fetchall()}

    def forget_memory_night(self, version: str) -> None:
        """A rolled-back night leaves the memory (its documents are no longer replayed)."""
        with self.transaction() as con:
            con.execute("DELETE FROM memory_exposures WHERE night = ?", [version])
            con.execute("DELETE FROM memory_nights WHERE version = ?", [version])

    def root_version(self) -> str | None:
        """The first version of the lineage (v0: adopted or pre-trained)."""
        with self.reading() as con:
            row = con.execute("SELECT version FROM versions WHERE parent IS NULL ORDER BY created_at LIMIT 1").fetchone()
        return row[0] if row else None

    # -- versions ----------------------------------------------------------------------------
    def next_version(self, run_id: str | None = None) -> str:
        """`vN` after the highest recorded N (`v0` on an empty registry). With `run_id`, the
        version that run already recorded, if any: a re-run of a night reuses its version id."""
        with self.reading() as con:
            if run_id is not None:
                row = con.execute("SELECT version FROM versions WHERE run_id = ? ORDER BY created_at LIMIT 1", [run_id]).fetchone()
                if row:
                    return row[0]
            numbers = [int(v[1:]) for (v,) in con.execute("SELECT version FROM versions").fetchall() if v[:1] == "v" and v[1:].isdigit()]
        return f"v{max(numbers) + 1 if numbers else 0}"

    def record_version(
        self,
        version: str,
        path: str | Path,
        *,
        parent: str | None = None,
        run_id: str | None = None,
        status: str = "candidate",
        digest: str | None = None,
        storage: str | None = None,
        meta: dict[str, Any] | None = None,
        inputs: list[str] | None = None,
        manifest: dict[str, Any] | None = None,
        metrics: dict[str, dict[str, dict[str, float]]] | None = None,
    ) -> None:
        """Everything about a new version in ONE transaction: its row, the buffer files its run
        trained on, its manifest (`{"hash", "path", "stats"}`) and metrics
        (`{version: {dataset: {metric: value}}}`, e.g. parent and candidate). A crash leaves all
        of it or none. Re-recording the same version from the same run replaces it (idempotent);
        a version id taken by another run is refused."""
        if status not in ("candidate", "accepted", "rejected"):
            raise LineageError(f"version status {status!r}: expected candidate, accepted or rejected")
        with self.transaction() as con:
            row = con.execute("SELECT run_id, status FROM versions WHERE version = ?", [version]).fetchone()
            if row is not None and row[0] != run_id:
                raise LineageError(f"version {version!r} was already recorded by run {row[0]!r}; ask next_version() for a free id")
            if parent is not None and not con.execute("SELECT 1 FROM versions WHERE version = ?", [parent]).fetchone():
                raise LineageError(f"parent version {parent!r} of {version!r} is not recorded")
            if row is not None and row[1] != "candidate":
                status = row[1]  # a decided version keeps its decision when a night is replayed
            con.execute(
                """INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (version) DO UPDATE SET parent = excluded.parent, path = excluded.path,
                     digest = excluded.digest, status = excluded.status, storage = excluded.storage, meta = excluded.meta""",
                [version, parent, str(path), digest, status, run_id, storage, now(), to_json(meta or {})],
            )
            if run_id is not None:
                con.execute("UPDATE runs SET version = ? WHERE run_id = ?", [version, run_id])
                self.record_inputs(run_id, list(inputs or []), con)
            if manifest is not None:
                self.record_manifest(manifest["hash"], run_id, manifest.get("path"), manifest.get("stats"), con)
            for v, by_dataset in (metrics or {}).items():
                self.record_metrics(v, by_dataset, run_id, con)

    def set_status(self, version: str, status: str, con: duckdb.DuckDBPyConnection) -> None:
        con.execute("UPDATE versions SET status = ? WHERE version = ?", [status, version])

    def set_storage(self, version: str, storage: str) -> None:
        """full | delta, after `lib.checkpoint.store_version` compacted (or kept) the weights."""
        with self.transaction() as con:
            if not con.execute("SELECT 1 FROM versions WHERE version = ?", [version]).fetchone():
                raise LineageError(f"unknown version {version!r}")
            con.execute("UPDATE versions SET storage = ? WHERE version = ?", [storage, version])

    def versions(self) -> list[dict[str, Any]]:
        """All versions in creation order, each with the aliases that point at it."""
        with self.reading() as con:
            rows = con.execute(f"SELECT {_VERSION_COLS} FROM versions ORDER BY created_at, version").fetchall()
            aliases = con.execute("SELECT alias, version FROM aliases ORDER BY alias").fetchall()
        out = [_version_dict(r) for r in rows]
        for v in out:
            v["aliases"] = [a for a, target in aliases if target == v["version"]]
        return out

    # -- rollouts (what went live on the serving engine) -------------------------------------
    def record_rollout(self, version: str, kind: str, target: str | None, status: str, detail: str | None,
                       attempt: int, run_id: str | None, started_at: datetime) -> None:
        """One push of `version` to the serving engine: live, failed (with why) or skipped."""
        if status not in ("live", "failed", "skipped"):
            raise ValueError(f"rollout status must be live, failed or skipped, got {status!r}")
        with self.transaction() as con:
            con.execute("INSERT INTO rollouts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [version, kind, target, status, detail, attempt, run_id or "", started_at, now()])

    def rollouts(self, version: str | None = None) -> list[dict[str, Any]]:
        """Every push attempt, oldest first (of `version` only, if given)."""
        cols = ("version", "kind", "target", "status", "detail", "attempt", "run_id", "started_at", "finished_at")
        query = f"SELECT {', '.join(cols)} FROM rollouts"
        params: list[Any] = []
        if version is not None:
            query += " WHERE version = ?"
            params.append(version)
        with self.reading() as con:
            rows = con.execute(query + " ORDER BY finished_at, attempt", params).fetchall()
        return [dict(zip(cols, r)) for r in rows]

    # -- metrics and decisions ---------------------------------------------------------------
    def record_metrics(
        self, version: str, metrics: dict[str, dict[str, float]], run_id: str | None = None,
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        """Upsert {dataset: {metric: value}} for `version` as measured by `run_id`."""
        if con is None:
            with self.transaction() as own:
                return self.record_metrics(version, metrics, run_id, own)
        t = now()
        for dataset, values in metrics.items():
            for metric, value in values.items():
                con.execute(
                    """INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)
                       ON CONFLICT (run_id, version, dataset, metric) DO UPDATE SET value = excluded.value, recorded_at = excluded.recorded_at""",
                    [run_id or "", version, dataset, metric, None if value is None else float(value), t],
                )

    def metrics(self, version: str, run_id: str | None = None) -> dict[str, dict[str, float]]:
        """{dataset: {metric: value}} of `version`, measured by `run_id` (default: every run,
        the latest value of each metric winning)."""
        with self.reading() as con:
            return _metrics(con, version, run_id)

    def record_gate_decision(
        self, version: str, decision: dict[str, Any], run_id: str | None = None, actor: str = "gate",
        reason: str | None = None, con: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        """The gate's decision replaces an earlier gate decision on the same version (a replayed
        night); a person's override is always added."""
        if con is None:
            with self.transaction() as own:
                return self.record_gate_decision(version, decision, run_id, actor, reason, own)
        if actor == "gate":
            con.execute("DELETE FROM gate_decisions WHERE version = ? AND actor = 'gate'", [version])
        con.execute(
            "INSERT INTO gate_decisions VALUES (?, ?, ?, ?, ?, ?, ?)",
            [version, run_id, bool(decision["passed"]), to_json(decision.get("rules", [])), actor, reason, now()],
        )

    def gate_decisions(self, version: str) -> list[dict[str, Any]]:
        with self.reading() as con:
            return _decisions(con, version)

    def alias_history(self, alias: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT alias, version, previous, actor, reason, moved_at FROM alias_history"
        params: list[Any] = []
        if alias is not None:
            query += " WHERE alias = ?"
            params.append(alias)
        with self.reading() as con:
            rows = con.execute(query + " ORDER BY moved_at", params).fetchall()
        return [dict(zip(("alias", "version", "previous", "actor", "reason", "moved_at"), r)) for r in rows]

    # -- reading the history -----------------------------------------------------------------
    def ancestry(self, version: str) -> list[dict[str, Any]]:
        """`version` and its ancestors back to the root (newest first). Each step carries its
        run, the buffer files it consumed, its metrics and the parent's on the same data, and
        its gate decisions."""
        steps = []
        with self.reading() as con:
            current: str | None = version
            seen = set()
            while current is not None:
                if current in seen:
                    raise LineageError(f"parent links of {version!r} form a cycle at {current!r}")
                seen.add(current)
                row = con.execute(f"SELECT {_VERSION_COLS} FROM versions WHERE version = ?", [current]).fetchone()
                if row is None:
                    raise LineageError(f"unknown version {current!r}" + (f" (an ancestor of {version!r})" if current != version else ""))
                step = _version_dict(row)
                run_id = step["run_id"]
                step["run"] = _run_row(con, run_id) if run_id else None
                step["inputs"] = [b.__dict__ for b in _inputs(con, run_id)] if run_id else []
                step["metrics"] = _metrics(con, current, run_id or "")
                step["parent_metrics"] = _metrics(con, step["parent"], run_id or "") if step["parent"] else {}
                step["gate_decisions"] = _decisions(con, current)
                steps.append(step)
                current = step["parent"]
        return steps

    def diff(self, a: str, b: str) -> dict[str, Any]:
        """What differs between two versions: config keys (dotted), metrics on datasets both
        measured, and the buffer files each consumed."""
        with self.reading() as con:
            va, vb = (con.execute(f"SELECT {_VERSION_COLS} FROM versions WHERE version = ?", [v]).fetchone() for v in (a, b))
            for v, row in ((a, va), (b, vb)):
                if row is None:
                    raise LineageError(f"unknown version {v!r}")
            va, vb = _version_dict(va), _version_dict(vb)
            configs = []
            for v in (va, vb):
                run = _run_row(con, v["run_id"]) if v["run_id"] else None
                configs.append(_flatten((run or {}).get("config") or v["meta"].get("consolidation_config") or {}))
            ma, mb = _metrics(con, a, va["run_id"] or ""), _metrics(con, b, vb["run_id"] or "")
            ia = {x.content_hash for x in _inputs(con, va["run_id"])} if va["run_id"] else set()
            ib = {x.content_hash for x in _inputs(con, vb["run_id"])} if vb["run_id"] else set()
        config_diff = {
            k: {"a": configs[0].get(k), "b": configs[1].get(k)}
            for k in sorted(set(configs[0]) | set(configs[1]))
            if configs[0].get(k) != configs[1].get(k)
        }
        metric_diff = {}
        for dataset in sorted(set(ma) & set(mb)):
            for metric in sorted(set(ma[dataset]) & set(mb[dataset])):
                x, y = ma[dataset][metric], mb[dataset][metric]
                rel = (y - x) / abs(x) if x else None
                metric_diff[f"{dataset}.{metric}"] = {"a": x, "b": y, "relative_change": rel}
        return {
            "a": a, "b": b,
            "parents": {"a": va["parent"], "b": vb["parent"]},
            "status": {"a": va["status"], "b": vb["status"]},
            "config": config_diff,
            "metrics": metric_diff,
            "inputs": {"only_a": sorted(ia - ib), "only_b": sorted(ib - ia), "both": len(ia & ib)},
        }


_VERSION_COLS = "version, parent, path, digest, status, run_id, storage, created_at, meta"


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _version_dict(row: tuple) -> dict[str, Any]:
    out = dict(zip(_VERSION_COLS.split(", "), row))
    out["meta"] = _json(out["meta"]) or {}
    return out


def _run_row(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    keys = ("run_id", "flow_run_id", "kind", "parent", "version", "status", "config", "code_version", "timings", "started_at", "finished_at")
    row = con.execute(f"SELECT {', '.join(keys)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return None
    out = dict(zip(keys, row))
    out["config"], out["timings"] = _json(out["config"]), _json(out["timings"]) or {}
    return out


def _inputs(con: duckdb.DuckDBPyConnection, run_id: str) -> list[BufferFile]:
    rows = con.execute(
        """SELECT b.content_hash, b.path, b.rows, b.bytes, b.status, b.reason, b.run_id, b.consumed_by
           FROM run_inputs i JOIN buffer_files b USING (content_hash) WHERE i.run_id = ? ORDER BY b.registered_at, b.path""",
        [run_id],
    ).fetchall()
    return [BufferFile(*r) for r in rows]


def _metrics(con: duckdb.DuckDBPyConnection, version: str, run_id: str | None) -> dict[str, dict[str, float]]:
    query = "SELECT dataset, metric, value FROM metrics WHERE version = ?"
    params: list[Any] = [version]
    if run_id is not None:
        query += " AND run_id = ?"
        params.append(run_id)
    out: dict[str, dict[str, float]] = {}
    for dataset, metric, value in con.execute(query + " ORDER BY recorded_at", params).fetchall():
        out.setdefault(dataset, {})[metric] = value
    return out


def _decisions(con: duckdb.DuckDBPyConnection, version: str) -> list[dict[str, Any]]:
    keys = ("version", "run_id", "passed", "rules", "actor", "reason", "decided_at")
    rows = con.execute(f"SELECT {', '.join(keys)} FROM gate_decisions WHERE version = ? ORDER BY decided_at", [version]).fetchall()
    out = [dict(zip(keys, r)) for r in rows]
    for d in out:
        d["rules"] = _json(d["rules"]) or []
    return out


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def version_digest(folder: str | Path) -> str:
    """sha256 of the version's full weights (model.safetensors), the digest lib.checkpoint
    records in meta.json and checks on every delta restore: the same for a version stored full
    or as a delta, so it names the weights, not the storage."""
    folder = Path(folder)
    meta = folder / "meta.json"
    if meta.is_file():
        digest = json.loads(meta.read_text(encoding="utf-8")).get("digest")
        if digest:
            return digest
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{folder}: no model.safetensors and no digest in meta.json")
    return file_hash(weights)


def code_version_string() -> str:
    """`git describe --always --dirty` of the source tree, else the installed package version."""
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=root, capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return "git:" + out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return "pkg:" + importlib.metadata.version("nightly-consolidation")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def to_json(value: Any) -> str:
    """JSON for the registry's JSON columns (paths and datetimes as strings)."""
    return json.dumps(value, default=str, sort_keys=True)

