"""The one launcher of a training: torchrun in a supervised subprocess, under the training lock.
The Prefect task (tasks/training.py) and `consolidate train` (cli/train.py) both call `launch`.

- Holds the training lock (`orchestration.train_lock`, default `<workspace>/locks/training.lock`,
  lib.locks) for the whole run: two trainings that name one lock file never run at once, whatever
  deployment or worker they come from. torchrun inherits the lock, so a night killed mid-training
  keeps it until its torchrun has written the SIGTERM snapshot; nothing else ever holds it past
  its process. A training that waits says for whom in the log and gives up after
  `orchestration.train_lock_timeout_s`.
- Under the lock, a version folder this run (meta `run_id`) already finished is returned as it
  is, and the leftovers of a killed write of it are removed before torchrun starts.
- Writes the effective config and the version's extra meta to `<run>/train/`, builds the
  command with `lib.training.distributed.torchrun_command`, and runs it with
  lib.training.supervised_process: own process group, killed with its caller (SIGTERM,
  exceptions, our own death).
- Streams rank-0 output to `log` and the share of steps done to `on_progress`.
- Exit 0: the version folder is written. Exit 3 (`lib.training.train.EXIT_STOPPED`, time limit or
  SIGTERM): a snapshot is kept and `launch` raises TrainingStopped, so the caller can leave the
  night resumable; the next trigger continues from that snapshot.

Trade-off: no retries: a training that failed half-way is resumed on purpose (resume=True) from
its snapshot, never silently restarted from step 0.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, ContextManager

from lib.checkpoints.checkpoint import read_meta
from lib.config import ConsolidationConfig
from lib.faults import armed, fault_point
from lib.files import write_json, write_text
from lib.locks import WorkspaceLock
from lib.training import snapshot
from lib.training.distributed import snapshot_shutdown_timeout, torchrun_command
from lib.training.footprint import count_parameters
from lib.training.preflight import hf_config, read_target
from lib.training.supervised_process import run_supervised
from lib.training.train import EXIT_STOPPED
from lib.workspace import Workspace

# Past the trainer's own time limit, how long it may take to snapshot and exit before we kill it.
SNAPSHOT_GRACE_S = 120.0


class TrainingStopped(RuntimeError):
    """Training stopped before its last step (time limit or SIGTERM); a snapshot allows --resume."""


class TrainingFailed(RuntimeError):
    """torchrun exited with an error; the message starts with the cause a rank raised (`cause`)
    and carries the last lines of its output."""

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause


def training_lock(cfg: ConsolidationConfig, out_dir: str):
    """The training lock of `cfg` (lib.locks), named after the version it writes."""
    ws = Workspace(cfg.workspace.root)
    path = cfg.orchestration.train_lock
    path = ws.training_lock if path is None else (path if Path(path).expanduser().is_absolute() else ws.root / path)
    return WorkspaceLock(Path(path).expanduser(), f"training {Path(out_dir).name}")


def finished_version(out_dir: str | Path, meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """meta.json of `out_dir` if that version was fully written by the same run (`meta`'s run_id)."""
    found = read_meta(out_dir) if Path(out_dir).is_dir() else {}
    run_id = (meta or {}).get("run_id")
    if found.get("final_metrics") and (run_id is None or found.get("run_id") == run_id):
        return found
    return None


def _remove_torn_writes(out_dir: str | Path) -> None:
    """`.<version>.tmp-*` folders a killed trainer left beside the version (lib.checkpoints.checkpoint writes
    a version there and renames it into place); only called under the training lock."""
    out = Path(out_dir)
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _last_step(metrics_path: Path) -> int | None:
    try:
        with open(metrics_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode("utf-8", errors="replace").strip().splitlines()
        return int(json.loads(lines[-1])["step"]) + 1 if lines else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


_RANK_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def ranks_stopped(lines: list[str], stopped_code: int) -> bool:
    """torchrun exits 1 whenever a rank fails and lists each failed rank's `exitcode : N`; the
    run was stopped on purpose (snapshot saved) when every listed rank exited with stopped_code."""
    codes = [int(m.group(1)) for m in map(_RANK_EXIT.match, lines) if m]
    return bool(codes) and all(c == stopped_code for c in codes)


def shutdown_timeout(cfg: ConsolidationConfig, parent: str | None) -> int:
    """Seconds the ranks get to snapshot after SIGTERM: training.shutdown_timeout_s, else sized
    from the parameters of the model the run trains (lib.training.distributed.snapshot_shutdown_timeout)."""
    if cfg.training.shutdown_timeout_s is not None:
        return snapshot_shutdown_timeout(0, cfg.training.shutdown_timeout_s)
    try:
        n = count_parameters(hf_config(cfg, read_target(cfg, parent)))
    except Exception:  # noqa: BLE001 - a model the meta device cannot build fails in the trainer, with its own message
        n = 0
    return snapshot_shutdown_timeout(n)


def training_command(cfg: ConsolidationConfig, data_dir: str, out_dir: str, train_dir: str, *,
                     parent: str | None, init: bool, resume: bool, meta: dict[str, Any] | None,
                     tokenizer_dir: str | None = None, node_rank: int | None = None) -> list[str]:
    """The torchrun argv, with the config and meta written beside the run's metrics. With
    training.nnodes > 1: this node's `node_rank` and the rendezvous at training.rdzv_endpoint,
    its id the version's name (a night's nodes meet each other, never another night's)."""
    tdir = Path(train_dir)
    tdir.mkdir(parents=True, exist_ok=True)
    config_path = tdir / "config.json"
    write_text(config_path, cfg.model_dump_json(indent=1))
    meta_path = None
    if meta:
        meta_path = tdir / "meta.extra.json"
        write_json(meta_path, meta, indent=1, default=str)
    cmd = torchrun_command(config_path, data_dir, out_dir, parent=parent, init=init, resume=resume,
                           nproc_per_node=cfg.training.nproc_per_node, nnodes=cfg.training.nnodes,
                           node_rank=node_rank, rdzv_endpoint=cfg.training.rdzv_endpoint, rdzv_id=Path(out_dir).name,
                           meta=meta_path, tokenizer=tokenizer_dir, python=sys.executable,
                           shutdown_timeout_s=shutdown_timeout(cfg, parent))
    return cmd + ["--train-dir", str(tdir)]


def launch(
    cfg: ConsolidationConfig,
    data_dir: str,
    out_dir: str,
    train_dir: str,
    *,
    parent: str | None = None,
    init: bool = False,
    resume: bool = False,
    meta: dict[str, Any] | None = None,
    tokenizer_dir: str | None = None,
    node_rank: int | None = None,
    log: logging.Logger | logging.LoggerAdapter | None = None,
    on_progress: Callable[[float], None] | None = None,
    timing: Callable[[], ContextManager] = contextlib.nullcontext,
) -> dict[str, Any]:
    """Run torchrun to write the version folder `out_dir`; returns {version_dir, wall_s,
    final_metrics} (and reused=True when this run had already written it). On several nodes
    each node calls this with its `node_rank`; only node 0 holds the training lock (the others
    cannot train without it: the rendezvous waits for every node). `timing` wraps the torchrun
    process alone (the wait for the lock excluded)."""
    log = log or logging.getLogger(__name__)
    cmd = training_command(cfg, data_dir, out_dir, train_dir, parent=parent, init=init, resume=resume,
                           meta=meta, tokenizer_dir=tokenizer_dir, node_rank=node_rank)
    total = cfg.model.pretrain_iterations if init else cfg.training.num_iterations
    metrics_path = Path(train_dir) / "metrics.jsonl"

    def on_tick(_elapsed: float) -> None:
        step = _last_step(metrics_path)
        if step is not None and on_progress is not None:
            on_progress(step / total)
        if armed("train") and snapshot.latest_complete(Path(train_dir) / "snapshots") is not None:
            fault_point("train")  # torchrun mid-run with a snapshot on disk

    limit = cfg.training.time_limit_s
    grace = float(shutdown_timeout(cfg, parent))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    lock = training_lock(cfg, out_dir) if not node_rank else None
    if lock is not None:
        lock.acquire(cfg.orchestration.train_lock_timeout_s, log=log.warning, what="orchestration.train_lock_timeout_s")
    try:
        done = finished_version(out_dir, meta)
        if done is not None:  # a killed night's torchrun finished it while we waited
            log.info("%s was already written by this run; not training again", out_dir)
            if on_progress is not None:
                on_progress(1.0)
            return {"version_dir": out_dir, "wall_s": 0.0, "final_metrics": done["final_metrics"], "reused": True}
        _remove_torn_writes(out_dir)
        log.info("training: %s", " ".join(cmd))
        with timing():
            # torchrun keeps the lock until it exits, even if this process dies first
            result = run_supervised(cmd, env=env, cwd=os.getcwd(), on_line=log.info, on_tick=on_tick, tick_s=2.0, keep_lines=200,
                                    time_limit_s=None if limit is None else limit + max(SNAPSHOT_GRACE_S, grace),
                                    grace_s=grace + 30.0,  # torchrun's own shutdown timeout first
                                    pass_fds=(lock.fileno(),) if lock is not None else ())
    finally:
        if lock is not None:
            lock.release()
    tail = "\n".join(result.last_lines[-20:])
    if result.returncode == EXIT_STOPPED or result.timed_out or ranks_stopped(result.last_lines, EXIT_STOPPED):
        raise TrainingStopped(f"training into {out_dir} stopped before its last step (time limit {limit} s or a signal); "
                              f"a snapshot is kept under {train_dir}/snapshots: the next nightly run resumes from it "
                              f"(a training of its own: resume=True)\n{tail}")
    if result.returncode != 0:
        cause = result.cause or f"torchrun exited with code {result.returncode}"
        raise TrainingFailed(f"{cause} (torchrun exited with code {result.returncode}, training into {out_dir}; "
                             f"the night resumes from its last snapshot once the cause is fixed)\n{tail}", cause=cause)
    if on_progress is not None:
        on_progress(1.0)
    return {"version_dir": out_dir, "wall_s": result.wall_s, "final_metrics": read_meta(out_dir).get("final_metrics", {})}
