"""Loader: rows, shifted targets, token-ratio mixing, rank striping, EXACT resume (also with
world_size 2), middle-only FIM masking, and bad data detected before training."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from data_fixtures import train_tokenizer, two_sources, write_sources
from lib.config import SamplingConfig
from lib.data.loader import DataError, TrainLoader, validate
from lib.data.sampling import prepare_training_data
from lib.data.tokenizer import load_tokenizer

SEQ, B = 64, 4


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    tok = train_tokenizer(root / "tok", 512)
    corpus, new = write_sources(root, corpus_docs=24, new_docs=20, max_chars=3000)

    def prepare(name, **sampling):
        cfg = SamplingConfig(**{"heldout_fraction": 0.1, "fim_rate_code": 0.0, **sampling})
        prepare_training_data(two_sources(corpus, new, 0.25), tok, root / name, token_budget=20_000,
                              sampling=cfg, seq_len=SEQ, workers=1)
        return root / name

    return {"root": root, "tok": tok, "data": prepare("data"), "prepare": prepare}


def _take(loader, n):
    return [loader.next_batch() for _ in range(n)]


def _same(a, b):
    return all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) and x[2] == y[2] for x, y in zip(a, b, strict=True))


def test_batches_rows_and_targets(env):
    tok = load_tokenizer(env["tok"])
    loader = TrainLoader(env["data"], B, SEQ, tokenizer_hash=tok.hash)
    assert loader.tokenizer_hash == tok.hash
    x, y, per_source = loader.next_batch()
    assert x.shape == y.shape == (B, SEQ) and x.dtype == y.dtype == torch.long
    assert (x[:, 0] == tok.bos_id).all()  # every row starts with BOS
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert sum(per_source.values()) == B * SEQ
    assert set(per_source) <= {"stdlib", "new"}


def test_mixes_at_the_token_ratio(env):
    loader = TrainLoader(env["data"], B, SEQ)
    totals = {"stdlib": 0, "new": 0}
    for _ in range(60):
        for k, v in loader.next_batch()[2].items():
            totals[k] += v
    share = totals["new"] / sum(totals.values())
    assert abs(share - 0.25) < 0.03, share
    assert loader.stats.utilisation == 1.0 and loader.stats.cropped_fraction < 0.05


def test_rank_striping(env):
    single = _take(TrainLoader(env["data"], 2 * B, SEQ), 3)
    ranks = [_take(TrainLoader(env["data"], B, SEQ, rank=r, world_size=2), 3) for r in (0, 1)]
    for step in range(3):
        for r in (0, 1):
            # rank r takes global rows r, r + 2, ...: the single-process batch's rows r::2
            assert torch.equal(ranks[r][step][0], single[step][0][r::2])
    # the two ranks' states are identical, so rank 0 alone can save them
    a, b = (TrainLoader(env["data"], B, SEQ, rank=r, world_size=2) for r in (0, 1))
    _take(a, 2), _take(b, 2)
    assert a.state_dict() == b.state_dict()


@pytest.mark.parametrize("world_size", [1, 2])
def test_exact_resume(env, world_size):
    for rank in range(world_size):
        reference = _take(TrainLoader(env["data"], B, SEQ, rank=rank, world_size=world_size), 9)
        first = TrainLoader(env["data"], B, SEQ, rank=rank, world_size=world_size)
        _take(first, 5)
        state = json.loads(json.dumps(first.state_dict()))  # plain and JSON-able
        resumed = TrainLoader(env["data"], B, SEQ, rank=rank, world_size=world_size)
        resumed.load_state_dict(state)
        assert _same(_take(resumed, 4), reference[5:])


def test_runs_past_the_manifest_deterministically(env):
    # More batches than the manifest holds: the loader wraps around, the same way every time.
    a = TrainLoader(env["data"], B, SEQ)
    rows = json.loads((env["data"] / "data.json").read_text())["manifest_rows"]
    n = rows // (B * 2) + 10
    batches = _take(a, n)
    assert a.passes >= 1
    state = None
    b = TrainLoader(env["data"], B, SEQ)
    for i in range(n):
        if i == n - 6:
            state = b.state_dict()
        b.next_batch()
    c = TrainLoader(env["data"], B, SEQ)
    c.load_state_dict(state)
    assert _same(_take(c, 6), batches[-6:])


def test_resume_refuses_another_manifest(env):
    other = env["prepare"]("other_seed", seed=5)
    state = TrainLoader(env["data"], B, SEQ).state_dict()
    with pytest.raises(DataError, match="resume with the run's own data folder"):
        TrainLoader(other, B, SEQ).load_state_dict(state)


def test_fim_middle_only_masks_all_but_the_middle(env):
    data = env["prepare"]("fim_mid", fim_rate_code=1.0, fim_middle_only=True)
    tok = load_tokenizer(env["tok"])
    loader = TrainLoader(data, B, SEQ)
    masked = trained = 0
    for _ in range(20):
        x, y, _ = loader.next_batch()
        for row_x, row_y in zip(x, y):
            starts = list(np.flatnonzero(row_x.numpy() == tok.bos_id)) + [SEQ]
            for a, b in zip(starts[:-1], starts[1:]):
                seg_y = row_y[a:b].numpy()
                seg = row_x[a:b].numpy()
                if seg.size > 1 and seg[1] in (tok.fim_prefix_id, tok.fim_suffix_id):
                    mids = np.flatnonzero(seg == tok.fim_middle_id)
                    cut = mids[0] if mids.size else seg.size
                    # targets up to and including <|fim_middle|> are masked, the middle is trained
                    assert (seg_y[:cut] == -100).all()
                    assert (seg_y[cut:b - a - 1] != -100).all()
                    masked += int((seg_y == -100).sum())
                    trained += int((seg_y != -100).sum())
    assert masked > 0 and trained > 0
    plain = TrainLoader(env["prepare"]("fim_all", fim_rate_code=1.0), B, SEQ)
    assert all((plain.next_batch()[1] != -100).all() for _ in range(5))  # default: loss on all tokens


def test_bad_data_is_caught_before_training(env, tmp_path):
    tok = load_tokenizer(env["tok"])
    assert validate(env["data"], tok.hash)["manifest_rows"] > 0
    bad = tmp_path / "bad"
    shutil.copytree(env["data"], bad)
    # 1. a shard written by another tokenizer than the model's
    with pytest.raises(DataError, match="model's tokenizer"):
        validate(bad, "f" * 64)
    # ... also when a single shard comes from another tokenizer than the rest
    meta_path = sorted((bad / "shards" / "stdlib").glob("*.json"))[-1]
    good_meta = meta_path.read_text()
    meta_path.write_text(json.dumps({**json.loads(good_meta), "tokenizer_hash": "0" * 64}))
    with pytest.raises(DataError, match=rf"{meta_path.stem}\.bin was written by tokenizer 000000000000"):
        validate(bad, tok.hash)
    meta_path.write_text(good_meta)
    # 2. an index that disagrees with its token file
    idx = sorted((bad / "shards" / "new").glob("*.idx"))[0]
    good = idx.read_bytes()
    ends = np.frombuffer(good, dtype="<u8").copy()
    ends[-1] += 5
    idx.write_bytes(ends.tobytes())
    with pytest.raises(DataError, match=r"shard-00000\.idx disagrees"):
        TrainLoader(bad, B, SEQ)
    idx.write_bytes(good)
    # 3. a manifest row pointing at a document the shard does not have
    manifest = pq.read_table(bad / "manifest.parquet")
    doc_index = manifest.column("doc_index").to_numpy().copy()
    doc_index[3] = 10_000
    manifest = manifest.set_column(manifest.column_names.index("doc_index"), "doc_index", pa.array(doc_index))
    pq.write_table(manifest, bad / "manifest.parquet")
    with pytest.raises(DataError, match=r"manifest\.parquet row 3 .* refers to document 10000 of .*\.bin"):
        validate(bad, tok.hash)
    # 4. a manifest edited after preparation, even into one that points at real documents
    pq.write_table(pq.read_table(env["data"] / "manifest.parquet").slice(0, 50), bad / "manifest.parquet")
    with pytest.raises(DataError, match=r"manifest\.parquet changed after preparation"):
        TrainLoader(bad, B, SEQ)
    (bad / "data.json").unlink()
    with pytest.raises(DataError, match=r"data\.json does not exist"):
        TrainLoader(bad, B, SEQ)


def test_resume_on_another_world_size_keeps_the_global_row_order(env):
    single = TrainLoader(env["data"], 2 * B, SEQ)
    _take(single, 3)
    state = single.state_dict()
    expected = _take(single, 2)
    for r in (0, 1):
        rank = TrainLoader(env["data"], B, SEQ, rank=r, world_size=2)
        rank.load_state_dict(state)
        got = _take(rank, 2)
        for step in range(2):
            assert torch.equal(got[step][0], expected[step][0][r::2])
