"""The memory through real nights (tiny preset, real trainer, Prefect test harness): night 1 is
accepted and remembered; night 2, trained at a high learning rate on a single repeated text with
no memory replay, damages what night 1 taught. The retention rule rejects it naming night 1, and
with `gate.retry_on_forgetting` the night is retried once with safer settings, both attempts in
lineage and the buffer files consumed by an accepted attempt only."""

from __future__ import annotations

import os

import pytest

from conftest import site_packages

pytest_plugins = ["prefect_fixtures"]

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


def _cfg(ws_root, *extra):
    from lib.config import load_config

    return load_config(preset="tiny", overrides=[
        f"workspace.root={ws_root}", "model.pretrain_iterations=15", "model.num_layers=2", "curation.workers=2",
        "training.snapshot_every=50", "training.num_iterations=8", "eval.max_docs=8", *extra])


def _package_texts(name: str, limit: int) -> list[str]:
    texts = []
    for path in sorted((site_packages() / name).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if 800 <= len(text) <= 20000:
            texts.append(text)
        if len(texts) == limit:
            break
    return texts


def _buffer(ws, texts: list[str]) -> None:
    from lib.buffer.store import Buffer

    buf = Buffer(ws.buffers)
    buf.add_many(texts)
    buf.flush()


@pytest.mark.slow
def test_retention_rejects_a_night_that_damages_night_one_and_the_retry_is_recorded(tmp_path, prefect_harness):
    from flows.bootstrap import bootstrap
    from flows.consolidate import nightly_consolidation
    from lib.registry.lineage import Lineage
    from lib.data.memory import RETENTION_PREFIX
    from lib.workspace import Workspace

    permissive = ["gate.min_acquisition=0", "gate.max_forgetting=10", "gate.max_cumulative_forgetting=10"]
    ws = Workspace(tmp_path / "ws")
    assert bootstrap(_cfg(ws.root))["version"] == "v0"

    # night 1: package sources, accepted and remembered (its held-out set is night:v1)
    _buffer(ws, _package_texts("pyarrow", 40))
    first = nightly_consolidation(_cfg(ws.root, *permissive))
    assert first["version"] == "v1" and first["status"] == "accepted", first.get("gate")
    lin = Lineage(ws.lineage_db)
    assert [n["version"] for n in lin.memory_nights()] == ["v1"] and (ws.memory / "v1" / "heldout.parquet").is_file()

    # night 2: one sentence over and over at 10x the learning rate, nothing remembered replayed
    _buffer(ws, [f"{i}: the pump room door stays shut. " * 60 for i in range(40)])
    night = nightly_consolidation(_cfg(ws.root, *permissive, "training.lr_scale=3.0", "sampling.memory_ratio=0",
                                       "sampling.new_data_ratio=0.5", "gate.retry_on_forgetting=true"))

    night2_files = {b.content_hash for b in lin.run_inputs(night["run_id"])}
    assert night2_files and not night2_files & {b.content_hash for b in lin.run_inputs(first["run_id"])}

    # the first attempt: rejected by the retention rule, which names night 1 and its figures
    decision = lin.gate_decisions("v2")[-1]
    rules = {r["name"]: r for r in decision["rules"]}
    assert rules["retention"]["passed"] is False, rules
    assert "the night of v1" in rules["retention"]["reason"] and rules["retention"]["measured"] > 0.02
    assert lin.get_version("v2")["status"] == "rejected"
    assert f"{RETENTION_PREFIX}v1" in lin.metrics("v2", night["run_id"])  # the champion and candidate both measured on it
    assert f"{RETENTION_PREFIX}v1" in lin.metrics("v1", night["run_id"])

    # the retry: its own run, safer settings, the same buffer files, parent still the champion v1
    retry = night["retry"]
    assert retry["run_id"] == night["run_id"] + "-retry1" and retry["version"] == "v3"
    assert night["version"] == "v3" and night["status"] == retry["status"]
    retry_run = lin.get_run(retry["run_id"])
    assert retry_run["status"] == "completed" and retry_run["parent"] == "v1"
    assert lin.get_run(night["run_id"])["status"] == "completed"  # both attempts recorded, both closed
    assert retry_run["config"]["training"]["lr_scale"] == pytest.approx(1.5)
    assert retry_run["config"]["sampling"]["new_data_ratio"] == pytest.approx(0.25)
    assert {b.content_hash for b in lin.run_inputs(retry["run_id"])} == night2_files
    assert lin.get_version("v3")["parent"] == "v1"

    # buffers consumed only by an accepted attempt, never by the rejected first one
    consumed = {b.content_hash: b.consumed_by for b in lin.buffer_files() if b.content_hash in night2_files}
    if retry["status"] == "accepted":
        assert set(consumed.values()) == {"v3"} and lin.alias("champion") == "v3"
    else:
        assert all(b.status == "pending" for b in lin.buffer_files() if b.content_hash in night2_files)
        assert lin.alias("champion") == "v1" and [n["version"] for n in lin.memory_nights()] == ["v1"]
