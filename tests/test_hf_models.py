"""The tiny-model fixture (tests/hf_models.py) builds folders with each family's real
conventions: these are what the adoption, tokenization and serving tests rely on."""

from __future__ import annotations

import json

import pytest
from hf_models import build_tiny_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_models")
    return {kind: build_tiny_model(kind, root / kind) for kind in ("llama", "qwen2", "gpt2")}


def load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def test_llama_has_a_bos_added_by_the_tokenizer_and_a_llama3_template(models):
    model, tok = load(models["llama"])
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tok.bos_token == "<|begin_of_text|>" and tok.pad_token is None
    assert tok.eos_token == "<|end_of_text|>"  # a turn ends with <|eot_id|>, which is not the EOS
    assert tok("x = 1")["input_ids"][0] == tok.bos_token_id
    assert "chat_template" in json.loads((models["llama"] / "tokenizer_config.json").read_text())
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    assert tok.convert_tokens_to_ids("<|eot_id|>") in model.generation_config.eos_token_id
    assert model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()


def test_qwen2_has_no_bos_chatml_and_ids_above_65535(models):
    model, tok = load(models["qwen2"])
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert tok.bos_token is None and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert (models["qwen2"] / "chat_template.jinja").is_file()
    assert len(tok) > 65_536 and model.config.vocab_size > len(tok)
    ids = tok("def add(a, b):\n    return a + b\n")["input_ids"]
    assert max(ids) > 65_535  # real text lands above uint16
    assert tok.decode(ids) == "def add(a, b):\n    return a + b\n"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_gpt2_has_only_endoftext_and_tied_embeddings(models):
    model, tok = load(models["gpt2"])
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert tok.bos_token == tok.eos_token == tok.unk_token == "<|endoftext|>"
    assert tok.pad_token is None and tok.chat_template is None
    assert tok.bos_token_id not in tok("x = 1")["input_ids"]  # add_bos_token false
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_bfloat16_on_disk_and_a_forward_pass(tmp_path):
    import torch
    from safetensors import safe_open

    folder = build_tiny_model("qwen2", tmp_path / "q", dtype="bfloat16")
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    model, tok = load(folder)
    ids = torch.tensor([tok("hello world")["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    base = build_tiny_model("qwen2", tmp_path / "base", chat_template=False)
    _, tok = load(base)
    assert tok.chat_template is None and tok.eos_token == "<|endoftext|>"
