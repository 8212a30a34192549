"""Run bookkeeping: the night lock, run ids, dead nights and the run lifecycle in lineage, in one
place for every flow that writes a run (the night, the bootstrap).

- Run ids are `<kind>-<UTC time>-<8 hex>`: sortable by time, unique across workers; the hex is
  the Prefect flow run id's when there is one (traceable to the flow run in the UI), else random.
  Every run id of the project comes from `new_run_id` (flows, `consolidate init`, the CLI's
  manual runs).
- `night_lock(workspace, purpose, timeout_s)`: the workspace's night lock (lib.locks) for a body;
  a busy lock is waited for up to `timeout_s`, past it `LockBusy` names the holder. The flows take
  it through `RunBook.session`, the CLI's commands that move buffer files or aliases through
  `cli.common.night_lock` (which turns `LockBusy` into exit code 75).
- `RunBook.session(purpose, timeout_s)`: the night lock for the whole body, then the run it
  started closed in lineage by how the body ended:
  - returned: `completed`, with the version it set and each stage's seconds;
  - an error: `failed`;
  - stopped from outside (SIGTERM, Ctrl-C, the training time limit: the `stopped` exceptions)
    while a resumable kind (`nightly`) runs: left `running`, so the next trigger resumes it. A
    Ctrl-C that something swallowed or turned into another error (lib.interrupts) counts: the
    run is stopped, not completed or failed.
- Under the lock every night lineage still calls running is dead (`dead_nights`): its process
  ended without closing it. `resumable_night` picks the one to continue, else
  `failed_after_training` the last night if it failed with a snapshot on disk; `RunBook.night`
  gives the run id of tonight: that one's, or a new one.
- Failed runs keep their folders; `failed_run_folders` lists them with their size and
  `remove_run_folders` deletes them on request (`consolidate gc --remove`), never on its own.

Trade-off: the lifecycle is decided at the session's exit from the exception alone, so a stage
that wants its run closed as failed must raise; a stage that catches and logs leaves the run to
close as completed.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator
import shutil

from lib.checkpoints.checkpoint import read_meta
from lib.faults import fault_point
from lib.interrupts import interrupted, stop_if_interrupted
from lib.locks import WorkspaceLock
from lib.registry.lineage import Lineage
from lib.training import snapshot

DECIDED = ("accepted", "rejected", "rolled_back")
NIGHT_LOCK_SETTING = "orchestration.night_lock_timeout_s"  # the setting that bounds a wait, named in LockBusy
# Kinds a later trigger resumes: a stopped run of these stays `running`; any other kind is failed.
RESUMABLE_KINDS = ("nightly",)


def new_run_id(kind: str, token: str | None = None) -> str:
    """`<kind>-<UTC YYYYmmdd-HHMMSS>-<8 hex>`; the hex from `token` (a flow run id) or random."""
    hex8 = str(token or uuid.uuid4().hex).replace("-", "")[:8]
    return f"{kind}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{hex8}"


def champion_of(lin) -> tuple[str, str]:
    """The champion's version id and folder; no champion is an error that says how to get one."""
    version = lin.alias("champion")
    if version is None:
        raise ValueError(f"no champion in {lin.db_path}: adopt your model with `consolidate init --model DIR --replay ...` "
                         f"(or the bootstrap flow's adopt parameter), or pre-train the demo's with `consolidate bootstrap`")
    return version, str(lin.get_version(version)["path"])


def dead_nights(lin) -> list[dict[str, Any]]:
    """Nights lineage still calls running. Called under the workspace's night lock, which no
    other night holds, so each of them is dead: its process ended without closing it."""
    return lin.incomplete_runs("nightly")


def resumable_night(lin, champion: str, log=None) -> dict[str, Any] | None:
    """The oldest dead night whose gate has not decided and whose parent is still the champion:
    the next trigger resumes it under its own run id (data from the cache, the same inputs,
    training from its last snapshot). A dead undecided night whose parent is no longer the
    champion (a person promoted or rolled back since) is closed as failed: its candidate would
    replace a newer champion."""
    for night in dead_nights(lin):
        if night["version_status"] in DECIDED:
            continue
        parent = (lin.get_run(night["run_id"]) or {}).get("parent")
        if parent == champion:
            return night
        lin.finish_run(night["run_id"], "failed", night["version"])
        if log is not None:
            log.warning("closed dead night %s as failed: it continued %s, the champion is now %s", night["run_id"], parent, champion)
    return None


def failed_after_training(ws, lin, champion: str) -> dict[str, Any] | None:
    """The last night, when it failed with its training done or snapshotted and its gate not
    decided, its parent still the champion (a version write that hit a read-only or full volume,
    an evaluation that crashed): the next trigger resumes it under its own run id, from its last
    snapshot or its finished version folder, instead of training again from step 0. A night that
    failed before any snapshot starts afresh."""
    night = lin.latest_run("nightly")
    if night is None or night["status"] != "failed" or night["parent"] != champion or night["version_status"] in DECIDED:
        return None
    run = ws.run(night["run_id"])
    trained = night["version"] is not None and trained_version(ws.checkpoint(night["version"]), night["run_id"]) is not None
    if not trained and (not run.path.is_dir() or snapshot.latest_complete(run.snapshots) is None):
        return None
    return {"run_id": night["run_id"], "version": night["version"], "version_status": night["version_status"], "failed": True}


def folder_bytes(path: Path) -> int:
    """Bytes of the files under `path` (links not followed; a hard-linked file counted where found)."""
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def failed_run_folders(ws, lin) -> list[dict[str, Any]]:
    """Run folders of failed runs still on disk, oldest first, each with its size, kept for
    inspection (logs, snapshots, curated data): nothing removes them but `remove_run_folders`,
    on a person's request (`consolidate gc --remove`). The failed night the next trigger would
    resume (`failed_after_training`) is marked `resumable`."""
    with lin.reading() as con:
        rows = con.execute("SELECT run_id, kind, parent, started_at FROM runs WHERE status = 'failed' ORDER BY started_at").fetchall()
    champion = lin.alias("champion")
    resumable = failed_after_training(ws, lin, champion) if champion else None
    out = []
    for run_id, kind, parent, started in rows:
        folder = ws.runs / run_id
        if folder.is_dir():
            out.append({"run_id": run_id, "kind": kind, "parent": parent, "started_at": started, "path": str(folder),
                        "bytes": folder_bytes(folder), "resumable": resumable is not None and resumable["run_id"] == run_id})
    return out


def remove_run_folders(ws, lin, include_resumable: bool = False) -> list[dict[str, Any]]:
    """Delete the folders `failed_run_folders` lists (the resumable one only with
    `include_resumable`: its night then starts over); call under the night lock. Returns what
    was removed; lineage keeps the runs' rows."""
    removed = []
    for row in failed_run_folders(ws, lin):
        if row["resumable"] and not include_resumable:
            continue
        shutil.rmtree(row["path"])
        removed.append(row)
    return removed


def decided_nights(lin) -> list[dict[str, Any]]:
    """Dead nights the gate already decided: the steps after the gate are all they miss."""
    return [n for n in dead_nights(lin) if n["version_status"] in DECIDED]


def claim_version(ws, lin, run_id: str) -> str:
    """The version id this night writes: its own from an earlier attempt, else the next free one.
    A version folder no lineage row knows, left by another night that died between training and
    recording, is stepped over, never overwritten or mistaken for ours."""
    version = lin.next_version(run_id)
    recorded = lin.get_version(version)
    if recorded is not None and recorded["run_id"] == run_id:
        return version
    while True:
        folder = ws.checkpoint(version)
        if not folder.exists() or read_meta(folder).get("run_id") == run_id:
            return version
        version = f"v{int(version[1:]) + 1}"


def trained_version(version_dir: Path, run_id: str | None = None) -> dict[str, Any] | None:
    """A version folder a resumed night (`run_id`) already finished training (meta.json with its
    metrics)."""
    meta = read_meta(version_dir) if Path(version_dir).is_dir() else {}
    if not meta.get("final_metrics") or (run_id is not None and meta.get("run_id") not in (None, run_id)):
        return None
    return {"version_dir": str(version_dir), "final_metrics": meta["final_metrics"], "reused": True}


@contextmanager
def night_lock(workspace, purpose: str, timeout_s: float | None, log: Callable[[str], None] | None = None,
               what: str = NIGHT_LOCK_SETTING) -> Iterator[Any]:
    """The workspace's night lock held for the body (yields the `WorkspaceLock`): a busy lock is
    waited for up to `timeout_s` (None: as long as it takes, 0: not at all), `log` hearing who holds
    it; past that, `LockBusy` names the holder (and `what`, the setting that bounds the wait)."""
    lock = WorkspaceLock(workspace.night_lock, purpose)
    lock.acquire(timeout_s, log=log, what=what)
    try:
        yield lock
    finally:
        lock.release()


class RunRecord:
    """The run a session writes: its id, kind and parent, the version it produced (set by the
    flow) and the clock whose seconds go into lineage as its timings."""

    def __init__(self, run_id: str, kind: str, clock: Any, parent: str | None = None):
        self.run_id, self.kind, self.clock, self.parent = run_id, kind, clock, parent
        self.version: str | None = None


class RunBook:
    """The bookkeeping of one flow run on a workspace: lock, run ids, lifecycle in lineage.

    `flow_run_id` is recorded with each run and seeds its id; `log` is a logger (warning, info);
    `stopped` are the exceptions that stop a run from outside rather than fail it."""

    def __init__(self, workspace, *, flow_run_id: str | None = None, log=None, stopped: tuple[type[BaseException], ...] = ()):
        self.ws = workspace
        self.flow_run_id = str(flow_run_id) if flow_run_id else None
        self.log = log
        self.stopped = (KeyboardInterrupt, SystemExit, *stopped)
        self.lock = None
        self.current: RunRecord | None = None
        self._lineage = None

    @property
    def lineage(self):
        if self._lineage is None:
            self._lineage = Lineage(self.ws.lineage_db)
        return self._lineage

    def new_run_id(self, kind: str) -> str:
        return new_run_id(kind, self.flow_run_id)

    # -- the session: lock, then the lifecycle of the run started in it ---------------------------
    @contextmanager
    def session(self, purpose: str, timeout_s: float | None, what: str = NIGHT_LOCK_SETTING) -> Iterator["RunBook"]:
        """The night lock for the body (`night_lock`, the holder named in the log), and the run
        started in it closed by how the body ends."""
        with night_lock(self.ws, purpose, timeout_s, log=self.log.warning if self.log is not None else None,
                        what=what) as self.lock:
            fault_point("night-lock")  # the lock just taken, nothing done yet
            try:
                yield self
                stop_if_interrupted("closing the run")  # a Ctrl-C swallowed in the last stage: not completed
            except BaseException as exc:
                self._close(exc)
                raise
            self._close(None)

    def night(self, champion: str) -> tuple[str, dict[str, Any] | None]:
        """Tonight's run id and the dead night it resumes (None: a new night)."""
        resumed = resumable_night(self.lineage, champion, self.log)
        if resumed is None:
            resumed = failed_after_training(self.ws, self.lineage, champion)
            if resumed is not None:
                if self.log is not None:
                    self.log.warning("resuming night %s, which failed after training had progressed: from its last "
                                     "snapshot or its finished version, not from step 0", resumed["run_id"])
                return resumed["run_id"], resumed
        if resumed is None:
            return self.new_run_id("night"), None
        if self.log is not None:
            self.log.warning("resuming night %s, which died before its gate (version %s)", resumed["run_id"],
                             resumed["version"] or "not yet recorded")
        return resumed["run_id"], resumed

    def start(self, run_id: str, kind: str, clock: Any, parent: str | None = None, config: dict[str, Any] | None = None) -> RunRecord:
        """Record `run_id` as running; a run this session started before is closed as completed
        (a night's first attempt, when its retry starts)."""
        if self.current is not None:
            self.finish("completed")
        if self.lock is not None:
            self.lock.set_purpose(f"{'night' if kind == 'nightly' else kind} {run_id}")
        self.lineage.start_run(run_id, kind=kind, parent=parent, flow_run_id=self.flow_run_id, config=config)
        self.current = RunRecord(run_id, kind, clock, parent)
        return self.current

    def finish(self, status: str) -> None:
        """Close the current run (if lineage still calls it running)."""
        run, self.current = self.current, None
        if run is None:
            return
        row = self.lineage.get_run(run.run_id)
        if row is not None and row["status"] == "running":
            self.lineage.finish_run(run.run_id, status, run.version, dict(run.clock.seconds))

    def _close(self, exc: BaseException | None) -> None:
        run = self.current
        if run is None:
            return
        # a Ctrl-C that surfaced as another error (lib.interrupts) stopped the run too
        if exc is not None and (isinstance(exc, self.stopped) or interrupted()) and run.kind in RESUMABLE_KINDS:
            # stopped from outside: like a kill, the run stays `running` and the next trigger resumes it
            if self.log is not None:
                self.log.warning("night %s stopped (%s); the next trigger resumes it", run.run_id,
                                 "Ctrl-C" if interrupted() else type(exc).__name__)
            self.current = None
            return
        self.finish("failed" if exc is not None else "completed")


def finish_decided(book: RunBook, steps: Callable[[dict[str, Any]], None]) -> list[str]:
    """Dead nights the gate already decided: `steps(night)` does what they did not get to (each
    step idempotent), then each is closed as completed."""
    done = []
    for night in decided_nights(book.lineage):
        if book.log is not None:
            book.log.warning("finishing dead night %s: %s was %s; storing it", night["run_id"], night["version"], night["version_status"])
        steps(night)
        book.lineage.finish_run(night["run_id"], "completed", night["version"])
        done.append(night["run_id"])
    return done
