"""Train the demo's BPE tokenizer, load a model's own tokenizer, and measure tokens in bytes.

- `train_bpe(texts, vocab_size, out_dir)`: byte-level BPE (Hugging Face `tokenizers`) with the
  special tokens `<|bos|>`, `<|eos|>`, `<|pad|>`, `<|fim_prefix|>`, `<|fim_middle|>`,
  `<|fim_suffix|>`; saved as a Hugging Face folder so `AutoTokenizer.from_pretrained` loads it
  with bos/eos/pad set.
- `train_on_corpus(folder, vocab_size, out_dir)`: that BPE on a corpus split's parquet shards
  (the `text` column): what the bootstrap task and `consolidate tokenizer train` both run.
- `resolve_tokenizer(cfg, workspace, given, model_dir)`: the one rule for which tokenizer a run
  uses: `given` (--tokenizer), else `tokenizer.path`, else the model's own folder (every version
  folder carries its tokenizer files, a delta-stored one too; default: the champion's), else
  the workspace's trained one.
- `load_tokenizer(folder)`: the fast `tokenizers.Tokenizer` behind a checkpoint's tokenizer.json,
  with the special ids read from tokenizer_config.json (or well-known names as a fallback). Any
  of BOS, EOS and PAD may be missing (Qwen2 has no BOS, GPT-2 only `<|endoftext|>`).
- The **document separator** (`document_separator`) is the one token every packed document and
  every eval window starts with: what the model saw between documents in pre-training.
  `auto` resolves, in order: BOS when the tokenizer adds it itself (`add_bos_token: true`, or a
  post-processor that puts it in front: Llama, Mistral, Gemma); `<|endoftext|>` when the
  vocabulary has it (GPT-2, Qwen2, Phi: documents separated by end-of-text, so the token in front
  of a document is the end of the one before it); a BOS the tokenizer does not explicitly refuse
  (`add_bos_token: false`) — the demo's own `<|bos|>`; else EOS. A chat token such as
  `<|im_start|>` named as BOS in tokenizer_config.json is therefore never taken for a separator.
- Text is encoded with special-token matching off: a captured conversation that literally
  contains "<|eos|>" becomes ordinary characters, never a control token (prompt injection into
  the training stream). The one exception is `markers=`: the chat template's own markers
  (`<|im_start|>`, `<|eot_id|>`) in new data, which capture writes around cleaned contents.
- `hash`: sha256 of the canonical vocabulary + merges + added tokens, not of the file bytes, so
  re-saving a tokenizer (transformers rewrites tokenizer.json with other whitespace) keeps its hash;
  token shards carry it, and the trainer refuses shards of a different tokenizer.
- `token_byte_lengths()`: UTF-8 bytes each token id stands for (special tokens 0), for
  bits-per-byte.

Trade-off: the byte-level alphabet costs 256 of the 4,096 demo ids (6%) but no text is ever
unencodable, so captured buffers need no character filtering.
"""

from __future__ import annotations

# transformers is imported inside functions: importing this module must not cost its ~2 s
import hashlib
import json
import re
from functools import cached_property
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from lib.files import write_json
from lib.registry.lineage import Lineage

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


ENDOFTEXT = "<|endoftext|>"
SEPARATOR_SETTINGS = ("auto", "bos", "eos")


class TokenizerError(ValueError):
    """A tokenizer folder that is missing, unreadable or lacks a needed special token."""


def train_bpe(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Path:
    """Train a byte-level BPE tokenizer on `texts` and save it as a Hugging Face folder."""
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
        write_json(special_map, {
            "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
            "additional_special_tokens": [FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX],
        }, indent=2, newline=True)
    return out


def corpus_shards(folder: str | Path) -> list[Path]:
    """The parquet shards of a corpus split, in name order."""
    return sorted(Path(folder).glob("*.parquet"))


def train_on_corpus(folder: str | Path, vocab_size: int, out_dir: str | Path) -> Path:
    """`train_bpe` on the `text` column of every parquet shard of the corpus split `folder`."""
    files = corpus_shards(folder)
    if not files:
        raise FileNotFoundError(f"no parquet shards in {folder}: build the corpus first (`consolidate corpus build-stdlib`)")

    def texts():
        for f in files:
            yield from (t for t in pq.read_table(f, columns=["text"]).column("text").to_pylist() if t)

    return train_bpe(texts(), vocab_size, out_dir)


def resolve_tokenizer(cfg, workspace, given: str | Path | None = None, model_dir: str | Path | None = None) -> Path:
    """The tokenizer folder a run uses: `given`, else `tokenizer.path`, else the model's own
    (`model_dir`; default the champion's), else `<workspace>/tokenizer` (`consolidate tokenizer train`)."""
    explicit = given or cfg.tokenizer.path
    if explicit is not None:
        if not (Path(explicit) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"tokenizer folder {explicit} has no tokenizer.json")
        return Path(explicit)
    if model_dir is None and workspace.lineage_db.exists():
        lin = Lineage(workspace.lineage_db)
        champion = lin.alias("champion")
        model_dir = lin.get_version(champion)["path"] if champion is not None else None
    for candidate in (model_dir, workspace.tokenizer):
        if candidate is not None and (Path(candidate) / "tokenizer.json").is_file():
            return Path(candidate)
    raise FileNotFoundError(f"no tokenizer: pass --tokenizer, set tokenizer.path, promote a champion, or run "
                            f"`consolidate tokenizer train` (writes {workspace.tokenizer})")


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
        config: dict = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the config wins
            extra = self.folder / name
            if extra.is_file():
                try:
                    config.update(json.loads(extra.read_text(encoding="utf-8")))
                except json.JSONDecodeError as exc:
                    raise TokenizerError(f"{extra} is not valid JSON: {exc}") from exc
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.bos_id = self._find(config, "bos_token", _BOS_NAMES, vocab)
        self.eos_id = self._find(config, "eos_token", _EOS_NAMES, vocab)
        self.pad_id = self._find(config, "pad_token", _PAD_NAMES, vocab)
        self.fim_prefix_id = self._find(config, None, _FIM_NAMES["prefix"], vocab)
        self.fim_middle_id = self._find(config, None, _FIM_NAMES["middle"], vocab)
        self.fim_suffix_id = self._find(config, None, _FIM_NAMES["suffix"], vocab)
        self.vocab_size = max(vocab.values()) + 1
        self.hash = _canonical_hash(self._spec)
        self._vocab = vocab
        # add_bos_token as the model was trained: explicit in tokenizer_config.json, else whatever
        # the post-processor does to a plain encode (Llama 3's TemplateProcessing adds BOS)
        flag = config.get("add_bos_token")
        if isinstance(flag, bool):
            self.add_bos = flag and self.bos_id is not None
        else:
            probe = self._tok.encode("a", add_special_tokens=True).ids
            self.add_bos = self.bos_id is not None and bool(probe) and probe[0] == self.bos_id
        self._bos_refused = flag is False
        self.chat_template = config.get("chat_template") or _template_file(self.folder)

    def separator(self, setting: str = "auto") -> tuple[int, str]:
        """(id, token) of the document separator for `setting`: auto | bos | eos | a token string
        of the vocabulary (see the module docstring for what auto picks)."""
        if setting == "bos" or setting == "eos":
            tid = self.bos_id if setting == "bos" else self.eos_id
            if tid is None:
                raise TokenizerError(f"tokenizer.document_separator={setting}: the tokenizer in {self.folder} has no "
                                     f"{setting.upper()} token; use auto, the other one, or a token string such as {ENDOFTEXT!r}")
            return tid, self.id_to_token(tid)
        if setting != "auto":
            if setting not in self._vocab:
                raise TokenizerError(f"tokenizer.document_separator={setting!r} is not a token of the tokenizer in {self.folder}; "
                                     f"use auto, bos, eos or one of its special tokens")
            return self._vocab[setting], setting
        recorded = self.recorded_separator()
        if recorded is not None:
            return recorded
        if self.add_bos:
            return self.bos_id, self.id_to_token(self.bos_id)
        if ENDOFTEXT in self._vocab:
            return self._vocab[ENDOFTEXT], ENDOFTEXT
        if self.bos_id is not None and not self._bos_refused:
            return self.bos_id, self.id_to_token(self.bos_id)
        if self.eos_id is not None:
            return self.eos_id, self.id_to_token(self.eos_id)
        raise TokenizerError(f"{self.folder}: no BOS, EOS or {ENDOFTEXT} token to separate documents with; "
                             f"set tokenizer.document_separator to a special token of this tokenizer")

    def recorded_separator(self) -> tuple[int, str] | None:
        """The separator a version folder's meta.json records (`document_separator`, written at
        adoption and by every training), so auto never changes a lineage's convention."""
        for folder in (self.folder, self.folder.parent):  # a delta-stored version's .full/ folder
            meta = folder / "meta.json"
            if meta.is_file():
                try:
                    token = json.loads(meta.read_text(encoding="utf-8")).get("document_separator")
                except json.JSONDecodeError:
                    return None
                if token is None:
                    return None
                if token not in self._vocab:
                    raise TokenizerError(f"{meta} records document_separator {token!r}, which is not a token of {self.folder}")
                return self._vocab[token], token
            if folder.name != ".full":
                break
        return None

    def id_to_token(self, token_id: int) -> str:
        return self._tok.id_to_token(int(token_id))

    def token_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    @staticmethod
    def _find(config: dict, key: str | None, names: list[str], vocab: dict[str, int]) -> int | None:
        """The token `config[key]` names; None when the config sets it to null on purpose (Qwen2's
        bos_token); well-known names only when the config does not mention it at all."""
        if key is not None and key in config:
            name = _token_name(config[key])
            return vocab.get(name) if name is not None else None
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

    def encode_batch(self, texts: list[str], markers: list[str] | None = None) -> list[list[int]]:
        """Token ids of each text, special tokens read as text, except `markers` (special tokens
        of this tokenizer, e.g. the chat template's) which become their control ids."""
        texts = list(texts)
        if not markers:
            return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

        ids_of = {m: self._vocab[m] for m in markers if m in self._vocab}
        if not ids_of:
            return self.encode_batch(texts)
        pattern = re.compile("(" + "|".join(re.escape(m) for m in sorted(ids_of, key=len, reverse=True)) + ")")
        out: list[list[int] | None] = [None] * len(texts)
        plain = [i for i, t in enumerate(texts) if not pattern.search(t)]
        for i, ids in zip(plain, self.encode_batch([texts[i] for i in plain])):
            out[i] = ids
        for i, text in enumerate(texts):
            if out[i] is not None:
                continue
            parts = pattern.split(text)  # odd positions are markers
            pieces = self.encode_batch([p for k, p in enumerate(parts) if k % 2 == 0])
            ids: list[int] = []
            for k, part in enumerate(parts):
                ids += pieces[k // 2] if k % 2 == 0 else [ids_of[part]]
            out[i] = ids
        return out  # type: ignore[return-value]

    def encode_batch_raw(self, texts: list[str]):
        """The `tokenizers.Encoding` objects (ids and character offsets), for FIM piece cuts."""
        return self._tok.encode_batch(list(texts), add_special_tokens=False)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    @cached_property
    def _byte_lengths(self) -> np.ndarray:
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


def _template_file(folder: Path) -> str | None:
    path = folder / "chat_template.jinja"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def load_tokenizer(folder: str | Path) -> LoadedTokenizer:
    """Load the tokenizer in `folder` (a trained demo tokenizer or a checkpoint's own)."""
    return LoadedTokenizer(folder)
