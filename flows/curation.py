"""The curation flow: tonight's memory buffer files to curated parquet, on its own or inside the
nightly flow.

- ingest: list the buffer folder, hash every file (a task per file, on threads or Ray), keep
  the ones the registry does not know as consumed or quarantined;
- curate (lib.curation's three steps): per shard of the pending files, ingest + exact hashes +
  MinHash signatures (mapped tasks); one reduce for exact dedup → near dedup (MinHash-LSH, also
  against earlier nights); per shard, length filter and concatenation → fastText language and
  quality filters (mapped tasks). Each step is cached on the content it reads and the curation
  config; a cache hit hard-links the earlier run's files into this run folder.

Trade-off: hashing every file on every run costs one read of the buffer (~2 GB/s) but makes
"same input" mean the same bytes, whatever the file names or times.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, unmapped

from flows.runtime import StageClock, map_over, new_run_id, run_cached
from lib.config import ConsolidationConfig
from lib.curation import DEDUP_OUTPUTS, shard_count, shard_outputs
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


def _present(outputs):
    return lambda result: all((Path(result["run_dir"]) / o).exists() for o in outputs(result))


def _map_cached(task, cfg: ConsolidationConfig, outputs, params: dict[str, Any], over: str, values: list) -> list[dict[str, Any]]:
    """`task` mapped over `values` of parameter `over`, cached on content; a result whose outputs
    are gone (an old run folder deleted) is computed again with the cache refreshed."""
    ws = Workspace(cfg.workspace.root)
    cached = on_workspace(task, ws)
    results = map_over(cached, cfg, **{k: unmapped(v) for k, v in params.items()}, **{over: values})
    present = _present(outputs)
    return [r if present(r) else cached.with_options(refresh_cache=True)(**params, **{over: v}) for r, v in zip(results, values)]


def curate_into(cfg: ConsolidationConfig, run: RunDir, pending: list[dict[str, Any]], clock: StageClock) -> dict[str, Any]:
    """Curation of `pending` into `run.curated`: ingest and signatures mapped over shards, one
    dedup over all of them, filters mapped over shards; each step cached on content, and a cached
    step's files hard-linked from the run that computed them."""
    ws = Workspace(cfg.workspace.root)
    files = sorted(p["path"] for p in pending)
    from lib.lineage import Lineage

    mine = {p["content_hash"] for p in pending}  # what the registry knows of them (pending or nothing)
    statuses = {b.content_hash: b.status for b in Lineage(ws.lineage_db).buffer_files() if b.content_hash in mine}
    n = shard_count(cfg, len(files))
    workers = max(1, (cfg.curation.workers or os.cpu_count() or 1) // n)
    here = str(run.path)
    with clock.stage("curate"):
        shards = _map_cached(ingest_shard, cfg, lambda r: [shard_outputs(r["rank"])[k] for k in ("docs", "dedup", "ingest")],
                             dict(cfg=cfg, run_dir=here, world_size=n, files=files, statuses=statuses, workers=workers),
                             "rank", list(range(n)))
        for r in shards:
            adopt_outputs(r["run_dir"], here, [shard_outputs(r["rank"])[k] for k in ("docs", "dedup", "ingest")])
        record_ingest(str(ws.root), shards)
        dedup = run_cached(on_workspace(dedup_shards, ws), _present(lambda r: DEDUP_OUTPUTS + [shard_outputs(k)["keep"] for k in range(n)]),
                           cfg=cfg, run_dir=here, world_size=n)
        adopt_outputs(dedup["run_dir"], here, DEDUP_OUTPUTS + [shard_outputs(k)["keep"] for k in range(n)])
        filtered = _map_cached(filter_shard, cfg, lambda r: [shard_outputs(r["rank"])[k] for k in ("part", "filter")],
                               dict(cfg=cfg, run_dir=here), "rank", list(range(n)))
        for r in filtered:
            adopt_outputs(r["run_dir"], here, [shard_outputs(r["rank"])[k] for k in ("part", "filter")])
        return curation_report(here, shards, dedup["stats"], [f["stats"] for f in filtered])


@flow(name="curate", log_prints=True)
def curate(cfg: ConsolidationConfig) -> dict[str, Any]:
    """Curate the pending memory buffer into a new run folder (no training)."""
    ws = Workspace(cfg.workspace.root).ensure()
    run = ws.run(new_run_id("curate")).ensure()
    clock = StageClock()
    pending = pending_buffers(cfg, clock)
    if not pending:
        return {"run_id": run.run_id, "pending_files": 0, "timings": clock.seconds, "own_timings": clock.own}
    stats = curate_into(cfg, run, pending, clock)
    return {"run_id": run.run_id, "pending_files": len(pending), "curated_dir": str(run.curated),
            "stats": stats, "timings": clock.seconds, "own_timings": clock.own}
