"""lib/preflight.py: the configuration checked against the model before any stage runs."""

from __future__ import annotations

import json

import pytest

from lib.config import load_config
from lib.preflight import CHECKS, PreflightError, ensure_ready, preflight


def _champion(tmp_path, max_positions=256, tokenizer=True):
    folder = tmp_path / "v0"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": max_positions}))
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
