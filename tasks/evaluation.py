"""After training: record the candidate, evaluate it against its parent, gate, promote.

- `record_candidate`: the version row, the buffer files its run trained on and its manifest, in
  one lineage transaction (status candidate).
- `evaluate_versions`: lib.evaluation.evaluate.evaluate_candidate on the run's sets (old_val for
  forgetting, new_heldout and new_train for acquisition, every earlier night's retention set,
  tonight's fact probes and every kept night's: `facts:new`, `facts:<vK>`),
  logging each set's progress; both sides' metrics go to lineage under the run; the table is the
  "eval-before-after" artifact (eval.benchmarks scores: the "benchmarks" artifact) and
  `<run>/night.png` (training loss, bits per byte before/after) the "night-plot" artifact.
- `gate_and_promote`: lib.registry.promotion.gate_version, then conclude: pass -> champion + consumed
  buffers, fail -> rejected, buffers stay pending; the decision with every rule's reason is the
  "gate-decision" markdown artifact.
- After the gate (applied or previewed), the "retention-matrix" table: bits per byte of every
  version of the lineage, tonight's candidate included, on old_val and on each remembered night's
  held-out set, and beside each night the share of its facts answered closed-book, each against
  the version that learnt it (lib/evaluation/retention.py).
- `remember_night`: an accepted night's documents join the long-term memory (lib.data.memory.remember),
  its held-out set becomes a retention set and its fact probes a kept fact set.
- `store_candidate`: lib.registry.promotion.apply_storage_policy: the champion and `latest` stay plain
  Hugging Face folders (linked from <workspace>/serving/), every other version (a rejected
  candidate, the champion just replaced) becomes a delta against its parent, and optimizer.pt and
  fp32 master weights are pruned from versions no night will start from. Remembering and storing
  are their own tasks and idempotent, so a night that died after the gate is finished by the next
  trigger (flows/consolidate.py).

Trade-off: none of these is cached: each reads and writes the registry, and replaying them is
idempotent in lib (same version id, one decision per version, one alias move).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from lib.checkpoints.checkpoint import read_meta
from lib.config import ConsolidationConfig
from lib.data.memory import remember
from lib.evaluation.demo_plot import plot_story
from lib.evaluation.evaluate import evaluate_and_record, evaluate_candidate
from lib.evaluation.retention import retention_matrix
from lib.faults import fault_point
from lib.registry.lineage import Lineage, version_digest
from lib.training.throughput import lineage_metrics
from lib.registry.promotion import apply_storage_policy, conclude, gate_version, storage_record
from lib.workspace import RunDir, Workspace
from tasks.data import IO_RETRIES
from tasks.reporting import EvalProgress, gate_markdown, own_time, publish_image, publish_markdown, publish_table, stage_logger


def _lineage(cfg: ConsolidationConfig):
    return Lineage(Workspace(cfg.workspace.root).lineage_db)


@task(name="record-candidate", cache_policy=NO_CACHE, **IO_RETRIES)
def record_candidate(cfg: ConsolidationConfig, run_id: str, version: str, version_dir: str, parent: str | None,
                     input_hashes: list[str], manifest: dict[str, Any] | None, status: str = "candidate") -> str:
    with own_time():
        meta = read_meta(version_dir)
        # the training's tokens/s and MFU, as metrics of the version (dataset "training")
        throughput = lineage_metrics(meta.get("final_metrics") or {})
        _lineage(cfg).record_version(
            version, version_dir, parent=parent, run_id=run_id, status=status, digest=version_digest(version_dir),
            storage="full", meta=meta, inputs=input_hashes, manifest=manifest,
            metrics={version: throughput} if throughput else None,
        )
    stage_logger().info("recorded %s (parent %s, %d buffer file(s))", version, parent, len(input_hashes))
    return version


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_versions(cfg: ConsolidationConfig, run_dir: str | None, run_id: str | None, version: str, parent: str,
                      record: bool = True) -> list[dict[str, Any]]:
    """BPB of parent and candidate on the same sets; recorded in lineage under `run_id` (unless
    record=False); returns the rows. Logs each set's progress; publishes the table and a plot of
    the run's training loss and the bits per byte before and after."""
    progress = EvalProgress(f"{parent} -> {version}")
    with own_time():
        ws, lin = Workspace(cfg.workspace.root), _lineage(cfg)
        run = RunDir(Path(run_dir)) if run_dir else None
        if record:
            table = evaluate_and_record(ws, cfg, lin, version, parent, run_id, run, on_progress=progress)
        else:
            table = evaluate_candidate(ws, cfg, lin.get_version(version)["path"], lin.get_version(parent)["path"], run,
                                       on_progress=progress, lineage=lin)
        rows = table.rows()
    publish_table("eval-before-after", [{**r, "parent_version": parent, "candidate_version": version} for r in rows],
                  f"Bits per byte of {parent} (before) and {version} (after) on the same data")
    if table.benchmark_rows():
        publish_table("benchmarks", [{**r, "parent_version": parent, "candidate_version": version} for r in table.benchmark_rows()],
                      f"lm-evaluation-harness tasks (eval.benchmarks) of {parent} and {version}, in points ± standard error; "
                      f"{table.benchmarks.seconds:.1f} s (the parent's from the eval cache when it was scored before)")
    stage_logger().info("evaluation %s -> %s:\n%s", parent, version, table.to_markdown())
    facts = [d for d in table.candidate if d.startswith("facts:")]
    if facts:
        stage_logger().info("fact probes: %d set(s) (%s), %d probes a side, asked in %.1f s", len(facts), ", ".join(facts),
                            sum(int(table.candidate[d].get("fact_n") or 0) for d in facts), table.fact_seconds)
    if run is not None:
        _publish_plot(run, parent, version, rows)
    return rows


def _publish_plot(run: RunDir, parent: str, version: str, rows: list[dict[str, Any]]) -> None:
    """`<run>/night.png`: the run's training loss and bits per byte before/after, as the
    "night-plot" artifact."""
    bpb = {r["dataset"]: (r["parent"], r["candidate"]) for r in rows if r["metric"] == "bpb"}
    png = plot_story({version: run.train / "metrics.jsonl"}, bpb, run.path / "night.png", labels=(parent, version),
                     title=f"{run.run_id}: {parent} -> {version}")
    publish_image("night-plot", png, f"Training loss of {version} and bits per byte of {parent} vs {version}")


@task(name="preview-gate", cache_policy=NO_CACHE)
def preview_gate(cfg: ConsolidationConfig, version: str) -> dict[str, Any]:
    """What the gate would decide on `version` from its recorded metrics, not applied: the
    "gate-preview" artifact."""
    with own_time():
        decision, status = gate_version(_lineage(cfg), cfg.gate, version, apply=False)
    verdict = "would pass" if decision.passed else "would be rejected"
    publish_markdown("gate-preview", gate_markdown(decision, f"Gate on {version} (preview, not applied): {verdict}"),
                     f"What the gate would decide on {version}; its status stays {status}")
    stage_logger().info("gate preview on %s: %s (status stays %s)", version, decision.summary(), status)
    publish_retention(cfg, version)
    return {"version": version, "passed": decision.passed, "status": status, "summary": decision.summary()}


@task(name="gate-and-promote", cache_policy=NO_CACHE, **IO_RETRIES)
def gate_and_promote(cfg: ConsolidationConfig, version: str) -> dict[str, Any]:
    """The regression gate on the recorded metrics, applied: promote or reject."""
    lin = _lineage(cfg)
    with own_time():
        decision, _ = gate_version(lin, cfg.gate, version, apply=False)
        fault_point("gate")  # decided, not applied: the next trigger decides again, the same way
        status = conclude(lin, version, decision)
    publish_markdown("gate-decision", gate_markdown(decision, f"Regression gate on {version}: {status}"),
                     f"Gate decision on {version} with the reason of every rule")
    out = {"version": version, "passed": decision.passed, "status": status, "summary": decision.summary(),
           "champion": lin.alias("champion"), "rules": decision.to_dict().get("rules", [])}
    stage_logger().info("gate on %s: %s (%s); champion is %s", version, status, decision.summary(), out["champion"])
    publish_retention(cfg, version)
    return out


def publish_retention(cfg: ConsolidationConfig, candidate: str) -> None:
    """The "retention-matrix" table artifact: the lineage up to `candidate`, every version on
    old_val and each night's held-out set against the version that learnt it; logged as well."""
    with own_time():
        matrix = retention_matrix(_lineage(cfg), candidate=candidate, workspace=Workspace(cfg.workspace.root))
    publish_table("retention-matrix", matrix.table_rows(),
                  f"Retention up to {candidate}: bits per byte and facts answered per version and set, change vs the version "
                  f"that learnt it. " + matrix.legend())
    stage_logger().info("retention matrix up to %s:\n%s", candidate, matrix.to_markdown())


@task(name="remember-night", cache_policy=NO_CACHE, **IO_RETRIES)
def remember_night(cfg: ConsolidationConfig, version: str) -> dict[str, Any]:
    """The accepted `version`'s night joins the memory: its documents are replayed by later nights,
    its held-out set is checked for retention by later gates (lib.data.memory.remember; idempotent)."""
    lin = _lineage(cfg)
    ws = Workspace(cfg.workspace.root)
    with own_time():
        out = remember(ws, lin, version, ws.run(lin.get_version(version)["run_id"]))
    stage_logger().info("memory: %s remembered (%d documents, %d held out for retention, fact probes %s)", version, out["docs"],
                        out["heldout_docs"], "kept" if out.get("facts") else "none")
    return out


@task(name="store-version", cache_policy=NO_CACHE, **IO_RETRIES)
def store_candidate(cfg: ConsolidationConfig, version: str) -> dict[str, Any]:
    """After the gate, accepted or rejected: lib.registry.promotion.apply_storage_policy (served versions
    full, the rest deltas against their parents, a rejected candidate kept for inspection,
    optimizer.pt and fp32 master weights pruned from versions no night will start from, serving
    links moved). Idempotent, so a night that died half-way through is finished by the next trigger."""
    lin = _lineage(cfg)
    with own_time():
        policy = apply_storage_policy(lin, cfg.checkpoints, Workspace(cfg.workspace.root).serving)
        storage = policy["stored"].get(version) or storage_record(lin.get_version(version)["path"], lin.alias("champion"),
                                                                    lin.alias("latest"), version)
    stage_logger().info("stored %s as %s; optimizer state pruned from %s", version, storage["stored"],
                        sorted(policy["optimizer_states_pruned"]) or "none")
    return {"storage": storage, "stored": {v: r["stored"] for v, r in policy["stored"].items()},
            "restored": policy["restored"], "links": policy["links"],
            "optimizer_states_pruned": policy["optimizer_states_pruned"], "master_weights_pruned": policy["master_weights_pruned"]}
