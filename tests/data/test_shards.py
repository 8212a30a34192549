"""Token shards: round trip, on-disk layout, dtype choice, and errors that name the file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lib.data.shards import ShardError, read_shard, read_shard_meta, write_shard

DOCS = [[5, 6, 7], [], [1], [9, 8, 7, 6, 5, 4]]


def test_round_trip_and_documented_layout(tmp_path):
    stem = write_shard(DOCS, tmp_path / "s" / "shard-00000.bin", tokenizer_hash="abc", vocab_size=32)
    assert stem == tmp_path / "s" / "shard-00000"
    tokens, ends = read_shard(stem)
    assert isinstance(tokens, np.memmap) and isinstance(ends, np.memmap)
    assert tokens.dtype == np.dtype("<u2") and ends.dtype == np.dtype("<u8")
    assert ends.tolist() == [3, 3, 4, 10]
    starts = [0, *ends[:-1].tolist()]
    assert [tokens[a:b].tolist() for a, b in zip(starts, ends)] == DOCS
    # the bytes on disk are the documented format, independent of this machine's byte order
    assert (stem.with_suffix(".bin")).read_bytes() == np.array(sum(DOCS, []), dtype="<u2").tobytes()
    assert (stem.with_suffix(".idx")).read_bytes() == np.array([3, 3, 4, 10], dtype="<u8").tobytes()
    meta = read_shard_meta(stem)
    assert (meta["dtype"], meta["num_tokens"], meta["num_docs"], meta["tokenizer_hash"]) == ("uint16", 10, 4, "abc")


def test_large_vocabulary_uses_uint32(tmp_path):
    stem = write_shard([[70_000, 1], [65_535]], tmp_path / "big", vocab_size=100_000)
    tokens, _ = read_shard(stem)
    assert tokens.dtype == np.dtype("<u4") and tokens.tolist() == [70_000, 1, 65_535]
    with pytest.raises(ShardError, match="token ids"):
        write_shard([[40]], tmp_path / "bad", vocab_size=32)


def test_empty_shard(tmp_path):
    tokens, ends = read_shard(write_shard([], tmp_path / "empty", vocab_size=10))
    assert tokens.size == 0 and ends.size == 0


def test_truncated_token_file_is_named(tmp_path):
    stem = write_shard(DOCS, tmp_path / "t", vocab_size=32)
    data = stem.with_suffix(".bin").read_bytes()
    stem.with_suffix(".bin").write_bytes(data[:-2])
    with pytest.raises(ShardError, match=r"t\.bin has 18 bytes"):
        read_shard(stem)


def test_index_disagreeing_with_tokens_is_named(tmp_path):
    stem = write_shard(DOCS, tmp_path / "i", vocab_size=32)
    stem.with_suffix(".idx").write_bytes(np.array([3, 3, 4, 9], dtype="<u8").tobytes())
    with pytest.raises(ShardError, match=r"i\.idx disagrees with .*i\.bin"):
        read_shard(stem)
    stem.with_suffix(".idx").write_bytes(np.array([3, 2, 4, 10], dtype="<u8").tobytes())
    with pytest.raises(ShardError, match=r"i\.idx disagrees"):
        read_shard(stem)
    stem.with_suffix(".idx").write_bytes(np.array([3, 3, 10], dtype="<u8").tobytes())
    with pytest.raises(ShardError, match=r"i\.idx has 24 bytes"):
        read_shard(stem)


def test_other_tokenizer_and_missing_metadata_are_named(tmp_path):
    stem = write_shard(DOCS, tmp_path / "h", tokenizer_hash="a" * 64, vocab_size=32)
    read_shard(stem, tokenizer_hash="a" * 64)
    with pytest.raises(ShardError, match=r"h\.bin was written by tokenizer aaaaaaaaaaaa"):
        read_shard(stem, tokenizer_hash="b" * 64)
    meta = json.loads(stem.with_suffix(".json").read_text())
    stem.with_suffix(".json").write_text(json.dumps({**meta, "format": "other"}))
    with pytest.raises(ShardError, match="not a token shard"):
        read_shard(stem)
    stem.with_suffix(".json").unlink()
    with pytest.raises(ShardError, match=r"h\.json does not exist"):
        read_shard(stem)
