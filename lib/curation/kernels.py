"""The numba kernels of lib/curation: each compiled for one explicit signature on its first call,
or loaded from numba's on-disk cache, and one registry of them all.

- `compiled(signature)` wraps a kernel; a call with other types is an error, never a silent
  recompilation.
- The compiled code is cached in `__pycache__` beside the kernel's source (or NUMBA_CACHE_DIR).
  Where no cache directory is writable they compile in every process, with one warning.
- `KERNELS` (and `TABLES`, lookup tables the kernels read, kept beside their cache) list what the
  modules imported so far registered; `compile_registered` builds them all, and
  lib/curation/precompile.py imports every kernel module first (`make install`, the worker images).

Trade-off: a compilation costs ~5-25 s on the 2-core machine; loading one from the cache ~0.3 s
(bench/bench_dedup_e2e.py). Explicit signatures make every kernel compile at installation instead
of at a night's first call with new types.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from numba import njit, types

log = logging.getLogger(__name__)


def arr(dtype, ndim: int = 1, readonly: bool = False):
    return types.Array(dtype, ndim, "C", readonly=readonly)


BYTES = arr(types.uint8, readonly=True)
INTS = arr(types.int64, readonly=True)
KERNELS: list["Kernel"] = []  # every kernel registered so far, for lib.curation.precompile
uncached: list[str] = []  # kernels numba could not cache
TABLES: list[Callable] = []  # lookup tables built once beside the kernels (`table`)


class Kernel:
    """`fn` compiled by numba for one signature on its first call (or loaded from numba's cache:
    `__pycache__` beside the source, NUMBA_CACHE_DIR if set). Where no cache directory is
    writable numba refuses cache=True; it then compiles in memory instead of failing."""

    def __init__(self, fn: Callable, signature):
        self.fn, self.signature, self.jit = fn, signature, None
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__
        self._lock = threading.Lock()
        KERNELS.append(self)

    def compile(self):
        with self._lock:
            if self.jit is None:
                try:
                    self.jit = njit(self.signature, cache=True, nogil=True)(self.fn)
                except RuntimeError as exc:  # "cannot cache function ...: no locator available"
                    if not uncached:
                        log.warning("%s; lib.curation compiles its kernels in every process (seconds). Set "
                                    "NUMBA_CACHE_DIR to a writable directory to keep them.", exc)
                    uncached.append(self.fn.__name__)
                    self.jit = njit(self.signature, nogil=True)(self.fn)
        return self.jit

    def __call__(self, *args):
        return (self.jit or self.compile())(*args)


def compiled(signature) -> Callable[[Callable], Kernel]:
    """Decorator: `fn` as a registered kernel of one signature."""
    return lambda fn: Kernel(fn, signature)


def table(fn: Callable) -> Callable:
    """Decorator: `fn()` builds a lookup table the kernels read; `compile_registered` builds it too."""
    TABLES.append(fn)
    return fn


def compile_registered() -> dict[str, float]:
    """Build every registered table and compile (or load from numba's cache) every registered
    kernel; seconds per name."""
    seconds = {}
    for fn in TABLES + KERNELS:
        t = time.perf_counter()
        fn() if fn in TABLES else fn.compile()
        seconds[fn.__name__] = time.perf_counter() - t
    return seconds
