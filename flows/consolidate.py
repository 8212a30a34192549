"""The nightly consolidation flow: the table of contents of one night.

ingest → exact dedup → near dedup → length filter and concatenation → fastText filters
(flows/curation.py) → tokenize (a task per input file) → manifest (lib.sampling) → train (torchrun,
inline or on the GPU deployment) → evaluate → gate → promote and record lineage.

- One parameter, the `ConsolidationConfig`: the UI form shows the sections a night reads, under a
  preset select (lib.config.run_form).
- The run is recorded in lineage from its start (runs: running → completed/failed, with each
  stage's seconds), so a night that dies half-way is visible as failed, not missing.
- A night that died (runs.status still running) is resumed by the next trigger under the same
  run id: data stages come from the cache, training continues from its last snapshot (or is
  skipped if its version folder is complete), and the gate is applied once.
- Nothing to do is not an error: no pending buffer files, or nothing left after curation, ends
  the run as completed without training.

Trade-off: the champion's own tokenizer is used (not `tokenizer.path`) unless one is configured,
so a night can never train a model on token ids it was not pre-trained with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect import flow, unmapped

from flows.curation import curate_into, pending_buffers
from flows.runtime import RunLock, StageClock, map_over, new_run_id, run_cached
from flows.training import TrainRequest, run_training
from lib.config import ConsolidationConfig, run_form
from lib.preflight import ensure_ready
from lib.workspace import RunDir, Workspace
from tasks.cache_keys import on_workspace
from tasks.data import adopt_outputs, commit_dedup_index, plan_tokenization, prepare_data, token_budget, tokenize_file
from tasks.evaluation import evaluate_versions, gate_and_promote, record_candidate

DATA_OUTPUTS = ["manifest.parquet", "data.json", "shards", "heldout"]
# The run form: the sections a night reads (the architecture comes from the champion, so no `model`).
NightlyConfig = run_form("workspace", "buffer", "curation", "sampling", "tokenizer", "training", "checkpoints",
                         "eval", "gate", "orchestration")


def _curated_docs(run: RunDir) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in run.curated.glob("*.parquet"))


def _used_hashes(lin, pending: list[dict[str, Any]]) -> list[str]:
    """The pending files curation did not quarantine: the inputs this night trains on."""
    status = {b.content_hash: b.status for b in lin.buffer_files()}
    return sorted(i["content_hash"] for i in pending if status.get(i["content_hash"], "pending") == "pending")


def prepare(cfg: ConsolidationConfig, run: RunDir, tokenizer_dir: str, sources: list, budget: int, clock: StageClock) -> dict[str, Any]:
    """token shards (one mapped task per input file, into the token cache) + manifest into `run`,
    cached on content."""
    ws = Workspace(cfg.workspace.root)
    with clock.stage("prepare"):
        jobs = plan_tokenization(cfg, str(run.path), sources, tokenizer_dir)
        map_over(tokenize_file, cfg, job=jobs, tokenizer_dir=unmapped(tokenizer_dir), cache_dir=unmapped(str(ws.token_cache)))
        data = run_cached(on_workspace(prepare_data, ws), lambda d: all((Path(d["data_dir"]) / e).exists() for e in DATA_OUTPUTS),
                          cfg=cfg, run_dir=str(run.path), sources=sources, tokenizer_dir=tokenizer_dir, budget=budget)
        adopt_outputs(data["data_dir"], str(run.path), DATA_OUTPUTS)
    return data


def resumable_night(ws: Workspace, lin) -> tuple[dict[str, Any], RunLock] | None:
    """The oldest night marked running in lineage whose run folder nobody holds locked (its
    process died) and whose version is not decided yet, with its lock now held by us. A dead
    night that got as far as the gate's decision is closed as completed instead."""
    for night in lin.incomplete_runs("nightly"):
        lock = RunLock.try_acquire(ws.run(night["run_id"]).path)
        if lock is None:  # alive: another process works on it right now
            continue
        if night["version_status"] in ("accepted", "rejected", "rolled_back"):
            lin.finish_run(night["run_id"], "completed", night["version"])
            lock.release()
            continue
        return night, lock
    return None


def trained_version(version_dir: Path) -> dict[str, Any] | None:
    """A version folder a resumed night already finished training (meta.json with its metrics)."""
    from lib.checkpoint import read_meta

    meta = read_meta(version_dir) if Path(version_dir).is_dir() else {}
    if not meta.get("final_metrics"):
        return None
    return {"version_dir": str(version_dir), "final_metrics": meta["final_metrics"], "reused": True}


@flow(name="nightly-consolidation", log_prints=True)
def nightly_consolidation(cfg: NightlyConfig) -> dict[str, Any]:
    """One night: curate the memory buffer, replay-mix, continue pre-training the champion,
    evaluate, gate, promote, record lineage.

    Args:
        cfg: The consolidation config. Pick the preset the pool runs (tiny on CPU, default on GPU).
    """
    from lib.checkpoint import materialize
    from lib.lineage import Lineage
    from lib.sampling import default_sources

    ws = Workspace(cfg.workspace.root).ensure()
    lin = Lineage(ws.lineage_db)
    champion = lin.alias("champion")
    if champion is None:
        raise ValueError(f"no champion in {ws.lineage_db}: run `consolidate bootstrap` (or the bootstrap flow) first")
    ensure_ready(cfg, lin.get_version(champion)["path"])  # fail in the first second, with the reason
    found = resumable_night(ws, lin)
    resumed = found[0] if found else None
    if resumed is not None:  # a night that died: same run id, same parent, stages reused or resumed
        run, champion, lock = ws.run(resumed["run_id"]).ensure(), lin.get_run(resumed["run_id"])["parent"] or champion, found[1]
    else:
        run = ws.run(new_run_id("night")).ensure()
        lock = RunLock(run.path)
    champion_dir = lin.get_version(champion)["path"]
    from prefect.runtime import flow_run

    lin.start_run(run.run_id, kind="nightly", parent=champion, flow_run_id=flow_run.get_id(), config=cfg.to_dict())
    clock = StageClock()
    result: dict[str, Any] = {"run_id": run.run_id, "parent": champion, "version": None, "resumed": resumed is not None}
    try:
        pending = pending_buffers(cfg, clock)
        if not pending:
            result["status"] = "nothing to consolidate: no pending buffer files"
            return result
        curation = curate_into(cfg, run, pending, clock)
        result["curation"] = {k: curation[k] for k in ("shards", "docs_in", "docs_out")}
        inputs = _used_hashes(lin, pending)
        result["curated_docs"] = _curated_docs(run)
        if result["curated_docs"] == 0:
            result["status"] = "nothing to consolidate: curation kept no documents"
            return result

        tokenizer_dir = str(cfg.tokenizer.path or materialize(champion_dir))
        data = prepare(cfg, run, tokenizer_dir, default_sources(ws, cfg, run.curated), token_budget(cfg), clock)

        version = lin.next_version(run.run_id)
        with clock.stage("train"):
            trained = trained_version(ws.checkpoint(version)) or run_training(TrainRequest(
                cfg=cfg, data_dir=str(run.path), out_dir=str(ws.checkpoint(version)), train_dir=str(run.train),
                parent=champion_dir, resume=resumed is not None, meta={"version": version, "run_id": run.run_id}))
        manifest = {"hash": data["manifest_hash"], "path": str(run.manifest),
                    "stats": {"rows": data["manifest_rows"], "tokens_per_source": data["tokens_per_source"]}}
        with clock.stage("record"):
            record_candidate(cfg, run.run_id, version, trained["version_dir"], champion, inputs, manifest)
        with clock.stage("evaluate"):
            result["eval"] = evaluate_versions(cfg, str(run.path), run.run_id, version, champion)
        with clock.stage("gate"):
            result["gate"] = gate_and_promote(cfg, version)
            if result["gate"]["passed"]:
                commit_dedup_index(cfg, str(run.path))
        result.update(version=version, status=result["gate"]["status"], final_metrics=trained["final_metrics"])
        return result
    except BaseException:
        lin.finish_run(run.run_id, "failed", result.get("version"), clock.seconds)
        raise
    finally:
        result["timings"], result["own_timings"] = clock.seconds, clock.own
        if lin.get_run(run.run_id)["status"] == "running":
            lin.finish_run(run.run_id, "completed", result.get("version"), clock.seconds)
        lock.release()
