"""The queries of the `memory_nights` and `memory_exposures` tables: the accepted nights the memory
replays (lib/data/memory.py).

A mixin of `Lineage` (lib/registry/lineage.py: the file, the schema, the connections).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from lib.registry.records import now


class MemoryRecords:
    def record_memory_night(self, version: str, run_id: str | None, path: str | Path, docs: int, heldout_docs: int,
                            heldout_cut: int, exposures: dict[str, int]) -> None:
        """An accepted night joins the memory: its row and the first exposures of its documents,
        in one transaction (idempotent: a replayed promotion records it once)."""
        with self.transaction() as con:
            if con.execute("SELECT 1 FROM memory_nights WHERE version = ?", [version]).fetchone():
                return
            con.execute("INSERT INTO memory_nights VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [version, run_id, self.stored_path(path), docs, heldout_docs, str(heldout_cut), now()])
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
        return [{**dict(zip(keys, r)), "path": self.full_path(r[2]), "heldout_cut": int(r[5])} for r in rows]

    def memory_exposures(self) -> dict[tuple[str, str], int]:
        """{(night, doc_id): exposures} of every document in the memory."""
        with self.reading() as con:
            return {(n, d): int(e) for n, d, e in con.execute("SELECT night, doc_id, exposures FROM memory_exposures").fetchall()}

    def forget_memory_night(self, version: str) -> None:
        """A rolled-back night leaves the memory (its documents are no longer replayed)."""
        with self.transaction() as con:
            con.execute("DELETE FROM memory_exposures WHERE night = ?", [version])
            con.execute("DELETE FROM memory_nights WHERE version = ?", [version])

    def record_fact_recall(self, run_id: str | None, version: str, night: str, by_doc: dict[str, tuple[int, int]],
                           con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Per-document fact recall of `version` on the facts of `night` ({doc_id: (items,
        correct)}), as measured by `run_id`; an upsert, so a replayed evaluation adds no rows."""
        if con is None:
            with self.transaction() as own:
                return self.record_fact_recall(run_id, version, night, by_doc, own)
        t = now()
        rows = [(run_id or "", version, night, str(d), int(n), int(c), t) for d, (n, c) in by_doc.items()]
        if rows:
            con.executemany(
                """INSERT INTO fact_recall VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id, version, night, doc_id) DO UPDATE SET items = excluded.items,
                     correct = excluded.correct, recorded_at = excluded.recorded_at""", rows)

    def fact_recall(self, version: str | None = None, night: str | None = None,
                    learner_only: bool = False) -> list[dict[str, Any]]:
        """Rows {run_id, version, night, doc_id, items, correct} of `fact_recall`, the most recent
        measurement per (version, night, doc_id); `learner_only`: each night's facts as the
        version that learnt them answered them in its own run (the reference of forgetting)."""
        query = ("SELECT f.run_id, f.version, f.night, f.doc_id, f.items, f.correct FROM fact_recall f "
                 "LEFT JOIN versions v ON v.version = f.version WHERE true")
        params: list[Any] = []
        if version is not None:
            query += " AND f.version = ?"
            params.append(version)
        if night is not None:
            query += " AND f.night = ?"
            params.append(night)
        if learner_only:
            query += " AND f.version = f.night AND f.run_id = coalesce(v.run_id, '')"
        query += " QUALIFY row_number() OVER (PARTITION BY f.version, f.night, f.doc_id ORDER BY f.recorded_at DESC) = 1"
        with self.reading() as con:
            rows = con.execute(query + " ORDER BY f.night, f.doc_id, f.version", params).fetchall()
        keys = ("run_id", "version", "night", "doc_id", "items", "correct")
        return [dict(zip(keys, r)) for r in rows]
