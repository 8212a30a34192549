"""The per-shard stage on Ray (prefect-ray): a local Ray of 2 CPUs, inside a flow run, gives the
same content hashes as the thread pool."""

from __future__ import annotations


import pytest

pytest_plugins = ["prefect_fixtures"]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_ingest_maps_over_buffer_files_on_ray(workspace, prefect_harness):
    from prefect import flow

    from flows.runtime import map_over, shard_task_runner
    from lib.buffer.store import Buffer
    from lib.buffer.records import content_hash
    from lib.config import load_config
    from tasks.data import inspect_buffer_file

    buf = Buffer(workspace.buffers, flush_size=10)
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


def test_curation_shards_on_ray_match_threads(tmp_path, prefect_harness):
    """The curate flow with task_runner=ray (2 local CPUs, 2 shards) keeps exactly the documents
    the thread runner keeps from the same buffer files."""
    import pyarrow.parquet as pq

    from flows.curation import curate
    from lib.buffer.store import Buffer
    from lib.config import load_config
    from lib.workspace import Workspace

    kept = {}
    for runner in ("ray", "threads"):
        ws = Workspace(tmp_path / runner).ensure()
        buf = Buffer(ws.buffers, flush_size=100)
        for night in range(3):
            for i in range(4):
                w = ["copper", "timber", "granite", "cotton", "marble", "amber", "cobalt", "linen", "basalt", "walnut",
                     "silver", "quartz"][night * 4 + i]
                buf.add(f"Shift {night}: the operator of line {i} reported that the {w} conveyor ran smoothly "
                        f"all day and that the spare {w} belts were counted twice before the evening {w} handover.")
            buf.add("Shift 0: the operator of line 0 reported that the copper conveyor ran smoothly all day and "
                    "that the spare copper belts were counted twice before the evening copper handover.")  # a copy
            buf.flush()
        over = [f"workspace.root={ws.root}", "curation.workers=2", "curation.shards=2"]
        cfg = load_config(preset="tiny", overrides=over + (["orchestration.task_runner=ray"] if runner == "ray" else []))
        out = curate(cfg)
        assert out["stats"]["shards"] == 2
        kept[runner] = sorted(r["text"] for p in Workspace(ws.root).run(out["run_id"]).curated.glob("part-*.parquet")
                              for r in pq.read_table(p, columns=["text"]).to_pylist())
        assert out["stats"]["exact"]["dropped_within_night"] == 3
    assert len(kept["ray"]) == 12 and kept["ray"] == kept["threads"]
    import ray

    if ray.is_initialized():
        ray.shutdown()
