"""The compiled MinHash kernel: pinned values, shingle semantics (words, UTF-8 characters, short
and empty documents), position independence, estimates against exact Jaccard, the uncached path."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from conftest import ROOT, stdlib_texts
from lib.curation import kernels, minhash, precompile
from lib.curation.minhash import MAX_HASH, MinHasher, estimated_jaccard, shingle_hashes
from lib.curation.text import normalize_text, normalize_texts, prepare_texts, text_chunks

FOX = "the quick brown fox jumps over the lazy dog"


def _doc_hashes(text: str, ngram: int, shingle: str) -> np.ndarray:
    hashes, offsets = shingle_hashes([text], ngram, shingle)
    assert offsets.tolist() == [0, len(hashes)]
    return hashes


def _jaccard(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.unique(x), np.unique(y)
    return len(np.intersect1d(x, y)) / len(np.union1d(x, y))


def test_values_are_pinned_across_processes_and_versions():
    """Persisted signatures (the dedup index) are only comparable if these never drift: a change
    here must come with a bump of HASH_VERSION."""
    assert minhash.HASH_VERSION == 2
    assert MinHasher(128, 1).signatures([FOX], normalized=True)[0][:4].tolist() == [1143544956, 1303732143, 350901885, 1089046686]
    assert _doc_hashes(FOX, 5, "word")[:2].tolist() == [0x67E90FF707EC6A20, 0x81B3F71086B2626F]
    assert _doc_hashes("東京 café", 2, "char")[:2].tolist() == [0xEE97ACEA8053D093, 0x490C14754E74F3F5]


def test_deterministic_and_seeded():
    docs = [FOX, "lorem ipsum " * 50, "東京 " * 9]
    first = MinHasher(64, seed=3).signatures(docs)
    assert np.array_equal(first, MinHasher(64, seed=3).signatures(list(docs)))
    assert not np.array_equal(first, MinHasher(64, seed=4).signatures(docs))
    assert first.dtype == np.uint32 and first.shape == (3, 64)


def test_word_shingles_do_not_depend_on_position_or_whitespace():
    inner = _doc_hashes("p q r s t", 5, "word")
    assert len(inner) == 1
    for text in ("x p q r s t y", "p q r s t z z z", "a b c d e f g p q r s t"):
        assert inner[0] in _doc_hashes(text, 5, "word")
    # the kernel splits on any ASCII whitespace run, so unnormalised spacing gives the same shingles
    assert np.array_equal(_doc_hashes(" a\tb  c\nd e\r\nf ", 5, "word"), _doc_hashes("a b c d e f", 5, "word"))
    # order matters: the same words reversed are other shingles
    assert not np.intersect1d(_doc_hashes("a b c d e", 5, "word"), _doc_hashes("e d c b a", 5, "word")).size
    # a word is its bytes, not a prefix: "ab" differs from "a" + "b" and from "abc"
    one = lambda t: _doc_hashes(t, 1, "word")  # noqa: E731
    assert len({one("ab")[0], one("abc")[0], one("a")[0], one("b")[0]}) == 4


def test_char_shingles_are_utf8_characters():
    for text in ("naïve café — 東京 über straße", "emoji 🙂🙃 mixed ǅ", "a\ud800b"):  # 1-4 byte characters, a lone surrogate
        for n in (1, 2, 3):
            assert len(_doc_hashes(text, n, "char")) == max(len(text) - n + 1, 1)
    tokyo = _doc_hashes("東京", 2, "char")
    assert len(tokyo) == 1 and tokyo[0] in _doc_hashes("in 東京 today", 2, "char")
    assert tokyo[0] in _doc_hashes("東京", 2, "char")
    # a whitespace run inside a text is one space character in char mode, never a word; the
    # kernel reads the normalised text (runs collapsed, ends stripped), whatever spacing it is given
    assert len(_doc_hashes("a \t\u3000 b", 1, "char")) == 3 and np.array_equal(
        _doc_hashes("a \t\u3000 b", 1, "char"), _doc_hashes("a b", 1, "char"))
    assert len(_doc_hashes("   ", 2, "char")) == 0 and len(_doc_hashes("   ", 2, "word")) == 0


def test_short_and_empty_documents():
    texts = ["", "one", "two words", "a b c d"]
    hashes, offsets = shingle_hashes(texts, 5, "word")
    assert np.diff(offsets).tolist() == [0, 1, 1, 1]  # fewer than n words: one shingle of all of them
    sig = MinHasher(32).signatures(texts, normalized=True)
    assert (sig[0] == MAX_HASH).all() and not (sig[1:] == MAX_HASH).any()
    assert len(set(hashes.tolist())) == 3
    assert MinHasher(32).signatures([], normalized=True).shape == (0, 32)
    assert shingle_hashes([], 5)[1].tolist() == [0]
    with pytest.raises(ValueError, match="shingle"):
        shingle_hashes(["x"], 5, "token")
    with pytest.raises(ValueError, match="ngram"):
        MinHasher(8).signatures(["x"], ngram=0)


def test_one_pass_kernel_equals_the_two_step_path_and_normalises():
    raw = ["Hello   WORLD, this is\tthe Same text written TWICE ﬁne", "Ünïcode ＦＵＬＬＷＩＤＴＨ and more words here"]
    hasher = MinHasher(128, seed=9)
    norm = [normalize_text(t) for t in raw]
    assert np.array_equal(hasher.signatures(raw), hasher.signatures(norm, normalized=True))
    # the kernel takes shingles four at a time: every remainder, short and long documents
    words = [f"w{i}" for i in range(300)]
    norm += [" ".join(words[:k]) for k in (5, 6, 7, 8, 9, 131, 132, 133, 134, 300)]
    for ngram, shingle in ((5, "word"), (3, "char"), (1, "word")):
        hashes, offsets = shingle_hashes(norm, ngram, shingle)
        assert np.array_equal(hasher.signatures(norm, ngram, shingle, normalized=True), hasher.signatures_from_hashes(hashes, offsets))


def _reference_word_shingles(text: str, ngram: int) -> list[int]:
    """The word shingle hashes the module docstring defines, in plain Python integers: FNV-1a
    over each word's bytes of the normalised text, plus its length, fmix64; a shingle chains
    ngram unit hashes from GOLD * count, FNV-style, then fmix64."""
    mask = (1 << 64) - 1

    def fmix(h: int) -> int:
        h ^= h >> 33
        h = (h * 0xFF51AFD7ED558CCD) & mask
        h ^= h >> 33
        h = (h * 0xC4CEB9FE1A85EC53) & mask
        return h ^ (h >> 33)

    def unit(word: str) -> int:
        h = 0xCBF29CE484222325
        data = word.encode("utf-8", "surrogatepass")
        for byte in data:
            h = ((h ^ byte) * 0x100000001B3) & mask
        return fmix((h + len(data)) & mask)

    def chain(units: list[int]) -> int:
        s = (0x9E3779B97F4A7C15 * len(units)) & mask
        for u in units:
            s = ((s ^ u) * 0x100000001B3) & mask
        return fmix(s)

    units = [unit(w) for w in normalize_text(text).split()]
    if 0 < len(units) < ngram:
        return [chain(units)]
    return [chain(units[k : k + ngram]) for k in range(len(units) - ngram + 1)]


def test_word_shingles_equal_the_reference_on_every_path():
    """Word mode has a fast path (whitespace that is one byte: ASCII texts and most others) and a
    general one (texts with U+00A0, U+2028, U+3000, ...); both give the reference's hashes, from
    raw and from normalised texts, for real files and for texts built to hit each branch."""
    texts = [t[:3000] for t in stdlib_texts(40)] + [
        "naïve café — 東京 über straße", "Ünïcode ＦＵＬＬＷＩＤＴＨ words ﬁne ÉCOLE",  # non-ASCII, single-byte spaces
        "a\u00a0b c\u3000d\u2028e f g h", "NBSP\u00a0only", "x\u2003\u2003y\u205fz w v u",  # multi-byte spaces
        "", "   ", "one", "two words", "a\tb\nc\rd\x1fe f", "tail   ", "\u00a0lead and trail\u3000",
        "emoji 🙂 and astral 𝔘 text here", "a\ud800b c d e f",  # astral characters, a lone surrogate
    ]
    for ngram in (1, 3, 5):
        want = [_reference_word_shingles(t, ngram) for t in texts]
        for given in (texts, [normalize_text(t) for t in texts]):
            hashes, offsets = shingle_hashes(prepare_texts(given) if given is texts else given, ngram, "word")
            got = [hashes[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))]
            assert got == want


@pytest.mark.parametrize("shingle, ngram", [("word", 1), ("word", 5), ("char", 3)])
def test_estimate_tracks_exact_jaccard(shingle, ngram):
    """Pairs at a spread of overlaps, 256 permutations: mean error < 0.03, no bias, and errors the
    size the binomial predicts (sqrt(J(1 - J) / 256)), as for truly random permutations."""
    rng = np.random.default_rng(7)
    alphabet = list("abcdéèüß東京大阪日本語🙂") if shingle == "char" else [f"w{i}" for i in range(5000)]
    sep = "" if shingle == "char" else " "
    a, b = [], []
    for keep in np.linspace(0.3, 0.98, 40):
        units = rng.choice(alphabet, size=600).tolist()
        edited = [u if rng.random() < keep else rng.choice(alphabet) for u in units]
        a.append(sep.join(units))
        b.append(sep.join(edited))
    hasher = MinHasher(256, seed=2)
    est = estimated_jaccard(hasher.signatures(a, ngram, shingle, True), hasher.signatures(b, ngram, shingle, True))
    exact = np.array([_jaccard(_doc_hashes(x, ngram, shingle), _doc_hashes(y, ngram, shingle)) for x, y in zip(a, b)])
    assert exact.max() - exact.min() > 0.6
    assert np.abs(est - exact).mean() < 0.03
    assert abs((est - exact).mean()) < 0.01
    inner = (exact > 0.02) & (exact < 0.98)
    z = (est - exact)[inner] / np.sqrt(exact * (1 - exact) / 256)[inner]
    assert 0.6 < z.std() < 1.4


def test_text_chunks_cover_the_texts_in_order():
    texts = ["x" * n for n in (5, 50, 3, 90, 1, 1, 40)]
    chunks = text_chunks(texts, chunk_bytes=60)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(texts)
    assert all(lo < hi for lo, hi in chunks) and all(c[1] == d[0] for c, d in zip(chunks, chunks[1:]))
    assert text_chunks([]) == []


def test_uncachable_kernel_compiles_in_memory(monkeypatch, caplog):
    """Numba refuses cache=True where no cache directory is writable (here: source without a
    file); a kernel then compiles without the cache and says so once, instead of failing."""
    from numba import types

    monkeypatch.setattr(kernels, "uncached", [])
    monkeypatch.setattr(kernels, "KERNELS", [])
    ns: dict = {}
    exec("def twice(x):\n    return 2 * x\n", ns)  # noqa: S102
    fn = kernels.compiled(types.int64(types.int64))(ns["twice"])
    with caplog.at_level("WARNING", logger="lib.curation.kernels"):
        assert fn(21) == 42
    assert kernels.uncached == ["twice"] and "NUMBA_CACHE_DIR" in caplog.text
    with pytest.raises(TypeError, match="No matching definition"):  # one signature, no silent recompilation
        fn(np.arange(3))


def test_compiled_normalisation_gives_the_reference_bytes():
    """normalize_texts (Python only for the NFKC + lower of non-ASCII texts, the rest one compiled
    pass) gives normalize_text's bytes: every whitespace character Python knows, compatibility
    characters, combining marks, Hangul jamo, a lone surrogate, real files (texts whose characters
    all pass the compiled check skip NFKC and lower); from a list and from an Arrow
    column (chunked, sliced, with a null). Signatures of raw texts equal those of normalised ones."""
    rng = random.Random(0)
    pool = [chr(c) for c in range(0x110000) if chr(c).isspace()] + list("aZ09 ,.-_QW") + \
        ["\ufb01", "\uff21", "\u00c9", "\u00e9", "\u00df", "\u0130", "\u03a3", "\u6771", "\U0001f642", "\u0301", "\x00",
         "\u1100", "\u1161", "\u2026", "\u2014", "\ufdfa", "\u3300"]  # Hangul jamo compose; ligatures expand
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    texts += stdlib_texts(20) + ["a\ud800b", "  MiXeD\tCase \u3000end "]
    want = [normalize_text(t).encode("utf-8", "surrogatepass") for t in texts]
    got = normalize_texts(texts, workers=2)
    assert [got.bytes(i) for i in range(len(texts))] == want and got.normalized
    clean = texts[:-2]
    column = pa.chunked_array([pa.array(clean[:700]), pa.array(clean[700:] + [None])]).slice(3)
    from_arrow = normalize_texts(column)
    assert [from_arrow.bytes(i) for i in range(len(column))] == want[3 : len(clean)] + [b""]
    hasher = MinHasher(32, seed=4)
    for ngram, shingle in ((5, "word"), (3, "char")):
        assert np.array_equal(hasher.signatures(texts, ngram, shingle, workers=2),
                              hasher.signatures([normalize_text(t) for t in texts], ngram, shingle, normalized=True))


def test_every_kernel_has_one_signature_and_the_install_step_builds_them():
    took = precompile.compile_kernels()
    assert set(took) == {"_lower_stable", "_normalize_kernel", "_unicode_kernel", "_shingle_kernel", "_signature_kernel", "_band_keys_kernel",
                         "_union_min", "_sort_segments", "_pair_jaccard"}
    assert all(len(k.jit.signatures) == 1 for k in kernels.KERNELS)
    # what `make install` and the worker images run (the kernels are in numba's cache by now)
    proc = subprocess.run([sys.executable, "-m", "lib.curation.precompile"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "numba kernels ready" in proc.stderr, proc.stderr


def test_band_keys_fold_each_band_into_one_key():
    """Key of a band = fmix64 of the FNV-style fold of its values, seeded by the band number (the
    compiled pass computes exactly this numpy definition)."""
    sig = np.random.default_rng(0).integers(0, 2**32, (300, 128), dtype=np.uint64).astype(np.uint32)
    want = np.empty((300, 18), np.uint64)
    with np.errstate(over="ignore"):
        for band in range(18):
            h = np.full(300, np.uint64(band) * np.uint64(0x9E3779B97F4A7C15), dtype=np.uint64)
            for j in range(7):
                h = (h ^ sig[:, band * 7 + j].astype(np.uint64)) * np.uint64(0x100000001B3)
            want[:, band] = minhash._fmix64(h)
    assert np.array_equal(minhash.band_keys(sig, 18, 7), want)
    assert np.array_equal(minhash.band_keys(sig[::3], 18, 7), want[::3])  # any layout
    with pytest.raises(ValueError, match="permutations"):
        minhash.band_keys(sig, 20, 7)
