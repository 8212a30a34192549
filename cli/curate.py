"""`consolidate curate`, `consolidate dedup`, `consolidate quality train`: curation stages alone.

`consolidate curate` moves bad buffer files to quarantine/ and registers the others in lineage,
as a night does, so it holds the workspace's night lock (cli.common.night_lock): it waits for a
running night (`--no-wait`: exits 75 at once) and a night waits for it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WaitOpt, WorkspaceOpt, night_lock, resolve_config


def register(app: typer.Typer) -> None:
    @app.command("curate")
    def curate_cmd(
        run_id: Annotated[Optional[str], typer.Option("--run-id", help="Run folder name (default: curate-<time>).")] = None,
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        wait: WaitOpt = True, json_: JsonOpt = False,
    ) -> None:
        """Curate the pending buffer files into <workspace>/runs/<run-id>/curated (no training)."""
        from lib.curation.pipeline import curate
        from lib.registry.runs import new_run_id

        cfg, ws = resolve_config(config, preset, set_, workspace)
        ws.ensure()
        run = ws.run(run_id or new_run_id("curate"))
        with night_lock(cfg, ws, f"consolidate curate {run.run_id}", wait):
            stats = curate(ws, cfg, run.ensure())
        if json_:
            typer.echo(json.dumps(stats, indent=1))
            return
        typer.echo(f"run {run.run_id}: {stats['docs_in']} documents in, {stats['docs_out']} kept -> {run.curated}")
        for stage in ("ingest", "exact", "near", "length", "language", "quality"):
            if stage in stats:
                typer.echo(f"  {stage:9s} {json.dumps(stats[stage])}")

    @app.command("dedup")
    def dedup_cmd(
        inputs: Annotated[list[Path], typer.Argument(help="Parquet files (column text), JSONL (field text, a document per line), text files (one document each) or folders of them (lib/data/readers.py).")],
        out: Annotated[Path, typer.Option("--out", help="Output folder for kept.parquet, duplicates.parquet, stats.json.")],
        threshold: Annotated[float, typer.Option("--threshold", help="Jaccard threshold of near duplicates.")] = 0.8,
        num_perm: Annotated[int, typer.Option("--num-perm", help="MinHash permutations.")] = 128,
        ngram: Annotated[int, typer.Option("--ngram", help="Shingle size.")] = 5,
        shingle: Annotated[str, typer.Option("--shingle", help="word or char shingles.")] = "word",
        workers: Annotated[Optional[int], typer.Option("--workers", help="Threads for signatures (default: all cores).")] = None,
        verify: Annotated[bool, typer.Option("--verify/--no-verify", help="Check LSH candidates with the exact Jaccard (candidates banded 0.2 below the threshold).")] = True,
    ) -> None:
        """Exact + near (MinHash-LSH) deduplication of files, outside any workspace (lib.curation.pipeline's
        dedup steps, run here)."""
        from lib.config import CurationConfig
        from lib.curation.dedup_files import dedup_files
        from lib.files import write_json

        if not 0 < threshold < 1:
            raise ValueError(f"--threshold must be between 0 and 1, got {threshold}")
        if shingle not in ("word", "char"):
            raise ValueError(f"--shingle must be word or char, got {shingle!r}")
        started = time.perf_counter()
        section = CurationConfig(threshold=threshold, num_perm=num_perm, ngram=ngram, shingle=shingle,
                                 verify_jaccard=verify, workers=workers)
        stats = dedup_files(inputs, out, section)
        stats.update(verify=verify, threshold=threshold, num_perm=num_perm, ngram=ngram, shingle=shingle,
                     seconds=round(time.perf_counter() - started, 3))
        write_json(out / "stats.json", stats, indent=1)
        typer.echo(json.dumps(stats))

    quality = typer.Typer(help="The fastText quality classifier.", no_args_is_help=True)

    @quality.command("train")
    def quality_train(
        positive: Annotated[Path, typer.Option("--positive", help="Good examples: JSONL (an example per line), parquet, or text files (one example each); a folder: its files.")],
        negative: Annotated[Path, typer.Option("--negative", help="Bad examples, same formats.")],
        out: Annotated[Path, typer.Option("--out", help="Model file to write (.bin).")],
        epoch: Annotated[int, typer.Option("--epoch", help="Training epochs.")] = 25,
    ) -> None:
        """Train the quality classifier; point curation.quality_model at the result."""
        from lib.curation.dedup_files import read_texts
        from lib.curation.fasttext_filters import train_quality_model

        _, pos = read_texts(positive)
        _, neg = read_texts(negative)
        path = train_quality_model(pos, neg, out, epoch=epoch)
        typer.echo(f"quality model -> {path} ({len(pos)} positive, {len(neg)} negative examples)")

    app.add_typer(quality, name="quality")
