"""The consolidation trainer: continue pre-training a Hugging Face causal LM on a prepared mix.

Run as `python -m lib.train --config FILE --data DIR --out DIR (--parent VERSION | --init) [--resume]`
or under `torchrun --nproc-per-node N -m lib.train ...` (`lib.distributed.torchrun_command` builds that line).

- `train()` reads as its stages: `set_up` → `resume_from_snapshot` → `run_steps` (`train_step`,
  `save_snapshot`) → `finish`; a `Run` holds what they share.
- Setup: gloo on CPU, nccl on CUDA (lib.distributed); the data's tokenizer hash must equal the
  parent's (v0: the given tokenizer's); memory per rank estimated (lib.footprint) before the model
  is loaded, and a run that cannot fit refused with the knobs to turn; the parent loaded straight
  into fp32 master weights on the device (from its master/ when it keeps one); then, per
  `training.*`, activation checkpointing and torch.compile per block, and DDP or FSDP2
  (`parallelism`, lib.distributed.prepare_model). bf16 compute on CUDA (autocast with DDP, the
  FSDP mixed-precision policy with FSDP) with the logits cast to fp32 before the cross-entropy
  (seed 001), fp32 on CPU with deterministic algorithms so a resumed run is bit-identical.
- One step = `total_batch_size / (device_batch_size × seq_len × world)` micro-batches per rank.
  The micro-batches of a step are fetched first, the valid targets (≠ -100) counted over all
  ranks, and each micro-batch's summed loss divided by that global count: the gradient is the
  exact mean over the step's tokens however they are split across ranks and micro-batches, so
  2 processes and 1 process with twice the accumulation follow the same loss curve.
- LR = peak × `lib.schedule.lr_multiplier(step)`, peak = the parent's `original_lr` × lr_scale
  (v0: model.pretrain_lr). A parent without original_lr is refused with what it is and typical
  values, never guessed. AdamW (fused on CUDA), weight decay on matrices only, grad clipping.
  Optimizer state fresh or inherited from the parent's optimizer.pt, LRs reset (recorded in meta).
- Snapshots every `snapshot_every` steps and on SIGTERM / past `time_limit_s` (lib.snapshot;
  with FSDP each rank writes its own shard, lib.distributed.save_sharded); `--resume` continues
  from the newest complete one. An FSDP model is gathered once at the end, onto rank 0. Rank 0 writes metrics.jsonl (loss, lr,
  tokens/s, tokens per source) and, at the end, the version folder via lib.checkpoint: in the
  parent's dtype, rounded per `checkpoints.rounding`, fp32 master weights beside it, and in
  meta.json how much of the night's update the stored weights kept.

Trade-off: fetching the whole step's micro-batches before the first forward holds
accum × B × (T+1) × 16 bytes (4 MB at the default 0.5 M-token step) and costs one 8-byte
all-reduce per step, in exchange for a loss normalisation that is independent of the split.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("lib.train")

EXIT_STOPPED = 3  # stopped early (SIGTERM or time limit) with a snapshot saved: resume with --resume


from lib.files import write_text  # noqa: E402
from lib.distributed import Dist  # noqa: E402  (the process group; the torchrun line is lib.distributed.torchrun_command)
from lib.prepared import PreparedData  # noqa: E402  (what --data holds: data.json, manifest, shards)


ORIGINAL_LR_HELP = (
    "original_lr is the peak learning rate the model was last trained with (the peak of its pre-training or of its "
    "last fine-tuning); a consolidation trains at original_lr × training.lr_scale, so it sets how hard every night "
    "pushes the weights. Typical values: about 3e-4 for the pre-training of ~100 M-1 B Llama-style models (6e-4 for "
    "GPT-2 small), 1e-4 to 3e-4 for 7 B-class pre-training, 1e-5 to 2e-5 for the fine-tuning of instruction-tuned "
    "models; the model card or the training report usually states it"
)


def require_original_lr(parent: Path, parent_meta: dict[str, Any], lr_scale: float) -> float:
    """The parent's recorded original LR; a consolidation without one is refused, never guessed:
    a guess written into the child's meta.json would become every later night's 'fact'."""
    value = parent_meta.get("original_lr")
    if value is None:
        raise ValueError(
            f"{parent / 'meta.json'} records no original_lr, so this consolidation has no learning rate to scale "
            f"(training.lr_scale={lr_scale}). {ORIGINAL_LR_HELP}. Set it when adopting the model "
            f"(`consolidate init --model DIR --original-lr 3e-4 ...`), or add \"original_lr\": <LR> to {parent / 'meta.json'}."
        )
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not value > 0:
        raise ValueError(f"{parent / 'meta.json'}: original_lr must be a positive number, got {parent_meta.get('original_lr')!r}. {ORIGINAL_LR_HELP}.")
    return value


def check_memory(hf_config, tcfg, d: "Dist") -> dict[str, Any]:
    """Estimate this rank's memory before the model is loaded; refuse a run that cannot fit
    (training.memory_check=false skips the refusal, not the estimate)."""
    from lib.footprint import GiB, available_memory, check_fits, estimate_training_memory, resident_bytes

    device = d.device.type
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    runtime = resident_bytes() if device == "cpu" else None
    est = estimate_training_memory(hf_config, tcfg, d.world_size, device, runtime_bytes=runtime or None)
    if device == "cuda":
        available, sharing = available_memory("cuda", d.local_rank), 1
    else:
        # MemAvailable excludes what the ranks of this machine already hold; count that back in
        available, sharing = available_memory("cpu") + (runtime or 0) * local, local
    if d.is_main:
        log.info("memory per rank, estimated: %.2f GiB (%s) of %.2f GiB %s",
                 est.total / GiB, ", ".join(f"{k} {v / GiB:.2f}" for k, v in est.components.items()),
                 available / GiB, "on the GPU" if device == "cuda" else f"available RAM for {sharing} rank(s)")
    problems = check_fits(est, available, ranks_sharing=sharing, training=tcfg)
    if problems and tcfg.memory_check:
        raise InsufficientMemory("\n".join(problems))
    return {**est.to_dict(), "available": available, "fits": not problems}


class InsufficientMemory(ValueError):
    """The memory estimate exceeds the device: refused before training, with the knobs to turn."""


def steps_accumulation(total_batch_size: int, device_batch_size: int, seq_len: int, world_size: int) -> int:
    """Micro-batches per rank per optimizer step; the token counts must divide exactly."""
    per_pass = device_batch_size * seq_len * world_size
    if total_batch_size % per_pass:
        raise ValueError(
            f"training.total_batch_size={total_batch_size} tokens is not a multiple of "
            f"device_batch_size × seq_len × world_size = {device_batch_size} × {seq_len} × {world_size} = {per_pass}; "
            f"choose total_batch_size as a multiple of {per_pass}"
        )
    return total_batch_size // per_pass


# -- pieces of setup -----------------------------------------------------------------------------
def _tokenizer_hash(folder: Path) -> str:
    from lib.tokenizer import load_tokenizer

    return load_tokenizer(folder).hash


def check_tokenizer(data: PreparedData, tokenizer_dir: Path) -> str:
    """The data was tokenized with the model's tokenizer, or training would learn garbage ids:
    the data area's `validate` checks data.json and every shard against the model's hash."""
    from lib.loader import validate

    model_hash = _tokenizer_hash(tokenizer_dir)
    validate(data, model_hash)
    return model_hash


def param_groups(model, weight_decay: float) -> list[dict]:
    """Decay matrices (and embeddings), not norms and biases: decaying a norm gain pulls it to 0."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model, tcfg, device, lr: float):
    import torch

    kwargs: dict[str, Any] = {"lr": lr, "betas": tuple(tcfg.adam_betas), "eps": 1e-8}
    if device.type == "cuda":
        kwargs["fused"] = True  # one kernel for all parameters: ~10% of a small model's step time
    else:
        kwargs["foreach"] = False  # the single-tensor path: same results on every resume
    return torch.optim.AdamW(param_groups(model, tcfg.weight_decay), **kwargs)


def reset_hyperparameters(optimizer, tcfg, lr: float) -> None:
    """After loading an inherited state: this run's LR, betas and decay, not the parent's."""
    for i, group in enumerate(optimizer.param_groups):
        group["lr"] = lr
        group["initial_lr"] = lr
        group["betas"] = tuple(tcfg.adam_betas)
        group["weight_decay"] = tcfg.weight_decay if i == 0 else 0.0


def default_loader(data: PreparedData, batch_size, seq_len, rank, world_size, tokenizer_hash=None):
    from lib.loader import TrainLoader

    return TrainLoader(data, batch_size, seq_len, rank=rank, world_size=world_size, tokenizer_hash=tokenizer_hash)


class _StopFlag:
    """SIGTERM sets it; the step loop checks it (with all ranks) after each optimizer step."""

    def __init__(self):
        self.reason: str | None = None

    def __call__(self, signum, frame):
        self.reason = f"signal {signal.Signals(signum).name}"


class _Progress:
    """A rich progress bar when a person watches (stderr is a TTY), log lines otherwise."""

    def __init__(self, total: int, start: int, enabled: bool):
        self.total, self.bar, self.task = total, None, None
        self.every = max(1, total // 50)
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("train"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=False)
            self.bar.start()
            self.task = self.bar.add_task("train", total=total, completed=start, info="")
        self.enabled = enabled

    def update(self, step: int, loss: float, lr: float, tok_s: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=step + 1, info=f"loss {loss:.4f} lr {lr:.2e} {tok_s:,.0f} tok/s")
        elif (step + 1) % self.every == 0 or step + 1 == self.total:
            log.info("step %d/%d loss %.4f lr %.3e %.0f tok/s", step + 1, self.total, loss, lr, tok_s)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# -- the training run ------------------------------------------------------------------------------
@dataclass
class Run:
    """Everything one training process holds: what set_up built, what the steps advance."""

    cfg: Any
    d: Dist
    data: PreparedData    # the prepared data folder (lib/prepared.py): data.json read, manifest there
    out_dir: Path
    train_dir: Path
    init: bool
    parent: Path | None
    resume: bool
    meta: dict[str, Any] | None
    tok_dir: Path
    tok_hash: str
    parent_meta: dict[str, Any]
    start_dir: Path | None
    started_from: str
    original_lr: float
    lr_scale: float
    peak: float
    num_iterations: int
    accum: int
    memory: dict[str, Any]
    model: Any            # the model itself (sharded in place with FSDP)
    step_model: Any       # what the step calls: the model, or its DDP wrapper
    autocast: Any
    optimizer: Any
    optimizer_choice: str
    loader: Any
    sharded: bool
    step: int = 0
    history: dict[str, Any] = field(default_factory=lambda: {"loss": [], "tokens": 0, "elapsed_s": 0.0, "tokens_per_source": {}})

    @property
    def tcfg(self):
        return self.cfg.training

    @property
    def snapshot_dir(self) -> Path:
        return self.train_dir / "snapshots"

    @property
    def metrics_path(self) -> Path:
        return self.train_dir / "metrics.jsonl"


def train(
    cfg,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    parent: str | Path | None = None,
    init: bool = False,
    resume: bool = False,
    tokenizer_dir: str | Path | None = None,
    meta: dict[str, Any] | None = None,
    train_dir: str | Path | None = None,
    make_loader: Callable = default_loader,
    install_signal_handlers: bool = True,
) -> dict[str, Any]:
    """Run the training loop on this process (one rank of a torchrun job or a lone process).
    Returns {'status': 'done'|'stopped', 'step', 'out', 'final_metrics'}."""
    import torch

    from lib.workspace import RunDir

    if (parent is None) == (not init):
        raise ValueError("give exactly one of --parent VERSION_DIR (consolidation) or --init (pre-train v0 from scratch)")
    out_dir = Path(out_dir)
    train_dir = Path(train_dir) if train_dir else RunDir(Path(data_dir)).train
    if out_dir.exists() and not resume:
        raise FileExistsError(f"--out {out_dir} already exists; choose a new version folder (or --resume an interrupted run)")
    data = PreparedData.open(data_dir)

    d = Dist(cfg.training.device)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    was_filling = torch.utils.deterministic.fill_uninitialized_memory
    previous_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if d.device.type == "cpu":
            # bit-exact resume needs the same kernels in the same order every time; not the NaN
            # fill of every new tensor that deterministic mode adds (a debugging aid: it memsets
            # each step's activations and gradients, ~7% of a 95 M model's CPU step)
            torch.use_deterministic_algorithms(True)
            torch.utils.deterministic.fill_uninitialized_memory = False
        run = set_up(cfg, d, data, out_dir, train_dir, parent=Path(parent) if parent else None, init=init,
                     resume=resume, tokenizer_dir=tokenizer_dir, meta=meta, make_loader=make_loader)
        if resume:
            resume_from_snapshot(run)
        stop = _StopFlag()
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, stop)
        status = run_steps(run, stop)
        return finish(run, status)
    finally:
        # leave the process as found: an in-process caller (tests, a notebook) keeps its settings
        torch.use_deterministic_algorithms(was_deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = was_filling
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, previous_sigterm)
        d.close()


def _start_point(cfg, d: Dist, data_info: dict, parent: Path | None, init: bool, tokenizer_dir) -> dict[str, Any]:
    """Where the run starts: tokenizer, HF config, original LR and steps; nothing loaded yet."""
    from lib.checkpoint import materialize, read_meta
    from lib.model import llama_config, training_start

    tcfg = cfg.training
    if init:
        tok_dir = Path(tokenizer_dir or cfg.tokenizer.path or data_info.get("tokenizer_dir") or "")
        if not tok_dir.is_absolute() and not tokenizer_dir and not cfg.tokenizer.path and data_info.get("tokenizer_dir"):
            tok_dir = Path(cfg.workspace.root) / tok_dir  # data.json stores it relative to the workspace
        if not (tok_dir / "tokenizer.json").is_file():
            raise FileNotFoundError(f"--init needs a tokenizer folder with tokenizer.json (--tokenizer or tokenizer.path); got {str(tok_dir)!r}")
        from lib.tokenizer import load_tokenizer

        tok = load_tokenizer(tok_dir)
        hf_config = llama_config(cfg.model, tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
        return {"tok_dir": tok_dir, "tok": tok, "hf_config": hf_config, "original_lr": cfg.model.pretrain_lr, "lr_scale": 1.0,
                "parent_meta": {}, "num_iterations": cfg.model.pretrain_iterations, "start_dir": None}
    tok_dir = Path(tokenizer_dir) if tokenizer_dir else parent
    parent_meta = read_meta(parent)
    original_lr = require_original_lr(parent, parent_meta, tcfg.lr_scale)
    start_dir = training_start(parent) if cfg.checkpoints.master_weights else parent
    if d.is_main:
        materialize(parent)  # a delta-stored parent is rebuilt once, not by every rank at once
        materialize(start_dir)
    d.barrier()
    from transformers import AutoConfig

    return {"tok_dir": tok_dir, "tok": None, "hf_config": AutoConfig.from_pretrained(materialize(parent)), "original_lr": original_lr,
            "lr_scale": tcfg.lr_scale, "parent_meta": parent_meta, "num_iterations": tcfg.num_iterations, "start_dir": start_dir}


def set_up(cfg, d: Dist, data: PreparedData, out_dir: Path, train_dir: Path, *, parent: Path | None, init: bool,
           resume: bool, tokenizer_dir, meta, make_loader: Callable) -> Run:
    """Checks, then the model on the device (sharded or wrapped), AdamW, the loader and the seeds."""
    import random

    import numpy as np
    import torch

    from lib.checkpoint import load_optimizer_state, storage_dtype
    from lib.distributed import compile_enabled, is_sharded, prepare_model
    from lib.model import build_model, count_parameters, load_model
    from lib.schedule import peak_lr

    tcfg = cfg.training
    accum = steps_accumulation(tcfg.total_batch_size, tcfg.device_batch_size, tcfg.seq_len, d.world_size)
    start = _start_point(cfg, d, data.info, parent, init, tokenizer_dir)
    tok_hash = check_tokenizer(data, start["tok_dir"])
    max_pos = getattr(start["hf_config"], "max_position_embeddings", None)
    if max_pos is not None and tcfg.seq_len > max_pos:
        raise ValueError(f"training.seq_len={tcfg.seq_len} exceeds the model's max_position_embeddings={max_pos}")
    memory = check_memory(start["hf_config"], tcfg, d)  # before the model is loaded
    if init:
        tok = start["tok"]
        model = build_model(cfg.model, tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id, seed=tcfg.seed)
    else:
        model = load_model(start["start_dir"], device=d.device)
    started_from = ("random init" if init else "fp32 master weights (master/)" if start["start_dir"] != parent
                    else f"stored weights ({storage_dtype('auto', parent)})")
    peak = peak_lr(start["original_lr"], start["lr_scale"])
    n_params = count_parameters(model)

    model.to(d.device)
    model.train()
    model.config.use_cache = False
    step_model, autocast = prepare_model(model, tcfg, d)
    optimizer = make_optimizer(model, tcfg, d.device, peak)  # after sharding: AdamW holds only this rank's shards
    optimizer_choice = tcfg.optimizer_state
    if not init and optimizer_choice == "inherit":
        state = load_optimizer_state(parent)
        if state is None:
            optimizer_choice = "fresh (parent has no optimizer.pt)"
            if d.is_main:
                log.warning("training.optimizer_state=inherit but %s has no optimizer.pt: starting fresh", parent)
        else:
            try:
                if is_sharded(tcfg, d.world_size):
                    from lib.distributed import load_full_optimizer_state

                    load_full_optimizer_state(model, optimizer, state)
                else:
                    optimizer.load_state_dict(state)
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{parent}/optimizer.pt does not match this model's parameters: {exc}") from None
            reset_hyperparameters(optimizer, tcfg, peak)
    sharded = is_sharded(tcfg, d.world_size)
    if d.is_main:
        extras = [("FSDP" if sharded else "DDP") if d.world_size > 1 else "",
                  "activation checkpointing" if tcfg.activation_checkpointing else "",
                  "compiled blocks" if compile_enabled(tcfg.compile, d.device.type) else ""]
        log.info("model %s: %.2fM parameters from %s, device %s, world %d, accumulation %d, peak lr %.3e, %d steps%s",
                 type(model).__name__, n_params / 1e6, started_from, d.device, d.world_size, accum, peak,
                 start["num_iterations"], "".join(f", {e}" for e in extras if e))

    loader = make_loader(data, tcfg.device_batch_size, tcfg.seq_len, d.rank, d.world_size, tokenizer_hash=tok_hash)
    random.seed(tcfg.seed + d.rank)
    np.random.seed((tcfg.seed + d.rank) % 2**32)
    torch.manual_seed(tcfg.seed + d.rank)
    return Run(cfg=cfg, d=d, data=data, out_dir=out_dir, train_dir=train_dir, init=init, parent=parent, resume=resume,
               meta=meta, tok_dir=start["tok_dir"], tok_hash=tok_hash, parent_meta=start["parent_meta"],
               start_dir=start["start_dir"], started_from=started_from, original_lr=start["original_lr"],
               lr_scale=start["lr_scale"], peak=peak, num_iterations=start["num_iterations"], accum=accum, memory=memory,
               model=model, step_model=step_model, autocast=autocast, optimizer=optimizer, optimizer_choice=optimizer_choice,
               loader=loader, sharded=sharded)


def resume_from_snapshot(run: Run) -> None:
    """Weights, AdamW, loader position, RNGs and history from the newest complete snapshot."""
    from lib import snapshot as snap

    d = run.d
    latest = snap.latest_complete(run.snapshot_dir)
    if latest is None:
        if d.is_main:
            log.warning("--resume: no complete snapshot in %s, starting from step 0", run.snapshot_dir)
        return
    s = snap.load(latest, d.rank, d.world_size, parallelism="fsdp" if run.sharded else "ddp")
    if run.sharded:
        from lib.distributed import load_sharded

        load_sharded(latest, run.model, run.optimizer, s["state"]["sharded"])
    else:
        from safetensors.torch import load_model as load_weights

        load_weights(run.model, str(s["model_file"]), device=str(d.device))
        run.optimizer.load_state_dict(s["optimizer"])
    run.loader.load_state_dict(s["loader"])
    snap.set_rng_state(s["rng"], s["rng_tensors"])
    run.step, run.history = s["step"], s["state"]["history"]
    if d.is_main:
        log.info("resumed from %s at step %d", latest, run.step)


def run_steps(run: Run, stop: "_StopFlag") -> str:
    """Optimizer steps until the last one ('done') or a stop request with a snapshot ('stopped')."""
    from lib.model import flops_per_token

    d, tcfg = run.d, run.tcfg
    if d.is_main:
        run.train_dir.mkdir(parents=True, exist_ok=True)
        run.snapshot_dir.mkdir(parents=True, exist_ok=True)
        _truncate_metrics(run.metrics_path, run.step)
    d.barrier()
    metrics_file = open(run.metrics_path, "a", encoding="utf-8") if d.is_main else None
    progress = _Progress(run.num_iterations, run.step, enabled=d.is_main)
    flops = flops_per_token(run.model, tcfg.seq_len)
    t_run, cpu_run = time.perf_counter(), time.process_time()
    elapsed_before, cpu_before = run.history["elapsed_s"], run.history.get("cpu_s", 0.0)
    status = "done"
    try:
        while run.step < run.num_iterations:
            t0, c0 = time.perf_counter(), time.process_time()

            def local_stop() -> str | None:
                over_time = tcfg.time_limit_s is not None and (elapsed_before + time.perf_counter() - t_run) > tcfg.time_limit_s
                return stop.reason or ("time limit" if over_time else None)

            record, stop_reason = train_step(run, local_stop)
            dt = time.perf_counter() - t0
            if metrics_file is not None:
                tok_s = record["tokens"] / dt
                record.update({"tokens_per_s": tok_s, "mfu_flops_per_s": tok_s * flops, "dt_s": dt, "cpu_s": time.process_time() - c0})
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                progress.update(record["step"], record["loss"], record["lr"], tok_s)
            run.history["elapsed_s"] = elapsed_before + time.perf_counter() - t_run
            # CPU seconds of this process: on a shared machine a steadier cost measure than wall time
            run.history["cpu_s"] = cpu_before + time.process_time() - cpu_run
            unfinished = run.step < run.num_iterations
            if unfinished and (run.step % tcfg.snapshot_every == 0 or stop_reason):
                save_snapshot(run)
            if stop_reason and unfinished:
                status = "stopped"
                if d.is_main:
                    log.warning("stopped at step %d/%d (%s); snapshot saved, continue with --resume", run.step, run.num_iterations, stop_reason)
                break
    finally:
        progress.close()
        if metrics_file is not None:
            metrics_file.close()
    return status


def train_step(run: Run, local_stop: Callable[[], str | None]) -> tuple[dict[str, Any], str | None]:
    """One optimizer step over `accum` micro-batches with the exact token-mean loss; returns the
    metrics record and the stop reason any rank gave after it (`local_stop()` on each; one
    collective decides for all)."""
    import torch
    import torch.nn.functional as F

    from lib.distributed import clip_grad_norm, gradient_sync
    from lib.schedule import lr_at

    d, tcfg, step = run.d, run.tcfg, run.step
    lr = lr_at(step, run.peak, tcfg.model_copy(update={"num_iterations": run.num_iterations}))
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    batches = [run.loader.next_batch() for _ in range(run.accum)]
    local_count = sum(int((y != -100).sum()) for _, y, _ in batches)
    (global_count,) = d.all_sum([float(local_count)])
    if global_count == 0:
        raise ValueError(f"step {step}: every target of the batch is masked (-100); the data in {run.data.path} yields no loss")
    # DDP and FSDP average gradients over ranks; × world turns that into the sum over all tokens
    scale = d.world_size / global_count
    loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
    src_tokens: dict[str, int] = {}
    for i, (x, y, per_source) in enumerate(batches):
        x = x.to(d.device, non_blocking=True)
        y = y.to(d.device, non_blocking=True)
        with gradient_sync(run.step_model, d, last_micro_batch=i == run.accum - 1):
            with run.autocast:
                logits = run.step_model(input_ids=x).logits
            # fp32 cross-entropy: bf16 log-softmax over a large vocab loses ~2 digits (seed 001)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), ignore_index=-100, reduction="sum")
            del logits  # nothing in the graph needs it: one batch × seq × vocab fewer during backward
            (loss * scale).backward()
        loss_sum += loss.detach()
        for name, n in per_source.items():
            src_tokens[name] = src_tokens.get(name, 0) + int(n)
    grad_norm = clip_grad_norm(run.model, tcfg.grad_clip) if tcfg.grad_clip > 0 else float("nan")
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)

    # one collective for the logged numbers and the stop decision of every rank
    gathered = d.gather_objects((float(loss_sum), src_tokens, local_stop()))
    step_loss = sum(g[0] for g in gathered) / global_count
    step_sources: dict[str, int] = {}
    for _, per_src, _ in gathered:
        for name, n in per_src.items():
            step_sources[name] = step_sources.get(name, 0) + n
    if not math.isfinite(step_loss):
        raise FloatingPointError(f"step {step}: loss is {step_loss}; lower training.lr_scale or check the data")
    history = run.history
    history["loss"].append(step_loss)
    history["tokens"] += tcfg.total_batch_size
    for name, n in step_sources.items():
        history["tokens_per_source"][name] = history["tokens_per_source"].get(name, 0) + n
    run.step += 1
    record = {"step": step, "loss": step_loss, "lr": lr, "grad_norm": grad_norm, "tokens": tcfg.total_batch_size,
              "tokens_per_source": step_sources, "valid_targets": int(global_count)}
    return record, next((g[2] for g in gathered if g[2]), None)


def save_snapshot(run: Run) -> None:
    """Every rank: its loader/RNG state and (FSDP) its shards into the temporary folder; rank 0:
    the full weights and AdamW (DDP), state.json, then the completion marker and the rename."""
    from lib import snapshot as snap

    d, step = run.d, run.step
    if d.is_main:
        snap.begin(run.snapshot_dir, step)
    d.barrier()
    tmp = snap.tmp_dir(run.snapshot_dir, step)
    snap.write_rank(tmp, d.rank, run.loader.state_dict())
    state = {"step": step, "world_size": d.world_size, "history": run.history, "parallelism": "fsdp" if run.sharded else "ddp"}
    if run.sharded:
        from lib.distributed import save_sharded

        state["sharded"] = save_sharded(tmp, run.model, run.optimizer)
        if d.is_main:
            snap.write_state(tmp, state)
    elif d.is_main:
        snap.write_shared(tmp, run.model, run.optimizer.state_dict(), state)
    d.barrier()
    if d.is_main:
        snap.commit(run.snapshot_dir, step, run.tcfg.keep_snapshots)
    d.barrier()


def finish(run: Run, status: str) -> dict[str, Any]:
    """The run's summary; when done, rank 0 writes the version folder (an FSDP model is gathered
    once, by every rank, into an unsharded copy first)."""
    d, tcfg, history = run.d, run.tcfg, run.history
    final_metrics = {
        "steps": run.step,
        "num_iterations": run.num_iterations,
        "final_loss": history["loss"][-1] if history["loss"] else None,
        "mean_loss_last_10": (sum(history["loss"][-10:]) / len(history["loss"][-10:])) if history["loss"] else None,
        "tokens": history["tokens"],
        "tokens_per_source": history["tokens_per_source"],
        "elapsed_s": history["elapsed_s"],
        "cpu_s": history.get("cpu_s"),
        "tokens_per_s": history["tokens"] / history["elapsed_s"] if history["elapsed_s"] > 0 else None,
    }
    if status == "done":
        model = run.model
        optimizer_state = None
        if run.sharded:
            from lib.distributed import gather_for_storage, gather_optimizer_state

            model = gather_for_storage(run.model, d)
            if tcfg.optimizer_state == "inherit":
                optimizer_state = gather_optimizer_state(run.model, run.optimizer, d)
        elif tcfg.optimizer_state == "inherit":
            optimizer_state = run.optimizer.state_dict()
        if d.is_main:
            _write_final_version(run, model, optimizer_state, final_metrics)
    d.barrier()
    return {"status": status, "step": run.step, "out": str(run.out_dir), "final_metrics": final_metrics}


def _write_final_version(run: Run, model, optimizer_state: dict | None, final_metrics: dict[str, Any]) -> None:
    from lib.checkpoint import MODEL_FILE, UpdateSurvival, materialize, storage_dtype, storage_seed, write_version
    from lib.distributed import compile_enabled

    cfg, tcfg, init, parent = run.cfg, run.tcfg, run.init, run.parent
    version_meta = {
        "parent_checkpoint": None if init else run.parent_meta.get("version", parent.name),
        "parent_path": None if init else str(parent.resolve()),
        "parent_digest": None if init else run.parent_meta.get("digest"),
        "consolidation_config": cfg.to_dict(),
        "memory_buffer_stats": {name: st for name, st in (run.data.info.get("sources") or {}).items() if st.get("kind") == "buffer"},
        "manifest_hash": run.data.info.get("manifest_hash"),
        "tokenizer_hash": run.tok_hash,
        "original_lr": run.original_lr,
        "lr_scale": run.lr_scale,
        "peak_lr": run.peak,
        "optimizer_state": "none (pre-training from scratch)" if init else run.optimizer_choice,
        "started_from": run.started_from,
        "activation_checkpointing": tcfg.activation_checkpointing,
        "compiled": compile_enabled(tcfg.compile, run.d.device.type),
        "parallelism": "fsdp" if run.sharded else "ddp",
        "memory_estimate": run.memory,
        "final_metrics": final_metrics,
        "world_size": run.d.world_size,
        "data_dir": str(run.data.path.resolve()),
        "training_kind": "pretrain" if init else "consolidation",
    }
    version_meta.update(run.meta or {})
    if getattr(getattr(cfg, "workspace", None), "root", None):
        from lib.lineage import portable_tree

        # paths inside the workspace are stored relative to its root: the folder can move
        version_meta = portable_tree(version_meta, cfg.workspace.root)
    model.config.use_cache = True  # off for training only; a served version generates with a KV cache
    dtype = storage_dtype(cfg.checkpoints.dtype, None if init else parent)
    # how much of tonight's update the stored weights carry, against where the night started
    survival = None if init else UpdateSurvival(materialize(run.start_dir) / MODEL_FILE, materialize(parent) / MODEL_FILE)
    version_name = str(version_meta.get("version") or run.out_dir.name)
    write_version(run.out_dir, model, tokenizer_dir=run.tok_dir, meta=version_meta, optimizer_state=optimizer_state, overwrite=run.resume,
                  dtype=dtype, rounding=cfg.checkpoints.rounding, seed=storage_seed(tcfg.seed, version_name),
                  master=cfg.checkpoints.master_weights, survival=survival)
    log.info("wrote version %s (final loss %.4f)", run.out_dir, final_metrics["final_loss"] or float("nan"))

def _truncate_metrics(path: Path, start_step: int) -> None:
    """After a crash the file may hold steps past the snapshot (or a torn last line): drop them."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("step", -1) < start_step:
            keep.append(line)
    write_text(path, "".join(f"{line}\n" for line in keep))


# -- entry point -----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lib.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, help="YAML/TOML config file (lib.config).")
    p.add_argument("--preset", default="default", help="Config preset under the file: default or tiny.")
    p.add_argument("--set", action="append", default=[], help="Override section.key=value (repeatable).")
    p.add_argument("--data", type=Path, required=True, help="Prepared data folder (data.json, manifest, shards).")
    p.add_argument("--out", type=Path, required=True, help="Version folder to write (a Hugging Face folder + meta.json).")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--parent", type=Path, help="Version folder to continue from (any AutoModelForCausalLM folder).")
    who.add_argument("--init", action="store_true", help="Pre-train a new model from scratch (v0) from model.* settings.")
    p.add_argument("--resume", action="store_true", help="Continue from the newest complete snapshot.")
    p.add_argument("--tokenizer", type=Path, help="Tokenizer folder (default: the parent's; --init: tokenizer.path).")
    p.add_argument("--meta", type=Path, help="JSON file of extra meta.json fields (version, memory_buffer_stats, ...).")
    p.add_argument("--train-dir", type=Path, help="Where metrics.jsonl and snapshots/ go (default: DATA/train).")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from lib.config import ConfigError, load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    if int(os.environ.get("RANK", "0")) != 0:
        logging.getLogger().setLevel(logging.WARNING)
    try:
        cfg = load_config(args.config, preset=args.preset, overrides=args.set)
        meta = json.loads(args.meta.read_text(encoding="utf-8")) if args.meta else None
        result = train(cfg, args.data, args.out, parent=args.parent, init=args.init, resume=args.resume,
                       tokenizer_dir=args.tokenizer, meta=meta, train_dir=args.train_dir)
    except (ConfigError, ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result["status"] == "done" else EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(main())
