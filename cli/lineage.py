"""`consolidate lineage ls|show|diff|retention`, `consolidate promote VERSION`, `consolidate rollback`.

Tables for a terminal (rich), `--json` for scripts. Versions may be named by id (`v3`) or alias
(`champion`, `latest`).

`promote` and `rollback` (and `gate --apply`, cli/eval.py) move the champion and buffer states,
so they hold the workspace's night lock (cli.common.night_lock): beside a running night they
exit 75 at once, naming it (that night's own gate may move the champion when it ends, so a
decision taken now could be stale by then); `--wait` waits for it instead.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WaitOpt, WorkspaceOpt, night_lock, resolve_config


def lineage_of(ws, must_exist: bool = True):
    """The workspace's registry; reading commands refuse to create an empty one by accident."""
    from lib.registry.lineage import Lineage

    if must_exist and not ws.lineage_db.exists():
        raise FileNotFoundError(f"no lineage registry at {ws.lineage_db}: run the bootstrap first, or pass --workspace")
    return Lineage(ws.lineage_db)


def open_lineage(config, preset, set_, workspace, must_exist: bool = True):
    _, ws = resolve_config(config, preset, set_, workspace)
    return lineage_of(ws, must_exist), ws


def user_errors(fn):
    """LineageError (unknown version, nothing to roll back) is a user error: one line, exit 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from lib.registry.records import LineageError

        try:
            return fn(*args, **kwargs)
        except LineageError as exc:
            raise ValueError(str(exc)) from None

    return wrapper


def echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str, sort_keys=True))


def console():
    """A rich console; when output is piped (no terminal width to fit), wide enough not to cut cells."""
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=180)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.2%}"


def _metrics_text(metrics: dict[str, dict[str, float]], parent: dict[str, dict[str, float]] | None = None) -> str:
    parts = []
    for dataset in sorted(metrics):
        for metric, value in sorted(metrics[dataset].items()):
            text = f"{dataset}.{metric}={_fmt(value)}"
            before = (parent or {}).get(dataset, {}).get(metric)
            if before:
                text += f" ({_pct((value - before) / abs(before))})"
            parts.append(text)
    return "\n".join(parts)


def retention_table(matrix, title: str):
    """The retention matrix (lib/evaluation/retention.py) as a rich table: a row per version, a column per set."""
    from rich.table import Table

    table = Table(title=title, caption=matrix.legend() if matrix.versions else None, caption_justify="left")
    for col in ("version", "status", *matrix.columns):
        table.add_column(col)
    for row in matrix.table_rows():
        table.add_row(*(str(row[c]) for c in ("version", "status", *matrix.columns)))
    return table


def register(app: typer.Typer) -> None:
    from rich.table import Table

    group = typer.Typer(help="Checkpoint versions: their parents, data, metrics and decisions.", no_args_is_help=True)

    @group.command("ls")
    @user_errors
    def ls(config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
           as_json: JsonOpt = False) -> None:
        """List every version with its parent, status, aliases and old-data bits per byte (and the
        folders failed runs left, with their size)."""
        from lib.serving.rollout import live_status

        lin, ws = open_lineage(config, preset, set_, workspace)
        rows = lin.versions()
        live = live_status(lin)
        for row in rows:
            row["metrics"] = lin.metrics(row["version"], row["run_id"] or "")
            row["inputs"] = len(lin.run_inputs(row["run_id"])) if row["run_id"] else 0
            row["serving"] = live.get(row["version"], "")
        if as_json:
            return echo_json(rows)
        table = Table(title=f"versions in {lin.db_path}")
        for col in ("version", "parent", "status", "aliases", "created", "run", "buffer files", "old_val bpb", "serving"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["version"], r["parent"] or "", r["status"], ", ".join(r["aliases"]), str(r["created_at"])[:19],
                          r["run_id"] or "", str(r["inputs"]), _fmt(r["metrics"].get("old_val", {}).get("bpb")), r["serving"])
        console().print(table)
        from lib.registry.runs import failed_run_folders

        failed = failed_run_folders(ws, lin)
        if failed:  # kept for inspection, never removed silently: say so, and how to remove them
            typer.echo(f"{len(failed)} failed runs keep their folders in {ws.runs} ({sum(r['bytes'] for r in failed) / 1e6:,.1f} MB): "
                       f"`consolidate gc` lists them, `consolidate gc --remove` deletes them")

    @group.command("show")
    @user_errors
    def show(version: Annotated[str, typer.Argument(help="Version id or alias (champion, latest).")],
             config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
             as_json: JsonOpt = False) -> None:
        """Ancestry of VERSION back to v0: each step's data, metrics and gate decisions."""
        lin, _ = open_lineage(config, preset, set_, workspace)
        chain = lin.ancestry(lin.resolve_version(version))
        if as_json:
            return echo_json(chain)
        table = Table(title=f"ancestry of {chain[0]['version']}", show_lines=True)
        for col in ("version", "parent", "status", "run", "buffer files trained on", "metrics (vs parent, same data)", "gate"):
            table.add_column(col)
        for s in chain:
            files = "\n".join(
                f"{b['path'].rsplit('/', 1)[-1]} ({b['rows']} rows, {b['content_hash'][:12]}"
                + ("" if b["consumed_by"] == s["version"] else f", {b['status']}" + (f" by {b['consumed_by']}" if b["consumed_by"] else ""))
                + ")"
                for b in s["inputs"]
            )
            gate = "\n".join(
                f"{d['actor']}: {'pass' if d['passed'] else 'FAIL'}" + (f" - {d['reason']}" if d["reason"] else "")
                + "".join(f"\n  {r['name']}: {_pct(r['measured'])} {'ok' if r['passed'] else 'FAIL'}" for r in d["rules"])
                for d in s["gate_decisions"]
            )
            table.add_row(s["version"], s["parent"] or "", s["status"], s["run_id"] or "", files,
                          _metrics_text(s["metrics"], s["parent_metrics"]), gate)
        console().print(table)

    @group.command("diff")
    @user_errors
    def diff(a: Annotated[str, typer.Argument(help="First version (id or alias).")],
             b: Annotated[str, typer.Argument(help="Second version (id or alias).")],
             config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
             as_json: JsonOpt = False) -> None:
        """Config keys and metrics that differ between A and B, and the data each consumed."""
        lin, _ = open_lineage(config, preset, set_, workspace)
        d = lin.diff(lin.resolve_version(a), lin.resolve_version(b))
        if as_json:
            return echo_json(d)
        out = console()
        table = Table(title=f"{d['a']} -> {d['b']}: configuration")
        for col in ("key", d["a"], d["b"]):
            table.add_column(col)
        for key, v in d["config"].items():
            table.add_row(key, json.dumps(v["a"], default=str), json.dumps(v["b"], default=str))
        out.print(table if d["config"] else "configuration: identical")
        table = Table(title=f"{d['a']} -> {d['b']}: metrics (new-data sets differ night to night)")
        for col in ("metric", d["a"], d["b"], "change"):
            table.add_column(col)
        for key, v in d["metrics"].items():
            table.add_row(key, _fmt(v["a"]), _fmt(v["b"]), _pct(v["relative_change"]))
        out.print(table)
        i = d["inputs"]
        out.print(f"buffer files: {len(i['only_a'])} only in {d['a']}, {len(i['only_b'])} only in {d['b']}, {i['both']} in both")

    @group.command("retention")
    @user_errors
    def retention(version: Annotated[str, typer.Argument(help="The newest row: a version id or alias; a candidate "
                                                          "(even rejected) adds its own night as a column.")] = "champion",
                  png: Annotated[str, typer.Option("--png", help="Also draw the matrix as a heat map into this PNG, a path "
                                                                  "inside the workspace (relative to its root).")] = "",
                  config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
                  as_json: JsonOpt = False) -> None:
        """Retention matrix: every version's bits per byte on old_val and on each night's held-out set,
        against the version that learnt it, and the share of each night's gain still kept."""
        from lib.evaluation.retention import retention_matrix

        lin, ws = open_lineage(config, preset, set_, workspace)
        top = lin.resolve_version(version)
        matrix = retention_matrix(lin, candidate=None if top == lin.alias("champion") else top, workspace=ws)
        if png:
            from lib.evaluation.demo_plot import plot_retention

            png = str(plot_retention(matrix, ws.resolve(png)))
        if as_json:
            return echo_json({**matrix.to_dict(), **({"png": png} if png else {})})
        console().print(retention_table(matrix, f"retention in {lin.db_path}"))
        for ref in matrix.references.values():
            if ref.note:
                typer.echo(f"note: {ref.set}: {ref.note}")
        if png:
            typer.echo(f"heat map: {png}")

    app.add_typer(group, name="lineage")

    @app.command("promote")
    @user_errors
    def promote_cmd(version: Annotated[str, typer.Argument(help="Version id to make champion.")],
                    reason: Annotated[str, typer.Option("--reason", "-r", help="Why the gate is overridden (recorded).")] = "",
                    config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
                    wait: WaitOpt = False, as_json: JsonOpt = False) -> None:
        """Make VERSION the champion whatever the gate decided; recorded as a person's override."""
        from lib.registry.promotion import promote

        cfg, ws = resolve_config(config, preset, set_, workspace)
        lin = lineage_of(ws)
        with night_lock(cfg, ws, f"consolidate promote {version}", wait):
            out = promote(lin, lin.resolve_version(version), reason)
        if as_json:
            return echo_json(out)
        if not out["changed"]:
            typer.echo(f"{out['version']} is already the champion")
        else:
            typer.echo(f"champion: {out['previous']} -> {out['version']} (was {out['was']}; "
                       f"{len(out['consumed'])} buffer files consumed); reason recorded: {reason}")

    @app.command("rollback")
    @user_errors
    def rollback_cmd(reason: Annotated[str, typer.Option("--reason", "-r", help="Why (recorded).")] = "",
                     requeue: Annotated[bool, typer.Option("--requeue", help="Put the buffer files the rolled-back version consumed back to pending.")] = False,
                     config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
                     wait: WaitOpt = False, as_json: JsonOpt = False) -> None:
        """Move the champion back to its parent (recorded)."""
        from lib.buffer.capture import answers_by_version
        from lib.registry.promotion import rollback
        from lib.serving.rollout import RolloutError, roll_out

        cfg, ws = resolve_config(config, preset, set_, workspace)
        lin = lineage_of(ws)
        with night_lock(cfg, ws, "consolidate rollback", wait):
            out = rollback(lin, reason, requeue=requeue)
        # what the rolled-back model wrote by day: captured answers stamped with its version
        files = [(ws.root / b.path).resolve() for b in lin.buffer_files() if b.status != "quarantined"]  # root / absolute = absolute
        files += [p.resolve() for p in sorted(ws.buffers.glob("buffer_*.parquet"))]
        out["answered_by_rolled_back"] = answers_by_version([p for p in dict.fromkeys(files) if p.is_file()], out["from"])
        if cfg.serve.rollout.kind != "none":  # the engine still serves the version left: push the parent
            try:
                out["rollout"] = roll_out(lin, out["to"], cfg.serve.rollout)
            except RolloutError as exc:
                out["rollout"] = {"status": "failed", "detail": str(exc)}
        if as_json:
            return echo_json(out)
        typer.echo(f"champion: {out['from']} -> {out['to']}" + (f"; {len(out['requeued'])} buffer files pending again" if requeue else ""))
        answered = out["answered_by_rolled_back"]
        typer.echo(f"captured answers written by {out['from']}: {sum(answered.values())} records in {len(answered)} buffer files"
                   + "".join(f"\n  {path}: {n}" for path, n in answered.items()))
        if "rollout" in out:
            typer.echo(f"rollout of {out['to']}: {out['rollout']['status']}: {out['rollout']['detail']}")

