"""Real text on every machine with Python, for the curation benchmarks: the standard library's
files and those of every installed package (each site-packages folder on sys.path, so a light
venv that points at another one's packages sees them too). Nobody here wrote them.

Used by bench_dedup_e2e.py and bench_curation_kept.py (not a benchmark itself).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import numpy as np

EXTS = (".py", ".txt", ".rst", ".md")


def roots() -> list[Path]:
    """The standard library, then every site-packages folder on sys.path (deduplicated)."""
    out = [Path(sysconfig.get_paths()["stdlib"]).resolve()]
    for p in [sysconfig.get_paths()["purelib"], *sys.path]:
        path = Path(p).resolve() if p else None
        if path and path.name in ("site-packages", "dist-packages") and path.is_dir() and path not in out:
            out.append(path)
    return out


def package_roots() -> list[Path]:
    return roots()[1:]


def files(exts: tuple[str, ...] = EXTS, names: tuple[str, ...] = ()) -> list[Path]:
    """Files with these suffixes (or exact names, e.g. METADATA), sorted; the interpreter's own
    site-packages is counted as a package root, not as the standard library."""
    out: list[Path] = []
    std, *pkgs = roots()
    for root in [std, *pkgs]:
        for p in root.rglob("*"):
            if not (p.suffix in exts or p.name in names):
                continue
            if root == std and "site-packages" in p.relative_to(root).parts:
                continue
            if p.is_file():
                out.append(p)
    return sorted(set(out))


def read(p: Path) -> str | None:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def sample(n: int, min_chars: int = 300, max_chars: int = 20_000, seed: int = 0) -> tuple[list[str], list[Path]]:
    """A seeded sample of `n` UTF-8 files of min_chars..max_chars characters, in path order."""
    fs = files()
    picked: list[tuple[Path, str]] = []
    for k in np.random.default_rng(seed).permutation(len(fs)):
        text = read(fs[k])
        if text is not None and min_chars <= len(text) <= max_chars:
            picked.append((fs[k], text))
            if len(picked) >= n:
                break
    picked.sort(key=lambda x: str(x[0]))
    return [t for _, t in picked], [p for p, _ in picked]
