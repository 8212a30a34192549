"""`python -m lib.curation.precompile`: build every numba kernel of lib/curation once per
installation, so that no night's first call pays the compilation.

- Importing the kernel modules (text, minhash, dedup) registers their kernels and tables
  (lib/curation/kernels.py); `compile_kernels` builds them all into numba's on-disk cache,
  `__pycache__` beside each module (or NUMBA_CACHE_DIR).
- `make install` and the worker images run it; the Makefile's `.kernels` target lists the kernel
  modules, so it runs again when one of them changes.

Trade-off: ~20 s once per installation on the 2-core machine; without it, each night's first
call compiles what it uses (~5-25 s per kernel) where the cache is writable, and every process
does where it is not.
"""

from __future__ import annotations

import os
import sys
import time

from lib.curation import dedup, minhash, text  # noqa: F401  (importing a kernel module registers its kernels)
from lib.curation.kernels import compile_registered

KERNEL_MODULES = (text, minhash, dedup)


def compile_kernels() -> dict[str, float]:
    """Compile, or load from numba's on-disk cache, every kernel of lib/curation; seconds per kernel."""
    return compile_registered()


def main() -> None:
    t0 = time.perf_counter()
    took = compile_kernels()
    where = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ beside the modules of lib/curation"
    print(f"numba kernels ready in {time.perf_counter() - t0:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in took.items())}); "
          f"cache: {where}", file=sys.stderr)


if __name__ == "__main__":
    main()
