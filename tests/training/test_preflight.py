"""lib/training/preflight.py: the configuration checked against the model before any stage runs."""

from __future__ import annotations


import pytest

from lib.config import load_config
from lib.training.footprint import GiB
from lib.training.preflight import CHECKS, PreflightError, ensure_ready, memory_fits, preflight, read_target


def _champion(tmp_path, max_positions=256, tokenizer=True):
    """A champion folder with a real config.json of a tiny Llama (0.15 M parameters), no weights."""
    from transformers import LlamaConfig

    folder = tmp_path / "v0"
    folder.mkdir()
    LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=max_positions).save_pretrained(folder)
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    return folder


def test_the_tiny_preset_fits_a_tiny_champion(tmp_path):
    champion = _champion(tmp_path)
    assert preflight(load_config(preset="tiny"), champion) == []
    ensure_ready(load_config(preset="tiny"), champion)  # no exception


def test_full_size_defaults_against_a_tiny_champion_name_every_problem(tmp_path):
    cfg = load_config(overrides=["training.device_batch_size=24"])  # 2048-token rows, 524,288 tokens a step
    with pytest.raises(PreflightError) as err:
        ensure_ready(cfg, _champion(tmp_path, tokenizer=False))
    message = str(err.value)
    assert "training.seq_len=2048 exceeds max_position_embeddings=256" in message
    assert "set training.seq_len to at most 256" in message
    assert "no tokenizer.json in" in message and "tokenizer.path" in message
    assert "training.total_batch_size=524288 tokens is not a multiple of" in message and "24 × 2048 × 1 = 49152" in message


def test_processes_count_in_the_batch_and_pretraining_checks_cfg_model(tmp_path):
    cfg = load_config(preset="tiny", overrides=["training.nproc_per_node=3"])
    assert ["processes" in p and "8 × 256 × 3" in p for p in preflight(cfg, _champion(tmp_path))] == [True]
    cfg = load_config(preset="tiny", overrides=["model.max_position_embeddings=128"])
    [problem] = preflight(cfg)  # no model folder: the model cfg.model would build
    assert "max_position_embeddings=128 of model.max_position_embeddings" in problem


def test_a_champion_folder_without_config_json_is_refused(tmp_path):
    with pytest.raises(PreflightError, match="no config.json"):
        preflight(load_config(preset="tiny"), tmp_path)


def test_checks_are_a_list_a_new_one_extends(tmp_path):
    def always(cfg, target):
        return f"checked {target.model_dir.name}"

    assert preflight(load_config(preset="tiny"), _champion(tmp_path), checks=[*CHECKS, always]) == ["checked v0"]


def test_a_run_that_cannot_fit_the_machine_is_refused_with_the_knobs(tmp_path):
    """Billions of tokens per micro-batch on a 0.2 M-parameter champion: the logits alone exceed
    any machine's memory (CPU RAM or GPU); the message gives the numbers and what to turn."""
    cfg = load_config(preset="tiny", overrides=["training.device_batch_size=1048576", "training.total_batch_size=268435456"])
    [problem] = preflight(cfg, _champion(tmp_path))
    assert "training needs about" in problem and "268,435,456 tokens per micro-batch" in problem
    assert "logits + cross-entropy" in problem  # the table of components
    assert "lower training.device_batch_size (now 1048576" in problem
    assert "set training.activation_checkpointing=true" in problem and "lower training.seq_len (now 256)" in problem
    assert "training.memory_check=false" in problem
    off = cfg.model_copy(update={"training": cfg.training.model_copy(update={"memory_check": False})})
    assert preflight(off, tmp_path / "v0") == []  # training.memory_check=false: not checked


def test_memory_is_checked_against_the_device_and_its_ranks(tmp_path):
    cfg = load_config(preset="tiny")
    target = read_target(cfg, _champion(tmp_path))
    assert memory_fits(cfg, target, available=64 * GiB) is None
    problem = memory_fits(cfg, target, available=200 << 20)  # less than the process itself
    assert problem and "training needs about" in problem and "has 0.2 GiB" in problem
    # pre-training: the Llama cfg.model builds (the design's 12 x 768, the bootstrap's 4,096 tokens),
    # whose weights, gradients and AdamW alone exceed 1 GiB: only a larger device or sharding helps
    big = load_config()
    problem = memory_fits(big, read_target(big, None), available=GiB)
    assert "16 bytes per parameter" in problem and "lower training.device_batch_size" not in problem
    # trained through the GPU deployment: another machine, whose trainer checks its own device
    remote = big.model_copy(update={"orchestration": big.orchestration.model_copy(update={"train_deployment": "train/train"})})
    assert memory_fits(remote, read_target(remote, None), available=GiB) is None
