"""`consolidate tokenizer train` and `consolidate tokenize`: the data preparation on its own.

`tokenizer train` fits the demo's byte-level BPE on the corpus's train split. `tokenize` runs
lib.data.sampling.prepare_run_data for one run folder (what a night runs): token shards of every
source, held-out new documents, the sampling manifest and data.json, with a table of tokens per
source and the exposure warnings. `tokenize --check` re-validates a prepared folder against a
tokenizer. The tokenizer is chosen by lib.data.tokenizer.resolve_tokenizer, the sources and the token
budget by lib.data.sampling, the run id by lib.registry.runs: the same functions the flows call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Train or inspect the BPE tokenizer of the embedded demo.", no_args_is_help=True)

    @group.command("train")
    def train(
        out: Annotated[Optional[Path], typer.Option("--out", help="Output folder (default: tokenizer.path, else <workspace>/tokenizer).")] = None,
        corpus: Annotated[Optional[str], typer.Option("--corpus", help="Corpus to train on (default: workspace.corpus).")] = None,
        vocab_size: Annotated[Optional[int], typer.Option("--vocab-size", help="Vocabulary size (default: tokenizer.vocab_size).")] = None,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Fit a byte-level BPE with BOS/EOS/PAD and FIM special tokens on the corpus's train split."""
        from lib.data.corpus import replay_corpus_name
        from lib.data.tokenizer import corpus_shards, load_tokenizer, train_on_corpus

        cfg, ws = resolve_config(config, preset, set_, workspace)
        folder = ws.corpus_train(corpus or replay_corpus_name(ws, cfg))
        target = out or cfg.tokenizer.path or ws.tokenizer
        tok = load_tokenizer(train_on_corpus(folder, vocab_size or cfg.tokenizer.vocab_size, target))
        info = {"path": str(target), "vocab_size": tok.vocab_size, "hash": tok.hash, "corpus_files": len(corpus_shards(folder)),
                "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id}
        typer.echo(json.dumps(info, indent=2) if json_ else f"tokenizer {tok.hash[:12]} ({tok.vocab_size} ids) → {target}")

    app.add_typer(group, name="tokenizer")

    @app.command("tokenize")
    def tokenize(
        run: Annotated[Optional[str], typer.Option("--run", help="Run id: data goes to <workspace>/runs/<run>/ (default: manual-<UTC time>-<hex>).")] = None,
        new_data: Annotated[Optional[Path], typer.Option("--new-data", help="Tonight's curated data (default: the run's curated/ folder).")] = None,
        corpus_only: Annotated[bool, typer.Option("--corpus-only", help="Only the corpus (v0 pre-training), budget from model.pretrain_iterations.")] = False,
        tokenizer: Annotated[Optional[Path], typer.Option("--tokenizer", help="Tokenizer folder (default: tokenizer.path, the champion's, <workspace>/tokenizer).")] = None,
        out: Annotated[Optional[Path], typer.Option("--out", help="Output folder (default: the run folder).")] = None,
        workers: Annotated[Optional[int], typer.Option("--workers", help="Tokenizer processes (default: curation.workers, else all cores).")] = None,
        no_cache: Annotated[bool, typer.Option("--no-cache", help="Tokenize every file again instead of reusing <workspace>/index/tokens.")] = False,
        check: Annotated[Optional[Path], typer.Option("--check", help="Only validate this prepared folder against the tokenizer, then exit.")] = None,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Tokenize the sources to shards and draw the sampling manifest (the data step alone)."""
        from rich.console import Console

        from lib.registry.runs import new_run_id
        from lib.data.sampling import corpus_sources, default_sources, prepare_run_data, token_budget
        from lib.tables import sources_table
        from lib.data.tokenizer import resolve_tokenizer

        cfg, ws = resolve_config(config, preset, set_, workspace)
        tok_dir = resolve_tokenizer(cfg, ws, tokenizer)
        if check is not None:
            from lib.data.loader import validate
            from lib.data.tokenizer import load_tokenizer

            summary = validate(check, load_tokenizer(tok_dir).hash)
            typer.echo(json.dumps(summary, indent=2) if json_ else f"{check}: ok ({summary['manifest_rows']:,} manifest rows, {summary['shards']} shards)")
            return
        run_dir = ws.run(run or new_run_id("manual"))
        sources = corpus_sources(ws, cfg) if corpus_only else default_sources(ws, cfg, new_data if new_data is not None else run_dir.curated)
        budget = token_budget(cfg, pretrain=corpus_only)
        target = out or run_dir.path
        data = prepare_run_data(ws, cfg, sources, tok_dir, target, budget, workers=workers, cache=not no_cache)
        if json_:
            typer.echo(json.dumps(data, indent=2, default=str))
            return
        console = Console()
        console.print(sources_table(data, f"manifest {data['manifest_hash'][:12]} → {target}").rich())
        files = [f for src in data["sources"].values() for f in src["files"]]
        reused = sum(f["cached"] for f in files)
        console.print(f"{data['tokens_drawn']:,} tokens drawn for a budget of {budget:,}; tokenizer {data['tokenizer_hash'][:12]}; "
                      f"{len(files) - reused} file(s) tokenized, {reused} reused from {ws.token_cache}")
        for n in data.get("notes", []):
            console.print(n)
        for w in data["warnings"]:
            console.print(f"[yellow]warning:[/] {w}")
