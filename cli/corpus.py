"""`consolidate corpus build-stdlib|build-demo-buffer`: the embedded corpora (no downloads)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config
from lib.tables import corpus_table, demo_buffer_table


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Embedded corpora built from text every Python install has.", no_args_is_help=True)

    @group.command("build-stdlib")
    def build_stdlib(
        name: Annotated[Optional[str], typer.Option("--name", help="Corpus name (default: workspace.corpus).")] = None,
        max_mb: Annotated[Optional[float], typer.Option("--max-mb", help="Cap on text megabytes (a fixed hash-ordered sample); default: all.")] = None,
        val_fraction: Annotated[float, typer.Option("--val-fraction", help="Share of documents in the validation split.")] = 0.05,
        shard_mb: Annotated[float, typer.Option("--shard-mb", help="Text megabytes per shard at most.")] = 4.0,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Write the original corpus from this interpreter's standard library (deterministic)."""
        from rich.console import Console

        from lib.data.corpus import build_stdlib_corpus

        cfg, ws = resolve_config(config, preset, set_, workspace)
        if shard_mb <= 0:
            raise ValueError(f"--shard-mb must be positive, got {shard_mb}")
        stats = build_stdlib_corpus(
            ws.ensure(), name or cfg.workspace.corpus or "stdlib", max_mb=max_mb, val_fraction=val_fraction,
            shard_bytes=int(shard_mb * 1_000_000),
        )
        if json_:
            typer.echo(json.dumps(stats, indent=2))
        else:
            Console().print(corpus_table(stats, f"corpus {stats['name']} → {ws.corpus(stats['name'])}").rich())

    @group.command("build-demo-buffer")
    def build_demo(
        max_kb: Annotated[float, typer.Option("--max-kb", help="Cap on the demo buffer's text, in kB.")] = 120,
        package: Annotated[Optional[list[str]], typer.Option("--package", help="Package to take text from (repeatable); default: the demo list.")] = None,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Add the demo buffer: sources and descriptions of installed third-party packages."""
        from rich.console import Console

        from lib.data.corpus import DEMO_PACKAGES, build_demo_buffer

        cfg, ws = resolve_config(config, preset, set_, workspace)
        if max_kb <= 0:
            raise ValueError(f"--max-kb must be positive, got {max_kb}")
        stats = build_demo_buffer(ws.ensure(), tuple(package) if package else DEMO_PACKAGES, int(max_kb * 1000))
        if json_:
            typer.echo(json.dumps(stats, indent=2))
        else:
            Console().print(demo_buffer_table(stats, f"demo buffer → {ws.buffers}").rich())

    app.add_typer(group, name="corpus")
