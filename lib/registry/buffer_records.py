"""The queries of the `buffer_files` table: every buffer file the ingest saw, by content hash.

A mixin of `Lineage` (lib/registry/lineage.py: the file, the schema, the connections).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from lib.registry.records import BufferFile, now


class BufferRecords:
    def register_buffer_file(self, content_hash: str, path: str | Path, rows: int | None, nbytes: int | None) -> bool:
        """Record a buffer file as pending. False (and no change) if this content is known:
        the same bytes are never ingested twice, whatever the file is called."""
        with self.transaction() as con:
            if con.execute("SELECT 1 FROM buffer_files WHERE content_hash = ?", [content_hash]).fetchone():
                return False
            t = now()
            con.execute(
                "INSERT INTO buffer_files VALUES (?, ?, ?, ?, 'pending', NULL, NULL, NULL, ?, ?)",
                [content_hash, self.stored_path(path), rows, nbytes, t, t],
            )
            return True

    def quarantine_buffer_file(self, content_hash: str, path: str | Path, reason: str, nbytes: int | None = None) -> None:
        """Record (or move) a file to quarantined with its reason."""
        with self.transaction() as con:
            t = now()
            if con.execute("SELECT 1 FROM buffer_files WHERE content_hash = ?", [content_hash]).fetchone():
                con.execute(
                    "UPDATE buffer_files SET status = 'quarantined', reason = ?, path = ?, updated_at = ? WHERE content_hash = ?",
                    [reason, self.stored_path(path), t, content_hash],
                )
            else:
                con.execute(
                    "INSERT INTO buffer_files VALUES (?, ?, NULL, ?, 'quarantined', ?, NULL, NULL, ?, ?)",
                    [content_hash, self.stored_path(path), nbytes, reason, t, t],
                )

    def buffer_files(self, status: str | None = None) -> list[BufferFile]:
        query = "SELECT content_hash, path, rows, bytes, status, reason, run_id, consumed_by FROM buffer_files"
        params: list[Any] = []
        if status is not None:
            query += " WHERE status = ?"
            params.append(status)
        query += " ORDER BY registered_at, path"
        with self.reading() as con:
            return [self._buffer_file(row) for row in con.execute(query, params).fetchall()]

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
