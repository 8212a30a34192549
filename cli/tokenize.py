"""`consolidate tokenizer train` and `consolidate tokenize`: the data preparation on its own.

`tokenizer train` fits the demo's byte-level BPE on the corpus's train split. `tokenize` runs
lib.sampling.prepare_training_data for one run folder: token shards of every source, held-out new
documents, the sampling manifest and data.json, with a table of tokens per source and the
exposure warnings. `tokenize --check` re-validates a prepared folder against a tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def _champion_tokenizer(ws) -> Path | None:
    """The champion checkpoint's folder (it carries its tokenizer files), if there is one."""
    if not ws.lineage_db.exists():
        return None
    from lib.lineage import Lineage

    lin = Lineage(ws.lineage_db)
    version = lin.alias("champion")
    if version is None:
        return None
    path = Path(lin.get_version(version)["path"])
    return path if (path / "tokenizer.json").is_file() else None


def resolve_tokenizer(cfg, ws, given: Path | None) -> Path:
    """--tokenizer, else tokenizer.path, else the champion's own, else the workspace's trained one."""
    explicit = given or cfg.tokenizer.path
    if explicit is not None:
        if not (Path(explicit) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"tokenizer folder {explicit} has no tokenizer.json")
        return Path(explicit)
    for candidate in (_champion_tokenizer(ws), ws.tokenizer):
        if candidate is not None and (candidate / "tokenizer.json").is_file():
            return candidate
    raise FileNotFoundError(
        f"no tokenizer: pass --tokenizer, set tokenizer.path, promote a champion, or run `consolidate tokenizer train` (writes {ws.tokenizer})")


def sources_table(data: dict, title: str):
    from rich.table import Table

    table = Table(title=title)
    for col in ("source", "kind", "docs", "held out", "tokens available", "tokens drawn", "share", "epochs", "exposures"):
        table.add_column(col, justify="left" if col in ("source", "kind") else "right")
    for name, s in data["sources"].items():
        table.add_row(name, s["kind"], f"{s['docs']:,}", f"{s['heldout_docs']:,}", f"{s['tokens_available']:,}",
                      f"{s['tokens_drawn']:,}", f"{s['share']:.1%}", f"{s['epochs']:.2f}", f"{s['exposures']['mean']:.1f}")
    return table


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
        import pyarrow.parquet as pq

        from lib.tokenizer import load_tokenizer, train_bpe

        cfg, ws = resolve_config(config, preset, set_, workspace)
        from lib.corpus import replay_corpus_name

        folder = ws.corpus_train(corpus or replay_corpus_name(ws, cfg))
        files = sorted(folder.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"no parquet shards in {folder}: build the corpus first (`consolidate corpus build-stdlib`)")

        def texts():
            for f in files:
                yield from (t for t in pq.read_table(f, columns=["text"]).column("text").to_pylist() if t)

        target = out or cfg.tokenizer.path or ws.tokenizer
        tok = load_tokenizer(train_bpe(texts(), vocab_size or cfg.tokenizer.vocab_size, target))
        info = {"path": str(target), "vocab_size": tok.vocab_size, "hash": tok.hash, "corpus_files": len(files),
                "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id}
        typer.echo(json.dumps(info, indent=2) if json_ else f"tokenizer {tok.hash[:12]} ({tok.vocab_size} ids) → {target}")

    app.add_typer(group, name="tokenizer")

    @app.command("tokenize")
    def tokenize(
        run: Annotated[Optional[str], typer.Option("--run", help="Run id: data goes to <workspace>/runs/<run>/ (default: manual-<time>).")] = None,
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
        from datetime import datetime, timezone

        from rich.console import Console

        from lib.config import SourceConfig
        from lib.sampling import default_sources, prepare_training_data

        cfg, ws = resolve_config(config, preset, set_, workspace)
        tok_dir = resolve_tokenizer(cfg, ws, tokenizer)
        if check is not None:
            from lib.loader import validate
            from lib.tokenizer import load_tokenizer

            summary = validate(check, load_tokenizer(tok_dir).hash)
            typer.echo(json.dumps(summary, indent=2) if json_ else f"{check}: ok ({summary['manifest_rows']:,} manifest rows, {summary['shards']} shards)")
            return
        run_dir = ws.run(run or datetime.now(timezone.utc).strftime("manual-%Y%m%d-%H%M%S"))
        if corpus_only:
            from lib.corpus import replay_corpus_name

            name = replay_corpus_name(ws, cfg)
            sources = [SourceConfig(name=name, path=ws.corpus_train(name), weight=1.0, kind="corpus")]
            budget = cfg.model.pretrain_iterations * cfg.training.total_batch_size
        else:
            sources = default_sources(ws, cfg, new_data if new_data is not None else run_dir.curated)
            budget = cfg.training.num_iterations * cfg.training.total_batch_size
        target = out or run_dir.path
        data = prepare_training_data(sources, tok_dir, target, token_budget=budget, sampling=cfg.sampling,
                                     seq_len=cfg.training.seq_len, workers=workers or cfg.curation.workers,
                                     cache_dir=None if no_cache else ws.token_cache)
        if json_:
            typer.echo(json.dumps(data, indent=2, default=str))
            return
        console = Console()
        console.print(sources_table(data, f"manifest {data['manifest_hash'][:12]} → {target}"))
        files = [f for src in data["sources"].values() for f in src["files"]]
        reused = sum(f["cached"] for f in files)
        console.print(f"{data['tokens_drawn']:,} tokens drawn for a budget of {budget:,}; tokenizer {data['tokenizer_hash'][:12]}; "
                      f"{len(files) - reused} file(s) tokenized, {reused} reused from {ws.token_cache}")
        for n in data.get("notes", []):
            console.print(n)
        for w in data["warnings"]:
            console.print(f"[yellow]warning:[/] {w}")
