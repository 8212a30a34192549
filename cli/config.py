"""`consolidate config show`: the effective configuration after preset, file and overrides."""

from __future__ import annotations

import json

import typer

from cli.common import ConfigOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)

    @group.command("show")
    def show(config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None) -> None:
        """Print the effective configuration as JSON (secrets masked)."""
        cfg, _ = resolve_config(config, preset, set_, workspace)
        typer.echo(json.dumps(cfg.to_dict(), indent=2))

    app.add_typer(group, name="config")
