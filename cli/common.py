"""Options every command shares: where the config comes from and where the workspace is."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lib.config import ConsolidationConfig, load_config
from lib.workspace import Workspace

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML or TOML config file.")]
PresetOpt = Annotated[str, typer.Option("--preset", help="Base preset: default or tiny (CPU demo).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", "-s", help="Override a field: section.key=value (repeatable).")]
WorkspaceOpt = Annotated[Optional[Path], typer.Option("--workspace", "-w", help="Workspace root (overrides workspace.root).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


def resolve_config(
    config: Path | None, preset: str, overrides: list[str] | None, workspace: Path | None
) -> tuple[ConsolidationConfig, Workspace]:
    sets = list(overrides or [])
    if workspace is not None:
        sets.append(f"workspace.root={workspace}")
    cfg = load_config(config, preset=preset, overrides=sets)
    return cfg, Workspace(cfg.workspace.root)
