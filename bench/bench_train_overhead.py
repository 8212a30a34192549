"""Seconds per optimizer step of lib.training.train against a bare PyTorch loop, and the memory estimate
against the measured peak, on CPU with a ~100 M-parameter Llama built locally (random weights).

Setup (once): a BPE tokenizer and prepared data from the standard library (tests/train_fixtures),
and v0: a `LlamaForCausalLM` (`--width` 768, `--layers` 10, 12 heads, MLP 2048, vocabulary 32,000,
tied embeddings: 95 M parameters) with random weights, saved in bf16 with an original_lr, as an
adopted model would be.

Each variant runs in a fresh `python` process (fork + exec from this small one) that reads its own
peak resident memory from /proc/self/status (VmHWM, and RssAnon at the end):
  bare     from_pretrained(dtype=float32) of v0, the same TrainLoader over the same prepared data,
           and per step: `accum` micro-batches of forward → fp32 cross-entropy → backward, clip,
           AdamW step. Nothing else.
  trainer  lib.training.train.train(parent=v0): the product's consolidation (memory check, LR schedule,
           exact token-mean loss, per-step metrics line and stop/metrics collective, deterministic
           algorithms, a snapshot every `--snapshot-every` steps), then the version write (bf16
           stochastic rounding, fp32 master weights, update survival), all inside the measured peak.
Seconds per step: the mean over steps 2..N (step 1 allocates AdamW's state) of each process's own
step times, wall and process CPU time (steadier on a shared machine); the two variants are
interleaved `--repeats` times and the fastest run of each is compared. The estimate is what the trainer computed before loading the model (meta.json
memory_estimate, the process's resident memory at that point as its runtime floor).

Run: .venv/bin/python bench/bench_train_overhead.py [--steps 5 --repeats 2 --batch 1 --seq 256 --accum 2 --threads 1]
     (about 3 minutes of CPU; longer on a busy machine); --activation-checkpointing for that variant of both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def proc_status() -> dict[str, int]:
    """VmHWM, VmRSS, RssAnon, RssFile of this process in bytes."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    return out


# -- the child processes ----------------------------------------------------------------------------
def child_bare(args) -> dict:
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from lib.data.loader import TrainLoader

    torch.set_num_threads(args.threads)
    base = proc_status()
    model = AutoModelForCausalLM.from_pretrained(args.v0, dtype=torch.float32)
    model.train()
    model.config.use_cache = False
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    loader = TrainLoader(args.data, args.batch, args.seq)
    times, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.accum):
            x, y, _ = loader.next_batch()
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), ignore_index=-100)
            (loss / args.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"step_s": times, "cpu_s": cpu, "base": base, "end": proc_status()}


def child_trainer(args) -> dict:
    import torch

    from lib.checkpoints.checkpoint import read_meta
    from lib.config import load_config
    from lib.training.train import train

    torch.set_num_threads(args.threads)
    base = proc_status()
    cfg = load_config(args.config)
    train(cfg, args.data, args.out, parent=args.v0, train_dir=args.train_dir, meta={"version": "v1"})
    lines = [json.loads(x) for x in (args.train_dir / "metrics.jsonl").read_text().splitlines()]
    return {"step_s": [r["dt_s"] for r in lines], "cpu_s": [r["cpu_s"] for r in lines], "base": base, "end": proc_status(), "estimate": read_meta(args.out)["memory_estimate"],
            "update_kept": read_meta(args.out).get("update_kept")}


def child_build(args) -> dict:
    """v0: a random ~100 M Llama in bf16 with the bench tokenizer's files and an original_lr."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lib.checkpoints.checkpoint import copy_tokenizer_files
    from lib.data.tokenizer import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.width, intermediate_size=args.mlp, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, num_key_value_heads=args.heads, max_position_embeddings=max(1024, args.seq),
                      tie_word_embeddings=True, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(args.v0)
    copy_tokenizer_files(args.tokenizer, args.v0)
    (args.v0 / "meta.json").write_text(json.dumps({"version": "v0", "original_lr": 3e-4}))
    return {"parameters": sum(p.numel() for p in model.parameters())}


def run_child(kind: str, args, extra: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, __file__, "--child", kind, *extra]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


MODEL_SHAPE = ("width", "layers", "heads", "mlp", "vocab", "seq", "batch", "accum")


def add_model_shape(ap: argparse.ArgumentParser) -> None:
    """The model and batch shape both training benchmarks take (bench_fsdp builds its model here)."""
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--mlp", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--accum", type=int, default=2, help="micro-batches per rank per step")


def model_shape_args(args: argparse.Namespace) -> list[str]:
    """`add_model_shape`'s values as command-line arguments, for a child process."""
    return [x for name in MODEL_SHAPE for x in (f"--{name}", str(getattr(args, name)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    add_model_shape(ap)
    ap.add_argument("--snapshot-every", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1, help="torch threads; 1 keeps CPU time free of spin-waits")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--child", choices=["bare", "trainer", "build"], help=argparse.SUPPRESS)
    ap.add_argument("--v0", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--train-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        import logging

        logging.basicConfig(level=logging.WARNING)
        result = {"bare": child_bare, "trainer": child_trainer, "build": child_build}[args.child](args)
        print(json.dumps(result))
        return

    from train_fixtures import prepare, write_config

    work = Path(tempfile.mkdtemp(prefix="bench_overhead_"))
    shape = model_shape_args(args) + ["--steps", str(args.steps), "--threads", str(args.threads)] + (["--activation-checkpointing"] if args.activation_checkpointing else [])
    try:
        tokens = args.steps * args.batch * args.seq * args.accum
        paths = prepare(work, token_budget=2 * tokens + 20_000, seq_len=args.seq, vocab_size=4096)
        v0 = work / "v0"
        built = run_child("build", args, shape + ["--v0", str(v0), "--tokenizer", str(paths["tokenizer"])])
        cfg = write_config(work / "cfg.yaml", training={
            "seq_len": args.seq, "device_batch_size": args.batch, "total_batch_size": args.batch * args.seq * args.accum,
            "num_iterations": args.steps, "snapshot_every": args.snapshot_every, "lr_scale": 0.1,
            "activation_checkpointing": args.activation_checkpointing})
        common = shape + ["--v0", str(v0), "--data", str(paths["data"])]
        bare, trainer = [], []
        for i in range(args.repeats):
            bare.append(run_child("bare", args, common))
            trainer.append(run_child("trainer", args, common + ["--config", str(cfg), "--out", str(work / f"v1-{i}"),
                                                                "--train-dir", str(work / f"t-{i}")]))

        def per_step(r, key="step_s"):
            return sum(r[key][1:]) / max(1, len(r[key]) - 1)

        def cpu(r):
            return per_step(r, "cpu_s")

        b, t = min(bare, key=per_step), min(trainer, key=per_step)
        bc, tc = min(bare, key=cpu), min(trainer, key=cpu)
        print(f"Llama {args.layers}×{args.width}, MLP {args.mlp}, vocab {args.vocab}: {built['parameters'] / 1e6:.1f} M parameters, "
              f"bf16 on disk; {args.accum} × {args.batch}×{args.seq} tokens per step, {args.steps} steps, "
              f"torch threads {args.threads}{', activation checkpointing' if args.activation_checkpointing else ''}")
        print(f"seconds per step (steps 2..N)  bare {per_step(b):.3f}  runs {[round(per_step(r), 3) for r in bare]}")
        print(f"                               lib.training.train {per_step(t):.3f}  runs {[round(per_step(r), 3) for r in trainer]}")
        print(f"trainer overhead, wall: {per_step(t) / per_step(b) - 1:+.1%} (target ≤ +5%)")
        print(f"CPU seconds per step           bare {cpu(bc):.3f}  runs {[round(cpu(r), 3) for r in bare]}")
        print(f"                               lib.training.train {cpu(tc):.3f}  runs {[round(cpu(r), 3) for r in trainer]}")
        print(f"trainer overhead, CPU time: {cpu(tc) / cpu(bc) - 1:+.1%} (steadier than wall time on a shared machine)")
        gib = 1 << 30
        est = t["estimate"]
        peak = t["end"]["VmHWM"]
        print(f"peak resident memory (VmHWM): bare {b['end']['VmHWM'] / gib:.2f} GiB, lib.training.train {peak / gib:.2f} GiB "
              f"(before loading: {t['base']['VmHWM'] / gib:.2f}); RssAnon at the end: bare {b['end']['RssAnon'] / gib:.2f}, "
              f"lib.training.train {t['end']['RssAnon'] / gib:.2f} GiB")
        print("estimate (lib.training.footprint, computed by the trainer before loading the model):")
        order = ["weights (fp32)", "gradients (fp32)", "AdamW moments (fp32)", "activations", "logits + cross-entropy",
                 "allocator slack", "runtime"]
        for k, v in sorted(est["components"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99):
            print(f"  {k:<24} {v / gib:6.2f} GiB")
        print(f"  {'total':<24} {est['total'] / gib:6.2f} GiB  vs measured peak {peak / gib:.2f} GiB: "
              f"{est['total'] / peak - 1:+.1%} (target within ±15%)")
        print(f"update kept in storage (meta.json): {t['update_kept']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
