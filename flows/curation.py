"""The curation flow: tonight's buffer files to curated parquet, on its own or inside the
nightly flow.

- ingest: list the buffer folder, hash every file once (a task per file, on threads or Ray),
  keep the ones the registry does not know as consumed or quarantined (lib.buffer.ingest.select_pending);
- curate: the step list of lib.curation.pipeline (`curation_steps`), each step mapped as tasks: a task per
  rank for a per-shard step (ingest + signatures, filters), one task for a reduce (registry,
  dedup, report). The same list `lib.curation.pipeline.curate` runs in one process (CLI, tests), with the
  same survivors. A cached step is keyed on the content it reads (`Step.reads`, the buffer files
  by the hash taken at ingest), the curation config and code; a cache hit hard-links the earlier
  run's files (`Step.writes`) into this run folder, and a hit whose files are gone runs again.

Trade-off: hashing every file on every run costs one read of the buffer (~2 GB/s) but makes
"same input" mean the same bytes, whatever the file names or times.
"""

from __future__ import annotations

import os
from typing import Any

from prefect import flow, unmapped

from flows.runtime import StageClock, cached_stage, map_over, new_run_id, recorded_run
from lib.config import ConsolidationConfig, run_form
from lib.curation.pipeline import curation_steps, shard_count
from lib.curation.steps import Step, ranks_of
from lib.workspace import RunDir, Workspace
from tasks.data import find_buffer_files, inspect_buffer_file, select_pending, step_task


def pending_buffers(cfg: ConsolidationConfig, clock: StageClock) -> list[dict[str, Any]]:
    """ingest: the buffer files tonight may use, each with its content hash and registry status."""
    root = str(Workspace(cfg.workspace.root).root)
    with clock.stage("ingest"):
        files = find_buffer_files(root)
        inspected = map_over(inspect_buffer_file, cfg, path=files)
        return select_pending(root, inspected)


def map_step(step: Step, cfg: ConsolidationConfig, given: Any, here: str, world_size: int, workers: int) -> list[dict[str, Any]]:
    """`step` as tasks, a task per rank (one for a reduce); a cached result's files are adopted
    into `here`, and one whose files are gone (an old run folder deleted) is computed again."""
    task = step_task(step, Workspace(cfg.workspace.root))
    params = dict(step=step, cfg=cfg, input=given, run_dir=here, world_size=world_size,
                  workers=workers if step.per_shard else None)
    ranks = ranks_of(step, world_size)
    if step.per_shard:
        results = map_over(task, cfg, **{k: unmapped(v) for k, v in params.items()}, rank=ranks)
    else:
        results = [task(**params, rank=0)]
    if not step.cached:
        return results
    return [cached_stage(task, here, step.writes(rank, world_size), {**params, "rank": rank}, result=r)
            for r, rank in zip(results, ranks)]


def curate_into(cfg: ConsolidationConfig, run: RunDir, pending: list[dict[str, Any]], clock: StageClock) -> dict[str, Any]:
    """Curation of `pending` into `run.curated`: lib.curation.pipeline's steps in order, each mapped over
    the shards; returns the night's counts (curated/stats.json)."""
    ws = Workspace(cfg.workspace.root)
    n = shard_count(cfg, len(pending))
    workers = max(1, (cfg.curation.workers or os.cpu_count() or 1) // n)
    given: Any = {"files": sorted(pending, key=lambda p: p["path"]), "already": {}}
    here = str(run.path)
    with clock.stage("curate"):
        for step in curation_steps(ws, cfg.buffer.max_text_bytes):
            results = map_step(step, cfg, given, here, n, workers)
            given = here  # the steps after the first read the run folder
    return {**results[0]["stats"], "curated_dir": str(run.curated)}


# The run form of curation alone: where the buffer is, how to curate it, threads or Ray.
CurateConfig = run_form("workspace", "buffer", "curation", "orchestration")


@flow(name="curate", log_prints=True)
def curate(cfg: CurateConfig) -> dict[str, Any]:
    """Curate the pending buffer into a new run folder (no training; nothing is consumed).

    Args:
        cfg: The consolidation config (workspace, buffer, curation and orchestration apply).
    """
    ws = Workspace(cfg.workspace.root).ensure()
    run = ws.run(new_run_id("curate")).ensure()
    clock = StageClock()
    with recorded_run(cfg, f"curation {run.run_id}"):  # the night lock: it moves bad files and registers good ones, like a night (no lineage run)
        pending = pending_buffers(cfg, clock)
        if not pending:
            return {"run_id": run.run_id, "pending_files": 0, "timings": clock.seconds, "own_timings": clock.own}
        stats = curate_into(cfg, run, pending, clock)
    return {"run_id": run.run_id, "pending_files": len(pending), "curated_dir": str(run.curated),
            "stats": stats, "timings": clock.seconds, "own_timings": clock.own}
