"""Acting on a gate decision: promote a candidate, reject it, override, roll back.

- `conclude(lineage, version, decision)`: pass -> the version becomes `accepted`, `champion` and
  `latest` point at it, the buffer files its run trained on become consumed by it; fail -> it
  becomes `rejected`, the champion does not move, the buffer files stay pending so the next night
  tries them again. Either way the decision with every rule's reason is recorded. One transaction.
- `promote(lineage, version, reason)`: a person overrides a rejection (or promotes by hand); the
  same moves as a pass, recorded as actor "person" with the reason in gate_decisions and in
  alias_history.
- `rollback(lineage, reason)`: `champion` moves back to the champion's parent; the version left
  becomes `rolled_back`; with `requeue=True` its buffer files return to pending.
- `prune_optimizer_states(lineage, keep)`: optimizer.pt (fp32 AdamW moments, 4x a bf16 model's
  bytes) is kept only by the champion and the `keep` newest accepted versions; the next night
  inherits from the champion, so the others are dead weight (a rollback to one of them starts
  AdamW fresh, which its run records). `prune_master_weights(lineage, keep)` does the same for
  the fp32 master/ folders.
- `apply_storage_policy(lineage, checkpoints_cfg, serving_dir)`: the versions a user may serve,
  `champion` and `latest`, are plain Hugging Face folders (model.safetensors present; a delta is
  restored in place), and `<serving_dir>/champion` and `/latest` link to them: a stable path for
  vLLM, TGI or `from_pretrained`. Every other version is stored as a delta against its parent
  (lib.checkpoints.checkpoint.store_version, `full_every` bounding chains), so the champion that was replaced
  is compacted on the night it is replaced. `promote` and `rollback` keep the served versions full.
- Every function is idempotent: replaying a night after a crash between training and promotion
  records the decision once and moves each alias once.

Trade-off: `latest` follows promotions (the newest accepted version), not every trained candidate,
so a client that serves `latest` never serves a rejected model; the newest candidate, accepted or
not, is the last row of `lineage ls`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lib.checkpoints.checkpoint import (
    drop_master_weights, drop_optimizer_state, is_delta, is_full, master_dir, restore, storage_info,
    store_version,
)
from lib.data.memory import FACTS_PREFIX, forget
from lib.evaluation.gate import GateDecision, RegressionGate
from lib.faults import fault_point
from lib.files import temp_sibling
from lib.registry.lineage import Lineage
from lib.registry.records import LineageError


def _version_row(con, version: str) -> tuple[str | None, str, str | None]:
    row = con.execute("SELECT parent, status, run_id FROM versions WHERE version = ?", [version]).fetchone()
    if row is None:
        raise LineageError(f"unknown version {version!r}: see `consolidate lineage ls`")
    return row


def _move(lineage: Lineage, con, alias: str, version: str, actor: str, reason: str) -> None:
    # Skip a move that is already done, so a replayed night leaves one history row per move.
    current = con.execute("SELECT version FROM aliases WHERE alias = ?", [alias]).fetchone()
    if current is None or current[0] != version:
        lineage.set_alias(alias, version, actor, reason, con)


def _consume(lineage: Lineage, con, version: str, run_id: str | None, content_hashes: list[str] | None) -> list[str]:
    if content_hashes is None:
        rows = con.execute("SELECT content_hash FROM run_inputs WHERE run_id = ?", [run_id]).fetchall() if run_id else []
        content_hashes = [r[0] for r in rows]
    lineage.mark_consumed(content_hashes, version, con)
    return content_hashes


def conclude(
    lineage: Lineage, version: str, decision: GateDecision | dict[str, Any], run_id: str | None = None,
    content_hashes: list[str] | None = None,
) -> str:
    """Apply the gate's decision to `version`; returns its new status (accepted | rejected).
    `content_hashes` defaults to the buffer files recorded as its run's inputs."""
    data = decision.to_dict() if isinstance(decision, GateDecision) else dict(decision)
    with lineage.transaction() as con:
        parent, status, version_run = _version_row(con, version)
        run_id = run_id or version_run
        if status in ("accepted", "rolled_back") and not data["passed"]:
            raise LineageError(f"version {version!r} is already {status}; a later failing gate cannot undo that (use rollback)")
        lineage.record_gate_decision(version, data, run_id, "gate", None, con)
        if data["passed"]:
            lineage.set_status(version, "accepted", con)
            summary = GateDecision.from_dict(data).summary()
            _move(lineage, con, "champion", version, "gate", summary)
            _move(lineage, con, "latest", version, "gate", summary)
            _consume(lineage, con, version, run_id, content_hashes)
            return "accepted"
        lineage.set_status(version, "rejected", con)
        return "rejected"


def promote(lineage: Lineage, version: str, reason: str, actor: str = "person", content_hashes: list[str] | None = None) -> dict[str, Any]:
    """Make `version` the champion whatever the gate said. Recorded with `actor` and `reason`."""
    if not reason or not reason.strip():
        raise ValueError("promote: give a --reason; an override of the gate is recorded with why")
    with lineage.transaction() as con:
        parent, status, run_id = _version_row(con, version)
        previous = con.execute("SELECT version FROM aliases WHERE alias = 'champion'").fetchone()
        if previous and previous[0] == version:
            return {"version": version, "previous": version, "changed": False, "status": status}
        if actor == "person":
            lineage.record_gate_decision(version, {"passed": True, "rules": []}, run_id, "person", reason, con)
        lineage.set_status(version, "accepted", con)
        _move(lineage, con, "champion", version, "promote" if actor == "person" else actor, reason)
        _move(lineage, con, "latest", version, "promote" if actor == "person" else actor, reason)
        consumed = _consume(lineage, con, version, run_id, content_hashes)
        out = {"version": version, "previous": previous[0] if previous else None, "changed": True,
               "was": status, "status": "accepted", "consumed": consumed}
    restored = keep_served_full(lineage)  # the new champion must be servable as it is
    if restored:
        out["restored"] = restored
    return out


def rollback(lineage: Lineage, reason: str = "", requeue: bool = False) -> dict[str, Any]:
    """Move `champion` back to its parent. The version left becomes `rolled_back`; with
    `requeue` the buffer files it consumed are pending again (the next night retries them)."""
    with lineage.transaction() as con:
        current = con.execute("SELECT version FROM aliases WHERE alias = 'champion'").fetchone()
        if current is None:
            raise LineageError("no champion to roll back: the registry has no promoted version yet")
        version = current[0]
        parent, _, _ = _version_row(con, version)
        if parent is None:
            raise LineageError(f"champion {version!r} has no parent to roll back to")
        lineage.set_alias("champion", parent, "rollback", reason or f"rollback from {version}", con)
        lineage.set_status(version, "rolled_back", con)
        requeued = []
        if requeue:
            requeued = [r[0] for r in con.execute(
                "SELECT content_hash FROM buffer_files WHERE consumed_by = ? AND status = 'consumed'", [version]).fetchall()]
            con.execute(
                "UPDATE buffer_files SET status = 'pending', consumed_by = NULL, updated_at = now() WHERE consumed_by = ? AND status = 'consumed'",
                [version],
            )
        out = {"from": version, "to": parent, "requeued": requeued}

    out["left_memory"] = forget(lineage, version)  # no longer replayed, no longer checked for retention
    restored = keep_served_full(lineage)  # the parent may be a delta: serve it as a plain folder
    if restored:
        out["restored"] = restored
    return out


def fact_references(lineage: Lineage, metrics: dict[str, dict[str, float]]) -> dict[str, tuple[float | None, float | None]]:
    """{"facts:<vK>": (vK's fact accuracy on its own facts (facts:new) in its own run, its
    parent's on them in that run)} for every earlier night's fact set in `metrics`: what the
    fact_retention rule compares with."""
    out: dict[str, tuple[float | None, float | None]] = {}
    for dataset in metrics:
        if dataset.startswith(FACTS_PREFIX) and dataset != f"{FACTS_PREFIX}new":
            learner = dataset.removeprefix(FACTS_PREFIX)
            row = lineage.get_version(learner)
            own = lineage.metrics(learner, row["run_id"] or "") if row else {}
            was = lineage.metrics(row["parent"], row["run_id"] or "") if row and row["parent"] else {}
            out[dataset] = (own.get(f"{FACTS_PREFIX}new", {}).get("fact_accuracy"), was.get(f"{FACTS_PREFIX}new", {}).get("fact_accuracy"))
    return out


def gate_version(lineage: Lineage, gate_config, version: str, apply: bool = True) -> tuple[GateDecision, str]:
    """Decide on `version` from the metrics its run recorded for it and its parent (the same
    data), and with `apply` act on the decision. Returns (decision, status)."""
    row = lineage.get_version(version)
    if row is None:
        raise LineageError(f"unknown version {version!r}: see `consolidate lineage ls`")
    if row["parent"] is None:
        raise LineageError(f"version {version!r} has no parent to compare with: the gate judges consolidations")
    run_id = row["run_id"] or ""
    candidate, parent = lineage.metrics(version, run_id), lineage.metrics(row["parent"], run_id)
    if not candidate or not parent:
        raise LineageError(f"no metrics recorded for {version!r} and its parent {row['parent']!r} by run {run_id!r}: "
                           f"run `consolidate eval {version}` first")
    root = lineage.root_version()
    # the cumulative rule where this run measured the root (the nightly evaluation always does)
    root_metrics = (lineage.metrics(root, run_id) or None) if root is not None and root != row["parent"] else None
    decision = RegressionGate(gate_config).decide(parent, candidate, root_metrics, fact_references(lineage, candidate))
    status = conclude(lineage, version, decision, run_id or None) if apply else row["status"]
    return decision, status


def prune_optimizer_states(lineage: Lineage, keep: int | None) -> dict[str, int]:
    """Delete optimizer.pt from every version but the champion and the `keep` newest accepted
    ones (None: keep all). Returns {version: bytes freed} for the versions pruned."""
    return _prune(lineage, keep, drop_optimizer_state)


def prune_master_weights(lineage: Lineage, keep: int | None) -> dict[str, int]:
    """Delete the fp32 master/ folder from every version but the champion and the `keep` newest
    accepted ones (None: keep all). Returns {version: bytes freed}."""
    return _prune(lineage, keep, drop_master_weights)


def _prune(lineage: Lineage, keep: int | None, drop) -> dict[str, int]:
    if keep is None:
        return {}
    versions = lineage.versions()  # creation order
    accepted = [v["version"] for v in versions if v["status"] == "accepted"]
    kept = set(accepted[-keep:]) if keep else set()
    champion = lineage.alias("champion")
    if champion:
        kept.add(champion)
    freed = {}
    for v in versions:
        if v["version"] not in kept and v.get("path"):
            n = drop(v["path"])
            if n:
                freed[v["version"]] = n
    return freed


SERVED_ALIASES = ("champion", "latest")


def keep_served_full(lineage: Lineage) -> list[str]:
    """Restore `champion` and `latest` to plain Hugging Face folders where they are deltas (after
    a rollback or a promotion by hand); returns the versions restored."""
    restored = []
    for alias in SERVED_ALIASES:
        version = lineage.alias(alias)
        row = lineage.get_version(version) if version else None
        if row and row.get("path") and is_delta(row["path"]):
            restore(row["path"])
            lineage.set_storage(version, "full")
            restored.append(version)
    return restored


def link_served(lineage: Lineage, serving_dir: str | Path) -> dict[str, str]:
    """`<serving_dir>/champion` and `/latest`: relative symlinks to those versions' folders,
    replaced atomically when an alias moves. Returns {alias: target}."""
    serving_dir = Path(serving_dir)
    serving_dir.mkdir(parents=True, exist_ok=True)
    links = {}
    for alias in SERVED_ALIASES:
        version = lineage.alias(alias)
        row = lineage.get_version(version) if version else None
        if not row or not row.get("path"):
            continue
        target = os.path.relpath(Path(row["path"]).resolve(), serving_dir.resolve())
        link = serving_dir / alias
        if link.is_symlink() and os.readlink(link) == target:
            links[alias] = target
            continue
        tmp = temp_sibling(link)
        os.symlink(target, tmp, target_is_directory=True)
        os.replace(tmp, link)
        links[alias] = target
    return links


def storage_record(path: str | Path, champion: str | None, latest: str | None, version: str) -> dict[str, Any]:
    """How `version` is stored now, and why, for a report: {"stored": "full" | "delta", ...}."""
    info = storage_info(path)
    why = "served (champion/latest): a plain Hugging Face folder" if version in (champion, latest) else "unchanged"
    return {"stored": info["storage"], "reason": why, **info}


def apply_storage_policy(lineage: Lineage, checkpoints_cfg, serving_dir: str | Path | None = None) -> dict[str, Any]:
    """Served versions full, the rest deltas, training state pruned, serving links moved.
    Idempotent: run it after every gate, promotion or rollback. Returns
    {"restored": [...], "stored": {version: store_version's record, for versions whose storage
    changed in this call}, "links": {...}, "optimizer_states_pruned": {...}, "master_weights_pruned": {...}}."""
    restored = keep_served_full(lineage)
    # prune first: a master folder about to be deleted is not worth compacting
    pruned_opt = prune_optimizer_states(lineage, checkpoints_cfg.keep_optimizer_states)
    pruned_master = prune_master_weights(lineage, checkpoints_cfg.keep_master_weights)
    served = {lineage.alias(a) for a in SERVED_ALIASES} - {None}
    by_name = {v["version"]: v for v in lineage.versions()}
    stored: dict[str, Any] = {}
    for name, row in by_name.items():  # creation order: a parent is compacted before its children
        path = row.get("path")
        if name in served or not path or not Path(path).is_dir():
            continue
        parent = by_name.get(row["parent"]) if row.get("parent") else None
        master = master_dir(path)
        pending_master = master is not None and is_full(master) and checkpoints_cfg.delta
        if is_delta(path) and not pending_master:
            continue  # already stored as a delta
        if not is_full(path) and not is_delta(path):
            continue
        was = (is_delta(path), master is not None and is_delta(master))
        record = store_version(path, parent["path"] if parent else None, delta=checkpoints_cfg.delta,
                               full_every=checkpoints_cfg.full_every)
        fault_point("store")  # folder compacted, lineage still says full
        master = master_dir(path)
        if (is_delta(path), master is not None and is_delta(master)) != was or row.get("storage") != record["stored"]:
            stored[name] = record
            lineage.set_storage(name, record["stored"])
    out = {
        "restored": restored,
        "stored": stored,
        "optimizer_states_pruned": pruned_opt,
        "master_weights_pruned": pruned_master,
        "links": {},
    }
    if serving_dir is not None and getattr(checkpoints_cfg, "serving_links", True):
        out["links"] = link_served(lineage, serving_dir)
    return out
