"""The training flow: one torchrun on prepared data, inline or as its own GPU deployment.

- `train(request)` takes one typed parameter, `TrainRequest` (the config plus where the data,
  the parent and the new version are), so the `train` deployment's UI form documents itself.
- `run_training(request)` is what the nightly flow calls: with
  `orchestration.train_deployment = "train/train"` it starts that deployment on the GPU work pool
  with `run_deployment`, waits, and fails unless the run Completed; without it, the same flow
  runs inline as a subflow on this machine.
- With `training.nnodes` > 1 it starts one run of the deployment per node (`node_rank` 0..N-1)
  and waits for all of them; they meet at `training.rdzv_endpoint` (torchrun's c10d rendezvous).
- The version folder lands in the shared workspace either way; the caller reads its meta.json,
  so no result has to travel back through the API.
- The caller's own flow run gets the "training-curve" table (loss at points of the run,
  throughput) from the shared metrics.jsonl, so the night shows its training without opening the
  train subflow or the GPU deployment's run.

Trade-off: `run_deployment` polls the API every 10 s, so a remote training reports completion up
to 10 s late; against trainings of minutes to hours that is the price of not holding a socket.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from pydantic import BaseModel, Field

from lib.checkpoints.checkpoint import read_meta
from lib.config import run_form
from tasks.reporting import publish_training_curve
from tasks.training import train_checkpoint

# The run form of one training: the sections the trainer reads.
TrainConfig = run_form("workspace", "tokenizer", "model", "training", "checkpoints", "orchestration")


class TrainRequest(BaseModel):
    """One training: which data, from which parent (or from scratch), into which version folder."""

    cfg: TrainConfig = Field(description="The consolidation config (training, model and orchestration sections apply).")
    data_dir: str = Field(description="Prepared data folder: data.json, manifest.parquet, shards/ (a run folder).")
    out_dir: str = Field(description="Version folder to write: checkpoints/VERSION in the workspace.")
    train_dir: str = Field(description="Where metrics.jsonl and snapshots/ go: train/ in the run folder.")
    parent: str | None = Field(None, description="Version folder to continue from; none with init=true.")
    init: bool = Field(False, description="Pre-train a new model from scratch (v0) instead of continuing a parent.")
    resume: bool = Field(False, description="Continue from the newest complete snapshot in train_dir.")
    meta: dict[str, Any] = Field(default_factory=dict, description="Extra meta.json fields of the version (version id, run id, ...).")
    tokenizer_dir: str | None = Field(None, description="Tokenizer folder (init only); default: the parent's own.")
    node_rank: int | None = Field(None, ge=0, description="This node's rank when training.nnodes > 1 (0 to nnodes-1); "
                                                          "none: one node. run_training starts one run per node.")


@flow(name="train", log_prints=True)
def train(request: TrainRequest) -> dict[str, Any]:
    """Continue pre-training (or pre-train) one checkpoint with torchrun."""
    return train_checkpoint(
        request.cfg, request.data_dir, request.out_dir, request.train_dir, parent=request.parent,
        init=request.init, resume=request.resume, meta=request.meta or None, tokenizer_dir=request.tokenizer_dir,
        node_rank=request.node_rank,
    )


def run_training(request: TrainRequest) -> dict[str, Any]:
    """Train on the configured GPU deployment, or inline; the caller's flow run (the night, the
    bootstrap) gets the "training-curve" artifact either way."""
    trained = _train_here_or_there(request)
    publish_training_curve(Path(request.train_dir) / "metrics.jsonl", trained.get("final_metrics") or {},
                           Path(request.out_dir).name)
    return trained


def _train_here_or_there(request: TrainRequest) -> dict[str, Any]:
    deployment = request.cfg.orchestration.train_deployment
    if not deployment:
        if request.cfg.training.nnodes > 1:
            raise ValueError(f"training.nnodes={request.cfg.training.nnodes} needs orchestration.train_deployment (the GPU pool's "
                             f"train deployment, one run per node): inline, this machine would wait for nodes nobody starts")
        return train(request)

    nnodes = request.cfg.training.nnodes
    if nnodes == 1:
        flow_runs = [run_deployment(deployment, parameters={"request": request.model_dump(mode="json")},
                                    timeout=None, poll_interval=10)]
    else:
        flow_runs = _run_on_nodes(deployment, request, nnodes)
    for flow_run in flow_runs:
        state = flow_run.state
        if state is None or not state.is_completed():
            raise RuntimeError(f"training deployment {deployment!r} ended {state.name if state else 'without a state'} "
                               f"(flow run {flow_run.id}); see its logs in the UI")
    final = read_meta(request.out_dir).get("final_metrics", {})
    return {"version_dir": request.out_dir, "final_metrics": final, "flow_run_id": str(flow_runs[0].id)}


def _run_on_nodes(deployment: str, request: TrainRequest, nnodes: int) -> list:
    """One flow run of the training deployment per node (node_rank 0..nnodes-1), all submitted
    before any is waited for: torchrun's rendezvous needs every node up at once. The pool must
    give each run its own GPU machine (one worker per machine, `--limit 1`)."""
    if not request.cfg.training.rdzv_endpoint:
        raise ValueError(f"training.nnodes={nnodes} needs training.rdzv_endpoint: host:port of one machine of the GPU pool "
                         f"that every node reaches (its worker must take one of the node runs)")
    submitted = [run_deployment(deployment, parameters={"request": request.model_copy(update={"node_rank": rank}).model_dump(mode="json")},
                                timeout=0) for rank in range(nnodes)]
    with get_client(sync_client=True) as client:
        while True:
            runs = [client.read_flow_run(r.id) for r in submitted]
            if all(r.state is not None and r.state.is_final() for r in runs):
                return runs
            time.sleep(10)
