"""Bootstrap stages: the embedded default (corpus + demo buffer), the tokenizer, v0 registered.

- `build_embedded_default`: lib.data.corpus.ensure_embedded_default (builds only what is missing).
- `train_tokenizer`: lib.data.tokenizer.train_on_corpus on the corpus's train split into
  `<workspace>/tokenizer/`; cached on the corpus content and the vocabulary size.
- `register_v0`: the pre-trained model recorded as v0 and promoted to champion and latest with
  actor "bootstrap" (lib.registry.promotion.promote), so the first night has a parent.
- `adopt_model`: lib.registry.adopt.adopt, the user's own model as v0 with their replay corpus (what
  `consolidate init` runs); paths from the form must lie inside the workspace.

Trade-off: the tokenizer trains on every train shard (12 MB of stdlib text, ~20 s on 2 cores);
a sample would be faster, but the cache makes it a one-time cost per corpus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from lib.checkpoints.checkpoint import read_meta
from lib.config import ConsolidationConfig
from lib.data.corpus import DEFAULT_CORPUS, ensure_embedded_default
from lib.data.selfreplay import parse_generate
from lib.data.tokenizer import load_tokenizer, train_on_corpus
from lib.evaluation.evaluate import measure_root
from lib.registry.adopt import adopt
from lib.registry.lineage import Lineage, version_digest
from lib.registry.promotion import promote
from lib.workspace import Workspace
from tasks.cache_keys import content_cache
from tasks.data import IO_RETRIES
from tasks.reporting import own_time, publish_table, stage_logger
from lib.training.throughput import lineage_metrics


@task(name="build-embedded-default", cache_policy=NO_CACHE, **IO_RETRIES)
def build_embedded_default(cfg: ConsolidationConfig) -> dict[str, Any]:
    with own_time():
        info = ensure_embedded_default(Workspace(cfg.workspace.root), cfg)
    corpus = info["corpus"] or {}
    counts = {"corpus": cfg.workspace.corpus or DEFAULT_CORPUS, "corpus_built": info["corpus_built"],
              "demo_buffer_built": info["demo_buffer_built"]}
    for k in ("train_docs", "val_docs", "train_bytes", "val_bytes", "documents", "bytes"):
        if k in corpus:
            counts[f"corpus_{k}"] = corpus[k]
    publish_table("embedded-default", counts, "Corpus and buffer of the embedded default")
    stage_logger().info("embedded default: %s", counts)
    return {"corpus_built": info["corpus_built"], "demo_buffer_built": info["demo_buffer_built"]}


def _corpus_files(p: dict[str, Any]) -> list[str]:
    cfg: ConsolidationConfig = p["cfg"]
    return [str(f) for f in sorted(Workspace(cfg.workspace.root).corpus_train(cfg.workspace.corpus or DEFAULT_CORPUS).glob("*.parquet"))]


@task(
    name="train-tokenizer",
    cache_policy=content_cache("tokenizer", _corpus_files, lambda p: {"vocab_size": p["cfg"].tokenizer.vocab_size},
                               code=["lib.data"]),
    persist_result=True,
    **IO_RETRIES,
)
def train_tokenizer(cfg: ConsolidationConfig) -> str:
    """A byte-level BPE of `tokenizer.vocab_size` on the corpus; returns its folder."""
    ws = Workspace(cfg.workspace.root)
    files = _corpus_files({"cfg": cfg})
    with own_time():
        out = train_on_corpus(ws.corpus_train(cfg.workspace.corpus or DEFAULT_CORPUS), cfg.tokenizer.vocab_size, ws.tokenizer)
        tok = load_tokenizer(out)
    publish_table("tokenizer", {"path": str(out), "vocab_size": tok.vocab_size, "hash": tok.hash, "corpus_files": len(files)},
                  "BPE tokenizer trained on the corpus")
    return str(out)


@task(name="adopt-model", cache_policy=NO_CACHE, retries=0)
def adopt_model(cfg: ConsolidationConfig, model: str, replay: list[str], replay_val: list[str], original_lr: float | None,
                text_column: str, corpus: str) -> dict[str, Any]:
    """The user's Hugging Face model becomes v0 (champion) with their replay corpus."""
    ws = Workspace(cfg.workspace.root)

    # a form must not read the host's files: paths resolve inside the workspace (generate:N is no path)
    inside = [p if parse_generate(p) is not None else str(ws.resolve(p)) for p in [model, *replay, *replay_val]]
    log = stage_logger()
    with own_time():
        out = adopt(ws, cfg, inside[0], inside[1:1 + len(replay)], replay_val=inside[1 + len(replay):],
                    original_lr_value=original_lr, text_column=text_column, corpus=corpus, say=log.info)
    meta = out["model"]
    publish_table("adopted-model", {
        "version": out["version"], "architecture": meta["architecture"], "parameters": meta["parameters"],
        "dtype": meta["storage_dtype"], "original_lr": meta["original_lr"], "digest": meta["digest"],
        "document_separator": out["tokenizer"]["document_separator"], "replay_corpus": corpus,
        "replay_train_docs": out["corpus"]["train_docs"], "replay_val_docs": out["corpus"]["val_docs"],
        "rejected_files": len(out["corpus"]["rejected"]), "old_val_bpb": (out.get("warm") or {}).get("old_val_bpb"),
    }, f"{out['version']} adopted from {meta['adopted_from']}")
    return {"version": out["version"], "path": out["path"], "run_id": out["run_id"]}


@task(name="register-v0", cache_policy=NO_CACHE, **IO_RETRIES)
def register_v0(cfg: ConsolidationConfig, run_id: str, version: str, version_dir: str, manifest: dict[str, Any]) -> str:
    """Record the pre-trained model and make it champion and latest."""
    with own_time():
        lin = Lineage(Workspace(cfg.workspace.root).lineage_db)

        meta = read_meta(version_dir)
        throughput = lineage_metrics(meta.get("final_metrics") or {})  # the pre-training's tokens/s and MFU
        lin.record_version(version, version_dir, parent=None, run_id=run_id, status="candidate",
                           digest=version_digest(version_dir), storage="full", meta=meta, manifest=manifest,
                           metrics={version: throughput} if throughput else None)
        promote(lin, version, reason="bootstrap: pre-trained from scratch on the corpus", actor="bootstrap", content_hashes=[])
        # v0's old_val, measured once: the first night reads it from the eval cache

        root = measure_root(Workspace(cfg.workspace.root), cfg, version_dir, cfg.workspace.corpus or DEFAULT_CORPUS)
        lin.record_metrics(version, {"old_val": root["old_val"]}, run_id)
    stage_logger().info("%s is champion (%s)", version, Path(version_dir))
    return version
