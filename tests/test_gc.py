"""Failed runs' folders are kept, reported with their size, and removed only when asked
(`consolidate lineage ls`, `consolidate gc [--remove]`). Issue #28."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from lib.registry.lineage import Lineage


def _run(ws, run_id: str, status: str, nbytes: int) -> None:
    lin = Lineage(ws.lineage_db)
    lin.start_run(run_id, "nightly")
    lin.finish_run(run_id, status)
    folder = ws.run(run_id).ensure()
    (folder.train / "metrics.jsonl").write_bytes(b"x" * nbytes)


def test_failed_run_folders_are_reported_and_removed_only_on_request(workspace):
    _run(workspace, "night-a", "failed", 3_000_000)
    _run(workspace, "night-b", "completed", 1_000)
    _run(workspace, "night-c", "failed", 1_000_000)
    cli = CliRunner()
    w = ["--workspace", str(workspace.root)]

    ls = cli.invoke(app, ["lineage", "ls", *w])
    assert ls.exit_code == 0, ls.output
    assert "2 failed runs keep their folders" in ls.stdout and "(4.0 MB)" in ls.stdout and "consolidate gc --remove" in ls.stdout

    listed = cli.invoke(app, ["gc", *w, "--json"])
    report = json.loads(listed.stdout)
    assert [(r["run_id"], r["bytes"]) for r in report["failed_runs"]] == [("night-a", 3_000_000), ("night-c", 1_000_000)]
    assert workspace.run("night-a").path.is_dir(), "listing removes nothing"

    removed = cli.invoke(app, ["gc", "--remove", *w])
    assert removed.exit_code == 0, removed.output
    assert "removed 2 failed runs' folders, 4.0 MB freed" in removed.stdout
    assert not workspace.run("night-a").path.exists() and not workspace.run("night-c").path.exists()
    assert workspace.run("night-b").path.is_dir()  # a completed run's folder is not gc's business
    assert Lineage(workspace.lineage_db).get_run("night-a")["status"] == "failed"  # the record stays
    assert "failed runs keep" not in cli.invoke(app, ["lineage", "ls", *w]).stdout
