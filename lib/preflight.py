"""Pre-flight: does this configuration fit the model it will train, before any stage runs?

A night that can only fail should fail in its first second, with the reason, not after curation
and tokenization with a torchrun traceback. `preflight(cfg, model_dir)` reads what it needs of the
model (its config.json, its tokenizer folder) and runs every check in `CHECKS`; each check returns
a problem (what is wrong, with which field, and what to do) or None. `ensure_ready` raises
`PreflightError` with all of them, so the flow run's state message in the UI names the cause.

- `model_dir` is the champion a night continues; None for a pre-training from scratch, where
  the `model` section describes the model to build.
- A new check is a function `(cfg, target) -> str | None` appended to `CHECKS`.

Trade-off: the checks read the model's config.json and tokenizer files but load no weights, so
they cost milliseconds; what only a forward pass can tell (memory) is estimated, not measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lib.config import ConsolidationConfig


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
    per_pass = t.device_batch_size * t.seq_len * world
    if t.total_batch_size % per_pass:
        return (f"training.total_batch_size={t.total_batch_size} tokens is not a multiple of device_batch_size × "
                f"seq_len × processes = {t.device_batch_size} × {t.seq_len} × {world} = {per_pass}: choose a multiple "
                f"of {per_pass} (e.g. {max(1, round(t.total_batch_size / per_pass)) * per_pass})")
    return None


CHECKS: list[Check] = [sequence_fits, tokenizer_present, batch_divides]


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
