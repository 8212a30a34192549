"""Tiny random Hugging Face causal LMs of three real families, built locally for tests.

`build_tiny_model(kind, out_dir)` writes a folder that `AutoModelForCausalLM.from_pretrained`
and `AutoTokenizer.from_pretrained` load like the family's published checkpoints, with the
special-token conventions that differ between families (what the pipeline must not assume away):

    kind     model              BOS                  EOS              pad              chat template          vocab
    llama    LlamaForCausalLM   <|begin_of_text|>,   <|end_of_text|>  none             Llama-3 style, in      ~1k
                                added by the                          (Llama-3 has     tokenizer_config.json;
                                post-processor                        none)            turns end <|eot_id|>
    qwen2    Qwen2ForCausalLM   none (bos_token      <|im_end|>       <|endoftext|>    ChatML, in             > 65,536
                                null)                (instruct)                        chat_template.jinja    (ids used > 65,535)
    gpt2     GPT2LMHeadModel    <|endoftext|> (bos = eos = unk,       none             none                   ~1k
                                add_bos_token false)                                                          (tied embeddings)

- The tokenizer is a byte-level BPE (1,024 entries) trained with `tokenizers` on the running
  Python's standard library (once per process, ~0.6 s), then the family's special tokens are
  added after the BPE vocabulary, at the end of the id range as in the real checkpoints.
- qwen2: between the 256 byte tokens and the learnt merges lie unreachable filler entries, so
  every merged token (most of the ids real text produces) sits above 65,535 and the vocabulary
  holds > 65,536 ids, like Qwen2's 151k: a uint16 token file would corrupt them. config.json's
  `vocab_size` is rounded up past the tokenizer (151,936 vs 151,665 in Qwen2), and its
  `bos_token_id` is `<|endoftext|>` while the tokenizer has no BOS, as in Qwen2.5-Instruct.
- `chat_template=False` builds the base (non-instruct) variant of llama / qwen2: no template,
  EOS `<|end_of_text|>` / `<|endoftext|>`.
- Weights are random (seeded): forward passes are real, text is gibberish. `dtype="bfloat16"`
  stores bf16 safetensors as most published checkpoints do.

Each build takes < 1 s on the 2-core machine once torch and transformers are imported (the first
build of a process pays ~3 s of lazy imports and the BPE training).
"""

from __future__ import annotations

import functools
import json
import sysconfig
from pathlib import Path

KINDS = ("llama", "qwen2", "gpt2")

# Llama-3 style: BOS opens the conversation, each turn is a header and ends with <|eot_id|>.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# ChatML as Qwen2-Instruct writes it, default system prompt included.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA3_SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GPT2_SPECIALS = ["<|endoftext|>"]

BPE_SIZE = 1024
QWEN2_FILLERS = 65_536  # unreachable entries between the byte tokens and the merges


@functools.lru_cache(maxsize=1)
def _trained_bpe() -> str:
    """tokenizer.json text of a 1,024-entry byte-level BPE trained on stdlib sources (no specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.glob("*.py"))[:60]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok.to_str()


def _tokenizer(specials: list[str], *, fillers: int = 0, bos: str | None = None):
    """The trained BPE with `fillers` dead ids after the 256 byte tokens, `specials` appended
    after the vocabulary, and a post-processor that prepends `bos` when given."""
    from tokenizers import AddedToken, Tokenizer, processors

    spec = json.loads(_trained_bpe())
    if fillers:
        vocab = spec["model"]["vocab"]
        shifted = {token: (i if i < 256 else i + fillers) for token, i in vocab.items()}
        shifted.update({f"<unused{k}>": 256 + k for k in range(fillers)})
        spec["model"]["vocab"] = shifted
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if bos is not None:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _added_tokens_decoder(tok, specials: list[str]) -> dict[str, dict]:
    return {
        str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        for s in specials
    }


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def build_tiny_model(kind: str, out_dir: Path, *, dtype: str = "float32", chat_template: bool = True, seed: int = 0) -> Path:
    """Write a tiny random `kind` model (llama | qwen2 | gpt2) into `out_dir`; returns `out_dir`.

    `chat_template` applies to llama and qwen2 (instruct vs base variant); gpt2 has none."""
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    generation: dict = {}
    template_file: str | None = None

    if kind == "llama":
        tok = _tokenizer(LLAMA3_SPECIALS, bos="<|begin_of_text|>")
        ids = {s: tok.token_to_id(s) for s in LLAMA3_SPECIALS}
        tok_cfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|end_of_text|>",
            "add_bos_token": True,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": True,
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 131072,
        }
        # as Llama-3-Instruct first shipped: the tokenizer's EOS is <|end_of_text|> while a turn
        # ends with <|eot_id|>, which only generation_config.json lists among the ends
        eos_ids = [ids["<|end_of_text|>"], ids["<|eot_id|>"]] if chat_template else ids["<|end_of_text|>"]
        if chat_template:
            tok_cfg["chat_template"] = LLAMA3_TEMPLATE  # older checkpoints keep it in tokenizer_config.json
        config = LlamaConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rope_theta=500000.0,
            bos_token_id=ids["<|begin_of_text|>"], eos_token_id=ids["<|end_of_text|>"], tie_word_embeddings=False,
        )
        model_cls = LlamaForCausalLM
        generation = {"bos_token_id": ids["<|begin_of_text|>"], "eos_token_id": eos_ids}
        specials = LLAMA3_SPECIALS
    elif kind == "qwen2":
        tok = _tokenizer(QWEN2_SPECIALS, fillers=QWEN2_FILLERS)
        ids = {s: tok.token_to_id(s) for s in QWEN2_SPECIALS}
        eos = "<|im_end|>" if chat_template else "<|endoftext|>"
        tok_cfg = {
            "tokenizer_class": "Qwen2Tokenizer",
            "bos_token": None,
            "eos_token": eos,
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "add_prefix_space": False,
            "errors": "replace",
            "split_special_tokens": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 32768,
        }
        config = Qwen2Config(
            vocab_size=_round_up(tok.get_vocab_size(), 128), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids[eos], tie_word_embeddings=True,
        )
        model_cls = Qwen2ForCausalLM
        generation = {
            "bos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]] if chat_template else ids["<|endoftext|>"],
        }
        template_file = CHATML_TEMPLATE if chat_template else None  # newer checkpoints: chat_template.jinja
        specials = QWEN2_SPECIALS
    else:
        tok = _tokenizer(GPT2_SPECIALS)
        eot = tok.token_to_id("<|endoftext|>")
        tok_cfg = {
            "tokenizer_class": "GPT2Tokenizer",
            "bos_token": "<|endoftext|>",
            "eos_token": "<|endoftext|>",
            "unk_token": "<|endoftext|>",
            "add_bos_token": False,
            "add_prefix_space": False,
            "errors": "replace",
            "model_max_length": 1024,
        }
        config = GPT2Config(
            vocab_size=tok.get_vocab_size(), n_positions=512, n_embd=64, n_layer=2, n_head=4,
            bos_token_id=eot, eos_token_id=eot, tie_word_embeddings=True,
        )
        model_cls = GPT2LMHeadModel
        generation = {"bos_token_id": eot, "eos_token_id": eot}
        specials = GPT2_SPECIALS

    tok_cfg["added_tokens_decoder"] = _added_tokens_decoder(tok, specials)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n", encoding="utf-8")
    if template_file is not None:
        (out / "chat_template.jinja").write_text(template_file, encoding="utf-8")

    torch.manual_seed(seed)
    model = model_cls(config)
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(**generation)
    model.save_pretrained(out, safe_serialization=True)
    return out
