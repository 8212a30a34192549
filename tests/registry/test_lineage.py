"""The lineage registry: schema migrations, transactional version records, promotion, rollback,
ancestry over iterative consolidations, and recovery from a kill between training and promotion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

import lib.registry.lineage as lineage_mod
from lib.evaluation.gate import GateDecision, RegressionGate
from lib.registry.lineage import Lineage, version_digest
from lib.registry.records import LineageError
from lib.registry.promotion import conclude, promote, rollback

ROOT = Path(__file__).resolve().parents[2]


def count(db: Path, table: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def bootstrap(lin: Lineage, ws) -> None:
    lin.start_run("boot", kind="bootstrap", config={"training": {"lr_scale": 1.0}})
    lin.record_version("v0", ws.checkpoint("v0"), run_id="boot", metrics={"v0": {"old_val": {"bpb": 2.0}}})
    promote(lin, "v0", "pre-trained base", actor="bootstrap")
    lin.finish_run("boot", version="v0")


def night(lin: Lineage, ws, run_id: str, files: list[str], old: float, new_parent: float, new_cand: float,
          lr_scale: float = 0.1, decide: bool = True) -> str:
    """What a nightly flow records: its buffer files, the run, the candidate with both sides'
    metrics, then the gate's decision."""
    for name in files:
        lin.register_buffer_file(f"hash-{name}", ws.buffers / f"{name}.parquet", rows=10, nbytes=100)
    parent = lin.alias("champion")
    lin.start_run(run_id, parent=parent, config={"training": {"lr_scale": lr_scale}, "sampling": {"new_data_ratio": 0.1}})
    version = lin.next_version(run_id)
    parent_old = lin.metrics(parent)["old_val"]["bpb"]
    metrics = {
        parent: {"old_val": {"bpb": parent_old}, "new_heldout": {"bpb": new_parent}},
        version: {"old_val": {"bpb": old}, "new_heldout": {"bpb": new_cand}},
    }
    lin.record_version(version, ws.checkpoint(version), parent=parent, run_id=run_id,
                       inputs=[f"hash-{n}" for n in files], metrics=metrics,
                       manifest={"hash": f"manifest-{run_id}", "path": "m.parquet", "stats": {"tokens": 1000}})
    if decide:
        conclude(lin, version, RegressionGate().decide(metrics[parent], metrics[version]))
        lin.finish_run(run_id, version=version, timings={"train": 1.5})
    return version


@pytest.fixture()
def lin(workspace):
    return Lineage(workspace.lineage_db)


# -- schema ---------------------------------------------------------------------------------------


def test_v0_file_upgrades_to_the_current_schema_keeping_its_data(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))  # an old file: no schema_version table, something else in it
    con.execute("CREATE TABLE notes (note VARCHAR)")
    con.execute("INSERT INTO notes VALUES ('kept')")
    con.close()
    lin = Lineage(db)
    assert lin.schema_version() == lineage_mod.SCHEMA_VERSION
    assert lin.register_buffer_file("h", "b.parquet", 1, 1)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT note FROM notes").fetchall() == [("kept",)]
    con.close()
    Lineage(db)  # opening again applies nothing twice
    assert count(db, "schema_version") == lineage_mod.SCHEMA_VERSION


def test_a_new_migration_upgrades_in_place_or_not_at_all(tmp_path, monkeypatch):
    db = tmp_path / "l.duckdb"
    Lineage(db).register_buffer_file("h", "b.parquet", 3, 30)
    current = lineage_mod.SCHEMA_VERSION
    monkeypatch.setattr(lineage_mod, "SCHEMA_VERSION", current + 1)
    monkeypatch.setattr(lineage_mod, "MIGRATIONS", lineage_mod.MIGRATIONS + [[
        "ALTER TABLE buffer_files ADD COLUMN language VARCHAR",
        "SELECT * FROM no_such_table",  # fails half-way: the ALTER must not stay
    ]])
    with pytest.raises(duckdb.CatalogException):
        Lineage(db)
    monkeypatch.setattr(lineage_mod, "SCHEMA_VERSION", current)
    assert Lineage(db).schema_version() == current
    monkeypatch.setattr(lineage_mod, "SCHEMA_VERSION", current + 1)
    monkeypatch.setattr(lineage_mod, "MIGRATIONS", lineage_mod.MIGRATIONS[:current] + [[
        "ALTER TABLE buffer_files ADD COLUMN language VARCHAR DEFAULT 'en'",
    ]])
    lin = Lineage(db)
    assert lin.schema_version() == current + 1
    assert [b.rows for b in lin.buffer_files()] == [3]


def test_newer_schema_is_refused(tmp_path):
    db = tmp_path / "l.duckdb"
    Lineage(db)
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO schema_version VALUES (7, now())")
    con.close()
    with pytest.raises(LineageError, match=rf"l\.duckdb has schema version 7, newer than this code's {lineage_mod.SCHEMA_VERSION}"):
        Lineage(db)


# -- versions -------------------------------------------------------------------------------------


def test_next_version_and_reuse_by_run(lin, workspace):
    assert lin.next_version() == "v0"
    bootstrap(lin, workspace)
    assert lin.next_version() == "v1"
    night(lin, workspace, "n1", ["a"], 2.0, 3.0, 2.5, decide=False)
    assert lin.next_version() == "v2"
    assert lin.next_version("n1") == "v1"
    with pytest.raises(LineageError, match="already recorded by run 'n1'"):
        lin.record_version("v1", "elsewhere", parent="v0", run_id="other")
    with pytest.raises(LineageError, match="parent version 'v9'"):
        lin.record_version("v5", "p", parent="v9", run_id="x")


def test_a_failure_inside_record_version_leaves_nothing(lin, workspace, monkeypatch):
    bootstrap(lin, workspace)
    lin.register_buffer_file("hash-a", "a.parquet", 1, 1)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Lineage, "record_metrics", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        lin.record_version("v1", "p", parent="v0", run_id="n1", inputs=["hash-a"],
                           manifest={"hash": "m"}, metrics={"v1": {"old_val": {"bpb": 1.0}}})
    assert lin.get_version("v1") is None
    assert count(lin.db_path, "run_inputs") == 0 and count(lin.db_path, "manifests") == 0


def test_killed_process_mid_transaction_leaves_no_half_version(lin, workspace):
    bootstrap(lin, workspace)
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from lib.registry.lineage import Lineage
        lin = Lineage({str(lin.db_path)!r})
        with lin.transaction() as con:
            con.execute("INSERT INTO versions VALUES ('v1', 'v0', 'p', NULL, 'candidate', 'n1', NULL, now(), '{{}}')")
            lin.record_inputs('n1', ['h1', 'h2'], con)
            print('inside', flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "inside"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lin.get_version("v1") is None
    assert lin.run_inputs("n1") == []
    assert [v["version"] for v in lin.versions()] == ["v0"]


# -- gate outcomes --------------------------------------------------------------------------------


def test_pass_promotes_and_consumes(lin, workspace):
    bootstrap(lin, workspace)
    v = night(lin, workspace, "n1", ["a", "b"], old=1.99, new_parent=3.0, new_cand=2.0)
    assert (v, lin.alias("champion"), lin.alias("latest")) == ("v1", "v1", "v1")
    assert lin.get_version("v1")["status"] == "accepted"
    assert {(b.content_hash, b.status, b.consumed_by) for b in lin.buffer_files()} == {
        ("hash-a", "consumed", "v1"), ("hash-b", "consumed", "v1")}
    [decision] = lin.gate_decisions("v1")
    assert decision["passed"] and decision["actor"] == "gate"
    assert [r["name"] for r in decision["rules"]] == ["forgetting", "acquisition"]


def test_fail_keeps_champion_and_pending_buffers(lin, workspace):
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a"], old=2.5, new_parent=3.0, new_cand=1.0)
    assert lin.alias("champion") == "v0" and lin.alias("latest") == "v0"
    assert lin.get_version("v1")["status"] == "rejected"
    assert [b.status for b in lin.buffer_files()] == ["pending"]
    [decision] = lin.gate_decisions("v1")
    assert not decision["passed"]
    assert "rose 25.00%" in decision["rules"][0]["reason"]
    # The pending buffer goes into the next night, which passes.
    night(lin, workspace, "n2", ["a", "c"], old=1.98, new_parent=3.0, new_cand=2.0)
    assert lin.alias("champion") == "v2"
    assert lin.get_version("v2")["parent"] == "v0"
    assert {b.consumed_by for b in lin.buffer_files()} == {"v2"}


def test_person_overrides_a_rejection(lin, workspace):
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a"], old=2.5, new_parent=3.0, new_cand=1.0)
    with pytest.raises(ValueError, match="--reason"):
        promote(lin, "v1", "")
    with pytest.raises(LineageError, match="unknown version 'v7'"):
        promote(lin, "v7", "typo")
    out = promote(lin, "v1", "old-data rise is the new formatting, checked by hand")
    assert out["changed"] and out["was"] == "rejected" and out["previous"] == "v0"
    assert lin.alias("champion") == "v1" and lin.get_version("v1")["status"] == "accepted"
    assert [b.status for b in lin.buffer_files()] == ["consumed"]
    decisions = lin.gate_decisions("v1")
    assert [(d["actor"], d["passed"]) for d in decisions] == [("gate", False), ("person", True)]
    assert decisions[1]["reason"].startswith("old-data rise")
    last = lin.alias_history("champion")[-1]
    assert (last["actor"], last["previous"], last["version"]) == ("promote", "v0", "v1")
    assert promote(lin, "v1", "again")["changed"] is False


def test_rollback_moves_champion_to_parent(lin, workspace):
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a"], 1.99, 3.0, 2.0)
    night(lin, workspace, "n2", ["b"], 1.98, 3.0, 2.0)
    out = rollback(lin, "users report regressions", requeue=True)
    assert out == {"from": "v2", "to": "v1", "requeued": ["hash-b"], "left_memory": False}  # v2 taught nothing to remember here
    assert lin.alias("champion") == "v1"
    assert lin.get_version("v2")["status"] == "rolled_back"
    assert {b.content_hash: b.status for b in lin.buffer_files()} == {"hash-a": "consumed", "hash-b": "pending"}
    last = lin.alias_history("champion")[-1]
    assert (last["actor"], last["reason"], last["previous"]) == ("rollback", "users report regressions", "v2")
    rollback(lin)
    with pytest.raises(LineageError, match="'v0' has no parent"):
        rollback(lin)


# -- history --------------------------------------------------------------------------------------


def test_three_iterative_consolidations_give_the_chain(lin, workspace):
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a", "b"], 1.99, 3.0, 2.0)
    night(lin, workspace, "n2", ["c"], 1.985, 3.1, 2.2)
    night(lin, workspace, "n3", ["d", "e"], 1.98, 3.2, 2.4, lr_scale=0.2)
    chain = lin.ancestry("v3")
    assert [s["version"] for s in chain] == ["v3", "v2", "v1", "v0"]
    assert [s["parent"] for s in chain] == ["v2", "v1", "v0", None]
    assert [[b["content_hash"] for b in s["inputs"]] for s in chain] == [["hash-d", "hash-e"], ["hash-c"], ["hash-a", "hash-b"], []]
    assert all(b["consumed_by"] == s["version"] for s in chain for b in s["inputs"])
    assert chain[0]["metrics"] == {"old_val": {"bpb": 1.98}, "new_heldout": {"bpb": 2.4}}
    assert chain[0]["parent_metrics"] == {"old_val": {"bpb": 1.985}, "new_heldout": {"bpb": 3.2}}
    assert chain[-1]["metrics"] == {"old_val": {"bpb": 2.0}}
    assert chain[0]["run"]["config"]["training"]["lr_scale"] == 0.2
    assert chain[0]["run"]["timings"] == {"train": 1.5} and chain[0]["run"]["code_version"]
    assert [len(s["gate_decisions"]) for s in chain] == [1, 1, 1, 0]
    d = lin.diff("v1", "v3")
    assert d["config"] == {"training.lr_scale": {"a": 0.1, "b": 0.2}}
    assert d["metrics"]["old_val.bpb"]["a"] == 1.99 and d["metrics"]["old_val.bpb"]["b"] == 1.98
    assert d["inputs"] == {"only_a": ["hash-a", "hash-b"], "only_b": ["hash-d", "hash-e"], "both": 0}
    assert [(v["version"], v["aliases"]) for v in lin.versions()] == [("v0", []), ("v1", []), ("v2", []), ("v3", ["champion", "latest"])]
    with pytest.raises(LineageError, match="unknown version 'v9'"):
        lin.ancestry("v9")


NIGHT_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from lib.registry.lineage import Lineage
from lib.workspace import Workspace
from test_lineage import night
ws = Workspace({ws!r})
lin = Lineage(ws.lineage_db)
night(lin, ws, "n1", ["a", "b"], 1.99, 3.0, 2.0, decide=False)   # trained and evaluated
os.kill(os.getpid(), signal.SIGKILL)                             # dies before the gate step
"""


def test_kill_between_training_and_promotion_then_rerun(lin, workspace):
    bootstrap(lin, workspace)
    script = NIGHT_SCRIPT.format(root=str(ROOT), tests=str(Path(__file__).resolve().parent), ws=str(workspace.root))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # Consistent: a candidate, champion unmoved, buffers pending, the run still "running".
    assert lin.get_version("v1")["status"] == "candidate"
    assert lin.alias("champion") == "v0"
    assert [b.status for b in lin.buffer_files()] == ["pending", "pending"]
    assert lin.get_run("n1")["status"] == "running"
    assert [(r["run_id"], r["version"], r["version_status"]) for r in lin.incomplete_runs()] == [("n1", "v1", "candidate")]
    before = {t: count(lin.db_path, t) for t in ("versions", "runs", "run_inputs", "manifests", "metrics")}
    # The whole night again, same run id: same version id, nothing duplicated, then promoted.
    v = night(lin, workspace, "n1", ["a", "b"], 1.99, 3.0, 2.0)
    night_again = night(lin, workspace, "n1", ["a", "b"], 1.99, 3.0, 2.0)
    assert v == night_again == "v1"
    assert {t: count(lin.db_path, t) for t in before} == before
    assert count(lin.db_path, "gate_decisions") == 1
    assert [h["version"] for h in lin.alias_history("champion")] == ["v0", "v1"]
    assert lin.get_run("n1")["status"] == "completed" and lin.incomplete_runs() == []
    assert [b.consumed_by for b in lin.buffer_files()] == ["v1", "v1"]


def test_version_digest(tmp_path):
    import hashlib

    d = tmp_path / "v1"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"weights")
    (d / "config.json").write_text("{}")
    assert version_digest(d) == hashlib.sha256(b"weights").hexdigest()
    # Stored as a delta: the weights are gone, meta.json keeps their digest.
    (d / "model.safetensors").unlink()
    (d / "meta.json").write_text(json.dumps({"digest": "abc"}))
    assert version_digest(d) == "abc"
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        version_digest(tmp_path)


def test_reads_and_writes_from_threads_of_one_process(lin, workspace):
    """Prefect runs tasks in threads: a read while another thread holds a transaction must see
    the committed state, and a write must wait for a reader instead of failing."""
    import threading

    bootstrap(lin, workspace)
    inside, release = threading.Event(), threading.Event()

    def writer():
        with lin.transaction() as con:
            lin.set_alias("latest", "v0", "test", "", con)
            inside.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert inside.wait(10)
    assert lin.alias("champion") == "v0"          # read while the other thread writes
    release.set()
    t.join()
    reading, done = threading.Event(), threading.Event()

    def reader():
        with lin.reading() as con:
            con.execute("SELECT count(*) FROM versions").fetchone()
            reading.set()
            time.sleep(0.5)
        done.set()

    t = threading.Thread(target=reader)
    t.start()
    assert reading.wait(10)
    lin.set_alias("latest", "v0", "after-read")   # waits for the reader's connection, then writes
    assert done.is_set()
    t.join()
    assert lin.alias_history("latest")[-1]["actor"] == "after-read"


def test_killed_during_promotion_leaves_no_half_promotion(lin, workspace):
    """SIGKILL after the aliases moved but before the buffers were marked consumed: none of the
    promotion stays; concluding again completes it."""
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a"], 1.99, 3.0, 2.0, decide=False)
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from lib.evaluation.gate import GateDecision
        from lib.registry.lineage import Lineage
        from lib.registry.promotion import conclude

        def stall(self, hashes, version, con=None):
            print('aliases moved', flush=True)
            time.sleep(60)

        Lineage.mark_consumed = stall
        conclude(Lineage({str(lin.db_path)!r}), 'v1', GateDecision(True, []))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "aliases moved"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lin.alias("champion") == "v0" and lin.get_version("v1")["status"] == "candidate"
    assert lin.gate_decisions("v1") == [] and [b.status for b in lin.buffer_files()] == ["pending"]
    assert [h["version"] for h in lin.alias_history("champion")] == ["v0"]
    assert conclude(lin, "v1", GateDecision(True, [])) == "accepted"
    assert lin.alias("champion") == "v1" and [b.consumed_by for b in lin.buffer_files()] == ["v1"]


def test_an_interrupted_query_is_a_keyboard_interrupt(tmp_path):
    """A Ctrl-C that DuckDB catches inside a query comes out of the registry as KeyboardInterrupt,
    so a Ctrl-C'd night counts as stopped (resumed by the next trigger), not failed.

    DuckDB 2.0 reports it two ways: `InterruptException` (an interrupt of the connection: here a
    real one, from another thread, during a real long query) and, for a SIGINT that lands during
    a query, `RuntimeError: Query interrupted`. A real SIGINT cannot be the test: DuckDB 2.0 misses
    about half of them (measured on plain duckdb: a single SIGINT 0.01-1 s into this query, and
    repeated ones after it, left the query running), so the SIGINT form is raised as DuckDB
    raises it, inside the registry's connection block."""
    lin = Lineage(tmp_path / "lineage.duckdb")
    with pytest.raises(KeyboardInterrupt) as caught:
        with lin.reading() as con:
            timer = threading.Timer(0.3, con.interrupt)
            timer.start()
            try:
                con.execute("SELECT count(*) FROM range(1000000000000) t(x) WHERE x % 7 = 3").fetchone()
            finally:
                timer.cancel()
    assert isinstance(caught.value.__cause__, duckdb.InterruptException)
    with pytest.raises(KeyboardInterrupt) as caught:
        with lin.transaction() as con:
            con.execute("SELECT 1")
            raise RuntimeError("Query interrupted")
    assert str(caught.value.__cause__) == "Query interrupted"
    with pytest.raises(RuntimeError, match="something else"):  # other errors stay what they are
        with lin.reading() as con:
            raise RuntimeError("something else")
    assert lin.schema_version() >= 1  # the registry is usable after both
