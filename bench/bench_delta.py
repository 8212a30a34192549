"""Delta storage: bytes of a version stored as a delta against its parent vs a full checkpoint.

Pre-trains a small v0 (`--pretrain-steps` at `--pretrain-lr`, default 3e-3), consolidates it for `--steps` at
lr_scale `--lr-scale` (the issue's 200 steps at 0.1) with the real trainer, then stores the
child three ways and prints each size as a ratio of the full model.safetensors:
  full        the file itself (the baseline, 100%)
  zstd        the file zstd-compressed without a parent (what compression alone buys)
  xor         XOR with the parent + zstd, no byte-plane shuffle
  xor+planes  XOR, byte planes, zstd: delta format 1
  diff+planes lib.checkpoint.compact: zigzag integer difference of the float bit patterns, byte
              planes, zstd (delta format 2, the stored one)
and checks that materialize() restores the bytes exactly. `--dtype bfloat16` stores both
versions in bf16 (checkpoints.dtype), as most Hugging Face checkpoints are; training still runs
on fp32 master weights.

Run: .venv/bin/python bench/bench_delta.py [--steps 200 --lr-scale 0.1 --width 64 --layers 2] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pretrain-steps", type=int, default=200)
    ap.add_argument("--lr-scale", type=float, default=0.1)
    ap.add_argument("--pretrain-lr", type=float, default=3e-3,
                    help="v0's LR, which the consolidation scales (3e-3: the tiny preset; 3e-4: the default preset)")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="checkpoints.dtype of both versions (bfloat16: a bf16 model, as most HF checkpoints are).")
    ap.add_argument("--keep", type=Path, help="Keep the work folder here.")
    args = ap.parse_args()

    import numpy as np
    import zstandard

    from lib.checkpoint import MODEL_FILE, _byteplanes, _reference, _split_safetensors, compact, encode_delta, materialize, read_meta
    from lib.config import load_config
    from lib.train import train
    from train_fixtures import prepare, write_config

    work = Path(tempfile.mkdtemp(prefix="bench_delta_"))
    try:
        paths = prepare(work, token_budget=(args.steps + args.pretrain_steps) * 512 + 50_000)
        cfg_path = write_config(work / "cfg.yaml",
                                model={"hidden_size": args.width, "num_layers": args.layers, "intermediate_size": 2 * args.width,
                                       "pretrain_iterations": args.pretrain_steps, "pretrain_lr": args.pretrain_lr},
                                training={"num_iterations": args.steps, "lr_scale": args.lr_scale, "snapshot_every": 10_000},
                                checkpoints={"dtype": args.dtype})
        cfg = load_config(cfg_path)
        t0 = time.perf_counter()
        train(cfg, paths["data"], work / "v0", init=True, tokenizer_dir=paths["tokenizer"], train_dir=work / "t0", meta={"version": "v0"})
        train(cfg, paths["data"], work / "v1", parent=work / "v0", train_dir=work / "t1", meta={"version": "v1"})
        t_train = time.perf_counter() - t0

        full = (work / "v1" / MODEL_FILE).read_bytes()
        parent = (work / "v0" / MODEL_FILE).read_bytes()
        cctx = zstandard.ZstdCompressor(level=3, threads=-1)
        zstd_only = len(cctx.compress(full))
        head, th, td = _split_safetensors(full, "v1")
        _, ph, pd = _split_safetensors(parent, "v0")
        ref, _ = _reference(th, len(td), ph, pd)
        x = np.frombuffer(td, dtype=np.uint8) ^ ref
        xor_plain = len(cctx.compress(head + x.tobytes()))
        planes = x.copy()
        _byteplanes(planes, th, inverse=False)
        # per byte plane of the XOR: how much of each byte position survives compression
        code = {"float32": "F32", "bfloat16": "BF16"}[args.dtype]
        width = {"F32": 4, "BF16": 2}[code]
        plane_ratio = []
        for k in range(width):
            plane = np.concatenate([planes[i["data_offsets"][0]:i["data_offsets"][1]].reshape(width, -1)[k]
                                    for n, i in th.items() if n != "__metadata__" and i["dtype"] == code])
            plane_ratio.append(len(cctx.compress(plane.tobytes())) / plane.size)
        # how far the weights moved: median relative change of the stored values
        import torch
        from safetensors.torch import load as st_torch

        a, b = st_torch(parent), st_torch(full)
        rel = torch.cat([((b[k].float() - a[k].float()).abs() / a[k].float().abs().clamp_min(1e-12)).flatten() for k in b])
        unchanged = float(sum((b[k] == a[k]).sum() for k in b)) / sum(v.numel() for v in b.values())
        t1 = time.perf_counter()
        info = compact(work / "v1", work / "v0")
        t_compact = time.perf_counter() - t1
        t1 = time.perf_counter()
        restored = (materialize(work / "v1") / MODEL_FILE).read_bytes()
        t_restore = time.perf_counter() - t1
        assert restored == full, "materialize must restore the exact bytes"

        meta = read_meta(work / "v1")
        print(f"model: {args.layers} layers × {args.width} wide, {len(full):,} bytes {args.dtype}; v0 {args.pretrain_steps} steps at {args.pretrain_lr:g}, "
              f"consolidation {args.steps} steps at lr_scale {args.lr_scale} (peak {meta['peak_lr']:.1e}); training {t_train:.0f} s")
        print(f"{'storage':<13}{'bytes':>12}{'of full':>10}")
        xor_planes = len(encode_delta(full, parent, method="xor")[0])
        for name, n in (("full", len(full)), ("zstd", zstd_only), ("xor", xor_plain), ("xor+planes", xor_planes),
                        ("diff+planes", info["delta_bytes"])):
            print(f"{name:<13}{n:>12,}{n / len(full):>10.1%}")
        print(f"{args.dtype} byte planes after XOR, compressed/raw (sign+exponent … low mantissa): "
              + " ".join(f"{r:.0%}" for r in reversed(plane_ratio)))
        print(f"weights: median relative change {float(rel.median()):.2%}, unchanged values {unchanged:.1%}")
        print(f"compact {t_compact:.2f} s, materialize {t_restore:.2f} s; restore bit-exact: yes")
        print(json.dumps({"dtype": args.dtype, "delta_ratio": info["ratio"], "xor_planes_ratio": xor_planes / len(full), "zstd_ratio": zstd_only / len(full),
                          "xor_ratio": xor_plain / len(full), "median_relative_change": float(rel.median())}))
    finally:
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
