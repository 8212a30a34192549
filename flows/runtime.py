"""What every flow of the pipeline needs around its stages: its run's bookkeeping, stage clocks,
the task runner of the per-shard stages, cached stages that reuse or refresh their outputs.

- `recorded_run(cfg, purpose)`: the one context manager around a flow that writes a run (the
  night, the bootstrap, curation): lib.registry.runs.RunBook with this flow run's id, logger and stop
  signals. It holds the workspace's night lock (one night per workspace, waited for with a
  timeout and a log line that names the holder) and closes the run started in it in lineage:
  completed, failed, or left running for the next trigger when stopped from outside.
- Run ids are `<kind>-<UTC time>-<8 hex of the Prefect flow run id>` (lib.registry.runs.new_run_id):
  sortable by time, unique across workers, and traceable to the flow run in the UI.
- `StageClock` enters no stage after a Ctrl-C, even one a library swallowed (lib.interrupts), and
  times each stage on the flow's side (`seconds`, into lineage as runs.timings) and
  adds up the stage's own work (`own`: the lib calls its tasks wrap in `tasks.reporting.own_time`,
  Prefect's task overhead excluded); bench/bench_orchestration.py compares the flow's wall time
  with the sum of `own`.
- `cached_stage(task, ...)`: a content-cached stage whose files land in tonight's run folder
  (run, check its outputs exist, refresh the cache if they are gone, hard-link them in).
- Per-shard tasks (`.map`) run on a thread pool, or on Ray when
  `orchestration.task_runner = "ray"` (prefect-ray; a local Ray of `curation.workers` CPUs when
  no `ray_address` is given).

Trade-off: the flow itself keeps the default runner and only the mapped stages enter the Ray
runner, so a Ray cluster is started only for the stage that fans out, at ~5-10 s of Ray start-up.
"""

from __future__ import annotations

# prefect_ray is imported where used: an optional extra (`pip install .[test]`), absent from a plain install
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from prefect.exceptions import TerminationSignal
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from lib.interrupts import stop_if_interrupted
from lib.registry.runs import RunBook, new_run_id as run_id
from lib.workspace import Workspace
from tasks.cache_keys import on_workspace
from tasks.data import adopt_outputs
from tasks.reporting import stage_ledger, stage_logger
from lib.training.launch import TrainingStopped


def new_run_id(kind: str) -> str:
    """A run id of this flow run (lib.registry.runs.new_run_id)."""
    return run_id(kind, flow_run.get_id())


class StageClock:
    """Wall seconds per stage, in the order the stages ran, and the own seconds of the work
    inside each (tasks on threads add theirs in parallel, so own can exceed wall)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._own: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        stop_if_interrupted(f"stage {name}")  # a Ctrl-C a library swallowed stops the flow here
        t0 = time.perf_counter()
        try:
            with stage_ledger(self._own, name):
                yield
        except Exception as exc:
            # the innermost stage names where a night failed (the CLI's `"stage"`)
            if getattr(exc, "failed_stage", None) is None:
                try:
                    exc.failed_stage = name
                except AttributeError:  # an exception type without a __dict__
                    pass
            raise
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t0, 3)

    @property
    def own(self) -> dict[str, float]:
        """Own seconds per stage that ran (0.0 where all its work came from the cache)."""
        return {name: round(self._own.get(name, 0.0), 3) for name in self.seconds}


def shard_task_runner(cfg):
    """The task runner of per-shard stages for `cfg.orchestration`."""
    orch = cfg.orchestration
    workers = cfg.curation.workers or os.cpu_count() or 1
    if orch.task_runner == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as exc:
            raise ImportError("orchestration.task_runner=ray needs the prefect-ray package: pip install prefect-ray") from exc
        if orch.ray_address:
            return RayTaskRunner(address=orch.ray_address)
        return RayTaskRunner(init_kwargs={"num_cpus": workers, "include_dashboard": False})

    return ThreadPoolTaskRunner(max_workers=workers)


def map_over(task, cfg, /, **iterables: Any) -> list[Any]:
    """`task.map(**iterables)` on the shard runner of `cfg` (constants wrapped in `unmapped`);
    results in input order."""
    mapped = [v for v in iterables.values() if not isinstance(v, unmapped)]
    n = len(mapped[0]) if mapped else 0
    if n == 0:
        return []
    with shard_task_runner(cfg) as runner:
        futures = runner.map(task, iterables)
        return [f.result() for f in futures]


def cached_stage(task, here: str, outputs: Callable[[dict[str, Any]], list[str]] | list[str], params: dict[str, Any], *,
                 result: dict[str, Any] | None = None, folder: str = "run_dir") -> dict[str, Any]:
    """A content-cached stage whose files land in run folder `here`: `task(**params)` on the
    cache of `params["cfg"]`'s workspace (or its mapped `result`), computed again with the cache
    refreshed when the cached result points at files that are gone (an old run folder deleted),
    and the files of a result another run computed hard-linked in (`outputs`, relative to the
    result's `folder`)."""
    cached = on_workspace(task, Workspace(params["cfg"].workspace.root))
    entries = outputs if callable(outputs) else (lambda _r: outputs)
    if result is None:
        result = cached(**params)
    if not all((Path(result[folder]) / e).exists() for e in entries(result)):
        result = cached.with_options(refresh_cache=True)(**params)
    adopt_outputs(result[folder], here, entries(result))
    return result


FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}


def crash_orphans(flow_run_ids: list[str], log=None, current: str | None = None) -> list[str]:
    """Mark as Crashed what dead nights left Running in Prefect: the flow run, its task runs and
    its subflow runs (the `train` subflow and its task), recursively. A night killed outright
    (SIGKILL, OOM) dies inside its one process; the worker marks the flow run Crashed, but the
    subflow and tasks that ran in that process stay Running in the UI forever. Called under the
    night lock, which no live night holds, so these runs are dead. `current`, the flow run calling
    (the same id when a user retries a crashed flow run from the UI), is never marked, nor are its
    task runs; its dead subflows are. Best effort: an API error is logged, never fails the night.
    Returns the ids of the runs it marked."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId, TaskRunFilter, TaskRunFilterFlowRunId
    from prefect.states import Crashed

    marked: list[str] = []
    todo, seen = [str(i) for i in flow_run_ids if i], set()
    if not todo:
        return marked
    try:
        with get_client(sync_client=True) as client:
            while todo:
                fid = todo.pop()
                if fid in seen:
                    continue
                seen.add(fid)
                message = f"left running by a night that died (flow run {fid}); marked by the night that found it dead"
                if fid != (str(current) if current else None):  # the caller and its tasks are alive
                    for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fid]))):
                        if run.state_type is not None and run.state_type.value not in FINAL_STATES:
                            client.set_flow_run_state(run.id, Crashed(message=message), force=True)
                            marked.append(str(run.id))
                    for task in client.read_task_runs(task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[fid]))):
                        if task.state_type is not None and task.state_type.value not in FINAL_STATES:
                            client.set_task_run_state(task.id, Crashed(message=message), force=True)
                            marked.append(str(task.id))
                children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[fid])))
                todo.extend(str(c.id) for c in children)
    except Exception as exc:  # noqa: BLE001 - bookkeeping of the UI; the night goes on
        if log is not None:
            log.warning("could not mark the runs a dead night left running as Crashed: %s", exc)
        return marked
    if marked and log is not None:
        log.warning("marked %d flow and task run(s) a dead night left Running as Crashed", len(marked))
    return marked


def _stop_signals() -> tuple[type[BaseException], ...]:
    """Ways a run is stopped from outside rather than failing (besides Ctrl-C and SystemExit)."""
    return (TerminationSignal, TrainingStopped)


@contextmanager
def recorded_run(cfg, purpose: str) -> Iterator[Any]:
    """The bookkeeping of this flow run on `cfg`'s workspace (lib.registry.runs.RunBook): the night lock
    for the body, and the lineage run the body starts (`book.start`) closed by how it ends. A
    busy lock is waited for up to `orchestration.night_lock_timeout_s`, the holder named in the
    run log (and so in the UI) when the wait starts and every minute; past the timeout the flow
    fails with `LockBusy` naming the holder."""
    book = RunBook(Workspace(cfg.workspace.root).ensure(), flow_run_id=flow_run.get_id(), log=stage_logger(),
                   stopped=_stop_signals())
    with book.session(purpose, cfg.orchestration.night_lock_timeout_s):
        yield book

