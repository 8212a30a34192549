"""The bootstrap flow: from an empty workspace to a champion v0.

embedded default (stdlib corpus + demo memory buffer) → BPE tokenizer on the corpus (cached) →
manifest + token shards of the corpus (cached) → pre-train v0 from scratch with the same
torchrun trainer the nights use → record v0, make it champion and latest.

- One parameter, the `ConsolidationConfig`: `model.*` sizes v0, `model.pretrain_iterations` and
  `training.total_batch_size` its token budget.
- Idempotent: with a champion already registered it returns at once and trains nothing.

Trade-off: v0 goes through the same prepare/train path as a night (manifest, packing, snapshots,
meta.json), so pre-training costs a manifest draw (~1 s) it would not strictly need, and in
exchange v0 has a recorded manifest and lineage like every later version.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.consolidate import prepare
from flows.runtime import StageClock, new_run_id
from flows.training import TrainRequest, run_training
from lib.config import SourceConfig, run_form
from lib.preflight import ensure_ready
from lib.workspace import Workspace
from tasks.bootstrap import build_embedded_default, register_v0, train_tokenizer
from tasks.cache_keys import on_workspace
from tasks.data import token_budget


# The run form: the sections a pre-training reads (`model` sizes v0; no eval, gate or serve).
BootstrapConfig = run_form("workspace", "buffer", "curation", "sampling", "tokenizer", "model", "training",
                           "checkpoints", "orchestration")


@flow(name="bootstrap", log_prints=True)
def bootstrap(cfg: BootstrapConfig) -> dict[str, Any]:
    """Build the embedded default and pre-train v0 unless a champion exists.

    Args:
        cfg: The consolidation config. Pick the preset the pool runs (tiny on CPU, default on GPU).
    """
    from lib.lineage import Lineage
    from prefect.runtime import flow_run

    ensure_ready(cfg)  # the model cfg.model builds: fail in the first second, with the reason
    ws = Workspace(cfg.workspace.root).ensure()
    lin = Lineage(ws.lineage_db)
    clock = StageClock()
    with clock.stage("embedded_default"):
        built = build_embedded_default(cfg)
    champion = lin.alias("champion")
    if champion is not None:
        return {"status": f"champion {champion} exists; nothing to pre-train", "version": champion, **built, "timings": clock.seconds}

    run = ws.run(new_run_id("bootstrap")).ensure()
    lin.start_run(run.run_id, kind="bootstrap", flow_run_id=flow_run.get_id(), config=cfg.to_dict())
    try:
        with clock.stage("tokenizer"):
            tokenizer_dir = on_workspace(train_tokenizer, ws)(cfg)
        corpus = cfg.workspace.corpus
        sources = [SourceConfig(name=corpus, path=ws.corpus_train(corpus), weight=1.0, kind="corpus")]
        data = prepare(cfg, run, tokenizer_dir, sources, token_budget(cfg, pretrain=True), clock)
        version = lin.next_version(run.run_id)
        with clock.stage("train"):
            trained = run_training(TrainRequest(
                cfg=cfg, data_dir=str(run.path), out_dir=str(ws.checkpoint(version)), train_dir=str(run.train),
                init=True, tokenizer_dir=tokenizer_dir, meta={"version": version, "run_id": run.run_id}))
        with clock.stage("record"):
            register_v0(cfg, run.run_id, version, trained["version_dir"],
                        {"hash": data["manifest_hash"], "path": str(run.manifest),
                         "stats": {"rows": data["manifest_rows"], "tokens_per_source": data["tokens_per_source"]}})
    except BaseException:
        lin.finish_run(run.run_id, "failed", None, clock.seconds)
        raise
    lin.finish_run(run.run_id, "completed", version, clock.seconds)
    return {"status": "pre-trained", "version": version, "run_id": run.run_id, "final_metrics": trained["final_metrics"],
            **built, "timings": clock.seconds}
