"""Options every command shares: where the config comes from and where the workspace is; the
workspace's night lock for the commands that change what a night reads or writes."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
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


def exit_busy(exc: Exception, hint: str = "") -> typer.Exit:
    """Say who holds the workspace (a `LockBusy`) on stderr; the exit to raise: code 75."""
    typer.secho(f"busy: {exc}{hint}", fg=typer.colors.YELLOW, err=True)
    return typer.Exit(EXIT_BUSY)


@contextmanager
def night_lock(cfg: ConsolidationConfig, ws: Workspace, purpose: str, wait: bool) -> Iterator[None]:
    """The workspace's night lock (lib.registry.runs.night_lock, the one the flows take) around a command
    that moves buffer files or aliases (`curate`, `gate --apply`, `promote`, `rollback`, `init`),
    so that it never runs beside a night. With `wait`, a busy lock is waited for up to
    `orchestration.night_lock_timeout_s`, the holder named on stderr; past it, or at once without
    `wait`, the command exits 75 naming the holder."""
    from lib.locks import LockBusy
    from lib.registry.runs import night_lock as hold_night_lock

    if wait:
        lock = hold_night_lock(ws, purpose, cfg.orchestration.night_lock_timeout_s, log=lambda m: typer.echo(m, err=True))
    else:
        lock = hold_night_lock(ws, purpose, 0, what="")
    with ExitStack() as held:
        try:
            held.enter_context(lock)  # only the taking of the lock: a LockBusy from the body is the body's
        except LockBusy as exc:
            raise exit_busy(exc, "" if wait else " Pass --wait to wait for it.") from None
        yield
