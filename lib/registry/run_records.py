"""The queries of the `runs`, `run_inputs`, `manifests` and `corpora` tables: what each run read and
did.

A mixin of `Lineage` (lib/registry/lineage.py: the file, the schema, the connections).
"""

from __future__ import annotations

import json
import hashlib
from pathlib import Path
from typing import Any

import duckdb

from lib.registry.records import (
    BufferFile, LineageError, code_version_string, from_json, now, portable_tree, run_inputs_of, run_row, to_json,
)


class RunRecords:
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
                [run_id, flow_run_id, kind, parent, None if config is None else to_json(portable_tree(config, self.root)),
                 code_version or code_version_string(), t],
            )

    def finish_run(self, run_id: str, status: str = "completed", version: str | None = None, timings: dict[str, float] | None = None) -> None:
        """Close a run; `timings` (stage -> seconds) merge into what earlier attempts recorded."""
        if status not in ("completed", "failed"):
            raise LineageError(f"run status {status!r}: expected completed or failed")
        with self.transaction() as con:
            row = con.execute("SELECT timings FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise LineageError(f"unknown run {run_id!r}: start_run first")
            merged = {**from_json(row[0] or "{}"), **(timings or {})}
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

    def latest_run(self, kind: str = "nightly") -> dict[str, Any] | None:
        """The most recently started run of `kind`, with its status, parent and the status of the
        version it recorded (None: none recorded)."""
        with self.reading() as con:
            row = con.execute("""SELECT r.run_id, r.status, r.parent, r.version, v.status FROM runs r
                                 LEFT JOIN versions v ON v.version = r.version WHERE r.kind = ?
                                 ORDER BY r.started_at DESC LIMIT 1""", [kind]).fetchone()
        return None if row is None else dict(zip(("run_id", "status", "parent", "version", "version_status"), row))

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self.reading() as con:
            return run_row(con, run_id)

    def record_inputs(self, run_id: str, content_hashes: list[str], con: duckdb.DuckDBPyConnection | None = None) -> None:
        """The buffer files (by content hash) a run trains on. Re-recording is a no-op."""
        if con is None:
            with self.transaction() as own:
                return self.record_inputs(run_id, content_hashes, own)
        for h in content_hashes:
            con.execute("INSERT INTO run_inputs VALUES (?, ?) ON CONFLICT DO NOTHING", [run_id, h])

    def run_inputs(self, run_id: str) -> list[BufferFile]:
        with self.reading() as con:
            return [self._absolute(b) for b in run_inputs_of(con, run_id)]

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
            [manifest_hash, run_id, self.stored_path(path), to_json(portable_tree(stats or {}, self.root)), now()],
        )

    def record_corpus(self, name: str, kind: str, info: dict[str, Any]) -> None:
        """A replay corpus as ingested (`info` is its corpus.json); re-recording replaces it."""
        digest = hashlib.sha256("".join(s.get("hash", "") for s in info.get("shards", [])).encode()).hexdigest()
        with self.transaction() as con:
            con.execute(
                """INSERT INTO corpora VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, content_hash = excluded.content_hash,
                     docs = excluded.docs, bytes = excluded.bytes, info = excluded.info""",
                [name, kind, digest, info.get("docs"), info.get("bytes"), to_json(portable_tree(info, self.root)), now()],
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
