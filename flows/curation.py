"""The curation flow: tonight's memory buffer files to curated parquet, on its own or inside the
nightly flow.

- ingest: list the buffer folder, hash every file (a task per file, on threads or Ray), keep
  the ones the registry does not know as consumed or quarantined;
- curate: exact dedup → near dedup (MinHash-LSH, also against earlier nights) → length filter
  and concatenation of short documents → fastText language and quality filters
  (lib.curation.curate), cached on the content hashes of the pending files and the curation
  config; a cache hit hard-links the earlier run's curated parts into this run folder.

Trade-off: hashing every file on every run costs one read of the buffer (~2 GB/s) but makes
"same input" mean the same bytes, whatever the file names or times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.runtime import StageClock, map_over, new_run_id, run_cached
from lib.config import ConsolidationConfig
from lib.workspace import RunDir, Workspace
from tasks.cache_keys import on_workspace
from tasks.data import adopt_outputs, curate_buffers, find_buffer_files, inspect_buffer_file, select_pending


def pending_buffers(cfg: ConsolidationConfig, clock: StageClock) -> list[dict[str, Any]]:
    """ingest: the buffer files tonight may use, each with its content hash."""
    root = str(Workspace(cfg.workspace.root).root)
    with clock.stage("ingest"):
        files = find_buffer_files(root)
        inspected = map_over(inspect_buffer_file, cfg, path=files)
        return select_pending(root, inspected)


def curate_into(cfg: ConsolidationConfig, run: RunDir, pending: list[dict[str, Any]], clock: StageClock) -> dict[str, Any]:
    """curation of `pending` into `run.curated`, cached on content."""
    ws = Workspace(cfg.workspace.root)
    with clock.stage("curate"):
        stats = run_cached(on_workspace(curate_buffers, ws),
                           lambda s: all((Path(s["curated_dir"]).parent / e).is_dir() for e in ("curated", "curation")),
                           cfg=cfg, run_dir=str(run.path), inputs=pending)
        # curated/ and curation/ (reports, and the dedup state commit_index adds on promotion)
        adopt_outputs(str(Path(stats["curated_dir"]).parent), str(run.path), ["curated", "curation"])
    return stats


@flow(name="curate", log_prints=True)
def curate(cfg: ConsolidationConfig) -> dict[str, Any]:
    """Curate the pending memory buffer into a new run folder (no training)."""
    ws = Workspace(cfg.workspace.root).ensure()
    run = ws.run(new_run_id("curate")).ensure()
    clock = StageClock()
    pending = pending_buffers(cfg, clock)
    if not pending:
        return {"run_id": run.run_id, "pending_files": 0, "timings": clock.seconds}
    stats = curate_into(cfg, run, pending, clock)
    return {"run_id": run.run_id, "pending_files": len(pending), "curated_dir": str(run.curated),
            "stats": stats, "timings": clock.seconds}
