"""After training: record the candidate, evaluate it against its parent, gate, promote.

- `record_candidate`: the version row, the buffer files its run trained on and its manifest, in
  one lineage transaction (status candidate).
- `evaluate_versions`: lib.evaluate.evaluate_candidate on the run's sets (old_val for
  forgetting, new_heldout and new_train for acquisition), logging each set's progress; both
  sides' metrics go to lineage under the run; the table is the "eval-before-after" artifact and
  `<run>/night.png` (training loss, bits per byte before/after) the "night-plot" artifact.
- `gate_and_promote`: lib.promotion.gate_version with apply: pass -> champion + consumed buffers,
  fail -> rejected, buffers stay pending; the decision with every rule's reason is the
  "gate-decision" markdown artifact. The candidate, accepted or rejected (kept for inspection), is
  then stored as a delta against its parent (lib.checkpoint.store_version), and optimizer.pt is
  pruned from versions no night will inherit from (lib.promotion.prune_optimizer_states).

Trade-off: none of these is cached: each reads and writes the registry, and replaying them is
idempotent in lib (same version id, one decision per version, one alias move).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from lib.config import ConsolidationConfig
from lib.workspace import RunDir, Workspace
from tasks.data import IO_RETRIES
from tasks.reporting import EvalProgress, gate_markdown, own_time, publish_image, publish_markdown, publish_table, stage_logger


def _lineage(cfg: ConsolidationConfig):
    from lib.lineage import Lineage

    return Lineage(Workspace(cfg.workspace.root).lineage_db)


@task(name="record-candidate", cache_policy=NO_CACHE, **IO_RETRIES)
def record_candidate(cfg: ConsolidationConfig, run_id: str, version: str, version_dir: str, parent: str | None,
                     input_hashes: list[str], manifest: dict[str, Any] | None, status: str = "candidate") -> str:
    from lib.checkpoint import read_meta
    from lib.lineage import version_digest

    with own_time():
        meta = read_meta(version_dir)
        _lineage(cfg).record_version(
            version, version_dir, parent=parent, run_id=run_id, status=status, digest=version_digest(version_dir),
            storage="full", meta=meta, inputs=input_hashes, manifest=manifest,
        )
    stage_logger().info("recorded %s (parent %s, %d buffer file(s))", version, parent, len(input_hashes))
    return version


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_versions(cfg: ConsolidationConfig, run_dir: str | None, run_id: str | None, version: str, parent: str,
                      record: bool = True) -> list[dict[str, Any]]:
    """BPB of parent and candidate on the same sets; recorded in lineage under `run_id` (unless
    record=False); returns the rows. Logs each set's progress; publishes the table and a plot of
    the run's training loss and the bits per byte before and after."""
    from lib.evaluate import evaluate_candidate

    progress = EvalProgress(f"{parent} -> {version}")
    with own_time():
        ws, lin = Workspace(cfg.workspace.root), _lineage(cfg)
        cand_dir, parent_dir = lin.get_version(version)["path"], lin.get_version(parent)["path"]
        run = RunDir(Path(run_dir)) if run_dir else None
        table = evaluate_candidate(ws, cfg, cand_dir, parent_dir, run, on_progress=progress)
        if record:
            with lin.transaction() as con:
                lin.record_metrics(parent, table.parent, run_id, con)
                lin.record_metrics(version, table.candidate, run_id, con)
        rows = table.rows()
    publish_table("eval-before-after", [{**r, "parent_version": parent, "candidate_version": version} for r in rows],
                  f"Bits per byte of {parent} (before) and {version} (after) on the same data")
    stage_logger().info("evaluation %s -> %s:\n%s", parent, version, table.to_markdown())
    if run is not None:
        _publish_plot(run, parent, version, rows)
    return rows


def _publish_plot(run: RunDir, parent: str, version: str, rows: list[dict[str, Any]]) -> None:
    """`<run>/night.png`: the run's training loss and bits per byte before/after, as the
    "night-plot" artifact."""
    from lib.demo_plot import plot_story

    bpb = {r["dataset"]: (r["parent"], r["candidate"]) for r in rows if r["metric"] == "bpb"}
    png = plot_story({version: run.train / "metrics.jsonl"}, bpb, run.path / "night.png", labels=(parent, version),
                     title=f"{run.run_id}: {parent} -> {version}")
    publish_image("night-plot", png, f"Training loss of {version} and bits per byte of {parent} vs {version}")


@task(name="preview-gate", cache_policy=NO_CACHE)
def preview_gate(cfg: ConsolidationConfig, version: str) -> dict[str, Any]:
    """What the gate would decide on `version` from its recorded metrics, not applied: the
    "gate-preview" artifact."""
    from lib.promotion import gate_version

    with own_time():
        decision, status = gate_version(_lineage(cfg), cfg.gate, version, apply=False)
    verdict = "would pass" if decision.passed else "would be rejected"
    publish_markdown("gate-preview", gate_markdown(decision, f"Gate on {version} (preview, not applied): {verdict}"),
                     f"What the gate would decide on {version}; its status stays {status}")
    stage_logger().info("gate preview on %s: %s (status stays %s)", version, decision.summary(), status)
    return {"version": version, "passed": decision.passed, "status": status, "summary": decision.summary()}


@task(name="gate-and-promote", cache_policy=NO_CACHE, **IO_RETRIES)
def gate_and_promote(cfg: ConsolidationConfig, version: str) -> dict[str, Any]:
    """The regression gate on the recorded metrics, applied: promote or reject."""
    from lib.checkpoint import store_version
    from lib.promotion import gate_version, prune_optimizer_states

    lin = _lineage(cfg)
    with own_time():
        decision, status = gate_version(lin, cfg.gate, version, apply=True)
    publish_markdown("gate-decision", gate_markdown(decision, f"Regression gate on {version}: {status}"),
                     f"Gate decision on {version} with the reason of every rule")
    out = {"version": version, "passed": decision.passed, "status": status, "summary": decision.summary(),
           "champion": lin.alias("champion"), "rules": decision.to_dict().get("rules", [])}
    with own_time():
        # a rejected candidate is kept for inspection, stored like an accepted one
        row = lin.get_version(version)
        parent = lin.get_version(row["parent"]) if row["parent"] else None
        out["storage"] = store_version(row["path"], parent["path"] if parent else None,
                                       delta=cfg.checkpoints.delta, full_every=cfg.checkpoints.full_every)
        lin.set_storage(version, out["storage"]["stored"])
        out["optimizer_states_pruned"] = prune_optimizer_states(lin, cfg.checkpoints.keep_optimizer_states)
    stage_logger().info("gate on %s: %s (%s); champion is %s", version, status, decision.summary(), out["champion"])
    return out
