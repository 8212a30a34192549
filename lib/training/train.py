"""The consolidation trainer: continue pre-training a Hugging Face causal LM on a prepared mix.

Run as `python -m lib.training.train --config FILE --data DIR --out DIR (--parent VERSION | --init) [--resume]`
or under `torchrun --nproc-per-node N -m lib.training.train ...` (`lib.training.distributed.torchrun_command` builds that line).

- `train()` reads as its stages: `set_up` (lib/training/setup.py) → `resume_from_snapshot` →
  `training_loop` (`train_step`, `save_snapshot`) → `finish`; a `Run` holds what they share.
- Setup: gloo on CPU, nccl on CUDA (lib.training.distributed); the data's tokenizer hash must equal the
  parent's (v0: the given tokenizer's); memory per rank estimated (lib.training.footprint) before the model
  is loaded, and a run that cannot fit refused with the knobs to turn; the parent loaded straight
  into fp32 master weights on the device (from its master/ when it keeps one); then, per
  `training.*`, activation checkpointing and torch.compile per block, and DDP or FSDP2
  (`parallelism`, lib.training.distributed.prepare_model). bf16 compute on CUDA (autocast with DDP, the
  FSDP mixed-precision policy with FSDP) with the logits cast to fp32 before the cross-entropy
  (bf16 log-softmax over a large vocabulary loses precision), fp32 on CPU with deterministic algorithms so a resumed run is bit-identical.
- `device_batch_size: auto`: the largest micro-batch that fits the device's free memory by the
  estimate (lib.training.footprint.choose_device_batch), resolved before the model is loaded,
  logged, kept by a resumed run from its snapshot.
- One step = `total_batch_size / (device_batch_size × seq_len × world)` micro-batches per rank.
  The micro-batches of a step are fetched first, the valid targets (≠ -100) counted over all
  ranks, and each micro-batch's summed loss divided by that global count: the gradient is the
  exact mean over the step's tokens however they are split across ranks and micro-batches, so
  2 processes and 1 process with twice the accumulation follow the same loss curve. One host
  sync per step (the loss and gradient norm, read after the optimizer step is queued); counts
  and stop flags over gloo on the host; batches to the GPU through pinned memory.
- LR = peak × `lib.training.schedule.lr_multiplier(step)`, peak = the parent's `original_lr` × lr_scale
  (v0: model.pretrain_lr). A parent without original_lr is refused with what it is and typical
  values, never guessed. AdamW (fused on CUDA), weight decay on matrices only, grad clipping.
  Optimizer state fresh or inherited from the parent's optimizer.pt, LRs reset (recorded in meta),
  and the implementation flags reset to this device's (a state written on the CPU would make a
  CUDA run single-tensor).
- Snapshots every `snapshot_every` steps and on SIGTERM / past `time_limit_s` (lib.training.snapshot;
  with FSDP each rank writes its own shard, lib.training.distributed.save_sharded); `--resume` continues
  from the newest complete one. An FSDP model is gathered once at the end, onto rank 0. Rank 0 writes metrics.jsonl (loss, lr,
  tokens/s and MFU per GPU, tokens per source; lib.training.throughput) and, at the end, the version folder via lib.checkpoints.checkpoint: in the
  parent's dtype, rounded per `checkpoints.rounding`, fp32 master weights beside it, and in
  meta.json how much of the night's update the stored weights kept.

Trade-off: fetching the whole step's micro-batches before the first forward holds
accum × B × (T+1) × 16 bytes (4 MB at the default 0.5 M-token step) and costs one 8-byte
all-reduce per step, in exchange for a loss normalisation that is independent of the split.
"""

from __future__ import annotations

# torch, transformers and safetensors.torch are imported inside functions: importing this module must not cost their ~6 s
import argparse
import json
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from lib.checkpoints.checkpoint import MODEL_FILE, materialize, storage_dtype, write_version
from lib.checkpoints.precision import UpdateSurvival, storage_seed
from lib.config import ConfigError, load_config
from lib.faults import armed, fault_point
from lib.data.prepared import PreparedData  # what --data holds: data.json, manifest, shards
from lib.files import write_text
from lib.training import snapshot as snap
from lib.training.distributed import (
    Dist, clip_grad_norm, compile_enabled, gather_for_storage, gather_optimizer_state, gradient_sync,
    load_sharded, save_sharded,
)
from lib.training.schedule import lr_at
from lib.training.setup import Run, apply_optimizer_flags, default_loader, set_up
from lib.training.throughput import Meter, model_flops_per_token, peak_flops
from lib.workspace import RunDir
from lib.registry.records import portable_tree

log = logging.getLogger("lib.training.train")

EXIT_STOPPED = 3  # stopped early (SIGTERM or time limit) with a snapshot saved: resume with --resume
























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

    if (parent is None) == (not init):
        raise ValueError("give exactly one of --parent VERSION_DIR (consolidation) or --init (pre-train v0 from scratch)")
    out_dir = Path(out_dir)
    train_dir = Path(train_dir) if train_dir else RunDir(Path(data_dir)).train
    if out_dir.exists() and not resume:
        raise FileExistsError(f"--out {out_dir} already exists; choose a new version folder (or --resume an interrupted run)")
    data = PreparedData.open(data_dir)

    d = Dist(cfg.training.device, timeout_s=cfg.training.collective_timeout_s)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    was_filling = torch.utils.deterministic.fill_uninitialized_memory
    was_threads = torch.get_num_threads()
    previous_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if d.device.type == "cpu":
            # bit-exact resume needs the same kernels in the same order every time; not the NaN
            # fill of every new tensor that deterministic mode adds (a debugging aid: it memsets
            # each step's activations and gradients, ~7% of a 95 M model's CPU step)
            torch.use_deterministic_algorithms(True)
            torch.utils.deterministic.fill_uninitialized_memory = False
            if cfg.training.cpu_threads:
                torch.set_num_threads(cfg.training.cpu_threads)
        run = set_up(cfg, d, data, out_dir, train_dir, parent=Path(parent) if parent else None, init=init,
                     resume=resume, tokenizer_dir=tokenizer_dir, meta=meta, make_loader=make_loader)
        if resume:
            resume_from_snapshot(run)
        stop = _StopFlag()
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, stop)
        status = training_loop(run, stop)
        return finish(run, status)
    finally:
        # leave the process as found: an in-process caller (tests, a notebook) keeps its settings
        torch.use_deterministic_algorithms(was_deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = was_filling
        torch.set_num_threads(was_threads)
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, previous_sigterm)
        d.close()






def resume_from_snapshot(run: Run) -> None:
    """Weights, AdamW, loader position, RNGs and history from the newest complete snapshot."""
    d = run.d
    latest = snap.latest_complete(run.snapshot_dir)
    if latest is None:
        if d.is_main:
            log.warning("--resume: no complete snapshot in %s, starting from step 0", run.snapshot_dir)
        return
    s = snap.load(latest, d.rank, d.world_size, parallelism="fsdp" if run.sharded else "ddp")
    if run.sharded:
        load_sharded(latest, run.model, run.optimizer, s["state"]["sharded"])
    else:
        from safetensors.torch import load_model as load_weights

        load_weights(run.model, str(s["model_file"]), device=str(d.device))
        run.optimizer.load_state_dict(s["optimizer"])
    apply_optimizer_flags(run.optimizer, d.device)  # a snapshot written on another device keeps this run's AdamW
    run.loader.load_state_dict(s["loader"])
    snap.set_rng_state(s["rng"], s["rng_tensors"])
    run.step, run.history = s["step"], s["state"]["history"]
    if d.is_main:
        log.info("resumed from %s at step %d", latest, run.step)


def training_loop(run: Run, stop: "_StopFlag") -> str:
    """Optimizer steps until the last one ('done') or a stop request with a snapshot ('stopped')."""
    d, tcfg = run.d, run.tcfg
    if d.is_main:
        run.train_dir.mkdir(parents=True, exist_ok=True)
        run.snapshot_dir.mkdir(parents=True, exist_ok=True)
        _truncate_metrics(run.metrics_path, run.step)
    d.barrier()
    metrics_file = open(run.metrics_path, "a", encoding="utf-8") if d.is_main else None
    progress = _Progress(run.num_iterations, run.step, enabled=d.is_main)
    run.meter = throughput_meter(run)
    t_run, cpu_run = time.perf_counter(), time.process_time()
    elapsed_before, cpu_before = run.history["elapsed_s"], run.history.get("cpu_s", 0.0)
    status = "done"
    hold_steps = armed("train-step")  # looked up once, not every step
    try:
        while run.step < run.num_iterations:
            t0, c0 = time.perf_counter(), time.process_time()

            def local_stop() -> str | None:
                over_time = tcfg.time_limit_s is not None and (elapsed_before + time.perf_counter() - t_run) > tcfg.time_limit_s
                return stop.reason or ("time limit" if over_time else None)

            record, stop_reason = train_step(run, local_stop)
            dt = time.perf_counter() - t0
            record.update(run.meter.step(record["tokens"], dt, run.history))  # tokens_per_s, mfu (per GPU), warmup
            if metrics_file is not None:
                record.update({"dt_s": dt, "cpu_s": time.process_time() - c0})
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                progress.update(record["step"], record["loss"], record["lr"], record["tokens_per_s"])
            if hold_steps:
                fault_point("train-step", until=lambda: stop.reason)  # tests: a SIGTERM lands mid-run
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
    collective decides for all). The host waits for the GPU once per step: when it reads the
    step's loss and gradient norm, after the optimizer step is queued; the counts and stop flags
    travel over gloo on the host."""
    import torch
    import torch.nn.functional as F

    d, tcfg, step = run.d, run.tcfg, run.step
    lr = lr_at(step, run.peak, tcfg.model_copy(update={"num_iterations": run.num_iterations}))
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    batches = [run.loader.next_batch() for _ in range(run.accum)]
    local_count = sum(int((y != -100).sum()) for _, y, _ in batches)  # CPU tensors: no device sync
    (global_count,) = d.all_sum([float(local_count)])
    if global_count == 0:
        raise ValueError(f"step {step}: every target of the batch is masked (-100); the data in {run.data.path} yields no loss")
    # DDP and FSDP average gradients over ranks; × world turns that into the sum over all tokens
    scale = d.world_size / global_count
    loss_sum = torch.zeros((), dtype=torch.float64, device=d.device)
    src_tokens: dict[str, int] = {}
    for i, (x, y, per_source) in enumerate(batches):
        x = _to_device(x, d.device)
        y = _to_device(y, d.device)
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
    grad_norm = clip_grad_norm(run.model, tcfg.grad_clip) if tcfg.grad_clip > 0 else None
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)

    step_sources, stop_reason = _step_collectives(run, src_tokens, local_stop())
    d.all_sum_tensor(loss_sum)
    nan = torch.full((), float("nan"), dtype=torch.float64, device=d.device)
    loss_total, norm = torch.stack([loss_sum, nan if grad_norm is None else grad_norm.to(torch.float64)]).tolist()  # the one sync
    step_loss = loss_total / global_count
    if not math.isfinite(step_loss):
        raise FloatingPointError(f"step {step}: loss is {step_loss}; lower training.lr_scale or check the data")
    history = run.history
    history["loss"].append(step_loss)
    history["tokens"] += tcfg.total_batch_size
    for name, n in step_sources.items():
        history["tokens_per_source"][name] = history["tokens_per_source"].get(name, 0) + n
    run.step += 1
    record = {"step": step, "loss": step_loss, "lr": lr, "grad_norm": norm, "tokens": tcfg.total_batch_size,
              "tokens_per_source": step_sources, "valid_targets": int(global_count)}
    return record, stop_reason


def _to_device(t, device):
    """A CPU batch onto the device: through pinned memory on CUDA, so the copy is asynchronous
    (a non_blocking copy from pageable memory is a synchronous one)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t


def _step_collectives(run: Run, src_tokens: dict[str, int], reason: str | None) -> tuple[dict[str, int], str | None]:
    """One host-side sum over the ranks (gloo; no GPU sync): the step's tokens per source and
    who asked to stop, and why."""
    d = run.d
    names = getattr(run.loader, "source_names", None)
    if names is None:  # a loader that does not list its sources up front: exchange the dicts
        gathered = d.gather_objects((src_tokens, reason))
        total: dict[str, int] = {}
        for per_src, _ in gathered:
            for name, n in per_src.items():
                total[name] = total.get(name, 0) + n
        return total, reason or next((g[1] for g in gathered if g[1]), None)
    names = list(names)
    unknown = set(src_tokens) - set(names)
    if unknown:
        raise ValueError(f"the loader yielded tokens of sources {sorted(unknown)} it does not list in source_names {names}")
    signalled, over_time = (reason or "").startswith("signal"), reason == "time limit"
    sums = d.all_sum([float(signalled), float(over_time)] + [float(src_tokens.get(n, 0)) for n in names])
    total = {name: int(n) for name, n in zip(names, sums[2:]) if n}
    if reason is None and (sums[0] or sums[1]):
        reason = "signal on another rank" if sums[0] else "time limit"
    return total, reason


def torch_dtype_of(device):
    """The compute dtype the meter times a device's peak in: bf16 on CUDA, fp32 on CPU."""
    import torch

    return torch.bfloat16 if device.type == "cuda" else torch.float32


def throughput_meter(run: Run):
    """Tokens/s and MFU per step for this run: model FLOPs per token, and one device's peak in
    the compute dtype (bf16 on CUDA, fp32 on CPU) from the table or a timed matmul."""
    peak, source = peak_flops(run.d.device, torch_dtype_of(run.d.device))
    return Meter(model_flops_per_token(run.model, run.tcfg.seq_len), run.d.world_size, peak, source,
                 planned_steps=run.num_iterations - run.step)


def save_snapshot(run: Run) -> None:
    """Every rank: its loader/RNG state and (FSDP) its shards into the temporary folder; rank 0:
    the full weights and AdamW (DDP), state.json, then the completion marker and the rename."""
    d, step = run.d, run.step
    if d.is_main:
        snap.begin(run.snapshot_dir, step)
    d.barrier()
    tmp = snap.tmp_dir(run.snapshot_dir, step)
    snap.write_rank(tmp, d.rank, run.loader.state_dict())
    state = {"step": step, "world_size": d.world_size, "history": run.history, "parallelism": "fsdp" if run.sharded else "ddp",
             # what training.device_batch_size=auto chose: a resumed run keeps it (the loader counts in these micro-batches)
             "device_batch_size": run.tcfg.device_batch_size, "activation_checkpointing": run.tcfg.activation_checkpointing}
    if run.sharded:
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
        # all-in: compile, snapshots and the steps' own time
        "wall_tokens_per_s": history["tokens"] / history["elapsed_s"] if history["elapsed_s"] > 0 else None,
        "device_batch_size": tcfg.device_batch_size,
        "accumulation": run.accum,
    }
    if d.device.type == "cpu":
        import torch

        final_metrics["cpu_threads"] = torch.get_num_threads()   # what the throughput figures were measured with
    # tokens_per_s and mfu over the steps after warm-up (lib.training.throughput)
    meter = run.meter or throughput_meter(run)
    meter.measure_peak_again(d.device, torch_dtype_of(d.device))
    final_metrics.update(meter.summary(history))
    if d.device.type == "cuda":  # the steps' peak, before the final version is written (this rank's GPU)
        import torch

        final_metrics["cuda_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(d.device))
        final_metrics["cuda_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(d.device))
    if status == "done":
        model = run.model
        optimizer_state = None
        if run.sharded:
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
    p = argparse.ArgumentParser(prog="python -m lib.training.train", description=__doc__.split("\n\n")[0])
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
