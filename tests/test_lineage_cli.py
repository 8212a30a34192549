"""The `consolidate lineage|promote|rollback|eval|gate` commands on real registries and models."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from cli.main import app
from conftest import stdlib_texts
from lib.registry.lineage import Lineage
from test_lineage import bootstrap, night

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def cli(ws, *args, code=0):
    result = runner.invoke(app, [*args, "--workspace", str(ws.root)])
    assert result.exit_code == code, result.output + repr(result.exception)
    return result.stdout  # stderr carries the model loader's progress bars


def cli_json(ws, *args, code=0):
    return json.loads(cli(ws, *args, "--json", code=code))


@pytest.fixture()
def history(workspace):
    lin = Lineage(workspace.lineage_db)
    bootstrap(lin, workspace)
    night(lin, workspace, "n1", ["a", "b"], 1.99, 3.0, 2.0)
    night(lin, workspace, "n2", ["c"], 2.5, 3.0, 2.0)            # rejected: forgetting
    night(lin, workspace, "n3", ["c", "d"], 1.98, 3.1, 2.2, lr_scale=0.05)
    return lin


def test_ls_and_show(workspace, history):
    rows = cli_json(workspace, "lineage", "ls")
    assert [(r["version"], r["status"], r["aliases"]) for r in rows] == [
        ("v0", "accepted", []), ("v1", "accepted", []), ("v2", "rejected", []), ("v3", "accepted", ["champion", "latest"])]
    text = cli(workspace, "lineage", "ls")
    assert "v2" in text and "rejected" in text and "champion" in text

    chain = cli_json(workspace, "lineage", "show", "champion")
    assert [s["version"] for s in chain] == ["v3", "v1", "v0"]
    assert [b["content_hash"] for b in chain[0]["inputs"]] == ["hash-c", "hash-d"]
    assert chain[0]["metrics"]["old_val"]["bpb"] == 1.98
    text = cli(workspace, "lineage", "show", "v3")
    assert "c.parquet" in text and "old_val.bpb=1.9800" in text and "forgetting" in text
    # The rejected v2 trained on c, which the next night's v3 consumed.
    assert "consumed by v3" in cli(workspace, "lineage", "show", "v2")


def test_diff(workspace, history):
    d = cli_json(workspace, "lineage", "diff", "v1", "v3")
    assert d["config"] == {"training.lr_scale": {"a": 0.1, "b": 0.05}}
    assert d["metrics"]["old_val.bpb"]["relative_change"] == pytest.approx(1.98 / 1.99 - 1)
    text = cli(workspace, "lineage", "diff", "v1", "v3")
    assert "training.lr_scale" in text and "0.05" in text


def test_promote_override_and_rollback(workspace, history):
    out = cli_json(workspace, "promote", "v2", "--reason", "reviewed: the rise is a formatting change")
    assert out["previous"] == "v3" and out["was"] == "rejected"
    assert history.alias("champion") == "v2"
    decisions = history.gate_decisions("v2")
    assert decisions[-1]["actor"] == "person" and decisions[-1]["reason"].startswith("reviewed")
    assert "champion: v2 -> v1" in cli(workspace, "rollback", "--reason", "bad answers")
    assert history.alias("champion") == "v1"
    assert history.get_version("v2")["status"] == "rolled_back"


def test_user_errors_exit_2_with_one_line(workspace, history):
    env_cli = [str(ROOT / ".venv" / "bin" / "consolidate")] if (ROOT / ".venv/bin/consolidate").exists() else [sys.executable, "-m", "cli.main"]
    for args, message in [
        (["lineage", "show", "v9"], "unknown version or alias 'v9'"),
        (["promote", "v2"], "give a --reason"),
    ]:
        proc = subprocess.run([*env_cli, *args, "--workspace", str(workspace.root)], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([*env_cli, "lineage", "ls", "--workspace", str(workspace.root / "nowhere")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "no lineage registry" in proc.stderr


# -- eval and gate on real models -------------------------------------------------------------


def _write_model(src: Path, dst: Path, texts: list[str] | None = None, scale: float | None = None) -> None:
    """A real candidate: `src` trained a few steps on `texts`, or with its output logits scaled
    (damaged: over-confident wrong predictions)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(src, dst)
    tok = AutoTokenizer.from_pretrained(dst)
    model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32)
    if scale is not None:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(scale)
    if texts:
        torch.manual_seed(0)
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
        rows = [[tok.bos_token_id] + tok(t, add_special_tokens=False)["input_ids"][:127] for t in texts]
        for step in range(40):
            x = torch.tensor([rows[step % len(rows)]])
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(dst)


@pytest.mark.slow
def test_eval_then_gate_on_real_models(workspace, tiny_hf_model):
    texts = [t[:600] for t in stdlib_texts(16)]
    old, new = texts[:6], texts[6:]
    val = workspace.corpus_val("stdlib")
    val.mkdir(parents=True)
    pq.write_table(pa.table({"id": [f"o{i}" for i in range(len(old))], "text": old}), val / "shard-00000.parquet")
    lin = Lineage(workspace.lineage_db)
    shutil.copytree(tiny_hf_model, workspace.checkpoint("v0"))
    lin.start_run("boot", kind="bootstrap")
    lin.record_version("v0", workspace.checkpoint("v0"), run_id="boot")
    from lib.registry.promotion import promote

    promote(lin, "v0", "base", actor="bootstrap")
    for run_id, version, kwargs in (("n1", "v1", {"texts": new[:8]}), ("n2", "v2", {"scale": 8.0})):
        run = workspace.run(run_id).ensure()
        (run.path / "heldout").mkdir()
        pq.write_table(pa.table({"id": ["h0", "h1"], "text": new[8:]}), run.path / "heldout" / "buffer.parquet")
        pq.write_table(pa.table({"id": [f"n{i}" for i in range(8)] + ["h0", "h1"], "text": new}), run.curated / "part-00000.parquet")
        _write_model(tiny_hf_model, workspace.checkpoint(version), **kwargs)
        lin.register_buffer_file(f"hash-{run_id}", f"{run_id}.parquet", 8, 100)
        lin.start_run(run_id, parent="v0")
        lin.record_version(version, workspace.checkpoint(version), parent="v0", run_id=run_id, inputs=[f"hash-{run_id}"])

    # Learned the new code: old code improves too (same language), held-out new data improves.
    table = cli_json(workspace, "eval", "v1", "--preset", "tiny")
    rows = {r["dataset"]: r for r in table["rows"]}
    assert set(rows) == {"old_val", "new_heldout", "new_train"}
    assert rows["new_train"]["relative_change"] < rows["new_heldout"]["relative_change"] < 0
    assert lin.metrics("v1", "n1")["old_val"]["bpb"] == pytest.approx(rows["old_val"]["candidate"])
    assert lin.metrics("v0", "n1")["old_val"]["bpb"] == pytest.approx(rows["old_val"]["parent"])
    dry = cli_json(workspace, "gate", "v1", "--preset", "tiny")
    assert dry["passed"] and dry["applied"] is False and lin.alias("champion") == "v0"
    decision = cli_json(workspace, "gate", "v1", "--apply", "--preset", "tiny")
    assert decision["passed"] and decision["status"] == "accepted"
    assert lin.alias("champion") == "v1" and [b.status for b in lin.buffer_files()] == ["consumed", "pending"]

    # Damaged weights: forgetting far over 2%, rejected with exit code 1, nothing moves.
    cli(workspace, "eval", "v2", "--preset", "tiny")
    out = cli(workspace, "gate", "v2", "--apply", "--preset", "tiny", code=1)
    assert "REJECTED" in out and "gate.max_forgetting" in out
    assert lin.alias("champion") == "v1" and lin.get_version("v2")["status"] == "rejected"
    assert [b.status for b in lin.buffer_files()] == ["consumed", "pending"]
    refused = runner.invoke(app, ["gate", "v0", "--workspace", str(workspace.root)])
    assert isinstance(refused.exception, ValueError) and "no parent" in str(refused.exception)
