"""The set-up of a training process: what a night trains from, with what, and whether it fits,
before its first step (lib/training/train.py runs the steps).

- `set_up` builds the `Run` the steps share: the start point (`_start_point`: tokenizer, HF config,
  original LR), the step's accumulation (`steps_accumulation`), the memory check (`check_memory`,
  refused with the knobs to turn before the model is loaded), the model loaded into fp32 master
  weights on the device and wrapped for DDP or FSDP2, AdamW (`make_optimizer`: weight decay on
  matrices only; fused on CUDA) fresh or inherited with its LRs reset, and the loader.
- A parent without `original_lr` is refused with what it is and typical values, never guessed
  (`require_original_lr`).
- The data's tokenizer hash must equal the model's (`check_tokenizer`), or training would learn
  garbage ids.

Trade-off: the memory check estimates instead of trying (lib/training/footprint.py says how
close): a run that cannot fit is refused in seconds, before the model is loaded, instead of
failing out of memory after it.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lib.checkpoints.checkpoint import load_optimizer_state, materialize, read_meta, storage_dtype
from lib.data.loader import TrainLoader, validate
from lib.data.prepared import PreparedData  # what --data holds: data.json, manifest, shards
from lib.data.tokenizer import load_tokenizer
from lib.training.distributed import (
    Dist, compile_enabled, is_sharded, load_full_optimizer_state, prepare_model, warn_cpu_fallback,
)
from lib.training.footprint import (
    GiB, available_memory, check_fits, choose_device_batch, estimate_training_memory, resident_bytes,
)
from lib.training.model import build_model, count_parameters, llama_config, load_model, training_start
from lib.training.schedule import peak_lr
from lib.training import snapshot as snap

log = logging.getLogger("lib.training.train")


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
    (training.memory_check=false skips the refusal, not the estimate). `tcfg.device_batch_size`
    must be a number here (`size_micro_batch` resolves auto)."""
    device = d.device.type
    available, sharing, runtime = _memory_budget(d)
    est = estimate_training_memory(hf_config, tcfg, d.world_size, device, runtime_bytes=runtime or None)
    if d.is_main:
        log.info("memory per rank, estimated: %.2f GiB (%s) of %.2f GiB %s",
                 est.total / GiB, ", ".join(f"{k} {v / GiB:.2f}" for k, v in est.components.items()),
                 available / GiB, "on the GPU" if device == "cuda" else f"available RAM for {sharing} rank(s)")
    host = available_memory("cpu") if device == "cuda" and d.is_main else None  # rank 0 writes the final version
    problems = check_fits(est, available, ranks_sharing=sharing, training=tcfg, host_available=host)
    if problems and tcfg.memory_check:
        raise InsufficientMemory("\n".join(problems))
    return {**est.to_dict(), "available": available, "fits": not problems}


def _memory_budget(d: "Dist") -> tuple[int, int, int | None]:
    """(bytes available to this rank's device, ranks sharing it, this process's resident bytes on CPU)."""
    if d.device.type == "cuda":
        return available_memory("cuda", d.local_rank), 1, None  # the GPU's free memory
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    runtime = resident_bytes()
    # MemAvailable excludes what the ranks of this machine already hold; count that back in
    return available_memory("cpu") + runtime * local, local, runtime


def size_micro_batch(cfg, hf_config, d: "Dist", snapshot_dir: Path, resume: bool) -> tuple[Any, dict[str, Any] | None]:
    """training.device_batch_size=auto resolved: the config with the micro-batch (and activation
    checkpointing) `lib.training.footprint.choose_device_batch` picks for this device's free memory, and
    what it chose (None when the batch was given). A resumed run keeps its snapshot's choice:
    the loader's position is counted in micro-batches of that size."""
    tcfg = cfg.training
    if tcfg.device_batch_size != "auto":
        return cfg, None

    chosen = None
    if resume:
        latest = snap.latest_complete(snapshot_dir)
        if latest is not None:
            state = json.loads((latest / "state.json").read_text(encoding="utf-8"))
            if state.get("device_batch_size") is not None:
                chosen = {"device_batch_size": int(state["device_batch_size"]),
                          "activation_checkpointing": bool(state.get("activation_checkpointing", tcfg.activation_checkpointing)),
                          "from": f"the snapshot {latest.name}"}
    if chosen is None:
        available, sharing, runtime = _memory_budget(d)
        try:
            choice = choose_device_batch(hf_config, tcfg, d.world_size, d.device.type, available, ranks_sharing=sharing,
                                         runtime_bytes=runtime or None)
        except ValueError as exc:
            if tcfg.memory_check:
                raise InsufficientMemory(str(exc)) from None
            # training.memory_check=false: try the smallest anyway, as a given batch would be tried
            chosen = {"device_batch_size": 1, "activation_checkpointing": True,
                      "from": "nothing fits by the estimate; training.memory_check=false tries the smallest"}
        else:
            chosen = {"device_batch_size": choice.device_batch_size, "activation_checkpointing": choice.activation_checkpointing,
                      "from": choice.describe()}
    # every rank must train the same micro-batch: the smallest any rank chose
    if d.world_size > 1:
        gathered = d.gather_objects((chosen["device_batch_size"], chosen["activation_checkpointing"]))
        smallest = min(gathered)
        chosen.update(device_batch_size=smallest[0], activation_checkpointing=any(g[1] for g in gathered))
    if d.is_main:
        log.info("training.device_batch_size=auto: %d sequences per micro-batch%s (%s)", chosen["device_batch_size"],
                 ", activation checkpointing on" if chosen["activation_checkpointing"] else "", chosen["from"])
    new_tcfg = tcfg.model_copy(update={"device_batch_size": chosen["device_batch_size"],
                                       "activation_checkpointing": chosen["activation_checkpointing"]})
    return cfg.model_copy(update={"training": new_tcfg}), chosen


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
    return load_tokenizer(folder).hash


def check_tokenizer(data: PreparedData, tokenizer_dir: Path) -> str:
    """The data was tokenized with the model's tokenizer, or training would learn garbage ids:
    the data area's `validate` checks data.json and every shard against the model's hash."""
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


def optimizer_flags(device) -> dict[str, Any]:
    """AdamW's implementation switches for `device`: fused on CUDA (one kernel for all
    parameters: ~10% of a small model's step time), the single-tensor path on CPU (the same
    results on every resume)."""
    if device.type == "cuda":
        return {"fused": True, "foreach": None, "capturable": False}
    return {"fused": None, "foreach": False, "capturable": False}


def make_optimizer(model, tcfg, device, lr: float):
    import torch

    kwargs: dict[str, Any] = {"lr": lr, "betas": tuple(tcfg.adam_betas), "eps": 1e-8}
    kwargs.update({k: v for k, v in optimizer_flags(device).items() if k != "capturable"})
    return torch.optim.AdamW(param_groups(model, tcfg.weight_decay), **kwargs)


def apply_optimizer_flags(optimizer, device) -> None:
    """After `load_state_dict` (an inherited optimizer.pt, a snapshot): the saved groups'
    fused/foreach flags replaced by this run's, and each parameter's `step` counter moved where
    that implementation keeps it (fused: on the parameter's device; single-tensor: the CPU). A
    CPU-written state would otherwise make a CUDA run use the slow single-tensor AdamW, and a
    CUDA-written one a CPU run fused, which breaks bit-exact resume."""
    import torch

    flags = optimizer_flags(device)
    on_device = bool(flags["fused"] or flags["capturable"])
    for group in optimizer.param_groups:
        group.update(flags)
        for p in group["params"]:
            st = optimizer.state.get(p)
            if st and torch.is_tensor(st.get("step")):
                st["step"] = st["step"].to(device=p.device if on_device else "cpu", dtype=torch.float32)


def reset_hyperparameters(optimizer, tcfg, lr: float, device=None) -> None:
    """After loading an inherited state: this run's LR, betas and decay, not the parent's, and
    (with `device`) this run's AdamW implementation (`apply_optimizer_flags`)."""
    for i, group in enumerate(optimizer.param_groups):
        group["lr"] = lr
        group["initial_lr"] = lr
        group["betas"] = tuple(tcfg.adam_betas)
        group["weight_decay"] = tcfg.weight_decay if i == 0 else 0.0
    if device is not None:
        apply_optimizer_flags(optimizer, device)


def default_loader(data: PreparedData, batch_size, seq_len, rank, world_size, tokenizer_hash=None):
    return TrainLoader(data, batch_size, seq_len, rank=rank, world_size=world_size, tokenizer_hash=tokenizer_hash)


# -- the training run ------------------------------------------------------------------------------
@dataclass
class Run:
    """Everything one training process holds: what set_up built, what the steps advance."""

    cfg: Any
    d: Dist
    data: PreparedData    # the prepared data folder (lib/data/prepared.py): data.json read, manifest there
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
    meter: Any = None     # lib.training.throughput.Meter, made when the steps start
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


def _start_point(cfg, d: Dist, data_info: dict, parent: Path | None, init: bool, tokenizer_dir) -> dict[str, Any]:
    """Where the run starts: tokenizer, HF config, original LR and steps; nothing loaded yet."""
    tcfg = cfg.training
    if init:
        tok_dir = Path(tokenizer_dir or cfg.tokenizer.path or data_info.get("tokenizer_dir") or "")
        if not tok_dir.is_absolute() and not tokenizer_dir and not cfg.tokenizer.path and data_info.get("tokenizer_dir"):
            tok_dir = Path(cfg.workspace.root) / tok_dir  # data.json stores it relative to the workspace
        if not (tok_dir / "tokenizer.json").is_file():
            raise FileNotFoundError(f"--init needs a tokenizer folder with tokenizer.json (--tokenizer or tokenizer.path); got {str(tok_dir)!r}")

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
    import torch

    tcfg = cfg.training
    if tcfg.device_batch_size != "auto":
        steps_accumulation(tcfg.total_batch_size, tcfg.device_batch_size, tcfg.seq_len, d.world_size)  # fail early
    start = _start_point(cfg, d, data.info, parent, init, tokenizer_dir)
    tok_hash = check_tokenizer(data, start["tok_dir"])
    max_pos = getattr(start["hf_config"], "max_position_embeddings", None)
    if max_pos is not None and tcfg.seq_len > max_pos:
        raise ValueError(f"training.seq_len={tcfg.seq_len} exceeds the model's max_position_embeddings={max_pos}")
    cfg, auto_batch = size_micro_batch(cfg, start["hf_config"], d, train_dir / "snapshots", resume)  # before the model is loaded
    tcfg = cfg.training
    accum = steps_accumulation(tcfg.total_batch_size, tcfg.device_batch_size, tcfg.seq_len, d.world_size)
    memory = check_memory(start["hf_config"], tcfg, d)  # before the model is loaded
    if auto_batch is not None:
        memory["auto_batch"] = auto_batch
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
                    load_full_optimizer_state(model, optimizer, state)
                else:
                    optimizer.load_state_dict(state)
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{parent}/optimizer.pt does not match this model's parameters: {exc}") from None
            reset_hyperparameters(optimizer, tcfg, peak, d.device)
    sharded = is_sharded(tcfg, d.world_size)
    if d.is_main:
        warn_cpu_fallback(d.cpu_fallback, n_params)
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
