"""Fill-in-the-middle (Bavarian et al. 2022, "Efficient Training of Language Models to Fill in
the Middle", so a code model also learns to complete a gap) applied to text pieces at tokenization time.

- Which pieces: a piece of a document is turned into a FIM example with probability `fim_rate`
  (per source; 0 for prose, `sampling.fim_rate_code` = 0.5 for code), drawn from a generator
  seeded by (seed, source, document id, piece number), so a re-run gives the same examples.
- Spans are cut at the character level: two cut points uniform over the piece's characters give
  prefix / middle / suffix (subword boundaries inside the middle stay natural, the paper's choice).
- Each part is encoded on its own and joined with the sentinels, then EOS ends the middle:
  PSM  `<|fim_prefix|> P <|fim_suffix|> S <|fim_middle|> M <|eos|>`
  SPM  `<|fim_suffix|> S <|fim_prefix|> P <|fim_middle|> M <|eos|>` (share `fim_spm_rate`).
- Loss: all tokens by default (the paper's FIM-for-free); `middle_only_mask` gives the positions
  whose targets are the middle and its EOS, for the middle-only option (the loader applies it).

Trade-off: FIM at tokenization time fixes each piece's spans for the whole run (a piece seen 4×
is the same FIM example 4×) but keeps the loader a pure token copier; 3 sentinels + EOS cost
4 tokens per FIM piece (1.6% of a 256-token row).
"""

from __future__ import annotations

import zlib
from typing import Callable, Sequence

import numpy as np


def fim_rng(seed: int, source: str, doc_id: str, piece: int) -> np.random.Generator:
    # crc32 of the names keeps the generator independent of PYTHONHASHSEED and of the worker.
    return np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(source.encode()), zlib.crc32(doc_id.encode()), piece])


def split_spans(text: str, rng: np.random.Generator) -> tuple[str, str, str]:
    """Two uniform character cut points -> (prefix, middle, suffix)."""
    a, b = sorted(int(x) for x in rng.integers(0, len(text) + 1, size=2))
    return text[:a], text[a:b], text[b:]


def fim_tokens(
    prefix: Sequence[int],
    middle: Sequence[int],
    suffix: Sequence[int],
    *,
    spm: bool,
    prefix_id: int,
    middle_id: int,
    suffix_id: int,
    eos_id: int | None,
) -> list[int]:
    """Join encoded parts in PSM or SPM order with the sentinel ids; EOS ends the middle."""
    if spm:
        out = [suffix_id, *suffix, prefix_id, *prefix, middle_id, *middle]
    else:
        out = [prefix_id, *prefix, suffix_id, *suffix, middle_id, *middle]
    if eos_id is not None:
        out.append(eos_id)
    return out


def fim_transform(
    text: str,
    encode: Callable[[list[str]], list[list[int]]],
    rng: np.random.Generator,
    *,
    spm_rate: float,
    prefix_id: int,
    middle_id: int,
    suffix_id: int,
    eos_id: int | None,
) -> list[int]:
    """One FIM example from `text`: character-level spans, PSM or SPM drawn with `spm_rate`."""
    prefix, middle, suffix = split_spans(text, rng)
    spm = bool(rng.random() < spm_rate)
    p, m, s = encode([prefix, middle, suffix])
    return fim_tokens(p, m, s, spm=spm, prefix_id=prefix_id, middle_id=middle_id, suffix_id=suffix_id, eos_id=eos_id)


def middle_only_mask(tokens: np.ndarray, middle_id: int) -> np.ndarray:
    """For one FIM example (optionally preceded by BOS): True at positions whose token is part
    of the middle or its closing EOS, i.e. after the `<|fim_middle|>` sentinel. A piece cropped
    before its sentinel has no middle: all False."""
    tokens = np.asarray(tokens)
    hits = np.flatnonzero(tokens == middle_id)
    mask = np.zeros(tokens.shape[0], dtype=bool)
    if hits.size:
        mask[hits[0] + 1:] = True
    return mask
