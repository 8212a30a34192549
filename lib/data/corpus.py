"""The embedded corpora: real text on every machine with Python, so the demo downloads nothing.

- Original corpus (`build_stdlib_corpus`): the running interpreter's standard library, `*.py`
  (kind "code") plus `*.txt`/`*.rst` (kind "prose"). Left out: `site-packages`, the test suites
  (`test/`, `tests/`, `idle_test/`), `__pycache__`, the build's `config-*` folder, bundled wheels;
  files that are not valid UTF-8 or are blank are skipped and counted.
- A document's id is its relative POSIX path; documents are written in sorted id order. The
  validation split is every id whose xxh64 falls under `val_fraction` (~5%): the split of a file
  never changes when other files come or go.
- Shards hold at most `shard_bytes` of text (`train/shard-NNNNN.parquet`, `val/...`, columns id,
  text, kind, zstd); the corpus is written into a temporary folder and swapped in, with a
  `corpus.json` of parameters and stats. Same interpreter, same arguments: byte-identical files.
- Demo buffer (`build_demo_buffer`): the sources and METADATA descriptions of a fixed list
  of installed third-party packages the stdlib never contained (prefect and its pure-Python
  dependencies), taken round-robin over the packages in a fixed hash order up to a byte cap, and
  written through Buffer with source "demo:<package>"; then 12 short documents about
  fictional towns (lib/data/fiction.py, source "demo:fiction"), facts no model can know, whose
  closed-book questions go to `<ws>/demo/facts.jsonl` so the demo can ask v0 and v1 them.

Trade-off: leaving out the test suites drops 19 MB of the 31 MB of stdlib `.py`: the corpus is
the library's own code (12.3 MB, 742 documents), not its idiosyncratic tests. The demo buffer's
default cap (120 kB, ~28 documents) is sized so a 200-step tiny consolidation at new_data_ratio
0.25 (~100k new tokens ≈ 350 kB of text) sees each trained document ~3 times, after the 10%
held-out slice: enough to learn from, not so much that it memorises.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from lib.buffer.store import Buffer
from lib.buffer.records import content_hash
from lib.files import swap_in, temp_folder
from lib.registry.lineage import Lineage
from lib.workspace import Workspace
from lib.data.fiction import fictional_towns, town_documents, town_probes
from lib.knowledge.facts import write_facts

CORPUS_SCHEMA = pa.schema([pa.field("id", pa.string()), pa.field("text", pa.string()), pa.field("kind", pa.string())])
SUFFIX_KIND = {".py": "code", ".txt": "prose", ".rst": "prose"}
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "_bundled"}
SPLIT_SEED = 0  # xxh64 seed of the train/val split
ORDER_SEED = 1  # a different seed orders the selection under max_mb, so it does not favour val ids

# Installed with prefect on every machine that runs this project; pure Python; not in the stdlib.
DEMO_PACKAGES = ("prefect", "typer", "rich", "httpx", "pydantic", "click", "jinja2")
# Generated tables and schema migrations are data, not the library's prose or code.
DEMO_SKIP_PARTS = {"_unicode_data", "_migrations", "migrations", "_vendor", "vendor"}


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    kind: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def iter_stdlib_documents(root: Path | None = None, skipped: dict | None = None) -> Iterator[Document]:
    """Every document of the stdlib corpus, in sorted id order. `skipped` (if given) counts
    the files left out and why."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise FileNotFoundError(f"standard library folder {root} does not exist (sysconfig 'stdlib' path)")
    skipped = skipped if skipped is not None else {}
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("config-")]
        for name in filenames:
            if Path(name).suffix in SUFFIX_KIND:
                paths.append(Path(dirpath, name).relative_to(root).as_posix())
    for rel in sorted(paths):
        try:
            text = (root / rel).read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            skipped["not_utf8"] = skipped.get("not_utf8", 0) + 1
            continue
        if not text.strip():
            skipped["blank"] = skipped.get("blank", 0) + 1
            continue
        yield Document(rel, text, SUFFIX_KIND[Path(rel).suffix])


def is_validation(doc_id: str, val_fraction: float) -> bool:
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=SPLIT_SEED) < val_fraction * 2**64


def _write_shards(docs: list[Document], folder: Path, shard_bytes: int) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    shards, current, size = [], [], 0

    def emit() -> None:
        path = folder / f"shard-{len(shards):05d}.parquet"
        table = pa.table(
            {"id": [d.id for d in current], "text": [d.text for d in current], "kind": [d.kind for d in current]},
            schema=CORPUS_SCHEMA,
        )
        pq.write_table(table, path, compression="zstd", row_group_size=256)
        shards.append({"file": f"{folder.name}/{path.name}", "docs": len(current), "bytes": size, "hash": content_hash(path)})

    for doc in docs:
        n = len(doc.text.encode("utf-8"))
        if current and size + n > shard_bytes:
            emit()
            current, size = [], 0
        current.append(doc)
        size += n
    if current:
        emit()
    return shards


def build_stdlib_corpus(
    workspace: Workspace,
    name: str = "stdlib",
    *,
    max_mb: float | None = None,
    val_fraction: float = 0.05,
    shard_bytes: int = 4_000_000,
    root: Path | None = None,
) -> dict:
    """Write the stdlib corpus to `<ws>/corpora/<name>/{train,val}/shard-NNNNN.parquet`; returns
    the stats also saved in `corpus.json`. Replaces an existing corpus of that name."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    if shard_bytes < 1:
        raise ValueError(f"shard_bytes must be positive, got {shard_bytes}")
    if max_mb is not None and max_mb <= 0:
        raise ValueError(f"max_mb must be positive, got {max_mb}")
    skipped: dict[str, int] = {}
    docs = list(iter_stdlib_documents(root, skipped))
    if max_mb is not None:
        # a cap keeps a hash-ordered sample (all kinds, all packages), not the alphabetical head
        budget = int(max_mb * 1_000_000)
        order = sorted(docs, key=lambda d: xxhash.xxh64_intdigest(d.id.encode("utf-8"), seed=ORDER_SEED))
        keep, total = set(), 0
        for d in order:
            n = len(d.text.encode("utf-8"))
            if total + n > budget:
                continue
            keep.add(d.id)
            total += n
        skipped["over_max_mb"] = len(docs) - len(keep)
        docs = [d for d in docs if d.id in keep]
    if not docs:
        raise ValueError(f"no documents found under {root or stdlib_root()} (max_mb={max_mb})")

    final = workspace.corpus(name)
    final.parent.mkdir(parents=True, exist_ok=True)
    building = temp_folder(final)
    building.mkdir()
    train = [d for d in docs if not is_validation(d.id, val_fraction)]
    val = [d for d in docs if is_validation(d.id, val_fraction)]
    shards = _write_shards(train, building / "train", shard_bytes) + _write_shards(val, building / "val", shard_bytes)

    def size(ds: list[Document]) -> int:
        return sum(len(d.text.encode("utf-8")) for d in ds)

    stats = {
        "name": name,
        "source": "python-stdlib",
        "python": sys.version.split()[0],
        "params": {"max_mb": max_mb, "val_fraction": val_fraction, "shard_bytes": shard_bytes},
        "docs": len(docs),
        "bytes": size(docs),
        "train_docs": len(train),
        "train_bytes": size(train),
        "val_docs": len(val),
        "val_bytes": size(val),
        "kinds": {k: sum(1 for d in docs if d.kind == k) for k in sorted({d.kind for d in docs})},
        "skipped": dict(sorted(skipped.items())),
        "shards": shards,
    }
    (building / "corpus.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    swap_in(building, final)
    return stats


def read_corpus_stats(workspace: Workspace, name: str = "stdlib") -> dict | None:
    path = workspace.corpus(name) / "corpus.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


# -- demo buffer -------------------------------------------------------------------------
def _package_documents(package: str, min_chars: int, max_chars: int) -> list[tuple[str, str]]:
    """(id, text) of one installed package: its METADATA description, then its .py files, in a
    fixed hash order of their paths."""
    dist = metadata.distribution(package)
    docs = []
    description = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
    if min_chars <= len(description) <= max_chars:
        docs.append((f"{package}/METADATA", description))
    files = sorted(str(f) for f in (dist.files or []) if str(f).endswith(".py"))
    files = [f for f in files if not DEMO_SKIP_PARTS.intersection(Path(f).parts)]
    for rel in sorted(files, key=lambda f: xxhash.xxh64_intdigest(f.encode("utf-8"), seed=ORDER_SEED)):
        path = Path(dist.locate_file(rel))
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if min_chars <= len(text) <= max_chars and text.strip():
            docs.append((rel, text))
    return docs


def select_demo_documents(
    packages: tuple[str, ...] = DEMO_PACKAGES, max_bytes: int = 120_000, min_chars: int = 400, max_chars: int = 12_000
) -> tuple[list[tuple[str, str, str]], dict]:
    """(package, id, text) of the demo buffer, round-robin over the packages until `max_bytes`
    of UTF-8 text; and per-package info (version, docs, bytes, or 'not installed')."""
    per_package, info = {}, {}
    for package in packages:
        try:
            per_package[package] = _package_documents(package, min_chars, max_chars)
            info[package] = {"version": metadata.version(package), "docs": 0, "bytes": 0}
        except metadata.PackageNotFoundError:
            info[package] = {"version": None, "docs": 0, "bytes": 0, "note": "not installed"}
    if not per_package:
        raise ValueError(f"none of the demo packages is installed: {', '.join(packages)}")
    chosen, seen, total = [], set(), 0
    depth = max(len(d) for d in per_package.values())
    for i in range(depth):
        for package, docs in per_package.items():
            if i >= len(docs):
                continue
            doc_id, text = docs[i]
            n = len(text.encode("utf-8"))
            if text in seen or total + n > max_bytes:
                continue
            seen.add(text)
            chosen.append((package, doc_id, text))
            info[package]["docs"] += 1
            info[package]["bytes"] += n
            total += n
    return chosen, info


def build_demo_buffer(
    workspace: Workspace,
    packages: tuple[str, ...] = DEMO_PACKAGES,
    max_bytes: int = 120_000,
    *,
    min_chars: int = 400,
    max_chars: int = 12_000,
    fiction: int = 12,
) -> dict:
    """Add the demo documents to `<ws>/buffers/` through Buffer and flush them to parquet;
    with `fiction` towns, their documents too and their questions in `demo_facts_file`."""
    towns = fictional_towns(fiction) if fiction else []
    docs = town_documents(towns)
    town_bytes = sum(len(d.encode("utf-8")) for d in docs)
    chosen, info = select_demo_documents(packages, max_bytes - town_bytes, min_chars, max_chars)  # the towns count in max_bytes
    if towns:
        chosen += [("fiction", t.doc_id, text) for t, text in zip(towns, docs)]
        info["fictional towns"] = {"version": "generated", "docs": len(docs), "bytes": town_bytes}
        write_facts(demo_facts_file(workspace), town_probes(towns))
    buf = Buffer(workspace.buffers, flush_size=max(1000, len(chosen)))
    before = set(buf.list_buffers())
    buf.add_many([text for _, _, text in chosen], [f"demo:{package}" for package, _, _ in chosen])
    buf.flush()
    return {
        "records": len(chosen),
        "bytes": sum(len(t.encode("utf-8")) for _, _, t in chosen),
        "max_bytes": max_bytes,
        "packages": info,
        "documents": [f"{package}:{doc_id}" for package, doc_id, _ in chosen],
        "files": sorted(set(buf.list_buffers()) - before),
    }


DEFAULT_CORPUS = "stdlib"


def demo_facts_file(workspace: Workspace) -> Path:
    """`<ws>/demo/facts.jsonl`: closed-book questions about the demo buffer's fictional towns."""
    return workspace.root / "demo" / "facts.jsonl"


def replay_corpus_name(workspace: Workspace, cfg) -> str:
    """The corpus a night replays and measures old_val on: `workspace.corpus` when set, else the
    one recorded with the lineage's root version (`consolidate init --replay`), else the embedded
    demo's stdlib."""
    if cfg.workspace.corpus:
        return cfg.workspace.corpus
    if workspace.lineage_db.exists():
        lin = Lineage(workspace.lineage_db)
        root = lin.root_version()
        if root is not None:
            recorded = ((lin.get_version(root) or {}).get("meta") or {}).get("replay_corpus")
            if recorded:
                return recorded
    return DEFAULT_CORPUS


def with_replay_corpus(workspace: Workspace, cfg):
    """`cfg` with `workspace.corpus` filled in (`replay_corpus_name`): flows resolve it once."""
    if cfg.workspace.corpus:
        return cfg
    return cfg.model_copy(update={"workspace": cfg.workspace.model_copy(update={"corpus": replay_corpus_name(workspace, cfg)})})


def ensure_embedded_default(workspace: Workspace, cfg, *, demo_max_bytes: int = 120_000) -> dict:
    """What the embedded demo needs before anything trains: the stdlib corpus (named
    `cfg.workspace.corpus`, default stdlib) and a non-empty buffer. Builds only what is missing."""
    workspace.ensure()
    name = cfg.workspace.corpus or DEFAULT_CORPUS
    corpus = read_corpus_stats(workspace, name)
    corpus_built = corpus is None
    if corpus is None:
        corpus = build_stdlib_corpus(workspace, name)
    buf = Buffer.from_config(workspace.buffers, cfg)  # also replays logs of dead writers
    demo = None
    if buf.total_sequences() == 0:
        demo = build_demo_buffer(workspace, max_bytes=demo_max_bytes)
    return {
        "corpus": corpus,
        "corpus_built": corpus_built,
        "demo_buffer": demo,
        "demo_buffer_built": demo is not None,
        "buffer": buf.stats(),
    }
