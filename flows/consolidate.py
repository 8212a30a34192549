"""The nightly consolidation flow: the table of contents of one night.

ingest → exact dedup → near dedup → length filter and concatenation → fastText filters
(flows/curation.py) → tokenize (a task per input file) → manifest (lib.sampling) → train (torchrun,
inline or on the GPU deployment) → record → evaluate → gate and promote → store (dedup index,
delta, optimizer-state pruning).

- One parameter, the `ConsolidationConfig`: the UI form shows the sections a night reads, under a
  preset select (lib.config.run_form).
- One night per workspace: the whole night holds the workspace's night lock (lib.locks). A second
  trigger waits for it (up to `orchestration.night_lock_timeout_s`, naming the holder in the log)
  or gives up; it never curates the same files twice or races for a version id.
- The run is recorded in lineage from its start (runs: running → completed/failed, with each
  stage's seconds). A night killed (or stopped by SIGTERM, Ctrl-C, the training time limit)
  stays `running`; under the night lock that means dead, and the next trigger finishes it:
  - decided by the gate already: the steps after the gate it missed (index commit, delta,
    pruning; each idempotent), then the run is closed as completed;
  - not decided, parent still the champion: resumed under the same run id, on the same buffer
    files (run inputs are pinned once curation is done), data stages from the cache, training
    from its last snapshot (or skipped if its version folder is complete), the gate applied once;
  - not decided, the champion moved since: closed as failed, a fresh night starts.
- A night that fails with an error is closed as failed; the next trigger starts a fresh one.
- A night the gate rejects for forgetting is retried once, with `gate.retry_on_forgetting`, as run
  `<run>-retry1` on the same curated documents with lib.gate.safer_settings; buffers are consumed
  only by an accepted attempt.
- Nothing to do is not an error: no pending buffer files, or nothing left after curation, ends
  the run as completed without training.

Trade-off: the champion's own tokenizer is used (not `tokenizer.path`) unless one is configured,
so a night can never train a model on token ids it was not pre-trained with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect import flow, unmapped
from prefect.exceptions import TerminationSignal

from flows.curation import curate_into, pending_buffers
from flows.runtime import StageClock, map_over, new_run_id, night_lock, run_cached
from flows.training import TrainRequest, run_training
from lib.config import ConsolidationConfig, run_form
from lib.faults import fault_point
from lib.gate import RETRY_SUFFIX, rejected_for_forgetting, safer_settings
from lib.preflight import ensure_ready
from lib.workspace import RunDir, Workspace
from tasks.cache_keys import on_workspace
from tasks.data import adopt_outputs, commit_dedup_index, plan_tokenization, prepare_data, token_budget, tokenize_file
from tasks.evaluation import evaluate_versions, gate_and_promote, record_candidate, remember_night, store_candidate
from tasks.training import TrainingStopped

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
        fault_point("tokenize")  # token cache written, no manifest yet
        data = run_cached(on_workspace(prepare_data, ws), lambda d: all((Path(d["data_dir"]) / e).exists() for e in DATA_OUTPUTS),
                          cfg=cfg, run_dir=str(run.path), sources=sources, tokenizer_dir=tokenizer_dir, budget=budget)
        adopt_outputs(data["data_dir"], str(run.path), DATA_OUTPUTS)
    return data


DECIDED = ("accepted", "rejected", "rolled_back")
# Ways a night is stopped rather than failing: its run stays `running`, the next trigger resumes it.
STOPPED = (KeyboardInterrupt, SystemExit, TerminationSignal, TrainingStopped)


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


def finish_decided_nights(cfg: ConsolidationConfig, lin, log) -> list[str]:
    """Dead nights the gate already decided: do the steps after the gate they did not get to
    (dedup index commit for an accepted one, delta storage, optimizer-state pruning; each
    idempotent) and close them as completed."""
    ws = Workspace(cfg.workspace.root)
    done = []
    for night in dead_nights(lin):
        if night["version_status"] not in DECIDED:
            continue
        log.warning("finishing dead night %s: %s was %s; storing it", night["run_id"], night["version"], night["version_status"])
        if night["version_status"] == "accepted":
            commit_dedup_index(cfg, str(ws.run(night["run_id"]).path))
            remember_night(cfg, night["version"])
        store_candidate(cfg, night["version"])
        lin.finish_run(night["run_id"], "completed", night["version"])
        done.append(night["run_id"])
    return done


def claim_version(ws: Workspace, lin, run_id: str) -> str:
    """The version id this night writes: its own from an earlier attempt, else the next free one.
    A version folder no lineage row knows, left by another night that died between training and
    recording, is stepped over, never overwritten or mistaken for ours."""
    from lib.checkpoint import read_meta

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
    from lib.checkpoint import read_meta

    meta = read_meta(version_dir) if Path(version_dir).is_dir() else {}
    if not meta.get("final_metrics") or (run_id is not None and meta.get("run_id") not in (None, run_id)):
        return None
    return {"version_dir": str(version_dir), "final_metrics": meta["final_metrics"], "reused": True}


def _attempt(cfg: ConsolidationConfig, ws: Workspace, lin, run: RunDir, champion: str, inputs: list[str], resume: bool,
             clock: StageClock) -> dict[str, Any]:
    """Tokenize and mix the curated data of `run`, continue `champion` on it, record, evaluate,
    gate, remember and store: one attempt at the night (the first, or its safer retry)."""
    from lib.checkpoint import materialize
    from lib.sampling import default_sources

    result: dict[str, Any] = {}
    champion_dir = lin.get_version(champion)["path"]
    tokenizer_dir = str(cfg.tokenizer.path or materialize(champion_dir))
    data = prepare(cfg, run, tokenizer_dir, default_sources(ws, cfg, run.curated), token_budget(cfg), clock)

    version = claim_version(ws, lin, run.run_id)
    with clock.stage("train"):
        trained = trained_version(ws.checkpoint(version), run.run_id) or run_training(TrainRequest(
            cfg=cfg, data_dir=str(run.path), out_dir=str(ws.checkpoint(version)), train_dir=str(run.train),
            parent=champion_dir, resume=resume,
            meta={"version": version, "run_id": run.run_id, "document_separator": data["separator_token"],
                  "replay_corpus": cfg.workspace.corpus}))
    manifest = {"hash": data["manifest_hash"], "path": str(run.manifest),
                "stats": {"rows": data["manifest_rows"], "tokens_per_source": data["tokens_per_source"]}}
    with clock.stage("record"):
        record_candidate(cfg, run.run_id, version, trained["version_dir"], champion, inputs, manifest)
        fault_point("record")
    with clock.stage("evaluate"):
        result["eval"] = evaluate_versions(cfg, str(run.path), run.run_id, version, champion)
        fault_point("evaluate")
    with clock.stage("gate"):
        result["gate"] = gate_and_promote(cfg, version)
        fault_point("promote")
    with clock.stage("store"):
        if result["gate"]["passed"]:
            commit_dedup_index(cfg, str(run.path))
            result["memory"] = remember_night(cfg, version)
        result["storage"] = store_candidate(cfg, version)
    result.update(version=version, status=result["gate"]["status"], final_metrics=trained["final_metrics"])
    return result


def _retry(cfg: ConsolidationConfig, ws: Workspace, lin, first: RunDir, champion: str, inputs: list[str], log) -> dict[str, Any]:
    """The gate rejected the night for forgetting and `gate.retry_on_forgetting` is on: the same
    curated documents again, under run `<run>-retry1`, with `lib.gate.safer_settings`. Both
    attempts stay in lineage; the buffers are consumed only by an accepted one (the first was
    rejected, so they are still pending). A retry killed half-way is resumed as a retry."""
    from prefect.runtime import flow_run

    run = ws.run(first.run_id + RETRY_SUFFIX).ensure()
    resume = lin.get_run(run.run_id) is not None
    _link_curated(first, run)
    safer = safer_settings(cfg)
    log.warning("night %s was rejected for forgetting; retrying as %s with lr_scale %.3g, new_data_ratio %.3g, memory_ratio %.3g",
                first.run_id, run.run_id, safer.training.lr_scale, safer.sampling.new_data_ratio, safer.sampling.memory_ratio)
    lin.start_run(run.run_id, kind="nightly", parent=champion, flow_run_id=flow_run.get_id(), config=safer.to_dict())
    lin.record_inputs(run.run_id, inputs)
    clock = StageClock()
    try:
        out = {"run_id": run.run_id, **_attempt(safer, ws, lin, run, champion, inputs, resume, clock)}
    except STOPPED:
        raise  # stays running: the next trigger resumes the retry
    except BaseException:
        lin.finish_run(run.run_id, "failed", None, clock.seconds)
        raise
    lin.finish_run(run.run_id, "completed", out["version"], clock.seconds)
    return out


def _link_curated(src: RunDir, dst: RunDir) -> None:
    """The retry trains on exactly the documents the first attempt curated: hard links (copies
    across file systems) of its curated files."""
    import shutil

    dst.curated.mkdir(parents=True, exist_ok=True)
    for part in sorted(src.curated.glob("*.parquet")):
        target = dst.curated / part.name
        if target.exists():
            continue
        try:
            os.link(part, target)
        except OSError:
            shutil.copy2(part, target)


@flow(name="nightly-consolidation", log_prints=True)
def nightly_consolidation(cfg: NightlyConfig) -> dict[str, Any]:
    """One night: curate the memory buffer, replay-mix, continue pre-training the champion,
    evaluate, gate, promote, record lineage.

    Args:
        cfg: The consolidation config. Pick the preset the pool runs (tiny on CPU, default on GPU).
    """
    ws = Workspace(cfg.workspace.root).ensure()
    with night_lock(cfg, "nightly consolidation") as lock:
        return _night(cfg, ws, lock)


def _night(cfg: ConsolidationConfig, ws: Workspace, lock) -> dict[str, Any]:
    from lib.lineage import Lineage
    from prefect.runtime import flow_run

    from lib.corpus import with_replay_corpus
    from tasks.reporting import stage_logger

    log = stage_logger()
    lin = Lineage(ws.lineage_db)
    champion = lin.alias("champion")
    if champion is None:
        raise ValueError(f"no champion in {ws.lineage_db}: adopt your model with `consolidate init --model DIR --replay ...` "
                         f"(or the bootstrap flow's adopt parameter), or pre-train the demo's with `consolidate bootstrap`")
    cfg = with_replay_corpus(ws, cfg)
    ensure_ready(cfg, lin.get_version(champion)["path"])  # fail in the first second, with the reason
    finished = finish_decided_nights(cfg, lin, log)
    resumed = resumable_night(lin, champion, log)
    if resumed is not None:  # a night that died: same run id, same parent, same inputs
        run = ws.run(resumed["run_id"]).ensure()
        log.warning("resuming night %s, which died before its gate (version %s)", run.run_id, resumed["version"] or "not yet recorded")
    else:
        run = ws.run(new_run_id("night")).ensure()
    retry = resumed if resumed is not None and resumed["run_id"].endswith(RETRY_SUFFIX) else None
    if retry is not None:  # the safer second attempt of a night the gate rejected for forgetting
        cfg = safer_settings(cfg)
    lock.set_purpose(f"night {run.run_id}")
    lin.start_run(run.run_id, kind="nightly", parent=champion, flow_run_id=flow_run.get_id(), config=cfg.to_dict())
    clock = StageClock()
    result: dict[str, Any] = {"run_id": run.run_id, "parent": champion, "version": None, "resumed": resumed is not None}
    if finished:
        result["finished_dead_nights"] = finished
    try:
        pending = pending_buffers(cfg, clock)
        pinned = {b.content_hash for b in lin.run_inputs(run.run_id)}
        if pinned:  # a resumed night trains on exactly what it curated before, new files wait
            pending = [p for p in pending if p["content_hash"] in pinned]
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
        lin.record_inputs(run.run_id, inputs)  # pinned from here: a resume trains on the same files

        result.update(_attempt(cfg, ws, lin, run, champion, inputs, resumed is not None, clock))
        if retry is None and rejected_for_forgetting(result["gate"]["rules"]) and cfg.gate.retry_on_forgetting:
            lin.finish_run(run.run_id, "completed", result["version"], clock.seconds)  # the first attempt: rejected
            result["retry"] = _retry(cfg, ws, lin, run, champion, inputs, log)
            result.update(version=result["retry"]["version"], status=result["retry"]["status"])
        return result
    except STOPPED as exc:
        # stopped from outside (SIGTERM, Ctrl-C, the training time limit): like a kill, the run
        # stays `running` in lineage and the next trigger resumes it
        log.warning("night %s stopped (%s); the next trigger resumes it", run.run_id, type(exc).__name__)
        raise
    except BaseException:
        if lin.get_run(run.run_id)["status"] == "running":  # (a failed retry leaves the first attempt as it was)
            lin.finish_run(run.run_id, "failed", result.get("version"), clock.seconds)
        raise
    finally:
        result["timings"], result["own_timings"] = clock.seconds, clock.own
        row = lin.get_run(run.run_id)
        if row["status"] == "running" and "status" in result:
            lin.finish_run(run.run_id, "completed", result.get("version"), clock.seconds)
