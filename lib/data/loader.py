"""The training loader: follow the manifest, pack separator-aligned best-fit rows, stripe them
over data-parallel ranks, resume exactly.

- `validate(data, tokenizer_hash)` opens the prepared data (lib/data/prepared.py: a `PreparedData` or
  its folder) and every token shard the manifest names and checks, before any training step:
  index and token file agree, every shard was written by the model's tokenizer, every manifest
  piece lies inside an existing document, the manifest is the one data.json hashed. Errors name
  the file.
- Manifest pieces enter a best-fit planner (lib/data/packing.py) in manifest order, `buffer_size` at a
  time, each with its source; the planner serves a source first when it lags the manifest's mix
  by more than half a row, so the trained token ratio is the manifest's (tested), not best-fit's
  preference for long pieces.
- Every piece gets the document separator in front (data.json `separator_id`: BOS for Llama-style
  models, `<|endoftext|>` for GPT-2/Qwen2, see lib/data/tokenizer.py); it is context for the piece's
  first token and the target of the previous piece's last token (the "end of document" a model
  separated by end-of-text learns), so every token of a row carries loss.
- Every rank plans the same global row sequence (planning is arithmetic on lengths) and copies
  tokens only for its own rows: rank r takes global rows r, r + W, r + 2W, ... Each `next_batch`
  plans one whole global batch (B × W rows), so all ranks hold the same state after every step.
- State for resume is small and plain: manifest cursor, passes over the manifest, rows planned,
  the manifest rows waiting in the planner's buffer and its per-source token counts. Rebuilding
  the planner from them gives the exact same future rows; resuming on a different world size
  keeps the global row order.
- Targets are the inputs shifted by one; -100 marks positions without loss (the FIM middle-only
  option masks everything up to and including `<|fim_middle|>`).
- When the manifest runs out (it is drawn with 5% slack) the loader starts it again from the top.

Trade-off: planning rows nobody on this rank trains on costs ~W× the planning work but keeps
resume state identical on all ranks, so rank 0 alone saves it; a batch of 8 × 256 takes ~0.35 ms,
thousands of times less than the tiny demo model's step on CPU (bench/bench_loader.py).
"""

from __future__ import annotations

# torch is imported inside functions: importing this module must not cost its ~4 s
import logging
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lib.files import file_hash
from lib.data.fim import middle_only_mask
from lib.data.manifest import MANIFEST_SCHEMA
from lib.data.packing import BestFitPlanner, PackingStats
from lib.data.prepared import DataError, PreparedData
from lib.data.shards import ShardError, doc_starts, read_shard

STATE_VERSION = 2  # 2: per-source token counts of the planner
log = logging.getLogger(__name__)


def _codes(column) -> tuple[list[str], np.ndarray]:
    encoded = pc.dictionary_encode(column.combine_chunks())
    return [str(x) for x in encoded.dictionary.to_pylist()], encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


class _Data:
    """The manifest as numpy columns plus the memory-mapped shards it points into."""

    def __init__(self, data: PreparedData | str | Path, tokenizer_hash: str | None):
        self.prepared = PreparedData.open(data)
        self.dir = self.prepared.path
        self.meta = self.prepared.info
        data_hash = self.meta.get("tokenizer_hash")
        if tokenizer_hash is not None and data_hash != tokenizer_hash:
            raise DataError(
                f"{self.prepared.data_json}: data was tokenized by tokenizer {str(data_hash)[:12]}…, the model's is "
                f"{tokenizer_hash[:12]}…: re-run the data preparation with the model's tokenizer folder")
        manifest_path = self.prepared.manifest_file(self.meta)
        table = pq.read_table(manifest_path)
        if missing := set(MANIFEST_SCHEMA.names) - set(table.column_names):
            raise DataError(f"{manifest_path} lacks columns {sorted(missing)}")
        if table.num_rows == 0:
            raise DataError(f"{manifest_path} is empty: nothing to train on")
        # Dictionary-encode in Arrow: millions of repeated names become small int codes without
        # a Python string per row.
        self.source_names, self.source = _codes(table.column("source"))
        shard_names, shard_code = _codes(table.column("shard"))
        doc_index = table.column("doc_index").to_numpy()
        self.offset = table.column("offset").to_numpy()
        self.length = table.column("length").to_numpy()
        self.fim = table.column("fim").to_numpy(zero_copy_only=False).astype(bool)
        self.shards: list[np.ndarray] = []
        self.start = np.zeros(table.num_rows, dtype=np.int64)  # offset of each piece in its shard
        self.shard_code = shard_code
        # Group manifest rows by shard once (a per-shard scan would be rows × shards).
        by_shard = np.argsort(shard_code, kind="stable")
        bounds = np.searchsorted(shard_code[by_shard], np.arange(len(shard_names) + 1))
        for k, name in enumerate(shard_names):
            stem = self.dir / str(name)
            try:
                tokens, ends = read_shard(stem, tokenizer_hash=data_hash)
            except ShardError as exc:
                raise DataError(str(exc)) from None
            rows = by_shard[bounds[k]:bounds[k + 1]]
            docs = doc_index[rows]
            bad = np.flatnonzero((docs < 0) | (docs >= len(ends)))
            if bad.size:
                r = int(rows[bad[0]])
                raise DataError(
                    f"{manifest_path} row {r} (doc {table.column('doc_id')[r].as_py()!r}) refers to document "
                    f"{int(doc_index[r])} of {stem}.bin, which holds {len(ends)} documents")
            starts = doc_starts(ends)
            doc_len = np.asarray(ends, dtype=np.int64)[docs] - starts[docs]
            over = np.flatnonzero((self.offset[rows] < 0) | (self.offset[rows] + self.length[rows] > doc_len))
            if over.size:
                r = int(rows[over[0]])
                raise DataError(
                    f"{manifest_path} row {r}: piece [{int(self.offset[r])}, +{int(self.length[r])}) lies outside "
                    f"document {int(doc_index[r])} of {stem}.bin ({int(doc_len[over[0]])} tokens)")
            self.start[rows] = starts[docs] + self.offset[rows]
            # A plain ndarray view of the map: slicing a np.memmap builds a memmap object per slice.
            self.shards.append(tokens.view(np.ndarray))
        self.rows = table.num_rows
        self.manifest_hash = self.meta.get("manifest_hash")
        actual = file_hash(manifest_path)
        if self.manifest_hash is not None and actual != self.manifest_hash:
            # lineage records manifest_hash as what the run trained on: it must be this file
            raise DataError(f"{manifest_path} changed after preparation (sha256 {actual[:12]}…, data.json says "
                            f"{self.manifest_hash[:12]}…): re-run the data preparation")


def validate(data: PreparedData | str | Path, tokenizer_hash: str | None = None) -> dict:
    """Check prepared data before training (see module docstring); returns a short summary."""
    data = _Data(data, tokenizer_hash)
    return {"manifest_rows": data.rows, "shards": len(data.shards), "sources": data.source_names,
            "tokenizer_hash": data.meta.get("tokenizer_hash"), "manifest_hash": data.manifest_hash,
            "tokens": int(data.length.sum())}


class TrainLoader:
    """Batches of BOS-aligned best-fit rows following the manifest of `data` (a `PreparedData`
    or its folder)."""

    def __init__(
        self,
        data: PreparedData | str | Path,
        batch_size: int,
        seq_len: int,
        rank: int = 0,
        world_size: int = 1,
        *,
        buffer_size: int = 1000,
        tokenizer_hash: str | None = None,
    ):
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be positive, got {batch_size}, {seq_len}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        self.data = _Data(data, tokenizer_hash)
        meta = self.data.meta
        self.batch_size, self.seq_len = batch_size, seq_len
        self.rank, self.world_size = rank, world_size
        self.buffer_size = buffer_size
        self.tokenizer_hash = meta.get("tokenizer_hash")
        self.manifest_hash = self.data.manifest_hash
        # data prepared before the separator setting existed recorded bos_id, which it packed with
        sep = meta.get("separator_id", meta.get("bos_id"))
        if sep is None:
            raise DataError(f"{self.data.prepared.data_json} records no separator_id: prepare the data again")
        self.separator_id = int(sep)
        fim = meta.get("fim") or {}
        self.middle_only = bool(fim.get("middle_only")) and fim.get("middle_id") is not None
        self.middle_id = fim.get("middle_id")
        self.source_names = self.data.source_names
        prepared = int(meta.get("seq_len") or seq_len)
        if seq_len < prepared:
            log.warning("%s was prepared for seq_len %d but the loader packs rows of %d: pieces longer than a row "
                        "lose their tails to cropping; prepare the data with the training seq_len", self.data.dir, prepared, seq_len)
        self.stats = PackingStats()
        self._rows = np.empty((batch_size, seq_len + 1), dtype=np.int64)   # allocated once
        self._loss = np.empty((batch_size, seq_len + 1), dtype=bool)
        self._reset()

    def _reset(self) -> None:
        self.cursor = 0
        self.passes = 0
        self.rows_planned = 0
        self.batches = 0
        self.planner = BestFitPlanner()

    def _fill(self) -> None:
        d = self.data
        while len(self.planner) < self.buffer_size:
            if self.cursor >= d.rows:
                self.cursor = 0
                self.passes += 1
            m = self.cursor
            self.planner.add(m, int(d.length[m]) + 1, int(d.source[m]))
            self.cursor += 1

    def _plan_row(self) -> list[tuple[int, int]]:
        self._fill()
        plan = self.planner.plan_row(self.seq_len + 1)
        self.rows_planned += 1
        return plan

    def _materialize(self, plan, row: np.ndarray, loss: np.ndarray, per_source: np.ndarray) -> None:
        d = self.data
        pos = 0
        loss[:] = True
        for i, (m, take) in enumerate(plan):
            row[pos] = self.separator_id
            n = take - 1
            if n:
                s = int(d.start[m])
                row[pos + 1:pos + take] = d.shards[d.shard_code[m]][s:s + n]
            if self.middle_only and d.fim[m]:
                loss[pos:pos + take] = middle_only_mask(row[pos:pos + take], self.middle_id)
            # tokens among the inputs: the row's last token is only ever a target
            per_source[d.source[m]] += take - (1 if i == len(plan) - 1 else 0)
            full = int(d.length[m]) + 1
            self.stats.docs += 1
            self.stats.tokens_in += full
            self.stats.tokens_cropped += full - take
            pos += take
        self.stats.rows += 1
        self.stats.tokens_packed += pos

    def next_batch(self):
        """(inputs [B, T], targets [B, T] with -100 where no loss, tokens_per_source) on CPU."""
        import torch

        per_source = np.zeros(len(self.source_names), dtype=np.int64)
        W = self.world_size
        for g in range(self.batch_size * W):
            plan = self._plan_row()
            if g % W == self.rank:
                b = g // W
                self._materialize(plan, self._rows[b], self._loss[b], per_source)
        self.batches += 1
        inputs = torch.from_numpy(self._rows[:, :-1].copy())
        targets_np = np.where(self._loss[:, 1:], self._rows[:, 1:], -100)
        targets = torch.from_numpy(targets_np)
        tokens = {name: int(n) for name, n in zip(self.source_names, per_source) if n}
        return inputs, targets, tokens

    def __iter__(self):
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        """Small plain dict (JSON-able), identical on every rank after the same number of steps."""
        return {
            "version": STATE_VERSION, "manifest_hash": self.manifest_hash, "seq_len": self.seq_len,
            "cursor": self.cursor, "passes": self.passes, "rows_planned": self.rows_planned,
            "batches": self.batches, "buffer": [int(k) for k in self.planner.keys()],
            "planner_counts": self.planner.counts(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION:
            raise DataError(f"loader state version {state.get('version')} is not {STATE_VERSION}: the snapshot was written "
                            f"by another version of this package; train this run again without --resume")
        if state.get("manifest_hash") != self.manifest_hash:
            raise DataError(
                f"loader state belongs to manifest {str(state.get('manifest_hash'))[:12]}…, but {self.data.dir} "
                f"holds {str(self.manifest_hash)[:12]}…: resume with the run's own data folder")
        if state.get("seq_len") != self.seq_len:
            raise DataError(f"loader state was saved with seq_len {state.get('seq_len')}, this loader has {self.seq_len}")
        self._reset()
        self.cursor = int(state["cursor"])
        self.passes = int(state["passes"])
        self.rows_planned = int(state["rows_planned"])
        self.batches = int(state["batches"])
        for m in state["buffer"]:
            if not 0 <= int(m) < self.data.rows:
                raise DataError(f"loader state refers to manifest row {m}, the manifest has {self.data.rows}")
            self.planner.add(int(m), int(self.data.length[int(m)]) + 1, int(self.data.source[int(m)]))
        self.planner.set_counts(state["planner_counts"])
