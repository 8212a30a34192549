"""The CUDA path's defects found by reading (issue 29), checked on the CPU: the process group's
timeout (a real 2-process gloo run where rank 0 works alone past a short timeout), torchrun's
shutdown timeout, FSDP's mesh on training.device, AdamW's implementation flags after loading a
state written elsewhere, the MFU arithmetic, the rounding generator's device, the micro-batch
that training.device_batch_size=auto picks for a given free memory, and no silent CPU fallback."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from train_fixtures import ROOT, prepare, write_config  # noqa: E402

WORKER = Path(__file__).parent / "cuda_readiness_worker.py"
PORTS = iter(range(29660, 29690))


def _torchrun(out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The worker on 2 gloo ranks; each rank's JSON lines land in `out`/rank-R.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{next(PORTS)}", str(WORKER), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "READINESS_OUT": str(out)}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("rank-*.jsonl")) for line in f.read_text().splitlines()]


# -- 1. the process group's timeout --------------------------------------------------------------
@pytest.mark.slow
def test_ranks_wait_for_rank_0_under_the_configured_timeout_not_a_short_one(tmp_path):
    """Rank 0 sleeps 4 s before the barrier (as it does writing a snapshot while the others wait).
    With a 1.5 s process-group timeout rank 1 gives up; with the configured 30 s it waits through
    the pause. Each run's group really carries the timeout given to Dist."""
    short = _torchrun(tmp_path / "short", "pause", "1.5", "4")
    assert short.returncode != 0, "rank 1 should have timed out waiting 4 s under a 1.5 s timeout"
    recs = _records(tmp_path / "short")
    assert any(r.get("pg_timeout_s") == 1.5 for r in recs), recs
    assert not any(r.get("rank") == 1 and r.get("passed") for r in recs), recs

    long = _torchrun(tmp_path / "long", "pause", "30", "4")
    assert long.returncode == 0, long.stderr[-3000:]
    recs = _records(tmp_path / "long")
    assert sorted(r["pg_timeout_s"] for r in recs if "pg_timeout_s" in r) == [30.0, 30.0]
    waited = {r["rank"]: r["waited_s"] for r in recs if r.get("passed")}
    assert set(waited) == {0, 1} and waited[1] >= 3.0, waited  # rank 1 waited through rank 0's pause


def test_the_trainer_opens_its_group_with_training_collective_timeout_s():
    """lib.training.train passes training.collective_timeout_s to Dist (read from its source's one call
    site, the config default being longer than NCCL's 10 minutes)."""
    import inspect

    import lib.training.train
    from lib.config import TrainingConfig

    assert "Dist(cfg.training.device, timeout_s=cfg.training.collective_timeout_s)" in inspect.getsource(lib.training.train.train)
    assert TrainingConfig().collective_timeout_s > 600


# -- 2. torchrun's shutdown timeout --------------------------------------------------------------
def test_torchrun_gets_a_shutdown_timeout_sized_for_the_snapshot(tmp_path):
    from torch.distributed.run import get_args_parser

    from lib.config import load_config
    from lib.training.distributed import snapshot_shutdown_timeout, torchrun_command
    from lib.training.footprint import count_parameters
    from lib.training.preflight import hf_config, read_target
    from lib.training.launch import training_command

    cmd = torchrun_command("c.yaml", "run", "out", parent="v3", nproc_per_node=2, shutdown_timeout_s=240)
    args = get_args_parser().parse_args(cmd[3:])  # what torchrun itself reads from this line
    assert args.shutdown_timeout == 240 and args.nproc_per_node == "2"
    assert snapshot_shutdown_timeout(1_000_000_000) == 240  # 12 GB at 100 MB/s + 2 minutes
    assert snapshot_shutdown_timeout(8_000_000_000) == 1080
    assert snapshot_shutdown_timeout(1_000) == 120 and snapshot_shutdown_timeout(5, configured=45) == 45

    cfg = load_config(preset="tiny", overrides=[f"workspace.root={tmp_path}"])
    n = count_parameters(hf_config(cfg, read_target(cfg, None)))
    line = training_command(cfg, str(tmp_path / "data"), str(tmp_path / "v0"), str(tmp_path / "train"), parent=None, init=True,
                            resume=False, meta=None)
    assert f"--shutdown-timeout={snapshot_shutdown_timeout(n)}" in line
    pinned = cfg.model_copy(update={"training": cfg.training.model_copy(update={"shutdown_timeout_s": 900})})
    assert "--shutdown-timeout=900" in training_command(pinned, "d", str(tmp_path / "v1"), str(tmp_path / "t"), parent=None,
                                                        init=True, resume=False, meta=None)


# -- 3. FSDP's mesh ------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_parameter_stays_on_training_device_after_sharding(tmp_path):
    res = _torchrun(tmp_path, "fsdp")
    assert res.returncode == 0, res.stderr[-3000:]
    recs = [r for r in _records(tmp_path) if "params" in r]
    assert len(recs) == 2
    for r in recs:
        assert r["params"] and all(p["device"] == "cpu" and p["mesh"] == "cpu" for p in r["params"]), r


# -- 5. AdamW's flags after load_state_dict --------------------------------------------------------
def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=16)).float()


def _one_step(model, optimizer):
    x = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    model(input_ids=x, labels=x).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("written_on, runs_on", [("cuda", "cpu"), ("cpu", "cuda")])
def test_an_optimizer_state_written_on_another_device_trains_with_this_runs_adamw(tmp_path, written_on, runs_on):
    """optimizer.pt written by a run on `written_on` (its groups carry that run's fused/foreach
    flags), saved and loaded as lib.checkpoints.checkpoint does, then loaded by a run on `runs_on`: after
    reset_hyperparameters the groups hold `runs_on`'s flags and the step counters sit where that
    implementation keeps them. (Fused AdamW also runs on CPU, so both sides are real optimizers.)"""
    from lib.config import TrainingConfig
    from lib.training.setup import make_optimizer, reset_hyperparameters
    from lib.training.setup import optimizer_flags

    tcfg = TrainingConfig(device="cpu", device_batch_size=1)
    writer_model = _model()
    writer = make_optimizer(writer_model, tcfg, torch.device(written_on), 1e-3)
    _one_step(writer_model, writer)
    torch.save(writer.state_dict(), tmp_path / "optimizer.pt")
    from lib.checkpoints.checkpoint import load_optimizer_state

    state = load_optimizer_state(tmp_path)
    model = _model()
    optimizer = make_optimizer(model, tcfg, torch.device(runs_on), 1e-3)
    optimizer.load_state_dict(state)
    assert all(g["fused"] == optimizer_flags(torch.device(written_on))["fused"] for g in optimizer.param_groups), \
        "load_state_dict keeps the writer's flags: the defect this reset is for"
    reset_hyperparameters(optimizer, tcfg, 2e-3, torch.device(runs_on))
    want = optimizer_flags(torch.device(runs_on))
    for g in optimizer.param_groups:
        assert {k: g[k] for k in want} == want and g["lr"] == 2e-3
    steps = [s["step"] for s in optimizer.state.values()]
    assert steps and all(s.dtype == torch.float32 and s.device.type == "cpu" and float(s) == 1.0 for s in steps)
    _one_step(model, optimizer)  # the implementation the flags name runs on this state
    assert all(float(s["step"]) == 2.0 for s in optimizer.state.values())

    # a snapshot round trip keeps them (what resume_from_snapshot loads, then re-applies)
    from lib.training.setup import apply_optimizer_flags

    again = make_optimizer(model, tcfg, torch.device(runs_on), 2e-3)
    again.load_state_dict(optimizer.state_dict())
    apply_optimizer_flags(again, torch.device(runs_on))
    assert all({k: g[k] for k in want} == want for g in again.param_groups)


# -- 6. MFU --------------------------------------------------------------------------------------
@pytest.mark.parametrize("tied", [True, False])
def test_model_flops_and_mfu_against_a_hand_computation(tied):
    from transformers import LlamaConfig, LlamaForCausalLM

    from lib.training.throughput import mfu, model_flops_per_token

    V, h, i, L, heads, kv_heads, T = 100, 32, 80, 3, 4, 2, 64
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=h, intermediate_size=i, num_hidden_layers=L,
                                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                                         max_position_embeddings=T, tie_word_embeddings=tied))
    kv = kv_heads * (h // heads)
    block = h * h + 2 * h * kv + h * h + 3 * h * i + 2 * h  # q, k and v, o, gate/up/down, two norms
    multiplying = L * block + h + V * h  # blocks, final norm, lm_head (the tied matrix once; an untied input embedding is a lookup)
    by_hand = 6 * multiplying + 12 * L * h * T
    assert model_flops_per_token(model, T) == by_hand
    # 3,000 tokens/s over 2 devices of 1 TFLOP/s each
    assert mfu(3000.0, by_hand, 2, 1e12) == pytest.approx(3000.0 * by_hand / 2e12, rel=1e-12)


def test_peak_table_and_the_meter_leave_warm_up_steps_out():
    from lib.training.throughput import Meter, lineage_metrics, table_peak

    assert table_peak("NVIDIA H100 80GB HBM3", "bfloat16") == 989.4e12
    assert table_peak("NVIDIA H100 PCIe", "bfloat16") == 756.5e12
    assert table_peak("NVIDIA A100-SXM4-80GB", "bfloat16") == 312e12
    assert table_peak("NVIDIA A10G", "bfloat16") == 70e12 and table_peak("NVIDIA L4", "bfloat16") == 121e12
    assert table_peak("NVIDIA GH200 480GB", "bfloat16") == 989.4e12 and table_peak("Tesla V100-SXM2-16GB", "bfloat16") is None
    assert table_peak("Some Future GPU", "bfloat16") is None
    from lib.training.throughput import peak_flops

    rng = torch.random.get_rng_state()
    peak, source = peak_flops(torch.device("cpu"), torch.float32)  # no table for a CPU: a timed matmul
    assert peak > 0 and source == "measured matmul: cpu, float32"
    assert torch.equal(rng, torch.random.get_rng_state()), "timing the peak must not move the run's RNG (snapshots save it)"

    meter = Meter(flops_per_token=1e9, world_size=2, peak=1e12, peak_source="test", planned_steps=6)
    history: dict = {}
    seconds = [30.0, 2.0, 2.0, 1.0, 1.0, 2.0]  # a compile step, two more warm-up steps, then steady
    records = [meter.step(1000, s, history) for s in seconds]
    assert [r["warmup"] for r in records] == [True, True, True, False, False, False]
    assert records[3]["tokens_per_s"] == 1000.0 and records[3]["mfu"] == pytest.approx(1000.0 * 1e9 / 2e12)
    summary = meter.summary(history)
    assert summary["tokens_per_s"] == pytest.approx(3000 / 4.0)  # the last three steps only
    assert summary["mfu"] == pytest.approx(750.0 * 1e9 / 2e12)
    assert lineage_metrics(summary) == {"training": {"tokens_per_s": summary["tokens_per_s"], "mfu": summary["mfu"]}}
    # a peak timed on a CPU another job was using is timed again at the end, the larger kept; a data sheet's stays
    meter.measure_peak_again(torch.device("cpu"), torch.float32)
    assert meter.peak == 1e12                                       # "test": no timed peak
    timed = Meter(flops_per_token=1e9, world_size=1, peak=1.0, peak_source="measured matmul: cpu, float32", planned_steps=1)
    timed.measure_peak_again(torch.device("cpu"), torch.float32)
    assert timed.peak > 1e6                                         # what a free core does now, not the contended 1 FLOP/s


# -- 8. the rounding generator --------------------------------------------------------------------
def test_stochastic_rounding_draws_from_a_cpu_generator_whatever_the_weights_device():
    from lib.checkpoints.precision import cast_for_storage, stochastic_round
    from lib.checkpoints.precision import rounding_generator

    g = rounding_generator(1234)
    assert g.device.type == "cpu"
    model = _model()
    ref_gen = rounding_generator(1234)
    reference = {n: stochastic_round(p.data.clone(), torch.bfloat16, ref_gen) for n, p in model.named_parameters()}
    cast_for_storage(model, torch.bfloat16, rounding="stochastic", seed=1234)
    for n, p in model.named_parameters():
        assert torch.equal(p.data, reference[n]), n


# -- 11 and auto: the micro-batch from the free memory ---------------------------------------------
def _llama_1b():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                       num_key_value_heads=8, max_position_embeddings=8192, tie_word_embeddings=True)


def test_auto_picks_the_largest_micro_batch_that_fits_the_free_memory_and_refuses_when_none_does():
    from lib.config import TrainingConfig
    from lib.training.footprint import AUTO_BATCH_MARGIN, GiB, choose_device_batch, count_parameters, estimate_training_memory

    cfg, n = _llama_1b(), count_parameters(_llama_1b())
    tcfg = TrainingConfig(device="cuda")  # the defaults: 524,288 tokens a step at 2,048, device_batch_size=auto
    assert tcfg.device_batch_size == "auto"

    def need(b, ac):
        return estimate_training_memory(cfg, tcfg.model_copy(update={"device_batch_size": b, "activation_checkpointing": ac}), 1,
                                        "cuda", num_parameters=n).total

    free = 80 * GiB  # an idle H100
    choice = choose_device_batch(cfg, tcfg, 1, "cuda", free, num_parameters=n)
    b = choice.device_batch_size
    assert not choice.activation_checkpointing and (256 // b) * b == 256  # a divisor: accumulation keeps the step
    assert need(b, False) <= free * (1 - AUTO_BATCH_MARGIN) < need(2 * b, False), (b, need(b, False) / GiB)
    assert "chose" in choice.describe() and f"{b} sequences" in choice.describe()

    # another job holds most of the GPU: a smaller batch, with checkpointing when only that fits
    tight = (need(1, False) + need(1, True)) / 2 / (1 - AUTO_BATCH_MARGIN)
    small = choose_device_batch(cfg, tcfg, 1, "cuda", int(tight), num_parameters=n)
    assert small.activation_checkpointing and small.estimate.total <= tight * (1 - AUTO_BATCH_MARGIN)

    with pytest.raises(ValueError, match="found no micro-batch that fits") as err:
        choose_device_batch(cfg, tcfg, 1, "cuda", 10 * GiB, num_parameters=n)
    assert "training.parallelism=fsdp" in str(err.value)  # and what to turn

    # the old default (32 sequences, no checkpointing) is what the issue found refused on 80 GB
    assert need(32, False) > free


def test_the_cuda_estimate_counts_autocast_activations_nccl_and_rank0_host_ram():
    from lib.config import TrainingConfig
    from lib.training.footprint import NCCL_BUFFER_BYTES, estimate_training_memory, model_shape

    cfg = _llama_1b()
    t = TrainingConfig(device_batch_size=4, optimizer_state="inherit")
    one = estimate_training_memory(cfg, t, 1, "cuda", num_parameters=1_000_000_000)
    two = estimate_training_memory(cfg, t, 2, "cuda", num_parameters=1_000_000_000)
    cpu = estimate_training_memory(cfg, t, 1, "cpu", num_parameters=1_000_000_000)
    assert "NCCL buffers" not in one.components and two.components["NCCL buffers"] == NCCL_BUFFER_BYTES
    assert one.host == {"final version: fp32 weights": 4e9, "final version: AdamW state": 8e9,
                        "final version: stored copy": 2e9, "runtime": one.host["runtime"]} and not cpu.host
    s = model_shape(cfg)
    per_token = 30 * s["hidden"] + 4 * s["kv_width"] + 8 * s["intermediate"] + 4 * s["heads"] + 8
    assert one.components["activations"] == (s["layers"] * per_token + 3 * s["hidden"] * 4) * 4 * 2048


def _llama(layers, seq):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=176, num_hidden_layers=layers, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=seq)


def _gpt2(layers, seq):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=200, n_embd=64, n_inner=192, n_layer=layers, n_head=4, n_positions=seq, bos_token_id=0,
                      eos_token_id=0)  # attention dropout on, as GPT-2 ships


@pytest.mark.parametrize("make", [_llama, _gpt2], ids=["llama", "gpt2"])
def test_autocast_activation_bytes_match_what_autograd_keeps(make):
    """The bf16-autocast fit against saved_tensors_hooks on a real block (CPU autocast routes
    Linear, matmul and attention to bf16 as CUDA's does), the bf16 weight copies left out (the
    estimate counts them as 'autocast bf16 weights')."""
    from transformers import AutoModelForCausalLM

    from lib.training.footprint import activation_bytes_per_token, block_parameters, model_shape

    def saved(layers, batch=2, seq=32):
        cfg = make(layers, seq)
        model = AutoModelForCausalLM.from_config(cfg).float().train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[int, int] = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in params:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        x = torch.randint(0, 200, (batch, seq))
        torch.manual_seed(0)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
            model.base_model(input_ids=x)
        return sum(seen.values()), cfg

    (three, cfg), (one, _) = saved(3), saved(1)
    shape = model_shape(cfg)
    bf16_weights = 2 * (block_parameters(shape) - 2 * shape["hidden"])  # autocast's cached copies of the matrices, per block
    per_block = (three - one) / 2 - bf16_weights
    assert per_block == activation_bytes_per_token(shape, 32, autocast=True) * 2 * 32


# -- 9. no silent CPU fallback --------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a usable GPU")
def test_cuda_without_a_usable_gpu_is_an_error_and_auto_warns_loudly(monkeypatch, caplog):
    """cuda without a GPU is an error; auto falls back with the reason kept: a banner for a model
    sized for a GPU, one INFO line for the tiny preset's (the demo's first screen stays calm)."""
    from lib.training.distributed import Dist, warn_cpu_fallback

    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="training.device=cuda but CUDA is not usable") as err:
        Dist("cuda")
    assert "training.device=cpu" in str(err.value)
    d = Dist("auto")
    assert d.device.type == "cpu" and d.cpu_fallback and "CUDA" in d.cpu_fallback
    assert Dist("cpu").cpu_fallback is None
    with caplog.at_level(logging.INFO, logger="lib.training.distributed"):
        warn_cpu_fallback(d.cpu_fallback, 135_000_000)
    assert "TRAINS ON THE CPU" in caplog.text and "135M parameters" in caplog.text and "WARNING" in {r.levelname for r in caplog.records}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lib.training.distributed"):
        warn_cpu_fallback(d.cpu_fallback, 1_380_000)
    assert "TRAINS ON THE CPU" not in caplog.text and "training on the CPU, fine for 1.38M parameters" in caplog.text
    assert {r.levelname for r in caplog.records} == {"INFO"}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lib.training.distributed"):
        warn_cpu_fallback(None, 135_000_000)
    assert not caplog.records


def test_the_gpu_deployment_trains_on_cuda():
    import yaml

    spec = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    gpu = spec["definitions"]["gpu_params"]["cfg"]
    assert gpu["training"]["device"] == "cuda"


# -- 10. eval's dtype on CUDA ----------------------------------------------------------------------
@pytest.mark.parametrize("stored, cuda_dtype", [("float16", torch.bfloat16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)])
def test_eval_runs_fp16_stored_versions_in_bf16_like_serving(tmp_path, stored, cuda_dtype):
    from lib.evaluation.evaluate import eval_dtype

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "dtype": stored}))
    assert eval_dtype(tmp_path, "cuda") == cuda_dtype
    assert eval_dtype(tmp_path, "cpu") == torch.float32


# -- the trainer end to end on CPU: auto batch, per-step MFU, the run's figures ---------------------
@pytest.mark.slow
def test_a_run_with_auto_batch_logs_mfu_per_step_and_records_the_figures(tmp_path):
    from lib.checkpoints.checkpoint import read_meta
    from lib.config import load_config
    from lib.registry.lineage import Lineage
    from lib.training.train import train
    from lib.training.throughput import lineage_metrics

    paths = prepare(tmp_path)
    cfg_path = write_config(tmp_path / "c.yaml", model={"pretrain_iterations": 6}, training={"device_batch_size": "auto"})
    cfg = load_config(cfg_path)
    out = train(cfg, paths["data"], tmp_path / "v0", init=True, tokenizer_dir=paths["tokenizer"], train_dir=tmp_path / "t",
                install_signal_handlers=False)
    assert out["status"] == "done"
    meta = read_meta(tmp_path / "v0")
    # 512 tokens a step at seq 64 on one process: 8 rows; a tiny model fits all 8 in one micro-batch
    assert meta["consolidation_config"]["training"]["device_batch_size"] == 8
    assert meta["memory_estimate"]["auto_batch"]["device_batch_size"] == 8
    recs = [json.loads(x) for x in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert [r["warmup"] for r in recs] == [True, True, True, False, False, False]
    assert all(r["mfu"] > 0 and r["tokens_per_s"] > 0 for r in recs)
    final = meta["final_metrics"]
    steady = [r for r in recs if not r["warmup"]]
    assert final["tokens_per_s"] == pytest.approx(sum(r["tokens"] for r in steady) / sum(r["dt_s"] for r in steady), rel=1e-6)
    assert final["mfu"] == pytest.approx(final["tokens_per_s"] * final["flops_per_token"] / final["peak_flops_per_device"])
    assert final["peak_source"].startswith("measured matmul: cpu")

    lin = Lineage(tmp_path / "lineage.duckdb")
    lin.record_version("v0", tmp_path / "v0", parent=None, status="candidate", metrics={"v0": lineage_metrics(final)})
    assert lin.metrics("v0")["training"]["mfu"] == pytest.approx(final["mfu"])


def test_an_out_of_memory_batch_is_released_before_the_retry(tiny_hf_model, monkeypatch):
    """A batch that runs out of memory (the error raised from inside the forward, as CUDA's is)
    is halved and retried; the failed batch's tensors are no longer referenced when the retry
    starts (where CUDA's cache is emptied), and the result equals an ordinary run's."""
    import weakref

    from lib.evaluation.evaluate import EvalModel

    em = EvalModel.load(tiny_hf_model, max_len=64)
    windows = em.windows(["def f(x):\n    return x + 1\n" * 20, "import os\nprint(os.getcwd())\n" * 10])
    expected = em.sum_nats(windows, batch_size=8)
    forward, failed, alive_at_retry = em.model.forward, [], []

    def forward_with_a_small_memory(*args, input_ids=None, **kwargs):
        if failed and not alive_at_retry:
            alive_at_retry.append(failed[0]() is not None)
        if input_ids.shape[0] > 2:
            failed.append(weakref.ref(input_ids))
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(*args, input_ids=input_ids, **kwargs)

    alive_at_empty_cache = []
    em.model.forward = forward_with_a_small_memory
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: alive_at_empty_cache.append(failed[-1]() is not None))
    assert em.sum_nats(windows, batch_size=8) == pytest.approx(expected, rel=1e-6)
    assert failed and alive_at_retry == [False], "the failed batch was still referenced at the retry"
    assert alive_at_empty_cache and not any(alive_at_empty_cache), "empty_cache ran while the exception still held the batch"
