"""Flows on a temporary Prefect API (one harness per session): bootstrap to a champion v0 with
the real trainer, artifacts with stable keys, and a re-run that reuses the cached data stages."""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import settled_task_states

pytest_plugins = ["prefect_fixtures"]

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


def _tiny(ws_root, *extra):
    from lib.config import load_config

    return load_config(preset="tiny", overrides=[
        f"workspace.root={ws_root}", "model.pretrain_iterations=6", "model.num_layers=2",
        "curation.workers=2", "training.snapshot_every=50", *extra])


def _api(path: str, body: dict) -> list[dict]:
    """POST a filter to the harness API directly (the 3.8.8 client sends nulls this server refuses)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    r = httpx.post(f"{PREFECT_API_URL.value()}/{path}", json={"limit": 200, "offset": 0, **body}, timeout=30)
    r.raise_for_status()
    return r.json()


def _artifact(key: str) -> dict | None:
    found = _api("artifacts/filter", {"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC"})
    return found[0] if found else None


def _task_states(flow_run_id) -> dict[str, list[str]]:
    def read() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for tr in _api("task_runs/filter", {"flow_runs": {"id": {"any_": [str(flow_run_id)]}}}):
            out.setdefault(tr["name"].rsplit("-", 1)[0], []).append((tr["state"] or {}).get("name", "Pending"))  # no state yet
        return out

    return settled_task_states(read)


@pytest.mark.slow
def test_bootstrap_flow_pretrains_v0_and_rerun_hits_the_cache(tmp_path, prefect_client):
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace
    from flows.bootstrap import bootstrap

    cfg = _tiny(tmp_path / "ws")
    ws = Workspace(cfg.workspace.root)
    state = bootstrap(cfg, return_state=True)
    assert state.is_completed(), state
    result = state.result()
    assert result["version"] == "v0" and result["status"] == "pre-trained"
    lin = Lineage(ws.lineage_db)
    assert lin.alias("champion") == "v0" and lin.get_version("v0")["status"] == "accepted"
    assert (ws.checkpoint("v0") / "config.json").is_file() and (ws.checkpoint("v0") / "meta.json").is_file()
    assert lin.get_run(result["run_id"])["status"] == "completed"
    assert set(result["timings"]) >= {"tokenizer", "prepare", "train", "record"}

    for key in ("tokenizer", "manifest-stats", "training-progress", "training-summary", "embedded-default"):
        assert _artifact(key) is not None, f"artifact {key!r} was not published"
    assert float(_artifact("training-progress")["data"]) == 100.0

    first = _task_states(state.state_details.flow_run_id)
    assert first["train-tokenizer"] == ["Completed"] and first["prepare-training-data"] == ["Completed"]

    # Same corpus, same config, a fresh registry: the data stages come from the cache.
    shutil.rmtree(ws.checkpoints)
    ws.lineage_db.unlink()
    again = bootstrap(cfg, return_state=True)
    assert again.is_completed(), again
    second = _task_states(again.state_details.flow_run_id)
    assert second["train-tokenizer"] == ["Cached"] and second["prepare-training-data"] == ["Cached"]
    assert second["train"] == ["Completed"]  # training is never cached
    run = ws.run(again.result()["run_id"])
    assert run.prepared.manifest.is_file() and run.prepared.data_json.is_file()  # cached outputs adopted


def test_bootstrap_is_idempotent_with_a_champion(tmp_path, prefect_harness):
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace
    from flows.bootstrap import bootstrap

    cfg = _tiny(tmp_path / "ws")
    ws = Workspace(cfg.workspace.root).ensure()
    (ws.checkpoints / "v7").mkdir()
    lin = Lineage(ws.lineage_db)
    lin.record_version("v7", ws.checkpoints / "v7", status="accepted")
    lin.set_alias("champion", "v7", "test", "a champion from elsewhere")
    out = bootstrap(cfg)
    assert out["version"] == "v7" and "nothing to pre-train" in out["status"]
    assert not list(ws.runs.glob("bootstrap-*"))


def test_nightly_refuses_without_a_champion(tmp_path, prefect_harness):
    from flows.consolidate import nightly_consolidation

    cfg = _tiny(tmp_path / "ws")
    state = nightly_consolidation(cfg, return_state=True)
    assert state.is_failed()
    with pytest.raises(ValueError, match="consolidate bootstrap"):
        state.result()


def test_a_night_that_cannot_fit_the_champion_fails_first_with_the_reason(tmp_path, prefect_harness):
    """The design's full sizes against a tiny champion: the state message names the field, before
    any stage (no task run, no lineage run)."""
    import json

    from flows.consolidate import nightly_consolidation
    from lib.config import load_config
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    ws = Workspace(tmp_path / "ws").ensure()
    (ws.checkpoints / "v0").mkdir(parents=True)
    (ws.checkpoints / "v0" / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    (ws.checkpoints / "v0" / "tokenizer.json").write_text("{}")
    lin = Lineage(ws.lineage_db)
    lin.record_version("v0", ws.checkpoints / "v0", status="accepted")
    lin.set_alias("champion", "v0", actor="test")
    state = nightly_consolidation(load_config(overrides=[f"workspace.root={ws.root}"]), return_state=True)
    assert state.is_failed()
    assert "training.seq_len=2048 exceeds max_position_embeddings=256" in state.message, state.message
    assert not _task_states(state.state_details.flow_run_id) and not lin.incomplete_runs("nightly")


def test_dead_nights_are_resumed_or_closed(workspace):
    """Under the night lock every night lineage calls running is dead: the oldest undecided one
    whose parent is still the champion is resumed; one whose champion moved is closed failed."""
    from lib.registry.runs import claim_version, resumable_night, trained_version
    from lib.registry.lineage import Lineage

    lin = Lineage(workspace.lineage_db)
    for v in ("v0", "v5"):
        (workspace.checkpoints / v).mkdir()
        lin.record_version(v, workspace.checkpoints / v, status="accepted")
    lin.set_alias("champion", "v0", "test")
    lin.start_run("night-a", kind="nightly", parent="v0")
    lin.start_run("night-b", kind="nightly", parent="v0")
    assert resumable_night(lin, "v0")["run_id"] == "night-a"  # the oldest first
    lin.record_version("v6", workspace.checkpoints / "v0", parent="v0", run_id="night-a", status="rejected")
    assert resumable_night(lin, "v0")["run_id"] == "night-b"  # decided: finished elsewhere, not resumed
    lin.set_alias("champion", "v5", "person", "promoted by hand")
    assert resumable_night(lin, "v5") is None  # continued v0, the champion moved on: closed
    assert lin.get_run("night-b")["status"] == "failed" and lin.get_run("night-a")["status"] == "running"

    # a version folder no lineage row knows (another night died between training and recording)
    # is stepped over, never taken for this night's
    (workspace.checkpoints / "v7").mkdir()
    (workspace.checkpoints / "v7" / "meta.json").write_text('{"run_id": "night-x", "final_metrics": {"steps": 3}}')
    assert claim_version(workspace, lin, "night-c") == "v8"
    assert claim_version(workspace, lin, "night-x") == "v7"
    assert claim_version(workspace, lin, "night-a") == "v6"  # its own, from lineage
    assert trained_version(workspace.checkpoints / "v7", "night-c") is None
    assert trained_version(workspace.checkpoints / "v7", "night-x")["final_metrics"] == {"steps": 3}
    assert trained_version(workspace.checkpoints / "v9") is None


@pytest.mark.slow
def test_nightly_flow_end_to_end_and_cached_rerun(tmp_path, prefect_harness):
    """bootstrap → a night that the gate rejects (acquisition rule set out of reach) → the same
    night again: its buffers are still pending, so curation and data preparation are Cached,
    training runs again and a new candidate is recorded."""
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace
    from flows.bootstrap import bootstrap
    from flows.consolidate import nightly_consolidation

    cfg = _tiny(tmp_path / "ws", "training.num_iterations=4", "eval.max_docs=8", "gate.min_acquisition=10")
    ws = Workspace(cfg.workspace.root)
    assert bootstrap(cfg)["version"] == "v0"
    from lib.buffer.store import Buffer

    buf = Buffer(ws.buffers)  # a second buffer file: curation maps over two shards
    buf.add_many([f"Conversation {i}: the user explained that the {w} valve in hall {i} is checked every "
                  f"morning before the pumps start, and that the log of each check is kept for a year."
                  for i, w in enumerate(["north", "south", "east", "west", "upper", "lower"])])
    buf.flush()
    state = nightly_consolidation(cfg, return_state=True)
    assert state.is_completed(), state
    night = state.result()
    assert night["version"] == "v1" and night["status"] == "rejected" and night["curated_docs"] > 0
    lin = Lineage(ws.lineage_db)
    assert lin.alias("champion") == "v0" and lin.get_version("v1")["status"] == "rejected"
    assert lin.get_run(night["run_id"])["status"] == "completed"
    assert {r["dataset"] for r in night["eval"]} >= {"old_val", "new_heldout"}
    assert lin.metrics("v1", night["run_id"]) and lin.gate_decisions("v1")
    assert any(b.status == "pending" for b in lin.buffer_files())  # rejected: buffers wait for the next night
    # kept for inspection, stored as a delta against v0 like an accepted version
    from lib.checkpoints.checkpoint import is_delta, verify

    assert lin.get_version("v1")["storage"] == "delta" and is_delta(lin.get_version("v1")["path"])
    assert verify(lin.get_version("v1")["path"]) == lin.get_version("v1")["digest"]
    for key in ("buffer-files", "curation-counts", "manifest-stats", "eval-before-after", "gate-decision", "training-progress",
                "eval-progress"):
        assert _artifact(key) is not None, key
    assert "acquisition" in _artifact("gate-decision")["data"]
    # evaluation's progress is one bar updated in place, not a table published again per set (one card per set in the UI)
    evals = _api("artifacts/filter", {"artifacts": {"key": {"any_": ["eval-progress"]}},
                                      "flow_runs": {"id": {"any_": [str(state.state_details.flow_run_id)]}}})
    assert len(evals) == 1 and evals[0]["type"] == "progress" and float(evals[0]["data"]) == 100.0
    retention = _artifact("retention-matrix")  # the lineage up to tonight's candidate, rejected or not
    assert retention is not None and '"version": "v1"' in retention["data"] and '"status": "rejected"' in retention["data"]
    # the night's own flow run carries its training curve and its plot (not only the train subflow)
    own = {a["key"]: a for a in _api("artifacts/filter", {"flow_runs": {"id": {"any_": [str(state.state_details.flow_run_id)]}}})}
    assert {"training-curve", "night-plot"} <= set(own), sorted(own)
    assert "loss at step 0" in own["training-curve"]["data"] and "tokens_per_s" in own["training-curve"]["data"]
    assert '"mfu"' in own["training-curve"]["data"]  # MFU per GPU after warm-up, shown with the night
    training = lin.metrics("v1", night["run_id"])["training"]  # and recorded with the version in lineage
    assert training["mfu"] > 0 and training["tokens_per_s"] > 0
    assert "](data:image/png;base64," in own["night-plot"]["data"] and (ws.run(night["run_id"]).path / "night.png").is_file()

    # the evaluation stage alone (the `evaluate` deployment): v1 against its parent, gate not applied
    from flows.evaluation import evaluate_version

    alone = evaluate_version(cfg, version="v1")
    assert alone["parent"] == "v0" and {r["dataset"] for r in alone["rows"]} >= {"old_val", "new_heldout"}
    assert alone["gate"]["passed"] is False and lin.get_version("v1")["status"] == "rejected"
    assert "not applied" in _artifact("gate-preview")["data"]

    again = nightly_consolidation(cfg, return_state=True)
    assert again.is_completed(), again
    states = _task_states(again.state_details.flow_run_id)
    shards = night["curation"]["shards"]
    # what makes docs_out differ from docs_in is in the result: long documents split, short ones grouped
    assert {"split_long", "concatenated_groups"} <= set(night["curation"])
    assert shards == 2 and states["ingest-shard"] == states["filter-shard"] == ["Cached"] * shards, states
    assert states["dedup-shards"] == ["Cached"] and states["prepare-training-data"] == ["Cached"], states
    # a tokenize task per input file (the corpus parts and the two curated parts), all in the token cache
    assert len(states["tokenize-file"]) >= 3 and set(states["tokenize-file"]) == {"Completed"}, states
    assert len([e for e in ws.token_cache.iterdir() if not e.name.startswith(".")]) >= len(states["tokenize-file"])
    assert states["train"] == ["Completed"]
    second = again.result()
    assert second["version"] == "v2" and second["run_id"] != night["run_id"]
    assert ws.run(second["run_id"]).prepared.manifest.is_file() and list(ws.run(second["run_id"]).curated.glob("*.parquet"))


def test_what_a_killed_night_left_running_is_marked_crashed(prefect_client):
    """A night killed outright (SIGKILL) leaves its train subflow and their tasks Running in the
    UI forever (the worker marks only the flow run it started); the night that finds it dead
    marks them Crashed, and leaves finished runs alone."""
    from prefect import flow, task
    from prefect.states import Completed, Crashed, Running

    from flows.runtime import crash_orphans

    @flow(name="ux-dead-night")
    def dead_night():
        pass

    @flow(name="ux-dead-train")
    def dead_train():
        pass

    @task(name="ux-train")
    def train_task():
        pass

    night = prefect_client.create_flow_run(dead_night, state=Crashed(message="Process exited with status code: -9"))
    wrapper = prefect_client.create_task_run(train_task, flow_run_id=night.id, dynamic_key="0", state=Running())
    done = prefect_client.create_task_run(train_task, flow_run_id=night.id, dynamic_key="1", state=Completed())
    sub = prefect_client.create_flow_run(dead_train, parent_task_run_id=wrapper.id, state=Running())
    inner = prefect_client.create_task_run(train_task, flow_run_id=sub.id, dynamic_key="2", state=Running())

    # a user's retry of the crashed flow run runs under the same id: the night calling is never marked
    retried = prefect_client.create_flow_run(dead_night, state=Running())
    own = prefect_client.create_task_run(train_task, flow_run_id=retried.id, dynamic_key="3", state=Running())
    assert crash_orphans([str(retried.id)], current=str(retried.id)) == []
    assert prefect_client.read_flow_run(retried.id).state_type.value == "RUNNING"
    assert prefect_client.read_task_run(own.id).state_type.value == "RUNNING"

    marked = crash_orphans([str(night.id), None])
    assert set(marked) == {str(wrapper.id), str(sub.id), str(inner.id)}
    assert prefect_client.read_flow_run(sub.id).state_type.value == "CRASHED"
    assert prefect_client.read_task_run(inner.id).state_type.value == "CRASHED"
    assert prefect_client.read_task_run(wrapper.id).state_type.value == "CRASHED"
    assert prefect_client.read_task_run(done.id).state_type.value == "COMPLETED"
    assert crash_orphans([str(night.id)]) == []  # nothing left to mark
