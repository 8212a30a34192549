"""Registries written by the previous schema (3, absolute paths) migrate on open (issue #28).

`write_schema3_registry` writes such a file the way the schema-3 code did: the tables of
MIGRATIONS[0:3] and rows whose paths are absolute, at the folder the workspace had then. The
test moves the folder first, as a user would have, then opens it with today's code.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from lib.config import load_config
from lib.registry.lineage import MIGRATIONS, SCHEMA_VERSION, Lineage
from lib.registry.records import portable_path
from lib.training.preflight import preflight


def write_schema3_registry(root: Path, outside: Path) -> Path:
    """A lineage.duckdb at schema 3 for a workspace at `root`, with one path `outside` it."""
    db = root / "lineage.duckdb"
    root.mkdir(parents=True, exist_ok=True)
    t = datetime(2026, 11, 1, tzinfo=timezone.utc)
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL)")
    for version in range(3):
        for statement in MIGRATIONS[version]:
            con.execute(statement)
        con.execute("INSERT INTO schema_version VALUES (?, ?)", [version + 1, t])
    cfg = {"workspace": {"root": str(root)}, "tokenizer": {"path": str(outside)}}
    for v, parent in (("v0", None), ("v1", "v0")):
        meta = {"version": v, "parent_path": str(root / "checkpoints" / "v0") if parent else None, "data_dir": str(root / "runs" / "r1")}
        con.execute("INSERT INTO versions VALUES (?, ?, ?, 'sha', 'accepted', 'r1', 'full', ?, ?)",
                    [v, parent, str(root / "checkpoints" / v), t, json.dumps(meta)])
    con.execute("INSERT INTO runs VALUES ('r1', NULL, 'nightly', 'v0', 'v1', 'completed', ?, 'git:x', '{}', ?, ?)",
                [json.dumps(cfg), t, t])
    con.execute("INSERT INTO buffer_files VALUES ('h1', ?, 3, 100, 'consumed', NULL, 'r1', 'v1', ?, ?)", [str(root / "buffers" / "a.parquet"), t, t])
    con.execute("INSERT INTO buffer_files VALUES ('h2', ?, NULL, 9, 'quarantined', 'bad', NULL, NULL, ?, ?)",
                [str(root / "quarantine" / "b.parquet"), t, t])
    con.execute("INSERT INTO manifests VALUES ('m1', 'r1', ?, ?, ?)",
                [str(root / "runs" / "r1" / "manifest.parquet"), json.dumps({"extra": str(outside / "x.parquet")}), t])
    con.execute("INSERT INTO memory_nights VALUES ('v1', 'r1', ?, 3, 1, '12', ?)", [str(root / "memory" / "v1"), t])
    con.execute("INSERT INTO corpora VALUES ('small', 'stdlib', 'c', 1, 1, ?, ?)",
                [json.dumps({"root": str(root / "corpora" / "small"), "inputs": [str(outside)]}), t])
    con.close()
    return db


def test_a_schema3_registry_of_a_moved_workspace_migrates_once_with_a_backup(tmp_path):
    old, new, outside = tmp_path / "was" / "ws", tmp_path / "now" / "ws", tmp_path / "user-data"
    write_schema3_registry(old, outside)
    new.parent.mkdir()
    shutil.move(str(old), str(new))
    original_bytes = (new / "lineage.duckdb").read_bytes()

    lin = Lineage(new / "lineage.duckdb")
    assert lin.schema_version() == SCHEMA_VERSION == 6  # 3 -> 4 rewrote the paths, 4 -> 5 added fact_recall, 5 -> 6 rollouts
    backup = new / "lineage.duckdb.v3.bak"
    assert backup.read_bytes() == original_bytes, "the old registry is kept as it was"

    # read back against where the workspace is now
    assert lin.get_version("v1")["path"] == str(new / "checkpoints" / "v1")
    assert {b.content_hash: b.path for b in lin.buffer_files()} == {
        "h1": str(new / "buffers" / "a.parquet"), "h2": str(new / "quarantine" / "b.parquet")}
    assert [b.path for b in lin.run_inputs("r1")] == []  # none recorded; the join still reads
    assert lin.memory_nights()[0]["path"] == str(new / "memory" / "v1")
    assert [s["path"] for s in lin.ancestry("v1")] == [str(new / "checkpoints" / "v1"), str(new / "checkpoints" / "v0")]

    # stored relative; what lies outside stays absolute
    con = duckdb.connect(str(new / "lineage.duckdb"), read_only=True)
    try:
        assert sorted(p for (p,) in con.execute("SELECT path FROM versions").fetchall()) == ["checkpoints/v0", "checkpoints/v1"]
        assert con.execute("SELECT path FROM manifests").fetchone()[0] == "runs/r1/manifest.parquet"
        config = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
        meta = json.loads(con.execute("SELECT meta FROM versions WHERE version = 'v1'").fetchone()[0])
        stats = json.loads(con.execute("SELECT stats FROM manifests").fetchone()[0])
        info = json.loads(con.execute("SELECT info FROM corpora").fetchone()[0])
    finally:
        con.close()
    assert config == {"workspace": {"root": "."}, "tokenizer": {"path": str(outside)}}
    assert meta["parent_path"] == "checkpoints/v0" and meta["data_dir"] == "runs/r1"
    assert stats == {"extra": str(outside / "x.parquet")}
    assert info == {"root": "corpora/small", "inputs": [str(outside)]}

    # once: opening again changes nothing and keeps the first backup
    before = (new / "lineage.duckdb").read_bytes()
    Lineage(new / "lineage.duckdb")
    assert backup.read_bytes() == original_bytes
    assert not list(new.glob("lineage.duckdb.v4*"))
    con = duckdb.connect(str(new / "lineage.duckdb"), read_only=True)
    try:
        assert [v for (v,) in con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()] == [1, 2, 3, 4, 5, 6]
    finally:
        con.close()
    assert len(before) > 0


def test_new_records_store_inside_paths_relative_and_outside_paths_absolute(tmp_path):
    ws = tmp_path / "ws"
    lin = Lineage(ws / "lineage.duckdb")
    assert not list(ws.glob("*.bak")), "a new registry is not backed up"
    lin.record_version("v0", ws / "checkpoints" / "v0", meta={"adopted_from": str(tmp_path / "model"), "dir": str(ws / "runs" / "x")})
    lin.register_buffer_file("h", ws / "buffers" / ".." / "buffers" / "f.parquet", 1, 1)
    assert portable_path(ws / "checkpoints" / "v0", ws) == "checkpoints/v0"
    assert portable_path(tmp_path / "model", ws) == str(tmp_path / "model")
    assert portable_path(ws, ws) == "."
    con = duckdb.connect(str(ws / "lineage.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT path FROM versions").fetchone()[0] == "checkpoints/v0"
        assert con.execute("SELECT path FROM buffer_files").fetchone()[0] == "buffers/f.parquet"
        assert json.loads(con.execute("SELECT meta FROM versions").fetchone()[0]) == {
            "adopted_from": str(tmp_path / "model"), "dir": "runs/x"}
    finally:
        con.close()


def test_preflight_names_a_missing_path_outside_the_workspace(tmp_path):
    gone = tmp_path / "elsewhere" / "replay"
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={tmp_path / 'ws'}",
                                                f'sampling.sources=[{{"name": "mine", "path": "{gone}", "weight": 0.1}}]'])
    problems = preflight(cfg, None)
    assert any("sampling.sources 'mine'" in p and str(gone) in p and "outside the workspace" in p for p in problems), problems
