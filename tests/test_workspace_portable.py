"""A workspace is a self-contained folder (issue #28): copied with `cp -a` or moved, it runs its
nights where it now is, and nothing it does reaches the folder it came from.

- Copy: a workspace with a champion and a delta-stored version is copied; a night on the copy
  (which compacts the old champion into a delta, and materializes delta parents) leaves every
  byte of the original as it was.
- Move: the copy is moved, the old path removed, and another night runs on it.
- Lineage stores paths inside the workspace relative to its root (checked on the raw DuckDB rows).

Real `consolidate run` processes on the tiny model of tests/night_fixtures.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

pytest_plugins = ["prefect_fixtures", "night_fixtures"]

from lib.registry.lineage import Lineage  # noqa: E402
from lib.workspace import Workspace  # noqa: E402
from night_fixtures import run_night, write_texts  # noqa: E402

NOTES = [
    f"Shift {i} of the lighthouse on {isle}: the keeper wound the clock at dusk, logged {n} ships passing the reef, "
    f"and refilled the lamp with {oil} oil before the fog came in from the west."
    for i, (isle, n, oil) in enumerate(zip(["Arran", "Skye", "Mull", "Islay", "Jura", "Coll", "Tiree", "Barra", "Eigg"],
                                           [3, 5, 8, 13, 21, 34, 55, 89, 144],
                                           ["whale", "colza", "paraffin", "seal", "olive", "lard", "fish", "tallow", "rape"]))
]


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under `root` by relative path: a file's sha256, a link's target, a folder."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def cp_a(src: Path, dst: Path) -> Workspace:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return Workspace(dst)


def stored_paths(ws: Workspace) -> list[str]:
    """The path columns of lineage as stored (not as read back)."""
    con = duckdb.connect(str(ws.lineage_db), read_only=True)
    try:
        return [p for table in ("versions", "buffer_files", "manifests", "memory_nights")
                for (p,) in con.execute(f"SELECT path FROM {table} WHERE path IS NOT NULL").fetchall()]
    finally:
        con.close()


@pytest.fixture(scope="module")
def champion_workspace(tmp_path_factory, v0_workspace) -> Path:
    """v0 and a night on top: v1 is the champion."""
    root = tmp_path_factory.mktemp("portable") / "original"
    ws = cp_a(v0_workspace, root)
    write_texts(ws.buffers, NOTES[:3], "night1.parquet")
    run_night(ws)
    assert Lineage(ws.lineage_db).alias("champion") == "v1"
    return root


def test_a_copied_then_moved_workspace_never_touches_where_it_came_from(tmp_path, champion_workspace):
    from lib.checkpoints.checkpoint import is_delta, is_full, materialize

    original = Workspace(champion_workspace)
    before = tree_digest(original.root)

    # a night on a cp -a copy: v2 becomes champion, v1 is compacted into a delta, in the copy only
    copy = cp_a(original.root, tmp_path / "copy")
    write_texts(copy.buffers, NOTES[3:6], "night2.parquet")
    run_night(copy)
    assert tree_digest(original.root) == before, "a night on a copy changed the original"
    lin = Lineage(copy.lineage_db)
    versions = {v["version"]: v for v in lin.versions()}
    assert lin.alias("champion") == "v2"
    assert versions["v1"]["storage"] == "delta" and is_delta(copy.checkpoint("v1"))
    assert is_full(original.checkpoint("v1"))
    assert all(Path(v["path"]).parent == copy.checkpoints for v in versions.values())
    assert not [p for p in stored_paths(copy) if Path(p).is_absolute()], stored_paths(copy)

    # that copy, which has a champion and a delta-stored version, is copied and moved; both older
    # folders are out of reach while a night runs on the moved one
    copied = tree_digest(copy.root)
    staged = cp_a(copy.root, tmp_path / "staged")
    moved = Workspace(tmp_path / "moved")
    staged.root.rename(moved.root)
    hidden = [(p, p.with_name(p.name + ".away")) for p in (original.root, copy.root)]
    for p, away in hidden:
        p.rename(away)
    try:
        write_texts(moved.buffers, NOTES[6:], "night3.parquet")
        run_night(moved)
        lin = Lineage(moved.lineage_db)
        assert lin.alias("champion") == "v3"
        for v in lin.versions():
            assert Path(v["path"]).parent == moved.checkpoints
            assert (is_full(v["path"]) if v["version"] == "v3" or v["parent"] is None else is_delta(v["path"])), v
        # the delta chain v2 -> v1 -> v0 restores from the moved folders alone
        assert (materialize(moved.checkpoint("v2")) / "model.safetensors").is_file()
        assert os.path.realpath(moved.serving / "champion") == str(moved.checkpoint("v3"))
    finally:
        for p, away in hidden:
            away.rename(p)
    assert tree_digest(original.root) == before
    assert tree_digest(copy.root) == copied, "a night on a moved copy changed the folder it was copied from"
