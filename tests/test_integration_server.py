"""Against a REAL Prefect server on loopback (sqlite, temporary PREFECT_HOME), as a user runs it:
the pools of deployments/create-pools.sh, `prefect deploy --all` of deployments/prefect.yaml, a
process worker per pool, runs triggered through the API, the CLI and the scheduler.

- `deploy --all` exits 0 and creates every deployment of prefect.yaml; the nightly cron gets its
  upcoming runs from the scheduler service, which logs no error;
- the CLI lists deployments, work pools, flow runs and artifacts (no 422);
- two triggers at once on a plain worker: the second waits in AwaitingConcurrencySlot
  (deployment limit 1, ENQUEUE), then completes; the run records a champion;
- a re-run with the same inputs takes the tokenizer and data stages from the cache (Cached);
- a night on the manual deployment records v1 with its own artifacts (training curve, plot);
- with the pipeline's worker (deployments/worker.sh, --limit 1) a run triggered while a night
  runs waits without "Aborted submission" in the worker log; it is a night at the full-size
  preset, which then fails in its first seconds with the pre-flight reason in its state message;
- `prefect deployment run evaluate/evaluate` (a single stage) completes and previews the gate;
- `prefect deployment run curate/curate` (the other single stage) curates a new buffer file
  (registered pending, its copy dropped) and quarantines a torn one, with the reason in lineage;
- a short interval schedule added to the nightly deployment becomes a run the worker executes to
  Completed with the deployment's own parameters (tiny preset);
- SIGTERM to the GPU worker mid-training stops it in seconds (under 20 s): the run Crashed,
  torchrun gone, its snapshot written.
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

from conftest import settled_task_states

ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).parent / "prefect")

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# Buffer documents for the curate deployment: English prose the language filter keeps.
CURATE_TEXTS = [
    "The harbour master wrote in the evening log that the tide came in two hours late, so the ferry to the island "
    "left at nine instead of seven and the fishermen waited on the quay with their nets.",
    "In the orchard behind the old school the apple trees were pruned in February, and by late summer the branches "
    "bent so low under the fruit that the children could pick it without a ladder.",
    "The committee agreed that the library would stay open on Sunday afternoons through the winter, provided that "
    "two volunteers could be found each week to help at the lending desk.",
    "After the storm the road over the pass was closed for three days while crews cleared the fallen rocks, and the "
    "village shop ran out of bread, milk and candles on the second morning.",
]


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
           "TOKENIZERS_PARALLELISM": "false", "COLUMNS": "200",
           # the workers' logs are read below (submissions, "Aborted submission"): INFO, whatever
           # level other test modules set for their in-process flows (tests/prefect_fixtures.py)
           "PREFECT_LOGGING_LEVEL": "INFO",
           # the scheduler looks for due schedules every 5 s instead of 60 (the test's short schedule)
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5"}
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


def _request(method, url, **kw):
    """One API call, retried on 503 and on a read timeout as Prefect's own client does: the SQLite
    server answers 503, or nothing for a while, while its database is locked by a busy run's writes
    (a fresh-clone run once timed out after 30 s here with two workers and a night writing)."""
    for attempt in range(8):
        try:
            r = httpx.request(method, url, timeout=30, **kw)
        except httpx.TimeoutException:
            if attempt == 7:
                raise
            time.sleep(0.5 * 2 ** min(attempt, 4))
            continue
        if r.status_code != 503:
            break
        time.sleep(0.5 * 2 ** min(attempt, 4))
    r.raise_for_status()
    return r.json() if r.content else None


def _post(api, path, body=None):
    return _request("POST", f"{api}/{path}", json=body or {})


def _get(api, path):
    return _request("GET", f"{api}/{path}")


def _wait_final(api, run_id, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _get(api, f"flow_runs/{run_id}")["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return state
        time.sleep(2)
    raise TimeoutError(f"flow run {run_id} did not finish in {timeout} s")


def _task_states(api, run_id) -> dict[str, list[str]]:
    def read() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for tr in _post(api, "task_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}, "limit": 200, "offset": 0}):
            out.setdefault(tr["name"].rsplit("-", 1)[0], []).append((tr["state"] or {}).get("name", "Pending"))  # no state yet
        return out

    return settled_task_states(read)


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


def _deploy_all(api, env) -> dict[str, dict]:
    """`prefect deploy --all` exits 0 and every deployment of prefect.yaml exists, by
    'flow/deployment' name."""
    import yaml

    _cli(env, "deploy", "--all", "--prefect-file", str(ROOT / "deployments" / "prefect.yaml"))
    spec = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    flows = {f["id"]: f["name"] for f in _post(api, "flows/filter", {"limit": 100, "offset": 0})}
    deployed = {f"{flows[d['flow_id']]}/{d['name']}": d for d in _post(api, "deployments/filter", {"limit": 100, "offset": 0})}
    assert sorted(n.split("/")[1] for n in deployed) == sorted(d["name"] for d in spec["deployments"]), deployed.keys()
    return deployed


def _scheduled(api, deployment_id) -> list[dict]:
    return _post(api, "flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}},
                                            "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}, "limit": 50, "offset": 0})


def _lists(env, deployed) -> None:
    """The everyday listing commands, in JSON: they answered 422 (limit: None) with a newer FastAPI
    (flow runs and artifacts are listed after the night, below)."""
    names = {f"{d['name']}" for d in json.loads(_cli(env, "deployment", "ls", "-o", "json"))}
    assert names == {n.split("/")[1] for n in deployed}, names
    assert {p["name"] for p in json.loads(_cli(env, "work-pool", "ls", "-o", "json"))} >= {"consolidation-cpu", "consolidation-gpu"}


def _worker_log(tmp_path, name="worker.log") -> str:
    return (tmp_path / name).read_text()


def _start(cmd, env, log):
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc, timeout=60) -> float:
    """SIGTERM to the worker process (as `docker compose stop` sends it); seconds until it exited."""
    t0 = time.monotonic()
    if proc.poll() is None:
        os.kill(proc.pid, 15)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)
    return time.monotonic() - t0


def test_deployment_on_a_real_server(server, tmp_path):
    from lib.config import load_config
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    api, env = server["api"], {**server["env"], "CONSOLIDATION_WORKSPACE": str(tmp_path / "ws")}
    t0 = time.monotonic()
    _create_pools(api, env)
    deployed = _deploy_all(api, env)
    dep, manual = deployed["bootstrap/bootstrap"], deployed["nightly-consolidation/manual"]
    assert dep["concurrency_limit"] == 1 or (dep.get("global_concurrency_limit") or {}).get("limit") == 1
    assert dep["parameters"]["cfg"] == {"preset": "tiny", "workspace": {"root": str(tmp_path / "ws")}}
    assert not manual.get("schedules") and manual["parameters"]["cfg"]["preset"] == "tiny"
    gpu_night = deployed["nightly-consolidation/nightly-gpu"]
    assert gpu_night["parameters"]["cfg"]["preset"] == "default"
    assert gpu_night["parameters"]["cfg"]["orchestration"] == {"train_deployment": "train/train"}
    # the scheduler service fills the nightly cron's upcoming runs (SQLAlchemy 2.1 broke it)
    nightly = deployed["nightly-consolidation/nightly"]
    deadline = time.monotonic() + 60
    while not _scheduled(api, nightly["id"]) and time.monotonic() < deadline:
        time.sleep(1)
    upcoming = _scheduled(api, nightly["id"])
    assert upcoming and all(r["auto_scheduled"] and r["expected_start_time"][11:16] == "02:00" for r in upcoming), upcoming
    assert not _scheduled(api, gpu_night["id"])  # its schedule is off until a GPU host turns it on
    _lists(env, deployed)
    print(f"deploy --all, scheduler, CLI lists: {time.monotonic() - t0:.0f} s")

    cfg = load_config(preset="tiny", overrides=[f"workspace.root={tmp_path / 'ws'}", "model.pretrain_iterations=6",
                                                "model.num_layers=2", "curation.workers=1"])
    params = {"cfg": json.loads(cfg.model_dump_json())}
    env = {**env, "PATH": f"{Path(PREFECT).parent}{os.pathsep}{env.get('PATH', '')}"}
    # first a plain worker, which proposes every due run: the deployment limit's ENQUEUE shows
    worker = _start([PREFECT, "worker", "start", "--pool", "consolidation-cpu", "--type", "process"], env,
                    open(tmp_path / "worker.log", "w"))
    # the "GPU" pool is a second process pool here: what matters is the hand-off via run_deployment
    gpu_worker = _start(["sh", str(ROOT / "deployments" / "worker.sh"), "consolidation-gpu"], env, open(tmp_path / "gpu-worker.log", "w"))
    try:
        t1 = time.monotonic()
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
            assert a["type"] not in ("FAILED", "CRASHED") and b["type"] not in ("FAILED", "CRASHED"), (a, b, _worker_log(tmp_path)[-4000:])
            time.sleep(1)
        else:
            raise TimeoutError(_worker_log(tmp_path)[-4000:])
        assert saw_waiting, "the second trigger never waited for the deployment's slot"

        ws = Workspace(tmp_path / "ws")
        lin = Lineage(ws.lineage_db)
        assert lin.alias("champion") == "v0"
        states = {r: _task_states(api, r) for r in (first, second)}
        trained = [r for r, s in states.items() if "train" in s]
        assert len(trained) == 1, states  # the run that waited found the champion and trained nothing
        print(f"two bootstraps, one waiting: {time.monotonic() - t1:.0f} s")

        # Same inputs again on a fresh registry: the data stages come from the workspace cache;
        # training this time goes through the `train` deployment on the other pool.
        t1 = time.monotonic()
        shutil.rmtree(ws.checkpoints)
        ws.lineage_db.unlink()
        remote = json.loads(cfg.model_copy(update={"orchestration": cfg.orchestration.model_copy(
            update={"train_deployment": "train/train"})}).model_dump_json())
        third = _post(api, f"deployments/{dep['id']}/create_flow_run", {"parameters": {"cfg": remote}})["id"]
        state = _wait_final(api, third)
        assert state["type"] == "COMPLETED", _worker_log(tmp_path)[-4000:]
        again = _task_states(api, third)
        assert again["train-tokenizer"] == ["Cached"] and again["prepare-training-data"] == ["Cached"], again
        assert "train" not in again  # not inline: a flow run of the train deployment did it
        train_runs = _post(api, "flow_runs/filter", {"deployments": {"id": {"any_": [deployed["train/train"]["id"]]}}, "limit": 10, "offset": 0})
        assert [r["state"]["type"] for r in train_runs] == ["COMPLETED"]
        assert _task_states(api, train_runs[0]["id"])["train"] == ["Completed"]
        assert Lineage(ws.lineage_db).alias("champion") == "v0"
        print(f"bootstrap with training on the other pool: {time.monotonic() - t1:.0f} s")

        # From here on the pipeline's own worker: one run at a time, quiet while another waits.
        _stop(worker)
        worker = _start(["sh", str(ROOT / "deployments" / "worker.sh"), "consolidation-cpu"], env, open(tmp_path / "worker2.log", "w"))

        # The manual deployment (the nightly flow): curate the demo buffer, train, gate → v1,
        # accepted (the gate is opened wide so that the buffers are consumed).
        t1 = time.monotonic()
        night_cfg = json.loads(cfg.model_copy(update={
            "training": cfg.training.model_copy(update={"num_iterations": 4}),
            "eval": cfg.eval.model_copy(update={"max_docs": 8}),
            "gate": cfg.gate.model_copy(update={"max_forgetting": 1.0, "min_acquisition": -1.0})}).model_dump_json())
        night = _post(api, f"deployments/{manual['id']}/create_flow_run", {"parameters": {"cfg": night_cfg}})["id"]
        while _get(api, f"flow_runs/{night}")["state"]["type"] in ("SCHEDULED", "PENDING"):
            time.sleep(1)
        # a second trigger while the night runs: the full-size preset on this tiny champion
        full = _post(api, f"deployments/{manual['id']}/create_flow_run",
                     {"parameters": {"cfg": {"preset": "default", "workspace": {"root": str(tmp_path / "ws")}}}})["id"]
        state = _wait_final(api, night)
        assert state["type"] == "COMPLETED", _worker_log(tmp_path, "worker2.log")[-4000:]
        lin = Lineage(ws.lineage_db)
        v1 = lin.get_version("v1")
        assert v1 is not None and v1["parent"] == "v0" and v1["status"] == "accepted"
        assert lin.gate_decisions("v1") and lin.get_run(v1["run_id"])["flow_run_id"] == night
        assert {"ingest-shard", "dedup-shards", "filter-shard", "prepare-training-data", "train", "evaluate", "gate-and-promote"} <= set(_task_states(api, night))
        # the night's own artifacts (not only its train subflow's): training curve, plot, gate, eval
        assert night in {r["id"] for r in json.loads(_cli(env, "flow-run", "ls", "--limit", "50", "-o", "json"))}
        listed = json.loads(_cli(env, "artifact", "ls", "-o", "json"))
        own = {a["key"]: a for a in listed if a.get("flow_run_id") == night}
        assert {"training-curve", "night-plot", "gate-decision", "eval-before-after"} <= set(own), sorted(own)
        plot = _get(api, f"artifacts/{own['night-plot']['latest_id']}")  # `artifact ls` lists each key's latest
        assert plot["type"] == "markdown" and "![night-plot](data:image/png;base64," in plot["data"]
        print(f"manual night: {time.monotonic() - t1:.0f} s")

        # The full-size trigger waited, then was refused in its first seconds, with the reason.
        t1 = time.monotonic()
        state = _wait_final(api, full)
        assert state["type"] == "FAILED" and "training.seq_len=2048 exceeds max_position_embeddings=256" in state["message"], state
        assert not _task_states(api, full)  # no stage ran
        print(f"pre-flight refusal: {time.monotonic() - t1:.0f} s")

        # A single stage from the CLI: evaluate v1 against its parent (curate alone: below).
        t1 = time.monotonic()
        small_eval = {"version": "v1", "cfg": {"preset": "tiny", "workspace": {"root": str(tmp_path / "ws")}, "eval": {"max_docs": 2}}}
        out = _cli(env, "deployment", "run", "evaluate/evaluate", "--params", json.dumps(small_eval), "--watch", "--watch-interval", "2")
        assert "Completed" in out, out[-2000:]
        ran = _post(api, "flow_runs/filter", {"deployments": {"id": {"any_": [deployed["evaluate/evaluate"]["id"]]}}, "limit": 5, "offset": 0})
        assert [r["state"]["type"] for r in ran] == ["COMPLETED"] and "preview-gate" in _task_states(api, ran[0]["id"])
        print(f"evaluate deployment: {time.monotonic() - t1:.0f} s")

        # A short schedule on the nightly deployment: the scheduler makes the run, the worker
        # executes it with the deployment's own parameters (tiny preset), nothing left to consolidate.
        t1 = time.monotonic()
        anchor = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 20))  # the CLI call takes a few s
        _cli(env, "deployment", "schedule", "create", "nightly-consolidation/nightly", "--interval", "30", "--anchor-date", anchor)
        deadline = time.monotonic() + 300
        scheduled = None
        while scheduled is None and time.monotonic() < deadline:  # the deployment's first run to end
            done = _post(api, "flow_runs/filter", {"deployments": {"id": {"any_": [nightly["id"]]}}, "limit": 5, "offset": 0,
                                                   "flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}}})
            scheduled = done[0] if done else None
            time.sleep(2)
        assert scheduled is not None, _worker_log(tmp_path, "worker2.log")[-4000:]
        for schedule in _get(api, f"deployments/{nightly['id']}")["schedules"]:  # done with it
            if schedule["schedule"].get("interval"):
                _request("DELETE", f"{api}/deployments/{nightly['id']}/schedules/{schedule['id']}")
        assert scheduled["auto_scheduled"] and scheduled["state"]["type"] == "COMPLETED", (scheduled["state"], _worker_log(tmp_path, "worker2.log")[-4000:])
        assert scheduled["parameters"]["cfg"]["preset"] == "tiny"
        print(f"scheduled night: {time.monotonic() - t1:.0f} s")

        # Curation alone, as the docs run it: `prefect deployment run curate/curate` with the
        # deployment's own parameters (tiny preset), on a new buffer file and a torn one.
        t1 = time.monotonic()
        from lib.buffer.store import Buffer

        known = {b.content_hash for b in Lineage(ws.lineage_db).buffer_files()}
        buf = Buffer(ws.buffers, flush_size=100)
        for text in CURATE_TEXTS + CURATE_TEXTS[:1]:  # one exact copy
            buf.add(text)
        buf.flush()
        (ws.buffers / "torn.parquet").write_bytes(b"PAR1 not a parquet file")
        out = _cli(env, "deployment", "run", "curate/curate", "--watch", "--watch-interval", "2")
        assert "Completed" in out, out[-2000:]
        [curated] = _post(api, "flow_runs/filter", {"deployments": {"id": {"any_": [deployed["curate/curate"]["id"]]}}, "limit": 5, "offset": 0})
        assert curated["state"]["type"] == "COMPLETED" and {"ingest-shard", "dedup-shards", "filter-shard"} <= set(_task_states(api, curated["id"]))
        files = {Path(b.path).name: b for b in Lineage(ws.lineage_db).buffer_files() if b.content_hash not in known}
        assert sorted(b.status for b in files.values()) == ["pending", "quarantined"], files  # registered, not consumed
        assert files["torn.parquet"].reason.startswith("ArrowInvalid") and (ws.quarantine / "torn.parquet.reason.json").is_file()
        [run_dir] = list(ws.runs.glob("curate-*"))
        stats = json.loads((run_dir / "curated" / "stats.json").read_text())
        assert (stats["docs_in"], stats["exact"]["dropped_within_night"], stats["docs_out"]) == (5, 1, 4), stats
        print(f"curate deployment: {time.monotonic() - t1:.0f} s")

        # A quiet worker: the run that waited for the night was never proposed and refused.
        log = _worker_log(tmp_path, "worker2.log")
        events = [line for line in log.splitlines() if "Aborted submission" in line or "submitting flow run" in line
                  or "Finished in state" in line and "Flow run" in line]
        assert full in log, "the waiting run never ran on the worker"
        assert "Aborted submission" not in log, "\n".join(events)
        assert "bulk DML" not in (server["home"] / "server.log").read_text()

        # SIGTERM to a worker mid-training (deployments/worker.sh): it stops in seconds, the run is
        # marked Crashed, the trainer writes its snapshot, nothing keeps running.
        t1 = time.monotonic()
        long_cfg = json.loads(cfg.model_copy(update={"training": cfg.training.model_copy(
            update={"num_iterations": 5000, "snapshot_every": 5000})}).model_dump_json())
        out_dir, train_dir = ws.checkpoints / "stopped", tmp_path / "stopped-train"
        request = {"cfg": long_cfg, "data_dir": str(ws.run(v1["run_id"]).path),
                   "out_dir": str(out_dir), "train_dir": str(train_dir), "parent": str(ws.checkpoints / "v0")}
        stopped = _post(api, f"deployments/{deployed['train/train']['id']}/create_flow_run", {"parameters": {"request": request}})["id"]
        deadline = time.monotonic() + 300
        while not ((train_dir / "metrics.jsonl").is_file() and (train_dir / "metrics.jsonl").read_text().strip()):
            assert time.monotonic() < deadline and _get(api, f"flow_runs/{stopped}")["state"]["type"] in ("SCHEDULED", "PENDING", "RUNNING"), \
                _worker_log(tmp_path, "gpu-worker.log")[-3000:]
            time.sleep(1)
        took = _stop(gpu_worker, timeout=120)
        state = _get(api, f"flow_runs/{stopped}")["state"]
        # measured: 7-8 s for the tiny model's snapshot on the 2 loaded cores (load 9-10)
        assert took < 20 and state["type"] == "CRASHED", (took, state, _worker_log(tmp_path, "gpu-worker.log")[-3000:])
        assert list((train_dir / "snapshots").glob("step-*")), "no snapshot written on the way out"
        alive = subprocess.run(["pgrep", "-f", str(out_dir)], capture_output=True, text=True).stdout.split()
        assert not alive, f"training processes left running: {alive}"
        print(f"worker stopped mid-training in {took:.0f} s ({time.monotonic() - t1:.0f} s with the training's start)")
    finally:
        for proc in (gpu_worker, worker):
            _stop(proc)
