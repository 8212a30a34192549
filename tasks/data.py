"""Data stages of a night as Prefect tasks: find and hash buffer files (mapped over files),
curate (mapped over shards, one dedup reduce), prepare the training data. Each is a few lines
around lib.

- `inspect_buffer_file` runs once per buffer file (`.map`), on threads or on Ray, and yields the
  content hash the cache keys and the lineage registry both use.
- `ingest_shard` and `filter_shard` run once per shard (`.map`), `dedup_shards` once over all;
  `tokenize_file` once per input file (`.map`) into the token cache, before `prepare_data`
  draws the manifest from cached shards.
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
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect import task
from prefect.tasks import exponential_backoff

from lib.buffer import content_hash
from lib.config import ConsolidationConfig
from lib.workspace import RunDir, Workspace
from tasks.cache_keys import content_cache, files_digest
from tasks.reporting import own_time, publish_table, stage_logger

IO_RETRIES = dict(retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2), retry_jitter_factor=0.5)


# -- ingest: which buffer files are tonight's input ------------------------------------------------
@task(name="find-buffer-files", **IO_RETRIES)
def find_buffer_files(workspace_root: str) -> list[str]:
    """The buffer's parquet files, after replaying the logs of stopped writers into new ones."""
    from lib.ingest import buffer_files, flush_buffer

    ws = Workspace(workspace_root)
    with own_time():
        flush_buffer(ws)
        files = [str(p) for p in buffer_files(ws)]
    stage_logger().info("%d buffer file(s) in %s", len(files), ws.buffers)
    return files


@task(name="inspect-buffer-file", **IO_RETRIES)
def inspect_buffer_file(path: str) -> dict[str, Any]:
    """Content hash, rows and bytes of one buffer file; unreadable files are reported, not raised
    (curation quarantines them with the reason)."""
    with own_time():
        info: dict[str, Any] = {"path": path, "bytes": os.path.getsize(path), "content_hash": content_hash(path)}
        try:
            info["rows"] = pq.ParquetFile(path).metadata.num_rows
            info["error"] = None
        except Exception as exc:  # a torn or foreign file: counted here, quarantined by curation
            info["rows"], info["error"] = None, f"{type(exc).__name__}: {exc}"
    return info


@task(name="select-pending-buffers", **IO_RETRIES)
def select_pending(workspace_root: str, inspected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop files the registry already knows as consumed or quarantined (never consume twice)."""
    from lib.lineage import Lineage

    with own_time():
        done = {b.content_hash: b.status for b in Lineage(Workspace(workspace_root).lineage_db).buffer_files()
                if b.status in ("consumed", "quarantined")}
    pending = [i for i in inspected if i["content_hash"] not in done]
    counts = {
        "files": len(inspected),
        "pending": len(pending),
        "already_consumed": sum(1 for i in inspected if done.get(i["content_hash"]) == "consumed"),
        "already_quarantined": sum(1 for i in inspected if done.get(i["content_hash"]) == "quarantined"),
        "unreadable": sum(1 for i in pending if i["error"]),
        "rows": sum(i["rows"] or 0 for i in pending),
        "bytes": sum(i["bytes"] for i in pending),
    }
    publish_table("buffer-files", counts, "Memory buffer files found tonight, by registry status")
    stage_logger().info("buffer files: %s", counts)
    return pending


# -- curation: per-shard ingest and signatures, one dedup reduce, per-shard filters ----------------
CURATION_MODULES = ["lib.curation", "lib.ingest", "lib.dedup", "lib.minhash", "lib.buffer", "lib.textfilters",
                    "lib.fasttext_filters"]


def _curation_settings(p: dict[str, Any]) -> Any:
    cfg: ConsolidationConfig = p["cfg"]
    return {"curation": cfg.curation.model_dump(mode="json", exclude={"workers", "shards"}),
            "max_text_bytes": cfg.buffer.max_text_bytes}


def _shard_files(p: dict[str, Any]) -> list[str]:
    return list(p["files"])[p["rank"] :: p["world_size"]]


def _shard_settings(p: dict[str, Any]) -> Any:
    mine = set(files_digest(_shard_files(p)))
    return {**_curation_settings(p), "rank": p["rank"], "world_size": p["world_size"],
            # pending and unknown files read the same (registering is recorded, applied idempotently)
            "skipped": sorted(h for h, s in p["statuses"].items() if h in mine and s in ("consumed", "quarantined"))}


@task(
    name="ingest-shard",
    cache_policy=content_cache("ingest-shard", _shard_files, _shard_settings, modules=CURATION_MODULES),
    persist_result=True,
    **IO_RETRIES,
)
def ingest_shard(cfg: ConsolidationConfig, run_dir: str, rank: int, world_size: int, files: list[str],
                 statuses: dict[str, str], workers: int | None = 1) -> dict[str, Any]:
    """Curation step 1 for one shard: its buffer files → documents, exact hashes, signatures."""
    from lib.curation import ingest_shard as run_step

    with own_time():
        info = run_step(Workspace(cfg.workspace.root), cfg, RunDir(Path(run_dir)), rank, world_size,
                        [Path(f) for f in files], statuses, workers)
    return {**info, "run_dir": run_dir}


def _dedup_inputs(p: dict[str, Any]) -> list[str]:
    from lib.curation import shard_outputs
    from lib.dedup import DedupIndex

    run = Path(p["run_dir"])
    index = DedupIndex(Workspace(p["cfg"].workspace.root).index)
    history = [index.exact_path] if index.exact_path.exists() else []
    history += sorted(index.minhash_dir.glob("*.npz")) if index.minhash_dir.is_dir() else []
    return [str(run / shard_outputs(r)[k]) for r in range(p["world_size"]) for k in ("docs", "dedup")] + [str(h) for h in history]


@task(
    name="dedup-shards",
    cache_policy=content_cache("dedup-shards", _dedup_inputs, lambda p: {**_curation_settings(p), "world_size": p["world_size"]},
                               modules=CURATION_MODULES),
    persist_result=True,
    **IO_RETRIES,
)
def dedup_shards(cfg: ConsolidationConfig, run_dir: str, world_size: int) -> dict[str, Any]:
    """Curation step 2 over every shard: exact and near dedup, tonight and against earlier nights
    (the key includes the dedup index, so a night promoted since makes it run again)."""
    from lib.curation import dedup_shards as run_step

    with own_time():
        stats = run_step(Workspace(cfg.workspace.root), cfg, RunDir(Path(run_dir)), world_size, lineage=None)
    return {"stats": stats, "run_dir": run_dir}


def _filter_inputs(p: dict[str, Any]) -> list[str]:
    from lib.curation import shard_outputs

    out = shard_outputs(p["rank"])
    model = p["cfg"].curation.quality_model
    extra = [str(Workspace(p["cfg"].workspace.root).resolve(model))] if model else []
    return [str(Path(p["run_dir"]) / out["docs"]), str(Path(p["run_dir"]) / out["keep"])] + extra


@task(
    name="filter-shard",
    cache_policy=content_cache("filter-shard", _filter_inputs, lambda p: {**_curation_settings(p), "rank": p["rank"]},
                               modules=CURATION_MODULES),
    persist_result=True,
    **IO_RETRIES,
)
def filter_shard(cfg: ConsolidationConfig, run_dir: str, rank: int) -> dict[str, Any]:
    """Curation step 3 for one shard: length filter and concatenation, language and quality."""
    from lib.curation import filter_shard as run_step

    with own_time():
        stats = run_step(Workspace(cfg.workspace.root), cfg, RunDir(Path(run_dir)), rank)
    return {"stats": stats, "rank": rank, "run_dir": run_dir}


@task(name="record-ingest", **IO_RETRIES)
def record_ingest(workspace_root: str, shards: list[dict[str, Any]]) -> int:
    """Write the shards' registry changes (pending and quarantined files) to lineage, and every
    quarantine lineage does not know yet (made by a shard attempt that then failed and was
    retried, or by a night that was killed); idempotent."""
    from lib.ingest import apply_registry_events, record_quarantine
    from lib.lineage import Lineage

    ws = Workspace(workspace_root)
    lineage = Lineage(ws.lineage_db)
    events = [e for s in shards for e in s["registry_events"]]
    with own_time():
        apply_registry_events(lineage, events)
        late = record_quarantine(ws, lineage)
    if late:
        stage_logger().warning("recorded %d quarantined file(s) an earlier attempt had not recorded", late)
    quarantined = [e for e in events if e["op"] == "quarantine"]
    for e in quarantined:
        stage_logger().warning("quarantined %s: %s", Path(e["path"]).name, e["reason"])
    return len(events) + late


@task(name="curation-report", **IO_RETRIES)
def curation_report(run_dir: str, shards: list[dict[str, Any]], dedup: dict[str, Any], filtered: list[dict[str, Any]],
                    max_drop_share: float = 0.5) -> dict[str, Any]:
    """The night's curation counts (curated/stats.json) and their table artifact, dropped
    documents by reason included; a warning naming every filter that dropped more than
    `max_drop_share` of the documents it saw."""
    from lib.curation import merge_stats

    run = RunDir(Path(run_dir))
    with own_time():
        stats = merge_stats(run, shards, dedup, filtered, max_drop_share)
    stats["curated_dir"] = str(run.curated)
    warnings = {f"warning {i + 1}": w for i, w in enumerate(stats["warnings"])}
    publish_table("curation-counts", _flat_counts(stats) | warnings, "Documents in, dropped by each filter and by reason, kept")
    for w in stats["warnings"]:
        stage_logger().warning("curation: %s", w)
    stage_logger().info("curation: %s", {k: v for k, v in stats.items() if isinstance(v, (int, float))})
    return stats


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
    """After a promotion: what the night kept joins the dedup history (lib.curation.commit_index),
    so later nights drop its near-duplicates; a rejected night never gets here."""
    from lib.curation import commit_index

    with own_time():
        added = commit_index(Workspace(cfg.workspace.root), RunDir(Path(run_dir)))
    stage_logger().info("dedup index %s", "extended with this night" if added else "already had this night")
    return added


# -- manifest and token shards ---------------------------------------------------------------------
@task(name="resolve-tokenizer", **IO_RETRIES)
def resolve_tokenizer(cfg: ConsolidationConfig, champion_dir: str) -> str:
    """The tokenizer a night tokenizes with (lib.tokenizer.resolve_tokenizer): `tokenizer.path`,
    else the champion's own, so a night never trains a model on token ids it was not
    pre-trained with."""
    from lib.tokenizer import resolve_tokenizer as resolve

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
    from lib.sampling import memory_weights

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
    from lib.chat_format import template_markers
    from lib.sampling import tokenize_tasks
    from lib.tokenizer import load_tokenizer

    with own_time():
        return tokenize_tasks(sources, load_tokenizer(tokenizer_dir), run_dir, cfg.sampling, cfg.training.seq_len,
                              template_markers(tokenizer_dir))


@task(name="tokenize-file", **IO_RETRIES)
def tokenize_file(job: dict[str, Any], tokenizer_dir: str, cache_dir: str) -> dict[str, Any]:
    """One input file into the workspace's token cache, unless it is there already (the cache is
    keyed on the file's content, the tokenizer and the hold-out and FIM rules)."""
    from lib.sampling import tokenize_to_cache

    with own_time():
        return tokenize_to_cache(job, tokenizer_dir, cache_dir)


@task(
    name="prepare-training-data",
    cache_policy=content_cache("prepare", _data_inputs, _data_settings,
                               modules=["lib.sampling", "lib.shards", "lib.fim", "lib.tokenizer"]),
    persist_result=True,
    **IO_RETRIES,
)
def prepare_data(cfg: ConsolidationConfig, run_dir: str, sources: list, tokenizer_dir: str, budget: int) -> dict[str, Any]:
    """Token shards of every source, held-out new documents, and the sampling manifest
    (lib.sampling.prepare_training_data) into the run folder. Returns the small summary."""
    from lib.sampling import prepare_run_data

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
    if dst.exists():
        dst.unlink()
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another file system: copy
        shutil.copy2(src, dst)
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
