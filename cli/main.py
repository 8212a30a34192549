"""`consolidate`: the command line of the nightly consolidation pipeline.

Each module in this package that defines `register(app: typer.Typer)` adds its commands (a
command group such as `buffer`, or top-level commands such as `dedup`). Modules are found by
name, so a new stage adds a file here and nothing else changes. Heavy imports (torch, prefect)
stay inside the command functions, so `consolidate --help` answers at once.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

import cli
from lib.config import ConfigError
from lib.workspace import WorkspaceError

app = typer.Typer(
    name="consolidate",
    help="Nightly consolidation: curate new text, replay-mix it with the original corpus, "
    "continue pre-training, gate on forgetting, promote, record lineage.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(cli.__path__), key=lambda m: m.name):
        if info.name in ("main", "common") or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"cli.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_all()


def main() -> None:
    """Console entry point: user errors print one clear message and exit 2, not a traceback."""
    try:
        app()
    except (ConfigError, WorkspaceError, FileNotFoundError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
