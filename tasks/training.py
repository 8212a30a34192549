"""The training stage as a Prefect task: lib.training.launch in a task, with the run's log and a
progress artifact.

- `launch` (lib/training/launch.py) holds the training lock, runs torchrun supervised, and raises
  TrainingStopped when the trainer stopped early with a snapshot (time limit or SIGTERM): the
  nightly flow leaves the night resumable and the next trigger continues from that snapshot.
- The task streams rank-0 output into the run log, turns `metrics.jsonl` into a progress
  artifact, and publishes the final metrics as a table.

Trade-off: no retries and no caching: a training that failed half-way is resumed on purpose
(resume=True) from its snapshot, never silently restarted from step 0 by the orchestrator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from lib.config import ConsolidationConfig
from lib.training.launch import launch
from tasks.reporting import TrainingProgress, own_time, publish_table, stage_logger


@task(name="train", cache_policy=NO_CACHE, retries=0)
def train_checkpoint(cfg: ConsolidationConfig, data_dir: str, out_dir: str, train_dir: str, parent: str | None = None,
                     init: bool = False, resume: bool = False, meta: dict[str, Any] | None = None,
                     tokenizer_dir: str | None = None, node_rank: int | None = None) -> dict[str, Any]:
    """`lib.training.launch.launch` as the night's training task: writes the version folder
    `out_dir`; returns its meta's final metrics (on several nodes, one task per node)."""
    progress = TrainingProgress("training-progress", f"{'Pre-training' if init else 'Consolidation'} steps of {Path(out_dir).name}")
    result = launch(cfg, data_dir, out_dir, train_dir, parent=parent, init=init, resume=resume, meta=meta,
                    tokenizer_dir=tokenizer_dir, node_rank=node_rank, log=stage_logger(), on_progress=progress.update,
                    timing=own_time)  # own time: the torchrun process, the wait for the lock excluded
    if not result.get("reused"):
        final = result["final_metrics"]
        publish_table("training-summary", {"version_dir": out_dir, "wall_s": result["wall_s"],
                                           **{k: v for k, v in final.items() if not isinstance(v, dict)}},
                      "Training run: steps, tokens, loss, throughput")
    return result
