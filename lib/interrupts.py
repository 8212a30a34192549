"""Ctrl-C that is never lost: a SIGINT received while a night runs stops it, wherever it landed.

Python turns SIGINT into a KeyboardInterrupt raised at the next bytecode the main thread runs,
and some of those places drop it:
- a finalizer: a `__del__`, a weakref callback or a generator's cleanup run by the garbage
  collector. An exception raised there is "ignored" (printed, then gone). In CI a Ctrl-C'd night
  ran to completion and exited 0; the same was reproduced here, 1 Ctrl-C in ~40 sent within 2.5 s
  of the night lock: the SIGINT arrived during `import torch` (the preflight's first transformers
  import), the collector ran the `__del__` of an unclosed asyncio transport, and the handler
  raised inside it.
- a library that catches BaseException (or a C call that clears every error) and goes on.

`ctrl_c_recorded()`, around a command that runs flows (cli.run.flow_session), closes both gaps:
- Its SIGINT handler records the interrupt and then raises KeyboardInterrupt as Python's own does.
- An interrupt ignored in a finalizer is raised again once the finalizer is left: its
  `sys.unraisablehook` has a helper thread send SIGINT to the main thread once more.
- Whatever swallowed one, `stop_if_interrupted(where)` raises it again: the flows call it at every
  stage boundary (flows.runtime.StageClock) and before a run is closed as completed
  (lib.registry.runs.RunBook.session), so a night stops at the latest before its next stage.
- A lock leaked: a SIGINT handled right after `logging._lock.acquire()` returned, before the
  `try` whose `finally` releases it, raises its KeyboardInterrupt with the lock still held, and
  every other thread that logs then waits for it forever. In CI a Ctrl-C'd `consolidate run`
  hung so: a Prefect thread blocked in `logging._acquireLock`, the main thread waiting on that
  thread (reproduced here: 40% of SIGINTs sent into a loop of `logging.getLogger` leaked the
  lock). While the main thread holds logging's module lock or a handler's lock, the handler
  raises nothing: it has the helper thread send the SIGINT again a millisecond later.
- `ctrl_c_deferred()` holds a first SIGINT until a block that must not be interrupted in its
  middle is done: `import torch`, which the CLI does up front (a KeyboardInterrupt inside its C++
  initialisation aborts the process).
- An interrupt that surfaced as another exception is still a Ctrl-C (`interrupted()`): Prefect
  turns one that lands while a task run starts into `ValueError: Task run is not set`. The run
  is left running, resumable (RunBook), and the command exits 130 (`ctrl_c_recorded` ends as
  KeyboardInterrupt after a SIGINT, however its block ended).

Outside `ctrl_c_recorded` nothing is installed and `stop_if_interrupted` never raises: a flow run
by a Prefect worker or a test keeps Python's own handling.

Trade-off: an interrupt swallowed inside a stage lets that stage finish (the stage boundary is
the first place the flow looks again); stopping in the middle would need every library to give
it back.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator


class _State:
    installed = False
    received = 0  # SIGINTs recorded since `ctrl_c_recorded` was entered
    again: "_SignalAgain | None" = None
    deferring = 0  # depth of `ctrl_c_deferred` blocks
    held = False  # a SIGINT came inside one and was not raised yet
    closing = False  # `ctrl_c_recorded` is ending: a SIGINT is recorded, not raised


_state = _State()


def _holds_a_logging_lock() -> bool:
    """Whether the main thread holds logging's module lock or a handler's lock right now."""
    locks = [logging._lock] + [h.lock for h in (ref() for ref in list(logging._handlerList)) if h is not None]
    return any(lock is not None and getattr(lock, "_is_owned", lambda: False)() for lock in locks)


def _on_sigint(signum, frame) -> None:
    if _state.closing:  # the block is ending (its helper thread being stopped): nothing left to stop
        _state.received += 1
        return
    if _state.again is not None and _holds_a_logging_lock():
        _state.again.ask()  # once the lock is let go: see "a lock leaked" above
        return
    _state.received += 1
    if _state.deferring and not _state.held:  # the first one waits for the end of the block
        _state.held = True
        return
    raise KeyboardInterrupt


class _SignalAgain:
    """A thread that sends SIGINT to the main thread again when asked: the finalizer that lost a
    KeyboardInterrupt (or the logging call that held a lock) is left by then (a signal sent from
    inside it would land in it again), and
    a real signal, unlike `_thread.interrupt_main`, also wakes a main thread blocked in a wait."""

    def __init__(self) -> None:
        self._asked = _thread.allocate_lock()  # released to ask: no Python-level lock, so safe in a finalizer
        self._asked.acquire()
        self._closed = False
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._run, name="ctrl-c-again", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._asked.acquire()
            if self._closed:
                return
            time.sleep(0.001)
            if self._closed:
                return
            signal.pthread_kill(self._main, signal.SIGINT)

    def ask(self) -> None:
        try:
            self._asked.release()
        except RuntimeError:  # asked already
            pass

    def close(self) -> None:
        self._closed = True
        self.ask()
        self._thread.join(timeout=5)


def _on_unraisable(unraisable) -> None:
    """A KeyboardInterrupt raised inside a finalizer cannot leave it: have it raised again in the
    main thread, outside the finalizer, instead of printing "Exception ignored"."""
    again = _state.again
    if (again is not None and _state.received and isinstance(unraisable.exc_type, type)
            and issubclass(unraisable.exc_type, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()):
        again.ask()
        return
    _previous_hook(unraisable)


_previous_hook = sys.__unraisablehook__


def interrupted() -> bool:
    """Whether a SIGINT was received inside `ctrl_c_recorded`."""
    return _state.installed and _state.received > 0


def stop_if_interrupted(where: str = "") -> None:
    """Raise KeyboardInterrupt if a SIGINT was received, even if something swallowed the one its
    handler raised: call it where a flow may still stop cleanly (a stage boundary)."""
    if interrupted():
        raise KeyboardInterrupt(f"Ctrl-C received earlier; stopped before {where}" if where else "Ctrl-C received earlier")


@contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Inside `ctrl_c_recorded`: a first SIGINT during the block is raised when the block is done,
    not in its middle; a second one at once. For code a KeyboardInterrupt cannot interrupt
    safely: `import torch` runs Python from C++ (`torch._C._c10d_init`), where one is turned into
    std::terminate and the process aborts (SIGABRT) instead of exiting 130."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
        if not _state.deferring:
            _state.held = False
    stop_if_interrupted()


def _exit_at_once(code: int):
    def handler(signum, frame) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return handler


@contextmanager
def ctrl_c_recorded(exit_code_after: int | None = None) -> Iterator[None]:
    """Record every SIGINT for `stop_if_interrupted`, and raise again one that a finalizer ate.
    After a SIGINT the block ends as KeyboardInterrupt however it ends: returned, or raised
    another exception. A no-op outside the main thread (only it may install signal handlers) and
    when nested.

    With `exit_code_after` (the CLI: 130), a SIGINT that comes after the block was interrupted
    (a second Ctrl-C while the command winds down, or one sent again late) ends the process at
    once with that code, instead of a KeyboardInterrupt raised where nothing catches it (seen
    once: a Ctrl-C'd `consolidate run` printed "interrupted", then died of SIGINT, exit -2)."""
    global _previous_hook
    if _state.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    _previous_hook, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    _state.installed, _state.received, _state.again = True, 0, _SignalAgain()
    try:
        yield
        stop_if_interrupted()  # returned although a SIGINT came: something swallowed it
    except Exception as exc:
        if _state.received:  # an error the interrupt caused (or one it interrupted the handling of)
            raise KeyboardInterrupt(f"Ctrl-C received; it surfaced as {type(exc).__name__}: {exc}") from exc
        raise
    finally:
        # the helper thread first, while our handler still records: a SIGINT it was about to send
        # again must not meet the restored handler and raise where nothing catches it
        _state.closing = True
        again, _state.again = _state.again, None
        again.close()
        received = _state.received
        after = _exit_at_once(exit_code_after) if received and exit_code_after is not None else previous
        signal.signal(signal.SIGINT, after)
        _state.installed, _state.received, _state.held, _state.closing = False, 0, False, False
        if sys.unraisablehook is _on_unraisable:  # unless someone replaced it since
            sys.unraisablehook = _previous_hook
        _previous_hook = sys.__unraisablehook__
