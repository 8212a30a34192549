"""Workspace locks: one night per workspace, one training per lock file, never held by the dead.

- A lock is an exclusive `flock` on a file (`<workspace>/locks/night.lock`, `training.lock`).
  The kernel drops it when the last descriptor of its holder goes away, however the holder
  ended (exit, SIGKILL, the OOM killer; after a reboot no process holds anything), so a night
  that died never blocks the next one and no person has to free a slot. On NFSv4 a dead
  client's lock ends with its lease (~90 s).
- The holder writes who it is into the file: pid, host, what for, since when. A waiter reads it
  (no lock needed) to say whom it waits for; the file is rewritten by every new holder.
- `acquire(timeout_s)` tries at once, then once a second until `timeout_s` (flock itself has no
  timeout), logging the holder when it starts waiting and once a minute after; past the timeout
  it raises `LockBusy`, whose message names the holder.
- Re-entrant within a process: a flow that runs other flows inside it (the demo runs the
  bootstrap and the nightly flows) takes the same lock again without waiting for itself.
- Forked children (multiprocessing workers) close their copy of every lock at once, so a stray
  worker never keeps a dead night's lock; a child that SHOULD keep it (torchrun, which must hold
  the training lock until its last snapshot is written) gets `fileno()` through `pass_fds`.

Trade-off: polling once a second adds up to a second to every handover; a blocking flock would
hand over at once but cannot give up, which a trigger waiting behind a stuck night must do.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

POLL_S = 1.0
LOG_EVERY_S = 60.0


class LockBusy(RuntimeError):
    """Another live process holds the lock and the wait for it ran out."""

    def __init__(self, message: str, holder: dict[str, Any] | None):
        super().__init__(message)
        self.holder = holder or {}


_held: dict[str, "_Held"] = {}  # resolved lock path -> this process's descriptor and depth
_held_guard = threading.Lock()


class _Held:
    def __init__(self, fd: int):
        self.fd, self.depth = fd, 1
        self.since = datetime.now(timezone.utc).isoformat(timespec="seconds")


def _forget_in_child() -> None:
    # A forked child must not keep its parent's locks alive: close its copies (the parent's
    # descriptor, and so the lock, is untouched).
    global _held_guard
    _held_guard = threading.Lock()  # another thread may have held it at the fork
    for held in _held.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def read_holder(path: str | Path) -> dict[str, Any] | None:
    """What the current (or last) holder wrote into the lock file; None if empty or unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def describe_holder(holder: dict[str, Any] | None) -> str:
    """`pid 4711 on host-a (night night-2026..., since 2026-11-23T02:00:03Z, 12 min ago)`."""
    if not holder:
        return "a process that left no details"
    since, ago = holder.get("since", "?"), ""
    try:
        minutes = (datetime.now(timezone.utc) - datetime.fromisoformat(since)).total_seconds() / 60
        ago = f", {minutes:.0f} min ago" if minutes >= 1 else ", under a minute ago"
    except (TypeError, ValueError):
        pass
    what = f"{holder['purpose']}, " if holder.get("purpose") else ""
    pid, host = holder.get("pid", "?"), holder.get("host", "?")
    gone = ""
    if host == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
        gone = "; that process has exited, a child it started still holds the lock"
    return f"pid {pid} on {host} ({what}since {since}{ago}{gone})"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkspaceLock:
    """An exclusive lock on `path`, held from `acquire` until `release` (or the holder's death)."""

    def __init__(self, path: str | Path, purpose: str = ""):
        self.path = Path(path)
        self.purpose = purpose
        self._key = str(self.path.resolve())
        self._mine = False

    # -- holding -----------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it (or this process already does); never waits."""
        with _held_guard:
            held = _held.get(self._key)
            if held is not None:
                if not self._mine:
                    held.depth += 1
                    self._mine = True
                return True
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            held = _held[self._key] = _Held(fd)
            self._mine = True
        self._write_holder(held)
        return True

    def acquire(self, timeout_s: float | None, log: Callable[[str], None] | None = None, what: str = "") -> "WorkspaceLock":
        """Take the lock, waiting up to `timeout_s` seconds (None: as long as it takes, 0: not at
        all). `log` hears who holds it when the wait starts and once a minute; `what` names the
        setting that bounds the wait, for the LockBusy message."""
        if self.try_acquire():
            return self
        start = time.monotonic()
        next_log = start
        while True:
            holder = read_holder(self.path)
            waited = time.monotonic() - start
            if timeout_s is not None and waited >= timeout_s:
                raise LockBusy(
                    f"{self.path} is held by {describe_holder(holder)}; gave up after {waited:.0f} s"
                    + (f" ({what}={timeout_s:g})" if what else "")
                    + ". It frees itself when that process ends; wait for it, or stop it if it is stuck.", holder)
            if log is not None and time.monotonic() >= next_log:
                limit = "as long as it takes" if timeout_s is None else f"up to {timeout_s:g} s"
                log(f"waiting for {self.path.name}: held by {describe_holder(holder)}; waiting {limit}")
                next_log = time.monotonic() + LOG_EVERY_S
            time.sleep(POLL_S if timeout_s is None else max(0.05, min(POLL_S, timeout_s - waited)))
            if self.try_acquire():
                if log is not None:
                    log(f"{self.path.name} acquired after {time.monotonic() - start:.0f} s")
                return self

    def release(self) -> None:
        """Give the lock up (at depth 0 for a re-entrant holder). Safe to call twice."""
        if not self._mine:
            return
        with _held_guard:
            self._mine = False
            held = _held.get(self._key)
            if held is None:
                return
            held.depth -= 1
            if held.depth > 0:
                return
            del _held[self._key]
            os.close(held.fd)  # the last descriptor of the description: the flock goes with it

    def fileno(self) -> int:
        """This process's descriptor of the lock (for `pass_fds` of a child that must keep it)."""
        held = _held.get(self._key)
        if held is None or not self._mine:
            raise RuntimeError(f"{self.path} is not held by this process")
        return held.fd

    @property
    def held(self) -> bool:
        return self._mine

    def __enter__(self) -> "WorkspaceLock":
        if not self._mine:
            self.acquire(None)
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- who ---------------------------------------------------------------------------------
    def _write_holder(self, held: _Held) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose, "since": held.since}
        data = (json.dumps(info) + "\n").encode()
        os.ftruncate(held.fd, 0)
        os.pwrite(held.fd, data, 0)

    def set_purpose(self, purpose: str) -> None:
        """Say what the holder is doing now (a night learns its run id after taking the lock)."""
        self.purpose = purpose
        held = _held.get(self._key)
        if held is not None and self._mine:
            self._write_holder(held)
