"""`consolidate eval VERSION` and `consolidate gate VERSION`: the two steps after training, run alone.

eval measures the version and its parent on the same data (old_val, new_heldout, new_train,
probes) and records both in lineage under the version's run; gate reads those metrics, prints
each rule's measured value and reason, and with --apply promotes or rejects. gate exits 1 when the
candidate is rejected, so a script can branch on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WaitOpt, WorkspaceOpt, night_lock, resolve_config
from cli.lineage import console, echo_json, lineage_of, user_errors


def _version_dir(ws, row: dict) -> Path:
    path = Path(row["path"])
    path = path if path.is_absolute() else ws.root / path
    if not path.exists():
        raise FileNotFoundError(f"folder of version {row['version']} is missing: {path}")
    return path


def register(app: typer.Typer) -> None:
    from lib.tables import bpb_table, gate_table

    @app.command("eval")
    @user_errors
    def eval_cmd(
        version: Annotated[str, typer.Argument(help="Version id or alias to evaluate against its parent.")],
        parent: Annotated[Optional[str], typer.Option("--parent", help="Compare with this version instead of the recorded parent.")] = None,
        run: Annotated[Optional[str], typer.Option("--run", help="Run whose held-out and curated data to use (default: the version's run).")] = None,
        record: Annotated[bool, typer.Option("--record/--no-record", help="Store the metrics in lineage.")] = True,
        device: Annotated[Optional[str], typer.Option("--device", help="cpu or cuda (default: CUDA when available).")] = None,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Bits per byte of VERSION and its parent on old_val, new_heldout, new_train (+ probes, + eval.benchmarks)."""
        from lib.evaluation.evaluate import comparison, evaluate_and_record, evaluate_candidate

        cfg, ws = resolve_config(config, preset, set_, workspace)
        c = comparison(ws, version, parent, run)
        lin, parent_id, run_id, run_dir = c.lineage, c.parent, c.run_id, c.run_dir
        row = lin.get_version(c.version)
        if record:
            table = evaluate_and_record(ws, cfg, lin, row["version"], parent_id, run_id, run_dir, device=device)
        else:
            table = evaluate_candidate(ws, cfg, _version_dir(ws, row), _version_dir(ws, lin.get_version(parent_id)), run_dir,
                                       device=device, lineage=lin)
        if as_json:
            return echo_json({"version": row["version"], "parent": parent_id, "run_id": run_id, "rows": table.rows(),
                              "benchmarks": table.benchmark_rows()})
        console().print(bpb_table(table.rows(), parent_id, row["version"],
                                  f"{parent_id} -> {row['version']} on the data of run {run_id or '(none)'}").rich())
        if table.benchmark_rows():
            from lib.tables import benchmark_table

            console().print(benchmark_table(table.benchmark_rows(), parent_id, row["version"],
                                            f"benchmarks (lm-evaluation-harness, points), {parent_id} -> {row['version']}").rich())

    @app.command("gate")
    @user_errors
    def gate_cmd(
        version: Annotated[str, typer.Argument(help="Candidate version id (its metrics come from `consolidate eval`).")],
        apply: Annotated[bool, typer.Option("--apply", help="Act on the decision: promote on pass, mark rejected on fail.")] = False,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        wait: WaitOpt = False, as_json: JsonOpt = False,
    ) -> None:
        """Run the regression gate on VERSION's recorded metrics; exit 1 if it is rejected."""
        from contextlib import nullcontext

        from lib.registry.promotion import gate_version

        cfg, ws = resolve_config(config, preset, set_, workspace)
        lin = lineage_of(ws)
        # only acting on the decision needs the workspace to itself
        with night_lock(cfg, ws, f"consolidate gate {version} --apply", wait) if apply else nullcontext():
            decision, status = gate_version(lin, cfg.gate, lin.resolve_version(version), apply=apply)
        if as_json:
            echo_json({"version": version, "status": status, "applied": apply, **decision.to_dict()})
        else:
            title = f"gate on {version}: {'PASSED' if decision.passed else 'REJECTED'}" + ("" if apply else " (not applied)")
            console().print(gate_table(decision, title).rich())
            typer.echo(f"{version}: {status}; champion is {lin.alias('champion')}")
        if not decision.passed:
            raise typer.Exit(1)
