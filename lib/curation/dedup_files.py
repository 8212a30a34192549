"""`consolidate dedup`: exact and near dedup of files outside any workspace, with the night's own
dedup step.

- `dedup_steps(dest)`: `ReadTextsStep` (the files' documents, this rank's share by position, into
  the same shard files as the night's `IngestStep`) -> `DedupStep` (lib/curation/pipeline.py, with
  no history) -> `KeptStep` (`<dest>/kept.parquet`: id, text, in input order, beside
  `<dest>/duplicates.parquet`).
- `dedup_files` runs them in this process, its shard files in a temporary folder, and returns the
  counts.

Trade-off: the documents go through the night's shard files (parquet on disk) instead of staying
in memory: one code path for the night and for files, at the cost of writing and reading each
document once more.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lib.buffer.ingest import atomic_write_table
from lib.config import CurationConfig
from lib.curation.dedup import DedupIndex
from lib.curation.pipeline import DedupStep, shard_outputs, write_documents
from lib.curation.steps import Stats, Step, run_steps
from lib.data.readers import DocumentFileError, files_under, read_documents
from lib.files import atomic_path


def text_files(path: Path) -> list[Path]:
    """The files of an input: a folder's supported files (lib.data.readers.files_under), else the file itself."""
    if not path.exists():
        raise FileNotFoundError(f"input {path} does not exist")
    return files_under(path)[0] if path.is_dir() else [path]


def read_text_file(f: Path) -> tuple[list[str], list[str]]:
    """(ids, texts) of one file by the rules of lib.data.readers (parquet: a row per document;
    JSON Lines: a line per document; a text file: one document); blank texts are left out."""
    try:
        docs = [(d.id, d.text) for d in read_documents(Path(f), Path(f).name) if isinstance(d.text, str) and d.text.strip()]
    except DocumentFileError as exc:
        raise DocumentFileError(f"{f}: {exc}") from None
    return [i for i, _ in docs], [t for _, t in docs]


def read_texts(path: Path) -> tuple[list[str], list[str]]:
    """(ids, texts) of every file of an input (`text_files`, `read_text_file`)."""
    ids: list[str] = []
    texts: list[str] = []
    for f in text_files(path):
        i, t = read_text_file(f)
        ids += i
        texts += t
    return ids, texts


class ReadTextsStep(Step):
    """Documents of files outside any workspace (`input`: the files, in order; this rank's share by
    position) → the same shard files as `IngestStep`."""

    name = "read-texts"

    def reads(self, input: list[Path], output: Path, rank: int, world_size: int, section: CurationConfig) -> list[Path]:
        return [Path(f) for f in input[rank::world_size]]

    def writes(self, rank: int, world_size: int) -> list[str]:
        return [shard_outputs(rank)[k] for k in ("docs", "dedup")]

    def run(self, input: list[Path], output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        ids: list[str] = []
        texts: list[str] = []
        order: list[int] = []
        for k, f in enumerate(input[rank::world_size]):
            i, t = read_text_file(Path(f))
            ids += i
            texts += t
            order += [((rank + k * world_size) << 32) | row for row in range(len(t))]
        write_documents(Path(output), rank, ids, texts, order, [None] * len(ids), section)
        return Stats({"documents": len(ids)})


class KeptStep(Step):
    """The survivors of `DedupStep` as `<dest>/kept.parquet` (id, text, in input order) beside
    `<dest>/duplicates.parquet`."""

    name = "write-kept"
    per_shard = False
    cached = False

    def __init__(self, dest: Path):
        self.dest = Path(dest)

    def run(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        run = Path(output)
        docs = pa.concat_tables([pq.read_table(run / shard_outputs(r)["docs"], columns=["id", "text", "order"])
                                 for r in range(world_size)])
        keep = np.concatenate([np.load(run / shard_outputs(r)["keep"]) for r in range(world_size)])
        kept = docs.filter(pa.array(keep)).sort_by("order").select(["id", "text"])
        self.dest.mkdir(parents=True, exist_ok=True)
        atomic_write_table(kept, self.dest / "kept.parquet")
        with atomic_path(self.dest / "duplicates.parquet") as tmp:  # DedupStep's file as it is (no decode and encode)
            shutil.copyfile(run / "curation" / "duplicates.parquet", tmp)
        return Stats({"kept": kept.num_rows})


def dedup_steps(dest: Path, world_size: int = 1) -> list[Step]:
    """Exact then near dedup of files (`consolidate dedup`): read, dedup (no history), write."""
    return [ReadTextsStep(), DedupStep(DedupIndex(dest / ".no-history")), KeptStep(dest)]


def dedup_files(inputs: list[Path], dest: Path, section: CurationConfig, world_size: int = 1) -> dict[str, Any]:
    """`dedup_steps` over `inputs` in this process, its shard files in a temporary folder:
    `<dest>/kept.parquet`, `<dest>/duplicates.parquet`, and the counts (documents, kept, exact
    and near duplicates, the LSH's bands, rows and pairs)."""
    files = [f for p in inputs for f in text_files(Path(p))]
    with tempfile.TemporaryDirectory(prefix=".dedup-", dir=dest.parent if dest.parent.is_dir() else None) as work:
        read, dedup, kept = run_steps(dedup_steps(dest, world_size), files, Path(work), world_size, section)
    near = dedup.counts.get("near", {})
    return {"documents": read.get("documents"), "kept": kept.get("kept"),
            "exact_duplicates": dedup.get("exact.dropped_within_night"), "near_duplicates": near.get("dropped_within_night", 0),
            "bands": near.get("bands"), "rows": near.get("rows"), "candidate_pairs": near.get("candidate_pairs", 0),
            "verified_pairs": near.get("verified_pairs")}
