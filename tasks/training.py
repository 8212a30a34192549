"""The training stage as a Prefect task: torchrun in a supervised subprocess.

- Holds one slot of the strict global concurrency limit `orchestration.train_concurrency_limit`
  (created with limit 1 if missing) for the whole run: two nights, or a night and a manual run,
  never train at once, even from different deployments or workers.
- Writes the effective config and the version's extra meta to `<run>/train/`, builds the
  command with `lib.train.torchrun_command`, and runs it with lib.supervised_process: own process
  group, killed with the flow run (cancellation SIGTERM, exceptions, our own death).
- Streams rank-0 output into the run log and turns `metrics.jsonl` into a progress artifact.
- Exit 0: the version folder is written. Exit 3 (`lib.train.EXIT_STOPPED`, time limit or
  SIGTERM): a snapshot is kept and the task fails with a message that says `--resume`.

Trade-off: no retries and no caching: a training that failed half-way is resumed on purpose
(resume=True) from its snapshot, never silently restarted from step 0 by the orchestrator.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from lib.config import ConsolidationConfig
from lib.supervised_process import run_supervised
from tasks.reporting import TrainingProgress, own_time, publish_table, stage_logger

# Past the trainer's own time limit, how long it may take to snapshot and exit before we kill it.
SNAPSHOT_GRACE_S = 120.0


class TrainingStopped(RuntimeError):
    """Training stopped before its last step (time limit or SIGTERM); a snapshot allows --resume."""


class TrainingFailed(RuntimeError):
    """torchrun exited with an error; the message carries the last lines of its output."""


def ensure_training_limit(name: str, limit: int = 1) -> None:
    """Create the global concurrency limit `name` with `limit` slots unless it exists."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit))
            except ObjectAlreadyExists:  # another night created it in between
                pass


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


def training_command(cfg: ConsolidationConfig, data_dir: str, out_dir: str, train_dir: str, *,
                     parent: str | None, init: bool, resume: bool, meta: dict[str, Any] | None,
                     tokenizer_dir: str | None = None) -> list[str]:
    """The torchrun argv, with the config and meta written beside the run's metrics."""
    from lib.train import torchrun_command

    tdir = Path(train_dir)
    tdir.mkdir(parents=True, exist_ok=True)
    config_path = tdir / "config.json"
    config_path.write_text(cfg.model_dump_json(indent=1), encoding="utf-8")
    meta_path = None
    if meta:
        meta_path = tdir / "meta.extra.json"
        meta_path.write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
    cmd = torchrun_command(config_path, data_dir, out_dir, parent=parent, init=init, resume=resume,
                           nproc_per_node=cfg.training.nproc_per_node, nnodes=cfg.training.nnodes,
                           meta=meta_path, tokenizer=tokenizer_dir, python=sys.executable)
    return cmd + ["--train-dir", str(tdir)]


@task(name="train", cache_policy=NO_CACHE, retries=0)
def train_checkpoint(
    cfg: ConsolidationConfig,
    data_dir: str,
    out_dir: str,
    train_dir: str,
    parent: str | None = None,
    init: bool = False,
    resume: bool = False,
    meta: dict[str, Any] | None = None,
    tokenizer_dir: str | None = None,
) -> dict[str, Any]:
    """Run torchrun to write the version folder `out_dir`; returns its meta's final metrics."""
    from prefect.concurrency.sync import concurrency

    from lib.train import EXIT_STOPPED

    log = stage_logger()
    cmd = training_command(cfg, data_dir, out_dir, train_dir, parent=parent, init=init, resume=resume,
                           meta=meta, tokenizer_dir=tokenizer_dir)
    total = cfg.model.pretrain_iterations if init else cfg.training.num_iterations
    metrics_path = Path(train_dir) / "metrics.jsonl"
    progress = TrainingProgress("training-progress", f"{'Pre-training' if init else 'Consolidation'} steps of {Path(out_dir).name}")

    def on_tick(_elapsed: float) -> None:
        step = _last_step(metrics_path)
        if step is not None:
            progress.update(step / total)

    limit = cfg.training.time_limit_s
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    lock_name = cfg.orchestration.train_concurrency_limit
    log.info("training: %s", " ".join(cmd))
    from tasks.reporting import in_run

    if in_run():
        ensure_training_limit(lock_name)
        slot = concurrency(lock_name, occupy=1, strict=True)
    else:  # task.fn outside Prefect: no API to hold a slot on
        from contextlib import nullcontext

        slot = nullcontext()
    with slot, own_time():  # own time: the torchrun process, the wait for the slot excluded
        result = run_supervised(cmd, env=env, cwd=os.getcwd(), on_line=log.info, on_tick=on_tick, tick_s=2.0, keep_lines=200,
                                time_limit_s=None if limit is None else limit + SNAPSHOT_GRACE_S)
    tail = "\n".join(result.last_lines[-20:])
    if result.returncode == EXIT_STOPPED or result.timed_out or ranks_stopped(result.last_lines, EXIT_STOPPED):
        raise TrainingStopped(f"training into {out_dir} stopped before its last step (time limit {limit} s or a signal); "
                              f"a snapshot is kept under {train_dir}/snapshots: re-run with resume=True\n{tail}")
    if result.returncode != 0:
        raise TrainingFailed(f"torchrun exited with code {result.returncode} (training into {out_dir}):\n{tail}")
    from lib.checkpoint import read_meta

    final = read_meta(out_dir).get("final_metrics", {})
    progress.update(1.0)
    publish_table("training-summary", {"version_dir": out_dir, "wall_s": result.wall_s, **{k: v for k, v in final.items() if not isinstance(v, dict)}},
                  "Training run: steps, tokens, loss, throughput")
    return {"version_dir": out_dir, "wall_s": result.wall_s, "final_metrics": final}
