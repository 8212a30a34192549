"""Data stages of a night as Prefect tasks: find and hash buffer files (mapped over files),
curate (lib.curation.pipeline's steps, mapped over shards), prepare the training data. Each is a few lines
around lib.

- `inspect_buffer_file` runs once per buffer file (`.map`), on threads or on Ray, and yields the
  content hash the registry, the cache keys and ingest all use (the one hash of a file tonight).
- `curation_step` runs one rank of one lib.curation.pipeline step; `step_task` names it after the step
  (`ingest-shard`, `record-ingest`, `dedup-shards`, `filter-shard`, `curation-report`) and keys a
  cached step on `Step.reads`; flows/curation.py maps it over the shards. `tokenize_file` runs
  once per input file (`.map`) into the token cache, before `prepare_data` draws the manifest.
- The curation steps and `prepare_data` are cached on the content of what they read plus their
  config section and lib code (tasks/cache_keys.py); results persist under `<workspace>/cache/`.
- A cache hit returns the outputs of the run that computed them; `adopt_outputs` hard-links
  those files into tonight's run folder, so every run folder is complete on its own and the
  stages after it never care whether a stage ran or was cached.

Trade-off: hard links cost nothing and share bytes, but a cached run folder is only as durable
as the first one; deleting old runs is safe (the link keeps the data), editing files in place
is not (it would change both runs).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from lib.buffer.ingest import (
    buffer_files, flush_buffer, inspect_buffer_file as inspect, select_pending as choose,
)
from lib.config import ConsolidationConfig
from lib.curation.pipeline import commit_index
from lib.data.sampling import memory_weights, prepare_run_data
from lib.data.token_cache import tokenize_tasks, tokenize_to_cache
from lib.data.tokenizer import load_tokenizer, resolve_tokenizer as resolve
from lib.files import link_or_copy
from lib.registry.lineage import Lineage
from lib.serving.chat_format import template_markers
from lib.workspace import RunDir, Workspace
from tasks.cache_keys import content_cache, on_workspace
from tasks.reporting import own_time, publish_table, stage_logger

IO_RETRIES = dict(retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2), retry_jitter_factor=0.5)


# -- ingest: which buffer files are tonight's input ------------------------------------------------
@task(name="find-buffer-files", **IO_RETRIES)
def find_buffer_files(workspace_root: str) -> list[str]:
    """The buffer's parquet files, after replaying the logs of stopped writers into new ones."""
    ws = Workspace(workspace_root)
    with own_time():
        flush_buffer(ws)
        files = [str(p) for p in buffer_files(ws)]
    stage_logger().info("%d buffer file(s) in %s", len(files), ws.buffers)
    return files


@task(name="inspect-buffer-file", **IO_RETRIES)
def inspect_buffer_file(path: str) -> dict[str, Any]:
    """Content hash, rows and bytes of one buffer file (lib.buffer.ingest.inspect_buffer_file): the one
    hash of the file tonight; unreadable files are reported, not raised (ingest quarantines them)."""
    with own_time():
        return inspect(path)


@task(name="select-pending-buffers", **IO_RETRIES)
def select_pending(workspace_root: str, inspected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The files the registry does not know as consumed or quarantined (lib.buffer.ingest.select_pending:
    never consume twice), each with its registry status."""
    with own_time():
        statuses = {b.content_hash: b.status for b in Lineage(Workspace(workspace_root).lineage_db).buffer_files()}
        pending, counts = choose(inspected, statuses)
    publish_table("buffer-files", counts, "Buffer files found tonight, by registry status")
    stage_logger().info("buffer files: %s", counts)
    return pending


# -- curation: the steps of lib.curation.pipeline as tasks (a task per rank, cached on content) ------------
CURATION_PACKAGES = ["lib.curation", "lib.buffer"]  # what computes the curated files


def _step_inputs(p: dict[str, Any]) -> list[str]:
    step, cfg = p["step"], p["cfg"]
    return [str(f) for f in step.reads(p["input"], Path(p["run_dir"]), p["rank"], p["world_size"], cfg.curation)]


def _known_hashes(p: dict[str, Any]) -> dict[str, str]:
    """Content hashes the pending files came with (hashed once tonight, not again for the key)."""
    given = p["input"]
    return {f["path"]: f["content_hash"] for f in given["files"]} if isinstance(given, dict) else {}


def _step_settings(p: dict[str, Any]) -> Any:
    cfg: ConsolidationConfig = p["cfg"]
    given = p["input"]
    return {"curation": cfg.curation.model_dump(mode="json", exclude={"workers", "shards"}),
            "max_text_bytes": cfg.buffer.max_text_bytes, "rank": p["rank"], "world_size": p["world_size"],
            "already": given.get("already") if isinstance(given, dict) and p["rank"] == 0 else None}


@task(**IO_RETRIES)
def curation_step(step, cfg: ConsolidationConfig, input: Any, run_dir: str, rank: int, world_size: int,
                  workers: int | None = None) -> dict[str, Any]:
    """One rank of one curation step (lib.curation.pipeline): its Stats, and the run folder its files are in
    (`workers`: this rank's share of `curation.workers`, when ranks run side by side)."""
    section = cfg.curation.model_copy(update={"workers": workers}) if workers else cfg.curation
    with own_time():
        stats = step.run(input, Path(run_dir), rank, world_size, section)
    for w in stats.counts.get("warnings", []):
        stage_logger().warning("%s: %s", step.name, w)
    if step.name in STEP_REPORTS:
        STEP_REPORTS[step.name](stats.to_dict(), run_dir)
    return {"stats": stats.to_dict(), "rank": rank, "run_dir": run_dir}


def step_task(step, ws: Workspace):
    """`curation_step` named after `step`; a cached step is keyed on the content it reads, its
    settings and the curation code, its result persisted under `<workspace>/cache/`."""
    named = curation_step.with_options(name=step.name)
    if not step.cached:
        return named.with_options(cache_policy=NO_CACHE)
    return on_workspace(named.with_options(
        cache_policy=content_cache(step.name, _step_inputs, _step_settings, code=CURATION_PACKAGES, known=_known_hashes)), ws)


def _publish_curation_counts(stats: dict[str, Any], run_dir: str) -> None:
    """The night's curation counts (curated/stats.json) as the `curation-counts` table: documents
    in, dropped by each filter and by reason, kept, and the warnings."""
    warnings = {f"warning {i + 1}": w for i, w in enumerate(stats["warnings"])}
    publish_table("curation-counts", _flat_counts(stats) | warnings, "Documents in, dropped by each filter and by reason, kept")
    stage_logger().info("curation: %s", {k: v for k, v in stats.items() if isinstance(v, (int, float))})


# What a step shows in the UI beside its warnings (by step name).
STEP_REPORTS = {"curation-report": _publish_curation_counts}


def _flat_counts(stats: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in stats.items():
        if isinstance(v, dict):
            out.update(_flat_counts(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
    return out


@task(name="commit-dedup-index", **IO_RETRIES)
def commit_dedup_index(cfg: ConsolidationConfig, run_dir: str) -> bool:
    """After a promotion: what the night kept joins the dedup history (lib.curation.pipeline.commit_index),
    so later nights drop its near-duplicates; a rejected night never gets here."""
    with own_time():
        added = commit_index(Workspace(cfg.workspace.root), RunDir(Path(run_dir)))
    stage_logger().info("dedup index %s", "extended with this night" if added else "already had this night")
    return added


# -- manifest and token shards ---------------------------------------------------------------------
@task(name="resolve-tokenizer", **IO_RETRIES)
def resolve_tokenizer(cfg: ConsolidationConfig, champion_dir: str) -> str:
    """The tokenizer a night tokenizes with (lib.data.tokenizer.resolve_tokenizer): `tokenizer.path`,
    else the champion's own, so a night never trains a model on token ids it was not
    pre-trained with."""
    with own_time():
        return str(resolve(cfg, Workspace(cfg.workspace.root), model_dir=champion_dir))


def _data_inputs(p: dict[str, Any]) -> list[str]:
    files: list[str] = []
    for source in p["sources"]:
        path = Path(source.path)
        files += [str(f) for f in (sorted(path.rglob("*.parquet")) if path.is_dir() else [path])]
    tok = Path(p["tokenizer_dir"])
    # the chat template decides which markers new data reads as control tokens
    return files + [str(tok / n) for n in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja") if (tok / n).is_file()]


def _data_settings(p: dict[str, Any]) -> Any:
    cfg: ConsolidationConfig = p["cfg"]
    weights = memory_weights(Workspace(cfg.workspace.root), cfg, p["sources"])
    return {
        # the memory's weights move with every accepted night (exposures): part of the key
        "memory_weights": hashlib.sha256(json.dumps(weights, sort_keys=True).encode()).hexdigest() if weights else None,
        "sources": [{k: v for k, v in s.model_dump(mode="json").items() if k != "path"} for s in p["sources"]],
        "sampling": cfg.sampling.model_dump(mode="json"),
        "seq_len": cfg.training.seq_len,
        "token_budget": p["budget"],
        "separator": cfg.tokenizer.document_separator,
    }


@task(name="plan-tokenization", **IO_RETRIES)
def plan_tokenization(cfg: ConsolidationConfig, run_dir: str, sources: list, tokenizer_dir: str) -> list[dict[str, Any]]:
    """One tokenization job per input file of `sources` (plain dicts, one per mapped task)."""
    with own_time():
        return tokenize_tasks(sources, load_tokenizer(tokenizer_dir), run_dir, cfg.sampling, cfg.training.seq_len,
                              template_markers(tokenizer_dir))


@task(name="tokenize-file", **IO_RETRIES)
def tokenize_file(job: dict[str, Any], tokenizer_dir: str, cache_dir: str) -> dict[str, Any]:
    """One input file into the workspace's token cache, unless it is there already (the cache is
    keyed on the file's content, the tokenizer and the hold-out and FIM rules)."""
    with own_time():
        return tokenize_to_cache(job, tokenizer_dir, cache_dir)


@task(
    name="prepare-training-data",
    cache_policy=content_cache("prepare", _data_inputs, _data_settings,
                               code=["lib.data", "lib.serving.chat_format"]),  # chat_format: the template markers sampling hands to tokenization
    persist_result=True,
    **IO_RETRIES,
)
def prepare_data(cfg: ConsolidationConfig, run_dir: str, sources: list, tokenizer_dir: str, budget: int) -> dict[str, Any]:
    """Token shards of every source, held-out new documents, and the sampling manifest
    (lib.data.sampling.prepare_training_data) into the run folder. Returns the small summary."""
    # The per-file token cache makes a night tokenize only its new files (the corpus once, ever).
    with own_time():
        data = prepare_run_data(Workspace(cfg.workspace.root), cfg, sources, tokenizer_dir, run_dir, budget)
    rows = [{"source": name, "kind": s["kind"], "docs": s["docs"], "heldout_docs": s["heldout_docs"],
             "tokens_available": s["tokens_available"], "tokens_drawn": s["tokens_drawn"], "share": s["share"],
             "epochs": s["epochs"], "mean_exposures": s["exposures"]["mean"]}
            for name, s in data["sources"].items()]
    publish_table("manifest-stats", rows, f"Sampling manifest {data['manifest_hash'][:12]}: tokens per source")
    for n in data.get("notes", []):
        stage_logger().info(n)
    for w in data.get("warnings", []):
        stage_logger().warning(w)
    return {"data_dir": str(run_dir), "manifest_hash": data["manifest_hash"], "manifest_rows": data["manifest_rows"],
            "tokenizer_hash": data["tokenizer_hash"], "tokens_drawn": data["tokens_drawn"],
            "separator_token": data["separator_token"],
            "tokens_per_source": data["tokens_per_source"], "warnings": data.get("warnings", [])}


# -- cached outputs into tonight's run folder ------------------------------------------------------
def _link_tree(src: Path, dst: Path) -> int:
    if src.is_dir():
        n = 0
        dst.mkdir(parents=True, exist_ok=True)
        for child in sorted(src.iterdir()):
            n += _link_tree(child, dst / child.name)
        return n
    link_or_copy(src, dst)
    return 1


@task(name="adopt-cached-outputs", **IO_RETRIES)
def adopt_outputs(src_dir: str, dst_dir: str, entries: list[str]) -> int:
    """Hard-link `entries` (files or folders) of a cached stage's run folder into tonight's."""
    src, dst = Path(src_dir), Path(dst_dir)
    if src.resolve() == dst.resolve():
        return 0
    missing = [e for e in entries if not (src / e).exists()]
    if missing:
        raise FileNotFoundError(f"cached outputs {missing} are gone from {src}; re-run with the cache refreshed")
    with own_time():
        n = sum(_link_tree(src / e, dst / e) for e in entries)
    stage_logger().info("reused %d cached file(s) from %s", n, src)
    return n
