"""Train the demo's BPE tokenizer, load a model's own tokenizer, and measure tokens in bytes.

- `train_bpe(texts, vocab_size, out_dir)`: byte-level BPE (Hugging Face `tokenizers`) with the
  special tokens `<|bos|>`, `<|eos|>`, `<|pad|>`, `<|fim_prefix|>`, `<|fim_middle|>`,
  `<|fim_suffix|>`; saved as a Hugging Face folder so `AutoTokenizer.from_pretrained` loads it
  with bos/eos/pad set.
- `load_tokenizer(folder)`: the fast `tokenizers.Tokenizer` behind a checkpoint's tokenizer.json,
  with the special ids read from tokenizer_config.json (or well-known names as a fallback).
- Text is encoded with special-token matching off: a captured conversation that literally
  contains "<|eos|>" becomes ordinary characters, never a control token (prompt injection into
  the training stream).
- `hash`: sha256 of the canonical vocabulary + merges + added tokens, not of the file bytes, so
  re-saving a tokenizer (transformers rewrites tokenizer.json with other whitespace) keeps its hash;
  token shards carry it, and the trainer refuses shards of a different tokenizer.
- `token_byte_lengths()`: UTF-8 bytes each token id stands for (special tokens 0), for
  bits-per-byte.

Trade-off: the byte-level alphabet costs 256 of the 4,096 demo ids (6%) but no text is ever
unencodable, so captured buffers need no character filtering.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Iterable

import numpy as np

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX]

# Names other model families use, tried when tokenizer_config.json does not name the token.
_BOS_NAMES = [BOS, "<s>", "<|begin_of_text|>", "<|endoftext|>", "<bos>"]
_EOS_NAMES = [EOS, "</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"]
_PAD_NAMES = [PAD, "<pad>", "<|finetune_right_pad_id|>"]
_FIM_NAMES = {
    "prefix": [FIM_PREFIX, "<fim_prefix>", "<|fim▁begin|>"],
    "middle": [FIM_MIDDLE, "<fim_middle>", "<|fim▁end|>"],
    "suffix": [FIM_SUFFIX, "<fim_suffix>", "<|fim▁hole|>"],
}


class TokenizerError(ValueError):
    """A tokenizer folder that is missing, unreadable or lacks a needed special token."""


def train_bpe(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Path:
    """Train a byte-level BPE tokenizer on `texts` and save it as a Hugging Face folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise TokenizerError(f"tokenizer.vocab_size {vocab_size} is too small: byte-level BPE needs at least {256 + len(SPECIAL_TOKENS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,  # ids 0..5, in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    seen = 0

    def counted():
        nonlocal seen
        for text in texts:
            seen += 1
            yield text

    tok.train_from_iterator(counted(), trainer=trainer)
    if seen == 0:
        raise TokenizerError("train_bpe got no texts to train on")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX],
    )
    fast.save_pretrained(out)
    # transformers 5 folds special tokens into tokenizer_config.json; the contract also promises the
    # classic special_tokens_map.json that older loaders and other tools read.
    special_map = out / "special_tokens_map.json"
    if not special_map.exists():
        special_map.write_text(json.dumps({
            "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
            "additional_special_tokens": [FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX],
        }, indent=2) + "\n", encoding="utf-8")
    return out


def _canonical_hash(spec: dict) -> str:
    """Hash what decides token ids: the model's vocab and merges and the added tokens. Other
    fields (dropout, flags a newer `tokenizers` adds on save) are left out so a re-saved copy of
    the same tokenizer keeps its hash."""
    raw = spec.get("model") or {}
    model = {"type": raw.get("type"), "vocab": raw.get("vocab")}
    merges = raw.get("merges")
    if isinstance(merges, list):
        model["merges"] = [" ".join(m) if isinstance(m, list) else m for m in merges]
    added = sorted((t["id"], t["content"]) for t in spec.get("added_tokens") or [])
    blob = json.dumps({"model": model, "added": added}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _token_name(value) -> str | None:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older configs
        return value.get("content")
    return value if isinstance(value, str) else None


class LoadedTokenizer:
    """A model's tokenizer: fast batch encoding plus the ids and byte lengths training needs."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        path = self.folder / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"{path} does not exist: a tokenizer folder needs tokenizer.json (train one with `consolidate tokenizer train`)")
        try:
            raw = path.read_text(encoding="utf-8")
            self._spec = json.loads(raw)
            self._tok = Tokenizer.from_str(raw)
        except Exception as exc:  # tokenizers raises plain Exception on bad JSON
            raise TokenizerError(f"{path} is not a valid tokenizer.json: {exc}") from exc
        self._tok.encode_special_tokens = True  # literal "<|eos|>" in text stays text
        self._tok.no_truncation()
        self._tok.no_padding()
        config = {}
        cfg_path = self.folder / "tokenizer_config.json"
        if cfg_path.is_file():
            config = json.loads(cfg_path.read_text(encoding="utf-8"))
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.bos_id = self._find(config.get("bos_token"), _BOS_NAMES, vocab)
        self.eos_id = self._find(config.get("eos_token"), _EOS_NAMES, vocab)
        self.pad_id = self._find(config.get("pad_token"), _PAD_NAMES, vocab)
        self.fim_prefix_id = self._find(None, _FIM_NAMES["prefix"], vocab)
        self.fim_middle_id = self._find(None, _FIM_NAMES["middle"], vocab)
        self.fim_suffix_id = self._find(None, _FIM_NAMES["suffix"], vocab)
        if self.bos_id is None:
            raise TokenizerError(f"{self.folder}: no BOS token (tokenizer_config.json bos_token, or one of {_BOS_NAMES}); packing needs one to start every row")
        self.vocab_size = max(vocab.values()) + 1
        self.hash = _canonical_hash(self._spec)

    @staticmethod
    def _find(configured, names: list[str], vocab: dict[str, int]) -> int | None:
        name = _token_name(configured)
        if name is not None and name in vocab:
            return vocab[name]
        for candidate in names:
            if candidate in vocab:
                return vocab[candidate]
        return None

    @property
    def has_fim(self) -> bool:
        return None not in (self.fim_prefix_id, self.fim_middle_id, self.fim_suffix_id)

    @property
    def special_ids(self) -> list[int]:
        added = self._spec.get("added_tokens") or []
        return sorted(t["id"] for t in added if t.get("special"))

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_batch_raw(self, texts: list[str]):
        """The `tokenizers.Encoding` objects (ids and character offsets), for FIM piece cuts."""
        return self._tok.encode_batch(list(texts), add_special_tokens=False)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    @cached_property
    def _byte_lengths(self) -> np.ndarray:
        from tokenizers import pre_tokenizers

        lengths = np.zeros(self.vocab_size, dtype=np.int32)
        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        special = set(self.special_ids)
        for token, idx in self._tok.get_vocab(with_added_tokens=True).items():
            if idx in special:
                continue  # control tokens stand for no text
            if all(ch in alphabet for ch in token):
                lengths[idx] = len(token)  # byte-level: one printable char per byte
            elif token.startswith("<0x") and token.endswith(">") and len(token) == 6:
                lengths[idx] = 1  # sentencepiece byte fallback
            else:
                lengths[idx] = len(token.replace("\u2581", " ").encode("utf-8"))
        return lengths

    def token_byte_lengths(self) -> np.ndarray:
        """int32 array [vocab_size]: UTF-8 bytes of text each id decodes to; special tokens 0."""
        return self._byte_lengths.copy()


def load_tokenizer(folder: str | Path) -> LoadedTokenizer:
    """Load the tokenizer in `folder` (a trained demo tokenizer or a checkpoint's own)."""
    return LoadedTokenizer(folder)
