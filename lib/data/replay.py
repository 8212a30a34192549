"""The user's replay corpus: their own text, ingested once into the workspace, replayed every night.

- `build_replay_corpus(workspace, name, paths, ...)` reads parquet files (a `text` column, or
  `text_column`; optional `id` and `kind`), JSONL files (one object per line, the same keys) and
  plain-text files (`.txt`, `.md`, `.rst`, source code: one document per file), given as files or
  folders (searched recursively, sorted): the rules of lib/data/readers.py. It writes `<ws>/corpora/<name>/{train,val}/shard-NNNNN.parquet`
  (columns id, text, kind) plus `corpus.json`, the same layout as the embedded stdlib corpus, so
  every later stage treats them alike.
- Each input file is validated in full before any of it is written, the way buffer files are:
  a file that cannot be read, lacks the text column, has a text column that is not a string,
  holds invalid UTF-8 or a bad JSON line, or no document at all is rejected with its reason
  (recorded in corpus.json under `rejected`, and in lineage with the corpus) and the others go
  on. The user's files are never moved or changed. Null or blank texts are skipped and counted.
- Split: with `val_paths` those files are the validation split (old_val, what the forgetting gate
  measures) and `paths` all train; otherwise each document whose id hashes below `val_fraction`
  (xxh64, the stdlib corpus's rule) is validation, raised to at least `val_min_docs` documents
  (the lowest hashes; at most a quarter of a small corpus): the split of a document depends on
  its id, not on the order of the files.
- Ids: the `id` column or key when there is one, else `<file>:<row>` (parquet), `<file>:<line>`
  (JSONL) or the file's relative path (text files). Kinds: the `kind` column or key, else `code`
  for source files and `prose` for text files; FIM applies to `code` only.
- Written into a temporary folder and swapped in, so a failed or interrupted build leaves the
  old corpus (or none), never half of one.

Trade-off: validating before writing reads each parquet and JSONL file twice (once to check
every row decodes, once to write), in exchange for bounded memory on corpora of any size and a
corpus that never holds part of a rejected file.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from lib.buffer.records import content_hash
from lib.data.corpus import CORPUS_SCHEMA, Document
from lib.data.readers import JSONL_SUFFIXES, PROSE_SUFFIXES, SUPPORTED, DocumentFileError, files_under, read_documents
from lib.files import swap_in, temp_folder
from lib.workspace import Workspace, check_name


def _expand(paths: list[str | Path], skipped: dict[str, int]) -> list[tuple[Path, str]]:
    """(file, id prefix) for every supported file under `paths`, sorted; a named file of an
    unsupported type is an error, unsupported files inside a folder are counted and skipped."""
    out: list[tuple[Path, str]] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_file():
            if path.suffix.lower() not in SUPPORTED:
                raise ValueError(f"replay file {path}: unsupported type {path.suffix or '(none)'}; use parquet, "
                                 f"JSONL ({', '.join(sorted(JSONL_SUFFIXES))}) or text files ({', '.join(sorted(PROSE_SUFFIXES))}, source code)")
            out.append((path, path.name))
        elif path.is_dir():
            files, unsupported = files_under(path)
            out += [(f, f.relative_to(path).as_posix()) for f in files]
            if unsupported:
                skipped["unsupported_files"] = skipped.get("unsupported_files", 0) + unsupported
        else:
            raise FileNotFoundError(f"replay path {path} does not exist")
    return out


def validate_file(path: Path, rel: str, text_column: str = "text", lowest: list[int] | None = None, keep: int = 0) -> int:
    """Read a whole input file; returns its number of usable documents or raises DocumentFileError.
    `lowest` (a max-heap of negated hashes) collects the `keep` lowest split hashes seen."""
    usable = 0
    for doc_id, text, *_ in read_documents(path, rel, text_column):
        if text and text.strip():
            usable += 1
            if lowest is not None and keep > 0:
                h = -split_hash(doc_id)
                if len(lowest) < keep:
                    heapq.heappush(lowest, h)
                elif h > lowest[0]:
                    heapq.heapreplace(lowest, h)
    if usable == 0:
        raise DocumentFileError("no documents (every text is empty, blank or null)")
    return usable


class ShardWriter:
    """Documents into `folder/shard-NNNNN.parquet` of at most `shard_bytes` of text each."""

    def __init__(self, folder: Path, shard_bytes: int):
        self.folder, self.shard_bytes = folder, shard_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pending: list[Document] = []
        self.size = 0
        self.shards: list[dict] = []
        self.docs = 0
        self.bytes = 0
        self.kinds: dict[str, int] = {}

    def add(self, doc: Document) -> None:
        n = len(doc.text.encode("utf-8"))
        if self.pending and self.size + n > self.shard_bytes:
            self.flush()
        self.pending.append(doc)
        self.size += n
        self.docs += 1
        self.bytes += n
        key = doc.kind or "unknown"
        self.kinds[key] = self.kinds.get(key, 0) + 1

    def flush(self) -> None:
        if not self.pending:
            return
        path = self.folder / f"shard-{len(self.shards):05d}.parquet"
        table = pa.table({"id": [d.id for d in self.pending], "text": [d.text for d in self.pending],
                          "kind": [d.kind for d in self.pending]}, schema=CORPUS_SCHEMA)
        pq.write_table(table, path, compression="zstd", row_group_size=256)
        self.shards.append({"file": f"{self.folder.name}/{path.name}", "docs": len(self.pending), "bytes": self.size,
                            "hash": content_hash(path)})
        self.pending, self.size = [], 0


def split_hash(doc_id: str) -> int:
    """The hash the train/validation split reads (xxh64, seed 0: the stdlib corpus's rule)."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=0)


def split_cut(lowest: list[int], total: int, val_fraction: float, val_min_docs: int) -> int:
    """The split hash below which a document is validation: `val_fraction` of the hash range,
    raised to take the `val_min_docs` lowest hashes (at most a quarter of the `total` documents).
    `lowest`: at least the `val_min_docs` lowest split hashes of the corpus (any order)."""
    cut = int(val_fraction * 2**64)
    want = min(val_min_docs, total // 4, len(lowest))
    if want > 0:
        cut = max(cut, sorted(lowest)[want - 1] + 1)
    return cut


def finish_corpus(building: Path, final: Path, name: str, source: str, train: "ShardWriter", val: "ShardWriter",
                  extra: dict) -> dict:
    """Flush both splits, write corpus.json and swap `building` in as `final`; returns the stats."""
    train.flush()
    val.flush()
    if train.docs == 0:
        raise ValueError(f"corpus {name!r}: no training documents")
    if val.docs == 0:
        raise ValueError(f"corpus {name!r}: no validation documents ({train.docs} documents): pass validation files, "
                         f"or a larger corpus")
    stats = {
        "name": name, "source": source,
        "docs": train.docs + val.docs, "bytes": train.bytes + val.bytes,
        "train_docs": train.docs, "train_bytes": train.bytes, "val_docs": val.docs, "val_bytes": val.bytes,
        "kinds": {k: train.kinds.get(k, 0) + val.kinds.get(k, 0) for k in sorted(set(train.kinds) | set(val.kinds))},
        "shards": train.shards + val.shards, **extra,
    }
    stats["content_hash"] = hashlib.sha256("".join(s["hash"] for s in stats["shards"]).encode()).hexdigest()
    (building / "corpus.json").write_text(json.dumps(stats, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    swap_in(building, final)
    return stats


def build_replay_corpus(
    workspace: Workspace,
    name: str,
    paths: list[str | Path],
    *,
    val_paths: list[str | Path] | None = None,
    text_column: str = "text",
    val_fraction: float = 0.05,
    val_min_docs: int = 16,
    shard_bytes: int = 4_000_000,
) -> dict:
    """Ingest the user's replay corpus into `<ws>/corpora/<name>/`; returns the stats also saved
    as corpus.json (with `rejected`: every input file left out and why). Without `val_paths`,
    validation is the documents whose id hashes below `val_fraction`, raised to the
    `val_min_docs` lowest hashes (at most a quarter of the corpus) when that gives fewer."""
    check_name(name, "corpus name")
    if not paths:
        raise ValueError("a replay corpus needs at least one file or folder (--replay)")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    skipped: dict[str, int] = {}
    train_inputs = _expand(paths, skipped)
    val_inputs = _expand(val_paths or [], skipped)
    if not train_inputs:
        raise ValueError(f"no parquet, JSONL or text files under {', '.join(str(p) for p in paths)}")

    final = workspace.corpus(name)
    final.parent.mkdir(parents=True, exist_ok=True)
    building = temp_folder(final)
    building.mkdir()
    train = ShardWriter(building / "train", shard_bytes)
    val = ShardWriter(building / "val", shard_bytes)
    inputs, rejected = [], []
    # pass 1: every file read in full; the good ones, and the lowest split hashes for the minimum
    good: list[tuple[str, Path, str, int]] = []
    lowest: list[int] = []
    for split, files in (("train", train_inputs), ("val", val_inputs)):
        for path, rel in files:
            try:
                usable = validate_file(path, rel, text_column, lowest if (split == "train" and not val_paths) else None,
                                       val_min_docs)
            except DocumentFileError as exc:
                rejected.append({"file": str(path), "split": split, "reason": str(exc)})
                continue
            good.append((split, path, rel, usable))
    total = sum(u for split, _, _, u in good if split == "train")
    cut = 0 if val_paths else split_cut([-h for h in lowest], total, val_fraction, val_min_docs)
    try:
        # pass 2: write them
        for split, path, rel, usable in good:
            blank = 0
            for doc_id, text, kind, *_ in read_documents(path, rel, text_column):
                if not text or not text.strip():
                    blank += 1
                    continue
                doc = Document(doc_id, text, kind)
                if split == "val" or (not val_paths and split_hash(doc_id) < cut):
                    val.add(doc)
                else:
                    train.add(doc)
            inputs.append({"file": str(path), "split": split, "docs": usable, "blank_or_null": blank,
                           "hash": content_hash(path), "bytes": path.stat().st_size})
        if train.docs == 0:
            raise ValueError(f"replay corpus {name!r}: no usable training documents; rejected files: "
                             + "; ".join(f"{r['file']}: {r['reason']}" for r in rejected))
        stats = finish_corpus(building, final, name, "replay", train, val, extra={
            "text_column": text_column,
            "params": {"val_fraction": None if val_paths else val_fraction, "val_min_docs": None if val_paths else val_min_docs,
                       "shard_bytes": shard_bytes, "val_from": "files" if val_paths else "id hash"},
            "skipped": dict(sorted(skipped.items())), "inputs": inputs, "rejected": rejected,
        })
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return stats
