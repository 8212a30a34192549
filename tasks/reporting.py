"""What a stage shows in the Prefect UI: logs and artifacts with stable keys.

- Every stage publishes its counts as a table artifact under a fixed key ("buffer-files",
  "curation-counts", "manifest-stats", "eval-before-after", "gate-decision", ...), so the UI's
  artifact page keeps one history per key across nights instead of a new name per run.
- Outside a flow or task run (a task called as `task.fn(...)` from CI or the CLI) there is no
  run to attach artifacts to: publishing is skipped and logs go to the `tasks` logger, so the
  same code runs with and without an orchestrator.
- Training progress is one progress artifact per run, created at 0 % and updated in place;
  evaluation logs each set's progress and updates one "eval-progress" progress artifact as sets finish.
- Images (the night's loss and bits-per-byte plot) are markdown artifacts with the PNG inlined as
  a data: URL, so the UI shows them without reaching the worker's disk.
- The gate's decision is a short table of numbers plus one line per rule with its full reason:
  a long reason in a table column is cut off in the UI's artifact pane.
- `own_time()` wraps a task's lib call; its seconds add up per stage in the flow's `StageClock`
  (flows/runtime.py, via a context variable that Prefect copies into task threads), so a run
  reports both the flow-side stage time and the work inside it.

Trade-off: skipping artifacts outside a run means `task.fn` results carry the numbers only in
their return value; the alternative, starting an ephemeral API just to store an artifact, costs
10-20 s per CLI call.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from prefect import get_run_logger
from prefect.artifacts import (
    create_markdown_artifact, create_progress_artifact, create_table_artifact, update_progress_artifact,
)
from prefect.context import FlowRunContext, TaskRunContext

from lib.evaluation.demo_plot import read_losses
from lib.tables import gate_reasons, gate_table

_fallback = logging.getLogger("tasks")


def in_run() -> bool:
    return TaskRunContext.get() is not None or FlowRunContext.get() is not None


def stage_logger():
    """The run logger inside a flow/task run (shown in the UI), else a plain logger."""
    if in_run():
        return get_run_logger()
    return _fallback


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, (list, tuple, dict)):
        return str(value)
    return value


def publish_table(key: str, rows: Sequence[Mapping[str, Any]] | Mapping[str, Any], description: str) -> None:
    """A table artifact: a list of rows, or one mapping shown as two columns (what, value)."""
    if not in_run():
        return

    if isinstance(rows, Mapping):
        rows = [{"what": k, "value": _cell(v)} for k, v in rows.items()]
    else:
        rows = [{k: _cell(v) for k, v in r.items()} for r in rows]
    create_table_artifact(table=list(rows), key=key, description=description)


def publish_markdown(key: str, markdown: str, description: str) -> None:
    if not in_run():
        return

    create_markdown_artifact(markdown=markdown, key=key, description=description)


def publish_image(key: str, png_path: str | Path, description: str) -> None:
    """A PNG as a markdown artifact: the picture inlined as a data: URL (a file in a workspace on
    a worker is no URL the browser can reach), then the file's path. Prefect's image artifact
    takes a URL too, but its page prints that URL in full beside the picture: ~100 kB of base64
    running off the page."""
    if not in_run():
        return

    data = base64.b64encode(Path(png_path).read_bytes()).decode("ascii")
    create_markdown_artifact(markdown=f"![{key}](data:image/png;base64,{data})\n\nIn the workspace: `{png_path}`",
                             key=key, description=description)


def gate_markdown(decision, title: str) -> str:
    """The gate's decision for a narrow UI pane: a short table of the numbers, then each rule's
    full reason as its own paragraph (a reason column in the table is cut off)."""
    return "\n".join([gate_table(decision, title, reasons=False).markdown(), "", *gate_reasons(decision)])


class TrainingProgress:
    """A progress artifact (0-100 %) updated as training reports steps."""

    def __init__(self, key: str, description: str):
        self.artifact_id = None
        self.last = -1.0
        if in_run():
            self.artifact_id = create_progress_artifact(progress=0.0, key=key, description=description)

    def update(self, fraction: float) -> None:
        percent = round(100.0 * min(max(fraction, 0.0), 1.0), 1)
        if self.artifact_id is None or percent == self.last:
            return

        update_progress_artifact(artifact_id=self.artifact_id, progress=percent)
        self.last = percent


class EvalProgress:
    """The `on_progress(dataset, done, total)` of lib.evaluation.evaluate: a log line per set at every
    tenth of it (and when it is done), and one "eval-progress" progress artifact, updated in place
    as each set finishes: the share of the documents of the sets met so far that are scored (never
    going back when a new set begins). One card in the run's artifacts, not one per set."""

    def __init__(self, label: str, every: float = 0.1):
        self.label, self.every = label, every
        self.sets: dict[str, tuple[int, int]] = {}
        self.logged: dict[str, float] = {}
        self.t0 = time.perf_counter()
        self.bar = TrainingProgress("eval-progress", f"Evaluation of {label}: documents scored, all sets")
        self.shown = 0.0

    def __call__(self, dataset: str, done: int, total: int) -> None:
        self.sets[dataset] = (done, total)
        fraction = done / total if total else 1.0
        if fraction >= 1.0 or fraction - self.logged.get(dataset, 0.0) >= self.every:
            self.logged[dataset] = fraction
            stage_logger().info("evaluation %s: %s %d/%d (%.0f%%), %.0f s", self.label, dataset, done, total,
                                100 * fraction, time.perf_counter() - self.t0)
        if fraction >= 1.0:
            scored, total_all = (sum(x[i] for x in self.sets.values()) for i in (0, 1))
            self.shown = max(self.shown, scored / total_all if total_all else 1.0)
            self.bar.update(self.shown)


# -- own time: the seconds of the lib work inside each stage --------------------------------------
# (seconds dict, stage name) of the stage now running; None outside a StageClock (a task run
# alone, or on a Ray worker, whose time is not added up here).
_stage_ledger: ContextVar[tuple[dict[str, float], str] | None] = ContextVar("stage_ledger", default=None)
_ledger_lock = threading.Lock()  # mapped tasks add from several threads at once


@contextmanager
def stage_ledger(seconds: dict[str, float], name: str) -> Iterator[None]:
    """While inside, `own_time` blocks (in this thread or in tasks submitted from it) add their
    seconds to `seconds[name]`."""
    token = _stage_ledger.set((seconds, name))
    try:
        yield
    finally:
        _stage_ledger.reset(token)


@contextmanager
def own_time() -> Iterator[None]:
    """Time the work of a task (its lib call, not Prefect's bookkeeping around it) into the
    running stage's own seconds."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        entry = _stage_ledger.get()
        if entry is not None:
            seconds, name = entry
            with _ledger_lock:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0


def training_curve(metrics_jsonl: str | Path, final: Mapping[str, Any], points: int = 5) -> list[dict[str, Any]]:
    """The loss at `points` evenly spaced steps of a training (first and last included), with the
    run's throughput and time: the numbers of its loss curve as table rows."""
    losses = read_losses(metrics_jsonl)
    rows: list[dict[str, Any]] = []
    if losses:
        picks = sorted({round(i * (len(losses) - 1) / max(points - 1, 1)) for i in range(points)})
        rows += [{"what": f"loss at step {losses[i][0]}", "value": round(losses[i][1], 4)} for i in picks]
    for key in ("mean_loss_last_10", "steps", "tokens", "tokens_per_s", "mfu", "wall_tokens_per_s", "elapsed_s",
                "device_batch_size", "peak_source"):
        if final.get(key) is not None:
            value = final[key]
            rows.append({"what": key, "value": round(value, 4) if isinstance(value, float) else value})
    return rows


def publish_training_curve(metrics_jsonl: str | Path, final: Mapping[str, Any], version: str) -> None:
    """The "training-curve" table of the flow run this is called from (the night, the bootstrap)."""
    rows = training_curve(metrics_jsonl, final)
    if rows:
        publish_table("training-curve", rows, f"Training of {version}: loss along the run, tokens, tokens/s and MFU per GPU after warm-up, seconds")
