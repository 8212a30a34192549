"""`consolidate init`: adopt the Hugging Face model you already serve, with your replay corpus.

    consolidate init --model ./my-model --replay ./corpus/ --original-lr 3e-4 -w ./ws

Everything is checked before anything is written (lib/registry/adopt.py says what is refused and why);
then the replay corpus is ingested, the model becomes v0 (champion and latest), the corpus is
tokenized into the token cache and v0's bits per byte on old_val measured once. The same
function runs behind the bootstrap flow's `adopt` parameter (the Prefect UI form).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WaitOpt, WorkspaceOpt, night_lock, resolve_config


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init(
        model: Annotated[Path, typer.Option("--model", help="Your model's folder: config.json, model.safetensors (or shards with "
                                                              "model.safetensors.index.json), tokenizer files.")],
        replay: Annotated[list[str], typer.Option("--replay", help="Replay corpus: parquet, JSONL or text files, or folders "
                                                                     "of them (repeatable); or generate:N_TOKENS to sample it "
                                                                     "from the model itself. Replayed every night; its held-out "
                                                                     "part is what the forgetting gate measures.")],
        original_lr: Annotated[Optional[float], typer.Option("--original-lr", help="Peak learning rate the model was last "
                                                                                     "trained with; nights train at it × "
                                                                                     "training.lr_scale. Required unless the "
                                                                                     "folder's meta.json records it.")] = None,
        replay_val: Annotated[Optional[list[Path]], typer.Option("--replay-val", help="Validation files (old_val); default: "
                                                                                        "5% of --replay by id hash.")] = None,
        text_column: Annotated[str, typer.Option("--text-column", help="Column (parquet) or key (JSONL) holding the text.")] = "text",
        corpus: Annotated[str, typer.Option("--corpus", help="Name of the replay corpus in the workspace.")] = "replay",
        no_warm: Annotated[bool, typer.Option("--no-warm", help="Skip tokenizing the corpus and measuring v0 now (the first night does it).")] = False,
        config: ConfigOpt = None,
        preset: PresetOpt = "default",
        set_: SetOpt = None,
        workspace: WorkspaceOpt = None,
        wait: WaitOpt = False,
        json_: JsonOpt = False,
    ) -> None:
        """Adopt your Hugging Face causal LM as v0 of a workspace, with your replay corpus."""
        import logging

        from rich.console import Console
        from lib.registry.adopt import adopt
        from lib.tables import adoption_table

        logging.getLogger("lib").setLevel(logging.WARNING)
        cfg, ws = resolve_config(config, preset, set_, workspace)
        console = Console(stderr=json_)
        with night_lock(cfg, ws, "consolidate init", wait):  # never beside a bootstrap or a night
            out = adopt(ws, cfg, model, list(replay), replay_val=list(replay_val or []), original_lr_value=original_lr,
                        text_column=text_column, corpus=corpus, warm=not no_warm, say=lambda m: console.print(m, highlight=False))
        if json_:
            typer.echo(json.dumps(out, indent=2, default=str))
            return
        console.print(adoption_table(out, cfg.training.lr_scale).rich())
        console.print(f"next: put new text into the buffer (consolidate buffer add FILE -w {ws.root}, or serve with "
                      f"consolidate serve -w {ws.root}), then run a night: consolidate run -w {ws.root}")
