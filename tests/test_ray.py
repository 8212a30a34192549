"""The per-shard stage on Ray (prefect-ray): a local Ray of 2 CPUs, inside a flow run, gives the
same content hashes as the thread pool."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["prefect_fixtures"]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_ingest_maps_over_buffer_files_on_ray(workspace, prefect_harness):
    from prefect import flow

    from flows.runtime import map_over, shard_task_runner
    from lib.buffer import MemoryBuffer, content_hash
    from lib.config import load_config
    from tasks.data import inspect_buffer_file

    buf = MemoryBuffer(workspace.buffers, flush_size=10)
    files = []
    for night in range(4):
        for i in range(3):
            buf.add(f"night {night} document {i} " * 30)
        files.append(str(buf.flush()))

    ray_cfg = load_config(overrides=[f"workspace.root={workspace.root}", "orchestration.task_runner=ray", "curation.workers=2"])
    threads_cfg = load_config(overrides=[f"workspace.root={workspace.root}", "curation.workers=2"])
    assert type(shard_task_runner(ray_cfg)).__name__ == "RayTaskRunner"

    @flow
    def ingest(cfg) -> list[dict]:
        return map_over(inspect_buffer_file, cfg, path=files)

    on_ray = ingest(ray_cfg)
    on_threads = ingest(threads_cfg)
    assert [r["content_hash"] for r in on_ray] == [content_hash(f) for f in files]
    assert on_ray == on_threads
    assert all(r["rows"] == 3 for r in on_ray)
    import ray

    if ray.is_initialized():
        assert ray.cluster_resources().get("CPU") == 2
        ray.shutdown()
