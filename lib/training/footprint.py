"""Memory a training run needs per rank, estimated before it starts, and whether the device has it.

- `estimate_training_memory(hf_config, training, world_size, device)` adds up, in bytes per rank:
  fp32 master weights (4 per parameter), gradients (4), AdamW's two moments (8), DDP's gradient
  buckets when world_size > 1 (4), the bf16 weight copies autocast keeps during a CUDA step (2),
  activations at `device_batch_size × seq_len`, the logits and their cross-entropy, NCCL's
  buffers over several GPUs, and a runtime floor (the Python process on CPU, the CUDA context on
  GPU). On CUDA the host RAM rank 0 needs at the end (the gathered or copied fp32 model, AdamW's
  state with optimizer_state=inherit, the narrower stored copy) is counted apart (`host`) and
  checked against the machine's RAM.
- Parameters are counted exactly by building the model on the meta device (no memory, any
  architecture `AutoModelForCausalLM.from_config` knows).
- Activations per token per block were measured with `torch.autograd.graph.saved_tensors_hooks`
  on transformers 5.23 (fp32, SDPA attention) and fitted: gated-MLP decoders (Llama, Qwen2,
  Mistral, Gemma, Phi-3) keep 8h + 2h_kv + 4i + heads + 2 elements, exactly for each of them;
  GPT-2-style blocks (non-gated MLP, fused qkv) keep 20h + 2i, plus 3 × heads × seq_len + 2h
  with dropout on (as GPT-2's config ships). With `activation_checkpointing` a block keeps only its input (h), and
  one block's full activations exist at a time, during its recomputation. Under bf16 autocast
  (CUDA) the residual stream and the norms stay fp32 and each Linear saves its own bf16 copy of
  its input: a gated block keeps 30h + 4h_kv + 8i + 4·heads + 8 bytes per token, a GPT-2 block
  24h + 10i + 4·heads + 16 (+ 12·heads·seq_len − 4·heads + 6h with dropout) (measured the same
  way under CPU autocast, which routes Linear, matmul and attention to bf16 as CUDA's does; 29%
  more than 2 bytes per fp32 element for a 1 B Llama).
- Logits: the cross-entropy's log-softmax, its gradient and the logits' gradient: 3 fp32 copies
  of batch × seq × vocab in the backward pass (the trainer drops the logits before it; one more
  bf16 copy on CUDA, where autocast computes the lm_head in bf16).
- Allocator slack: on CPU glibc keeps about half of what a step frees (gradients, activations,
  logits) resident between steps (measured: a 110 M Llama rests at 2.6 GB after a step where
  weights and AdamW hold 1.5 GB; forcing every large block through mmap removes the slack but
  costs 20% more CPU per step, so the estimate counts it instead).
- With `training.parallelism=fsdp` over W > 1 ranks, weights, gradients and AdamW are 16 / W
  bytes per parameter; added are the gathered parameters FSDP2 holds at a time (two blocks, for
  the prefetch, and the root's embeddings and lm_head; bf16 on CUDA) and one block's unsharded
  gradients before their reduce-scatter; on CPU also what glibc keeps of the buffers FSDP
  gathers and frees (three whole fp32 copies' worth, measured: bench/bench_fsdp.py, 95 M Llama,
  2 ranks: estimate 2.68 GiB against a peak of 2.94 GiB, -9%). The trainer loads the whole fp32 model on every rank
  before it shards it, and on CPU rank 0 gathers a whole fp32 copy at the end: when either peak
  is above the step's total, the difference is counted too.
- `available_memory("cuda")` is the GPU's *free* memory (`cudaMemGetInfo`): a server or another
  job on the same GPU is left its share.
- `choose_device_batch` (training.device_batch_size=auto): the largest micro-batch that divides
  the step and fits the free memory less a 10% margin, without activation checkpointing if any
  does, else with it; none: refused with the estimate at batch 1.
- `check_fits(estimate, available)` returns the problems (empty when it fits), each with the
  numbers and the knob to turn: device_batch_size, activation_checkpointing, seq_len, and
  `training.parallelism=fsdp` when the 16 bytes per parameter alone do not fit but their share
  over the ranks would (or how many ranks it would take).

Trade-off: a sum of components, not a trace of the real allocator: the peak of a step is lower
than the sum when gradients are allocated while activations are freed, and higher where the
allocator keeps freed memory, which the slack term approximates. Measured on a 95 M-parameter
bf16 Llama on CPU (bench/bench_train_overhead.py): 2.35 GiB estimated against a peak resident
memory of 2.60 GiB in a fresh training process (-10%; target within 15%).
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from lib.training.model import count_parameters as unique_parameters

GiB = 1 << 30

# model_type of decoders whose MLP is not gated (fc -> activation -> proj); the others are
# treated as gated (gate and up projections, Llama-style), which covers most current models.
NON_GATED = {"gpt2", "gpt_neo", "gpt_neox", "gptj", "gpt_bigcode", "opt", "bloom", "falcon", "phi", "codegen", "starcoder2"}

CPU_RUNTIME_BYTES = 400 * (1 << 20)   # python + torch + transformers imported: ~350-400 MB resident
CUDA_CONTEXT_BYTES = 600 * (1 << 20)  # CUDA context and cuBLAS workspace: outside torch's allocator
CPU_ALLOCATOR_SLACK = 0.5  # share of a step's freed memory glibc keeps resident (measured, see the bench)
# NCCL's communicators over several GPUs: channel buffers per peer (NCCL_BUFFSIZE 4 MiB x channels)
# plus NVLS/CollNet buffers on NVSwitch machines; a guess from NCCL's documented defaults, not measured
NCCL_BUFFER_BYTES = 1 << 30
AUTO_BATCH_MARGIN = 0.10  # share of free memory training.device_batch_size=auto leaves unused


@dataclass
class MemoryEstimate:
    """Bytes per rank of one training step, by component."""

    parameters: int
    device: str
    world_size: int
    tokens_per_micro_batch: int
    activation_checkpointing: bool
    components: dict[str, int] = field(default_factory=dict)
    parallelism: str = "ddp"
    host: dict[str, int] = field(default_factory=dict)  # rank 0's host RAM at the end of a CUDA run

    @property
    def host_total(self) -> int:
        return sum(self.host.values())

    @property
    def total(self) -> int:
        return sum(self.components.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total, "host_total": self.host_total}

    def table(self) -> str:
        """One line per component, in GiB, for an error message or a log."""
        rows = [f"  {name:<30} {n / GiB:8.2f} GiB" for name, n in self.components.items()]
        return "\n".join(rows + [f"  {'total per rank':<30} {self.total / GiB:8.2f} GiB"])


def _get(cfg, *names, default=None):
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def model_shape(hf_config) -> dict[str, Any]:
    """hidden size, layers, heads, kv width, MLP width, vocabulary of any decoder config."""
    cfg = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    h = int(_get(cfg, "hidden_size", "n_embd", "d_model"))
    heads = int(_get(cfg, "num_attention_heads", "n_head"))
    kv_heads = int(_get(cfg, "num_key_value_heads", default=heads) or heads)
    head_dim = int(_get(cfg, "head_dim", default=h // heads) or h // heads)
    inter = _get(cfg, "intermediate_size", "n_inner", "ffn_dim")
    inter = int(inter) if inter else 4 * h
    return {
        "model_type": getattr(cfg, "model_type", ""),
        "hidden": h, "layers": int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers")),
        "heads": heads, "kv_width": kv_heads * head_dim, "intermediate": inter,
        "vocab": int(cfg.vocab_size),
        "attention_dropout": float(_get(cfg, "attention_dropout", "attn_pdrop", default=0.0) or 0.0),
    }


def count_parameters(hf_config) -> int:
    """Exact parameter count (tied embeddings once) from a model built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return unique_parameters(model)


def block_parameters(shape: dict[str, Any]) -> int:
    """Parameters of one transformer block (attention, MLP, two norms; biases left out)."""
    h, i, kv = shape["hidden"], shape["intermediate"], shape["kv_width"]
    mlp = (2 if shape["model_type"] in NON_GATED else 3) * h * i
    return 2 * h * h + 2 * h * kv + mlp + 2 * h


def activation_bytes_per_token(shape: dict[str, Any], seq_len: int, autocast: bool) -> int:
    """Bytes one transformer block keeps for the backward pass, per token: fp32 (4 bytes per
    element of `activation_elements_per_token`), or under bf16 autocast (fitted, see above)."""
    if not autocast:
        return 4 * activation_elements_per_token(shape, seq_len)
    h, i, kv, heads = shape["hidden"], shape["intermediate"], shape["kv_width"], shape["heads"]
    if shape["model_type"] in NON_GATED:
        n = 24 * h + 10 * i + 4 * heads + 16
        if shape["attention_dropout"] > 0:  # eager attention: probabilities, mask and dropped copy
            n += 12 * heads * seq_len - 4 * heads + 6 * h
        return n
    return 30 * h + 4 * kv + 8 * i + 4 * heads + 8


def activation_elements_per_token(shape: dict[str, Any], seq_len: int) -> int:
    """Elements one transformer block keeps for the backward pass, per token (fitted, see above)."""
    h, i, kv, heads = shape["hidden"], shape["intermediate"], shape["kv_width"], shape["heads"]
    if shape["model_type"] in NON_GATED:
        n = 20 * h + 2 * i
        if shape["attention_dropout"] > 0:
            n += 3 * heads * seq_len + 2 * h  # attention probabilities, mask and dropped copy; residual dropouts
        return n
    return 8 * h + 2 * kv + 4 * i + heads + 2


def estimate_training_memory(
    hf_config,
    training,
    world_size: int = 1,
    device: str = "cpu",
    *,
    num_parameters: int | None = None,
    runtime_bytes: int | None = None,
) -> MemoryEstimate:
    """Bytes per rank for training `hf_config` with `training` (a TrainingConfig) on `device`
    ("cpu" or "cuda"). `runtime_bytes` replaces the default process/context floor (the trainer
    passes its own resident memory before loading the model)."""
    shape = model_shape(hf_config)
    n = int(num_parameters if num_parameters is not None else count_parameters(hf_config))
    cuda = device == "cuda"
    batch, seq = int(training.device_batch_size), int(training.seq_len)
    tokens = batch * seq
    sharded = getattr(training, "parallelism", "ddp") == "fsdp" and world_size > 1
    if sharded:
        block = min(block_parameters(shape), n)
        root = max(0, n - shape["layers"] * block)  # embeddings, final norm, an untied lm_head
        gathered = min(n, 2 * block + root)
        comp: dict[str, int] = {
            "weights (fp32, sharded)": -(-4 * n // world_size),
            "gradients (fp32, sharded)": -(-4 * n // world_size),
            "AdamW moments (fp32, sharded)": -(-8 * n // world_size),
            "FSDP gathered weights": gathered * (2 if cuda else 4),
            "FSDP unsharded gradients": min(n, block + root) * 4,
        }
    else:
        comp = {
            "weights (fp32)": 4 * n,
            "gradients (fp32)": 4 * n,
            "AdamW moments (fp32)": 8 * n,
        }
        if world_size > 1:
            comp["DDP gradient buckets"] = 4 * n
        if cuda:
            comp["autocast bf16 weights"] = 2 * n
    per_block = activation_bytes_per_token(shape, seq, autocast=cuda)  # bf16 autocast on CUDA, fp32 on CPU
    if getattr(training, "activation_checkpointing", False):
        # each block's input (the fp32 residual stream) plus one block recomputed at a time
        acts = shape["layers"] * shape["hidden"] * tokens * 4 + per_block * tokens
    else:
        acts = shape["layers"] * per_block * tokens
    acts += 3 * shape["hidden"] * tokens * 4  # embeddings output and the final norm
    comp["activations"] = acts
    # log-softmax, its gradient and the logits' gradient in fp32 during backward (the trainer drops
    # the logits themselves before it); on CUDA the lm_head's bf16 output and its fp32 copy meet first
    comp["logits + cross-entropy"] = tokens * shape["vocab"] * (3 * 4 + (2 if cuda else 0))
    # freed memory the allocator keeps: glibc on CPU holds on to about half of what a step frees
    # (gradients, activations, logits), measured on 95-110 M Llamas; the CUDA caching allocator's
    # fragmentation is a guess (no GPU measurement yet)
    grads = comp["gradients (fp32, sharded)"] + comp["FSDP unsharded gradients"] if sharded else comp["gradients (fp32)"]
    transient = grads + comp["activations"] + comp["logits + cross-entropy"]
    comp["allocator slack"] = int((0.1 if cuda else CPU_ALLOCATOR_SLACK) * transient)
    if sharded and not cuda:
        # glibc keeps the blocks FSDP gathers and frees all step long: about one whole fp32 copy
        # each of the forward's and the backward's gathered weights and of the unsharded
        # gradients (bench_fsdp: 95 M, 2 ranks, peak 2.94 GiB, 1.89 GiB with MALLOC_MMAP_THRESHOLD_=1 MB)
        comp["FSDP buffers glibc keeps"] = max(0, 12 * n - comp["FSDP gathered weights"] - comp["FSDP unsharded gradients"])
    if cuda and world_size > 1:
        comp["NCCL buffers"] = NCCL_BUFFER_BYTES
    comp["runtime"] = int(runtime_bytes if runtime_bytes is not None else (CUDA_CONTEXT_BYTES if cuda else CPU_RUNTIME_BYTES))
    if sharded:
        # every rank loads the whole fp32 model before fully_shard frees all but its shard; at the
        # end rank 0 gathers one whole fp32 copy beside its shards (host RAM: counted on CPU only)
        peak = 4 * n + comp["runtime"]
        if not cuda:
            peak = max(peak, 4 * n + 16 * n // world_size + comp["runtime"])
        if peak > sum(comp.values()):
            comp["whole model at load / gather"] = peak - sum(comp.values())
    host: dict[str, int] = {}
    if cuda:
        # rank 0 at the end, in host RAM: the fp32 model (FSDP: gathered there; DDP: the state dict
        # lib.checkpoints.checkpoint copies off the GPU), AdamW's moments with optimizer_state=inherit, and
        # the copy in the narrower storage dtype (at most 2 bytes per parameter)
        host["final version: fp32 weights"] = 4 * n
        if getattr(training, "optimizer_state", "fresh") == "inherit":
            host["final version: AdamW state"] = 8 * n
        host["final version: stored copy"] = 2 * n
        host["runtime"] = CPU_RUNTIME_BYTES
    return MemoryEstimate(parameters=n, device=device, world_size=world_size, tokens_per_micro_batch=tokens,
                          activation_checkpointing=bool(getattr(training, "activation_checkpointing", False)), components=comp,
                          parallelism="fsdp" if sharded else "ddp", host=host)


def available_memory(device: str = "cpu", local_rank: int = 0) -> int:
    """Bytes a rank may use: the CUDA device's free memory now (another job or a server on the
    same GPU keeps its share), or the RAM available right now on this machine (MemAvailable; the
    caller divides it among the ranks of a node)."""
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(local_rank)
        # this process's own context is already out of `free`, and the estimate counts it
        # ("runtime"); what torch's allocator holds in reserve is free for the training too
        return int(free) + CUDA_CONTEXT_BYTES + int(torch.cuda.memory_reserved(local_rank))
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def resident_bytes() -> int:
    """This process's resident memory (VmRSS: its heap and the pages of the libraries it mapped,
    ~0.2 GB of torch alone), or 0 where /proc is not there."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def check_fits(estimate: MemoryEstimate, available: int, *, ranks_sharing: int = 1, training=None,
               host_available: int | None = None) -> list[str]:
    """Problems that keep the run from fitting (empty list: it fits). `available` is the memory
    of the device one rank uses; `ranks_sharing` ranks share it (CPU: nproc_per_node on one
    machine); `host_available` (CUDA runs) the RAM rank 0's machine has for the final version.
    Each problem gives the numbers and what to change."""
    problems = []
    if estimate.host and host_available is not None and estimate.host_total > host_available:
        rows = "\n".join(f"  {k:<30} {v / GiB:8.2f} GiB" for k, v in estimate.host.items())
        problems.append(f"rank 0 needs about {estimate.host_total / GiB:.1f} GiB of host RAM to write the final version but the "
                        f"machine has {host_available / GiB:.1f} GiB available:\n{rows}\nto make it fit: free RAM on the "
                        f"first node, or set training.optimizer_state=fresh (AdamW's state is 8 bytes per parameter)")
    need = estimate.total * ranks_sharing
    if need <= available:
        return problems
    where = "GPU" if estimate.device == "cuda" else "machine (available RAM)"
    share = f" × {ranks_sharing} ranks on this machine" if ranks_sharing > 1 else ""
    head = (f"training needs about {need / GiB:.1f} GiB{share} but the {where} has {available / GiB:.1f} GiB "
            f"({estimate.parameters / 1e6:,.1f} M parameters, {estimate.tokens_per_micro_batch:,} tokens per micro-batch):\n"
            f"{estimate.table()}")
    per_batch = ("activations", "logits + cross-entropy", "allocator slack")  # what shrinks with the micro-batch
    fixed = sum(v for k, v in estimate.components.items() if k not in per_batch) * ranks_sharing
    knobs = []
    acts = estimate.components["activations"] + estimate.components["logits + cross-entropy"]
    if fixed < available:
        b = getattr(training, "device_batch_size", None)
        if b and b > 1:
            knobs.append(f"lower training.device_batch_size (now {b}; activations and logits scale with it, "
                         f"{acts / GiB:.2f} GiB at {b}); total_batch_size stays, reached with more accumulation")
        if not estimate.activation_checkpointing:
            knobs.append("set training.activation_checkpointing=true (keeps one block's activations instead of every block's, "
                         "about a third more compute)")
        t = getattr(training, "seq_len", None)
        if t:
            knobs.append(f"lower training.seq_len (now {t})")
    knobs.append(sharding_advice(estimate, available // max(1, ranks_sharing)))
    return problems + [head + "\nto make it fit:\n  - " + "\n  - ".join(knobs)]


@dataclass
class BatchChoice:
    """What training.device_batch_size=auto chose, and why."""

    device_batch_size: int
    activation_checkpointing: bool
    estimate: MemoryEstimate
    available: int
    tried: list[tuple[int, bool, int]]  # (batch, checkpointing, bytes) of every estimate made

    def describe(self) -> str:
        return (f"training.device_batch_size=auto chose {self.device_batch_size} sequences per micro-batch"
                f"{' with activation checkpointing' if self.activation_checkpointing else ''}: "
                f"{self.estimate.total / GiB:.2f} GiB estimated of {self.available / GiB:.2f} GiB free "
                f"(a {AUTO_BATCH_MARGIN:.0%} margin kept)")


def batch_candidates(total_batch_size: int, seq_len: int, world_size: int) -> list[int]:
    """Micro-batch sizes that keep total_batch_size exact by accumulation, largest first."""
    per_row = seq_len * world_size
    if total_batch_size % per_row:
        raise ValueError(f"training.total_batch_size={total_batch_size} tokens is not a multiple of seq_len × world_size = "
                         f"{seq_len} × {world_size} = {per_row}: no micro-batch size divides the step; choose a multiple of {per_row}")
    rows = total_batch_size // per_row
    return [b for b in range(rows, 0, -1) if rows % b == 0]


def choose_device_batch(hf_config, training, world_size: int, device: str, available: int, *, ranks_sharing: int = 1,
                        num_parameters: int | None = None, runtime_bytes: int | None = None) -> BatchChoice:
    """training.device_batch_size=auto: the largest micro-batch (a divisor of the step's rows per
    rank) whose estimate fits `available` less AUTO_BATCH_MARGIN, without activation
    checkpointing when one does (or when training.activation_checkpointing is set, always with
    it), else with it. Raises ValueError, with the estimate at batch 1, when none fits."""
    n = int(num_parameters if num_parameters is not None else count_parameters(hf_config))
    budget = int(available * (1 - AUTO_BATCH_MARGIN))
    tried: list[tuple[int, bool, int]] = []
    modes = [True] if getattr(training, "activation_checkpointing", False) else [False, True]
    smallest = None
    for ac in modes:
        for b in batch_candidates(int(training.total_batch_size), int(training.seq_len), world_size):
            t = training.model_copy(update={"device_batch_size": b, "activation_checkpointing": ac})
            est = estimate_training_memory(hf_config, t, world_size, device, num_parameters=n, runtime_bytes=runtime_bytes)
            tried.append((b, ac, est.total))
            smallest = est
            if est.total * ranks_sharing <= budget:
                return BatchChoice(b, ac, est, available, tried)
    assert smallest is not None
    problems = check_fits(smallest, budget, ranks_sharing=ranks_sharing, training=smallest_training(training))
    raise ValueError(
        "training.device_batch_size=auto found no micro-batch that fits, not even 1 sequence with activation checkpointing "
        f"({available / GiB:.1f} GiB free, {AUTO_BATCH_MARGIN:.0%} kept as margin):\n" + "\n".join(problems))


def smallest_training(training):
    return training.model_copy(update={"device_batch_size": 1, "activation_checkpointing": True})


def sharding_advice(estimate: MemoryEstimate, per_rank: int) -> str:
    """What sharding would do for the 16 bytes per parameter of weights, gradients and AdamW,
    given `per_rank` bytes of memory per rank: whether fsdp is needed, and over how many ranks."""
    state = 16 * estimate.parameters
    world = estimate.world_size
    if estimate.parallelism == "fsdp":
        need = -(-state // max(1, int(per_rank * 0.6))) if per_rank > 0 else 0
        return (f"weights, gradients and AdamW take {state / world / GiB:.1f} GiB per rank sharded over {world} ranks "
                f"(16 bytes per parameter / {world}): add ranks (training.nproc_per_node, training.nnodes"
                + (f"; about {need} ranks leave room for activations" if need > world else "") + ")")
    if world > 1 and state / world < 0.6 * per_rank:
        return (f"training.parallelism=fsdp is needed: weights, gradients and AdamW take {state / GiB:.1f} GiB on every "
                f"rank with ddp (16 bytes per parameter) but {state / world / GiB:.1f} GiB sharded over the {world} ranks")
    ranks = -(-state // max(1, int(per_rank * 0.6))) if per_rank > 0 else 0
    return (f"weights, gradients and AdamW alone take {state / GiB:.1f} GiB per rank (16 bytes per parameter) with ddp, "
            f"and more data-parallel ranks do not shrink them: use a device with more memory, or set "
            f"training.parallelism=fsdp over more ranks (training.nproc_per_node × training.nnodes"
            + (f"; about {ranks} ranks of this size leave room for activations" if ranks > 1 else "") + ")")
