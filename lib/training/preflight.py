"""Pre-flight: does this configuration fit the model it will train, before any stage runs?

A night that can only fail should fail in its first second, with the reason, not after curation
and tokenization with a torchrun traceback. `preflight(cfg, model_dir)` reads what it needs of the
model (its config.json, its tokenizer folder) and runs every check in `CHECKS`; each check returns
a problem (what is wrong, with which field, and what to do) or None. `ensure_ready` raises
`PreflightError` with all of them, so the flow run's state message in the UI names the cause.

- `model_dir` is the champion a night continues; None for a pre-training from scratch, where
  the `model` section describes the model to build (its vocabulary: `tokenizer.vocab_size`, the
  BPE the bootstrap trains).
- `memory_fits` estimates the memory per rank with lib.training.footprint, as the trainer does once its
  ranks start: the model is built on the meta device from its config (no weights, any
  architecture transformers knows), and the estimate is compared with the device training will
  use (the GPU's total memory when training would run on CUDA, else the RAM available now,
  shared by the ranks of this machine). `training.memory_check=false` skips it; with
  `orchestration.train_deployment` the training runs on another machine, whose trainer checks.
- A new check is a function `(cfg, target) -> str | None` appended to `CHECKS`.

Trade-off: the checks read the model's config.json and tokenizer files but load no weights.
The memory check imports torch and transformers (seconds, once per process; the night's and the
bootstrap's evaluation import them anyway) and then costs ~30 ms for the tiny preset, ~100 ms
for a 100 M model; it is an estimate (within 15% of the measured peak on CPU, lib/training/footprint.py),
not a measurement.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lib.config import ConsolidationConfig
from lib.training.footprint import available_memory, check_fits, choose_device_batch, estimate_training_memory
from lib.training.model import llama_config
from lib.training.distributed import cuda_problem
from lib.evaluation.benchmarks import benchmark_problems


class PreflightError(ValueError):
    """The configuration cannot run against this model; the message lists every problem."""


@dataclass(frozen=True)
class Target:
    """What a run will train: the model's own config (config.json, or `cfg.model` for a model
    built from scratch) and the tokenizer folder it will use."""

    model_dir: Path | None
    model_config: dict[str, Any]
    tokenizer_dir: Path | None

    @property
    def max_position_embeddings(self) -> int | None:
        value = self.model_config.get("max_position_embeddings") or self.model_config.get("n_positions")
        return int(value) if value else None


Check = Callable[[ConsolidationConfig, Target], "str | None"]


def sequence_fits(cfg: ConsolidationConfig, target: Target) -> str | None:
    limit = target.max_position_embeddings
    if limit is not None and cfg.training.seq_len > limit:
        where = f"the model in {target.model_dir}" if target.model_dir else "model.max_position_embeddings"
        return (f"training.seq_len={cfg.training.seq_len} exceeds max_position_embeddings={limit} of {where}: "
                f"set training.seq_len to at most {limit} (the `tiny` preset uses 256)")
    return None


def tokenizer_present(cfg: ConsolidationConfig, target: Target) -> str | None:
    if target.tokenizer_dir is None:  # pre-training: the bootstrap trains one
        return None
    if not (target.tokenizer_dir / "tokenizer.json").is_file():
        field = "tokenizer.path" if cfg.tokenizer.path else "the champion's folder"
        return (f"no tokenizer.json in {target.tokenizer_dir} ({field}): a night tokenizes with the model's own "
                f"tokenizer; copy it into that folder or point tokenizer.path at one")
    return None


def batch_divides(cfg: ConsolidationConfig, target: Target) -> str | None:
    t = cfg.training
    world = t.nproc_per_node * t.nnodes
    if t.device_batch_size == "auto":
        if t.total_batch_size % (t.seq_len * world):
            per_row = t.seq_len * world
            return (f"training.total_batch_size={t.total_batch_size} tokens is not a multiple of seq_len × processes = "
                    f"{t.seq_len} × {world} = {per_row}, so no micro-batch size (training.device_batch_size=auto) divides "
                    f"the step: choose a multiple of {per_row} (e.g. {max(1, round(t.total_batch_size / per_row)) * per_row})")
        return None
    per_pass = t.device_batch_size * t.seq_len * world
    if t.total_batch_size % per_pass:
        return (f"training.total_batch_size={t.total_batch_size} tokens is not a multiple of device_batch_size × "
                f"seq_len × processes = {t.device_batch_size} × {t.seq_len} × {world} = {per_pass}: choose a multiple "
                f"of {per_pass} (e.g. {max(1, round(t.total_batch_size / per_pass)) * per_pass})")
    return None


def training_device(cfg: ConsolidationConfig) -> str:
    """"cuda" or "cpu": where `training.device` puts the trainer on this machine (lib.training.train.Dist)."""
    if cfg.training.device == "cpu":
        return "cpu"
    import torch

    return "cuda" if cfg.training.device == "cuda" or torch.cuda.is_available() else "cpu"


def hf_config(cfg: ConsolidationConfig, target: Target):
    """The Hugging Face config of the model the run trains: the champion's config.json, or the
    Llama `cfg.model` builds with the bootstrap's tokenizer size."""
    if target.model_dir is None:
        return llama_config(cfg.model, cfg.tokenizer.vocab_size, bos_id=None, eos_id=None, pad_id=None)
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(target.model_dir))


def memory_fits(cfg: ConsolidationConfig, target: Target, available: int | None = None) -> str | None:
    """lib.training.footprint's estimate per rank against the device training will use; `available`
    (bytes per device) replaces what this machine has."""
    t = cfg.training
    if not t.memory_check or cfg.orchestration.train_deployment:
        return None

    device = training_device(cfg)
    if device == "cuda":
        problem = cuda_problem()
        if problem:
            return f"training.device=cuda but CUDA is not usable on this machine: {problem}; or set training.device=cpu"
    if available is None:
        available = available_memory(device)
    sharing = 1 if device == "cuda" else t.nproc_per_node  # CPU ranks of one machine share its RAM
    try:
        config = hf_config(cfg, target)
        if t.device_batch_size == "auto":
            try:
                choice = choose_device_batch(config, t, t.nproc_per_node * t.nnodes, device, available, ranks_sharing=sharing)
                t = t.model_copy(update={"device_batch_size": choice.device_batch_size,
                                         "activation_checkpointing": choice.activation_checkpointing})
            except ValueError as exc:
                if "found no micro-batch" not in str(exc):
                    raise
                return str(exc) + "\n  - or set training.memory_check=false to try anyway (the trainer then does not refuse either)"
        estimate = estimate_training_memory(config, t, t.nproc_per_node * t.nnodes, device)
    except Exception as exc:  # an architecture transformers cannot build cannot be trained either
        where = target.model_dir / "config.json" if target.model_dir else "the model section"
        return (f"cannot estimate the training memory from {where}: transformers cannot build the model "
                f"({type(exc).__name__}: {exc}); training would fail loading it too. Fix the config, or set "
                f"training.memory_check=false to skip this check")
    problems = check_fits(estimate, available, ranks_sharing=sharing, training=t)
    if not problems:
        return None
    return "\n".join(problems) + "\n  - or set training.memory_check=false to try anyway (the trainer then does not refuse either)"


def outside_paths_present(cfg: ConsolidationConfig, target: Target) -> str | None:
    """Paths outside the workspace stay absolute (a replay source of the user's, a tokenizer
    folder): a copied or moved workspace still points at them, so a missing one is named here."""
    missing = [f"sampling.sources {s.name!r}: {s.path}" for s in cfg.sampling.sources
               if s.path.is_absolute() and not s.path.exists()]
    if cfg.tokenizer.path and Path(cfg.tokenizer.path).is_absolute() and not Path(cfg.tokenizer.path).exists():
        missing.append(f"tokenizer.path: {cfg.tokenizer.path}")
    if not missing:
        return None
    return ("paths outside the workspace that this configuration names do not exist on this machine: "
            + "; ".join(missing) + ". Mount or copy them at those paths, or point the settings at where they are now")


def benchmarks_available(cfg: ConsolidationConfig, target: Target) -> str | None:
    """Every task of eval.benchmarks can run offline: lm-eval is installed, each task is found,
    its data is local or already in the Hugging Face cache (lib/evaluation/benchmarks.py).
    Reads YAML files only, ~0.5 s for a named task (a scan of lm-eval's task folder)."""
    if not cfg.eval.benchmarks:
        return None

    problems = benchmark_problems(cfg.eval.benchmarks, cfg.workspace.root)
    return "\n  - ".join(problems) if problems else None


CHECKS: list[Check] = [sequence_fits, tokenizer_present, batch_divides, memory_fits, outside_paths_present, benchmarks_available]


def read_target(cfg: ConsolidationConfig, model_dir: str | Path | None) -> Target:
    """The model a run continues (`model_dir`), or the one `cfg.model` builds when None."""
    if model_dir is None:
        return Target(None, {"max_position_embeddings": cfg.model.max_position_embeddings},
                      Path(cfg.tokenizer.path) if cfg.tokenizer.path else None)
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if not model_dir.exists():
            raise PreflightError(f"the champion's folder {model_dir} does not exist: lineage records it, but it is gone "
                                 f"from the workspace (see `consolidate lineage ls`)") from None
        raise PreflightError(f"no config.json in {model_dir}: the champion's folder is not a Hugging Face model folder") from None
    except json.JSONDecodeError as exc:
        raise PreflightError(f"{config_path} is not valid JSON: {exc}") from None
    return Target(model_dir, config, Path(cfg.tokenizer.path) if cfg.tokenizer.path else model_dir)


def preflight(cfg: ConsolidationConfig, model_dir: str | Path | None = None, checks: list[Check] | None = None) -> list[str]:
    """Every problem the checks find (empty: ready to run)."""
    target = read_target(cfg, model_dir)
    return [problem for check in (CHECKS if checks is None else checks) if (problem := check(cfg, target))]


def ensure_ready(cfg: ConsolidationConfig, model_dir: str | Path | None = None) -> None:
    """Raise `PreflightError` listing every problem `preflight` finds."""
    problems = preflight(cfg, model_dir)
    if problems:
        what = f"the model in {model_dir}" if model_dir else "the model it would pre-train"
        raise PreflightError(f"the configuration cannot run against {what}:\n- " + "\n- ".join(problems))
