"""lib.files: atomic writes leave the old file or the new one, hashes match hashlib/xxhash, and a
refused hard link falls back to a copy."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import xxhash

from lib import files


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_json_that_fails_to_serialise_leaves_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    files.write_json(path, {"step": 1}, indent=1)
    with pytest.raises(TypeError):
        files.write_json(path, {"step": 2, "bad": object()})
    assert json.loads(path.read_text()) == {"step": 1}
    assert _leftovers(tmp_path) == []


def test_a_write_that_raises_midway_leaves_no_partial_file(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"old content")

    def blocks():
        yield b"new "
        yield b"half"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        with files.atomic_open(path, "wb") as fh:
            for block in blocks():
                fh.write(block)
    assert path.read_bytes() == b"old content"
    assert _leftovers(tmp_path) == []

    files.write_bytes(path, b"new content")
    files.write_text(tmp_path / "t.txt", "héllo\n")
    assert path.read_bytes() == b"new content"
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo\n"
    assert _leftovers(tmp_path) == []


def test_atomic_path_keeps_a_suffix_for_numpy(tmp_path):
    import numpy as np

    path = tmp_path / "exact.npy"
    with files.atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, np.arange(3))  # numpy would append .npy to a name without it
    assert np.load(path).tolist() == [0, 1, 2]
    assert _leftovers(tmp_path) == []


def test_temporary_names_are_unique(tmp_path):
    names = {files.temp_sibling(tmp_path / "x.json") for _ in range(50)}
    assert len(names) == 50


def test_published_folder_replaces_the_old_one_or_leaves_it(tmp_path):
    final = tmp_path / "v1"
    with files.publish_folder(final) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with files.publish_folder(final) as tmp:
            (tmp / "a").write_text("2")
            raise RuntimeError("killed")
    assert (final / "a").read_text() == "1"
    with files.publish_folder(final) as tmp:
        (tmp / "b").write_text("3")
    assert sorted(p.name for p in final.iterdir()) == ["b"]
    assert _leftovers(tmp_path) == []


def test_file_hash_equals_the_libraries_over_the_bytes(tmp_path):
    data = os.urandom((1 << 22) + 12345)  # more than one read block
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert files.file_hash(path) == hashlib.sha256(data).hexdigest()
    assert files.file_hash(path, "xxh3_128") == xxhash.xxh3_128(data).hexdigest()
    copy = tmp_path / "copy"
    assert files.copy_hashed(path, copy) == hashlib.sha256(data).hexdigest()
    assert copy.read_bytes() == data
    with pytest.raises(ValueError, match="unknown hash"):
        files.file_hash(path, "md5")


def test_link_or_copy_links_and_copies_when_the_link_is_refused(tmp_path, monkeypatch):
    src = tmp_path / "src.parquet"
    src.write_bytes(b"rows")
    files.link_or_copy(src, tmp_path / "a" / "linked.parquet")
    assert os.path.samefile(src, tmp_path / "a" / "linked.parquet")

    def refuse(a, b):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    dst = tmp_path / "b" / "copied.parquet"
    dst.parent.mkdir()
    dst.write_bytes(b"stale")
    files.link_or_copy(src, dst)
    assert dst.read_bytes() == b"rows"
    assert not os.path.samefile(src, dst)


def test_json_lines_name_the_line_and_the_problem(tmp_path):
    """One object per non-blank line, from text or from a binary file; a line that is not UTF-8,
    not JSON or not an object stops the read with its number."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "one"}\n\n  \n{"text": "two", "n": 2}\n')
    with open(path, "rb") as fh:
        assert list(files.json_lines(fh)) == [(1, {"text": "one"}), (4, {"text": "two", "n": 2})]
    assert list(files.json_lines(['{"a": 1}', "", '{"b": 2}'])) == [(1, {"a": 1}), (3, {"b": 2})]
    for lines, line, problem in (
        ([b'{"a": 1}', b'{"text": "caf\xe9"}'], 2, "not valid UTF-8"),
        (['{"a": 1}', "", '{"text": '], 3, "not valid JSON"),
        (['["a", "list"]'], 1, "expected a JSON object, got list"),
    ):
        with pytest.raises(files.JsonLineError) as caught:
            list(files.json_lines(lines))
        assert caught.value.line == line and caught.value.problem.startswith(problem)
        assert str(caught.value).startswith(f"line {line}: {problem}")
