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
  manifest and both sides' metrics, together) -> `lib.registry.promotion.conclude` (decision, status,
  aliases, consumption, together) -> `finish_run`. Every write is an upsert keyed by run id /
  version, and `next_version(run_id)` hands a replayed run its own id again, so re-running a
  night killed between any two steps completes it without duplicate rows.
- Reading: `versions()`, `ancestry(v)` (back to the root, with data, metrics, decisions),
  `diff(a, b)`, `metrics(v, run_id)`, `alias_history()`.
- Layout: this module owns the file (schema, migrations, connections); `Lineage` takes the queries
  of each table group from its own module (lib/registry/buffer_records.py, run_records.py,
  memory_records.py, version_records.py; rows as values in records.py), so a new table adds a
  module and a migration here, and callers keep one object. Every query method opens a
  connection through `self.transaction()` or `self.reading()`, or takes the caller's `con` to be
  part of a larger transaction (a night's records commit together).
- Paths inside the workspace (the folder holding this file) are stored relative to it and read
  back resolved against where it is now (`portable_path`, `full_path`): a copied or moved
  workspace reads and writes only its own folders. Paths outside it stay absolute. Schema 4
  rewrote the absolute paths of older files, rebasing those under the folder they were written
  in (read off `<old root>/checkpoints/<version>`), after keeping `lineage.duckdb.v3.bak`.

Trade-offs: short connections cost ~1 ms each, negligible next to a nightly run, and let the
server, the CLI and the flow share the file without a daemon. One mixin per table group keeps
every caller's `lineage.<method>` unchanged; a method reaches another group's (`record_version`
records inputs and metrics) only through `self`, which ties the groups to the one class.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator

import duckdb
import shutil

from lib.files import atomic_path, file_hash
from lib.registry.buffer_records import BufferRecords
from lib.registry.memory_records import MemoryRecords
from lib.registry.records import BufferFile, LineageError, _relative_paths, now, portable_path, version_dict
from lib.registry.run_records import RunRecords
from lib.registry.version_records import VersionRecords

SCHEMA_VERSION = 6

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
    [],  # 3 -> 4: paths inside the workspace become relative to its root (`_relative_paths`, in Python)
    [  # 4 -> 5: per-document fact recall (lib/evaluation/fact_recall.py)
        """CREATE TABLE fact_recall (
            run_id VARCHAR NOT NULL,            -- the run that measured it ('' if none)
            version VARCHAR NOT NULL,           -- the version asked
            night VARCHAR NOT NULL,             -- the version whose night the facts came from (the learner)
            doc_id VARCHAR NOT NULL,            -- the document the facts were extracted from
            items BIGINT NOT NULL,              -- fact probes of that document asked
            correct BIGINT NOT NULL,            -- of them answered (the answer ranked first)
            recorded_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, version, night, doc_id)
        )""",
    ],
    [  # 5 -> 6: what went live on the serving engine (lib/serving/rollout.py)
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


class Lineage(BufferRecords, RunRecords, MemoryRecords, VersionRecords):
    """Registry of one workspace: owns the file, its schema and its connections; the queries of each
    table group come from its module (buffer_records, run_records, memory_records, version_records).
    Cheap to construct; every method opens its own connection."""

    def __init__(self, db_path: str | Path, lock_timeout_s: float = 60.0):
        self.db_path = Path(db_path)
        self.lock_timeout_s = lock_timeout_s
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        # the workspace root: every stored path inside it is relative to it, resolved against
        # wherever the workspace is now (a copy, a move, another mount point)
        self.root = self.db_path.parent.resolve()
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
        if 0 < current < SCHEMA_VERSION:
            self._back_up(current)
        for version in range(current, SCHEMA_VERSION):
            for statement in MIGRATIONS[version]:
                con.execute(statement)
            if version == 3 and current > 0:
                _relative_paths(con, self.root)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version + 1, now()])

    def _back_up(self, current: int) -> None:
        """A registry written by an older schema is copied to `lineage.duckdb.v<N>.bak` (once)
        before it is migrated: a migration that went wrong, or an older package that still needs
        the file, has the original to go back to. Called before the migration writes anything,
        so the file (and its write-ahead log, if one was left) is as the old code left it."""
        backup = self.db_path.with_name(f"{self.db_path.name}.v{current}.bak")
        if backup.exists():
            return
        wal = self.db_path.with_name(self.db_path.name + ".wal")
        if wal.is_file():
            with atomic_path(backup.with_name(backup.name + ".wal")) as tmp:
                shutil.copyfile(wal, tmp)
        with atomic_path(backup) as tmp:
            shutil.copyfile(self.db_path, tmp)

    # -- paths: relative inside the workspace, absolute outside -------------------------------
    def stored_path(self, path: str | Path | None) -> str | None:
        """How a path is stored: relative to the workspace root when it lies inside it, else
        absolute (a user's replay corpus, a model folder elsewhere). A relative path is taken as
        relative to the root already."""
        return None if path is None else portable_path(path, self.root)

    def full_path(self, stored: str | None) -> str | None:
        """A stored path resolved against where the workspace is now."""
        if stored is None:
            return None
        p = Path(stored)
        return str(p if p.is_absolute() else self.root / p)

    def schema_version(self) -> int:
        with self.reading() as con:
            return con.execute("SELECT max(version) FROM schema_version").fetchone()[0]

    def _buffer_file(self, row: tuple) -> BufferFile:
        return self._absolute(BufferFile(*row))

    def _absolute(self, b: BufferFile) -> BufferFile:
        return BufferFile(**{**b.__dict__, "path": self.full_path(b.path)})

    def _version_dict(self, row: tuple) -> dict[str, Any]:
        out = version_dict(row)
        out["path"] = self.full_path(out["path"])
        return out


def version_digest(folder: str | Path) -> str:
    """sha256 of the version's full weights (model.safetensors), the digest lib.checkpoints.checkpoint
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
