"""`consolidate run` (the nightly flow, locally) and `consolidate bootstrap` (embedded default + v0).

Both run the Prefect flows in this process: with no PREFECT_API_URL, Prefect starts its
ephemeral API (10-20 s, longer on a busy machine: the start-up timeout is raised to 180 s unless
set), so the UI-less local run is the same code path as a deployment on a worker.
"""

from __future__ import annotations

import json
import os

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def prefect_environment() -> None:
    """Defaults for running flows from the CLI; anything the user set wins."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _summary(result: dict) -> str:
    keep = {k: v for k, v in result.items() if k in ("status", "version", "parent", "run_id", "curated_docs", "timings")}
    if "gate" in result:
        keep["gate"] = result["gate"]["summary"]
        keep["champion"] = result["gate"]["champion"]
    return json.dumps(keep, indent=2, default=str)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None,
            workspace: WorkspaceOpt = None, as_json: JsonOpt = False) -> None:
        """Run the nightly consolidation flow on this machine (curate, train, evaluate, gate, promote)."""
        cfg, _ = resolve_config(config, preset, set_, workspace)
        prefect_environment()
        from flows.consolidate import nightly_consolidation

        result = nightly_consolidation(cfg)
        typer.echo(json.dumps(result, indent=2, default=str) if as_json else _summary(result))

    @app.command("bootstrap")
    def bootstrap(config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None,
                  workspace: WorkspaceOpt = None, as_json: JsonOpt = False) -> None:
        """Build the embedded default (corpus, demo buffer, tokenizer) and pre-train v0 unless a champion exists."""
        cfg, _ = resolve_config(config, preset, set_, workspace)
        prefect_environment()
        from flows.bootstrap import bootstrap as bootstrap_flow

        result = bootstrap_flow(cfg)
        typer.echo(json.dumps(result, indent=2, default=str) if as_json else _summary(result))
