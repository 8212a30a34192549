"""Storage precision: a version's weights rounded from the fp32 training weights to the dtype they
are stored and served in, and how much of the night's update survives the rounding.

- `stochastic_round`: to the representable neighbour above or below with probabilities that make
  the expectation the fp32 value; bf16 by adding 16 random low bits and truncating, fp16 through
  `nextafter`. Non-finite values and overflows round to nearest.
- `cast_for_storage`: in place, one tensor at a time (the fp32 tensor is freed as its narrow copy
  replaces it), seeded by `storage_seed(run seed, version)`, so a replayed run writes the same bytes.
- `UpdateSurvival`: u = trained - start; the share of u the stored weights carry
  (<s - start, u> / |u|^2), the share of elements that changed, and the rounding error relative to
  |u|; lib/checkpoints/checkpoint.py records it in meta.json (`update_kept`).

Trade-off: rounding to nearest drops an update smaller than half a bf16 step entirely; stochastic
rounding keeps it in expectation at the price of noise of up to one step per weight, and the fp32
master weights beside the version (checkpoint.py) keep it exactly for the next night.
"""

from __future__ import annotations

# torch is imported inside functions: importing this module must not cost its ~4 s
import hashlib
import math
from pathlib import Path
from typing import Any

from safetensors import safe_open

STORAGE_DTYPES = ("float32", "bfloat16", "float16")
ROUNDINGS = ("nearest", "stochastic")
_ROUND_CHUNK = 1 << 22  # elements rounded (or compared) at a time: temporaries of a few x 16 MB


def stochastic_round(x, dtype, generator):
    """fp32 tensor `x` rounded to `dtype` (bfloat16 or float16) stochastically: to the
    representable neighbour above or below with probabilities that make the expectation `x`.
    Non-finite values, and values the rounding would push past the dtype's range, round to nearest."""
    import torch

    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    flat_in, flat_out = x.reshape(-1), out.view(-1)
    for s in range(0, flat_in.numel(), _ROUND_CHUNK):
        part = flat_in[s : s + _ROUND_CHUNK].contiguous()
        if dtype == torch.bfloat16:
            # bf16 is the top half of fp32: add 16 random low bits, then truncate (round toward
            # zero); a carry past the kept bits happens with probability = the dropped fraction
            # drawn on the generator's device (the CPU, `rounding_generator`), then moved: the same
            # bytes whether the model is rounded on a GPU (DDP) or gathered to the CPU (FSDP)
            noise = torch.randint(0, 1 << 16, part.shape, generator=generator, dtype=torch.int32,
                                  device=generator.device).to(part.device)
            r = ((part.view(torch.int32) + noise) & -65536).view(torch.float32).to(dtype)
        else:
            near = part.to(dtype)
            nf = near.float()
            toward = torch.where(nf < part, torch.tensor(float("inf"), device=part.device), torch.tensor(float("-inf"), device=part.device))
            other = torch.nextafter(near, toward.to(dtype))
            gap = (other.float() - nf).abs()
            frac = torch.where(gap > 0, (part - nf).abs() / gap, torch.zeros_like(gap))
            u = torch.rand(part.shape, generator=generator, device=generator.device).to(part.device)
            r = torch.where(u < frac, other, near)
        bad = ~torch.isfinite(r) | ~torch.isfinite(part)
        if bool(bad.any()):
            r = torch.where(bad, part.to(dtype), r)
        flat_out[s : s + _ROUND_CHUNK] = r
    return out


def rounding_generator(seed: int):
    """The stochastic rounding's random stream: on the CPU whatever device the weights are on,
    since CUDA's and the CPU's generators draw different numbers from one seed (DDP rounds on
    the GPU, FSDP the model gathered to the CPU: they must write the same bytes)."""
    import torch

    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(seed) % (1 << 63))
    return generator


def cast_for_storage(model, dtype, *, rounding: str = "nearest", seed: int = 0, survival: "UpdateSurvival | None" = None) -> None:
    """Cast the model's parameters to `dtype` in place, one tensor at a time (the fp32 tensor is
    freed as its narrow copy replaces it). Buffers follow with the ordinary cast."""
    import torch

    generator = rounding_generator(seed) if rounding == "stochastic" else None
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters come once
            if not p.is_floating_point() or p.dtype == dtype:
                continue
            if rounding == "stochastic" and p.dtype == torch.float32 and dtype in (torch.bfloat16, torch.float16):
                stored = stochastic_round(p.data, dtype, generator)
            else:
                stored = p.data.to(dtype)
            if survival is not None:
                survival.add(name, p.data, stored)
            p.data = stored
    model.to(dtype)  # buffers; parameters are already there


def storage_seed(seed: int, version: str) -> int:
    """The stochastic rounding seed of a version: the run's seed and the version's name, so a
    resumed or replayed run writes the same bytes and two versions draw different noise."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{version}".encode()).digest()[:8], "little") >> 1


class UpdateSurvival:
    """How much of a night's update the stored weights carry.

    u = trained − start (the fp32 update of the night; start = the weights it began from: the
    parent's master weights, or its stored weights). s = the stored (rounded) weights.
    - `update_kept` = <s − start, u> / |u|²: the share of the update that reached the stored
      weights (1: all of it; ~0: rounded away; stochastic rounding keeps 1 in expectation).
    - `weights_changed`: share of stored elements that differ from the parent's stored ones.
    - `rounding_error` = |s − trained| / |u|: how far storage moved the weights, relative to the update.
    Tensors are read from the two files one at a time by name; a name missing from either is counted.
    """

    def __init__(self, start_file: str | Path, parent_stored_file: str | Path):
        self._start = safe_open(str(start_file), "pt")
        self._parent = safe_open(str(parent_stored_file), "pt")
        self._start_keys, self._parent_keys = set(self._start.keys()), set(self._parent.keys())
        self.dot = self.uu = self.err = 0.0
        self.changed = self.elements = 0
        self.missing: list[str] = []

    def add(self, name: str, trained, stored) -> None:
        if name not in self._start_keys or name not in self._parent_keys:
            self.missing.append(name)
            return
        import torch

        start, parent = self._start.get_tensor(name), self._parent.get_tensor(name)
        if start.shape != trained.shape or parent.shape != stored.shape:
            self.missing.append(name)
            return
        # in chunks, fp32 products summed in fp64: the temporaries stay small beside the model
        t_all, s_all, st_all, p_all = trained.detach().reshape(-1), stored.detach().reshape(-1), start.reshape(-1), parent.reshape(-1)
        for i in range(0, t_all.numel(), _ROUND_CHUNK):
            t = t_all[i : i + _ROUND_CHUNK].float().cpu()
            s = s_all[i : i + _ROUND_CHUNK].cpu()
            st = st_all[i : i + _ROUND_CHUNK].float()
            p = p_all[i : i + _ROUND_CHUNK]
            sf = s.float()
            u = t - st
            self.dot += float(torch.sum((sf - st) * u, dtype=torch.float64))
            self.uu += float(torch.sum(u * u, dtype=torch.float64))
            self.err += float(torch.sum((sf - t) ** 2, dtype=torch.float64))
            self.changed += int((s != p).sum()) if p.dtype == s.dtype else int((sf != p.float()).sum())
        self.elements += stored.numel()

    def result(self, master_kept: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "update_kept": self.dot / self.uu if self.uu > 0 else None,
            "weights_changed": self.changed / self.elements if self.elements else None,
            "rounding_error": math.sqrt(self.err / self.uu) if self.uu > 0 else None,
            "update_norm": math.sqrt(self.uu),
            "master_weights_kept": master_kept,
        }
        if self.missing:
            out["tensors_not_compared"] = self.missing[:20]
        return out
