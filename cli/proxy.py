"""`consolidate proxy --upstream URL` (capture in front of any OpenAI-compatible server) and
`consolidate rollout [VERSION]` (push a version to the serving engine by hand, recorded).

The proxy captures into the workspace's memory buffer what `consolidate serve` would have; the
rollout is the same push a night runs after a promotion (`serve.rollout`), for a push that failed
or a rollback that must reach the engine.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def proxy(
    upstream: Annotated[Optional[str], typer.Option("--upstream", "-u", help="Base URL of the server to front, e.g. http://127.0.0.1:8000 (overrides proxy.upstream).")] = None,
    config: ConfigOpt = None,
    preset: PresetOpt = "default",
    overrides: SetOpt = None,
    workspace: WorkspaceOpt = None,
    host: Annotated[Optional[str], typer.Option(help="Listen address (overrides proxy.host).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Listen port (overrides proxy.port).")] = None,
    no_capture: Annotated[bool, typer.Option("--no-capture", help="Forward only; write nothing into the memory buffer.")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Forward /v1/chat/completions, /v1/completions and /v1/models to UPSTREAM, capturing each answered exchange."""
    sets = list(overrides or [])
    if upstream is not None:
        sets.append(f"proxy.upstream={upstream}")
    if host is not None:
        sets.append(f"proxy.host={host}")
    if port is not None:
        sets.append(f"proxy.port={port}")
    if no_capture:
        sets.append("serve.capture=false")
    cfg, ws = resolve_config(config, preset, sets, workspace)
    from lib.serving.proxy import run

    if not cfg.proxy.upstream:
        raise ValueError("no upstream: give --upstream URL (or proxy.upstream), the base URL of the server to front")
    auth = "bearer token required" if cfg.serve.token is not None else "no authentication (set serve.token)"
    typer.echo(f"capture proxy on http://{cfg.proxy.host}:{cfg.proxy.port}/v1 -> {cfg.proxy.upstream} "
               f"({auth}; capture {'on' if cfg.serve.capture else 'off'} into {ws.buffers})", err=True)
    run(ws.ensure(), cfg, log_level=log_level)


def rollout(
    version: Annotated[str, typer.Argument(help="Version id or alias to push; it must be the champion.")] = "champion",
    config: ConfigOpt = None,
    preset: PresetOpt = "default",
    overrides: SetOpt = None,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Push the champion to the serving engine by serve.rollout (command, sglang, vllm); recorded in lineage."""
    from cli.lineage import echo_json, lineage_of
    from lib.serving.rollout import RolloutError, roll_out

    cfg, ws = resolve_config(config, preset, overrides, workspace)
    lin = lineage_of(ws)
    name = lin.resolve_version(version)
    attempt = 1 + sum(1 for r in lin.rollouts(name) if r["run_id"] == "")
    try:
        out = roll_out(lin, name, cfg.serve.rollout, run_id=None, attempt=attempt)
    except RolloutError as exc:
        typer.secho(f"{name} is promoted, not live: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    if as_json:
        return echo_json(out)
    typer.echo(f"{name}: {out['status']} ({out['kind']}{' ' + out['target'] if out['target'] else ''}): {out['detail']}")


def register(app: typer.Typer) -> None:
    app.command("proxy")(proxy)
    app.command("rollout")(rollout)
