"""Tokenizer: trained BPE loads with transformers, special ids, byte lengths, stable hash."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import stdlib_texts
from data_fixtures import train_tokenizer
from lib.data.tokenizer import SPECIAL_TOKENS, TokenizerError, load_tokenizer, train_bpe


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tok"), 512)


def test_trained_folder_loads_with_transformers(tok_dir):
    from transformers import AutoTokenizer

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tok_dir / name).is_file(), name
    hf = AutoTokenizer.from_pretrained(tok_dir)
    tok = load_tokenizer(tok_dir)
    assert (hf.bos_token, hf.eos_token, hf.pad_token) == ("<|bos|>", "<|eos|>", "<|pad|>")
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id)
    vocab = hf.get_vocab()
    assert all(t in vocab for t in SPECIAL_TOKENS)
    assert tok.has_fim and tok.fim_middle_id == vocab["<|fim_middle|>"]
    assert tok.vocab_size == len(hf) == 512
    text = "def answer(x):\n    return x * 42  # café\n"
    assert tok.encode(text) == hf(text, add_special_tokens=False).input_ids
    assert tok.encode_batch([text, "b"]) == [tok.encode(text), tok.encode("b")]
    assert tok.decode(tok.encode(text)) == text


def test_literal_special_token_text_is_not_a_control_token(tok_dir):
    tok = load_tokenizer(tok_dir)
    ids = tok.encode("hello <|eos|> <|bos|> world")
    assert tok.eos_id not in ids and tok.bos_id not in ids
    assert tok.decode(ids) == "hello <|eos|> <|bos|> world"


def test_token_byte_lengths_sum_to_utf8_bytes(tok_dir):
    tok = load_tokenizer(tok_dir)
    lengths = tok.token_byte_lengths()
    assert lengths.shape == (tok.vocab_size,)
    assert all(lengths[i] == 0 for i in tok.special_ids)
    assert len(tok.special_ids) == len(SPECIAL_TOKENS)
    for text in ["plain ascii text", "naïve 日本語 ✓ emoji 🎉", *stdlib_texts(3)]:
        ids = tok.encode(text)
        assert int(lengths[np.asarray(ids)].sum()) == len(text.encode("utf-8"))


def test_hash_survives_resave_and_tells_tokenizers_apart(tok_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = load_tokenizer(tok_dir)
    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(tmp_path / "resaved")
    # Re-serialise with other whitespace too: the hash is of the content, not the bytes.
    spec = json.loads((tok_dir / "tokenizer.json").read_text())
    (tmp_path / "resaved" / "tokenizer.json").write_text(json.dumps(spec, indent=4))
    assert load_tokenizer(tmp_path / "resaved").hash == tok.hash
    other = train_bpe(stdlib_texts(20), 400, tmp_path / "other")
    assert load_tokenizer(other).hash != tok.hash


def test_loads_a_models_own_tokenizer(tiny_hf_model):
    tok = load_tokenizer(tiny_hf_model)
    assert tok.bos_id is not None and tok.eos_id is not None
    assert not tok.has_fim  # the fixture model has no FIM tokens: FIM must then be switched off
    assert len(tok.encode("import os")) > 0


def test_missing_or_bad_folder_names_the_file(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=str(tmp_path / "tokenizer.json")):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerError, match="vocab_size"):
        train_bpe(["x"], 100, tmp_path / "small")
