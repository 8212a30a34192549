"""The models the pipeline trains: Hugging Face causal LMs, built from `ModelConfig` or loaded from a version.

- `build_model(model_cfg, tokenizer, seed)` makes v0: a `LlamaForCausalLM` whose architecture comes
  from `cfg.model` and whose vocabulary (size and bos/eos/pad ids) comes from the tokenizer; weights
  are drawn from `seed` with the library's own init (normal, std 0.02), input and output embeddings tied.
- `load_model(version_dir, device=...)` loads any `AutoModelForCausalLM` folder (a delta-stored
  version is materialised first) in its stored dtype, moves it to `device` and widens it there to
  fp32, one tensor at a time: one fp32 copy of the model, on the device, and no second one
  (measured on a 110 M bf16 Llama on CPU: resident anonymous memory ends 0.54 GB above the
  imports for the 0.44 GB fp32 model, the peak adds the file's mapped pages, which the kernel can
  drop; loading with dtype=float32 directly peaks the same). Master weights stay fp32 and bf16 is
  only the autocast compute dtype on CUDA (mixed precision: an fp32 weight copy and fp32 updates, bf16 only in the matmuls).
  `training_start(version_dir)` is the folder a night starts from: the version's fp32 `master/`
  when it keeps one, else the version.
- `enable_activation_checkpointing(model)`: recompute every transformer block in the backward
  pass (transformers' gradient checkpointing, non-reentrant), for any architecture that supports it.
- `count_parameters` (and lib.training.throughput's FLOPs per token) feed the tokens/s and MFU figures (6·N + 12·L·H·T,
  PaLM appendix B; N without an untied input embedding).

Trade-off: tying the embeddings saves vocab × hidden parameters (4096 × 128 = 0.5 M of the tiny
preset's ~1.3 M, 40%) at a small quality cost at large scale; it stays the default because the
tiny preset is embedding-dominated.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
from pathlib import Path

from lib.checkpoints.checkpoint import master_dir, materialize


def intermediate_size(model_cfg) -> int:
    """MLP width: the configured one, or 8/3 × hidden rounded up to a multiple of 64 (SwiGLU's usual)."""
    if model_cfg.intermediate_size:
        return int(model_cfg.intermediate_size)
    return ((8 * model_cfg.hidden_size // 3) + 63) // 64 * 64


def llama_config(model_cfg, vocab_size: int, *, bos_id: int | None, eos_id: int | None, pad_id: int | None):
    from transformers import LlamaConfig

    if vocab_size < 2:
        raise ValueError(f"tokenizer vocabulary of size {vocab_size} is too small to build a model")
    return LlamaConfig(
        vocab_size=int(vocab_size),
        hidden_size=model_cfg.hidden_size,
        intermediate_size=intermediate_size(model_cfg),
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        num_key_value_heads=model_cfg.num_kv_heads or model_cfg.num_heads,
        max_position_embeddings=model_cfg.max_position_embeddings,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        tie_word_embeddings=True,
        attention_dropout=0.0,
    )


def build_model(model_cfg, vocab_size: int, *, bos_id=None, eos_id=None, pad_id=None, seed: int = 1337):
    """A freshly initialised Llama (fp32) for pre-training v0; same seed → same weights."""
    import torch
    from transformers import LlamaForCausalLM

    config = llama_config(model_cfg, vocab_size, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
    # fork_rng: the init draws must not move the caller's global RNG (the snapshot saves it)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float()


def load_model(version_dir: str | Path, *, dtype=None, device=None):
    """Load a version folder (full or delta-stored) as an fp32 `AutoModelForCausalLM` on
    `device` (default CPU); on CUDA the weights go straight to the GPU, never through host RAM."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = materialize(Path(version_dir))
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a Hugging Face model folder: config.json is missing")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # in the stored dtype first (host memory: the file's pages, largely memory-mapped and shared by
    # the ranks of a machine), then onto the device, then widened there one tensor at a time: the
    # full-precision copy exists only on the device (a device_map would need `accelerate`)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
    if device is not None:
        model.to(device)
    return model.to(dtype or torch.float32)


def training_start(version_dir: str | Path) -> Path:
    """The folder a consolidation from `version_dir` loads: its fp32 master weights when it
    keeps them (`<version>/master/`, full or delta), else the version itself."""
    return master_dir(version_dir) or Path(version_dir)


def enable_activation_checkpointing(model) -> None:
    """Recompute each transformer block's activations during backward (non-reentrant
    torch.utils.checkpoint via transformers, RNG state preserved so dropout replays the same)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"{type(model).__name__} does not support activation checkpointing in transformers; "
                         f"set training.activation_checkpointing=false")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x names it so
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def count_parameters(model) -> int:
    """Unique parameters (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total

