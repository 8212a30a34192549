"""Run a long child process (torchrun) so that it never outlives the one who started it.

- The child starts in its own session (`start_new_session=True`): its process group holds
  torchrun and every rank it spawns, so one `os.killpg` stops them all and a Ctrl-C in the
  terminal reaches us first, not the ranks half-way through a collective.
- On Linux the child is launched through a two-line shim that sets PR_SET_PDEATHSIG: if our
  process dies without a chance to clean up (SIGKILL, OOM killer), the kernel sends the child
  SIGTERM, and torchrun passes it on to its ranks.
- stdout and stderr are merged and read line by line on a thread; lines are handed to
  `on_line` on the CALLING thread (loggers that need a run context work), and `on_tick` runs
  every `tick_s` (progress reports).
- A wall-clock limit sends SIGTERM to the group (the trainer snapshots on SIGTERM), then
  SIGKILL after `grace_s`. Any exit from this function with the child still running (an
  exception, a cancellation that raises, a SIGTERM to us) does the same in a `finally`.

Trade-off: polling every `tick_s` (default 1 s) adds up to a second to the detection of the
child's exit; next to a training of minutes to hours that is noise, and it keeps everything on
one thread without asyncio.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

# Executed by a fresh interpreter before exec'ing the real command: ask the kernel to SIGTERM us
# when the parent thread dies, and exit at once if it already has (the race before prctl).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ppid = int(sys.argv[1])\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"
    "os.getppid() == ppid or sys.exit(143)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class SupervisedProcessError(RuntimeError):
    """The supervised command could not be started."""


@dataclass
class SupervisedResult:
    returncode: int
    timed_out: bool
    wall_s: float
    last_lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # every exception line of the output, in order

    @property
    def cause(self) -> str | None:
        """The error that ended the child, as its own process said it: the last exception line
        of any rank (`OSError: [Errno 30] Read-only file system: '...'`), however many lines of
        launcher output followed it."""
        return self.errors[-1] if self.errors else None


# `OSError: [Errno 28] No space left on device: '/x'`, `lib.checkpoints.checkpoint.CheckpointError: ...`,
# `error: ...` (lib.training.train's own one-line errors), optionally behind torchrun's `[rank0]:` prefix.
_EXCEPTION_LINE = re.compile(
    r"^(?:\[[^\]]*\]:?\s*)*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Failed|Failure): .+|error: .+)$")
# the launcher's own summary of a rank's failure, not a cause
_LAUNCHER = ("ChildFailedError", "torch.distributed.elastic")


def exception_line(line: str) -> str | None:
    """`line` without its rank prefix when it is the last line of a traceback (or a one-line error)."""
    m = _EXCEPTION_LINE.match(line.rstrip())
    if m is None or any(x in line for x in _LAUNCHER):
        return None
    return m.group(1)


def _launch_argv(cmd: Sequence[str]) -> list[str]:
    if sys.platform.startswith("linux"):
        return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd]
    return list(cmd)


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the whole group, wait up to grace_s, then SIGKILL whatever is left."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            # The leader is gone; ranks it spawned may still be exiting: make sure.
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def _pump(stream, lines: "queue.Queue[str | None]") -> None:
    for raw in iter(stream.readline, b""):
        lines.put(raw.decode("utf-8", errors="replace").rstrip("\n"))
    lines.put(None)


def run_supervised(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    time_limit_s: float | None = None,
    on_line: Callable[[str], None] | None = None,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 1.0,
    grace_s: float = 30.0,
    keep_lines: int = 40,
    pass_fds: Sequence[int] = (),
) -> SupervisedResult:
    """Run `cmd` in its own process group until it exits, the limit passes, or we are stopped.
    Returns the exit code (negative: killed by that signal) and whether the limit stopped it.
    `pass_fds`: descriptors the child keeps (a lock it must hold until it exits, even past us)."""
    try:
        proc = subprocess.Popen(
            _launch_argv(cmd), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        raise SupervisedProcessError(f"could not start {cmd[0]!r}: {exc}") from exc

    lines: "queue.Queue[str | None]" = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    reader.start()

    # A SIGTERM to us (Prefect cancelling the flow run) must stop the group before whatever the
    # previous handler does; only the main thread may install handlers.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)

        def _on_sigterm(signum, frame):
            _stop_group(proc, grace_s=min(grace_s, 10.0))
            if callable(previous):
                previous(signum, frame)
            else:
                raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, _on_sigterm)

    start = time.monotonic()
    tail: list[str] = []
    errors: list[str] = []
    timed_out = False
    eof = False
    next_tick = start + tick_s
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.05, min(tick_s, next_tick - time.monotonic())))
                if line is None:
                    eof = True
                else:
                    tail.append(line)
                    del tail[:-keep_lines]
                    if (err := exception_line(line)) is not None:
                        errors.append(err)
                    if on_line is not None:
                        on_line(line)
            except queue.Empty:
                pass
            now = time.monotonic()
            if on_tick is not None and now >= next_tick:
                on_tick(now - start)
                next_tick = now + tick_s
            if eof and proc.poll() is not None:
                break
            if time_limit_s is not None and now - start > time_limit_s:
                timed_out = True
                _stop_group(proc, grace_s)
                break
        returncode = proc.wait()
        reader.join(timeout=5)
        while True:  # lines still queued after the exit
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                tail.append(line)
                if (err := exception_line(line)) is not None:
                    errors.append(err)
                if on_line is not None:
                    on_line(line)
        del tail[:-keep_lines]
        if on_tick is not None:
            on_tick(time.monotonic() - start)
        return SupervisedResult(returncode, timed_out, time.monotonic() - start, tail, errors[-20:])
    finally:
        if proc.poll() is None:
            _stop_group(proc, grace_s=min(grace_s, 10.0))
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if proc.stdout is not None:
            proc.stdout.close()
