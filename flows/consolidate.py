"""The nightly consolidation flow: the table of contents of one night.

ingest → exact dedup → near dedup → length filter and concatenation → fastText filters
(flows/curation.py) → knowledge injection (fact set + augmented forms, lib/knowledge) → tokenize (a task per input file) → manifest (lib.data.sampling, lib.data.manifest) → train (torchrun,
inline or on the GPU deployment) → record → evaluate → gate and promote → store (dedup index,
delta, optimizer-state pruning) → rollout (an accepted champion pushed to the serving engine,
`serve.rollout`; a failed push leaves it "promoted, not live", never undoes the promotion).

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
- A night that fails with an error is closed as failed; the next trigger starts a fresh one,
  unless training had snapshotted (or finished) and the failed night is the last one, its parent
  still the champion: then it resumes that night from its snapshot (lib.registry.runs.failed_after_training).
- A night the gate rejects for forgetting is retried once, with `gate.retry_on_forgetting`, as run
  `<run>-retry1` on the same curated documents with lib.evaluation.gate.safer_settings; buffers are consumed
  only by an accepted attempt.
- Nothing to do is not an error: no pending buffer files, or nothing left after curation, ends
  the run as completed without training.

The bookkeeping (lock, run id, resume of a dead night, the run's lifecycle in lineage) is
lib/registry/runs.py, applied by flows.runtime.recorded_run; what follows here is the night's stages.

Trade-off: the champion's own tokenizer is used (not `tokenizer.path`) unless one is configured,
so a night can never train a model on token ids it was not pre-trained with.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
from prefect import flow, unmapped

from flows.curation import curate_into, pending_buffers
from flows.runtime import StageClock, cached_stage, crash_orphans, map_over, recorded_run
from flows.training import TrainRequest, run_training
from lib.config import ConsolidationConfig, run_form
from lib.data.corpus import with_replay_corpus
from lib.data.prepared import PreparedData
from lib.data.sampling import default_sources, token_budget
from lib.evaluation.gate import RETRY_SUFFIX, rejected_for_forgetting, safer_settings
from lib.faults import fault_point
from lib.files import link_or_copy
from lib.registry.runs import RunBook, champion_of, claim_version, dead_nights, finish_decided, trained_version
from lib.training.preflight import ensure_ready
from lib.workspace import RunDir, Workspace
from tasks.data import commit_dedup_index, plan_tokenization, prepare_data, resolve_tokenizer, tokenize_file
from tasks.evaluation import evaluate_versions, gate_and_promote, record_candidate, remember_night, store_candidate
from tasks.knowledge import inject_knowledge_task
from tasks.serving import roll_out_after_promotion
from lib.evaluation.evaluate import eval_budget_note
from lib.knowledge.inject import corpus_share, knowledge_sources, knowledge_tokens, night_plan

# The run form: the sections a night reads (the architecture comes from the champion, so no `model`).
NightlyConfig = run_form("workspace", "buffer", "curation", "knowledge", "sampling", "tokenizer", "training", "checkpoints",
                         "eval", "gate", "serve", "orchestration")


@flow(name="nightly-consolidation", log_prints=True)
def nightly_consolidation(cfg: NightlyConfig) -> dict[str, Any]:
    """One night: curate the buffer, replay-mix, continue pre-training the champion,
    evaluate, gate, promote, record lineage.

    Args:
        cfg: The consolidation config. Pick the preset the pool runs (tiny on CPU, default on GPU).
    """
    with recorded_run(cfg, "nightly consolidation") as book:
        return _night(cfg, book)


def _night(cfg: ConsolidationConfig, book: RunBook) -> dict[str, Any]:
    """The night's stages in order; the run is closed by `recorded_run` (completed, failed, or
    left running to resume when stopped)."""
    champion, champion_dir = champion_of(book.lineage)
    cfg = with_replay_corpus(book.ws, cfg)
    ensure_ready(cfg, champion_dir)  # fail in the first second, with the reason
    # what a killed night left Running in the UI (its train subflow, its tasks): Crashed, before
    # its lineage run is resumed or closed and its flow run id replaced
    crash_orphans([(book.lineage.get_run(n["run_id"]) or {}).get("flow_run_id") for n in dead_nights(book.lineage)], book.log,
                  current=book.flow_run_id)
    finished = finish_decided_nights(cfg, book)
    run_id, resumed = book.night(champion)  # a night that died: same run id, same parent, same inputs
    if resumed is not None and run_id.endswith(RETRY_SUFFIX):  # the safer second attempt of a rejected night
        cfg = safer_settings(cfg)
    run, clock = book.ws.run(run_id).ensure(), StageClock()
    book.start(run_id, "nightly", clock, parent=champion, config=cfg.to_dict())
    result: dict[str, Any] = {"run_id": run_id, "parent": champion, "version": None, "resumed": resumed is not None,
                              **({"finished_dead_nights": finished} if finished else {})}
    try:
        pending = _pinned(book, run_id, pending_buffers(cfg, clock))
        if not pending:
            return {**result, "status": "nothing to consolidate: no pending buffer files"}
        curation = curate_into(cfg, run, pending, clock)
        length = curation.get("length", {})   # docs_out counts the pieces of a long document split, a group of short ones as one
        result["curation"] = {**{k: curation[k] for k in ("shards", "docs_in", "docs_out")},
                              **{k: length[k] for k in ("split_long", "concatenated_groups") if k in length}}
        result["curated_docs"] = sum(pq.ParquetFile(p).metadata.num_rows for p in run.curated.glob("*.parquet"))
        if result["curated_docs"] == 0:
            return {**result, "status": "nothing to consolidate: curation kept no documents"}
        inputs = _used_hashes(book.lineage, pending)
        book.lineage.record_inputs(run_id, inputs)  # pinned from here: a resume trains on the same files
        result.update(_attempt(cfg, book, run, champion_dir, inputs, resumed is not None, clock))
        book.current.version = result["version"]
        if not run_id.endswith(RETRY_SUFFIX) and rejected_for_forgetting(result["gate"]["rules"]) and cfg.gate.retry_on_forgetting:
            result["retry"] = _retry(cfg, book, run, champion_dir, inputs)
            result.update(version=result["retry"]["version"], status=result["retry"]["status"])
        return result
    finally:
        result["timings"], result["own_timings"] = clock.seconds, clock.own


def _attempt(cfg: ConsolidationConfig, book: RunBook, run: RunDir, champion_dir: str, inputs: list[str], resume: bool,
             clock: StageClock) -> dict[str, Any]:
    """Tokenize and mix the curated data of `run`, continue the champion on it, record, evaluate,
    gate, remember and store: one attempt at the night (the first, or its safer retry)."""
    ws, champion, result = book.ws, book.current.parent, {}
    tokenizer_dir = resolve_tokenizer(cfg, champion_dir)
    sources = default_sources(ws, cfg, run.curated)
    if cfg.knowledge.enabled:
        with clock.stage("knowledge"):
            result["knowledge"] = inject_knowledge_task(cfg, str(run.path), champion_dir)
        form_tokens, rehearsal_tokens = knowledge_tokens(run.path, tokenizer_dir)
        steps, share, rehearsal, note = night_plan(cfg.training.num_iterations, cfg.training.total_batch_size, cfg.knowledge,
                                                   form_tokens, corpus_share(sources), rehearsal_tokens)
        sources = knowledge_sources(sources, run.path, cfg.knowledge, share, rehearsal)
        result["knowledge"].update(share=round(share, 4), rehearsal_share=round(rehearsal, 4))
        if note:
            book.log.info(note)
            cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={"num_iterations": steps})})
            result["knowledge"]["night_steps"] = steps
    data = prepare(cfg, run, tokenizer_dir, sources, token_budget(cfg), clock)
    version = claim_version(ws, book.lineage, run.run_id)
    with clock.stage("train"):
        trained = trained_version(ws.checkpoint(version), run.run_id) or run_training(TrainRequest(
            cfg=cfg, data_dir=str(run.path), out_dir=str(ws.checkpoint(version)), train_dir=str(run.train),
            parent=champion_dir, resume=resume,
            meta={"version": version, "run_id": run.run_id, "document_separator": data["separator_token"],
                  "replay_corpus": cfg.workspace.corpus}))
    with clock.stage("record"):
        record_candidate(cfg, run.run_id, version, trained["version_dir"], champion, inputs, recorded_manifest(run, data))
        fault_point("record")
    with clock.stage("evaluate"):
        result["eval"] = evaluate_versions(cfg, str(run.path), run.run_id, version, champion)
        fault_point("evaluate")

    if note := eval_budget_note(clock.seconds, cfg.eval.max_share):
        book.log.warning(note)
        result["eval_budget"] = note
    with clock.stage("gate"):
        result["gate"] = gate_and_promote(cfg, version)
        fault_point("promote")
    with clock.stage("store"):
        if result["gate"]["passed"]:
            commit_dedup_index(cfg, str(run.path))
            result["memory"] = remember_night(cfg, version)
        result["storage"] = store_candidate(cfg, version)
    if result["gate"]["passed"]:
        with clock.stage("rollout"):  # a failed push is retried, recorded, reported: the promotion stands
            result["rollout"] = roll_out_after_promotion(cfg, version, run.run_id)
    result.update(version=version, status=result["gate"]["status"], final_metrics=trained["final_metrics"])
    return result


def prepare(cfg: ConsolidationConfig, run: RunDir, tokenizer_dir: str, sources: list, budget: int, clock: StageClock) -> dict[str, Any]:
    """token shards (one mapped task per input file, into the token cache) + manifest into `run`,
    cached on content."""
    ws = Workspace(cfg.workspace.root)
    with clock.stage("prepare"):
        jobs = plan_tokenization(cfg, str(run.path), sources, tokenizer_dir)
        map_over(tokenize_file, cfg, job=jobs, tokenizer_dir=unmapped(tokenizer_dir), cache_dir=unmapped(str(ws.token_cache)))
        fault_point("tokenize")  # token cache written, no manifest yet
        return cached_stage(prepare_data, str(run.path), list(PreparedData.OUTPUTS), dict(cfg=cfg, run_dir=str(run.path), sources=sources,
                            tokenizer_dir=tokenizer_dir, budget=budget), folder="data_dir")


def recorded_manifest(run: RunDir, data: dict[str, Any]) -> dict[str, Any]:
    """The manifest as lineage records it with the version."""
    return {"hash": data["manifest_hash"], "path": str(run.prepared.manifest),
            "stats": {"rows": data["manifest_rows"], "tokens_per_source": data["tokens_per_source"]}}


def _pinned(book: RunBook, run_id: str, pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A resumed night trains on exactly what it curated before; new files wait for the next."""
    pinned = {b.content_hash for b in book.lineage.run_inputs(run_id)}
    return [p for p in pending if p["content_hash"] in pinned] if pinned else pending


def _used_hashes(lin, pending: list[dict[str, Any]]) -> list[str]:
    """The pending files curation did not quarantine: the inputs this night trains on."""
    status = {b.content_hash: b.status for b in lin.buffer_files()}
    return sorted(i["content_hash"] for i in pending if status.get(i["content_hash"], "pending") == "pending")


def finish_decided_nights(cfg: ConsolidationConfig, book: RunBook) -> list[str]:
    """Dead nights the gate already decided: do the steps after the gate they did not get to
    (dedup index commit for an accepted one, delta storage, optimizer-state pruning; each
    idempotent) and close them as completed."""

    def after_gate(night: dict[str, Any]) -> None:
        if night["version_status"] == "accepted":
            commit_dedup_index(cfg, str(book.ws.run(night["run_id"]).path))
            remember_night(cfg, night["version"])
        store_candidate(cfg, night["version"])
        if night["version_status"] == "accepted" and not book.lineage.rollouts(night["version"]):
            roll_out_after_promotion(cfg, night["version"], night["run_id"])  # skipped if no longer the champion

    return finish_decided(book, after_gate)


def _retry(cfg: ConsolidationConfig, book: RunBook, first: RunDir, champion_dir: str, inputs: list[str]) -> dict[str, Any]:
    """The gate rejected the night for forgetting and `gate.retry_on_forgetting` is on: the same
    curated documents again, under run `<run>-retry1`, with `lib.evaluation.gate.safer_settings`. Both
    attempts stay in lineage (starting the retry closes the first as completed: rejected); the
    buffers are consumed only by an accepted one. A retry killed half-way is resumed as a retry."""
    run = book.ws.run(first.run_id + RETRY_SUFFIX).ensure()
    resume = book.lineage.get_run(run.run_id) is not None
    _link_curated(first, run)
    safer = safer_settings(cfg)
    book.log.warning("night %s was rejected for forgetting; retrying as %s with lr_scale %.3g, new_data_ratio %.3g, memory_ratio %.3g",
                     first.run_id, run.run_id, safer.training.lr_scale, safer.sampling.new_data_ratio, safer.sampling.memory_ratio)
    clock = StageClock()
    book.start(run.run_id, "nightly", clock, parent=book.current.parent, config=safer.to_dict())
    book.lineage.record_inputs(run.run_id, inputs)
    out = {"run_id": run.run_id, **_attempt(safer, book, run, champion_dir, inputs, resume, clock)}
    book.current.version = out["version"]
    return out


def _link_curated(src: RunDir, dst: RunDir) -> None:
    """The retry trains on exactly the documents the first attempt curated: hard links (copies
    across file systems) of its curated files."""
    dst.curated.mkdir(parents=True, exist_ok=True)
    for part in sorted(src.curated.glob("*.parquet")):
        target = dst.curated / part.name
        if not target.exists():
            link_or_copy(part, target)
