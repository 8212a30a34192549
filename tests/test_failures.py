"""A failure names its cause where the user looks (issue #28): the last line on stderr and, with
`--json`, `{"status": "failed", "error", "stage"}` on stdout, with the OS error and its path even
when a torchrun rank raised it; and a night whose training finished but whose version write
failed resumes from its last snapshot, not from step 0.

The volumes are real where this machine lets the test mount (root with CAP_SYS_ADMIN): the
checkpoints folder bind-mounted read-only, then a tmpfs just large enough for what is already
there. Elsewhere the same OS errors are raised at the same place, the trainer's version write
(lib.faults `version-write:errno=N`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytest_plugins = ["prefect_fixtures", "night_fixtures"]

from lib.registry.lineage import Lineage  # noqa: E402
from lib.workspace import Workspace  # noqa: E402
from night_fixtures import consolidate, finish, write_texts  # noqa: E402

NOTES = [
    f"Ledger of the {mill} mill, week {w}: {sacks} sacks of {grain} ground, the {part} replaced after it cracked, "
    f"and the miller paid in salt because the coins ran short that autumn."
    for w, (mill, sacks, grain, part) in enumerate(zip(["north", "river", "hill", "abbey", "toll", "ford"],
                                                      [40, 52, 61, 75, 88, 93],
                                                      ["rye", "barley", "oats", "wheat", "spelt", "millet"],
                                                      ["runner stone", "axle", "sluice", "belt", "hopper", "gear"]))
]


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` read-only for the body: a read-only bind mount, or the injected EROFS. Yields the
    fault to set (None when mounted)."""
    if _mount("--bind", str(folder), str(folder)):
        try:
            if not _mount("-o", "remount,bind,ro", str(folder)):
                raise RuntimeError(f"could not remount {folder} read-only")
            yield None
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    else:
        yield f"version-write:errno={errno.EROFS}"


@contextlib.contextmanager
def full_volume(folder: Path):
    """`folder` on a tmpfs just large enough for what it holds, or the injected ENOSPC."""
    used = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    staged = folder.with_name(folder.name + ".staged")
    shutil.copytree(folder, staged, symlinks=True)
    if _mount("-t", "tmpfs", "-o", f"size={used + 256 * 1024}", "tmpfs", str(folder)):
        try:
            shutil.copytree(staged, folder, symlinks=True, dirs_exist_ok=True)
            yield None
        finally:
            subprocess.run(["umount", str(folder)], check=True)
            shutil.rmtree(staged)
    else:
        shutil.rmtree(staged)
        yield f"version-write:errno={errno.ENOSPC}"


def failed_report(out: str) -> dict:
    reports = [json.loads(line) for line in out.splitlines() if line.startswith('{"status"')]
    assert reports, out[-3000:]
    return reports[-1]


def last_lines(out: str, n: int = 3) -> str:
    return "\n".join(out.rstrip().splitlines()[-n:])


def test_a_failed_version_write_is_named_and_resumed_from_its_snapshot(tmp_path, v0_workspace):
    ws = Workspace(tmp_path / "ws")
    shutil.copytree(v0_workspace, ws.root, symlinks=True)
    write_texts(ws.buffers, NOTES[:3], "day1.parquet")

    # the checkpoints folder turns read-only: torchrun's rank 0 fails to write v1
    with read_only(ws.checkpoints) as fault:
        rc, out = finish(consolidate(ws, "--json", fault=fault))
    assert rc == 1, out[-3000:]
    report = failed_report(out)
    assert report["status"] == "failed" and report["stage"] == "train", report
    assert "[Errno 30] Read-only file system" in report["error"] and str(ws.checkpoints) in report["error"], report
    tail = last_lines(out)
    assert "failed in stage train" in tail and "Read-only file system" in tail and str(ws.checkpoints) in tail, tail
    lin = Lineage(ws.lineage_db)
    night = lin.latest_run("nightly")
    assert night["status"] == "failed" and night["version"] is None
    run = ws.run(night["run_id"])
    assert list(run.snapshots.glob("step-*")), "training snapshotted before its version write"

    # the volume is writable again: the same night resumes from its snapshot and finishes
    rc, out = finish(consolidate(ws))
    assert rc == 0, out[-3000:]
    assert f"resuming night {night['run_id']}" in out and "resumed from" in out, out[-3000:]
    resumed = lin.get_run(night["run_id"])
    assert resumed["status"] == "completed" and resumed["version"] == "v1"
    assert lin.latest_run("nightly")["run_id"] == night["run_id"], "no second night was started"
    steps = [json.loads(line)["step"] for line in run.metrics.read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 7, steps  # one pass of 8 steps, no restart from 0

    # a full volume: the same, with ENOSPC and its path
    write_texts(ws.buffers, NOTES[3:], "day2.parquet")
    with full_volume(ws.checkpoints) as fault:
        rc, out = finish(consolidate(ws, "--json", fault=fault))
    assert rc == 1, out[-3000:]
    report = failed_report(out)
    assert report["stage"] == "train" and "[Errno 28] No space left on device" in report["error"], report
    assert str(ws.checkpoints) in report["error"], report
    assert "No space left on device" in last_lines(out)


def test_a_busy_workspace_answers_json_too(tmp_path, v0_workspace):
    from lib.locks import WorkspaceLock

    ws = Workspace(tmp_path / "ws")
    shutil.copytree(v0_workspace, ws.root, symlinks=True)
    lock = WorkspaceLock(ws.night_lock, "a test holding the workspace").acquire(0)
    try:
        rc, out = finish(consolidate(ws, "--no-wait", "--json"), 180)
    finally:
        lock.release()
    assert rc == 75, out[-3000:]
    report = failed_report(out)
    assert report["status"] == "busy" and report["stage"] == "night-lock" and report["exit_code"] == 75
    assert "a test holding the workspace" in report["error"], report


def test_the_cause_a_child_raised_is_kept_however_many_lines_follow():
    import sys

    from lib.training.supervised_process import run_supervised

    code = ("import sys\n"
            "try:\n    open('/proc/no/such/dir/x', 'w')\n"
            "except OSError as e:\n    import traceback; traceback.print_exc()\n"
            "for i in range(400): print(f'[launcher] line {i}')\n"
            "print('torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ')\n"
            "sys.exit(1)\n")
    r = run_supervised([sys.executable, "-c", code], keep_lines=20)
    assert r.returncode == 1 and not any("FileNotFoundError" in line for line in r.last_lines)
    assert r.cause == "FileNotFoundError: [Errno 2] No such file or directory: '/proc/no/such/dir/x'"


def test_the_report_names_the_innermost_os_error_and_the_stage():
    from cli.common import failure_report
    from lib.training.launch import TrainingFailed

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/ws/checkpoints/.v2.tmp-1/model.safetensors")
        except OSError as exc:
            raise RuntimeError("could not store v2") from exc
    except RuntimeError as exc:
        exc.failed_stage = "store"
        assert failure_report(exc) == {"status": "failed", "stage": "store", "error":
                                       "OSError: [Errno 28] No space left on device: '/ws/checkpoints/.v2.tmp-1/model.safetensors'"}
    rank = TrainingFailed("long message\nwith torchrun's tail", cause="OSError: [Errno 30] Read-only file system: '/x'")
    assert failure_report(rank) == {"status": "failed", "stage": "setup", "error": "OSError: [Errno 30] Read-only file system: '/x'"}
