"""`consolidate gc`: the run folders failed nights left, with their sizes; `--remove` deletes them.

A failed night's folder (`runs/<run-id>/`: curated data, token shards, training logs and
snapshots) is kept for inspection: nothing removes it silently. `consolidate lineage ls` says how
many there are and how much they hold; this command lists them and, asked to, removes them under
the workspace's night lock (never beside a night). The failed night the next trigger would resume
from its snapshot is kept unless `--include-resumable`.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WaitOpt, WorkspaceOpt, night_lock, resolve_config


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def register(app: typer.Typer) -> None:
    @app.command("gc")
    def gc(remove: Annotated[bool, typer.Option("--remove", help="Delete the listed folders (default: only list them).")] = False,
           include_resumable: Annotated[bool, typer.Option(
               "--include-resumable", help="Also delete the failed night the next run would resume from its snapshot.")] = False,
           config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
           wait: WaitOpt = False, as_json: JsonOpt = False) -> None:
        """List the run folders of failed nights with their sizes; --remove deletes them."""
        from cli.lineage import lineage_of
        from lib.registry.runs import failed_run_folders, remove_run_folders

        cfg, ws = resolve_config(config, preset, set_, workspace)
        lin = lineage_of(ws)
        if remove:
            with night_lock(cfg, ws, "gc", wait):
                rows = remove_run_folders(ws, lin, include_resumable)
            kept = [r for r in failed_run_folders(ws, lin)]
        else:
            rows, kept = failed_run_folders(ws, lin), []
        if as_json:
            typer.echo(json.dumps({"removed" if remove else "failed_runs": rows, "kept": kept,
                                   "bytes": sum(r["bytes"] for r in rows)}, indent=2, default=str))
            return
        for r in rows:
            note = " (resumable: the next `consolidate run` resumes it)" if r["resumable"] else ""
            typer.echo(f"{'removed ' if remove else ''}{r['path']}  {_mb(r['bytes'])}  {r['kind']} run, failed{note}")
        total = sum(r["bytes"] for r in rows)
        if remove:
            typer.echo(f"removed {len(rows)} failed runs' folders, {_mb(total)} freed" if rows else "nothing to remove")
            for r in kept:
                typer.echo(f"kept {r['path']} ({_mb(r['bytes'])}): the next `consolidate run` resumes it; --include-resumable removes it")
        else:
            typer.echo(f"{len(rows)} failed runs keep {_mb(total)} in {ws.runs}; `consolidate gc --remove` deletes them"
                       if rows else "no folders of failed runs")
