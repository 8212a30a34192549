"""training.parallelism=fsdp with real torchrun processes on CPU (gloo): the same loss curve as DDP
and as one process with twice the accumulation, SIGKILL + resume bit-identical, the gathered
version an ordinary Hugging Face folder equal to the sharded weights, two 'nodes' on loopback."""

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

from lib.checkpoints.checkpoint import MODEL_FILE  # noqa: E402

PORTS = iter(range(29610, 29640))  # rendezvous ports of this module (loopback)


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _losses(train_dir: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (train_dir / "metrics.jsonl").read_text().splitlines()]


def _torchrun(cfg, data, out, train_dir, tokenizer, **kw) -> list[str]:
    from lib.training.distributed import torchrun_command

    return torchrun_command(cfg, data, out, init=True, nproc_per_node=kw.pop("nproc", 2), tokenizer=tokenizer,
                            train_dir=train_dir, **kw)


def _run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900, **kw)


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory):
    """6 steps of 512 tokens from scratch: FSDP (activation checkpointing, compiled blocks), FSDP
    plain, DDP, all 2 processes; and 1 process with 2 micro-batches per step."""
    root = tmp_path_factory.mktemp("fsdp")
    paths = prepare(root)
    base = {"model": {"pretrain_iterations": 6}, "training": {"snapshot_every": 3}}
    cfgs = {
        # aot_eager traces forward and backward like inductor does, without its minute of C++ codegen per block
        "fsdp_ac_compile": write_config(root / "fsdp-ac.yaml", model=base["model"], training={
            **base["training"], "parallelism": "fsdp", "activation_checkpointing": True, "compile": True, "compile_backend": "aot_eager"}),
        # inherit: the versions keep AdamW's state (optimizer.pt), gathered from the shards with fsdp
        "fsdp": write_config(root / "fsdp.yaml", model=base["model"], training={**base["training"], "parallelism": "fsdp",
                                                                                "optimizer_state": "inherit"}),
        "ddp": write_config(root / "ddp.yaml", model=base["model"], training={**base["training"], "optimizer_state": "inherit"}),
    }
    results = {}
    for name in ("fsdp_ac_compile", "fsdp", "ddp"):
        res = _run(_torchrun(cfgs[name], paths["data"], root / name, root / f"t-{name}", paths["tokenizer"]))
        assert res.returncode == 0, f"{name}: {res.stderr[-3000:]}"
        results[name] = res
    one = _run(train_cmd(cfgs["ddp"], paths["data"], root / "one", "--init", "--tokenizer", str(paths["tokenizer"]),
                         "--train-dir", str(root / "t-one")))
    assert one.returncode == 0, one.stderr[-3000:]
    return {**paths, "root": root, "cfgs": cfgs, "results": results}


@pytest.mark.slow
def test_fsdp_ddp_and_one_process_follow_the_same_loss_curve(fsdp_runs):
    from safetensors.torch import load_file

    root = fsdp_runs["root"]
    curves = {name: _losses(root / f"t-{name}") for name in ("fsdp_ac_compile", "fsdp", "ddp", "one")}
    assert all(len(c) == 6 for c in curves.values()), curves
    for name in ("fsdp_ac_compile", "fsdp", "ddp"):
        assert curves[name] == pytest.approx(curves["one"], rel=1e-4), f"{name} differs from one process: {curves}"
    ref = load_file(str(root / "one" / MODEL_FILE))
    for name in ("fsdp_ac_compile", "fsdp"):
        got = load_file(str(root / name / MODEL_FILE))
        assert set(got) == set(ref)
        # summation order differs (reduce-scatter vs local accumulation); see test_train_distributed
        for key in ref:
            diff = (got[key] - ref[key]).float()
            assert float(diff.norm() / ref[key].float().norm()) < 1e-3, (name, key)
        meta = json.loads((root / name / "meta.json").read_text())
        assert meta["parallelism"] == "fsdp" and meta["world_size"] == 2
    meta = json.loads((root / "fsdp_ac_compile" / "meta.json").read_text())
    assert meta["activation_checkpointing"] is True and meta["compiled"] is True
    # the gathered optimizer.pt has the unsharded, index-keyed layout of a one-process run's
    import torch

    gathered = torch.load(root / "fsdp" / "optimizer.pt", weights_only=True)
    single = torch.load(root / "one" / "optimizer.pt", weights_only=True)
    assert [g["params"] for g in gathered["param_groups"]] == [g["params"] for g in single["param_groups"]]
    assert set(gathered["state"]) == set(single["state"])
    for i, want in single["state"].items():
        assert float(gathered["state"][i]["step"]) == float(want["step"]) == 6
        for key in ("exp_avg", "exp_avg_sq"):
            assert gathered["state"][i][key].shape == want[key].shape
            assert float((gathered["state"][i][key] - want[key]).norm()) <= 1e-3 * float(want[key].norm()) + 1e-12, (i, key)
    assert "FSDP, activation checkpointing, compiled blocks" in fsdp_runs["results"]["fsdp_ac_compile"].stderr
    # sharded snapshots: one safetensors shard per rank, no pickle, marker lists them
    snap = root / "t-fsdp" / "snapshots" / "step-00000003"
    files = sorted(p.name for p in snap.iterdir())
    assert sum(f.startswith("shard-") and f.endswith(".safetensors") for f in files) == 2, files
    assert "model.safetensors" not in files and "optimizer.pt" not in files
    assert set(json.loads((snap / "COMPLETE").read_text())["files"]) == set(files) - {"COMPLETE"}


def _wait_for(path: Path, proc, timeout=600):
    t0 = time.time()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"torchrun exited early with {proc.returncode}: {proc.stderr.read()[-3000:]}")
        if time.time() - t0 > timeout:
            raise AssertionError(f"{path} did not appear")
        time.sleep(0.05)


@pytest.mark.slow
def test_fsdp_sigkill_then_resume_is_bit_identical(fsdp_runs, tmp_path):
    """torchrun and both ranks SIGKILLed after the step-3 snapshot, then --resume: the version's
    bytes and the loss curve equal the uninterrupted 2-process FSDP run's."""
    paths, root = fsdp_runs, fsdp_runs["root"]
    cfg = fsdp_runs["cfgs"]["fsdp"]
    cmd = _torchrun(cfg, paths["data"], tmp_path / "kill", tmp_path / "t-kill", paths["tokenizer"])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(tmp_path / "t-kill" / "snapshots" / "step-00000003" / "COMPLETE", proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its ranks: nobody gets to clean up
        proc.wait()
    assert not (tmp_path / "kill").exists(), "the run was killed before it finished"
    res = _run(cmd + ["--resume"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stderr
    assert (tmp_path / "kill" / MODEL_FILE).read_bytes() == (root / "fsdp" / MODEL_FILE).read_bytes(), \
        "FSDP SIGKILL + resume must end bit-identical to the uninterrupted run"
    assert _losses(tmp_path / "t-kill") == _losses(root / "t-fsdp")

    # the sharded snapshot is refused by a DDP run and by another world size, with what to do
    ddp = _run(_torchrun(fsdp_runs["cfgs"]["ddp"], paths["data"], tmp_path / "ddp", tmp_path / "t-kill", paths["tokenizer"]) + ["--resume"])
    assert ddp.returncode != 0 and "training.parallelism=fsdp" in ddp.stderr


@pytest.mark.slow
def test_gathered_version_is_a_hf_folder_equal_to_the_sharded_weights(tmp_path):
    """A bf16 parent sharded over 2 ranks, one AdamW step, gathered: the version loads with
    from_pretrained in the parent's dtype, its master/ equals the sharded fp32 weights exactly,
    and the stored bf16 weights are each within one bf16 step of them (stochastic rounding)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from hf_models import build_tiny_model

    parent = build_tiny_model("llama", tmp_path / "parent", dtype="bfloat16")
    worker = Path(__file__).parents[1] / "fsdp_gather_worker.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(worker), str(parent), str(tmp_path)]
    res = _run(cmd)
    assert res.returncode == 0, res.stderr[-3000:]
    expected = load_file(str(tmp_path / "expected.safetensors"))
    version = AutoModelForCausalLM.from_pretrained(tmp_path / "v1", dtype="auto")
    assert next(version.parameters()).dtype == torch.bfloat16, "the version keeps the parent's dtype"
    master = AutoModelForCausalLM.from_pretrained(tmp_path / "v1" / "master", dtype="auto")
    assert next(master.parameters()).dtype == torch.float32
    stored, kept = version.state_dict(), master.state_dict()
    for name, want in expected.items():
        assert torch.equal(kept[name], want), f"{name}: master/ differs from the sharded fp32 weights"
        got = stored[name].float()
        # one bf16 step at |w|: 2^(exponent - 7)
        step = torch.exp2(torch.floor(torch.log2(want.abs().clamp_min(1e-30))) - 7)
        assert bool(((got - want).abs() <= step).all()), f"{name}: stored weight more than one bf16 step away"
    assert any(not torch.equal(stored[n].float(), expected[n]) for n in expected), "the step must have moved weights off bf16"


def test_torchrun_command_multi_node_and_config_errors():
    from lib.config import ConfigError, load_config
    from lib.training.distributed import torchrun_command

    node1 = torchrun_command("c.yaml", "run", "out", init=True, nproc_per_node=8, nnodes=4, node_rank=1,
                             rdzv_endpoint="10.0.0.5:29500", rdzv_id="night-7")
    assert "--nnodes=4" in node1 and "--node-rank=1" in node1 and "--rdzv-endpoint=10.0.0.5:29500" in node1
    assert "--rdzv-id=night-7" in node1 and "--rdzv-backend=c10d" in node1 and "--standalone" not in node1
    with pytest.raises(ValueError, match="node_rank=4 is outside 0..3"):
        torchrun_command("c.yaml", "run", "out", init=True, nnodes=4, node_rank=4, rdzv_endpoint="h:1")
    with pytest.raises(ValueError, match="rendezvous endpoint"):
        torchrun_command("c.yaml", "run", "out", init=True, nnodes=2)

    cfg = load_config(preset="tiny", overrides=["training.parallelism=fsdp", "training.compile=false"])
    assert cfg.training.parallelism == "fsdp" and cfg.training.compile == "off"
    assert load_config(preset="tiny", overrides=["training.compile=true"]).training.compile == "on"
    assert load_config(preset="tiny").training.compile == "auto"
    for overrides, message in [
        (["training.parallelism=zero"], "training.parallelism"),
        (["training.rdzv_endpoint=head"], "rdzv_endpoint must be host:port"),
        (["training.compile=sometimes"], "training.compile"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(preset="tiny", overrides=overrides)


def test_memory_estimate_shards_state_and_says_when_fsdp_is_needed():
    """A 7 B Llama on 8 × 80 GB: ddp needs ~150 GB per rank and the refusal names fsdp; with
    fsdp weights, gradients and AdamW shrink to 1/8 and it fits."""
    from transformers import LlamaConfig

    from lib.config import load_config
    from lib.training.footprint import GiB, check_fits, estimate_training_memory

    hf = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, max_position_embeddings=4096)
    t = load_config(overrides=["training.device_batch_size=1", "training.seq_len=2048", "training.total_batch_size=16384"]).training
    n = 6_738_415_616
    ddp = estimate_training_memory(hf, t, 8, "cuda", num_parameters=n)
    fsdp = estimate_training_memory(hf, t.model_copy(update={"parallelism": "fsdp"}), 8, "cuda", num_parameters=n)
    assert fsdp.components["AdamW moments (fp32, sharded)"] == 8 * n // 8
    assert fsdp.components["weights (fp32, sharded)"] * 8 == ddp.components["weights (fp32)"]
    assert "DDP gradient buckets" not in fsdp.components and fsdp.parallelism == "fsdp"
    (problem,) = check_fits(ddp, 80 * GiB, training=t)
    assert "training.parallelism=fsdp is needed" in problem
    assert check_fits(fsdp, 80 * GiB, training=t) == []
    # one process: fsdp shards nothing, the estimate is ddp's
    one = estimate_training_memory(hf, t.model_copy(update={"parallelism": "fsdp"}), 1, "cuda", num_parameters=n)
    assert one.parallelism == "ddp" and "more ranks" in check_fits(one, 80 * GiB, training=t)[0]


@pytest.mark.slow
def test_two_nodes_on_loopback_train_like_one_node_with_two_processes(fsdp_runs, tmp_path):
    """Two torchrun launches of 1 process each, --nnodes 2 and a c10d rendezvous on 127.0.0.1,
    as two machines of a pool would run them: the same version as the 2-process FSDP run."""
    paths, root = fsdp_runs, fsdp_runs["root"]
    endpoint = f"127.0.0.1:{next(PORTS)}"
    cmds = [_torchrun(fsdp_runs["cfgs"]["fsdp"], paths["data"], tmp_path / "v", tmp_path / "t", paths["tokenizer"], nproc=1,
                      nnodes=2, node_rank=rank, rdzv_endpoint=endpoint, rdzv_id="loopback") for rank in (0, 1)]
    assert "--standalone" not in cmds[0] and "--node-rank=1" in cmds[1]
    nodes = [subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for cmd in cmds]
    try:
        outputs = [node.communicate(timeout=900)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    assert json.loads((tmp_path / "v" / "meta.json").read_text())["world_size"] == 2
    assert _losses(tmp_path / "t") == _losses(root / "t-fsdp")
    assert (tmp_path / "v" / MODEL_FILE).read_bytes() == (root / "fsdp" / MODEL_FILE).read_bytes()


def test_training_task_command_carries_the_node_and_rendezvous(tmp_path):
    from lib.config import load_config
    from lib.training.launch import training_command

    cfg = load_config(preset="tiny", overrides=["training.nnodes=2", "training.nproc_per_node=4",
                                                "training.rdzv_endpoint=gpu-0.pool:29500", "training.parallelism=fsdp"])
    cmd = training_command(cfg, "run", str(tmp_path / "v7"), str(tmp_path / "t"), parent="v6", init=False, resume=False,
                           meta=None, node_rank=1)
    assert "--nnodes=2" in cmd and "--node-rank=1" in cmd and "--nproc-per-node=4" in cmd
    assert "--rdzv-endpoint=gpu-0.pool:29500" in cmd and "--rdzv-id=v7" in cmd, "a night's nodes meet under its version's name"


@pytest.mark.slow
def test_fsdp_consolidation_inherits_the_parents_optimizer_state(fsdp_runs, tmp_path):
    """From the one-process v0 (bf16-free fp32, optimizer.pt kept): 3 steps with fsdp over 2 ranks
    and optimizer_state=inherit follow the loss curve of the same consolidation in one process."""
    from lib.config import load_config
    from lib.training.distributed import torchrun_command
    from lib.training.train import train

    paths, root = fsdp_runs, fsdp_runs["root"]
    over = ["training.optimizer_state=inherit", "training.num_iterations=3"]
    cfg = load_config(fsdp_runs["cfgs"]["fsdp"], overrides=over)
    cmd = torchrun_command(fsdp_runs["cfgs"]["fsdp"], paths["data"], tmp_path / "v1", parent=root / "one", nproc_per_node=2,
                           train_dir=tmp_path / "t2", overrides=over)
    res = _run(cmd)
    assert res.returncode == 0, res.stderr[-3000:]
    train(cfg.model_copy(update={"training": cfg.training.model_copy(update={"parallelism": "ddp"})}), paths["data"],
          tmp_path / "v1-one", parent=root / "one", train_dir=tmp_path / "t1", install_signal_handlers=False)
    assert json.loads((tmp_path / "v1" / "meta.json").read_text())["optimizer_state"] == "inherit"
    assert _losses(tmp_path / "t2") == pytest.approx(_losses(tmp_path / "t1"), rel=1e-4)
