"""`consolidate train` (the trainer alone) and `consolidate checkpoint` (delta storage: compact,
restore, materialize, info).

`consolidate train` launches a training the way the night does (lib.training.launch.launch):
torchrun in a supervised process group that dies with this command, under the workspace's
training lock, so a manual training never runs beside a night's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def _version_dir(ws, name_or_path: str) -> Path:
    """A version name (v3) under <ws>/checkpoints, or a path to a model folder."""
    candidate = Path(name_or_path)
    if candidate.exists() and ("/" in name_or_path or candidate.is_absolute()):
        return candidate
    path = ws.checkpoint(name_or_path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint version {name_or_path!r} in {ws.checkpoints} (and no such folder)")
    return path


def train(
    data: Annotated[Path, typer.Option("--data", help="Prepared data folder (data.json, manifest.parquet, shards/); usually a run folder.")],
    out: Annotated[Path, typer.Option("--out", help="Version folder to write.")],
    parent: Annotated[Optional[str], typer.Option("--parent", help="Version (name or folder) to continue from.")] = None,
    init: Annotated[bool, typer.Option("--init", help="Pre-train a new model from scratch (v0) with model.* settings.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest complete snapshot.")] = False,
    tokenizer: Annotated[Optional[Path], typer.Option("--tokenizer", help="Tokenizer folder (--init; default tokenizer.path).")] = None,
    nproc_per_node: Annotated[Optional[int], typer.Option("--nproc-per-node", help="Processes (default training.nproc_per_node); >1 runs torchrun.")] = None,
    node_rank: Annotated[Optional[int], typer.Option("--node-rank", help="This machine's rank (0..training.nnodes-1) when training.nnodes > 1; every machine runs the same command with its own.")] = None,
    config: ConfigOpt = None,
    preset: PresetOpt = "default",
    overrides: SetOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Train once: continue a version on prepared data (or pre-train v0 with --init) and write a version folder."""
    import logging

    from lib.training.launch import TrainingStopped, launch
    from lib.training.train import EXIT_STOPPED
    from lib.workspace import RunDir

    cfg, ws = resolve_config(config, preset, overrides, workspace)
    if (parent is None) == (not init):
        raise ValueError("give exactly one of --parent VERSION or --init")
    parent_dir = _version_dir(ws, parent) if parent else None
    if nproc_per_node:
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={"nproc_per_node": nproc_per_node})})
    logging.getLogger("lib").setLevel(logging.INFO)  # the trainer's output lines and the lock's waits (the root logger says WARNING)
    try:  # the night's own launcher: the same torchrun line, lock and supervision, no Prefect run
        result = launch(cfg, str(data), str(out), str(RunDir(Path(data)).train),
                        parent=str(parent_dir) if parent_dir else None, init=init, resume=resume,
                        tokenizer_dir=str(tokenizer) if tokenizer else None, node_rank=node_rank)
    except TrainingStopped as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_STOPPED) from None
    typer.echo(json.dumps(result["final_metrics"], indent=2))


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    group = typer.Typer(help="Checkpoint versions: delta storage against the parent, restore, inspect.", no_args_is_help=True)

    @group.command("compact")
    def compact_cmd(
        version: Annotated[str, typer.Argument(help="Version name or folder to store as a delta.")],
        parent: Annotated[Optional[str], typer.Option(help="Parent version (default: meta.json parent_checkpoint).")] = None,
        config: ConfigOpt = None, preset: PresetOpt = "default", overrides: SetOpt = None,
        workspace: WorkspaceOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Replace model.safetensors by a lossless zstd delta against the parent (verified before deleting)."""
        from lib.checkpoints.checkpoint import compact, read_meta

        _, ws = resolve_config(config, preset, overrides, workspace)
        vdir = _version_dir(ws, version)
        meta = read_meta(vdir)
        if parent:
            parent_dir = _version_dir(ws, parent)
        elif meta.get("parent_checkpoint"):  # the sibling in this workspace, never a path recorded elsewhere
            parent_dir = _version_dir(ws, meta["parent_checkpoint"])
        else:
            raise ValueError(f"{vdir}/meta.json records no parent_checkpoint: pass --parent")
        info = compact(vdir, parent_dir)
        if as_json:
            typer.echo(json.dumps(info, indent=2))
        else:
            typer.echo(f"{vdir.name}: {info['full_bytes']:,} → {info['delta_bytes']:,} bytes ({info['ratio']:.1%} of full) against {info['parent_version']}")

    @group.command("restore")
    def restore_cmd(
        version: Annotated[str, typer.Argument(help="Delta-stored version to make full again.")],
        config: ConfigOpt = None, preset: PresetOpt = "default", overrides: SetOpt = None, workspace: WorkspaceOpt = None,
    ) -> None:
        """Rebuild model.safetensors in place (bit-exact, sha256-checked) and drop the delta."""
        from lib.checkpoints.checkpoint import restore

        _, ws = resolve_config(config, preset, overrides, workspace)
        typer.echo(str(restore(_version_dir(ws, version))))

    @group.command("info")
    def info_cmd(
        version: Annotated[str, typer.Argument(help="Version name or folder.")],
        config: ConfigOpt = None, preset: PresetOpt = "default", overrides: SetOpt = None,
        workspace: WorkspaceOpt = None, as_json: JsonOpt = False,
    ) -> None:
        """Storage (full/delta, chain depth, size), parent, LR and final metrics of a version."""
        from lib.checkpoints.checkpoint import read_meta, storage_info

        _, ws = resolve_config(config, preset, overrides, workspace)
        vdir = _version_dir(ws, version)
        meta = read_meta(vdir)
        out = {
            "version": meta.get("version", vdir.name), "path": str(vdir), **storage_info(vdir),
            "parent_checkpoint": meta.get("parent_checkpoint"), "original_lr": meta.get("original_lr"),
            "peak_lr": meta.get("peak_lr"), "optimizer_state": meta.get("optimizer_state"),
            "digest": meta.get("digest"), "final_metrics": meta.get("final_metrics"),
        }
        typer.echo(json.dumps(out, indent=2, default=str) if as_json else "\n".join(f"{k}: {v}" for k, v in out.items() if k != "final_metrics"))

    app.add_typer(group, name="checkpoint")
