"""The trainer on one GPU against a bare PyTorch loop on the same 1 B Llama: tokens/s, MFU, and
peak memory against the memory estimate. Needs CUDA; without it, says so and exits 2.

Setup (once per --workdir): a BPE tokenizer and prepared data from the standard library
(tests/train_fixtures), and v0: a Llama with Llama-3.2-1B's shape (hidden 2,048, 16 layers,
32 heads, 8 KV heads, MLP 8,192, vocabulary 128,256, tied embeddings: 1.24 B parameters) with
random weights built here, saved in bf16 with an original_lr, as an adopted model would be.

Variants (each in this run, so every figure comes from the same GPU):
  trainer-off / trainer-on  the product's launch line (lib.training.distributed.torchrun_command,
      --nproc-per-node 1, training.parallelism=ddp, device=cuda): bf16 autocast, fused AdamW,
      training.device_batch_size=auto, torch.compile per block off / on. Its tokens/s and MFU are
      the trainer's own (meta.json final_metrics: the steps after warm-up), its peak memory
      torch's max_memory_reserved plus the CUDA context, against meta.json's memory_estimate.
  bare-off / bare-on  in this process, after the trainers: from_pretrained in fp32 on the GPU,
      the same micro-batch and accumulation the trainer chose, bf16 autocast, fp32
      cross-entropy, clip, fused AdamW, one loss.item() per step; random token ids made on the
      GPU up front. Timed per step after the same warm-up (lib.training.throughput).
Printed per variant: tokens/s, MFU (per GPU, against the peak lib.training.throughput names),
peak GiB, estimate GiB and their ratio; then trainer / bare per compile setting.
Goals on one H100: MFU >= 40%, the trainer within 5% of the bare loop, the estimate within 15%
of the peak.

Run: .venv/bin/python bench/bench_gpu.py [--workdir DIR --steps 10 --tokens-per-step 65536 --seq 2048]
     [--variants trainer-off,trainer-on,bare-off,bare-on]
     Variants can be split over several calls with one --workdir (results accumulate in it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
GiB = 1 << 30
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True)
VARIANTS = ("trainer-off", "trainer-on", "bare-off", "bare-on")


def setup(work: Path, args) -> dict[str, Path]:
    """Tokenizer, prepared data and v0 under `work` (kept between calls)."""
    done = work / "setup.json"
    if done.is_file():
        return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lib.checkpoints.checkpoint import copy_tokenizer_files
    from lib.data.tokenizer import load_tokenizer
    from train_fixtures import prepare

    t0 = time.perf_counter()
    tokens = 2 * 2 * args.steps * args.tokens_per_step  # two trainer runs, read from one prepared folder
    paths = prepare(work, token_budget=tokens + args.tokens_per_step, seq_len=args.seq, vocab_size=8192)
    tok = load_tokenizer(paths["tokenizer"])
    cfg = LlamaConfig(**LLAMA_1B, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    torch.manual_seed(0)
    with torch.device("cuda"):  # init on the GPU: seconds instead of a minute of CPU
        model = LlamaForCausalLM(cfg)
    v0 = work / "v0"
    model.to(torch.bfloat16).save_pretrained(v0, max_shard_size="100GB")  # one model.safetensors
    copy_tokenizer_files(paths["tokenizer"], v0)
    (v0 / "meta.json").write_text(json.dumps({"version": "v0", "original_lr": 3e-4}))
    del model
    torch.cuda.empty_cache()
    out = {"tokenizer": str(paths["tokenizer"]), "data": str(paths["data"]), "v0": str(v0)}
    done.write_text(json.dumps(out))
    print(f"setup: {time.perf_counter() - t0:.0f} s", flush=True)
    return {k: Path(v) for k, v in out.items()}


def run_trainer(work: Path, paths: dict[str, Path], args, compile_on: bool) -> dict:
    """The product's torchrun line on one GPU; its meta.json figures."""
    from lib.checkpoints.checkpoint import read_meta
    from lib.training.distributed import torchrun_command
    from lib.training.footprint import CUDA_CONTEXT_BYTES

    name = f"trainer-{'on' if compile_on else 'off'}"
    cfg = work / f"{name}.json"
    cfg.write_text(json.dumps({
        "training": {"device": "cuda", "parallelism": "ddp", "compile": "on" if compile_on else "off", "seq_len": args.seq,
                     "total_batch_size": args.tokens_per_step, "device_batch_size": "auto", "num_iterations": args.steps,
                     "snapshot_every": 10 * args.steps, "lr_scale": 0.1, "optimizer_state": "fresh"},
        "checkpoints": {"master_weights": False, "dtype": "bfloat16"},
    }))
    out, tdir = work / f"v1-{name}", work / f"t-{name}"
    cmd = torchrun_command(cfg, paths["data"], out, parent=paths["v0"], nproc_per_node=1, train_dir=tdir)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # keep a --target install's
    env = {**os.environ, "PYTHONPATH": pythonpath, "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {res.returncode}):\n{res.stderr[-4000:]}")
    meta = read_meta(out)
    final, est = meta["final_metrics"], meta["memory_estimate"]
    return {"variant": name, "tokens_per_s": final["tokens_per_s"], "mfu": final["mfu"], "peak_source": final["peak_source"],
            "peak_bytes": final["cuda_peak_reserved_bytes"] + CUDA_CONTEXT_BYTES, "estimate_bytes": est["total"],
            "device_batch_size": final["device_batch_size"], "accumulation": final["accumulation"],
            "activation_checkpointing": meta["activation_checkpointing"], "wall_s": time.perf_counter() - t0}


def run_bare(paths: dict[str, Path], args, compile_on: bool, batch: int, accum: int) -> dict:
    """A bare loop on the same model and batch shape, in this process."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from lib.training.footprint import CUDA_CONTEXT_BYTES
    from lib.data.tokenizer import load_tokenizer
    from lib.training.throughput import Meter, model_flops_per_token, peak_flops

    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    model = AutoModelForCausalLM.from_pretrained(paths["v0"], dtype=torch.float32).to(dev)
    model.train()
    model.config.use_cache = False
    if compile_on:
        for block in model.model.layers:
            block.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    vocab = load_tokenizer(paths["tokenizer"]).vocab_size
    rows = torch.randint(0, vocab, (accum, batch, args.seq + 1), device=dev)
    peak, source = peak_flops(dev, torch.bfloat16)
    meter = Meter(model_flops_per_token(model, args.seq), 1, peak, source, planned_steps=args.steps)
    history: dict = {}
    for _ in range(args.steps):
        t0 = time.perf_counter()
        total = torch.zeros((), device=dev)
        for i in range(accum):
            x, y = rows[i, :, :-1], rows[i, :, 1:]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
            del logits
            (loss / accum).backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        total.item()  # the step's one sync, as the trainer's
        meter.step(accum * batch * args.seq, time.perf_counter() - t0, history)
    summary = meter.summary(history)
    result = {"variant": f"bare-{'on' if compile_on else 'off'}", "tokens_per_s": summary["tokens_per_s"], "mfu": summary["mfu"],
              "peak_source": source, "peak_bytes": torch.cuda.max_memory_reserved(dev) + CUDA_CONTEXT_BYTES, "estimate_bytes": None,
              "device_batch_size": batch, "accumulation": accum}
    del model, opt, rows
    torch.cuda.empty_cache()
    return result


def report(results: dict[str, dict]) -> None:
    import torch

    print(f"\ndevice: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'variant':<12} {'tokens/s':>10} {'MFU':>7} {'peak GiB':>9} {'estimate':>9} {'est/peak':>9}  batch x accum")
    for name in VARIANTS:
        r = results.get(name)
        if r is None:
            continue
        est = r["estimate_bytes"]
        est_gib = "" if est is None else f"{est / GiB:.2f}"
        ratio = "" if est is None else f"{est / r['peak_bytes']:.2f}"
        print(f"{name:<12} {r['tokens_per_s']:>10,.0f} {r['mfu']:>7.1%} {r['peak_bytes'] / GiB:>9.2f} "
              f"{est_gib:>9} {ratio:>9}  {r['device_batch_size']} x {r['accumulation']}")
    for c in ("off", "on"):
        t, b = results.get(f"trainer-{c}"), results.get(f"bare-{c}")
        if t and b:
            print(f"compile {c}: trainer / bare tokens/s = {t['tokens_per_s'] / b['tokens_per_s']:.3f} (goal >= 0.95)")
    peaks = {r["peak_source"] for r in results.values()}
    print("MFU peak: " + "; ".join(sorted(peaks)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, help="kept between calls (default: a new temporary folder)")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per variant (the first 3 are warm-up)")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()

    from lib.training.distributed import cuda_problem

    problem = cuda_problem()
    if problem:
        print(f"bench_gpu.py needs a CUDA GPU and this machine has none usable: {problem}.", file=sys.stderr)
        return 2
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        print(f"unknown variant(s) {sorted(unknown)}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    paths = setup(work, args)
    for name in [v for v in variants if v.startswith("trainer")]:
        results[name] = run_trainer(work, paths, args, compile_on=name.endswith("on"))
        store.write_text(json.dumps(results, indent=1))
        print(json.dumps(results[name]), flush=True)
    for name in [v for v in variants if v.startswith("bare")]:
        shape = results.get(f"trainer-{name.split('-')[1]}") or next((r for k, r in results.items() if k.startswith("trainer")), None)
        if shape is None:
            print(f"{name}: run a trainer variant first (the bare loop uses the micro-batch it chose)", file=sys.stderr)
            return 2
        results[name] = run_bare(paths, args, name.endswith("on"), shape["device_batch_size"], shape["accumulation"])
        store.write_text(json.dumps(results, indent=1))
        print(json.dumps(results[name]), flush=True)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
