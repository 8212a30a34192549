"""One night through the real nightly flow with a benchmark in the gate: a tiny Llama adopted as
v0, a local lm-evaluation-harness task inside the workspace (`eval.benchmarks`), then the night:
the task scored on v0 and v1 and recorded in lineage, the `benchmarks` rule in the gate table,
the task's column in the retention matrix, the "benchmarks" Prefect artifact, v0's scores in the
eval cache for the next night."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hf_models import build_tiny_model
from test_adopt import replay_files
from test_adopt_night import _night_buffer
from test_benchmarks import write_gen_task, write_mc_task

pytest_plugins = ["prefect_fixtures"]
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


def _artifact(key: str) -> dict | None:
    import httpx
    from prefect.settings import PREFECT_API_URL

    r = httpx.post(f"{PREFECT_API_URL.value()}/artifacts/filter",
                   json={"limit": 5, "offset": 0, "artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC"}, timeout=30)
    r.raise_for_status()
    return (r.json() or [None])[0]


@pytest.mark.slow
def test_a_night_with_a_benchmark_in_the_gate(tmp_path, prefect_client, capsys):
    from flows.bootstrap import AdoptRequest, bootstrap
    from flows.consolidate import nightly_consolidation
    from lib.config import load_config
    from lib.registry.lineage import Lineage
    from lib.evaluation.retention import retention_matrix
    from lib.tables import gate_reasons, gate_table
    from lib.workspace import Workspace

    ws = Workspace(tmp_path / "ws").ensure()
    build_tiny_model("llama", ws.root / "incoming" / "model")
    replay_files(ws.root / "incoming" / "replay")
    write_mc_task(ws.root / "benchmarks", n=16)
    write_gen_task(ws.root / "benchmarks", n=4)
    cfg = load_config(preset="tiny", overrides=[
        f"workspace.root={ws.root}", "training.num_iterations=4", "training.seq_len=128", "training.total_batch_size=1024",
        "training.device_batch_size=8", "training.snapshot_every=50", "eval.max_docs=4", "curation.workers=2",
        "curation.languages=[]", "eval.benchmarks=benchmarks", "eval.benchmark_limit=12"])
    assert bootstrap(cfg, AdoptRequest(model="incoming/model", replay=["incoming/replay"], original_lr=3e-3))["version"] == "v0"
    _night_buffer(ws)

    night = nightly_consolidation(cfg)
    assert night["version"] == "v1" and night["status"] in ("accepted", "rejected")
    lin = Lineage(ws.lineage_db)
    run_id = lin.get_version("v1")["run_id"]
    for version in ("v0", "v1"):
        m = lin.metrics(version, run_id)
        assert m["bench:tiny_mc"]["examples"] == 12.0 and 0 <= m["bench:tiny_mc"]["acc"] <= 1
        assert "acc_stderr" in m["bench:tiny_mc"] and m["bench:tiny_gen"]["examples"] == 4.0
    (decision,) = [d for d in lin.gate_decisions("v1") if d["actor"] == "gate"]
    rule = next(r for r in decision["rules"] if r["name"] == "benchmarks")
    assert rule["reason"].startswith("2 task(s) checked; ") and "gate.max_benchmark_drop" in rule["reason"]
    assert "tiny_gen exact_match" in rule["reason"] and "tiny_mc acc" in rule["reason"]  # both named, with their scores
    assert rule["passed"] == (rule["measured"] <= rule["limit"] + 1e-12)
    table = gate_table(decision, f"Regression gate on v1: {night['status']}").markdown()
    assert "| benchmarks |" in table and " points |" in table

    matrix = retention_matrix(lin, candidate="v1", workspace=ws)
    assert set(matrix.benchmark_sets) == {"bench:tiny_gen", "bench:tiny_mc"}
    assert all(matrix.benchmark_cells.get((v, "bench:tiny_mc")) for v in ("v0", "v1"))
    assert "bench:tiny_mc" in matrix.to_markdown()

    artifact = _artifact("benchmarks")
    assert artifact is not None and "tiny_mc" in str(artifact["data"])
    assert "benchmarks" in str(_artifact("gate-decision")["data"])

    # v0's scores are in the eval cache under its weights' digest: the next night scores only its candidate
    digest = lin.get_version("v0")["meta"]["digest"]
    assert len(list((ws.eval_cache / digest[:32]).glob("bench-*.json"))) == 2
    assert list(ws.benchmark_data.rglob("*.arrow"))  # the local tasks' Arrow files stay inside the workspace

    # `consolidate eval v1` shows them too, from the cache (both sides were scored tonight)
    import json

    from typer.testing import CliRunner

    from cli.main import app

    out = CliRunner().invoke(app, ["eval", "v1", "--no-record", "--json", "--preset", "tiny", "--workspace", str(ws.root),
                                   "--set", "eval.benchmarks=benchmarks", "--set", "eval.benchmark_limit=12", "--set", "eval.max_docs=4",
                                   "--set", "training.seq_len=128"])
    assert out.exit_code == 0, out.output
    rows = {r["task"]: r for r in json.loads(out.stdout)["benchmarks"]}  # stderr: the loaders' progress bars
    assert rows["tiny_mc"]["candidate"] == 100 * lin.metrics("v1", run_id)["bench:tiny_mc"]["acc"]

    with capsys.disabled():  # the transcript the README shows
        print("\n" + table + "\n" + "\n".join(gate_reasons(decision)) + "\n\n" + matrix.to_markdown())
