"""Pack documents into fixed-length training rows: BOS-aligned best-fit (every row starts a document, so no row
begins mid-text) and the concatenate-and-chunk baseline with a random offset per epoch.

BOS-aligned best-fit (`bos_bestfit_rows`, planned by `BestFitPlanner`):
- every document gets a BOS in front of it, so every row starts with BOS and every token can
  attend to the start of its own document;
- keep a buffer of documents (default 1,000) sorted by length; to fill a row, repeatedly take the
  largest document that still fits into the space left (bisect on the sorted lengths);
- when none fits, crop the shortest one to exactly fill the row and drop its rest;
- no padding: utilisation is 100% by construction, the only waste is the cropped tails.

Concatenate-and-chunk (`chunk_rows`): one BOS-separated token stream, the first `offset ~ U(0, T)`
tokens skipped (a different cut every epoch), cut into rows. No crop waste, but most rows start
mid-document and attend across document boundaries.

The planner works on lengths only, so the loader can plan rows for every data-parallel rank and
materialise tokens just for its own (see lib/data/loader.py), and its state is a list of keys.

Trade-off (bench/bench_packing.py, 3 MB of stdlib sources): on whole documents best-fit still
crops 61% of tokens at T=2048 (greedy 69%), because most files are longer than a row; on the
pieces of at most T tokens that the manifest lists it crops 0.13% at T=256 and 1.9% at T=2048
(greedy: 3.5% and 13.8%). Chunking crops ~0.04-0.4% but starts ~all rows mid-document.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Iterator, Sequence

import numpy as np


@dataclass
class PackingStats:
    """What a packer did: every token that went in is either in a row or cropped away."""

    rows: int = 0
    docs: int = 0
    tokens_in: int = 0        # document tokens + one BOS each
    tokens_packed: int = 0    # tokens placed into rows (= rows × row_len)
    tokens_cropped: int = 0   # tails dropped by cropping, and an unfinished last row
    pad_tokens: int = 0       # always 0: no packer here pads

    @property
    def utilisation(self) -> float:
        total = self.tokens_packed + self.pad_tokens
        return self.tokens_packed / total if total else 1.0

    @property
    def cropped_fraction(self) -> float:
        return self.tokens_cropped / self.tokens_in if self.tokens_in else 0.0

    def as_dict(self) -> dict:
        return {
            "rows": self.rows, "docs": self.docs, "tokens_in": self.tokens_in,
            "tokens_packed": self.tokens_packed, "tokens_cropped": self.tokens_cropped,
            "utilisation": self.utilisation, "cropped_fraction": self.cropped_fraction,
        }


@dataclass
class BestFitPlanner:
    """Best-fit row planning over (key, length, source) items; length counts the separator the
    row will add.

    `plan_row(capacity)` returns [(key, take), ...] with sum(take) == capacity, largest-fitting
    first; the last entry may be a crop (take < length). Ties go to the item added first, so a
    plan is a pure function of the order of `add` calls.

    Several sources (a manifest that mixes tonight's data with replay): best-fit alone prefers
    long pieces, so a source of short documents (conversations) waits in the buffer while the
    long pieces of another are trained first; over a run of a few hundred rows with a 1,000-piece
    buffer that trained 25% new tokens for a manifest of 49%. So the planner counts, per source,
    the tokens that entered it (the manifest's mix) and the tokens placed in rows; a source that
    lags its share by more than `urgency` × a row is served first (its largest fitting piece),
    and a crop falls on the most lagging source. With one source this is plain best-fit.
    """

    urgency: float = 0.5
    _items: dict = field(default_factory=dict)  # source -> sorted [(length, -seq, key)]
    _seq: int = 0
    added: dict = field(default_factory=dict)    # source -> tokens added
    placed: dict = field(default_factory=dict)   # source -> tokens placed in rows

    def __len__(self) -> int:
        return sum(len(v) for v in self._items.values())

    def add(self, key: Hashable, length: int, source: int = 0) -> None:
        if length < 1:
            raise ValueError(f"packing needs items of at least 1 token (the separator), got {length}")
        # Negated sequence number: among equal lengths the earliest-added sorts last, and the
        # "largest that fits" search below takes the last fitting entry.
        bisect.insort(self._items.setdefault(source, []), (int(length), -self._seq, key))
        self._seq += 1
        self.added[source] = self.added.get(source, 0) + int(length)

    def keys(self) -> list:
        """Keys in insertion order (what a loader must save to rebuild this planner)."""
        everything = [it for items in self._items.values() for it in items]
        return [key for _, _, key in sorted(everything, key=lambda it: -it[1])]

    def counts(self) -> dict:
        """Per-source token counts (plain ints) to save beside `keys()` for an exact resume."""
        return {"added": {str(k): v for k, v in self.added.items()}, "placed": {str(k): v for k, v in self.placed.items()}}

    def set_counts(self, counts: dict) -> None:
        self.added = {int(k): int(v) for k, v in counts["added"].items()}
        self.placed = {int(k): int(v) for k, v in counts["placed"].items()}

    def _lags(self) -> list[tuple[float, int]]:
        """(lag in tokens, source) of every source with items, most lagging first."""
        total_added = sum(self.added.values()) or 1
        total_placed = sum(self.placed.values())
        lags = [(self.added.get(s, 0) / total_added * total_placed - self.placed.get(s, 0), s)
                for s, items in self._items.items() if items]
        return sorted(lags, key=lambda x: (-x[0], x[1]))

    def plan_row(self, capacity: int) -> list[tuple[Hashable, int]]:
        plan = []
        remaining = capacity
        while remaining > 0 and len(self):
            lags = self._lags()
            best = None  # (length, -seq, source, index)
            for lag, source in lags:
                items = self._items[source]
                # Rightmost item with length <= remaining: bisect on a key that sorts after every
                # (remaining, seq, key) tuple.
                i = bisect.bisect_right(items, (remaining, 1)) - 1
                if i < 0:
                    continue
                if len(lags) > 1 and lag > self.urgency * capacity:
                    best = (0, 0, source, i)  # a lagging source that has a fitting piece goes first
                    break
                cand = (items[i][0], items[i][1], source, i)
                if best is None or cand[:2] > best[:2]:
                    best = cand
            if best is not None:
                _, _, source, i = best
                length, _, key = self._items[source].pop(i)
                plan.append((key, length))
                remaining -= length
                self.placed[source] = self.placed.get(source, 0) + length
            else:
                # Nothing fits: crop the shortest (the earliest-added of the shortest) of the most
                # lagging source to fill the row.
                source = lags[0][1]
                items = self._items[source]
                j = bisect.bisect_right(items, (items[0][0], 1)) - 1
                length, _, key = items.pop(j)
                plan.append((key, remaining))
                self.placed[source] = self.placed.get(source, 0) + remaining
                remaining = 0
        return plan


def bos_bestfit_rows(
    docs: Iterable[Sequence[int]],
    seq_len: int,
    bos_id: int,
    *,
    buffer_size: int = 1000,
    stats: PackingStats | None = None,
) -> Iterator[np.ndarray]:
    """Yield int64 rows of seq_len + 1 tokens packed BOS-aligned best-fit from `docs` (token
    sequences without BOS). The unfinished last row is dropped (counted as cropped)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be at least 1, got {seq_len}")
    stats = stats if stats is not None else PackingStats()
    row_len = seq_len + 1
    planner = BestFitPlanner()
    store: dict[int, np.ndarray] = {}
    source = iter(docs)
    next_key = 0
    exhausted = False
    while True:
        while not exhausted and len(planner) < buffer_size:
            try:
                doc = np.asarray(next(source), dtype=np.int64).reshape(-1)
            except StopIteration:
                exhausted = True
                break
            store[next_key] = doc
            planner.add(next_key, doc.size + 1)
            stats.docs += 1
            stats.tokens_in += doc.size + 1
            next_key += 1
        if not len(planner):
            return
        left = sum(it[0] for items in planner._items.values() for it in items)
        if exhausted and left < row_len:
            stats.tokens_cropped += left  # no padding: drop it
            return
        row = np.empty(row_len, dtype=np.int64)
        pos = 0
        for key, take in planner.plan_row(row_len):
            doc = store.pop(key)
            row[pos] = bos_id
            row[pos + 1:pos + take] = doc[:take - 1]
            stats.tokens_cropped += doc.size + 1 - take
            pos += take
        stats.rows += 1
        stats.tokens_packed += row_len
        yield row


def greedy_rows(
    docs: Iterable[Sequence[int]], seq_len: int, bos_id: int, *, stats: PackingStats | None = None
) -> Iterator[np.ndarray]:
    """Baseline: BOS + documents in arrival order; a document that does not fit is cropped to fill
    the row and its rest dropped. Same 100% utilisation as best-fit, more cropping."""
    stats = stats if stats is not None else PackingStats()
    row_len = seq_len + 1
    row = np.empty(row_len, dtype=np.int64)
    pos = 0
    for doc in docs:
        doc = np.asarray(doc, dtype=np.int64).reshape(-1)
        stats.docs += 1
        stats.tokens_in += doc.size + 1
        take = min(doc.size + 1, row_len - pos)
        row[pos] = bos_id
        row[pos + 1:pos + take] = doc[:take - 1]
        stats.tokens_cropped += doc.size + 1 - take
        pos += take
        if pos == row_len:
            stats.rows += 1
            stats.tokens_packed += row_len
            yield row.copy()
            pos = 0
    stats.tokens_cropped += pos


def chunk_rows(
    docs: Iterable[Sequence[int]],
    seq_len: int,
    bos_id: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = False,
    stats: PackingStats | None = None,
) -> np.ndarray:
    """The baseline: concatenate BOS + doc for all docs, skip a random offset in [0, seq_len) drawn
    from (seed, epoch), and cut the rest into [rows, seq_len + 1]; the tail is dropped.
    Sequential splitting keeps the rows in stream order; `shuffle=True` is random
    sampling (the same rows in a seeded order, so neighbouring rows are unrelated)."""
    stats = stats if stats is not None else PackingStats()
    parts = []
    for doc in docs:
        doc = np.asarray(doc, dtype=np.int64).reshape(-1)
        parts.append(np.array([bos_id], dtype=np.int64))
        parts.append(doc)
        stats.docs += 1
        stats.tokens_in += doc.size + 1
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    offset = int(np.random.default_rng([seed, epoch]).integers(0, seq_len))
    row_len = seq_len + 1
    n_rows = max(0, (stream.size - offset) // row_len)
    rows = stream[offset:offset + n_rows * row_len].reshape(n_rows, row_len)
    if shuffle:
        rows = rows[np.random.default_rng([seed, epoch, 1]).permutation(n_rows)]
    stats.rows += n_rows
    stats.tokens_packed += n_rows * row_len
    stats.tokens_cropped += stream.size - n_rows * row_len
    return rows
