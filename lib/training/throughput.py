"""Throughput of a training run: tokens per second and model FLOPs utilisation (MFU), per GPU.

- Model FLOPs per token = 6·N + 12·L·H·T (PaLM, appendix B): N the parameters that multiply
  (the input embedding is a lookup, so an untied one is left out; a tied matrix counts once, as
  the lm_head), plus attention's scores and values over T positions. Activation checkpointing's
  recomputation is not counted: MFU measures the model's work, not the hardware's.
- MFU = tokens/s over all ranks × FLOPs per token / (ranks × one device's peak). The peak comes
  from `PEAK_FLOPS` (dense tensor-core figures of the vendors' data sheets, by device name and
  compute dtype) or, for a device not in the table (and on CPU), from a timed matmul in that
  dtype: an achievable peak, so MFU reads higher against it; `peak_source` says which.
- Steps are timed from the first micro-batch fetched to the step's numbers on the host. The
  first `WARMUP_STEPS` steps of a process (torch.compile, cuDNN/cuBLAS autotuning, the
  allocator's first growth) and everything outside steps (snapshots, the final version) are left
  out of the run's `tokens_per_s` and `mfu`; `wall_tokens_per_s` keeps the old all-in figure.

Trade-off: a table of data-sheet peaks ages (a new GPU falls back to the measured matmul, which
takes ~0.1 s at start), but it is the denominator published MFU figures use (H100 SXM bf16:
989 TFLOP/s), so a run's MFU compares with theirs.
"""

from __future__ import annotations

import time
from typing import Any

from lib.training.model import count_parameters

WARMUP_STEPS = 3

# (substring of torch.cuda.get_device_name(), {dtype: dense FLOP/s}); first match wins, so the
# more specific names come first (H100 NVL / PCIe before H100, GH200 before H200, A100 before A10)
PEAK_FLOPS: list[tuple[str, dict[str, float]]] = [
    ("GH200", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 66.9e12}),
    ("H200", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 66.9e12}),
    ("H100 NVL", {"bfloat16": 835.5e12, "float16": 835.5e12, "float32": 60.0e12}),
    ("H100 PCIe", {"bfloat16": 756.5e12, "float16": 756.5e12, "float32": 51.2e12}),
    ("H100", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 66.9e12}),  # SXM ("H100 80GB HBM3")
    ("B200", {"bfloat16": 2250e12, "float16": 2250e12, "float32": 75e12}),
    ("A100", {"bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12}),
    ("L40S", {"bfloat16": 362.05e12, "float16": 362.05e12, "float32": 91.6e12}),
    ("L40", {"bfloat16": 181.05e12, "float16": 181.05e12, "float32": 90.5e12}),
    ("L4", {"bfloat16": 121e12, "float16": 121e12, "float32": 30.3e12}),
    ("A10G", {"bfloat16": 70e12, "float16": 70e12, "float32": 31.2e12}),
    ("A10", {"bfloat16": 125e12, "float16": 125e12, "float32": 31.2e12}),
    ("RTX 4090", {"bfloat16": 165.2e12, "float16": 165.2e12, "float32": 82.6e12}),
    ("V100", {"float16": 125e12, "float32": 15.7e12}),
    ("T4", {"float16": 65e12, "float32": 8.1e12}),
]


def table_peak(device_name: str, dtype: str) -> float | None:
    """The data-sheet peak of `device_name` in `dtype` ("bfloat16", "float16", "float32"), or None."""
    for key, peaks in PEAK_FLOPS:
        if key.lower() in device_name.lower():
            return peaks.get(dtype)
    return None


def measured_matmul_flops(device, dtype, size: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of a square matmul in `dtype` on `device`, best of `repeats` (2·n³ per product)."""
    import torch

    dev = torch.device(device)
    n = size or (8192 if dev.type == "cuda" else 512)
    g = torch.Generator(device=dev).manual_seed(0)  # its own stream: the run's RNG (saved in snapshots) is not moved
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    best = float("inf")
    for _ in range(repeats + 1):  # the first call warms the kernels up and is not kept
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        (a @ b).sum().item()  # a tiny reduction: the product is really computed and waited for
        dt = time.perf_counter() - t0
        best = min(best, dt) if _ else best
    return 2.0 * n**3 / best


def peak_flops(device, dtype) -> tuple[float, str]:
    """One device's peak FLOP/s in the compute dtype and where the figure comes from: the table
    for a known GPU, else a timed matmul."""
    import torch

    dev = torch.device(device)
    name = str(dtype).removeprefix("torch.")
    if dev.type == "cuda":
        device_name = torch.cuda.get_device_name(dev)
        peak = table_peak(device_name, name)
        if peak is not None:
            return peak, f"data sheet: {device_name}, {name} dense"
        return measured_matmul_flops(dev, dtype), f"measured matmul: {device_name}, {name}"
    return measured_matmul_flops(dev, dtype), f"measured matmul: {dev.type}, {name}"


def model_flops_per_token(model, seq_len: int) -> float:
    """6·N + 12·L·H·T training FLOPs per token; N without an untied input embedding."""
    n = count_parameters(model)
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if inp is not None and (out is None or inp.weight is not out.weight):
        n -= inp.weight.numel()
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer")
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd")
    return 6.0 * n + 12.0 * layers * hidden * seq_len


def mfu(tokens_per_s: float, flops_per_token: float, world_size: int, peak_per_device: float) -> float:
    """Model FLOPs utilisation of one device: the job's tokens/s shared over its devices."""
    return tokens_per_s * flops_per_token / (max(1, world_size) * peak_per_device)


class Meter:
    """Per-step tokens/s and MFU; the run's figures over the steps after this process's warm-up,
    added to what earlier processes of the run (before a resume) measured (`history`)."""

    def __init__(self, flops_per_token: float, world_size: int, peak: float, peak_source: str, planned_steps: int):
        self.flops_per_token, self.world_size = flops_per_token, world_size
        self.peak, self.peak_source = peak, peak_source
        self.warmup = min(WARMUP_STEPS, max(0, planned_steps - 1))  # a 1-step run is measured at all
        self.seen = 0

    def step(self, tokens: int, seconds: float, history: dict[str, Any]) -> dict[str, Any]:
        """The step's figures for metrics.jsonl; a step past warm-up is added to `history`."""
        self.seen += 1
        tok_s = tokens / seconds if seconds > 0 else 0.0
        warm = self.seen <= self.warmup
        if not warm:
            history["measured_tokens"] = history.get("measured_tokens", 0) + tokens
            history["measured_s"] = history.get("measured_s", 0.0) + seconds
        return {"tokens_per_s": tok_s, "mfu": mfu(tok_s, self.flops_per_token, self.world_size, self.peak), "warmup": warm}

    def measure_peak_again(self, device, dtype) -> None:
        """A peak from a timed matmul (no data sheet: a CPU) is timed again when the run ends, and
        the larger kept: timed while another job shared the cores, it put a night's MFU at 247% in
        lineage (the night, resumed beside a benchmark, trained alone after it ended)."""
        if self.peak_source.startswith("measured"):
            self.peak = max(self.peak, measured_matmul_flops(device, dtype))

    def summary(self, history: dict[str, Any]) -> dict[str, Any]:
        """The run's tokens/s and MFU over its measured steps (None when none was measured)."""
        tokens, seconds = history.get("measured_tokens", 0), history.get("measured_s", 0.0)
        tok_s = tokens / seconds if seconds > 0 else None
        return {"tokens_per_s": tok_s, "mfu": None if tok_s is None else mfu(tok_s, self.flops_per_token, self.world_size, self.peak),
                "flops_per_token": self.flops_per_token, "peak_flops_per_device": self.peak, "peak_source": self.peak_source,
                "measured_steps_tokens": tokens}


def lineage_metrics(final_metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """A version's training throughput as lineage metrics ({"training": {tokens_per_s, mfu}})."""
    keep = {k: final_metrics[k] for k in ("tokens_per_s", "mfu", "wall_tokens_per_s") if final_metrics.get(k) is not None}
    return {"training": keep} if keep else {}
