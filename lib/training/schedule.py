"""Learning-rate schedule of a consolidation (and of v0's pre-training): warmup, constant, warmdown.

- Peak LR = the parent's original (pre-training) LR × `lr_scale` (1/10 by
  default), so a consolidation nudges the weights instead of re-learning them; v0 uses
  `model.pretrain_lr` with scale 1.
- Step s of N (0-based; the LR applies to the update made at step s):
  warmup for the first `round(warmup_ratio·N)` steps, linear from peak/W to peak (never 0: a
  zero-LR step is a wasted step);
  constant at the peak;
  warmdown over the last `round(warmdown_ratio·N)` steps to `final_lr_frac × peak` at the last step.
- The warmdown is a cosine (a cosine decay spends longer near the peak than a linear one); `shape="linear"` gives nanochat's
  straight line. Both start at the peak and land exactly on the final fraction.
- Pure functions of the step: a resumed run recomputes the LR from the step alone, nothing to save.

Trade-off: cosine keeps the LR higher early in the warmdown than linear (at 25% into the warmdown
it is 0.87 of the way from the floor vs 0.75), so more of the learning happens at a LR close to
the peak; with `final_lr_frac=0.1` the area under the curve is the same for both shapes.
"""

from __future__ import annotations

import math
from typing import Literal

WarmdownShape = Literal["cosine", "linear"]


def lr_multiplier(
    step: int,
    num_iterations: int,
    *,
    warmup_ratio: float = 0.1,
    warmdown_ratio: float = 0.5,
    final_lr_frac: float = 0.1,
    shape: WarmdownShape = "cosine",
) -> float:
    """Fraction of the peak LR used for the update made at `step` (0 ≤ step < num_iterations)."""
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be at least 1, got {num_iterations}")
    if not 0 <= step < num_iterations:
        raise ValueError(f"step {step} is outside the schedule of {num_iterations} steps")
    if warmup_ratio + warmdown_ratio > 1:
        raise ValueError(f"warmup_ratio + warmdown_ratio must be at most 1, got {warmup_ratio} + {warmdown_ratio}")
    warmup = round(warmup_ratio * num_iterations)
    warmdown = round(warmdown_ratio * num_iterations)
    if step < warmup:
        return (step + 1) / warmup
    first_warmdown = num_iterations - warmdown
    if warmdown == 0 or step < first_warmdown:
        return 1.0
    # progress 0 at the first warmdown step would repeat the peak; the last step lands on the floor
    progress = (step - first_warmdown + 1) / warmdown
    if shape == "linear":
        decay = 1.0 - progress
    elif shape == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"warmdown shape must be 'cosine' or 'linear', got {shape!r}")
    return final_lr_frac + (1.0 - final_lr_frac) * decay


def peak_lr(original_lr: float, lr_scale: float) -> float:
    """The consolidation's peak LR from the parent's recorded pre-training LR."""
    if not original_lr > 0:
        raise ValueError(f"the parent's original_lr must be positive, got {original_lr!r} (meta.json original_lr)")
    if not lr_scale > 0:
        raise ValueError(f"training.lr_scale must be positive, got {lr_scale!r}")
    return original_lr * lr_scale


def lr_at(step: int, peak: float, training_cfg, shape: WarmdownShape = "cosine") -> float:
    """LR of `step` for a `TrainingConfig`-like object (num_iterations, warmup/warmdown ratios, final_lr_frac)."""
    return peak * lr_multiplier(
        step,
        training_cfg.num_iterations,
        warmup_ratio=training_cfg.warmup_ratio,
        warmdown_ratio=training_cfg.warmdown_ratio,
        final_lr_frac=training_cfg.final_lr_frac,
        shape=shape,
    )
