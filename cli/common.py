"""Options every command shares: where the config comes from and where the workspace is; the
workspace's night lock for the commands that change what a night reads or writes."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from lib.config import ConsolidationConfig, load_config
from lib.workspace import Workspace

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML or TOML config file.")]
PresetOpt = Annotated[str, typer.Option("--preset", help="Base preset: default or tiny (CPU demo).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", "-s", help="Override a field: section.key=value (repeatable).")]
WorkspaceOpt = Annotated[Optional[Path], typer.Option("--workspace", "-w", help="Workspace root (overrides workspace.root).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
WaitOpt = Annotated[bool, typer.Option(
    "--wait/--no-wait",
    help="If a night, bootstrap, curation or promotion holds this workspace: wait for it (up to "
         "orchestration.night_lock_timeout_s) or exit at once with code 75.")]

EXIT_BUSY = 75  # EX_TEMPFAIL: another night (or curation, promotion) holds the workspace; try again later


def resolve_config(
    config: Path | None, preset: str, overrides: list[str] | None, workspace: Path | None
) -> tuple[ConsolidationConfig, Workspace]:
    sets = list(overrides or [])
    if workspace is not None:
        sets.append(f"workspace.root={workspace}")
    cfg = load_config(config, preset=preset, overrides=sets)
    return cfg, Workspace(cfg.workspace.root)


@contextmanager
def night_lock(cfg: ConsolidationConfig, ws: Workspace, purpose: str, wait: bool) -> Iterator[None]:
    """The workspace's night lock (lib.locks) around a command that moves buffer files or aliases
    (`curate`, `gate --apply`, `promote`, `rollback`), so that it never runs beside a night. With
    `wait`, a busy lock is waited for up to `orchestration.night_lock_timeout_s`, the holder named
    on stderr; past it, or at once without `wait`, the command exits 75 naming the holder."""
    from lib.locks import LockBusy, WorkspaceLock

    lock = WorkspaceLock(ws.night_lock, purpose)
    try:
        if wait:
            lock.acquire(cfg.orchestration.night_lock_timeout_s, log=lambda m: typer.echo(m, err=True),
                         what="orchestration.night_lock_timeout_s")
        else:
            lock.acquire(0)
    except LockBusy as exc:
        typer.secho(f"busy: {exc}" + ("" if wait else " Pass --wait to wait for it."), fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(EXIT_BUSY) from None
    try:
        yield
    finally:
        lock.release()
