"""Processes, sharding and sharded snapshots of a training run: everything that knows about ranks.

- `torchrun_command` builds the launch line: `--standalone` on one node; on several, every node
  runs the same line with its own `--node-rank` and a c10d rendezvous at `--rdzv-endpoint`;
  `--shutdown-timeout` gives the ranks time to write their SIGTERM snapshot
  (`snapshot_shutdown_timeout`: 12 bytes per parameter at 100 MB/s + 2 minutes; torchrun's
  default of 30 s would SIGKILL a 1 B model's snapshot half-written).
- `Dist` is this process's rank, world size and device: gloo on CPU, NCCL on CUDA (one GPU per
  local rank), the process group's timeout from training.collective_timeout_s (NCCL's default
  of 10 minutes is shorter than rank 0 alone writing a multi-GB version while the others wait),
  and on CUDA a second, gloo group for the step's host-side numbers (counts, stop flags) so they
  never wait for the GPU. Its collectives are no-ops on a lone process. `resolve_device`:
  training.device=cuda without a usable GPU is an error that says why; auto falls back to the
  CPU with a warning (`warn_cpu_fallback`, once the model is built): a banner for a model sized
  for a GPU, one line for one the CPU trains in minutes (the tiny preset, `make demo`).
- `prepare_model` turns the loaded fp32 model into what the step loop calls, in torchtitan's
  order: activation checkpointing per block, then `torch.compile` per block (`module.compile()`:
  parameter names stay as they were), then either DDP or FSDP2: `fully_shard` on each
  transformer block, then on the root (embeddings, final norm, lm_head), over a mesh on
  training.device (without one, fully_shard puts the shards on CUDA on any host with a GPU). On CUDA FSDP gathers
  bf16 parameters for compute and reduces gradients in fp32 (MixedPrecisionPolicy); the sharded
  parameters AdamW updates stay fp32 master weights. On CPU no policy: fp32 throughout.
- Sharded snapshots (`save_sharded` / `load_sharded`): `torch.distributed.checkpoint` with its
  Hugging Face storage, each rank writing its own safetensors shard of the model and of AdamW's
  state (flattened to `state.<param>.exp_avg` keys); the optimizer's plain numbers (betas, eps,
  LR) go to JSON. No pickle anywhere, unlike DCP's default `.metadata` file.
- `gather_for_storage` collects the full fp32 state dict on rank 0 once, at the end, into an
  ordinary (unsharded) copy of the model on the CPU that lib.checkpoints.checkpoint writes like any other.
- `load_full_optimizer_state` / `gather_optimizer_state`: a version's optimizer.pt (unsharded,
  indexed by the param groups' order) into the shards, and the shards back into that layout, so
  ddp and fsdp nights read each other's optimizer state (training.optimizer_state=inherit).

Trade-off: FSDP reduce-scatters every micro-batch's gradients instead of accumulating them
unsharded locally (DDP's `no_sync`): one collective per micro-batch, in exchange for gradients
that stay sharded (1/world of the memory) through the whole accumulation. Measured on CPU:
bench/bench_fsdp.py. The gathered copy at the end costs rank 0 one fp32 model of host memory.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from datetime import timedelta

from lib.training.model import enable_activation_checkpointing

log = logging.getLogger(__name__)

PARALLELISMS = ("ddp", "fsdp")


# -- the launch line -----------------------------------------------------------------------------
def torchrun_command(
    config_path: str | Path | None,
    data_dir: str | Path,
    out_dir: str | Path,
    parent: str | Path | None = None,
    init: bool = False,
    resume: bool = False,
    nproc_per_node: int = 1,
    nnodes: int = 1,
    *,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    meta: str | Path | None = None,
    tokenizer: str | Path | None = None,
    overrides: list[str] | None = None,
    preset: str | None = None,
    python: str | None = None,
    train_dir: str | Path | None = None,
    shutdown_timeout_s: int | None = None,
) -> list[str]:
    """argv of `python -m torch.distributed.run ... -m lib.training.train ...`: standalone on one node; on
    `nnodes` > 1 a c10d rendezvous at `rdzv_endpoint` (host:port of the first node), and this
    node's `node_rank` (0 on the node at the endpoint)."""
    if parent is None and not init:
        raise ValueError("torchrun_command needs a parent version (parent=...) or init=True for a model from scratch")
    if parent is not None and init:
        raise ValueError("torchrun_command: give either parent or init=True, not both")
    if nnodes < 1 or nproc_per_node < 1:
        raise ValueError(f"torchrun_command: nnodes ({nnodes}) and nproc_per_node ({nproc_per_node}) must be at least 1")
    cmd = [python or sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={int(nproc_per_node)}"]
    if shutdown_timeout_s is not None:
        # after SIGTERM torchrun SIGKILLs the ranks after this long (its default: 30 s); they need
        # it to write the snapshot (snapshot_shutdown_timeout)
        cmd.append(f"--shutdown-timeout={int(shutdown_timeout_s)}")
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        if not rdzv_endpoint:
            raise ValueError(f"multi-node torchrun (nnodes={nnodes}) needs a rendezvous endpoint host:port that every node "
                             f"reaches (training.rdzv_endpoint, or the deployment's rdzv_endpoint job variable)")
        if node_rank is not None and not 0 <= int(node_rank) < nnodes:
            raise ValueError(f"node_rank={node_rank} is outside 0..{nnodes - 1} for nnodes={nnodes}")
        cmd += [f"--nnodes={int(nnodes)}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
                f"--rdzv-id={rdzv_id or 'consolidation'}"]
        if node_rank is not None:
            cmd.append(f"--node-rank={int(node_rank)}")
    cmd += ["-m", "lib.training.train"] + (["--config", str(config_path)] if config_path is not None else [])
    cmd += ["--data", str(data_dir), "--out", str(out_dir)]
    cmd += ["--init"] if init else ["--parent", str(parent)]
    if resume:
        cmd.append("--resume")
    if meta is not None:
        cmd += ["--meta", str(meta)]
    if tokenizer is not None:
        cmd += ["--tokenizer", str(tokenizer)]
    if preset is not None:
        cmd += ["--preset", preset]
    for item in overrides or []:
        cmd += ["--set", item]
    if train_dir is not None:
        cmd += ["--train-dir", str(train_dir)]
    return cmd


def snapshot_shutdown_timeout(num_parameters: int, configured: int | None = None) -> int:
    """Seconds the ranks get after SIGTERM (torchrun --shutdown-timeout): training.shutdown_timeout_s
    when set, else the snapshot's fp32 weights and AdamW state (12 bytes per parameter, written
    and hashed at SNAPSHOT_WRITE_BYTES_PER_S) plus a step to finish and 2 minutes; never under
    torchrun's own 30 s. A 1 B model: 240 s."""
    if configured is not None:
        return int(configured)
    return max(30, int(12 * num_parameters / SNAPSHOT_WRITE_BYTES_PER_S) + 120)


SNAPSHOT_WRITE_BYTES_PER_S = 100e6  # written, fsynced and hashed: a slow network volume's speed


# -- this process --------------------------------------------------------------------------------
def cuda_problem(local_rank: int = 0) -> str | None:
    """Why CUDA cannot train on this process's GPU (None: it can): a CPU-only torch wheel, a
    driver torch cannot use, or fewer GPUs than local ranks."""
    import torch

    if torch.version.cuda is None:
        return (f"this torch ({torch.__version__}) is a CPU-only build: install the CUDA build of the same version "
                f"(pip install torch=={torch.__version__.split('+')[0]} --index-url https://download.pytorch.org/whl/cu128 or the "
                f"CUDA worker image of docker/)")
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable GPU: check `nvidia-smi`, the driver "
                f"version against CUDA {torch.version.cuda}, and CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')!r}")
    count = torch.cuda.device_count()
    if local_rank >= count:
        return (f"local rank {local_rank} has no GPU of its own: {count} visible; set training.nproc_per_node to at most {count}")
    return None


def resolve_device(device_pref: str, local_rank: int = 0) -> tuple[str, str | None]:
    """("cuda" or "cpu", why CUDA was not used) for training.device: cuda must be usable (else a
    ValueError that says why and what to do); auto falls back to the CPU and returns the reason,
    for `warn_cpu_fallback` once the model's size is known."""
    if device_pref == "cpu":
        return "cpu", None
    problem = cuda_problem(local_rank)
    if device_pref == "cuda":
        if problem:
            raise ValueError(f"training.device=cuda but CUDA is not usable: {problem}. To train on the CPU on purpose, "
                             f"set training.device=cpu.")
        return "cuda", None
    if device_pref != "auto":
        raise ValueError(f"training.device={device_pref!r}: expected auto, cpu or cuda")
    return ("cpu", problem) if problem else ("cuda", None)


# Above this many parameters a CPU fallback is a mistake worth a banner (a 135M model trains ~100
# times slower there); below it, the tiny preset's models train in minutes on a laptop.
CPU_FRIENDLY_PARAMS = 20e6


def warn_cpu_fallback(problem: str | None, n_params: int) -> None:
    """Say that training.device=auto fell back to the CPU: loudly for a model sized for a GPU, in
    one line for a model small enough that the CPU is a fine place for it (`make demo`)."""
    if problem is None:
        return
    if n_params < CPU_FRIENDLY_PARAMS:
        log.info("training.device=auto: CUDA is not usable (%s); training on the CPU, fine for %.2fM parameters",
                 problem, n_params / 1e6)
        return
    bar = "!" * 78
    log.warning("%s\ntraining.device=auto: CUDA is not usable, so this run TRAINS ON THE CPU (%s).\n"
                "A model of %.0fM parameters trains about 100 times slower here than on a GPU. Set training.device=cuda "
                "to make this an error, or training.device=cpu to silence this warning.\n%s", bar, problem, n_params / 1e6, bar)


class Dist:
    """Rank, world size and device of this process; collectives are no-ops on one process."""

    def __init__(self, device_pref: str = "auto", timeout_s: float | None = None):
        import torch
        import torch.distributed as dist

        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device, self.cpu_fallback = resolve_device(device_pref, self.local_rank)  # why auto chose the CPU
        use_cuda = device == "cuda"
        if use_cuda:
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.backend = "nccl" if use_cuda else "gloo"
        self.timeout_s = timeout_s
        self.initialized = False
        self.cpu_group = None  # gloo: the small host-side collectives of a step (counts, stop flags) without a GPU sync
        if self.world_size > 1:
            kwargs: dict[str, Any] = {"device_id": self.device} if use_cuda else {}
            if timeout_s is not None:
                # NCCL's default is 10 minutes: ranks that wait for rank 0 (a snapshot, the final
                # version) must wait the configured time instead (training.collective_timeout_s)
                kwargs["timeout"] = timedelta(seconds=float(timeout_s))
            dist.init_process_group(backend=self.backend, **kwargs)
            self.initialized = True
            if use_cuda:
                self.cpu_group = dist.new_group(backend="gloo", timeout=kwargs.get("timeout"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.initialized:
            import torch.distributed as dist

            dist.barrier()

    def all_sum(self, values: list[float]) -> list[float]:
        """Sum host numbers over the ranks: over gloo on the host (the CPU group on CUDA runs),
        so the GPU's queue is never waited for."""
        if not self.initialized:
            return values
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, group=self.cpu_group)
        return t.tolist()

    def all_sum_tensor(self, t):
        """Sum a device tensor over the ranks in place (no host sync); returns it."""
        if self.initialized:
            import torch.distributed as dist

            if t.device.type != self.device.type:
                raise ValueError(f"all_sum_tensor: a {t.device.type} tensor on a {self.backend} process group")
            dist.all_reduce(t)
        return t

    def gather_objects(self, obj: Any) -> list[Any]:
        if not self.initialized:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out

    def close(self) -> None:
        if self.initialized:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.initialized = False


# -- sharding ------------------------------------------------------------------------------------
def compile_enabled(setting, device_type: str) -> bool:
    """training.compile: on / off as given; auto = on for CUDA, off on CPU."""
    return device_type == "cuda" if setting == "auto" else setting == "on"


def is_sharded(tcfg, world_size: int) -> bool:
    """FSDP shards only over more than one rank; on one process fsdp trains the plain model."""
    return tcfg.parallelism == "fsdp" and world_size > 1


def transformer_blocks(model) -> list:
    """The model's repeated decoder blocks: the modules whose class transformers names as
    not-to-be-split (`_no_split_modules`), else the longest nn.ModuleList."""
    import torch

    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if blocks:
        return blocks
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__}: no transformer blocks found to shard or compile; "
                         f"use training.parallelism=ddp and training.compile=false")
    return list(max(lists, key=len))


def prepare_model(model, tcfg, d: Dist):
    """Activation checkpointing, compile, then DDP or FSDP2 on `model` (fp32, on d.device).
    Returns (model to call in the step, autocast context): with FSDP the model is sharded in
    place and the same object is returned."""
    import torch

    if tcfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    if compile_enabled(tcfg.compile, d.device.type):
        for block in transformer_blocks(model):
            block.compile(backend=tcfg.compile_backend)  # in place: parameter names (and so snapshots and versions) do not change
    cuda = d.device.type == "cuda"
    if is_sharded(tcfg, d.world_size):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from torch.distributed.device_mesh import init_device_mesh

        # the mesh on training.device: without one fully_shard moves the parameters to CUDA on any
        # host that has a GPU, even when training.device=cpu keeps the inputs on the CPU
        kwargs: dict[str, Any] = {"mesh": init_device_mesh(d.device.type, (d.world_size,))}
        if cuda:
            # bf16 gathers and matmuls, fp32 gradient reduction and fp32 sharded master weights
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        blocks = transformer_blocks(model)
        for i, block in enumerate(blocks):
            # the last block's parameters are needed again first in backward: keep them gathered
            fully_shard(block, reshard_after_forward=i < len(blocks) - 1, **kwargs)
        fully_shard(model, **kwargs)
        return model, nullcontext()  # the policy casts; autocast would only add copies
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    if d.world_size > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[d.local_rank] if cuda else None), autocast
    return model, autocast


def gradient_sync(model, d: Dist, last_micro_batch: bool):
    """DDP: skip the all-reduce on all but the last micro-batch of a step. FSDP reduce-scatters
    every micro-batch (gradients stay sharded; see the module's trade-off)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if isinstance(model, DDP) and not last_micro_batch:
        return model.no_sync()
    return nullcontext()


def clip_grad_norm(model, max_norm: float):
    """Clip the gradients' global norm (over all shards with FSDP); returns the norm before
    clipping as a 0-d tensor on the device (read it with the step's other numbers: no sync here)."""
    import torch

    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if hasattr(norm, "full_tensor"):  # FSDP: a DTensor, already reduced over the shards
        norm = norm.full_tensor()
    return norm


# -- sharded snapshots ---------------------------------------------------------------------------
def _local(t):
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def _split_tied(state: dict) -> tuple[dict, dict[str, str]]:
    """Tied parameters (lm_head = embeddings) appear under two names sharing one tensor;
    safetensors refuses shared memory: keep the first name, map the others to it."""
    seen: dict[tuple[int, int], str] = {}
    kept, aliases = {}, {}
    for name, value in state.items():
        t = _local(value)
        key = (t.data_ptr(), t.numel()) if t.numel() else None
        if key is not None and key in seen:
            aliases[name] = seen[key]
            continue
        if key is not None:
            seen[key] = name
        kept[name] = value
    return kept, aliases


def _state_dicts(model, optimizer) -> tuple[dict, dict, dict]:
    """(tensors to store, keyed 'model.<fqn>' / 'optim.<key>'; plain optimizer numbers; aliases)."""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict=True))
    msd, aliases = _split_tied(msd)
    tensors = {f"model.{k}": v for k, v in msd.items()}
    tensors.update({f"optim.{k}": v for k, v in osd.items() if isinstance(v, torch.Tensor)})
    plain = {k: v for k, v in osd.items() if not isinstance(v, torch.Tensor)}
    return tensors, plain, aliases


def save_sharded(folder: Path, model, optimizer) -> dict[str, Any]:
    """Every rank (a collective): its shards of the weights and of AdamW's state into `folder`
    as safetensors files. Returns the JSON part (optimizer numbers, tied names) for state.json."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    tensors, plain, aliases = _state_dicts(model, optimizer)
    dcp.save(tensors, storage_writer=HuggingFaceStorageWriter(str(folder), save_distributed=True))
    return {"optimizer_plain": plain, "tied": aliases}


def load_sharded(folder: Path, model, optimizer, saved: dict[str, Any]) -> None:
    """Every rank (a collective): read this rank's shards back into the sharded model and AdamW;
    `saved` is what save_sharded returned (from state.json)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    tensors, _, aliases = _state_dicts(model, optimizer)
    if aliases != saved["tied"]:
        raise ValueError(f"snapshot {folder} ties {saved['tied']} but this model ties {aliases}: not the same architecture")
    dcp.load(tensors, storage_reader=HuggingFaceStorageReader(str(folder)))
    msd = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    for name, target in aliases.items():
        msd[name] = msd[target]
    osd = {k[len("optim."):]: v for k, v in tensors.items() if k.startswith("optim.")}
    # JSON turned tuples (betas) into lists; AdamW wants them back as they were
    osd.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved["optimizer_plain"].items()})
    set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd,
                   options=StateDictOptions(flatten_optimizer_state_dict=True))


def shard_files(folder: Path) -> list[Path]:
    """The safetensors shards a sharded snapshot holds (DCP's Hugging Face storage names)."""
    return sorted(p for p in Path(folder).glob("shard-*.safetensors"))


# -- an unsharded optimizer.pt (the parent's, the version's) -------------------------------------
def _param_names(model, optimizer) -> list[str]:
    """The optimizer's parameters by name, in its state-dict order: the indices an optimizer.pt
    uses (lib.training.train's param groups, in the same order before and after fully_shard)."""
    by_id = {id(p): name for name, p in model.named_parameters()}
    return [by_id[id(p)] for group in optimizer.param_groups for p in group["params"]]


def load_full_optimizer_state(model, optimizer, state: dict) -> None:
    """Every rank: an unsharded, index-keyed AdamW state (a parent's optimizer.pt, written by a
    ddp or an fsdp run) into this rank's shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = _param_names(model, optimizer)
    count = sum(len(g["params"]) for g in state["param_groups"])
    if len(state["param_groups"]) != len(optimizer.param_groups) or count != len(names):
        raise ValueError(f"it holds {count} parameters in {len(state['param_groups'])} groups, this model "
                         f"{len(names)} in {len(optimizer.param_groups)}")
    full = {"state": {names[int(i)]: s for i, s in state["state"].items()},
            "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))


def gather_optimizer_state(model, optimizer, d: Dist) -> dict | None:
    """A collective: the sharded AdamW state gathered into rank 0's CPU in optimizer.pt's
    index-keyed layout (None on the other ranks)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not d.is_main:
        return None
    index = {name: i for i, name in enumerate(_param_names(model, optimizer))}
    return {"state": {index[k]: v for k, v in full["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in full["param_groups"]]}


# -- the end of a run ----------------------------------------------------------------------------
def gather_for_storage(model, d: Dist):
    """An unsharded fp32 copy of the FSDP `model` on rank 0's CPU (None on the other ranks), for
    lib.checkpoints.checkpoint.write_version. A collective: every rank calls it."""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not d.is_main:
        return None
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(model.config)
    plain.load_state_dict(full, assign=True)
    # buffers outside the state dict (rotary inv_freq) are not sharded: copy them from the model
    held = dict(plain.named_buffers())
    for name, buf in model.named_buffers():
        if name in held and held[name].is_meta:
            owner, _, leaf = name.rpartition(".")
            plain.get_submodule(owner).register_buffer(leaf, buf.detach().to("cpu"), persistent=False)
    plain.tie_weights()
    left = [n for n, t in list(plain.named_parameters()) + list(plain.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(f"gathering the sharded model left {left} unset")
    plain.generation_config = model.generation_config
    return plain.float()
