"""What a stage shows in the Prefect UI: logs and artifacts with stable keys.

- Every stage publishes its counts as a table artifact under a fixed key ("buffer-files",
  "curation-counts", "manifest-stats", "eval-before-after", "gate-decision", ...), so the UI's
  artifact page keeps one history per key across nights instead of a new name per run.
- Outside a flow or task run (a task called as `task.fn(...)` from CI or the CLI) there is no
  run to attach artifacts to: publishing is skipped and logs go to the `tasks` logger, so the
  same code runs with and without an orchestrator.
- Training progress is one progress artifact per run, created at 0 % and updated in place.
- `own_time()` wraps a task's lib call; its seconds add up per stage in the flow's `StageClock`
  (flows/runtime.py, via a context variable that Prefect copies into task threads), so a run
  reports both the flow-side stage time and the work inside it.

Trade-off: skipping artifacts outside a run means `task.fn` results carry the numbers only in
their return value; the alternative, starting an ephemeral API just to store an artifact, costs
10-20 s per CLI call.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Mapping, Sequence

_fallback = logging.getLogger("tasks")


def in_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return TaskRunContext.get() is not None or FlowRunContext.get() is not None


def stage_logger():
    """The run logger inside a flow/task run (shown in the UI), else a plain logger."""
    if in_run():
        from prefect import get_run_logger

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
    from prefect.artifacts import create_table_artifact

    if isinstance(rows, Mapping):
        rows = [{"what": k, "value": _cell(v)} for k, v in rows.items()]
    else:
        rows = [{k: _cell(v) for k, v in r.items()} for r in rows]
    create_table_artifact(table=list(rows), key=key, description=description)


def publish_markdown(key: str, markdown: str, description: str) -> None:
    if not in_run():
        return
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown=markdown, key=key, description=description)


class TrainingProgress:
    """A progress artifact (0-100 %) updated as training reports steps."""

    def __init__(self, key: str, description: str):
        self.artifact_id = None
        self.last = -1.0
        if in_run():
            from prefect.artifacts import create_progress_artifact

            self.artifact_id = create_progress_artifact(progress=0.0, key=key, description=description)

    def update(self, fraction: float) -> None:
        percent = round(100.0 * min(max(fraction, 0.0), 1.0), 1)
        if self.artifact_id is None or percent == self.last:
            return
        from prefect.artifacts import update_progress_artifact

        update_progress_artifact(artifact_id=self.artifact_id, progress=percent)
        self.last = percent


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
