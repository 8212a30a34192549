"""The evaluation flow: one version against its parent, as a stage of its own.

version (id or alias) → its parent (or the one given) → bits per byte of both on the data of the
version's run (old_val, new_heldout, new_train; tasks.evaluation.evaluate_versions, the night's
own task) → metrics recorded in lineage under that run → what the gate would decide, shown as the
"gate-preview" artifact and never applied (the night, or `consolidate gate --apply`, decides).

The same steps as `consolidate eval VERSION` followed by `consolidate gate VERSION`, from the UI
(the `evaluate` deployment) or `prefect deployment run evaluate/evaluate`.

Trade-off: re-measuring writes the metrics of (version, run) again, the newest value winning, so
a re-evaluation with another `eval` section changes what a later gate reads for that version.
`record=false` measures without writing.
"""

from __future__ import annotations

from typing import Annotated, Any

from prefect import flow
from pydantic import WithJsonSchema

from lib.config import run_form
from lib.evaluation.evaluate import comparison
from lib.workspace import Workspace
from tasks.evaluation import evaluate_versions, preview_gate

EvaluateConfig = run_form("workspace", "eval", "gate")
# `str | None` shown as a text input that may stay empty (not as a None/string toggle).
OptionalVersion = Annotated[str | None, WithJsonSchema({"type": "string"})]


@flow(name="evaluate", log_prints=True)
def evaluate_version(cfg: EvaluateConfig, version: str = "latest", parent: OptionalVersion = None,
                     record: bool = True) -> dict[str, Any]:
    """Bits per byte of one version and its parent on the version's run data, and the gate's
    verdict on them (not applied).

    Args:
        cfg: The consolidation config (workspace, eval and gate apply).
        version: Version id (v3) or alias (champion, latest) to evaluate.
        parent: Compare with this version instead of the recorded parent. Empty: the recorded parent.
        record: Store the metrics in lineage under the version's run (what the gate reads).
    """
    c = comparison(Workspace(cfg.workspace.root), version, parent)
    rows = evaluate_versions(cfg, str(c.run_dir.path) if c.run_dir else None, c.run_id, c.version, c.parent, record=record)
    out: dict[str, Any] = {"version": c.version, "parent": c.parent, "run_id": c.run_id, "rows": rows}
    if record and c.parent == c.recorded_parent:  # the gate judges a version against its recorded parent
        out["gate"] = preview_gate(cfg, c.version)
    return out
