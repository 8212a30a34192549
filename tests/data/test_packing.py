"""Packing: BOS-aligned best-fit rules, 100% utilisation, accounting, vs greedy and chunking."""

from __future__ import annotations

import numpy as np

from lib.data.packing import BestFitPlanner, PackingStats, bos_bestfit_rows, chunk_rows, greedy_rows

BOS = 0


def _docs(lengths):
    # Document k is the token k + 1 repeated: every segment of a row says which doc it came from.
    return [np.full(n, k + 1, dtype=np.int64) for k, n in enumerate(lengths)]


def _segments(row):
    starts = np.flatnonzero(row == BOS)
    bounds = list(starts) + [len(row)]
    return [row[a + 1:b] for a, b in zip(bounds[:-1], bounds[1:])]


def test_planner_takes_largest_fitting_then_crops_shortest():
    p = BestFitPlanner()
    for key, length in [("a", 5), ("b", 3), ("c", 8), ("d", 2), ("e", 12)]:
        p.add(key, length)
    assert p.plan_row(10) == [("c", 8), ("d", 2)]           # largest that fits, then what fits the rest
    assert p.plan_row(10) == [("a", 5), ("b", 3), ("e", 2)]  # nothing fits 2: the shortest (e, 12) is cropped
    assert len(p) == 0
    q = BestFitPlanner()
    for key in "xyz":
        q.add(key, 4)
    assert q.plan_row(4) == [("x", 4)] and q.keys() == ["y", "z"]  # ties: first added first


def test_rows_start_with_bos_full_utilisation_and_docs_intact():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, size=400)
    docs = _docs(lengths)
    stats = PackingStats()
    rows = list(bos_bestfit_rows(docs, 128, BOS, buffer_size=64, stats=stats))
    assert rows and all(r.shape == (129,) and r[0] == BOS for r in rows)
    assert stats.utilisation == 1.0 and stats.pad_tokens == 0
    assert stats.tokens_in == int(lengths.sum()) + len(lengths)
    assert stats.tokens_packed == 129 * len(rows)
    assert stats.tokens_packed + stats.tokens_cropped == stats.tokens_in
    seen = {}
    for row in rows:
        for seg in _segments(row):
            if seg.size:
                k = int(seg[0]) - 1
                assert (seg == k + 1).all()          # one document per segment, in order
                assert seg.size <= lengths[k]          # a prefix of it
                assert k not in seen                   # each document is placed at most once
                seen[k] = seg.size
    assert len(seen) > 0.9 * len(lengths)  # all but the unfinished tail row
    # a larger buffer gives best-fit more choice: less cropping (nanochat's loader keeps 1,000 documents)
    wide = PackingStats()
    list(bos_bestfit_rows(docs, 128, BOS, buffer_size=1000, stats=wide))
    assert wide.cropped_fraction < stats.cropped_fraction and wide.cropped_fraction < 0.03


def test_bestfit_crops_fewer_tokens_than_greedy():
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(5.0, 1.0, size=2000).astype(int), 1, 2000)
    for seq_len in (256, 1024):
        best, greedy = PackingStats(), PackingStats()
        list(bos_bestfit_rows(_docs(lengths), seq_len, BOS, stats=best))
        list(greedy_rows(_docs(lengths), seq_len, BOS, stats=greedy))
        assert best.utilisation == greedy.utilisation == 1.0
        assert best.cropped_fraction < greedy.cropped_fraction, seq_len


def test_short_stream_drops_the_unfinished_row():
    stats = PackingStats()
    rows = list(bos_bestfit_rows(_docs([3, 2]), 16, BOS, stats=stats))
    assert rows == [] and stats.tokens_cropped == 7


def test_chunking_random_offset_per_epoch():
    docs = _docs([50] * 40)
    a0 = chunk_rows(docs, 64, BOS, seed=3, epoch=0)
    assert np.array_equal(a0, chunk_rows(docs, 64, BOS, seed=3, epoch=0))
    offsets = set()
    for epoch in range(6):
        rows = chunk_rows(docs, 64, BOS, seed=3, epoch=epoch)
        assert rows.shape[1] == 65
        stream = np.concatenate([np.concatenate([[BOS], d]) for d in docs])
        # the rows are a contiguous window of the stream starting at some offset < seq_len
        offsets.add(next(o for o in range(64) if np.array_equal(stream[o:o + 65], rows[0])))
    assert len(offsets) > 1
    stats = PackingStats()
    rows = chunk_rows(docs, 64, BOS, seed=3, stats=stats)
    assert stats.tokens_packed + stats.tokens_cropped == stats.tokens_in == 40 * 51
    assert stats.rows == rows.shape[0]


def test_chunking_random_sampling_shuffles_the_same_rows():
    docs = _docs([30] * 50)
    seq = chunk_rows(docs, 32, BOS, seed=1, epoch=2)
    shuffled = chunk_rows(docs, 32, BOS, seed=1, epoch=2, shuffle=True)
    assert shuffled.shape == seq.shape and not np.array_equal(shuffled, seq)
    assert sorted(map(bytes, shuffled.astype(np.int64))) == sorted(map(bytes, seq.astype(np.int64)))
    assert np.array_equal(shuffled, chunk_rows(docs, 32, BOS, seed=1, epoch=2, shuffle=True))
