"""The rows of the lineage registry as Python values: what the per-table query modules
(buffer_records, run_records, memory_records, version_records) share.

- `now()`: the registry's clock (UTC, timezone-aware).
- JSON columns are written with `to_json` (paths and datetimes as strings, keys sorted, so the same
  value is the same text) and read back with `from_json`.
- `version_dict`, `run_row`, `run_inputs_of`, `metrics_of`, `decisions_of`: one row (or the rows
  of one version or run) as a dict, inside a connection the caller holds, so a reader such as
  `ancestry` walks many tables in one snapshot.

Trade-off: rows become dicts, not typed records (only buffer files have a dataclass): the CLI
prints them and tests compare them as they are, at the cost of no static check of their keys.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb


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


VERSION_COLS = "version, parent, path, digest, status, run_id, storage, created_at, meta"


def to_json(value: Any) -> str:
    """JSON for the registry's JSON columns (paths and datetimes as strings)."""
    return json.dumps(value, default=str, sort_keys=True)



def portable_path(path: str | Path, root: str | Path) -> str:
    """`path` relative to `root` (POSIX separators) when it lies inside it, else absolute; a
    relative `path` is returned as it is (already relative to the root). Symlinks are not
    followed, except that a path reached through the root's own resolved form counts as inside."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    root = Path(root)
    for candidate_root in dict.fromkeys((root, root.resolve())):
        for candidate in dict.fromkeys((Path(os.path.normpath(p)), p.resolve())):
            try:
                rel = candidate.relative_to(candidate_root)
            except ValueError:
                continue
            return rel.as_posix() or "."
    return str(p)


def portable_tree(value: Any, root: str | Path, old_roots: tuple[str, ...] = ()) -> Any:
    """A JSON tree (config, meta, corpus info) with every string that is an absolute path inside
    `root` (or inside one of `old_roots`, where the workspace was before a move) made relative."""
    roots = [str(Path(r)) for r in (str(root), str(Path(root).resolve()), *old_roots)]
    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        if isinstance(v, Path):
            v = str(v)
        if isinstance(v, str) and v.startswith("/"):
            for r in roots:
                if v == r:
                    return "."
                if v.startswith(r.rstrip("/") + "/"):
                    return v[len(r.rstrip("/")) + 1:]
        return v
    return walk(value)


def _old_roots(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    """Where the workspace was when its absolute paths were written, read off the paths that can
    only lie inside it: `<old root>/checkpoints/<version>`, `<old root>/buffers/<file>`."""
    roots = set()
    for version, path in con.execute("SELECT version, path FROM versions WHERE path LIKE '/%'").fetchall():
        p = Path(path)
        if p.name == version and p.parent.name == "checkpoints":
            roots.add(str(p.parent.parent))
    for (path,) in con.execute("SELECT path FROM buffer_files WHERE path LIKE '/%'").fetchall():
        p = Path(path)
        if p.parent.name in ("buffers", "quarantine"):
            roots.add(str(p.parent.parent))
    return tuple(sorted(roots, key=len, reverse=True))


def _relative_paths(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Migration 3 -> 4: every absolute path inside the workspace, where it is now or where it was
    when the path was written (read off the path: `<old root>/checkpoints/<version>`), becomes
    relative to the root; paths outside stay absolute. The JSON columns too."""
    columns = [("buffer_files", "content_hash", "path"), ("versions", "version", "path"),
               ("manifests", "manifest_hash", "path"), ("memory_nights", "version", "path")]
    old = _old_roots(con)
    for table, key, col in columns:
        for k, p in con.execute(f"SELECT {key}, {col} FROM {table} WHERE {col} LIKE '/%'").fetchall():
            new = portable_tree(p, root, old)
            if new != p:
                con.execute(f"UPDATE {table} SET {col} = ? WHERE {key} = ?", [new, k])
    for table, key, col in (("versions", "version", "meta"), ("runs", "run_id", "config"),
                            ("corpora", "name", "info"), ("manifests", "manifest_hash", "stats")):
        for k, v in con.execute(f"SELECT {key}, {col} FROM {table} WHERE {col} IS NOT NULL").fetchall():
            tree = from_json(v)
            new = portable_tree(tree, root, old)
            if new != tree:
                con.execute(f"UPDATE {table} SET {col} = ? WHERE {key} = ?", [to_json(new), k])

def from_json(value: Any) -> Any:
    """A JSON column as a value (DuckDB returns JSON as text)."""
    return json.loads(value) if isinstance(value, str) else value


def version_dict(row: tuple) -> dict[str, Any]:
    out = dict(zip(VERSION_COLS.split(", "), row))
    out["meta"] = from_json(out["meta"]) or {}
    return out


def run_row(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    keys = ("run_id", "flow_run_id", "kind", "parent", "version", "status", "config", "code_version", "timings", "started_at", "finished_at")
    row = con.execute(f"SELECT {', '.join(keys)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return None
    out = dict(zip(keys, row))
    out["config"], out["timings"] = from_json(out["config"]), from_json(out["timings"]) or {}
    return out


def run_inputs_of(con: duckdb.DuckDBPyConnection, run_id: str) -> list[BufferFile]:
    rows = con.execute(
        """SELECT b.content_hash, b.path, b.rows, b.bytes, b.status, b.reason, b.run_id, b.consumed_by
           FROM run_inputs i JOIN buffer_files b USING (content_hash) WHERE i.run_id = ? ORDER BY b.registered_at, b.path""",
        [run_id],
    ).fetchall()
    return [BufferFile(*r) for r in rows]


def metrics_of(con: duckdb.DuckDBPyConnection, version: str, run_id: str | None) -> dict[str, dict[str, float]]:
    query = "SELECT dataset, metric, value FROM metrics WHERE version = ?"
    params: list[Any] = [version]
    if run_id is not None:
        query += " AND run_id = ?"
        params.append(run_id)
    out: dict[str, dict[str, float]] = {}
    for dataset, metric, value in con.execute(query + " ORDER BY recorded_at", params).fetchall():
        out.setdefault(dataset, {})[metric] = value
    return out


def decisions_of(con: duckdb.DuckDBPyConnection, version: str) -> list[dict[str, Any]]:
    keys = ("version", "run_id", "passed", "rules", "actor", "reason", "decided_at")
    rows = con.execute(f"SELECT {', '.join(keys)} FROM gate_decisions WHERE version = ? ORDER BY decided_at", [version]).fetchall()
    out = [dict(zip(keys, r)) for r in rows]
    for d in out:
        d["rules"] = from_json(d["rules"]) or []
    return out


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def code_version_string() -> str:
    """`git describe --always --dirty` of the source tree, else the installed package version."""
    root = Path(__file__).resolve().parents[2]  # the source tree: lib/registry/ is two levels down
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
