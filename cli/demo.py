"""`consolidate demo`: the whole story on the embedded default (CPU, no downloads, no server).

Stage 1 (this file today): make sure the stdlib corpus and the demo memory buffer exist and
print their statistics. Later stages append to `demo()`; the corpus/buffer step is
`lib.corpus.ensure_embedded_default` and `show_embedded` prints its result.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.common import ConfigOpt, JsonOpt, SetOpt, WorkspaceOpt, resolve_config


def show_embedded(console, stats: dict) -> None:
    """Readable tables of what `ensure_embedded_default` found or built."""
    from rich.table import Table

    from cli.corpus import corpus_table, demo_buffer_table

    corpus = stats["corpus"]
    verb = "built" if stats["corpus_built"] else "already there"
    console.print(corpus_table(corpus, f"original corpus '{corpus['name']}' ({verb})"))
    if stats["demo_buffer"] is not None:
        console.print(demo_buffer_table(stats["demo_buffer"], "demo memory buffer (built)"))
    buf = stats["buffer"]
    table = Table(title="memory buffer", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("parquet files", f"{buf['files']:,}")
    table.add_row("records", f"{buf['records']:,}")
    table.add_row("bytes on disk", f"{buf['bytes']:,}")
    table.add_row("pending in write-ahead logs", f"{buf['pending_log']:,}")
    console.print(table)


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        config: ConfigOpt = None,
        preset: Annotated[str, typer.Option("--preset", help="Base preset (tiny: sized for a 2-core CPU).")] = "tiny",
        set_: SetOpt = None,
        workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Run the story on the embedded default: corpus and demo buffer (built once), then stats."""
        from rich.console import Console

        from lib.corpus import ensure_embedded_default

        cfg, ws = resolve_config(config, preset, set_, workspace)
        console = Console()
        if not json_:
            console.print(f"[bold]workspace[/bold] {ws.root}")
        stats = ensure_embedded_default(ws, cfg)
        if json_:
            typer.echo(json.dumps(stats, indent=2, default=str))
        else:
            show_embedded(console, stats)
