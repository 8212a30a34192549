"""Stage timings: the flow-side seconds of each stage (StageClock.seconds, into lineage), the own
seconds of the work inside it (StageClock.own, added up from tasks.reporting.own_time, also from
task threads), and how the demo prints them.

The demo once printed "ingest 0, curate 0, prepare 0" while lineage held 0.15, 0.475 and 0.313 s:
nothing was lost, the line rounded sub-second stages to whole seconds.
"""

from __future__ import annotations

import contextvars
import io
import os
import threading
import time

pytest_plugins = ["prefect_fixtures"]

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


def test_stage_clock_adds_repeats_in_order_and_times_failed_stages():
    import pytest

    from flows.runtime import StageClock

    clock = StageClock()
    with clock.stage("ingest"):
        time.sleep(0.02)
    with clock.stage("curate"):
        pass
    with clock.stage("ingest"):  # a stage entered twice adds up
        time.sleep(0.02)
    with pytest.raises(RuntimeError), clock.stage("train"):
        raise RuntimeError("boom")
    assert list(clock.seconds) == ["ingest", "curate", "train"]
    assert clock.seconds["ingest"] >= 0.04 and clock.seconds["train"] >= 0.0
    assert clock.own == {"ingest": 0.0, "curate": 0.0, "train": 0.0}  # no own_time blocks: no own work


def test_own_time_goes_to_the_running_stage_from_threads_too():
    from flows.runtime import StageClock
    from tasks.reporting import own_time

    with own_time():  # outside any stage: counted nowhere, no error
        pass
    clock = StageClock()
    with clock.stage("curate"):
        with own_time():
            time.sleep(0.03)

        def work():
            with own_time():
                time.sleep(0.03)

        # what Prefect's thread pool does with mapped tasks: run them in a copy of the context
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(work,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.01)  # stage time outside any own_time block
    with clock.stage("gate"):
        with own_time():
            time.sleep(0.02)
    assert clock.own["curate"] >= 0.12  # 0.03 here + 3 x 0.03 in threads (in parallel: may exceed wall)
    assert 0.02 <= clock.own["gate"] <= clock.seconds["gate"]


def test_own_seconds_of_prefect_tasks_reach_the_flow_clock(prefect_harness, tmp_path):
    """Inside a real flow: a task called directly and tasks mapped on the thread runner both add
    their own time to the stage they ran in (Prefect carries the context into task threads)."""
    from prefect import flow, task

    from flows.runtime import StageClock, map_over
    from lib.config import load_config
    from tasks.reporting import own_time

    cfg = load_config(preset="tiny", overrides=[f"workspace.root={tmp_path}", "curation.workers=2"])

    @task
    def work(seconds: float) -> float:
        with own_time():
            time.sleep(seconds)
        return seconds

    @flow
    def night() -> tuple[dict, dict]:
        clock = StageClock()
        with clock.stage("record"):
            work(0.05)
        with clock.stage("curate"):
            map_over(work, cfg, seconds=[0.05, 0.05, 0.05])
        with clock.stage("gate"):
            pass
        return clock.seconds, clock.own

    seconds, own = night()
    assert list(seconds) == list(own) == ["record", "curate", "gate"]
    assert 0.05 <= own["record"] <= seconds["record"]
    assert own["curate"] >= 0.15 and own["gate"] == 0.0


def test_demo_prints_sub_second_stages(tmp_path):
    from rich.console import Console

    from cli.demo import show_story
    from lib.workspace import Workspace

    ws = Workspace(tmp_path).ensure()
    night = {"run_id": "night-x", "status": "accepted", "parent": "v0", "version": "v1",
             "timings": {"ingest": 0.15, "curate": 0.48, "prepare": 0.313, "train": 77.214}}
    out = io.StringIO()
    show_story(Console(file=out, width=200), ws, {"bootstrap": {"status": "pre-trained", "version": "v0"},
                                                  "night": night, "figures": {}})
    assert "stage seconds: ingest 0.15, curate 0.48, prepare 0.31, train 77.21" in out.getvalue()
