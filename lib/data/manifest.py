"""The manifest: which pieces of which documents a run trains on, in training order: sources
mixed by weight, the mix annealed from exploring to exploiting over the run.

- The manifest lists pieces of at most `seq_len` tokens (one packed row with its BOS). Each
  source walks its documents in a fresh seeded permutation per epoch (no document twice in an
  epoch until the source is exhausted), or with per-document weights a seeded weighted order; the
  next piece comes from the source whose token count lags its target the most, where the target
  grows by p_i(T) per token drawn and p_i ∝ w_i^(1/T) with T annealed constant/linear/cosine over
  training progress. So the token ratio is exact to within one piece, not just in expectation.
- `write_manifest` uses fixed writer options: same draw, byte-identical manifest.parquet.

Columns (`MANIFEST_SCHEMA`): `source`, `doc_id`, `shard` (shard stem relative to the data folder,
e.g. `shards/new/shard-00000`), `doc_index` (document number inside that token shard), `offset`
(token offset of the piece inside that document), `length` (tokens of the piece, BOS not
counted), `epoch` (pass over that source), `fim` (the document is a FIM example).

Trade-off: the draw covers the budget plus 5% slack (`SLACK`) because best-fit cropping wastes
~1-2% of tokens; if training still runs out, the loader wraps around the manifest
deterministically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lib.files import atomic_path, file_hash

if TYPE_CHECKING:
    from lib.config import SamplingConfig

SLACK = 0.05                  # over-draw for tokens lost to cropping
MANIFEST_SCHEMA = pa.schema([
    ("source", pa.string()), ("doc_id", pa.string()), ("shard", pa.string()),
    ("doc_index", pa.int64()), ("offset", pa.int64()), ("length", pa.int64()),
    ("epoch", pa.int32()), ("fim", pa.bool_()),
])



def temperature_at(sampling: SamplingConfig, progress: float) -> float:
    """T at training progress in [0, 1] (annealed from explore to exploit: flat early, the weights' own shape late)."""
    t0, t1 = sampling.temperature, sampling.final_temperature
    if t1 is None or sampling.temperature_schedule == "constant":
        return t0
    x = min(max(progress, 0.0), 1.0)
    if sampling.temperature_schedule == "linear":
        return t0 + (t1 - t0) * x
    return t1 + (t0 - t1) * 0.5 * (1 + math.cos(math.pi * x))


def source_probabilities(weights, temperature: float) -> np.ndarray:
    """p_i ∝ w_i^(1/T), computed in log space so tiny weights at small T do not underflow."""
    logw = np.log(np.asarray(weights, dtype=np.float64)) / temperature
    p = np.exp(logw - logw.max())
    return p / p.sum()


class SourceStream:
    """One source's pieces in epoch order: a seeded permutation of its documents per epoch, or
    with per-document `weights` a seeded weighted order (Efraimidis-Spirakis: key log(u)/w,
    largest first), so heavier documents come earlier in every pass and a night that draws only
    part of a pass draws mostly them."""

    def __init__(self, index: int, name: str, docs: dict, seq_len: int, seed_key: list[int],
                 weights: np.ndarray | None = None):
        self.index, self.name = index, name
        self.docs = docs  # doc_id, shard, unit_start, unit_count; units: doc_index, len, fim
        self.seq_len = seq_len
        self.seed_key = seed_key
        self.n_docs = len(docs["doc_id"])
        self.epoch = -1
        self.order = np.zeros(0, dtype=np.int64)
        self.pos = 0
        self.pending: list[tuple] = []
        self.exposures = np.zeros(self.n_docs, dtype=np.int64)
        self.weights = weights

    def _next_doc(self) -> int:
        if self.pos >= self.order.size:
            self.epoch += 1
            rng = np.random.default_rng(self.seed_key + [self.epoch])
            if self.weights is None:
                self.order = rng.permutation(self.n_docs)
            else:
                keys = np.log(rng.random(self.n_docs)) / np.maximum(self.weights, 1e-12)
                self.order = np.argsort(-keys, kind="stable")
            self.pos = 0
        d = int(self.order[self.pos])
        self.pos += 1
        return d

    def next_piece(self) -> tuple:
        while not self.pending:
            d = self._next_doc()
            self.exposures[d] += 1
            u0, n = int(self.docs["unit_start"][d]), int(self.docs["unit_count"][d])
            for u in range(u0, u0 + n):
                length = int(self.docs["unit_len"][u])
                for off in range(0, length, self.seq_len):
                    self.pending.append((d, u, off, min(self.seq_len, length - off)))
            self.pending.reverse()
        d, u, off, length = self.pending.pop()
        return (self.docs["doc_id"][d], self.docs["unit_shard"][u], int(self.docs["unit_index"][u]),
                off, length, self.epoch, bool(self.docs["unit_fim"][u]))


def draw_manifest(streams: list[SourceStream], weights: list[float], sampling: SamplingConfig,
                  target_tokens: int) -> tuple[dict, np.ndarray]:
    """Interleave pieces by token deficit until `target_tokens` packed tokens (pieces + BOS)."""
    cols = {name: [] for name in MANIFEST_SCHEMA.names}
    appends = [cols[name].append for name in MANIFEST_SCHEMA.names]
    n_src = len(streams)
    drawn = [0.0] * n_src
    expected = [0.0] * n_src
    total = 0
    # T moves with progress; p is recomputed per 1/1024 of the budget, not per piece.
    buckets = 1024
    bucket, p = -1, None
    while total < target_tokens:
        b = min(buckets - 1, total * buckets // target_tokens)
        if b != bucket:
            bucket = b
            p = source_probabilities(weights, temperature_at(sampling, b / buckets)).tolist()
        # the source furthest behind its token target; ties go to the first
        i = max(range(n_src), key=lambda k: expected[k] - drawn[k])
        s = streams[i]
        piece = s.next_piece()
        for append, value in zip(appends, (s.name, *piece)):
            append(value)
        n = piece[4] + 1  # the BOS the packer adds is a trained token too
        drawn[i] += n
        for k in range(n_src):
            expected[k] += p[k] * n
        total += n
    return cols, np.asarray(drawn)


def write_manifest(cols: dict, path: Path) -> str:
    """Write the manifest with fixed writer options (byte-identical for equal content); returns
    its sha256."""
    table = pa.table({k: pa.array(cols[k], type=MANIFEST_SCHEMA.field(k).type) for k in MANIFEST_SCHEMA.names},
                     schema=MANIFEST_SCHEMA)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", compression_level=3, row_group_size=1 << 20,
                       use_dictionary=["source", "shard"], write_statistics=False, store_schema=False)
    return file_hash(path)



def source_documents(pairs: list[tuple[dict, dict]], data_dir: Path, memory: bool = False) -> tuple[dict, list[str], int]:
    """One source's documents as the draw walks them, from its tokenized files (`pairs` of
    tokenization task and result, lib/data/token_cache.py): documents with identical text kept once
    (deduplicated before resampling, so no document is drawn twice by accident), documents without tokens left out. Returns the
    document columns (doc_id; per document its first unit and unit count; per unit its shard
    relative to `data_dir`, index, length and FIM flag), each document's night (the memory's
    `<memory>/<night>/train/` folder, else ""), and the number of duplicates dropped."""
    doc_id, unit_start, unit_count, doc_night = [], [], [], []
    unit_shard, unit_index, unit_len, unit_fim = [], [], [], []
    seen: set[int] = set()
    duplicates = 0
    for t, r in pairs:
        shard_rel = str(Path(t["stem"]).relative_to(data_dir))
        bounds = np.searchsorted(r["unit_doc"], np.arange(len(r["doc_ids"]) + 1))
        for d, did in enumerate(r["doc_ids"]):
            h = int(r["doc_hash"][d])
            u0, u1 = int(bounds[d]), int(bounds[d + 1])
            if h in seen:
                duplicates += 1
                continue
            if int(r["unit_len"][u0:u1].sum()) == 0:
                continue
            seen.add(h)
            doc_id.append(did)
            doc_night.append(Path(t["file"]).parent.parent.name if memory else "")
            unit_start.append(len(unit_len))
            unit_count.append(u1 - u0)
            for u in range(u0, u1):
                unit_shard.append(shard_rel)
                unit_index.append(u)
                unit_len.append(int(r["unit_len"][u]))
                unit_fim.append(bool(r["unit_fim"][u]))
    docs = {"doc_id": doc_id, "unit_start": np.asarray(unit_start), "unit_count": np.asarray(unit_count),
            "unit_shard": unit_shard, "unit_index": np.asarray(unit_index), "unit_len": np.asarray(unit_len),
            "unit_fim": np.asarray(unit_fim)}
    return docs, doc_night, duplicates
