"""The foundation's commands through the real `consolidate` app: buffer add/ls/stats/flush,
corpus build-stdlib/build-demo-buffer, demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from cli.main import app
from lib.buffer.store import Buffer
from lib.buffer.records import content_hash, read_buffer_files

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def cli(ws: Path, *args: str, input: str | bytes | None = None):
    return runner.invoke(app, [*args, "--workspace", str(ws)], input=input)


def buffer_rows(ws: Path) -> list[dict]:
    return read_buffer_files(Buffer(ws / "buffers", recover=False).list_buffers()).to_pylist()


def test_buffer_add_every_input_kind(tmp_path):
    ws = tmp_path / "ws"
    (tmp_path / "note.txt").write_text("a plain text note\nwith two lines\n", encoding="utf-8")
    (tmp_path / "readme.md").write_text("# Title\n\nSome *markdown* — ünïcödé.\n", encoding="utf-8")
    (tmp_path / "chats.jsonl").write_text(
        json.dumps({"text": "first chat"}) + "\n\n" + json.dumps({"text": "second chat", "source": "chat:42"}) + "\n",
        encoding="utf-8",
    )
    pq.write_table(pa.table({"text": ["row one", "row two", "row three"], "other": [1, 2, 3]}), tmp_path / "docs.parquet")
    files = [str(tmp_path / n) for n in ("note.txt", "readme.md", "chats.jsonl", "docs.parquet")]
    result = cli(ws, "buffer", "add", *files, "-", "--json", input="from standard input\n")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["added"] == 8 and report["errors"] == [] and len(report["flushed"]) == 1
    rows = buffer_rows(ws)
    assert [r["text"] for r in rows] == [
        "a plain text note\nwith two lines\n", "# Title\n\nSome *markdown* — ünïcödé.\n",
        "first chat", "second chat", "row one", "row two", "row three", "from standard input\n",
    ]
    assert rows[0]["source"] == f"file:{files[0]}" and rows[3]["source"] == "chat:42"
    assert rows[2]["source"] == f"file:{files[2]}" and rows[-1]["source"] == "stdin"
    assert len({r["id"] for r in rows}) == 8


def test_buffer_add_takes_folders_like_init_replay(tmp_path):
    """The README's `consolidate buffer add notes/ chats.jsonl`: a folder brings its supported
    files, recursively and sorted, without hidden paths or binaries; an empty folder is refused
    by name while the other inputs proceed."""
    ws, notes = tmp_path / "ws", tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / ".git").mkdir()
    (notes / "b.md").write_text("second note", encoding="utf-8")
    (notes / "a.txt").write_text("first note", encoding="utf-8")
    (notes / "sub" / "c.py").write_text("def third():\n    return 3\n", encoding="utf-8")
    (notes / "sub" / "d.ndjson").write_text(json.dumps({"text": "fourth, as JSON"}) + "\n", encoding="utf-8")
    (notes / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    (notes / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "empty").mkdir()
    result = cli(ws, "buffer", "add", str(notes), str(tmp_path / "empty"), "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert [r["text"] for r in buffer_rows(ws)] == ["first note", "second note", "def third():\n    return 3\n", "fourth, as JSON"]
    assert report["added"] == 4 and report["skipped_in_folders"] == {str(notes): 1}
    assert report["errors"] == [f"{tmp_path / 'empty'}: a folder with no text, markdown, source code, JSONL or parquet files"]


def test_buffer_add_invalid_utf8_names_the_file_and_others_proceed(tmp_path):
    ws = tmp_path / "ws"
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    good = tmp_path / "good.md"
    good.write_text("fine text", encoding="utf-8")
    bad_jsonl = tmp_path / "broken.jsonl"
    bad_jsonl.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    empty_jsonl = tmp_path / "empty-text.jsonl"
    empty_jsonl.write_text('{"text": "ok"}\n{"text": "   "}\n', encoding="utf-8")
    result = cli(ws, "buffer", "add", str(bad), str(good), str(bad_jsonl), str(empty_jsonl), str(tmp_path / "missing.txt"))
    assert result.exit_code == 1
    assert f"{bad}: not valid UTF-8 at byte 3" in result.stderr
    assert f"{bad_jsonl}:2: not valid JSON" in result.stderr
    assert f"{empty_jsonl}:2: text is empty or whitespace only" in result.stderr
    assert f"{tmp_path / 'missing.txt'}: no such file" in result.stderr
    assert "added 1 records from 1 of 5 inputs" in result.stdout
    assert [r["text"] for r in buffer_rows(ws)] == ["fine text"]  # rejected files added nothing


def test_buffer_add_refuses_parquet_without_text_and_oversized_records(tmp_path):
    ws = tmp_path / "ws"
    pq.write_table(pa.table({"body": ["no text column"]}), tmp_path / "wrong.parquet")
    (tmp_path / "big.txt").write_text("x" * 50, encoding="utf-8")
    result = cli(ws, "buffer", "add", str(tmp_path / "wrong.parquet"), str(tmp_path / "big.txt"), "--set", "buffer.max_text_bytes=10")
    assert result.exit_code == 1
    assert "wrong.parquet: no `text` column (columns: body)" in result.stderr
    assert "big.txt: text is 50 bytes in UTF-8, over the limit of 10" in result.stderr
    assert buffer_rows(ws) == []


def test_buffer_add_no_flush_then_stats_and_flush(tmp_path):
    ws = tmp_path / "ws"
    (tmp_path / "a.txt").write_text("kept in the log", encoding="utf-8")
    result = cli(ws, "buffer", "add", str(tmp_path / "a.txt"), "--no-flush")
    assert result.exit_code == 0, result.output
    assert "1 in the write-ahead log" in result.stdout
    stats = json.loads(cli(ws, "buffer", "stats", "--json").stdout)
    assert stats["files"] == 0 and stats["pending_log"] == 1 and stats["abandoned_segments"] == 1
    human = cli(ws, "buffer", "stats")
    assert human.exit_code == 0 and "records pending in write-ahead logs" in human.stdout
    flushed = cli(ws, "buffer", "flush", "--json")
    assert flushed.exit_code == 0, flushed.output
    report = json.loads(flushed.stdout)
    assert report["records"] == 1 and len(report["files_written"]) == 1
    stats = json.loads(cli(ws, "buffer", "stats", "--json").stdout)
    assert stats["files"] == 1 and stats["records"] == 1 and stats["pending_log"] == 0 and stats["bytes"] > 0
    assert [r["text"] for r in buffer_rows(ws)] == ["kept in the log"]


def test_buffer_flush_leaves_a_live_writers_log_alone(tmp_path):
    ws = tmp_path / "ws"
    script = textwrap.dedent(
        """
        import sys, time
        from lib.buffer.store import Buffer
        buf = Buffer(sys.argv[1], flush_size=1000)
        buf.add("held by a live server")
        print("ready", flush=True)
        sys.stdin.readline()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(ws / "buffers")], env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        result = cli(ws, "buffer", "flush")
        assert result.exit_code == 0, result.output
        assert "replayed 0 records" in result.stdout and "1 records stay in 1 logs of live writers" in result.stdout
    finally:
        proc.stdin.close()
        proc.wait()


def test_buffer_ls_shows_rows_and_lineage_status(tmp_path):
    ws = tmp_path / "ws"
    for name in ("one", "two"):
        (tmp_path / f"{name}.txt").write_text(f"document {name}", encoding="utf-8")
        assert cli(ws, "buffer", "add", str(tmp_path / f"{name}.txt")).exit_code == 0
    rows = json.loads(cli(ws, "buffer", "ls", "--json").stdout)
    assert [r["rows"] for r in rows] == [1, 1] and {r["status"] for r in rows} == {"unregistered"}
    from lib.registry.lineage import Lineage

    first = ws / "buffers" / rows[0]["file"]
    Lineage(ws / "lineage.duckdb").register_buffer_file(content_hash(first), first, 1, first.stat().st_size)
    rows = json.loads(cli(ws, "buffer", "ls", "--json").stdout)
    assert [r["status"] for r in rows] == ["pending", "unregistered"]
    table = cli(ws, "buffer", "ls")
    assert table.exit_code == 0 and rows[0]["file"][:20] in table.stdout


def test_corpus_and_demo_commands(tmp_path):
    ws = tmp_path / "ws"
    built = cli(ws, "corpus", "build-stdlib", "--name", "small", "--max-mb", "0.5", "--json")
    assert built.exit_code == 0, built.output
    stats = json.loads(built.stdout)
    assert stats["name"] == "small" and 0 < stats["bytes"] <= 500_000
    assert (ws / "corpora" / "small" / "train" / "shard-00000.parquet").is_file()
    human = cli(ws, "corpus", "build-stdlib", "--name", "small", "--max-mb", "0.5")
    assert human.exit_code == 0 and "validation" in human.stdout
    bad = cli(ws, "corpus", "build-stdlib", "--val-fraction", "2")
    assert isinstance(bad.exception, ValueError) and "val_fraction" in str(bad.exception)

    demo_buf = cli(ws, "corpus", "build-demo-buffer", "--max-kb", "20", "--package", "typer", "--package", "click", "--json")
    assert demo_buf.exit_code == 0, demo_buf.output
    info = json.loads(demo_buf.stdout)
    # the named packages, plus the demo's fictional towns (facts no model can know), all within the cap
    assert set(info["packages"]) == {"typer", "click", "fictional towns"} and 0 < info["bytes"] <= 20_000

    demo = cli(ws, "demo", "--set", "workspace.corpus=small", "--set", "model.pretrain_iterations=6",
               "--set", "model.num_layers=2", "--set", "training.num_iterations=4")
    assert demo.exit_code == 0, demo.output
    # the whole story ran: v0 bootstrapped, one night gated, the plot written, where to look printed
    from lib.registry.lineage import Lineage

    versions = {v["version"]: v for v in Lineage(ws / "lineage.duckdb").versions()}
    assert set(versions) == {"v0", "v1"} and versions["v1"]["parent"] == "v0"
    assert "where to look" in demo.stdout and (ws / "demo.png").stat().st_size > 10_000
    # and the retention matrix up to v1: printed, and drawn as a heat map
    assert "retention: each version" in demo.stdout and (ws / "retention.png").stat().st_size > 10_000
    assert "original corpus 'small' (already there)" in demo.stdout  # built above: not rebuilt
    assert "demo memory buffer (built)" not in demo.stdout  # the buffer has records: not rebuilt
    assert f"{info['records']}" in demo.stdout


def test_buffer_add_packs_whole_inputs_into_files(tmp_path):
    """Inputs are never split across buffer files (each is imported whole or not at all): a
    large one gets a file of its own, small ones share one."""
    ws = tmp_path / "ws"
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"text": f"line {i} " + "é" * (i % 7)}) + "\n" for i in range(2500)), encoding="utf-8")
    (tmp_path / "a.txt").write_text("small one", encoding="utf-8")
    (tmp_path / "b.txt").write_text("small two", encoding="utf-8")
    result = cli(ws, "buffer", "add", str(big), str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
                 "--set", "buffer.flush_size=1000", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["added"] == 2502
    files = Buffer(ws / "buffers", recover=False).list_buffers()
    assert [pq.ParquetFile(f).metadata.num_rows for f in files] == [2500, 2]
    assert [r["text"] for r in buffer_rows(ws)] == [f"line {i} " + "é" * (i % 7) for i in range(2500)] + ["small one", "small two"]
    assert not list((ws / "buffers").glob(".*.tmp")) and not list((ws / "buffers" / "wal").glob("*.log"))
