"""Buffer: round trip, durability across SIGKILL, torn logs, concurrent writers, bad input."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lib.buffer.records import LOG_MAGIC, SCHEMA, InvalidRecordError, read_buffer_files, read_log
from lib.buffer.store import Buffer

ROOT = Path(__file__).resolve().parents[2]


def run_writer(script: str, *args: str) -> subprocess.Popen:
    """A separate Python process that writes to a buffer (a real second process: real locks)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def all_rows(buf: Buffer) -> list[dict]:
    return read_buffer_files(buf.list_buffers()).to_pylist()


# -- round trip --------------------------------------------------------------------------------
def test_round_trip_keeps_ids_sources_times_and_text(tmp_path):
    texts = ["plain ascii", "ünïcödé — 漢字 🙂", "line one\nline two\n\ttabbed", "x" * 100_000]
    before = datetime.now(timezone.utc)
    buf = Buffer(tmp_path, flush_size=100)
    ids = [buf.add(t, source=None if i == 0 else f"chat:{i}") for i, t in enumerate(texts)]
    assert buf.pending() == 4 and buf.list_buffers() == []
    assert buf.total_sequences() == 4
    path = buf.flush()
    after = datetime.now(timezone.utc)
    assert path is not None and Path(path).name.startswith("buffer_") and path.suffix == ".parquet"
    assert buf.list_buffers() == [str(path)]
    assert pq.read_schema(path).remove_metadata().equals(SCHEMA)
    rows = all_rows(buf)
    assert [r["id"] for r in rows] == ids
    assert [r["text"] for r in rows] == texts
    assert [r["source"] for r in rows] == [None, "chat:1", "chat:2", "chat:3"]
    assert all(before <= r["created_at"] <= after for r in rows)
    assert len(set(ids)) == 4
    assert buf.pending() == 0 and buf.total_sequences() == 4
    assert list((tmp_path / "wal").glob("*.log")) == []
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    assert buf.flush() is None  # nothing pending: no empty file


def test_auto_flush_at_flush_size_and_unique_names_within_a_second(tmp_path):
    buf = Buffer(tmp_path, flush_size=3, durability="flush")
    for i in range(7):
        buf.add(f"record {i}")
    assert len(buf.list_buffers()) == 2 and buf.pending() == 1
    for i in range(40):  # many flushes inside the same second must never collide
        buf.add(f"more {i}")
        buf.flush()
    files = buf.list_buffers()
    assert len(files) == 42 == len(set(files))
    assert [r["text"] for r in all_rows(buf)][:7] == [f"record {i}" for i in range(7)]
    assert buf.total_sequences() == 47


def test_add_many_splits_at_flush_size_and_is_all_or_nothing(tmp_path):
    buf = Buffer(tmp_path, flush_size=4)
    ids = buf.add_many([f"doc {i}" for i in range(10)], source="import:a.jsonl")
    assert len(ids) == 10
    assert [pq.ParquetFile(f).metadata.num_rows for f in buf.list_buffers()] == [4, 4]
    with pytest.raises(InvalidRecordError, match="record 1: text is empty"):
        buf.add_many(["fine", "  ", "also fine"])
    assert buf.pending() == 2  # the refused batch added nothing
    buf.flush()
    assert [r["text"] for r in all_rows(buf)] == [f"doc {i}" for i in range(10)]


def test_two_buffers_in_one_process_use_separate_logs(tmp_path):
    a, b = Buffer(tmp_path), Buffer(tmp_path)
    a.add("from a")
    b.add("from b")
    assert len(list((tmp_path / "wal").glob("*.log"))) == 2
    # b must not replay a's live log (a holds its lock)
    assert b.flush() is not None
    assert [r["text"] for r in all_rows(b)] == ["from b"]
    assert a.total_sequences() == 2
    a.close()
    assert sorted(r["text"] for r in all_rows(b)) == ["from a", "from b"]


# -- durability --------------------------------------------------------------------------------
KILLED_WRITER = """
import sys, time
from lib.buffer.store import Buffer
buf = Buffer(sys.argv[1], flush_size=10**6)
for i in range(1000):
    buf.add(f"record {i:04d} " + "é" * (i % 50), source=f"writer:{i % 3}")
print("added", flush=True)
time.sleep(60)
"""


def test_sigkill_before_flush_loses_nothing_and_duplicates_nothing(tmp_path):
    proc = run_writer(KILLED_WRITER, str(tmp_path))
    try:
        assert proc.stdout.readline().strip() == "added", proc.stderr.read()
        # the writer is alive and holds its log: a reader must not steal it
        reader = Buffer(tmp_path)
        assert reader.recovered["records"] == 0
        assert reader.total_sequences() == 1000
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    buf = Buffer(tmp_path)
    assert buf.recovered["records"] == 1000 and buf.recovered["segments"] == 1
    buf.flush()
    rows = all_rows(buf)
    assert sorted(r["text"] for r in rows) == sorted(f"record {i:04d} " + "é" * (i % 50) for i in range(1000))
    assert len({r["id"] for r in rows}) == 1000
    assert {r["source"] for r in rows} == {"writer:0", "writer:1", "writer:2"}
    assert list((tmp_path / "wal").glob("*.log")) == []
    # a second open replays nothing again
    again = Buffer(tmp_path)
    again.flush()
    assert again.total_sequences() == 1000 and len(again.list_buffers()) == 1


IMPORTER = """
import sys
from lib.buffer.store import Buffer
buf = Buffer(sys.argv[1])
print("ready", flush=True)
for k in range(1000):
    buf.add_file([f"batch {k} record {i} " * 8 for i in range(20_000)], source=f"import:{k}")
"""


def test_add_file_is_all_or_nothing_under_sigkill(tmp_path):
    """`add_file` (what `buffer add` uses) writes one parquet per batch under a temporary name:
    killed at any moment, every batch in the buffer is whole; the dead writer's temporary file
    is removed by the next open, and nothing in the write-ahead log is left to replay."""
    proc = run_writer(IMPORTER, str(tmp_path))
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".import-*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.01)  # kill it while a batch is being written
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    files = sorted(tmp_path.glob("buffer_*.parquet"))
    assert all(pq.ParquetFile(f).metadata.num_rows == 20_000 for f in files)
    buf = Buffer(tmp_path)
    assert not list(tmp_path.glob(".import-*.tmp")) and buf.recovered["records"] == 0
    rows = all_rows(buf)
    assert len(rows) == 20_000 * len(files) and len({r["source"] for r in rows}) == len(files)
    assert buf.add_file([]) is None and buf.list_buffers() == [str(f) for f in files]
    with pytest.raises(InvalidRecordError, match="record 1"):
        buf.add_file(["fine", ""])  # validated all or nothing, like add_many
    assert buf.list_buffers() == [str(f) for f in files]


def test_crash_between_parquet_and_log_delete_does_not_duplicate(tmp_path):
    buf = Buffer(tmp_path, flush_size=100)
    buf.add_many([f"doc {i}" for i in range(10)])
    log = next((tmp_path / "wal").glob("*.log"))
    saved = log.read_bytes()
    buf.flush()
    # the state a crash right after the rename leaves: the parquet and the (unlocked) log
    log.write_bytes(saved)
    reopened = Buffer(tmp_path)
    assert reopened.recovered == {"segments": 0, "records": 0, "dropped_bytes": 0, "already_flushed": 1}
    assert not log.exists()
    assert sorted(r["text"] for r in all_rows(reopened)) == sorted(f"doc {i}" for i in range(10))


DEAD_WRITER = """
import os, sys
from lib.buffer.store import Buffer
buf = Buffer(sys.argv[1], flush_size=10**6, durability="flush")
for i in range(int(sys.argv[2])):
    buf.add(f"kept {i}")
os._exit(0)  # dies without flush or close
"""


def test_torn_log_tail_is_dropped_cleanly(tmp_path):
    proc = run_writer(DEAD_WRITER, str(tmp_path), "5")
    assert proc.wait() == 0, proc.stderr.read()
    log = next((tmp_path / "wal").glob("*.log"))
    data = log.read_bytes()
    assert data.startswith(LOG_MAGIC) and len(read_log(log).records) == 5
    # a sixth record whose write was cut in the middle
    full = read_log(log).valid_bytes
    with open(log, "ab") as f:
        f.write(b"MBR1\x40\x00\x00\x00\x12\x34")
    contents = read_log(log)
    assert len(contents.records) == 5 and contents.valid_bytes == full and contents.dropped_bytes == 10
    buf = Buffer(tmp_path)
    assert buf.recovered["records"] == 5 and buf.recovered["dropped_bytes"] == 10
    assert [r["text"] for r in all_rows(buf)] == [f"kept {i}" for i in range(5)]


def test_corrupt_frame_checksum_stops_replay_there(tmp_path):
    proc = run_writer(DEAD_WRITER, str(tmp_path), "3")
    assert proc.wait() == 0, proc.stderr.read()
    log = next((tmp_path / "wal").glob("*.log"))
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF  # flip a byte inside the last record's text
    log.write_bytes(bytes(data))
    buf = Buffer(tmp_path)
    assert buf.recovered["records"] == 2 and buf.recovered["dropped_bytes"] > 0
    assert [r["text"] for r in all_rows(buf)] == ["kept 0", "kept 1"]


CONCURRENT_WRITER = """
import sys, time
from pathlib import Path
from lib.buffer.store import Buffer
folder, name, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
buf = Buffer(folder, flush_size=64)
while not go.exists():
    time.sleep(0.005)
for i in range(500):
    buf.add(f"{name}:{i}:" + name * (i % 200), source=name)
buf.close()
"""


def test_two_concurrent_writer_processes_lose_and_garble_nothing(tmp_path):
    go = tmp_path / "go"
    buf_dir = tmp_path / "buf"
    procs = [run_writer(CONCURRENT_WRITER, str(buf_dir), name, str(go)) for name in ("alpha", "beta")]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    buf = Buffer(buf_dir)
    rows = all_rows(buf)
    assert len(rows) == 1000 and len({r["id"] for r in rows}) == 1000
    expected = {f"{n}:{i}:" + n * (i % 200) for n in ("alpha", "beta") for i in range(500)}
    assert {r["text"] for r in rows} == expected
    assert all(r["text"].startswith(r["source"] + ":") for r in rows)
    assert len(buf.list_buffers()) == len(set(buf.list_buffers())) == 2 * 8  # 500 = 7×64 + 52
    assert list((buf_dir / "wal").glob("*")) == []


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad, message",
    [
        (b"bytes are not text", "text must be str, got bytes"),
        (None, "text must be str, got NoneType"),
        (42, "text must be str, got int"),
        ("", "text is empty or whitespace only"),
        (" \n\t ", "text is empty or whitespace only"),
        ("ok until \ud800 here", "cannot be encoded as UTF-8: surrogates not allowed at character 9"),
        ("é" * 600, "1,200 bytes in UTF-8, over the limit of 1,000"),
    ],
)
def test_bad_input_is_refused_and_nothing_else_is_lost(tmp_path, bad, message):
    buf = Buffer(tmp_path, flush_size=100, max_text_bytes=1000)
    good = buf.add("a good record")
    with pytest.raises(InvalidRecordError, match=message.replace("(", r"\(")):
        buf.add(bad)
    buf.add("another good record")
    buf.flush()
    rows = all_rows(buf)
    assert [r["text"] for r in rows] == ["a good record", "another good record"]
    assert rows[0]["id"] == good
    assert list((tmp_path / "wal").glob("*.log")) == []


def test_bad_source_and_bad_arguments(tmp_path):
    buf = Buffer(tmp_path)
    with pytest.raises(InvalidRecordError, match="source must be str or None, got int"):
        buf.add("text", source=7)
    with pytest.raises(ValueError, match="flush_size must be a positive int"):
        Buffer(tmp_path, flush_size=0)
    with pytest.raises(ValueError, match="durability must be 'fsync' or 'flush'"):
        Buffer(tmp_path, durability="sometimes")
    with pytest.raises(InvalidRecordError, match="use add"):
        buf.add_many("a str is not a batch")
    assert buf.total_sequences() == 0


def test_from_config_reads_the_buffer_section(tmp_path):
    from lib.config import load_config

    cfg = load_config(preset="tiny", overrides=["buffer.durability=flush", "buffer.max_text_bytes=10"])
    buf = Buffer.from_config(tmp_path, cfg)
    assert (buf.flush_size, buf.max_text_bytes, buf.durability) == (100, 10, "flush")
    with pytest.raises(InvalidRecordError, match="over the limit of 10"):
        buf.add("eleven byte")


def test_stats_counts_files_records_and_logs(tmp_path):
    writer = Buffer(tmp_path, flush_size=100)
    writer.add_many(["one", "two", "three"])
    writer.flush()
    writer.add("pending four")
    proc = run_writer(DEAD_WRITER, str(tmp_path), "2")
    assert proc.wait() == 0, proc.stderr.read()
    stats = Buffer(tmp_path, recover=False).stats()
    assert stats["files"] == 1 and stats["records"] == 3 and stats["bytes"] > 0
    assert stats["pending_log"] == 3 and stats["log_segments"] == 2 and stats["abandoned_segments"] == 1
    shutil.copy(writer.list_buffers()[0], tmp_path / "not_a_buffer.parquet.bak")  # ignored: not *.parquet
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    stats = writer.stats()
    assert stats["files"] == 1 and len(stats["unreadable_files"]) == 1


def test_threads_of_one_process_share_a_buffer_safely(tmp_path):
    import threading

    buf = Buffer(tmp_path, flush_size=37, durability="flush")
    ids: list[str] = []

    def worker(name: str) -> None:
        for i in range(200):
            ids.append(buf.add(f"{name}-{i}", source=name))

    threads = [threading.Thread(target=worker, args=(f"t{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    buf.close()
    rows = all_rows(buf)
    assert sorted(r["id"] for r in rows) == sorted(ids) and len(set(ids)) == 800
    assert {r["text"] for r in rows} == {f"t{k}-{i}" for k in range(4) for i in range(200)}
    assert all(pq.ParquetFile(f).metadata.num_rows <= 37 for f in buf.list_buffers())


def test_an_abandoned_buffer_releases_its_log_for_replay(tmp_path):
    import gc

    buf = Buffer(tmp_path, flush_size=100)
    buf.add("left behind by a buffer nobody closed")
    del buf
    gc.collect()
    other = Buffer(tmp_path)
    assert other.recovered["records"] == 1
    assert [r["text"] for r in all_rows(other)] == ["left behind by a buffer nobody closed"]


def test_a_forked_child_never_touches_the_parents_log(tmp_path):
    buf = Buffer(tmp_path, flush_size=100)
    buf.add("parent record")
    pid = os.fork()
    if pid == 0:  # child: its own record goes to a log of its own (no parquet: no pyarrow after fork)
        try:
            buf.add("child record")
            buf.close(flush=False)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert buf.pending() == 1
    buf.flush()  # the parent's record, and the child's log (its writer is gone) replayed
    assert sorted(r["text"] for r in all_rows(buf)) == ["child record", "parent record"]
    assert list((tmp_path / "wal").glob("*.log")) == []
