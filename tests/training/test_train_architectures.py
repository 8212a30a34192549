"""Bring-your-own-model storage and training on three architectures, bf16 on disk.

Tiny random Hugging Face models are built here with `save_pretrained` (a minimal builder; the
shared one in tests/hf_models.py may replace it): Llama (untied, grouped-query attention),
Qwen2 (biases on q/k/v) and GPT-2 (tied embeddings, Conv1D layers). Each one is consolidated by
the real trainer from its bf16 folder, and the test checks what a user relies on: the new version
loads with `from_pretrained`, stays bf16, keeps its fp32 master weights, reports how much of the
update survived storage, compacts to a delta that restores bit-exactly against the bf16 parent,
the next night starts from the master weights, and an interrupted run resumes to the same bytes.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from train_fixtures import prepare, write_config  # noqa: E402

from lib.files import file_hash  # noqa: E402
from lib.checkpoints.checkpoint import (  # noqa: E402
    MATERIALIZED, MODEL_FILE, copy_tokenizer_files, is_delta, materialize, read_meta, store_version,
)

KINDS = ("llama", "qwen2", "gpt2")


def build_tiny_model(kind: str, out_dir: Path, tokenizer_dir: Path, *, dtype=torch.bfloat16, seed: int = 0,
                     original_lr: float | None = 3e-4) -> Path:
    """A random `kind` causal LM saved as a Hugging Face folder in `dtype`, with the tokenizer's
    files and, unless original_lr is None, a meta.json recording it (as `consolidate init` does)."""
    from transformers import AutoModelForCausalLM, GemmaConfig, GPT2Config, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config

    from lib.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    ids = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id}
    if kind == "llama":
        cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          tie_word_embeddings=False, **ids)
    elif kind == "qwen2":
        cfg = Qwen2Config(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          tie_word_embeddings=False, **ids)
    elif kind == "gpt2":
        cfg = GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=128, **ids)
    elif kind == "mistral":  # sliding-window attention
        cfg = MistralConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, sliding_window=64, **ids)
    elif kind == "gemma":  # tied, embeddings scaled by sqrt(hidden), GeGLU, head_dim apart from hidden/heads
        cfg = GemmaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=128, **ids)
    elif kind == "phi3":  # fused qkv and gate_up projections
        cfg = Phi3Config(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, **ids)
    else:
        raise ValueError(kind)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg)
    model.to(dtype).save_pretrained(out_dir)
    copy_tokenizer_files(tokenizer_dir, out_dir)
    if original_lr is not None:
        (out_dir / "meta.json").write_text(json.dumps({"version": out_dir.name, "original_lr": original_lr}))
    return out_dir


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    paths = prepare(root, token_budget=20_000)
    paths["config"] = write_config(root / "cfg.yaml", training={"lr_scale": 1.0})
    return paths


def _cfg(prepared, *extra):
    from lib.config import load_config

    return load_config(prepared["config"], overrides=["training.num_iterations=3", *extra])


def _state(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / MODEL_FILE))


@pytest.mark.parametrize("kind", KINDS)
def test_a_bf16_model_is_consolidated_stored_as_an_exact_delta_and_continued_from_its_master(prepared, tmp_path, kind):
    from transformers import AutoModelForCausalLM

    from lib.training.train import train

    v0 = build_tiny_model(kind, tmp_path / "v0", prepared["tokenizer"])
    v1 = Path(train(_cfg(prepared), prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t1",
                    meta={"version": "v1"})["out"])
    meta = read_meta(v1)
    assert meta["storage_dtype"] == "bfloat16" and meta["storage_rounding"] == "stochastic"
    assert meta["started_from"] == "stored weights (bfloat16)" and meta["original_lr"] == 3e-4
    kept = meta["update_kept"]
    assert kept["master_weights_kept"] and "tensors_not_compared" not in kept, kept
    assert 0.7 < kept["update_kept"] < 1.3 and 0 < kept["weights_changed"] < 1, kept  # stochastic rounding: ~1 on average
    served = AutoModelForCausalLM.from_pretrained(v1, dtype="auto")
    assert next(served.parameters()).dtype == torch.bfloat16
    master = AutoModelForCausalLM.from_pretrained(v1 / "master")
    assert next(master.parameters()).dtype == torch.float32
    assert type(served).__name__ == type(master).__name__ == {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                                                                 "gpt2": "GPT2LMHeadModel"}[kind]
    if kind == "gpt2":  # tied: one tensor on disk, shared after loading
        assert "lm_head.weight" not in _state(v1) and served.lm_head.weight is served.transformer.wte.weight
    if kind == "qwen2":
        assert "model.layers.0.self_attn.q_proj.bias" in _state(v1)
    # master - stored is within one bf16 step of every weight
    for name, w in master.state_dict().items():
        s = served.state_dict()[name].float()
        step = (w.abs() * 2.0 ** -7).clamp_min(1e-30)
        assert bool(((s - w).abs() <= step * 1.0001).all()), name

    # delta against the bf16 parent, bit-exact; the master against its own export, bit-exact
    served_bytes, master_bytes = (v1 / MODEL_FILE).read_bytes(), (v1 / "master" / MODEL_FILE).read_bytes()
    out = store_version(v1, v0)
    assert out["stored"] == "delta" and out["tensors_matched"] == out["tensors"] and out["ratio"] < 0.9, out
    assert out["master"]["stored"] == "delta" and is_delta(v1 / "master")
    shutil.rmtree(v1 / MATERIALIZED, ignore_errors=True)
    assert (materialize(v1) / MODEL_FILE).read_bytes() == served_bytes
    assert file_hash(materialize(v1) / MODEL_FILE) == meta["digest"]
    assert (materialize(v1 / "master") / MODEL_FILE).read_bytes() == master_bytes
    AutoModelForCausalLM.from_pretrained(materialize(v1))

    # the next night starts from the fp32 master weights (delta-stored), not from the rounded ones
    v2 = Path(train(_cfg(prepared, "training.num_iterations=2"), prepared["data"], tmp_path / "v2", parent=v1,
                    train_dir=tmp_path / "t2", meta={"version": "v2"})["out"])
    meta2 = read_meta(v2)
    assert meta2["started_from"] == "fp32 master weights (master/)" and meta2["parent_digest"] == meta["digest"]
    assert meta2["original_lr"] == 3e-4 and meta2["update_kept"]["update_kept"] is not None


@pytest.mark.parametrize("kind, cls", [("mistral", "MistralForCausalLM"), ("gemma", "GemmaForCausalLM"),
                                        ("phi3", "Phi3ForCausalLM")])
def test_more_families_train_from_bf16_and_load_as_themselves(prepared, tmp_path, kind, cls):
    """Any causal LM `from_pretrained` loads, not the three above only: a night on each keeps the
    family, the dtype and the tied weights, and moves the loss."""
    from transformers import AutoModelForCausalLM

    from lib.training.train import train

    v0 = build_tiny_model(kind, tmp_path / "v0", prepared["tokenizer"])
    out = train(_cfg(prepared), prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t1", meta={"version": "v1"})
    v1 = Path(out["out"])
    meta = read_meta(v1)
    assert meta["storage_dtype"] == "bfloat16" and meta["update_kept"]["weights_changed"] > 0
    served = AutoModelForCausalLM.from_pretrained(v1, dtype="auto")
    assert type(served).__name__ == cls and next(served.parameters()).dtype == torch.bfloat16
    before = AutoModelForCausalLM.from_pretrained(v0, dtype="auto").state_dict()
    assert any(not torch.equal(before[k], w) for k, w in served.state_dict().items())
    if kind == "gemma":
        assert served.lm_head.weight is served.model.embed_tokens.weight
    store_version(v1, v0)  # a delta against the bf16 parent restores exactly
    shutil.rmtree(v1 / MATERIALIZED, ignore_errors=True)
    assert file_hash(materialize(v1) / MODEL_FILE) == meta["digest"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_night_resumes_to_the_same_bytes(prepared, tmp_path, kind):
    """Snapshot and resume on each architecture (tied GPT-2 embeddings, Qwen2 biases): stopped
    after its first step and resumed, the run writes the same bf16 weights (same stochastic
    rounding draws) and the same master weights as a run that was not interrupted."""
    from lib.training.train import train

    v0 = build_tiny_model(kind, tmp_path / "v0", prepared["tokenizer"], seed=1)
    ref = train(_cfg(prepared), prepared["data"], tmp_path / "ref", parent=v0, train_dir=tmp_path / "t-ref", meta={"version": "v1"})
    stopped = train(_cfg(prepared, "training.time_limit_s=0.0001"), prepared["data"], tmp_path / "v1", parent=v0,
                    train_dir=tmp_path / "t", meta={"version": "v1"})
    assert stopped["status"] == "stopped" and stopped["step"] == 1
    done = train(_cfg(prepared), prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t", resume=True,
                 meta={"version": "v1"})
    assert done["status"] == "done" and done["final_metrics"]["steps"] == 3
    for rel in (MODEL_FILE, f"master/{MODEL_FILE}"):
        assert (tmp_path / "v1" / rel).read_bytes() == (Path(ref["out"]) / rel).read_bytes(), rel
