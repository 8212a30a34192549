"""`consolidate serve` (OpenAI-compatible HTTP server) and `consolidate chat` (terminal chat).

Both talk to the lineage's `champion` and capture what is said into the buffer, so the
next nightly run can consolidate it. Both prompt an instruct model with its own chat template
(`LoadedModel.chat_prompt`) and capture the session in the same rendering (`capture.format`).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config


def serve(
    config: ConfigOpt = None,
    preset: PresetOpt = "default",
    overrides: SetOpt = None,
    workspace: WorkspaceOpt = None,
    host: Annotated[Optional[str], typer.Option(help="Listen address (overrides serve.host).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Listen port (overrides serve.port).")] = None,
    no_capture: Annotated[bool, typer.Option("--no-capture", help="Do not write conversations into the buffer.")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the champion with /v1/completions, /v1/chat/completions and /v1/models."""
    sets = list(overrides or [])
    if host is not None:
        sets.append(f"serve.host={host}")
    if port is not None:
        sets.append(f"serve.port={port}")
    if no_capture:
        sets.append("serve.capture=false")
    cfg, ws = resolve_config(config, preset, sets, workspace)
    _require_champion(ws)
    from lib.serving.serve import run

    auth = "bearer token required" if cfg.serve.token is not None else "no authentication (set serve.token)"
    typer.echo(f"serving the champion of {ws.root} on http://{cfg.serve.host}:{cfg.serve.port}/v1 ({auth}; capture {'on' if cfg.serve.capture else 'off'})", err=True)
    run(ws.ensure(), cfg, log_level=log_level)


def chat(
    config: ConfigOpt = None,
    preset: PresetOpt = "default",
    overrides: SetOpt = None,
    workspace: WorkspaceOpt = None,
    system: Annotated[Optional[str], typer.Option(help="System prompt of the session.")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="Longest reply in tokens (default serve.max_new_tokens).")] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 is greedy.")] = 0.7,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the sampling, for a reproducible session.")] = None,
    no_capture: Annotated[bool, typer.Option("--no-capture", help="Do not keep this session in the buffer.")] = False,
) -> None:
    """Chat with the champion in the terminal; the session is captured as one document on exit.

    Type /exit (or end the input) to leave. Reads stdin, so a session can be piped in."""
    from rich.console import Console
    from rich.prompt import Prompt
    from rich.text import Text

    from lib.buffer.capture import open_capture
    from lib.serving.generate import Champion
    from lib.registry.lineage import Lineage

    cfg, ws = resolve_config(config, preset, overrides, workspace)
    _require_champion(ws)
    if max_new_tokens is not None and not 1 <= max_new_tokens <= cfg.serve.max_new_tokens:
        raise ValueError(f"--max-new-tokens {max_new_tokens}: must be between 1 and serve.max_new_tokens={cfg.serve.max_new_tokens}")
    console = Console()
    loaded = Champion(Lineage(ws.lineage_db), device=cfg.serve.device, cpu_threads=cfg.serve.cpu_threads).current()
    fmt = "its chat template" if loaded.chat_template else "a plain transcript"
    console.print(f"[bold]champion {loaded.version}[/bold] on {loaded.device}, prompted with {fmt}; /exit to leave", highlight=False)
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    while True:
        try:
            line = Prompt.ask("[bold cyan]you[/bold cyan]", console=console)
        except (EOFError, KeyboardInterrupt):
            console.print()
            break
        if line.strip() in ("/exit", "/quit"):
            break
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        prompt = loaded.chat_prompt(messages)
        room = loaded.context_length - len(prompt.ids)
        if room < 1:
            console.print("[red]the conversation fills the model's context; ending the session[/red]")
            messages.pop()
            break
        n = min(max_new_tokens or cfg.serve.max_new_tokens, room)
        out = loaded.complete(prompt.text, n, temperature=temperature, stop=prompt.stops, seed=seed, prompt_ids=prompt.ids, stop_ids=prompt.stop_ids)
        reply = out.text.strip()
        messages.append({"role": "assistant", "content": reply})
        console.print(Text.assemble((f"{loaded.version}: ", "bold green"), reply))  # Text: a reply's "[...]" is not markup
    if no_capture or not cfg.serve.capture or not any(m["role"] == "user" for m in messages):
        console.print("session not captured")
        return
    hook = open_capture(ws.ensure(), cfg, loaded.special_tokens)
    record = hook.capture_conversation(messages, {"source": f"chat:{loaded.version}"}, tokenizer=loaded.tokenizer)
    path = hook.flush()
    console.print(f"session captured as record {record} in {path}", highlight=False)


def _require_champion(ws) -> None:
    if not ws.lineage_db.is_file():
        raise FileNotFoundError(f"{ws.lineage_db} does not exist: bootstrap the workspace first (no champion to serve)")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("chat")(chat)
