"""The trainer on real prepared data: v0 from scratch, a consolidation, metrics, exact resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from train_fixtures import ROOT, prepare, train_cmd, write_config  # noqa: E402

from lib.files import file_hash  # noqa: E402
from lib.checkpoints.checkpoint import MODEL_FILE, read_meta  # noqa: E402


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    paths = prepare(root)
    paths["config"] = write_config(root / "cfg.yaml")
    return paths


@pytest.fixture(scope="module")
def v0(prepared):
    """v0 pre-trained from scratch in this process (12 steps), optimizer state kept for inheritance."""
    from lib.config import load_config
    from lib.training.train import train

    cfg = load_config(prepared["config"], overrides=["training.optimizer_state=inherit"])
    out = prepared["root"] / "v0"
    result = train(cfg, prepared["data"], out, init=True, tokenizer_dir=prepared["tokenizer"],
                   train_dir=prepared["root"] / "v0-train", meta={"version": "v0"})
    assert result["status"] == "done"
    return out


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_v0_is_a_hf_version_with_meta_and_metrics(prepared, v0):
    from transformers import AutoModelForCausalLM

    meta = read_meta(v0)
    assert meta["version"] == "v0" and meta["parent_checkpoint"] is None
    assert meta["original_lr"] == 3e-3 and meta["training_kind"] == "pretrain"
    assert meta["digest"] == file_hash(v0 / MODEL_FILE)
    assert meta["manifest_hash"] and meta["tokenizer_hash"]
    assert meta["consolidation_config"]["model"]["hidden_size"] == 64
    assert meta["final_metrics"]["steps"] == 12 and meta["final_metrics"]["final_loss"] > 0
    assert (v0 / "tokenizer.json").is_file() and (v0 / "optimizer.pt").is_file()
    model = AutoModelForCausalLM.from_pretrained(v0)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.use_cache, "training switches the KV cache off; the saved version must not"
    lines = [json.loads(x) for x in (prepared["root"] / "v0-train" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(12))
    for r in lines:
        assert set(r["tokens_per_source"]) == {"stdlib", "new"}, "both sources feed every step"
        assert sum(r["tokens_per_source"].values()) > 0.9 * r["tokens"]
        assert r["lr"] > 0 and r["tokens_per_s"] > 0
    assert lines[-1]["loss"] < lines[0]["loss"], "12 steps at lr 3e-3 must lower the loss"
    # snapshots every 4 steps, 2 kept; the final step needs none (the version is the result)
    snaps = sorted(p.name for p in (prepared["root"] / "v0-train" / "snapshots").iterdir())
    assert snaps == ["step-00000004", "step-00000008"]


def test_consolidation_inherits_optimizer_and_scales_lr(prepared, v0, tmp_path):
    from lib.config import load_config
    from lib.training.train import train

    cfg = load_config(prepared["config"], overrides=["training.optimizer_state=inherit", "training.num_iterations=3"])
    out = tmp_path / "v1"
    train(cfg, prepared["data"], out, parent=v0, train_dir=tmp_path / "t")
    meta = read_meta(out)
    assert meta["parent_checkpoint"] == "v0" and meta["original_lr"] == 3e-3
    assert meta["peak_lr"] == pytest.approx(3e-3 * 0.3)
    assert meta["optimizer_state"] == "inherit" and meta["parent_digest"] == read_meta(v0)["digest"]
    assert "new" in meta["memory_buffer_stats"]
    lrs = [json.loads(x)["lr"] for x in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert max(lrs) == pytest.approx(3e-3 * 0.3), "inherited optimizer state must not bring back the parent's LR"


def test_inheriting_from_a_version_whose_optimizer_state_was_pruned_starts_fresh(prepared, v0, tmp_path):
    """checkpoints.keep_optimizer_states deletes optimizer.pt from old versions; consolidating
    from one with optimizer_state=inherit then starts AdamW fresh and says so in meta.json."""
    import shutil

    from lib.checkpoints.checkpoint import drop_optimizer_state
    from lib.config import load_config
    from lib.training.train import train

    parent = tmp_path / "v0"
    shutil.copytree(v0, parent)
    assert drop_optimizer_state(parent) > 0 and drop_optimizer_state(parent) == 0
    cfg = load_config(prepared["config"], overrides=["training.optimizer_state=inherit", "training.num_iterations=2"])
    train(cfg, prepared["data"], tmp_path / "v1", parent=parent, train_dir=tmp_path / "t")
    meta = read_meta(tmp_path / "v1")
    assert meta["optimizer_state"] == "fresh (parent has no optimizer.pt)"
    assert meta["parent_digest"] == read_meta(v0)["digest"]


def test_tokenizer_mismatch_and_bad_batch_are_refused(prepared, v0, tmp_path):
    from conftest import stdlib_texts
    from lib.config import load_config
    from lib.data.tokenizer import train_bpe
    from lib.training.setup import steps_accumulation
    from lib.training.train import train

    other = train_bpe(stdlib_texts(20), 300, tmp_path / "other-tok")
    cfg = load_config(prepared["config"])
    with pytest.raises(ValueError, match="tokenizer"):
        train(cfg, prepared["data"], tmp_path / "x", init=True, tokenizer_dir=other, train_dir=tmp_path / "t")
    with pytest.raises(ValueError, match="not a multiple of"):
        steps_accumulation(1000, 4, 64, 2)
    assert steps_accumulation(1024, 4, 64, 2) == 2
    with pytest.raises(FileExistsError, match="already exists"):
        train(cfg, prepared["data"], v0, parent=v0, train_dir=tmp_path / "t")


def _wait_for(path: Path, proc, timeout=120):
    t0 = time.time()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early with {proc.returncode}: {proc.stderr.read()}")
        if time.time() - t0 > timeout:
            raise AssertionError(f"{path} did not appear")
        time.sleep(0.05)


def _tensors(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / MODEL_FILE))


@pytest.mark.slow
def test_sigkill_then_resume_is_bit_identical_and_sigterm_snapshots(prepared, v0, tmp_path):
    cfg = write_config(tmp_path / "cfg.yaml", training={"num_iterations": 12, "snapshot_every": 4})
    # the uninterrupted reference
    ref = subprocess.run(train_cmd(cfg, prepared["data"], tmp_path / "ref", "--parent", str(v0), "--train-dir", str(tmp_path / "t-ref")),
                         cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr

    # killed with SIGKILL right after the first snapshot is complete, then resumed
    run = ["--parent", str(v0), "--train-dir", str(tmp_path / "t-kill")]
    proc = subprocess.Popen(train_cmd(cfg, prepared["data"], tmp_path / "kill", *run), cwd=ROOT, env=_env(),
                            stderr=subprocess.PIPE, text=True)
    _wait_for(tmp_path / "t-kill" / "snapshots" / "step-00000004" / "COMPLETE", proc)
    proc.kill()
    proc.wait()
    assert not (tmp_path / "kill").exists(), "the run was killed before it finished"
    metrics = (tmp_path / "t-kill" / "metrics.jsonl").read_text().splitlines()
    res = subprocess.run(train_cmd(cfg, prepared["data"], tmp_path / "kill", *run, "--resume"),
                         cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "resumed from" in res.stderr
    assert (tmp_path / "kill" / MODEL_FILE).read_bytes() == (tmp_path / "ref" / MODEL_FILE).read_bytes(), \
        "SIGKILL + resume must end bit-identical to the uninterrupted run"
    steps = [json.loads(x)["step"] for x in (tmp_path / "t-kill" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(12)), f"metrics after resume must hold each step once (had {len(metrics)} lines at the kill)"
    ref_loss = [json.loads(x)["loss"] for x in (tmp_path / "t-ref" / "metrics.jsonl").read_text().splitlines()]
    kill_loss = [json.loads(x)["loss"] for x in (tmp_path / "t-kill" / "metrics.jsonl").read_text().splitlines()]
    assert kill_loss == ref_loss

    # SIGTERM: snapshot at the current step, exit code 3, resume finishes identically
    run = ["--parent", str(v0), "--train-dir", str(tmp_path / "t-term")]
    proc = subprocess.Popen(train_cmd(cfg, prepared["data"], tmp_path / "term", *run), cwd=ROOT, env=_env(),
                            stderr=subprocess.PIPE, text=True)
    metrics_path = tmp_path / "t-term" / "metrics.jsonl"
    _wait_for(metrics_path, proc)
    while not metrics_path.read_text().strip():
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "stopped at step" in err
    snaps = list((tmp_path / "t-term" / "snapshots").glob("step-*/COMPLETE"))
    assert snaps, "SIGTERM must leave a complete snapshot"
    res = subprocess.run(train_cmd(cfg, prepared["data"], tmp_path / "term", *run, "--resume"),
                         cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "term" / MODEL_FILE).read_bytes() == (tmp_path / "ref" / MODEL_FILE).read_bytes()


def test_torchrun_command_lines():
    from lib.training.distributed import torchrun_command

    cmd = torchrun_command("c.yaml", "run", "out", parent="ckpt/v3", resume=True, nproc_per_node=2)
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    assert "--standalone" in cmd and cmd[cmd.index("-m", 3) + 1] == "lib.training.train"
    assert cmd[-3:] == ["--parent", "ckpt/v3", "--resume"]
    multi = torchrun_command("c.yaml", "run", "out", init=True, nnodes=2, node_rank=1, rdzv_endpoint="head:29500")
    assert "--standalone" not in multi and "--nnodes=2" in multi and "--rdzv-endpoint=head:29500" in multi
    assert "--init" in multi
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        torchrun_command("c.yaml", "run", "out", init=True, nnodes=2)
    with pytest.raises(ValueError, match="parent"):
        torchrun_command("c.yaml", "run", "out")


def _snapshot(folder, step, model, world_size=1):
    import torch

    from lib.training import snapshot as snap

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    snap.begin(folder, step)
    tmp = snap.tmp_dir(folder, step)
    for rank in range(world_size):
        snap.write_rank(tmp, rank, {"cursor": step})
    snap.write_shared(tmp, model, opt.state_dict(), {"step": step, "world_size": world_size, "history": {}})
    return snap.commit(folder, step, keep=10)


def test_partial_or_corrupt_snapshots_are_skipped_with_a_log_line(tmp_path, caplog):
    import logging

    from lib.training import snapshot as snap
    from lib.config import ModelConfig
    from lib.training.model import build_model

    model = build_model(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=16), 64)
    folder = tmp_path / "snaps"
    good = _snapshot(folder, 4, model)
    corrupt = _snapshot(folder, 8, model)
    partial = _snapshot(folder, 12, model)
    (partial / snap.MARKER).unlink()                      # killed before the marker was written
    raw = bytearray((corrupt / "model.safetensors").read_bytes())
    raw[-5] ^= 0x01                                       # one flipped bit in the weights
    (corrupt / "model.safetensors").write_bytes(bytes(raw))
    (folder / ".step-00000016.tmp").mkdir()               # killed mid-write
    with caplog.at_level(logging.WARNING, logger="lib.training.snapshot"):
        assert snap.latest_complete(folder) == good
    text = caplog.text
    assert "step-00000012" in text and "no completion marker" in text
    assert "step-00000008" in text and "sha256" in text
    state = snap.load(good, rank=0, world_size=1)
    assert state["step"] == 4 and state["loader"] == {"cursor": 4}
    # keep the last k complete snapshots, drop temporary folders
    for step in (20, 24):
        _snapshot(folder, step, model)
    snap.prune(folder, keep=2)
    assert sorted(p.name for p in folder.iterdir() if (p / snap.MARKER).exists()) == ["step-00000020", "step-00000024"]
    assert not (folder / ".step-00000016.tmp").exists()


def test_resume_with_another_world_size_is_refused(tmp_path):
    from lib.training import snapshot as snap
    from lib.config import ModelConfig
    from lib.training.model import build_model

    model = build_model(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=16), 64)
    path = _snapshot(tmp_path, 4, model, world_size=2)
    with pytest.raises(snap.SnapshotError, match="world size 2, this run has 1"):
        snap.load(path, rank=0, world_size=1)
    assert snap.load(path, rank=1, world_size=2)["step"] == 4


def test_rng_states_round_trip():
    import random

    import numpy as np
    import torch

    from lib.training import snapshot as snap

    plain, tensors = snap.rng_state()
    plain = json.loads(json.dumps(plain))  # it goes through JSON in the snapshot
    a = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    snap.set_rng_state(plain, tensors)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == a


def test_time_limit_stops_with_a_snapshot_and_resume_finishes(prepared, v0, tmp_path):
    from lib.config import load_config
    from lib.training.train import train

    cfg = load_config(prepared["config"], overrides=["training.num_iterations=5", "training.time_limit_s=0.001"])
    out, tdir = tmp_path / "v1", tmp_path / "t"
    first = train(cfg, prepared["data"], out, parent=v0, train_dir=tdir)
    assert first["status"] == "stopped" and first["step"] == 1 and not out.exists()
    assert (tdir / "snapshots" / "step-00000001" / "COMPLETE").is_file()
    cfg = load_config(prepared["config"], overrides=["training.num_iterations=5"])
    second = train(cfg, prepared["data"], out, parent=v0, train_dir=tdir, resume=True)
    assert second["status"] == "done" and second["step"] == 5
    assert read_meta(out)["final_metrics"]["steps"] == 5
    assert [json.loads(x)["step"] for x in (tdir / "metrics.jsonl").read_text().splitlines()] == list(range(5))


def test_cpu_threads_set_the_training_ranks_threads_and_leave_the_callers(prepared, v0, tmp_path):
    import torch

    from lib.config import load_config
    from lib.training.train import train

    before = torch.get_num_threads()
    cfg = load_config(prepared["config"], overrides=["training.num_iterations=2", "training.cpu_threads=1"])
    done = train(cfg, prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t")
    assert done["status"] == "done" and done["final_metrics"]["cpu_threads"] == 1
    assert torch.get_num_threads() == before   # an in-process caller keeps its own count


def test_build_model_is_seeded_and_leaves_the_global_rng_alone():
    import torch

    from lib.config import ModelConfig
    from lib.training.model import build_model, count_parameters, intermediate_size

    mc = ModelConfig(hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=64)
    assert intermediate_size(mc) == 192  # 8/3 × 64 = 170 → next multiple of 64
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(mc, 300, bos_id=0, eos_id=1, pad_id=2, seed=5)
    assert torch.equal(torch.rand(1), expected_next), "model init must not consume the caller's RNG"
    b = build_model(mc, 300, bos_id=0, eos_id=1, pad_id=2, seed=5)
    c = build_model(mc, 300, bos_id=0, eos_id=1, pad_id=2, seed=6)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    assert a.lm_head.weight is a.model.embed_tokens.weight, "embeddings are tied"
    assert a.config.bos_token_id == 0 and a.config.vocab_size == 300
    assert count_parameters(a) == sum(p.numel() for p in a.parameters())


def test_consolidation_from_a_delta_stored_parent(prepared, v0, tmp_path):
    import shutil

    from lib.checkpoints.checkpoint import compact, is_delta
    from lib.config import load_config
    from lib.training.train import train

    cfg = load_config(prepared["config"], overrides=["training.num_iterations=2"])
    v1 = train(cfg, prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t1", meta={"version": "v1"})["out"]
    parent_copy = shutil.copytree(v0, tmp_path / "v0")
    compact(v1, parent_copy)
    assert is_delta(v1)
    train(cfg, prepared["data"], tmp_path / "v2", parent=v1, train_dir=tmp_path / "t2", meta={"version": "v2"})
    meta = read_meta(tmp_path / "v2")
    assert meta["parent_checkpoint"] == "v1" and meta["parent_digest"] == read_meta(v1)["digest"]
    assert (tmp_path / "v2" / MODEL_FILE).is_file() and (tmp_path / "v2" / "tokenizer.json").is_file()


def test_a_bf16_parent_gives_a_bf16_child_trained_on_fp32_weights(prepared, v0, tmp_path):
    """checkpoints.dtype: v1 stored in bf16 on request; its child with the default "auto" stays
    bf16 (the parent's dtype), and training itself ran on fp32 weights (finite loss, moved)."""
    import torch
    from safetensors import safe_open

    from lib.config import load_config
    from lib.training.train import train

    cfg = load_config(prepared["config"], overrides=["training.num_iterations=2", "checkpoints.dtype=bfloat16"])
    v1 = train(cfg, prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t1", meta={"version": "v1"})["out"]
    auto = load_config(prepared["config"], overrides=["training.num_iterations=2"])
    assert auto.checkpoints.dtype == "auto"
    v2 = train(auto, prepared["data"], tmp_path / "v2", parent=v1, train_dir=tmp_path / "t2", meta={"version": "v2"})
    for v in (v1, v2["out"]):
        assert read_meta(v)["storage_dtype"] == "bfloat16"
        with safe_open(Path(v) / MODEL_FILE, "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert v2["final_metrics"]["final_loss"] == v2["final_metrics"]["final_loss"]  # not NaN
    assert read_meta(v0)["storage_dtype"] == "float32"  # a model pre-trained here stays fp32


def test_a_parent_without_original_lr_is_refused_with_what_it_is_and_how_to_set_it(prepared, v0, tmp_path):
    """No guess: a parent whose meta.json records no original_lr (a model registered by hand)
    stops the consolidation before any step, and the message says what the number is, typical
    values and the two ways to set it. Nothing is written."""
    import shutil

    from lib.config import load_config
    from lib.training.train import train

    parent = shutil.copytree(v0, tmp_path / "v0")
    meta = json.loads((parent / "meta.json").read_text())
    del meta["original_lr"]
    (parent / "meta.json").write_text(json.dumps(meta))
    cfg = load_config(prepared["config"], overrides=["training.num_iterations=2"])
    with pytest.raises(ValueError) as err:
        train(cfg, prepared["data"], tmp_path / "v1", parent=parent, train_dir=tmp_path / "t")
    text = str(err.value)
    assert f"{parent / 'meta.json'} records no original_lr" in text
    assert "peak learning rate the model was last trained with" in text and "lr_scale" in text
    assert "3e-4" in text and "1e-5 to 2e-5" in text and "7 B" in text
    assert "consolidate init" in text and "--original-lr" in text and '"original_lr"' in text
    assert not (tmp_path / "v1").exists() and not (tmp_path / "t" / "metrics.jsonl").exists()
    meta["original_lr"] = "fast"
    (parent / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="original_lr must be a positive number"):
        train(cfg, prepared["data"], tmp_path / "v1", parent=parent, train_dir=tmp_path / "t")
    # through the command line: exit code 2 and the message, no traceback
    del meta["original_lr"]
    (parent / "meta.json").write_text(json.dumps(meta))
    res = subprocess.run(train_cmd(prepared["config"], prepared["data"], tmp_path / "v1", "--parent", str(parent),
                                   "--train-dir", str(tmp_path / "t")), cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert res.returncode == 2 and "records no original_lr" in res.stderr and "Traceback" not in res.stderr


def test_a_run_that_cannot_fit_is_refused_before_training_with_the_numbers_and_the_knobs(prepared, v0, tmp_path):
    """The memory estimate comes before the model is loaded: a micro-batch of 2^20 sequences
    needs hundreds of GiB of activations, so the run stops with the estimate per component and
    what to turn (device_batch_size, activation_checkpointing, seq_len, sharding)."""
    from lib.config import load_config
    from lib.training.setup import InsufficientMemory
    from lib.training.train import train

    big = 1 << 20
    cfg = load_config(prepared["config"], overrides=[f"training.device_batch_size={big}", f"training.total_batch_size={big * 64}"])
    with pytest.raises(InsufficientMemory) as err:
        train(cfg, prepared["data"], tmp_path / "v1", parent=v0, train_dir=tmp_path / "t")
    text = str(err.value)
    assert "training needs about" in text and "GiB" in text and "available RAM" in text
    for part in ("weights (fp32)", "gradients (fp32)", "AdamW moments (fp32)", "activations", "logits + cross-entropy"):
        assert part in text, part
    assert f"training.device_batch_size (now {big}" in text and "activation_checkpointing=true" in text
    assert "training.seq_len (now 64)" in text and "16 bytes per parameter" in text
    assert not (tmp_path / "v1").exists() and not (tmp_path / "t" / "metrics.jsonl").exists()
    # the same check, skipped on request, still records the estimate of a run that fits
    ok = load_config(prepared["config"], overrides=["training.num_iterations=1"])
    train(ok, prepared["data"], tmp_path / "v2", parent=v0, train_dir=tmp_path / "t2")
    est = read_meta(tmp_path / "v2")["memory_estimate"]
    assert est["fits"] and est["total"] < est["available"] and est["parameters"] > 0


def test_activation_checkpointing_gives_the_same_loss_curve(prepared, v0, tmp_path):
    """training.activation_checkpointing recomputes each block in the backward pass: on CPU the
    loss curve and the trained weights equal the run without it (to fp tolerance), and meta.json
    records the setting."""
    import torch

    from lib.config import load_config
    from lib.training.train import train

    curves, weights = {}, {}
    for ac in (False, True):
        cfg = load_config(prepared["config"], overrides=["training.num_iterations=4", f"training.activation_checkpointing={ac}"])
        out = tmp_path / f"v-{ac}"
        train(cfg, prepared["data"], out, parent=v0, train_dir=tmp_path / f"t-{ac}", meta={"version": "v1"})
        curves[ac] = [json.loads(x)["loss"] for x in (tmp_path / f"t-{ac}" / "metrics.jsonl").read_text().splitlines()]
        weights[ac] = _tensors(out)
        assert read_meta(out)["activation_checkpointing"] is ac
    assert len(curves[True]) == 4 and curves[True] == pytest.approx(curves[False], rel=1e-5)
    assert curves[True][-1] != curves[True][0], "the weights moved"
    for name, w in weights[False].items():
        assert torch.allclose(weights[True][name], w, rtol=1e-4, atol=1e-6), name
