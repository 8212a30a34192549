"""Faults and bad input (issue #16): a killed night never blocks the next one, one bad file never
stops a night, two triggers never race.

- Bad input: every way a buffer file can be bad, through `consolidate buffer add` (refused with
  its name, the good files of the command imported) and dropped into `buffers/` (quarantined
  with its reason, recorded in lineage, the night goes on).
- Locks: the workspace night lock and the training lock are free the moment their holder dies,
  a waiter names the holder and gives up after its timeout.
- Cache: a pickle record in `<workspace>/cache/` is never unpickled.
- Processes: real `consolidate run` subprocesses killed with a real SIGKILL inside every stage
  (lib.faults: curate, tokenize, train, record, evaluate, gate, promote, store), stopped once
  with Ctrl-C (SIGINT to the process group) and once with SIGTERM mid-training; after each, the
  next run finishes the night with nobody involved, no process is left behind, and lineage's
  invariants hold. Two triggers at once: one night, the other waits or exits 75.

The runs use a tiny model (2 layers, 64 wide, vocab 512), 8 training steps and a 0.3 MB corpus,
and talk to the session's Prefect test server (PREFECT_API_URL), except the Ctrl-C and SIGTERM
runs, which start their own ephemeral server to show that it is stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

pytest_plugins = ["prefect_fixtures", "night_fixtures"]

from lib.registry.lineage import Lineage  # noqa: E402
from night_fixtures import consolidate, finish, night_cfg, run_night  # noqa: E402
from night_fixtures import api_url as _api_url  # noqa: E402
from lib.workspace import Workspace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

GOOD_TEXTS = [
    f"Log of day {i}: the operator checked valve {v} in hall {i} before the pumps started, wrote the pressure "
    f"into the book, and noted that the {w} seal had been replaced the week before because it dripped."
    for i, (v, w) in enumerate(zip(["north", "south", "east", "west", "upper", "lower"],
                                   ["rubber", "copper", "graphite", "steel", "cork", "teflon"]))
]


# -- bad buffer files --------------------------------------------------------------------------
def _invalid_utf8(path: Path) -> None:
    offsets = pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00\x05\x00\x00\x00")
    texts = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"hi\xff\xfe\xfd")])
    pq.write_table(pa.table({"text": texts}), path)


def _corrupt_pages(path: Path) -> None:
    pq.write_table(pa.table({"text": [f"document {i} " * 30 for i in range(40)]}), path, compression="none")
    raw = bytearray(path.read_bytes())
    raw[8:600] = b"\xab" * 592  # the pages, not the footer: the schema reads, the data does not
    path.write_bytes(bytes(raw))


BAD_FILES = {
    # kind: (writer, what the reason / error says)
    "invalid-utf8": (_invalid_utf8, "UTF-8"),
    "int-id": (lambda p: pq.write_table(pa.table({"id": [1, 2], "text": ["one text", "two text"]}), p), "`id` column has type int64"),
    "int-source": (lambda p: pq.write_table(pa.table({"text": ["one text", "two"], "source": [7, 8]}), p), "`source` column has type int64"),
    "no-text": (lambda p: pq.write_table(pa.table({"body": ["no text column"]}), p), "no `text` column (columns: body)"),
    "binary-text": (lambda p: pq.write_table(pa.table({"text": pa.array([b"bytes"], pa.binary())}), p), "`text` column has type binary"),
    "zero-rows": (lambda p: pq.write_table(pa.table({"text": pa.array([], pa.string())}), p), "no rows"),
    "not-parquet": (lambda p: p.write_bytes(b"this is not a parquet file"), "ArrowInvalid"),
    "truncated": (lambda p: (pq.write_table(pa.table({"text": ["cut short"] * 10}), p), p.write_bytes(p.read_bytes()[:-30])), "ArrowInvalid"),
    "corrupt-pages": (_corrupt_pages, "OSError"),
}


def write_bad(folder: Path, kind: str, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{kind}.parquet")
    BAD_FILES[kind][0](path)
    return path


def write_good(folder: Path, texts=GOOD_TEXTS[:3], name: str = "good.parquet") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(pa.table({"text": list(texts), "source": ["notes"] * len(texts)}), path)
    return path


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_buffer_add_refuses_a_bad_file_and_imports_the_good_one(tmp_path, kind):
    from cli.main import app
    from lib.buffer.store import Buffer
    from lib.buffer.records import read_buffer_files

    bad, good = write_bad(tmp_path / "in", kind), write_good(tmp_path / "in")
    ws = tmp_path / "ws"
    result = CliRunner().invoke(app, ["buffer", "add", str(bad), str(good), "--workspace", str(ws)])
    assert result.exit_code == 1, result.output
    assert f"error: {bad}: " in result.stderr and BAD_FILES[kind][1] in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert "added 3 records from 1 of 2 inputs" in result.stdout
    files = Buffer(ws / "buffers", recover=False).list_buffers()
    assert [r["text"] for r in read_buffer_files(files).to_pylist()] == GOOD_TEXTS[:3]


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_ingest_quarantines_a_bad_file_and_goes_on(workspace, kind):
    from lib.buffer.records import content_hash
    from lib.buffer.ingest import ingest

    bad, good = write_bad(workspace.buffers, kind), write_good(workspace.buffers)
    digest = content_hash(bad)
    lin = Lineage(workspace.lineage_db)
    got = ingest(workspace, lin)
    assert got.texts == GOOD_TEXTS[:3] and got.counts["files_quarantined"] == 1
    assert not bad.exists() and good.exists()
    reason = json.loads((workspace.quarantine / f"{bad.name}.reason.json").read_text())
    assert reason["content_hash"] == digest and BAD_FILES[kind][1] in reason["reason"]
    assert (workspace.quarantine / bad.name).is_file()
    status = {b.content_hash: (b.status, b.reason) for b in lin.buffer_files()}
    assert status[digest][0] == "quarantined" and BAD_FILES[kind][1] in status[digest][1]
    assert status[content_hash(good)] == ("pending", None)
    assert ingest(workspace, lin).counts.get("files_quarantined", 0) == 0  # never again


def test_curate_flow_quarantines_every_bad_file_and_the_night_goes_on(tmp_path, prefect_harness):
    from lib.buffer.records import content_hash
    from lib.config import load_config
    from flows.curation import curate

    ws = Workspace(tmp_path / "ws").ensure()
    bad = {kind: write_bad(ws.buffers, kind) for kind in BAD_FILES}
    digests = {kind: content_hash(p) for kind, p in bad.items()}
    write_good(ws.buffers, texts=[*GOOD_TEXTS[:3], GOOD_TEXTS[0]])  # one exact copy: dropped, and counted
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "curation.workers=1", "curation.languages=[]",
                                                "curation.max_drop_share=0.2"])
    state = curate(cfg, return_state=True)
    out = state.result()
    assert out["pending_files"] == len(BAD_FILES) + 1 and out["stats"]["docs_out"] == 3
    lin = {b.content_hash: b for b in Lineage(ws.lineage_db).buffer_files()}
    for kind, digest in digests.items():
        assert lin[digest].status == "quarantined" and BAD_FILES[kind][1] in lin[digest].reason, kind
        assert Path(lin[digest].path).parent == ws.quarantine and Path(lin[digest].path).is_file()
    assert [p.name for p in ws.buffers.glob("*.parquet")] == ["good.parquet"]
    # the night's curation-counts artifact: the documents dropped by reason, and a warning that
    # names the filter that dropped more than curation.max_drop_share of what it saw
    import httpx

    found = httpx.post(f"{_api_url()}/artifacts/filter", timeout=30, json={
        "artifacts": {"key": {"any_": ["curation-counts"]}},
        "flow_runs": {"id": {"any_": [str(state.state_details.flow_run_id)]}}}).raise_for_status().json()
    assert len(found) == 1, found
    counts = {row["what"]: row["value"] for row in json.loads(found[0]["data"])}
    assert counts["docs_in"] == 4 and counts["docs_out"] == 3
    assert {k: v for k, v in counts.items() if k.startswith("dropped_by_reason.")} == {"dropped_by_reason.exact_duplicate": 1}
    assert counts["warning 1"].startswith("the exact dedup filter dropped 1 of the 4 documents it saw (25%)")
    assert "curation.max_drop_share=0.2" in counts["warning 1"] and "warning 2" not in counts


def test_quarantined_names_never_collide(workspace):
    from lib.buffer.ingest import ingest

    lin = Lineage(workspace.lineage_db)
    first = write_bad(workspace.buffers, "no-text", "night.parquet")
    ingest(workspace, lin)
    second = write_bad(workspace.buffers, "int-id", "night.parquet")  # same name, other bytes, another night
    ingest(workspace, lin)
    third = write_bad(workspace.buffers, "zero-rows", "night.parquet")
    ingest(workspace, lin)
    kept = sorted(p.name for p in workspace.quarantine.glob("night*.parquet"))
    assert len(kept) == 3 and "night.parquet" in kept, kept
    reasons = sorted(json.loads(p.read_text())["reason"] for p in workspace.quarantine.glob("night*.reason.json"))
    assert len(reasons) == 3 and any("no `text` column" in r for r in reasons) and any("no rows" in r for r in reasons)
    assert {b.status for b in lin.buffer_files()} == {"quarantined"} and len(lin.buffer_files()) == 3
    assert {Path(b.path).name for b in lin.buffer_files()} == set(kept)
    assert not first.exists() and not second.exists() and not third.exists()


def test_a_quarantine_is_recorded_even_when_its_task_died(workspace):
    """A shard task quarantines a file and dies before its registry changes reach lineage (a
    Prefect retry, or a SIGKILL); and a kill can land between the reason file and the move. The
    next `record-ingest` (lib.buffer.ingest.record_quarantine) records both, finishing the move."""
    from lib.buffer.records import content_hash
    from lib.buffer.ingest import DeferredRegistry, ingest, record_quarantine

    moved, left = write_bad(workspace.buffers, "no-text"), write_bad(workspace.buffers, "int-source")
    digest_moved, digest_left = content_hash(moved), content_hash(left)
    ingest(workspace, DeferredRegistry({}), files=[moved])  # the events die with the task
    (workspace.quarantine / f"{left.name}.reason.json").write_text(json.dumps(  # killed right before the move
        {"file": left.name, "from": str(left), "quarantined_as": left.name, "content_hash": digest_left, "reason": "test: cut short"}))
    lin = Lineage(workspace.lineage_db)
    assert lin.buffer_files() == []
    assert record_quarantine(workspace, lin) == 2
    status = {b.content_hash: b for b in lin.buffer_files()}
    assert status[digest_moved].status == status[digest_left].status == "quarantined"
    assert not left.exists() and (workspace.quarantine / left.name).is_file()
    assert record_quarantine(workspace, lin) == 0  # idempotent
    # the retried task finds its file gone and goes on
    assert ingest(workspace, DeferredRegistry({}), files=[moved]).counts["files_gone"] == 1


# -- locks -------------------------------------------------------------------------------------
def _holder(path: Path, *extra: str) -> subprocess.Popen:
    code = ("import sys, time; from lib.locks import WorkspaceLock; "
            "l = WorkspaceLock(sys.argv[1], 'a test holder'); assert l.try_acquire(); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_is_free_the_moment_its_holder_is_killed_and_a_waiter_names_the_holder(tmp_path):
    from lib.locks import LockBusy, WorkspaceLock

    path = tmp_path / "locks" / "night.lock"
    holder = _holder(path)
    try:
        heard: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(LockBusy) as busy:
            WorkspaceLock(path).acquire(1.5, log=heard.append, what="orchestration.night_lock_timeout_s")
        assert 1.4 <= time.monotonic() - t0 < 10
        message = str(busy.value)
        assert f"pid {holder.pid}" in message and "a test holder" in message and "since 20" in message
        assert "gave up after" in message and "orchestration.night_lock_timeout_s=1.5" in message
        assert heard and f"held by pid {holder.pid}" in heard[0]
        assert not WorkspaceLock(path).try_acquire()
    finally:
        holder.kill()
        holder.wait()
    t0 = time.monotonic()
    lock = WorkspaceLock(path, "the next night").acquire(0)  # SIGKILLed holder: free at once
    assert time.monotonic() - t0 < 1
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()


def test_forked_workers_drop_the_lock_a_passed_child_keeps_it(tmp_path):
    """A multiprocessing worker forked while the night holds its lock must not keep it after the
    night dies; torchrun, given the descriptor on purpose, keeps it until it exits."""
    from lib.locks import WorkspaceLock

    path = tmp_path / "training.lock"
    lock = WorkspaceLock(path, "training v1").acquire(0)
    pid = os.fork()
    if pid == 0:  # a forked worker that outlives its parent's release
        time.sleep(3)
        os._exit(0)
    try:
        child = subprocess.Popen(["sleep", "3"], pass_fds=(lock.fileno(),))
        lock.release()
        assert not WorkspaceLock(path).try_acquire()  # the passed child holds it...
        child.wait()
        other = WorkspaceLock(path)
        assert other.try_acquire()  # ...and only it: the forked worker (still alive) does not
        other.release()
    finally:
        os.waitpid(pid, 0)


def _taken_elsewhere(path: Path) -> bool:
    """Whether another process can take the lock right now."""
    code = "import sys; from lib.locks import WorkspaceLock; print(WorkspaceLock(sys.argv[1]).try_acquire())"
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    return out.strip() == "True"


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    from lib.locks import WorkspaceLock

    path = tmp_path / "night.lock"
    outer = WorkspaceLock(path, "demo").acquire(0)
    inner = WorkspaceLock(path, "nightly").acquire(0)  # the demo flow runs the nightly flow inside it
    inner.release()
    assert not _taken_elsewhere(path)  # still ours after the inner release
    outer.release()
    assert _taken_elsewhere(path)


def test_curate_promote_rollback_and_gate_apply_never_run_beside_a_night(workspace):
    """The commands that move buffer files or aliases hold the night lock: beside a live holder
    they change nothing and exit 75 naming it (`curate` waits first, as `run` does; the others
    give up at once unless --wait); once the holder is gone each goes through."""
    from cli.main import app
    from test_lineage import bootstrap, night

    lin = Lineage(workspace.lineage_db)
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a"], 1.99, 3.0, 2.0)                # v1: accepted, champion
    night(lin, workspace, "n2", ["b"], 1.98, 3.0, 2.0, decide=False)  # v2: a candidate
    bad = write_bad(workspace.buffers, "no-text")
    write_good(workspace.buffers)
    curate = ("curate", "--preset", "tiny", "--set", "curation.workers=1", "--set", "curation.languages=[]")

    def cli(*args: str, code: int):
        result = CliRunner().invoke(app, [*args, "--workspace", str(workspace.root)])
        assert result.exit_code == code, (args, result.output, result.exception)
        return result

    holder = _holder(workspace.night_lock)
    try:
        for args in (("promote", "v2", "-r", "reviewed"), ("rollback",), ("gate", "v2", "--apply"), (*curate, "--no-wait"),
                     ("init", "--model", "my-model", "--replay", "corpus/")):
            err = cli(*args, code=75).stderr
            assert f"busy: {workspace.night_lock} is held by pid {holder.pid} on " in err, (args, err)
            assert "a test holder" in err and "Pass --wait to wait for it." in err, (args, err)
        err = cli(*curate, "--set", "orchestration.night_lock_timeout_s=1", code=75).stderr  # waits, then gives up
        assert f"waiting for night.lock: held by pid {holder.pid}" in err and "orchestration.night_lock_timeout_s=1" in err
        cli("gate", "v2", code=0)  # deciding without acting needs no lock
        assert lin.alias("champion") == "v1" and lin.get_version("v2")["status"] == "candidate"
        assert bad.exists() and not list(workspace.quarantine.iterdir())
        assert {b.content_hash for b in lin.buffer_files()} == {"hash-a", "hash-b"}  # curation registered nothing
    finally:
        holder.kill()
        holder.wait()
    cli("gate", "v2", "--apply", code=0)
    assert lin.alias("champion") == "v2"
    cli("rollback", code=0)
    assert lin.alias("champion") == "v1"
    cli("promote", "v2", "--reason", "reviewed", "--wait", code=0)
    assert lin.alias("champion") == "v2"
    cli(*curate, code=0)
    assert not bad.exists() and (workspace.quarantine / bad.name).is_file()
    assert json.loads(workspace.night_lock.read_text())["purpose"].startswith("consolidate curate curate-")
    assert _taken_elsewhere(workspace.night_lock)  # and let it go


# -- cache -------------------------------------------------------------------------------------
def test_a_pickled_cache_record_is_never_unpickled(tmp_path, prefect_harness):
    """Records are plain JSON; a record left by the older pickle-based cache (or planted by
    anyone who can write the folder) is a miss: the stage runs again and overwrites it."""
    import base64

    import cloudpickle
    from prefect import flow, task

    from tasks.cache_keys import content_cache, on_workspace

    ws = Workspace(tmp_path / "ws").ensure()
    source = ws.root / "input.txt"
    source.write_text("the same bytes every time")
    calls: list[int] = []

    @task(cache_policy=content_cache("fault-test", lambda p: [p["path"]], lambda p: {}), persist_result=True)
    def stage(path: str) -> dict:
        calls.append(1)
        return {"calls": len(calls), "path": path}

    @flow
    def night() -> dict:
        return on_workspace(stage, ws)(path=str(source))

    assert night() == night() == {"calls": 1, "path": str(source)}  # the second is a cache hit
    [record] = list(ws.task_cache.iterdir())
    stored = json.loads(record.read_text())
    assert stored["metadata"]["serializer"]["type"] == "consolidation-json"
    # stored relative to the workspace (a moved workspace reads its own paths back), read back whole
    assert json.loads(stored["result"]) == {"calls": 1, "path": "${WORKSPACE}/" + source.name}
    assert str(ws.root) not in record.read_text()

    marker = ws.root / "code-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    stored["metadata"]["serializer"] = {"type": "pickle", "picklelib": "cloudpickle", "picklelib_version": None}
    stored["result"] = base64.encodebytes(cloudpickle.dumps(Payload())).decode()
    record.write_text(json.dumps(stored))
    assert night() == {"calls": 2, "path": str(source)}  # recomputed
    assert not marker.exists(), "a pickled cache record was unpickled"
    assert json.loads(record.read_text())["metadata"]["serializer"]["type"] == "consolidation-json"


# -- real processes ----------------------------------------------------------------------------
_cfg = night_cfg


def clone(src: Path, dst: Path) -> Workspace:
    """A `cp -a` copy of a workspace: nothing to rewrite, every path it stores is relative."""
    shutil.copytree(src, dst, symlinks=True)
    return Workspace(dst)


def moved_copy(src: Path, dst: Path, request) -> Workspace:
    """A copy of a workspace, moved to `dst` after it was made, with the original out of reach
    until the test ends: `src` does not exist meanwhile, so nothing the copy does can read or write
    through a path recorded in the original. The original comes back for the session's next test."""
    staged = clone(src, dst.with_name(dst.name + ".staged")).root
    staged.rename(dst)
    away = src.with_name(src.name + ".away")
    src.rename(away)
    request.addfinalizer(lambda: away.rename(src))
    return Workspace(dst)


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def the_night(ws: Workspace) -> dict:
    nights = [r for r in _runs(ws) if r["kind"] == "nightly"]
    assert len(nights) == 1, nights
    return nights[0]


def _runs(ws: Workspace) -> list[dict]:
    with Lineage(ws.lineage_db).reading() as con:
        rows = con.execute("SELECT run_id, kind, status, version FROM runs ORDER BY started_at").fetchall()
    return [dict(zip(("run_id", "kind", "status", "version"), r)) for r in rows]


def check_invariants(ws: Workspace, settled: bool) -> dict:
    """Lineage's promises after any kill. `settled`: a run completed since, so nothing may be
    half done any more."""
    from lib.checkpoints.checkpoint import is_delta, is_full, read_meta

    lin = Lineage(ws.lineage_db)
    versions = {v["version"]: v for v in lin.versions()}
    champion = lin.alias("champion")
    assert champion is not None and versions[champion]["status"] == "accepted"
    consumed_by = {}
    for b in lin.buffer_files():
        if b.status == "consumed":
            assert versions[b.consumed_by]["status"] == "accepted", b
            consumed_by[b.content_hash] = b.consumed_by
    accepted_runs = {v["run_id"] for v in versions.values() if v["status"] == "accepted" and v["run_id"]}
    used = Counter(b.content_hash for run in accepted_runs for b in lin.run_inputs(run))
    assert all(n == 1 for n in used.values()), used  # consumed at most once
    for folder in ws.checkpoints.iterdir():
        if folder.name.startswith("."):  # a torn write a kill left: only until the next run
            assert not settled, f"leftover {folder}"
            continue
        assert is_full(folder) or is_delta(folder), f"half version folder {folder}"
        assert read_meta(folder).get("final_metrics"), folder
        assert folder.name in versions or not settled, f"{folder} is not in lineage"
    if settled:
        assert all(r["status"] != "running" for r in _runs(ws)), _runs(ws)
        served = {champion, lin.alias("latest")}
        for v in versions.values():
            if v["version"] in served:  # served as a plain Hugging Face folder, and lineage knows it
                assert v["storage"] == "full" and is_full(v["path"]), v
            elif v["parent"] is not None:
                assert v["storage"] == "delta" and is_delta(v["path"]), v  # stored, and lineage knows it
            if v["status"] == "accepted" and v["parent"] is not None:
                assert (ws.index / "minhash" / f"{v['run_id']}.npz").is_file(), f"dedup index lacks {v['version']}"
                assert (ws.memory / v["version"] / "night.json").is_file(), f"the memory lacks {v['version']}"
        for v in versions.values():  # keep_optimizer_states=0: only the champion keeps optimizer.pt
            assert (Path(v["path"]) / "optimizer.pt").exists() == (v["version"] == champion), v["version"]
    return versions


@pytest.mark.slow
def test_a_night_survives_a_kill_inside_every_stage(tmp_path, v0_workspace, request):
    """One night, killed with SIGKILL inside each stage in turn (and stopped with Ctrl-C and with
    SIGTERM mid-training): every next `consolidate run` picks the same night up where it died,
    nobody frees anything, and the lineage invariants hold after every kill. The workspace is a
    moved copy, its original path gone: resuming works wherever the workspace now is."""
    from lib.buffer.store import Buffer
    from lib.buffer.records import content_hash

    ws = moved_copy(v0_workspace, tmp_path / "ws", request)
    buf = Buffer(ws.buffers)
    good = [buf.add_file(GOOD_TEXTS[:3], "chat"), buf.add_file(GOOD_TEXTS[3:], "chat")]
    bad = write_bad(ws.buffers, "invalid-utf8")
    bad_hash = content_hash(bad)

    # curate: the bad file is in quarantine/ with its reason, lineage was never told
    run_night(ws, fault="curate", expect=-signal.SIGKILL)
    night = the_night(ws)
    assert night["status"] == "running" and not bad.exists()
    assert (ws.quarantine / f"{bad.name}.reason.json").is_file()
    assert bad_hash not in {b.content_hash for b in Lineage(ws.lineage_db).buffer_files()}
    check_invariants(ws, settled=False)

    # Ctrl-C (SIGINT to the process group, as a terminal sends it) once the night holds its lock
    stop_by_signal(ws, signal.SIGINT, lambda proc: f'"pid": {proc.pid}' in ws.night_lock.read_text())

    # tokenize: the same night resumed; the quarantine recorded late; inputs pinned
    run_night(ws, fault="tokenize", expect=-signal.SIGKILL)
    assert the_night(ws) == night
    lin = Lineage(ws.lineage_db)
    assert {b.content_hash: b.status for b in lin.buffer_files()}[bad_hash] == "quarantined"
    assert sorted(b.content_hash for b in lin.run_inputs(night["run_id"])) == sorted(content_hash(g) for g in good)
    check_invariants(ws, settled=False)

    # SIGTERM to the whole process group mid-training, on the command's own ephemeral Prefect
    # server: the night winds down through the API, then server and torchrun are gone
    # (the trainer holds after its first step until the signal reaches it: 8 tiny steps can
    # finish between a look at metrics.jsonl and the kill, and a finished night has no `train`)
    run = ws.run(night["run_id"])
    hold = tmp_path / "train-step.hold"
    hold.touch()
    stop_by_signal(ws, signal.SIGTERM, lambda proc: Path(f"{hold}.reached").exists(), "lib.training.train",
                   fault=f"train-step:hold={hold}")
    assert run.metrics.exists() and list(run.snapshots.glob("step-*"))  # stopped mid-run, snapshot kept
    check_invariants(ws, settled=False)

    # train: killed while torchrun runs with a snapshot on disk; torchrun snapshots on its own
    run_night(ws, fault="train", expect=-signal.SIGKILL)
    assert list(run.snapshots.glob("step-*"))
    check_invariants(ws, settled=False)

    # record: training resumed from its snapshot (after the orphaned torchrun let go of the
    # training lock) and finished; the candidate recorded
    out = run_night(ws, fault="record", expect=-signal.SIGKILL)
    assert "resumed from" in out
    versions = check_invariants(ws, settled=False)
    assert versions["v1"]["status"] == "candidate" and versions["v1"]["run_id"] == night["run_id"]

    for fault in ("evaluate", "gate"):
        run_night(ws, fault=fault, expect=-signal.SIGKILL)
        assert check_invariants(ws, settled=False)["v1"]["status"] == "candidate"
    assert Lineage(ws.lineage_db).metrics("v1", night["run_id"])

    # promote: champion moved, buffers consumed; index, delta and pruning not done
    run_night(ws, fault="promote", expect=-signal.SIGKILL)
    versions = check_invariants(ws, settled=False)
    assert Lineage(ws.lineage_db).alias("champion") == "v1" and versions["v1"]["storage"] == "full"
    assert not (ws.index / "minhash" / f"{night['run_id']}.npz").exists()
    assert not (ws.memory / "v1").exists()  # not remembered yet: the next trigger does it
    assert (Path(versions["v0"]["path"]) / "optimizer.pt").exists()

    # store: the delta is written, lineage not told
    run_night(ws, fault="store", expect=-signal.SIGKILL)
    assert Lineage(ws.lineage_db).get_version("v1")["storage"] == "full"

    # no fault: the dead night is finished, then a fresh one finds nothing to do
    out = run_night(ws)
    assert "nothing to consolidate" in out
    versions = check_invariants(ws, settled=True)
    assert set(versions) == {"v0", "v1"} and versions["v1"]["status"] == "accepted"
    runs = [r for r in _runs(ws) if r["kind"] == "nightly"]
    assert runs[0]["run_id"] == night["run_id"] and runs[0]["status"] == "completed" and runs[0]["version"] == "v1"
    assert len(runs) == 2 and runs[1]["version"] is None
    lin = Lineage(ws.lineage_db)
    assert {b.content_hash: b.consumed_by for b in lin.buffer_files() if b.status == "consumed"} == {
        content_hash(g): "v1" for g in good}
    assert len(lin.gate_decisions("v1")) == 1  # decided once, however often the night was resumed


def stop_by_signal(ws: Workspace, sig: int, ready, child: str | None = None, fault: str | None = None) -> None:
    """Run a night (with `fault` armed, if given) on its own ephemeral Prefect server, send `sig` to
    its whole process group once `ready(proc)`, and check that it exits at once with 128+sig,
    leaving no process behind (the server, the watchdog, torchrun) and the night resumable."""
    proc = consolidate(ws, ephemeral=True, fault=fault)
    wait_until(lambda: ready(proc) or proc.poll() is not None, 240, f"the night to get ready for {sig.name}")
    family = descendants(proc.pid)
    cmdlines = {p: " ".join(_cmdline(p)) for p in family}
    assert any("create_app" in c for c in cmdlines.values()), cmdlines  # its own API server
    assert child is None or any(child in c for c in cmdlines.values()), cmdlines
    os.killpg(proc.pid, sig)
    rc, out = finish(proc, 120)
    assert rc == 128 + sig, out[-3000:]
    assert ("stopped by SIGTERM" if sig == signal.SIGTERM else "interrupted") in out
    wait_until(lambda: not any(alive(p) for p in family), 30, f"{cmdlines} to exit")
    assert (ws.prefect_home / "prefect.db").is_file()  # the CLI's Prefect home is the workspace's
    assert the_night(ws)["status"] == "running"  # stopped, not failed: the next trigger resumes it


def _cmdline(pid: int) -> list[str]:
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_a_lost_ctrl_c_still_stops_the_night(tmp_path, v0_workspace):
    """A Ctrl-C whose KeyboardInterrupt gets lost still stops the night, exit 130, resumable. CI
    once saw a Ctrl-C'd night run to completion and exit 0; reproduced locally, the SIGINT came
    during `import torch` and Python raised it inside an asyncio transport's `__del__`, which
    drops it. lib.faults' `sigint=` makes the process Ctrl-C itself and lose the interrupt at a
    point of its choosing (while preparing the token shards): inside a finalizer (raised again at
    once), or caught by a library (the stage it landed in finishes); either way training never
    starts."""
    from lib.buffer.store import Buffer

    ws = clone(v0_workspace, tmp_path / "ws")
    Buffer(ws.buffers).add_file(GOOD_TEXTS, "chat")

    out = run_night(ws, fault="tokenize:sigint=finalizer", expect=130)
    assert "interrupted" in out
    night = the_night(ws)
    run = ws.run(night["run_id"])
    assert night["status"] == "running" and not any(run.train.iterdir())  # training never started

    out = run_night(ws, fault="tokenize:sigint=swallowed", expect=130)
    assert "interrupted" in out and "stopped before stage train" in out
    assert the_night(ws) == night  # the same night, still running: the next trigger resumes it
    assert run.prepared.manifest.exists() and not any(run.train.iterdir())


@pytest.mark.slow
def test_two_triggers_at_once_make_one_night(tmp_path, v0_workspace):
    """Both orders of a --no-wait and a --wait trigger. A night started with --no-wait runs; a
    --wait trigger arriving during it waits (naming the holder), then holds the workspace itself;
    a --no-wait trigger arriving then exits 75 at once, naming it. The first night also stops at
    training.time_limit_s, so the waiter, as the next trigger, resumes it from its snapshot. One
    night: no file curated twice, no version id taken twice, trained in one run folder."""
    from lib.buffer.store import Buffer
    from lib.buffer.records import content_hash

    ws = clone(v0_workspace, tmp_path / "ws")
    pending = Buffer(ws.buffers).add_file(GOOD_TEXTS, "chat")
    hold, hold_waiter = tmp_path / "hold", tmp_path / "hold-waiter"
    hold.touch()
    hold_waiter.touch()
    first = consolidate(ws, "--no-wait", "--set", "training.time_limit_s=0.001",  # the workspace is free: --no-wait runs
                        fault=f"curate:hold={hold}")
    wait_until(lambda: Path(f"{hold}.reached").exists() or first.poll() is not None, 180, "the first night to reach curation")
    assert first.poll() is None, finish(first)[1][-3000:]
    waiting = consolidate(ws, "--wait", fault=f"night-lock:hold={hold_waiter}")
    wait_until(lambda: "waiting for night.lock" in _log_so_far(waiting), 180, "the second trigger to wait")
    hold.unlink()  # the first night goes on, and stops after its first step
    rc, first_out = finish(first)
    assert rc == 1 and "stopped (TrainingStopped); the next trigger resumes it" in first_out, first_out[-3000:]
    assert "the next `consolidate run` resumes the night" in first_out, first_out[-3000:]
    night = the_night(ws)
    assert night["status"] == "running" and list(ws.run(night["run_id"]).snapshots.glob("step-*"))
    # the other order: the --wait trigger holds the workspace, a --no-wait one arrives
    wait_until(lambda: Path(f"{hold_waiter}.reached").exists() or waiting.poll() is not None, 60, "the waiter to take the lock")
    rc, out = finish(consolidate(ws, "--no-wait"), 180)
    assert rc == 75, out[-3000:]
    assert f"busy: {ws.night_lock} is held by pid {waiting.pid} on " in out and "nightly consolidation" in out and "since" in out
    hold_waiter.unlink()
    rc, waited_out = finish(waiting)
    waited_out = waiting.seen + waited_out
    assert rc == 0, waited_out[-3000:]
    assert f"waiting for night.lock: held by pid {first.pid}" in waited_out and "waiting up to 3600 s" in waited_out
    assert f"resuming night {night['run_id']}" in waited_out and "resumed from" in waited_out

    versions = check_invariants(ws, settled=True)
    assert set(versions) == {"v0", "v1"}
    assert the_night(ws) == {**night, "status": "completed", "version": "v1"}
    assert [b.consumed_by for b in Lineage(ws.lineage_db).buffer_files() if b.content_hash == content_hash(pending)] == ["v1"]
    assert len(list(ws.runs.glob("night-*/train/metrics.jsonl"))) == 1  # trained once


def _log_so_far(proc: subprocess.Popen) -> str:
    """What a running process printed so far (read without blocking; kept on `proc.seen`)."""
    import fcntl

    if not hasattr(proc, "seen"):
        proc.seen = ""
        fcntl.fcntl(proc.stdout, fcntl.F_SETFL, fcntl.fcntl(proc.stdout, fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        chunk = proc.stdout.read()
    except (BlockingIOError, TypeError):
        chunk = None
    proc.seen += chunk or ""
    return proc.seen


def test_a_busy_workspace_exits_75_after_the_timeout(tmp_path, prefect_harness):
    """A trigger that waits behind a live holder gives up after orchestration.night_lock_timeout_s
    with the holder named, and exits 75; no champion is needed to get that far."""
    ws = Workspace(tmp_path / "ws").ensure()
    holder = _holder(ws.night_lock)
    try:
        t0 = time.monotonic()
        rc, out = finish(consolidate(ws, "--set", "orchestration.night_lock_timeout_s=2"), 180)
        assert rc == 75, out[-3000:]
        assert f"held by pid {holder.pid}" in out and "a test holder" in out and "gave up after" in out
        assert "orchestration.night_lock_timeout_s=2" in out
        assert time.monotonic() - t0 < 170
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_command_leaves_no_prefect_server_behind(tmp_path):
    """`consolidate run` SIGKILLed (the process alone, as the OOM killer does) while its own
    ephemeral Prefect server runs: the watchdog stops the server within seconds. The command is
    kept waiting for the night lock, so no champion or training is needed."""
    ws = Workspace(tmp_path / "ws").ensure()
    holder = _holder(ws.night_lock)
    try:
        proc = consolidate(ws, ephemeral=True)
        wait_until(lambda: "waiting for night.lock" in _log_so_far(proc) or proc.poll() is not None, 180,
                   "the command to start its server and wait for the lock")
        family = {p: " ".join(_cmdline(p)) for p in descendants(proc.pid)}
        [server] = [p for p, c in family.items() if "create_app" in c] or [None]
        assert server is not None and proc.poll() is None, (family, proc.seen[-3000:])
        os.kill(proc.pid, signal.SIGKILL)  # not the group: the server and the watchdog have sessions of their own anyway
        proc.wait()
        t0 = time.monotonic()
        wait_until(lambda: not any(alive(p) for p in family), 30, f"{family} to exit")
        assert time.monotonic() - t0 < 30
    finally:
        holder.kill()
        holder.wait()
