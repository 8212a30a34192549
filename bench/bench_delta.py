"""Delta storage: bytes of a version stored as a delta against its parent vs a full checkpoint.

For each v0 pre-training length (`--pretrain-steps`, at `--pretrain-lr`) and each storage dtype
(`--dtype`), pre-trains a small v0 with the real trainer, consolidates it for `--steps` at
lr_scale `--lr-scale` (the issue's 200 steps at 0.1), stores the child against v0 in every
format and prints each size as a share of the full model.safetensors:
  zstd      the file zstd-compressed without a parent (what compression alone buys)
  f1 xor    XOR with the parent, byte planes, zstd (delta format 1)
  f2 diff   zigzag integer difference of the bit patterns, byte planes, zstd (format 2)
  f3 order  the same with each tensor's elements in the parent's exponent order (format 3, what
            lib.checkpoints.checkpoint.compact stores)
  est.      what an entropy coder of one weight at a time would need, with the parent's exponent
            as context (estimated: the entropy of each difference's bit-length class, plus the
            bits below its leading one taken as raw); how far zstd is from such a coder
and checks that materialize() restores the bytes exactly. Training runs on fp32 master weights;
`--dtype bfloat16` stores both versions in bf16 (checkpoints.dtype), as most Hugging Face
checkpoints are. The default v0 LR is the default preset's (3e-4), the "original LR" a served
model of this size would have; `--pretrain-lr 3e-3` is the tiny preset's, which the demo uses
to learn in minutes.

Run: .venv/bin/python bench/bench_delta.py [--pretrain-steps 200 1000 3000] [--dtype bfloat16 float32]
     [--steps 200 --lr-scale 0.1 --width 64 --layers 2]
     .venv/bin/python bench/bench_delta.py --synthetic   (speed at 138 M weights, no training)
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


def entropy_estimate(target: bytes, parent: bytes) -> float:
    """Bytes an order-0 coder of one weight at a time would need, with the parent's exponent as
    context: for each float tensor, the entropy of the difference's bit-length class given the
    exponent, plus the bits below the leading one taken as raw (an estimate that stays honest
    for fp32, where almost every 17-bit difference is unique in a small model); other tensors raw."""
    import numpy as np

    from lib.checkpoints.delta import _EXPONENT, _FLOAT_UINT, _split_safetensors, _tensors

    head, th, td = _split_safetensors(target, "target")
    _, ph, pd = _split_safetensors(parent, "parent")
    total = float(len(head))
    for name, info in _tensors(th).items():
        b, e = info["data_offsets"]
        p, kind = ph.get(name), _FLOAT_UINT.get(info["dtype"])
        if kind is None or info["dtype"] == "F64" or p is None or p["shape"] != info["shape"] or p["dtype"] != info["dtype"] or e <= b:
            total += e - b
            continue
        new = np.frombuffer(td[b:e], dtype=kind).astype(np.int64)
        old = np.frombuffer(pd[p["data_offsets"][0]:p["data_offsets"][1]], dtype=kind).astype(np.int64)
        shift, mask = _EXPONENT[info["dtype"]]
        diff = new - old
        zigzag = np.abs(diff) * 2 - (diff < 0)
        length = np.zeros(diff.size, dtype=np.int64)
        moved = zigzag > 0
        length[moved] = np.floor(np.log2(zigzag[moved])).astype(np.int64) + 1
        expo = (old >> shift) & mask
        counts = np.bincount(expo * 65 + length)  # (exponent, bit length) -> elements
        per_ctx = np.pad(counts, (0, (-counts.size) % 65)).reshape(-1, 65).sum(axis=1)
        nz = counts > 0
        ctx_of = np.nonzero(nz)[0] // 65
        total += float(-(counts[nz] * np.log2(counts[nz] / per_ctx[ctx_of])).sum()) / 8
        total += float(np.maximum(length - 1, 0).sum()) / 8
    return total


def run_one(work: Path, paths: dict, args, pretrain_steps: int, dtype: str) -> dict:
    from lib.checkpoints.checkpoint import MODEL_FILE, compact, materialize, read_meta
    from lib.checkpoints.delta import encode_delta
    from lib.config import load_config
    from lib.training.train import train
    from train_fixtures import write_config

    import torch
    import zstandard
    from safetensors.torch import load as st_torch

    tag = f"{pretrain_steps}-{dtype}"
    cfg_path = write_config(work / f"cfg-{tag}.yaml",
                            model={"hidden_size": args.width, "num_layers": args.layers, "intermediate_size": 2 * args.width,
                                   "pretrain_iterations": pretrain_steps, "pretrain_lr": args.pretrain_lr},
                            training={"num_iterations": args.steps, "lr_scale": args.lr_scale, "snapshot_every": 10_000},
                            checkpoints={"dtype": dtype})
    cfg = load_config(cfg_path)
    v0, v1 = work / f"v0-{tag}", work / f"v1-{tag}"
    t0 = time.perf_counter()
    r0 = train(cfg, paths["data"], v0, init=True, tokenizer_dir=paths["tokenizer"], train_dir=work / f"t0-{tag}", meta={"version": "v0"})
    r1 = train(cfg, paths["data"], v1, parent=v0, train_dir=work / f"t1-{tag}", meta={"version": "v1"})
    t_train = time.perf_counter() - t0

    full, parent = (v1 / MODEL_FILE).read_bytes(), (v0 / MODEL_FILE).read_bytes()
    sizes = {"zstd": len(zstandard.ZstdCompressor(level=3, threads=-1).compress(full))}
    for method in ("xor", "diff"):
        sizes[method] = len(encode_delta(full, parent, method=method)[0])
    a, b = st_torch(parent), st_torch(full)
    rel = torch.cat([((b[k].float() - a[k].float()).abs() / a[k].float().abs().clamp_min(1e-12)).flatten() for k in b])
    unchanged = float(sum((b[k] == a[k]).sum() for k in b)) / sum(v.numel() for v in b.values())
    estimate = entropy_estimate(full, parent)
    t1 = time.perf_counter()
    info = compact(v1, v0)
    t_compact = time.perf_counter() - t1
    t1 = time.perf_counter()
    restored = (materialize(v1) / MODEL_FILE).read_bytes()
    t_restore = time.perf_counter() - t1
    assert restored == full, "materialize must restore the exact bytes"
    sizes["grouped"] = info["delta_bytes"]
    return {
        "pretrain_steps": pretrain_steps, "dtype": dtype, "full_bytes": len(full), "peak_lr": read_meta(v1)["peak_lr"],
        "v0_loss": r0["final_metrics"]["mean_loss_last_10"], "v1_loss": r1["final_metrics"]["mean_loss_last_10"],
        "median_relative_change": float(rel.median()), "unchanged": unchanged,
        **{f"{k}_ratio": v / len(full) for k, v in sizes.items()}, "estimate_ratio": estimate / len(full),
        "delta_ratio": info["ratio"], "train_s": t_train, "compact_s": t_compact, "materialize_s": t_restore,
    }


_CODEC_CHILD = """
import hashlib, io, json, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
peak_anon = [0]
def watch():  # anonymous memory (heap), sampled: RSS also counts the memory-mapped files' pages
    while True:
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                peak_anon[0] = max(peak_anon[0], int(line.split()[1]))
        time.sleep(0.005)
threading.Thread(target=watch, daemon=True).start()
from lib.checkpoints.checkpoint import _Sha256Sink, _mapped
from lib.checkpoints.delta import decode_delta, decode_delta_to, encode_delta, encode_delta_to
work, method, mode = Path(sys.argv[2]), sys.argv[3], sys.argv[4]
t0 = time.perf_counter()
if mode == "streaming":  # what compact and materialize do: memory-mapped files, tensor by tensor
    with _mapped(work / "child.safetensors") as child, _mapped(work / "parent.safetensors") as parent:
        with open(work / "delta", "wb") as out:
            encode_delta_to(child, parent, out, method=method)
        t1 = time.perf_counter()
        sink = _Sha256Sink()
        with open(work / "delta", "rb") as payload:
            decode_delta_to(payload, parent, sink, method)
        digest = sink.hash.hexdigest()
else:  # the whole files in memory
    child, parent = (work / "child.safetensors").read_bytes(), (work / "parent.safetensors").read_bytes()
    payload, _ = encode_delta(child, parent, method=method)
    (work / "delta").write_bytes(payload)
    t1 = time.perf_counter()
    digest = hashlib.sha256(decode_delta(payload, parent, method)).hexdigest()
t2 = time.perf_counter()
print(json.dumps({"encode_s": t1 - t0, "decode_s": t2 - t1, "digest": digest, "delta_bytes": (work / "delta").stat().st_size,
                  "peak_rss_mb": [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0] / 1024, "peak_anon_mb": peak_anon[0] / 1024}))
"""


def synthetic(layers: int, width: int, vocab: int, step: float) -> None:
    """Speed, size and memory at scale without training: a GPT-2-small-shaped bf16 checkpoint
    (weights N(0, 0.02)) and a child with every weight moved by N(0, `step`), as AdamW would.
    Each codec runs in a fresh process that reports its own peak RSS and peak heap (anonymous
    memory, sampled every 5 ms; RSS also counts the pages of memory-mapped files, which the kernel
    can drop): streaming (memory-mapped files, tensor by tensor, as compact/materialize run)
    against the whole files read into memory."""
    import hashlib
    import subprocess

    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    shapes = {"embed": (vocab, width)}
    for i in range(layers):
        for name, shape in (("q", (width, width)), ("k", (width, width)), ("v", (width, width)), ("o", (width, width)),
                            ("up", (4 * width, width)), ("gate", (4 * width, width)), ("down", (width, 4 * width))):
            shapes[f"layers.{i}.{name}"] = shape
    work = Path(tempfile.mkdtemp(prefix="bench_delta_synthetic_"))
    try:
        parent = {k: (torch.randn(s, generator=g) * 0.02).bfloat16() for k, s in shapes.items()}
        save_file(parent, work / "parent.safetensors")
        save_file({k: (v.float() + step * torch.randn(v.shape, generator=g)).bfloat16() for k, v in parent.items()},
                  work / "child.safetensors")
        del parent
        full = (work / "child.safetensors").stat().st_size
        expected = hashlib.sha256((work / "child.safetensors").read_bytes()).hexdigest()
        print(f"synthetic: {(full - 8) / 2e6:.0f} M bf16 weights ({full / 1e6:.0f} MB), each moved by N(0, {step:g}); "
              "each codec in a fresh process")
        for method in ("diff", "grouped"):
            for mode in ("streaming", "in-memory"):
                out = subprocess.run([sys.executable, "-c", _CODEC_CHILD, str(ROOT), str(work), method, mode],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                assert r["digest"] == expected, "restore must be bit-exact"
                print(f"  {method:<8} {mode:<10} {r['delta_bytes'] / full:6.1%}  encode {r['encode_s']:.1f} s "
                      f"({full / r['encode_s'] / 1e6:.0f} MB/s), decode {r['decode_s']:.1f} s, "
                      f"peak RSS {r['peak_rss_mb']:,.0f} MB (heap {r['peak_anon_mb']:,.0f} MB), bit-exact")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="consolidation steps")
    ap.add_argument("--pretrain-steps", type=int, nargs="+", default=[200, 1000, 3000],
                    help="v0 pre-training lengths to compare: a barely trained v0 moves much further under consolidation")
    ap.add_argument("--lr-scale", type=float, default=0.1)
    ap.add_argument("--pretrain-lr", type=float, default=3e-4,
                    help="v0's LR, which the consolidation scales (3e-4: the default preset; 3e-3: the tiny preset)")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", nargs="+", choices=["float32", "bfloat16"], default=["bfloat16", "float32"],
                    help="checkpoints.dtype of both versions (bfloat16: a bf16 model, as most HF checkpoints are)")
    ap.add_argument("--keep", type=Path, help="Keep the work folder here.")
    ap.add_argument("--synthetic", action="store_true",
                    help="Instead: speed and size on a GPT-2-small-shaped bf16 checkpoint (12 × 768, vocab 32768) without training.")
    args = ap.parse_args()
    if args.synthetic:
        synthetic(12, 768, 32768, 3e-4)
        return

    from train_fixtures import prepare

    work = Path(tempfile.mkdtemp(prefix="bench_delta_"))
    rows = []
    try:
        paths = prepare(work, token_budget=(args.steps + max(args.pretrain_steps)) * 512 + 50_000)
        for steps in args.pretrain_steps:
            for dtype in args.dtype:
                rows.append(run_one(work, paths, args, steps, dtype))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nmodel: {args.layers} layers × {args.width} wide; v0 pre-trained at {args.pretrain_lr:g}, then {args.steps} "
          f"consolidation steps at lr_scale {args.lr_scale} (peak {rows[0]['peak_lr']:.1e}); bytes as a share of the full file")
    print(f"{'v0 steps':>8} {'dtype':>9} {'v0→v1 loss':>12} {'moved':>6} {'same':>6} {'zstd':>6} {'f1 xor':>7} "
          f"{'f2 diff':>8} {'f3 order':>9} {'estimate':>9}")
    for r in rows:
        print(f"{r['pretrain_steps']:>8} {r['dtype']:>9} {r['v0_loss']:>5.2f}→{r['v1_loss']:<5.2f} {r['median_relative_change']:>6.1%} "
              f"{r['unchanged']:>6.1%} {r['zstd_ratio']:>6.1%} {r['xor_ratio']:>7.1%} {r['diff_ratio']:>8.1%} "
              f"{r['grouped_ratio']:>9.1%} {r['estimate_ratio']:>9.1%}")
    print("moved: median relative change of a weight; same: weights whose stored value did not change. "
          f"compact ≤ {max(r['compact_s'] for r in rows):.2f} s, materialize ≤ {max(r['materialize_s'] for r in rows):.2f} s, "
          "every restore bit-exact.")


if __name__ == "__main__":
    main()
