"""Fault injection for the crash tests: die with SIGKILL (or hold still) at a named point inside
a stage.

- `fault_point(name)` does nothing unless the environment variable `CONSOLIDATION_FAULT` names
  this point. `CONSOLIDATION_FAULT=<name>`: the process sends itself SIGKILL at once: no
  `finally`, no `atexit`, no flushed buffers, exactly what the OOM killer does to a night.
  `CONSOLIDATION_FAULT=<name>:hold=<file>`: it touches `<file>.reached` and waits while `<file>`
  exists, so a test can act while a night sits inside a stage (a second trigger arriving).
  `CONSOLIDATION_FAULT=<name>:errno=<N>`: it raises `OSError(N)` with the point's path, as a
  read-only (30) or full (28) volume would, where a test cannot mount one.
  `CONSOLIDATION_FAULT=<name>:sigint=finalizer|swallowed`: the process Ctrl-C's itself and the
  KeyboardInterrupt is lost, as a night's was in CI: raised inside a finalizer (`__del__`, where
  Python only prints it), or caught by a library that goes on; then the point returns
  (lib.interrupts must still stop the night). Call these points from the main thread.
- The points sit where a kill leaves the most half-done state (tests/test_faults.py uses them):
  `night-lock` (the workspace's night lock just taken, nothing done: a night that holds still
  while a second trigger arrives), `curate` (bad files moved to quarantine, lineage not told yet), `tokenize` (token cache
  written, no manifest), `train` (torchrun running, a snapshot on disk), `record` (candidate in
  lineage), `evaluate` (metrics recorded), `gate` (decision taken, not applied), `promote`
  (champion moved, dedup index and storage not done), `store` (delta written, lineage not told),
  `version-write` (the trainer's rank 0 writing the finished version's folder), `train-step`
  (each rank after each optimizer step; with `hold=` it waits until SIGTERM reaches it, so the
  stop lands with steps still to go however fast the machine trains).

Trade-off: a real SIGKILL from inside is as abrupt as one from outside, and it lands at a known
point every time, where an outside kill after a sleep would land wherever the machine's load put
the night. Inert in production: one environment lookup per point per night.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

ENV = "CONSOLIDATION_FAULT"


def armed(name: str) -> bool:
    """Whether `CONSOLIDATION_FAULT` names this point (for a point that must check a condition)."""
    return os.environ.get(ENV, "").partition(":")[0] == name


def fault_point(name: str, path: str | os.PathLike | None = None, until: Callable[[], object] | None = None) -> None:
    """SIGKILL this process, hold it, or raise an OS error about `path`, if `CONSOLIDATION_FAULT`
    names this point (tests only). A hold also ends once `until()` is true (a stop requested)."""
    if not armed(name):
        return
    errno = os.environ[ENV].partition(":errno=")[2]
    if errno:
        raise OSError(int(errno), os.strerror(int(errno)), None if path is None else str(path))
    lost = os.environ[ENV].partition(":sigint=")[2]
    if lost:
        _lose_a_ctrl_c(lost)
        return
    hold = os.environ[ENV].partition(":hold=")[2]
    if not hold:
        os.kill(os.getpid(), signal.SIGKILL)
    Path(f"{hold}.reached").touch()
    while os.path.exists(hold) and not (until is not None and until()):
        time.sleep(0.2)


class _CtrlCInFinalizer:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # the handler runs here: its KeyboardInterrupt is "ignored"


def _lose_a_ctrl_c(how: str) -> None:
    """A SIGINT to this process whose KeyboardInterrupt does not come out of this call."""
    if how == "finalizer":
        _CtrlCInFinalizer()  # dropped at once, so its __del__ runs now
    elif how == "swallowed":
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # as a library that catches BaseException does
    else:
        raise ValueError(f"{ENV}: sigint={how!r}, expected finalizer or swallowed")
