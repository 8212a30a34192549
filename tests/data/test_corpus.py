"""Embedded corpora: the stdlib corpus is deterministic and split cleanly; the demo buffer is
real text the corpus never contained."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from lib.buffer.records import SCHEMA, read_buffer_files
from lib.config import load_config
from lib.data.corpus import (
    CORPUS_SCHEMA,
    DEMO_PACKAGES,
    build_demo_buffer,
    build_stdlib_corpus,
    ensure_embedded_default,
    is_validation,
    iter_stdlib_documents,
    read_corpus_stats,
)
from lib.workspace import Workspace


def corpus_rows(folder) -> list[dict]:
    return [row for path in sorted(folder.glob("shard-*.parquet")) for row in pq.read_table(path).to_pylist()]


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """The same 2 MB corpus built twice into two workspaces (and once more over itself)."""
    a = Workspace(tmp_path_factory.mktemp("a") / "ws").ensure()
    b = Workspace(tmp_path_factory.mktemp("b") / "ws").ensure()
    stats_a = build_stdlib_corpus(a, max_mb=2, shard_bytes=500_000)
    stats_b = build_stdlib_corpus(b, max_mb=2, shard_bytes=500_000)
    return a, b, stats_a, stats_b


def test_corpus_rebuild_is_byte_identical(two_builds):
    a, b, stats_a, stats_b = two_builds
    files_a = sorted(p.relative_to(a.corpus("stdlib")) for p in a.corpus("stdlib").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b.corpus("stdlib")) for p in b.corpus("stdlib").rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) >= 4
    for rel in files_a:
        assert (a.corpus("stdlib") / rel).read_bytes() == (b.corpus("stdlib") / rel).read_bytes(), rel
    assert stats_a == stats_b
    # rebuilding over an existing corpus replaces it with the same bytes, and leaves no temp folders
    before = {rel: (a.corpus("stdlib") / rel).read_bytes() for rel in files_a}
    build_stdlib_corpus(a, max_mb=2, shard_bytes=500_000)
    assert {rel: (a.corpus("stdlib") / rel).read_bytes() for rel in files_a} == before
    assert [p.name for p in a.corpora.iterdir()] == ["stdlib"]


def test_corpus_layout_split_and_stats(two_builds):
    ws, _, stats, _ = two_builds
    train, val = corpus_rows(ws.corpus_train("stdlib")), corpus_rows(ws.corpus_val("stdlib"))
    for path in ws.corpus("stdlib").rglob("shard-*.parquet"):
        assert pq.read_schema(path).remove_metadata().equals(CORPUS_SCHEMA)
        assert pq.ParquetFile(path).metadata.num_rows > 0
    train_ids, val_ids = {r["id"] for r in train}, {r["id"] for r in val}
    assert not train_ids & val_ids
    assert len(train_ids) == len(train) and len(val_ids) == len(val)
    assert all(is_validation(i, 0.05) for i in val_ids) and not any(is_validation(i, 0.05) for i in train_ids)
    assert 0.01 < len(val) / (len(train) + len(val)) < 0.12
    ids = [r["id"] for r in train]
    assert ids == sorted(ids)  # deterministic order: sorted relative paths
    assert all(not i.startswith("/") and "site-packages" not in i and "/test/" not in f"/{i}" for i in ids)
    assert {r["kind"] for r in train} <= {"code", "prose"}
    assert all(r["kind"] == ("code" if r["id"].endswith(".py") else "prose") for r in train + val)
    assert stats["docs"] == len(train) + len(val) and stats["train_docs"] == len(train)
    assert 1_500_000 < stats["bytes"] <= 2_000_000
    assert stats["bytes"] == sum(len(r["text"].encode()) for r in train + val)
    assert read_corpus_stats(ws, "stdlib") == json.loads(json.dumps(stats))
    # shards stay bounded (a single larger document may fill a shard by itself)
    for shard in stats["shards"]:
        assert shard["bytes"] <= 500_000 or shard["docs"] == 1


def test_corpus_texts_are_the_stdlib_files():
    docs = list(iter_stdlib_documents())
    assert len(docs) > 300
    by_id = {d.id: d for d in docs}
    assert "os.py" in by_id and "json/decoder.py" in by_id
    import json as json_module
    from pathlib import Path

    assert by_id["json/decoder.py"].text == Path(json_module.decoder.__file__).read_text(encoding="utf-8")


def test_bad_corpus_arguments_are_named(workspace, tmp_path):
    with pytest.raises(ValueError, match="val_fraction"):
        build_stdlib_corpus(workspace, val_fraction=1.5)
    with pytest.raises(ValueError, match="max_mb"):
        build_stdlib_corpus(workspace, max_mb=0)
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        build_stdlib_corpus(workspace, root=tmp_path / "does-not-exist")


def test_demo_buffer_is_capped_deterministic_and_disjoint_from_the_corpus(tmp_path):
    ws1 = Workspace(tmp_path / "one").ensure()
    ws2 = Workspace(tmp_path / "two").ensure()
    s1 = build_demo_buffer(ws1, max_bytes=60_000)
    s2 = build_demo_buffer(ws2, max_bytes=60_000)
    assert s1["documents"] == s2["documents"] and s1["bytes"] == s2["bytes"]
    assert 40_000 < s1["bytes"] <= 60_000 and s1["records"] >= 5
    rows = read_buffer_files(s1["files"]).to_pylist()
    assert len(rows) == s1["records"]
    assert pq.read_schema(s1["files"][0]).remove_metadata().equals(SCHEMA)
    assert {r["source"] for r in rows} <= {f"demo:{p}" for p in DEMO_PACKAGES} | {"demo:fiction"}
    assert len({r["source"] for r in rows}) >= 4  # round-robin: several packages, not one
    stdlib_texts = {d.text for d in iter_stdlib_documents()}
    assert not stdlib_texts & {r["text"] for r in rows}
    assert sum(len(r["text"].encode()) for r in rows) == s1["bytes"]


def test_ensure_embedded_default_builds_once(tmp_path):
    ws = Workspace(tmp_path / "ws")
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "workspace.corpus=mini"])
    first = ensure_embedded_default(ws, cfg, demo_max_bytes=30_000)
    assert first["corpus_built"] and first["demo_buffer_built"]
    assert first["buffer"]["records"] == first["demo_buffer"]["records"] > 0
    assert (ws.corpus_train("mini") / "shard-00000.parquet").is_file()
    stamp = {p: p.stat().st_mtime_ns for p in ws.root.rglob("*.parquet")}
    second = ensure_embedded_default(ws, cfg, demo_max_bytes=30_000)
    assert not second["corpus_built"] and not second["demo_buffer_built"]
    assert second["corpus"] == first["corpus"]
    assert {p: p.stat().st_mtime_ns for p in ws.root.rglob("*.parquet")} == stamp
