"""`consolidate run` (the nightly flow, locally) and `consolidate bootstrap` (embedded default + v0).

Both run the Prefect flows in this process (`flow_session`):

- With no PREFECT_API_URL, Prefect's ephemeral API server is started here (10-20 s, longer on a
  busy machine: the start-up timeout is raised to 180 s unless set), so the UI-less local run is
  the same code path as a deployment on a worker.
- PREFECT_HOME defaults to `<workspace>/.prefect` (the user's setting wins): the ephemeral API's
  database stays with the workspace instead of being shared by every workspace on the machine.
  The user's `~/.prefect/profiles.toml` is still read, so a configured server is still used.
- The server never outlives the command, and never leaves it first: it runs in a session of its
  own, so SIGTERM and Ctrl-C (to the command or its whole process group) end the command through
  its `finally` blocks while the API still answers (the night stays resumable, torchrun's
  process group stops after its snapshot), then Prefect's exit handler stops the server; a
  watchdog process stops it if the command dies without that (SIGKILL, OOM killer).
- `--no-wait`: if another night (or bootstrap) holds the workspace, exit at once with code 75
  (EX_TEMPFAIL, "try again later") and a message naming it; the default waits up to
  `orchestration.night_lock_timeout_s`, then exits 75 the same way.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WaitOpt, WorkspaceOpt, exit_busy, exit_failed, resolve_config

# The watchdog: waits until its parent (this command) is gone, however it ended, then stops the
# server if it still runs and is still the same process (its start time in /proc matches).
_STOP_WHEN_ORPHANED = """
import os, signal, sys, time
parent, pid, started = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def same():
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19] == started
    except (OSError, IndexError):
        return False
while os.getppid() == parent:
    time.sleep(1)
for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
    if not same():
        break
    os.kill(pid, sig)
    deadline = time.monotonic() + wait_s
    while same() and time.monotonic() < deadline:
        time.sleep(0.2)
"""


def prefect_environment(ws=None) -> None:
    """Defaults for running flows from the CLI; anything the user set wins."""
    if ws is not None and "PREFECT_HOME" not in os.environ and "prefect" not in sys.modules:
        profiles = Path("~/.prefect/profiles.toml").expanduser()
        if profiles.is_file():
            os.environ.setdefault("PREFECT_PROFILES_PATH", str(profiles))
        ws.prefect_home.mkdir(parents=True, exist_ok=True)
        os.environ["PREFECT_HOME"] = str(ws.prefect_home)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


_watchdogs: list[subprocess.Popen] = []  # referenced for the life of the process


def _ephemeral_server() -> None:
    """Start Prefect's ephemeral API server now (the flow's client reuses it) with a watchdog
    that stops it if this process dies without Prefect's exit handler; nothing when an API URL
    is configured."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    from prefect.server.api.server import SubprocessASGIServer

    class DetachedServer(SubprocessASGIServer):
        """Prefect's own server command, started in a session of its own: a Ctrl-C in the
        terminal or a SIGTERM to our process group stops the command, which then winds the night
        down through the API, instead of stopping the API first (and leaving every Prefect call
        of the wind-down to retry against a dead server for minutes)."""

        def _run_uvicorn_command(self):
            popen = subprocess.Popen
            subprocess.Popen = functools.partial(popen, start_new_session=True)
            try:
                return super()._run_uvicorn_command()
            finally:
                subprocess.Popen = popen

    server = DetachedServer()  # registered as the instance Prefect's get_client() reuses
    server.start()
    if sys.platform.startswith("linux") and server.server_process is not None and not _watchdogs:
        pid = server.server_process.pid
        _watchdogs.append(subprocess.Popen(
            [sys.executable, "-c", _STOP_WHEN_ORPHANED, str(os.getpid()), str(pid), _start_time(pid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ))


def _stop_on_sigterm(signum, frame):
    # a SIGTERM ends the command like Ctrl-C does: through every `finally` on the way out
    raise SystemExit(128 + signum)


@contextmanager
def flow_session(ws, as_json: bool = False) -> Iterator[None]:
    """Run flows from the CLI: per-workspace Prefect home, SIGTERM as a clean exit, Ctrl-C as exit
    code 130 even where a finalizer or a library swallowed its KeyboardInterrupt (lib.interrupts:
    the flows stop at their next stage boundary), the ephemeral API server stopped however the
    command ends, a busy workspace as exit code 75, a failure's cause (stage, OS error and path) as
    the last line (and as JSON with `as_json`)."""
    from lib.interrupts import ctrl_c_deferred, ctrl_c_recorded

    prefect_environment(ws)
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        # after a Ctrl-C: KeyboardInterrupt, whatever the body did with it; a later SIGINT exits 130 at once
        with ctrl_c_recorded(exit_code_after=130):
            with ctrl_c_deferred():  # every flow imports torch; a Ctrl-C inside its C++ init aborts the process
                import torch  # noqa: F401
            _ephemeral_server()
            yield
    except KeyboardInterrupt as exc:
        how = f" ({exc})" if str(exc) else ""  # where a swallowed Ctrl-C was caught up with
        typer.secho(f"interrupted{how}: a night stopped this way is finished by the next `consolidate run`",
                    fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130) from None
    except SystemExit as exc:
        if exc.code == 128 + signal.SIGTERM:
            typer.secho("stopped by SIGTERM: a night stopped this way is finished by the next `consolidate run`",
                        fg=typer.colors.YELLOW, err=True)
        raise
    except Exception as exc:
        from lib.locks import LockBusy

        from lib.training.launch import TrainingStopped

        if isinstance(exc, LockBusy):
            raise exit_busy(exc, as_json=as_json) from None
        if isinstance(exc, TrainingStopped):  # the time limit: not a crash, the night is resumable
            typer.secho(f"stopped: {exc}; the next `consolidate run` resumes the night (raise or unset "
                        f"training.time_limit_s if it keeps stopping)", fg=typer.colors.YELLOW, err=True)
            raise typer.Exit(1) from None
        from lib.config import ConfigError
        from lib.workspace import WorkspaceError

        # a user's mistake exits 2 as in cli.main; anything else 1; the cause last either way
        user_error = isinstance(exc, (ConfigError, WorkspaceError, FileNotFoundError, ValueError))
        raise exit_failed(exc, as_json, code=2 if user_error else 1) from None
    finally:
        # The server is stopped by Prefect's own exit handler, after its log worker has sent the
        # last lines (stopping it here would lose them); the watchdog covers a death without it.
        signal.signal(signal.SIGTERM, previous)


def _summary(result: dict) -> str:
    keep = {k: v for k, v in result.items() if k in ("status", "version", "parent", "run_id", "resumed", "curated_docs", "timings")}
    if "gate" in result:
        keep["gate"] = result["gate"]["summary"]
        keep["champion"] = result["gate"]["champion"]
    return json.dumps(keep, indent=2, default=str)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None,
            workspace: WorkspaceOpt = None, wait: WaitOpt = True, as_json: JsonOpt = False) -> None:
        """Run the nightly consolidation flow on this machine (curate, train, evaluate, gate, promote)."""
        sets = list(set_ or []) + ([] if wait else ["orchestration.night_lock_timeout_s=0"])
        cfg, ws = resolve_config(config, preset, sets, workspace)
        with flow_session(ws, as_json):
            from flows.consolidate import nightly_consolidation

            result = nightly_consolidation(cfg)
        typer.echo(json.dumps(result, indent=2, default=str) if as_json else _summary(result))

    @app.command("bootstrap")
    def bootstrap(config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None,
                  workspace: WorkspaceOpt = None, wait: WaitOpt = True, as_json: JsonOpt = False) -> None:
        """Build the embedded default (corpus, demo buffer, tokenizer) and pre-train v0 unless a champion exists."""
        sets = list(set_ or []) + ([] if wait else ["orchestration.night_lock_timeout_s=0"])
        cfg, ws = resolve_config(config, preset, sets, workspace)
        with flow_session(ws, as_json):
            from flows.bootstrap import bootstrap as bootstrap_flow

            result = bootstrap_flow(cfg)
        typer.echo(json.dumps(result, indent=2, default=str) if as_json else _summary(result))
