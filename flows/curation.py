"""The curation flow: tonight's memory buffer files to curated parquet, on its own or inside the
nightly flow.

- ingest: list the buffer folder, hash every file (a task per file, on threads or Ray), keep
  the ones the registry does not know as consumed or quarantined; a file found bad is moved to
  `quarantine/` with its reason, and `record-ingest` writes every reason file lineage does not
  know yet, so a quarantine is recorded even when the task that made it failed, was retried, or
  its process was killed;
- curate (lib.curation's three steps): per shard of the pending files, ingest + exact hashes +
  MinHash signatures (mapped tasks); one reduce for exact dedup → near dedup (MinHash-LSH, also
  against earlier nights); per shard, each document's kind (code or prose), length filter and
  concatenation → fastText language and quality filters on prose, the code rule on code (mapped
  tasks). Each step is cached on the content it reads and the curation config; a cache hit
  hard-links the earlier run's files into this run folder.

Trade-off: hashing every file on every run costs one read of the buffer (~2 GB/s) but makes
"same input" mean the same bytes, whatever the file names or times.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, unmapped

from flows.runtime import StageClock, map_over, new_run_id, night_lock
from lib.config import ConsolidationConfig, run_form
from lib.curation import DEDUP_OUTPUTS, shard_count, shard_outputs
from lib.faults import fault_point
from lib.lineage import Lineage
from lib.workspace import RunDir, Workspace
from tasks.cache_keys import on_workspace
from tasks.data import (adopt_outputs, curation_report, dedup_shards, filter_shard, find_buffer_files, ingest_shard,
                        inspect_buffer_file, record_ingest, select_pending)


def pending_buffers(cfg: ConsolidationConfig, clock: StageClock) -> list[dict[str, Any]]:
    """ingest: the buffer files tonight may use, each with its content hash."""
    root = str(Workspace(cfg.workspace.root).root)
    with clock.stage("ingest"):
        files = find_buffer_files(root)
        inspected = map_over(inspect_buffer_file, cfg, path=files)
        return select_pending(root, inspected)


def _files(rank: int, kinds: tuple[str, ...]) -> list[str]:
    return [shard_outputs(rank)[k] for k in kinds]


def _adopted(task, cfg: ConsolidationConfig, here: str, outputs, results: list[dict[str, Any]], params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cached step results with their files in run folder `here`: a result whose files are gone
    (an old run folder deleted) is computed again with the cache refreshed; the files of a result
    computed by another run are hard-linked in."""
    cached = on_workspace(task, Workspace(cfg.workspace.root))
    done = []
    for r, p in zip(results, params):
        if not all((Path(r["run_dir"]) / o).exists() for o in outputs(r)):
            r = cached.with_options(refresh_cache=True)(**p)
        adopt_outputs(r["run_dir"], here, outputs(r))
        done.append(r)
    return done


def _map_cached(task, cfg: ConsolidationConfig, here: str, outputs, params: dict[str, Any], ranks: list[int]) -> list[dict[str, Any]]:
    """`task` mapped over `rank`, cached on content, its files adopted into `here`."""
    cached = on_workspace(task, Workspace(cfg.workspace.root))
    results = map_over(cached, cfg, **{k: unmapped(v) for k, v in params.items()}, rank=ranks)
    return _adopted(task, cfg, here, outputs, results, [{**params, "rank": r} for r in ranks])


def curate_into(cfg: ConsolidationConfig, run: RunDir, pending: list[dict[str, Any]], clock: StageClock) -> dict[str, Any]:
    """Curation of `pending` into `run.curated`: ingest and signatures mapped over shards, one
    dedup over all of them, filters mapped over shards; each step cached on content, and a cached
    step's files hard-linked from the run that computed them."""
    ws = Workspace(cfg.workspace.root)
    files = sorted(p["path"] for p in pending)
    mine = {p["content_hash"] for p in pending}  # what the registry knows of them (pending or nothing)
    statuses = {b.content_hash: b.status for b in Lineage(ws.lineage_db).buffer_files() if b.content_hash in mine}
    n = shard_count(cfg, len(files))
    workers = max(1, (cfg.curation.workers or os.cpu_count() or 1) // n)
    here, ranks = str(run.path), list(range(n))
    with clock.stage("curate"):
        shards = _map_cached(ingest_shard, cfg, here, lambda r: _files(r["rank"], ("docs", "dedup", "ingest")),
                             dict(cfg=cfg, run_dir=here, world_size=n, files=files, statuses=statuses, workers=workers), ranks)
        fault_point("curate")  # bad files moved to quarantine/, lineage not told yet
        record_ingest(str(ws.root), shards)
        params = dict(cfg=cfg, run_dir=here, world_size=n)
        dedup_files = DEDUP_OUTPUTS + [shard_outputs(k)["keep"] for k in ranks]
        [dedup] = _adopted(dedup_shards, cfg, here, lambda r: dedup_files,
                           [on_workspace(dedup_shards, ws)(**params)], [params])
        filtered = _map_cached(filter_shard, cfg, here, lambda r: _files(r["rank"], ("part", "filter", "dropped")),
                               dict(cfg=cfg, run_dir=here), ranks)
        return curation_report(here, shards, dedup["stats"], [f["stats"] for f in filtered], cfg.curation.max_drop_share)


# The run form of curation alone: where the buffer is, how to curate it, threads or Ray.
CurateConfig = run_form("workspace", "buffer", "curation", "orchestration")


@flow(name="curate", log_prints=True)
def curate(cfg: CurateConfig) -> dict[str, Any]:
    """Curate the pending memory buffer into a new run folder (no training; nothing is consumed).

    Args:
        cfg: The consolidation config (workspace, buffer, curation and orchestration apply).
    """
    ws = Workspace(cfg.workspace.root).ensure()
    run = ws.run(new_run_id("curate")).ensure()
    clock = StageClock()
    with night_lock(cfg, f"curation {run.run_id}"):  # it moves bad files and registers good ones, like a night
        pending = pending_buffers(cfg, clock)
        if not pending:
            return {"run_id": run.run_id, "pending_files": 0, "timings": clock.seconds, "own_timings": clock.own}
        stats = curate_into(cfg, run, pending, clock)
    return {"run_id": run.run_id, "pending_files": len(pending), "curated_dir": str(run.curated),
            "stats": stats, "timings": clock.seconds, "own_timings": clock.own}
