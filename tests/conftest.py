"""Shared fixtures. Area-specific fixtures live in the test module that needs them."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
pytest.register_assert_rewrite("night_fixtures")  # a plugin the test modules also import from
# test modules whose helpers other test modules import (tests/registry/test_adopt.py, test_lineage.py):
# importable whichever files a run collects, in whatever order
sys.path.insert(0, str(Path(__file__).resolve().parent / "registry"))


@pytest.fixture()
def workspace(tmp_path):
    from lib.workspace import Workspace

    return Workspace(tmp_path / "ws").ensure()


def site_packages() -> Path:
    """Where the installed packages are (not `sysconfig` purelib, which a venv that borrows another
    one's packages through a .pth file leaves empty)."""
    import pyarrow

    return Path(pyarrow.__file__).resolve().parents[1]


def stdlib_texts(limit: int = 200, min_chars: int = 200) -> list[str]:
    """Real text every machine has: the running interpreter's standard library, sorted paths."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text) >= min_chars:
            out.append(text)
        if len(out) >= limit:
            break
    return out


@pytest.fixture(scope="session")
def tiny_hf_model(tmp_path_factory) -> Path:
    """A random-initialised 4-layer Llama with a 1k BPE tokenizer trained on stdlib text, saved
    as a Hugging Face folder (safetensors). For plumbing tests of eval and serving: the numbers it
    produces are real forward passes, only the weights are untrained."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny_hf_model")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<|bos|>", "<|eos|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(stdlib_texts(100), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    return out


def settled_task_states(read, timeout: float = 60.0) -> dict[str, list[str]]:
    """Task-run state names by task name (`read()` fetches them), read again until none is still
    Pending or Running: task-run states reach the API through its event pipeline, after the flow
    run itself has returned, and under load that takes seconds. Bounded: after `timeout` the last
    read is returned as it is (the test's assertion then shows what was still running)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        states = read()
        if not any(name in ("Pending", "Running") for names in states.values() for name in names) or time.monotonic() > deadline:
            return states
        time.sleep(0.5)
