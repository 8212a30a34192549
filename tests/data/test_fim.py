"""FIM: character-level spans, PSM/SPM layouts, determinism, middle-only mask."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import stdlib_texts
from data_fixtures import train_tokenizer
from lib.data.fim import fim_rng, fim_tokens, fim_transform, middle_only_mask, split_spans
from lib.data.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(train_tokenizer(tmp_path_factory.mktemp("tok"), 400))


def test_spans_cover_the_text_and_are_deterministic():
    text = stdlib_texts(1)[0][:500]
    cuts = set()
    for piece in range(50):
        p, m, s = split_spans(text, fim_rng(7, "src", "doc", piece))
        assert p + m + s == text
        cuts.add(len(p))
        again = split_spans(text, fim_rng(7, "src", "doc", piece))
        assert again == (p, m, s)
    assert len(cuts) > 10  # cut points vary with the piece
    assert split_spans(text, fim_rng(8, "src", "doc", 0)) != split_spans(text, fim_rng(7, "src", "doc", 0))


def test_psm_and_spm_layouts():
    ids = dict(prefix_id=100, middle_id=101, suffix_id=102, eos_id=1)
    assert fim_tokens([1, 2], [3], [4, 5], spm=False, **ids) == [100, 1, 2, 102, 4, 5, 101, 3, 1]
    assert fim_tokens([1, 2], [3], [4, 5], spm=True, **ids) == [102, 4, 5, 100, 1, 2, 101, 3, 1]


def test_transform_rebuilds_the_text(tok):
    text = stdlib_texts(2)[1][:800]
    orders = set()
    for piece in range(20):
        rng = fim_rng(0, "stdlib", "x.py", piece)
        out = fim_transform(text, tok.encode_batch, rng, spm_rate=0.5, prefix_id=tok.fim_prefix_id,
                            middle_id=tok.fim_middle_id, suffix_id=tok.fim_suffix_id, eos_id=tok.eos_id)
        assert out[-1] == tok.eos_id
        first = out[0]
        orders.add(first)
        i_pre, i_suf, i_mid = out.index(tok.fim_prefix_id), out.index(tok.fim_suffix_id), out.index(tok.fim_middle_id)
        if first == tok.fim_prefix_id:  # PSM
            prefix, suffix = out[i_pre + 1:i_suf], out[i_suf + 1:i_mid]
        else:  # SPM
            suffix, prefix = out[i_suf + 1:i_pre], out[i_pre + 1:i_mid]
        middle = out[i_mid + 1:-1]
        assert tok.decode(prefix) + tok.decode(middle) + tok.decode(suffix) == text
    assert orders == {tok.fim_prefix_id, tok.fim_suffix_id}  # both PSM and SPM occur at rate 0.5


def test_middle_only_mask():
    row = np.array([0, 100, 7, 8, 102, 9, 101, 5, 6, 1])
    assert middle_only_mask(row, 101).tolist() == [False] * 7 + [True] * 3
    assert not middle_only_mask(row[:5], 101).any()  # cropped before the sentinel: no middle
