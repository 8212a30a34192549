"""The training flow: one torchrun on prepared data, inline or as its own GPU deployment.

- `train(request)` takes one typed parameter, `TrainRequest` (the config plus where the data,
  the parent and the new version are), so the `train` deployment's UI form documents itself.
- `run_training(request)` is what the nightly flow calls: with
  `orchestration.train_deployment = "train/train"` it starts that deployment on the GPU work pool
  with `run_deployment`, waits, and fails unless the run Completed; without it, the same flow
  runs inline as a subflow on this machine.
- The version folder lands in the shared workspace either way; the caller reads its meta.json,
  so no result has to travel back through the API.
- The caller's own flow run gets the "training-curve" table (loss at points of the run,
  throughput) from the shared metrics.jsonl, so the night shows its training without opening the
  train subflow or the GPU deployment's run.

Trade-off: `run_deployment` polls the API every 10 s, so a remote training reports completion up
to 10 s late; against trainings of minutes to hours that is the price of not holding a socket.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

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


@flow(name="train", log_prints=True)
def train(request: TrainRequest) -> dict[str, Any]:
    """Continue pre-training (or pre-train) one checkpoint with torchrun."""
    return train_checkpoint(
        request.cfg, request.data_dir, request.out_dir, request.train_dir, parent=request.parent,
        init=request.init, resume=request.resume, meta=request.meta or None, tokenizer_dir=request.tokenizer_dir,
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
        return train(request)
    from prefect.deployments import run_deployment

    from lib.checkpoint import read_meta

    flow_run = run_deployment(deployment, parameters={"request": request.model_dump(mode="json")},
                              timeout=None, poll_interval=10)
    state = flow_run.state
    if state is None or not state.is_completed():
        raise RuntimeError(f"training deployment {deployment!r} ended {state.name if state else 'without a state'} "
                           f"(flow run {flow_run.id}); see its logs in the UI")
    final = read_meta(request.out_dir).get("final_metrics", {})
    return {"version_dir": request.out_dir, "final_metrics": final, "flow_run_id": str(flow_run.id)}
