"""Options every command shares: where the config comes from and where the workspace is; the
workspace's night lock for the commands that change what a night reads or writes."""

from __future__ import annotations

import json
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


def exit_busy(exc: Exception, hint: str = "", as_json: bool = False) -> typer.Exit:
    """Say who holds the workspace (a `LockBusy`) on stderr, and with `as_json` on stdout as
    `{"status": "busy", "error", "stage": "night-lock", "exit_code": 75}`; the exit to raise."""
    typer.secho(f"busy: {exc}{hint}", fg=typer.colors.YELLOW, err=True)
    if as_json:
        typer.echo(json.dumps({"status": "busy", "error": f"{exc}{hint}", "stage": "night-lock", "exit_code": EXIT_BUSY}))
    return typer.Exit(EXIT_BUSY)


def failure_report(exc: BaseException) -> dict:
    """`{"status": "failed", "error", "stage"}` of a command that raised `exc`: the error is the
    innermost OS error of the chain (it names the errno and the path: a read-only volume, a full
    disk), else the cause a child process raised (`TrainingFailed.cause`), else the first line of
    the exception; the stage is the night's stage it was raised in (flows.runtime.StageClock)."""
    from lib.training.preflight import PreflightError

    os_error, seen, e = None, set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError):  # the innermost one is the cause
            os_error = e
        e = e.__cause__ or e.__context__
    if os_error is not None:
        error = f"{type(os_error).__name__}: {os_error}"
    elif getattr(exc, "cause", None):
        error = str(exc.cause)
    else:
        lines = str(exc).strip().splitlines()
        error = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    stage = getattr(exc, "failed_stage", None) or ("preflight" if isinstance(exc, PreflightError) else "setup")
    return {"status": "failed", "error": error, "stage": stage}


def exit_failed(exc: BaseException, as_json: bool = False, code: int = 1) -> typer.Exit:
    """A command's failure in its last line on stderr (and as JSON on stdout with `as_json`),
    whatever was logged before it; the exit to raise."""
    report = failure_report(exc)
    typer.secho(f"failed in stage {report['stage']}: {report['error']}", fg=typer.colors.RED, err=True)
    if as_json:
        typer.echo(json.dumps(report))
    return typer.Exit(code)


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
