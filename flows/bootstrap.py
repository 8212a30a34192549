"""The bootstrap flow: from an empty workspace to a champion v0.

With `adopt` (your own model): the Hugging Face folder you serve becomes v0 with your replay
corpus (lib/registry/adopt.py, the same function as `consolidate init`). Without it, the embedded demo:
stdlib corpus + demo buffer → BPE tokenizer on the corpus (cached) → manifest + token
shards of the corpus (cached) → pre-train v0 from scratch with the same torchrun trainer the
nights use → record v0, make it champion and latest.

- Parameters: the `ConsolidationConfig` (`model.*` sizes the demo's v0, `model.pretrain_iterations`
  and `training.total_batch_size` its token budget) and `adopt` (an `AdoptRequest`, or none).
- Idempotent: with a champion already registered it returns at once and trains nothing.

Trade-off: v0 goes through the same prepare/train path as a night (manifest, packing, snapshots,
meta.json), so pre-training costs a manifest draw (~1 s) it would not strictly need, and in
exchange v0 has a recorded manifest and lineage like every later version.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from flows.consolidate import prepare, recorded_manifest
from flows.runtime import StageClock, recorded_run
from flows.training import TrainRequest, run_training
from lib.config import ConsolidationConfig, run_form
from lib.training.preflight import ensure_ready
from lib.registry.runs import RunBook
from lib.data.sampling import corpus_sources, token_budget
from tasks.bootstrap import adopt_model, build_embedded_default, register_v0, train_tokenizer
from tasks.cache_keys import on_workspace


class AdoptRequest(BaseModel):
    """Your own model as v0: a Hugging Face folder and your replay corpus, inside the workspace
    (copy them to e.g. <workspace>/incoming/ first; the form never reads other host paths)."""

    model: str = Field(description="Model folder (config.json, model.safetensors or shards with an index, tokenizer files), relative to the workspace.")
    replay: list[str] = Field(min_length=1, description="Replay corpus: parquet, JSONL or text files or folders, relative to the workspace; or generate:N_TOKENS to sample it from the model itself.")
    replay_val: list[str] = Field(default_factory=list, description="Validation files (old_val); empty: 5% of the replay corpus by id hash.")
    original_lr: float | None = Field(None, gt=0, lt=1, description="Peak learning rate the model was last trained with (nights train at it × lr_scale); empty only if the folder's meta.json records it.")
    text_column: str = Field("text", description="Column (parquet) or key (JSONL) holding the text.")
    corpus: str = Field("replay", description="Name of the replay corpus in the workspace.")


# The run form: the sections a pre-training or an adoption reads (`model` sizes the demo's v0; no
# eval, gate or serve).
BootstrapConfig = run_form("workspace", "buffer", "curation", "sampling", "tokenizer", "model", "training",
                           "checkpoints", "orchestration")


@flow(name="bootstrap", log_prints=True)
def bootstrap(cfg: BootstrapConfig, adopt: AdoptRequest | None = None) -> dict[str, Any]:
    """Adopt your model as v0, or build the embedded default and pre-train the demo's v0;
    nothing happens when a champion exists.

    Args:
        cfg: The consolidation config. Pick the preset the pool runs (tiny on CPU, default on GPU).
        adopt: Your Hugging Face model and replay corpus, copied into the workspace; empty: the demo's v0.
    """
    with recorded_run(cfg, "bootstrap") as book:  # never beside a night (or a second bootstrap) on this workspace
        return _bootstrap(cfg, book, adopt)


def _bootstrap(cfg: ConsolidationConfig, book: RunBook, adopt: "AdoptRequest | None") -> dict[str, Any]:
    """The stages in order; the run is closed by `recorded_run` (completed or failed)."""
    ws, lin, clock = book.ws, book.lineage, StageClock()
    if adopt is not None:
        champion = lin.alias("champion")
        if champion is not None:
            return {"status": f"champion {champion} exists; nothing to adopt", "version": champion, "timings": clock.seconds}
        with clock.stage("adopt"):
            out = adopt_model(cfg, adopt.model, adopt.replay, adopt.replay_val, adopt.original_lr, adopt.text_column, adopt.corpus)
        return {"status": "adopted", **out, "timings": clock.seconds}
    ensure_ready(cfg)  # the model cfg.model builds: fail in the first second, with the reason
    with clock.stage("embedded_default"):
        built = build_embedded_default(cfg)
    champion = lin.alias("champion")
    if champion is not None:
        return {"status": f"champion {champion} exists; nothing to pre-train", "version": champion, **built, "timings": clock.seconds}

    run = ws.run(book.new_run_id("bootstrap")).ensure()
    book.start(run.run_id, "bootstrap", clock, config=cfg.to_dict())
    with clock.stage("tokenizer"):
        tokenizer_dir = on_workspace(train_tokenizer, ws)(cfg)
    sources = corpus_sources(ws, cfg)
    data = prepare(cfg, run, tokenizer_dir, sources, token_budget(cfg, pretrain=True), clock)
    version = lin.next_version(run.run_id)
    with clock.stage("train"):
        trained = run_training(TrainRequest(
            cfg=cfg, data_dir=str(run.path), out_dir=str(ws.checkpoint(version)), train_dir=str(run.train),
            init=True, tokenizer_dir=tokenizer_dir,
            meta={"version": version, "run_id": run.run_id, "document_separator": data["separator_token"],
                  "replay_corpus": sources[0].name}))
    with clock.stage("record"):
        register_v0(cfg, run.run_id, version, trained["version_dir"], recorded_manifest(run, data))
    book.current.version = version
    return {"status": "pre-trained", "version": version, "run_id": run.run_id, "final_metrics": trained["final_metrics"],
            **built, "timings": clock.seconds}
