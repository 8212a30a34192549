"""What every flow of the pipeline needs around its stages: run ids, stage clocks, the task
runner of the per-shard stages, cached stages that reuse or refresh their outputs.

- Run ids are `<kind>-<UTC time>-<8 hex of the Prefect flow run id>`: sortable by time, unique
  across workers, and traceable to the flow run in the UI.
- `StageClock` times each stage on the flow's side (`seconds`, into lineage as runs.timings) and
  adds up the stage's own work (`own`: the lib calls its tasks wrap in `tasks.reporting.own_time`,
  Prefect's task overhead excluded); bench/bench_orchestration.py compares the flow's wall time
  with the sum of `own`.
- `night_lock(cfg, purpose)`: one night per workspace (lib.locks), waited for with a timeout
  and a log line that names the holder.
- Per-shard tasks (`.map`) run on a thread pool, or on Ray when
  `orchestration.task_runner = "ray"` (prefect-ray; a local Ray of `curation.workers` CPUs when
  no `ray_address` is given).

Trade-off: the flow itself keeps the default runner and only the mapped stages enter the Ray
runner, so a Ray cluster is started only for the stage that fans out, at ~5-10 s of Ray start-up.
"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator


def new_run_id(kind: str) -> str:
    from prefect.runtime import flow_run

    fr = flow_run.get_id() or uuid.uuid4().hex
    return f"{kind}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{str(fr).replace('-', '')[:8]}"


class StageClock:
    """Wall seconds per stage, in the order the stages ran, and the own seconds of the work
    inside each (tasks on threads add theirs in parallel, so own can exceed wall)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._own: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        from tasks.reporting import stage_ledger

        t0 = time.perf_counter()
        try:
            with stage_ledger(self._own, name):
                yield
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
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=workers)


def map_over(task, cfg, /, **iterables: Any) -> list[Any]:
    """`task.map(**iterables)` on the shard runner of `cfg` (constants wrapped in `unmapped`);
    results in input order."""
    from prefect.utilities.annotations import unmapped

    mapped = [v for v in iterables.values() if not isinstance(v, unmapped)]
    n = len(mapped[0]) if mapped else 0
    if n == 0:
        return []
    with shard_task_runner(cfg) as runner:
        futures = runner.map(task, iterables)
        return [f.result() for f in futures]


def run_cached(task, outputs_present, **params: Any) -> Any:
    """Run a content-cached task; if the cached result points at outputs that are gone (an old
    run folder deleted), run it again with the cache refreshed."""
    result = task(**params)
    if not outputs_present(result):
        result = task.with_options(refresh_cache=True)(**params)
    return result


@contextmanager
def night_lock(cfg, purpose: str) -> Iterator[Any]:
    """The workspace's night lock (lib.locks) for the body: one night, bootstrap or curation at
    a time on a workspace. A busy lock is waited for up to `orchestration.night_lock_timeout_s`,
    the holder named in the run log (and so in the UI) when the wait starts and every minute;
    past the timeout the flow fails with `LockBusy` naming the holder."""
    from lib.faults import fault_point
    from lib.locks import WorkspaceLock
    from lib.workspace import Workspace
    from tasks.reporting import stage_logger

    log = stage_logger()
    lock = WorkspaceLock(Workspace(cfg.workspace.root).night_lock, purpose)
    lock.acquire(cfg.orchestration.night_lock_timeout_s, log=log.warning, what="orchestration.night_lock_timeout_s")
    try:
        fault_point("night-lock")  # the lock just taken, nothing done yet
        yield lock
    finally:
        lock.release()
