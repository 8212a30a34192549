"""`consolidate knowledge`: the knowledge stage alone, on a curated run folder.

After `consolidate curate --run-id R`, `consolidate knowledge --run-id R` extracts R's fact set
and writes its augmented forms (lib.knowledge.inject.inject_knowledge, what a night runs before
sampling), then prints the counts and the first items: what tonight's model will be asked."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def register(app: typer.Typer) -> None:
    @app.command("knowledge")
    def knowledge_cmd(
        run_id: Annotated[str, typer.Option("--run-id", help="Run folder whose curated/ documents to use.")],
        show: Annotated[int, typer.Option("--show", help="Fact items to print.")] = 10,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Extract a curated run's fact set and write its augmented forms (the night's knowledge stage)."""
        from lib.knowledge.facts import read_facts
        from lib.knowledge.inject import earlier_facts, inject_knowledge

        cfg, ws = resolve_config(config, preset, set_, workspace)
        run = ws.run(run_id)
        if not any(run.curated.glob("*.parquet")):
            raise ValueError(f"{run.curated} holds no curated documents; run `consolidate curate --run-id {run_id}` first")
        stats = inject_knowledge(run.path, cfg.knowledge, cfg.sampling, earlier_facts(ws.runs, exclude=run.path), memory=ws.memory)
        if json_:
            typer.echo(json.dumps(stats, indent=1))
            return
        typer.echo(f"run {run_id}: {stats['facts']} fact items from {stats['documents']} documents "
                   f"({stats['heldout_documents']} held out), {stats['augmented']} augmented texts {stats['forms']} "
                   f"in {stats['seconds']:.2f} s -> {run.facts}")
        for item in read_facts(run.facts)[:show]:
            typer.echo(f"  [{item.kind}] {item.cue} -> {item.answer!r}   asked: {item.question!r}")
