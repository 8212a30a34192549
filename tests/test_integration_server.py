"""Against a REAL Prefect server on loopback (sqlite, temporary PREFECT_HOME): deploy from
deployments/prefect.yaml to a process work pool built from our template, start a worker, trigger
runs, and check what the registry says afterwards.

- two triggers at once: the second waits in AwaitingConcurrencySlot while the first runs
  (deployment concurrency limit 1, ENQUEUE), then completes;
- the run records a champion in lineage;
- a re-run with the same inputs takes the tokenizer and data stages from the cache (Cached).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).parent / "prefect")

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false",
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port),
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PREFECT_PROFILES_PATH", None)
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api = env["PREFECT_API_URL"]
    deadline = time.monotonic() + 240
    while True:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"prefect server did not start:\n{(home / 'server.log').read_text()[-3000:]}")
        time.sleep(1)
    yield {"api": api, "env": env, "home": home}
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


def _cli(env, *args, cwd=ROOT, timeout=300):
    proc = subprocess.run([PREFECT, "--no-prompt", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"prefect {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _deploy(env, name):
    """`prefect deploy --name NAME` with deployments/prefect.yaml. After creating the deployment,
    prefect 3.8.8's CLI lists the pool's workers with `limit: null`, which this server (fastapi
    0.154) answers with 422; that informational call alone is tolerated, the deployment itself
    is checked through the API by the caller."""
    proc = subprocess.run([PREFECT, "--no-prompt", "deploy", "--name", name, "--prefect-file",
                           str(ROOT / "deployments" / "prefect.yaml")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        assert "workers/filter" in out and "422" in out, out[-4000:]


def _post(api, path, body=None):
    r = httpx.post(f"{api}/{path}", json=body or {}, timeout=30)
    r.raise_for_status()
    return r.json()


def _get(api, path):
    r = httpx.get(f"{api}/{path}", timeout=30)
    r.raise_for_status()
    return r.json()


def _wait_final(api, run_id, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _get(api, f"flow_runs/{run_id}")["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return state
        time.sleep(2)
    raise TimeoutError(f"flow run {run_id} did not finish in {timeout} s")


def _task_states(api, run_id) -> dict[str, list[str]]:
    runs = _post(api, "task_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}, "limit": 200, "offset": 0})
    out: dict[str, list[str]] = {}
    for tr in runs:
        out.setdefault(tr["name"].rsplit("-", 1)[0], []).append(tr["state"]["name"])
    return out


def _create_pools(api, env):
    """deployments/create-pools.sh, as compose's `pools` service runs it: both pools get our
    template, also when a pool already exists with Prefect's default one (a worker that started
    first) and when the script runs again."""
    template = json.loads((ROOT / "deployments" / "work-pools" / "process.json").read_text())
    env = {**env, "PATH": f"{Path(PREFECT).parent}{os.pathsep}{env.get('PATH', '')}"}
    _cli(env, "work-pool", "create", "consolidation-cpu", "--type", "process")  # the default template
    assert _get(api, "work_pools/consolidation-cpu")["base_job_template"] != template
    for _ in range(2):
        proc = subprocess.run(["sh", str(ROOT / "deployments" / "create-pools.sh")], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("consolidation-cpu", "consolidation-gpu"):
        pool = _get(api, f"work_pools/{name}")
        assert pool["type"] == "process" and pool["base_job_template"] == template, name
    bad = subprocess.run(["sh", str(ROOT / "deployments" / "create-pools.sh")], env={**env, "GPU_POOL_TYPE": "slurm"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "GPU_POOL_TYPE must be" in bad.stderr


def test_deployment_on_a_real_server(server, tmp_path):
    from lib.config import load_config
    from lib.lineage import Lineage
    from lib.workspace import Workspace

    api, env = server["api"], {**server["env"], "CONSOLIDATION_WORKSPACE": str(tmp_path / "ws")}
    _create_pools(api, env)
    for name in ("bootstrap", "manual", "train"):
        _deploy(env, name)
    dep = _get(api, "deployments/name/bootstrap/bootstrap")
    assert dep["concurrency_limit"] == 1 or (dep.get("global_concurrency_limit") or {}).get("limit") == 1
    assert dep["parameters"]["cfg"]["workspace"]["root"] == str(tmp_path / "ws")
    manual = _get(api, "deployments/name/nightly-consolidation/manual")
    assert not manual.get("schedules")

    cfg = load_config(preset="tiny", overrides=[f"workspace.root={tmp_path / 'ws'}", "model.pretrain_iterations=6",
                                                "model.num_layers=2", "curation.workers=1"])
    params = {"cfg": json.loads(cfg.model_dump_json())}
    worker_log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "consolidation-cpu", "--type", "process"],
                              env=env, cwd=ROOT, stdout=worker_log, stderr=subprocess.STDOUT, start_new_session=True)
    # the "GPU" pool is a second process pool here: what matters is the hand-off via run_deployment
    gpu_worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "consolidation-gpu", "--type", "process"],
                                  env=env, cwd=ROOT, stdout=worker_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        first = _post(api, f"deployments/{dep['id']}/create_flow_run", {"parameters": params})["id"]
        second = _post(api, f"deployments/{dep['id']}/create_flow_run", {"parameters": params})["id"]
        saw_waiting = False
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            a = _get(api, f"flow_runs/{first}")["state"]
            b = _get(api, f"flow_runs/{second}")["state"]
            assert not (a["type"] == "RUNNING" and b["type"] == "RUNNING"), "two runs of the deployment ran at once"
            if b["name"] == "AwaitingConcurrencySlot" or a["name"] == "AwaitingConcurrencySlot":
                saw_waiting = True
            if a["type"] == "COMPLETED" and b["type"] == "COMPLETED":
                break
            assert a["type"] not in ("FAILED", "CRASHED") and b["type"] not in ("FAILED", "CRASHED"), (a, b, (tmp_path / "worker.log").read_text()[-4000:])
            time.sleep(1)
        else:
            raise TimeoutError((tmp_path / "worker.log").read_text()[-4000:])
        assert saw_waiting, "the second trigger never waited for the deployment's slot"

        ws = Workspace(tmp_path / "ws")
        lin = Lineage(ws.lineage_db)
        assert lin.alias("champion") == "v0"
        states = {r: _task_states(api, r) for r in (first, second)}
        trained = [r for r, s in states.items() if "train" in s]
        assert len(trained) == 1, states  # the run that waited found the champion and trained nothing

        # Same inputs again on a fresh registry: the data stages come from the workspace cache;
        # training this time goes through the `train` deployment on the other pool.
        shutil.rmtree(ws.checkpoints)
        ws.lineage_db.unlink()
        remote = json.loads(cfg.model_copy(update={"orchestration": cfg.orchestration.model_copy(
            update={"train_deployment": "train/train"})}).model_dump_json())
        third = _post(api, f"deployments/{dep['id']}/create_flow_run", {"parameters": {"cfg": remote}})["id"]
        state = _wait_final(api, third)
        assert state["type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]
        again = _task_states(api, third)
        assert again["train-tokenizer"] == ["Cached"] and again["prepare-training-data"] == ["Cached"], again
        assert "train" not in again  # not inline: a flow run of the train deployment did it
        train_dep = _get(api, "deployments/name/train/train")
        train_runs = _post(api, "flow_runs/filter", {"deployments": {"id": {"any_": [train_dep["id"]]}}, "limit": 10, "offset": 0})
        assert [r["state"]["type"] for r in train_runs] == ["COMPLETED"]
        assert _task_states(api, train_runs[0]["id"])["train"] == ["Completed"]
        assert Lineage(ws.lineage_db).alias("champion") == "v0"

        # The manual deployment (the nightly flow): curate the demo buffer, train, gate → v1.
        night_cfg = json.loads(cfg.model_copy(update={
            "training": cfg.training.model_copy(update={"num_iterations": 4}),
            "eval": cfg.eval.model_copy(update={"max_docs": 8})}).model_dump_json())
        night = _post(api, f"deployments/{manual['id']}/create_flow_run", {"parameters": {"cfg": night_cfg}})["id"]
        state = _wait_final(api, night)
        assert state["type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]
        lin = Lineage(ws.lineage_db)
        v1 = lin.get_version("v1")
        assert v1 is not None and v1["parent"] == "v0" and v1["status"] in ("accepted", "rejected")
        assert lin.gate_decisions("v1") and lin.get_run(v1["run_id"])["flow_run_id"] == night
        assert {"ingest-shard", "dedup-shards", "filter-shard", "prepare-training-data", "train", "evaluate", "gate-and-promote"} <= set(_task_states(api, night))
    finally:
        os.killpg(gpu_worker.pid, 15)
        os.killpg(worker.pid, 15)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, 9)
