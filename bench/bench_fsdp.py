"""Memory per rank and seconds per step of training.parallelism=fsdp against ddp, on CPU with 2 processes.

Setup (once): the ~100 M-parameter Llama of bench_train_overhead.py (`--width` 768, `--layers` 10,
12 heads, MLP 2048, vocabulary 32,000, tied embeddings: 95 M parameters, bf16 on disk with an
original_lr) and data prepared from the standard library.

Each variant is a real `torchrun --standalone --nproc-per-node 2` (gloo) of this script's child,
which runs the product's own code: `lib.training.setup.set_up` (model loaded, then DDP or FSDP2 per block
and root, AdamW) and `lib.training.train.train_step` for `--steps` optimizer steps of `--accum`
micro-batches. Each rank reports:
  - bytes of the parameters, gradients and AdamW state it holds (the local shard with FSDP),
    counted from the tensors after a step (gradients from one more backward, before zero_grad);
  - peak resident memory during the steps (VmHWM, reset through /proc/self/clear_refs after set-up,
    so the whole-model load before sharding is not in it), the peak of set-up, and the resident
    memory after each step;
  - seconds per step, mean of steps 2..N, wall and process CPU time.
The variants alternate `--repeats` times; the fastest run of each is compared. Printed: the
FSDP / DDP ratios (target for parameters, gradients, AdamW: about 1 / world = 0.5) and FSDP's
step-time overhead. The machine's load average is printed with the figures.

Run: .venv/bin/python bench/bench_fsdp.py [--steps 4 --repeats 1 --batch 1 --seq 256 --accum 2]
     (about 4 minutes on 2 idle cores)
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
sys.path.insert(0, str(ROOT / "bench"))

from bench_train_overhead import add_model_shape, model_shape_args  # noqa: E402  (one model shape for both)
GiB = 1 << 30


def proc_status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def _local_bytes(t) -> int:
    t = t._local_tensor if hasattr(t, "_local_tensor") else t
    return t.numel() * t.element_size()


def child(args) -> None:
    """One rank: set up the trainer's model and optimizer, run the steps, report to OUT/rank-R.json."""
    import torch

    from lib.config import load_config
    from lib.training.distributed import Dist
    from lib.data.prepared import PreparedData
    from lib.training.setup import default_loader, set_up
    from lib.training.train import train_step

    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, overrides=[f"training.parallelism={args.parallelism}"])
    d = Dist("cpu")
    torch.use_deterministic_algorithms(True)  # as the trainer does on CPU
    torch.utils.deterministic.fill_uninitialized_memory = False
    run = set_up(cfg, d, PreparedData.open(args.data), args.out / "v1", args.out / "train", parent=args.v0, init=False,
                 resume=False, tokenizer_dir=None, meta=None, make_loader=default_loader)
    after_setup = proc_status()
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the peak resident size to the current one
        f.write("5")
    times, cpu, rss = [], [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        train_step(run, lambda: None)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        rss.append(proc_status()["VmRSS"])
    x, y, _ = run.loader.next_batch()
    logits = run.step_model(input_ids=x).logits
    torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), ignore_index=-100).backward()
    params = {id(p): p for p in run.model.parameters()}.values()
    report = {
        "rank": d.rank, "step_s": times, "cpu_s": cpu, "rss_after_step": rss,
        "params": sum(_local_bytes(p) for p in params),
        "grads": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "adamw": sum(_local_bytes(v) for s in run.optimizer.state.values() for v in s.values() if torch.is_tensor(v)),
        "peak_steps": proc_status()["VmHWM"], "after_setup_rss": after_setup["VmRSS"], "peak_process": after_setup["VmHWM"],
    }
    (args.out / f"rank-{d.rank}.json").write_text(json.dumps(report))
    d.barrier()
    d.close()


def run_variant(parallelism: str, args, cfg: Path, v0: Path, data: Path, out: Path, port: int) -> list[dict]:
    out.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", __file__, "--child", "--parallelism", parallelism, "--config", str(cfg),
           "--v0", str(v0), "--data", str(data), "--out", str(out), "--steps", str(args.steps), "--threads", str(args.threads)]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{parallelism} failed:\n{res.stderr[-4000:]}")
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    add_model_shape(ap)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank (2 ranks on 2 cores: 1)")
    ap.add_argument("--port", type=int, default=29640, help="first loopback rendezvous port")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--parallelism", help=argparse.SUPPRESS)
    ap.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--v0", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import logging

        logging.basicConfig(level=logging.WARNING)
        child(args)
        return

    from train_fixtures import prepare, write_config

    work = Path(tempfile.mkdtemp(prefix="bench_fsdp_"))
    try:
        world = 2
        tokens = args.steps * args.batch * args.seq * args.accum * world
        paths = prepare(work, token_budget=2 * tokens + 20_000, seq_len=args.seq, vocab_size=4096)
        v0 = work / "v0"
        build = [sys.executable, str(ROOT / "bench" / "bench_train_overhead.py"), "--child", "build", *model_shape_args(args),
                 "--v0", str(v0), "--tokenizer", str(paths["tokenizer"])]
        built = json.loads(subprocess.run(build, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
        cfg = write_config(work / "cfg.yaml", training={
            "seq_len": args.seq, "device_batch_size": args.batch, "total_batch_size": args.batch * args.seq * args.accum * world,
            "num_iterations": args.steps, "snapshot_every": 1000, "lr_scale": 0.1, "compile": False})
        runs: dict[str, list[list[dict]]] = {"ddp": [], "fsdp": []}
        port = args.port
        for i in range(args.repeats):
            for kind in ("ddp", "fsdp"):
                runs[kind].append(run_variant(kind, args, cfg, v0, paths["data"], work / f"{kind}-{i}", port))
                port += 1

        def per_step(ranks, key="step_s"):  # a step ends when the slowest rank's does: the max over ranks
            return max(sum(r[key][1:]) / max(1, len(r[key]) - 1) for r in ranks)

        best = {k: min(v, key=per_step) for k, v in runs.items()}
        load = os.getloadavg()
        print(f"Llama {args.layers}×{args.width}, MLP {args.mlp}, vocab {args.vocab}: {built['parameters'] / 1e6:.1f} M parameters; "
              f"2 ranks (gloo, CPU), {args.accum} × {args.batch}×{args.seq} tokens per rank per step, {args.steps} steps, "
              f"{args.threads} torch thread(s) per rank; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(f"{'per rank (max over ranks)':<34} {'ddp':>10} {'fsdp':>10} {'fsdp/ddp':>9}")
        for key, label in [("params", "parameters (fp32)"), ("grads", "gradients (fp32)"), ("adamw", "AdamW state"),
                           ("peak_process", "peak RSS of set-up (load, shard)"), ("after_setup_rss", "RSS after set-up"),
                           ("peak_steps", "peak RSS during the steps"), ("rss_after_step", "RSS after the last step")]:
            a, b = (max(r[key][-1] if isinstance(r[key], list) else r[key] for r in best[k]) for k in ("ddp", "fsdp"))
            print(f"{label:<34} {a / GiB:8.3f} G {b / GiB:8.3f} G {b / a:9.3f}")
        for k in ("ddp", "fsdp"):
            print(f"{k} RSS after each step (GiB, rank 0): {[round(x / GiB, 3) for x in best[k][0]['rss_after_step']]}")
        malloc = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
        if malloc:
            print(f"glibc settings: {malloc}")
        a, b = per_step(best["ddp"]), per_step(best["fsdp"])
        print(f"{'seconds per step (steps 2..N)':<34} {a:10.3f} {b:10.3f} {b / a:9.3f}  runs ddp "
              f"{[round(per_step(r), 3) for r in runs['ddp']]} fsdp {[round(per_step(r), 3) for r in runs['fsdp']]}")
        a, b = per_step(best["ddp"], "cpu_s"), per_step(best["fsdp"], "cpu_s")
        print(f"{'CPU seconds per step':<34} {a:10.3f} {b:10.3f} {b / a:9.3f}")
        print(f"fsdp step-time overhead against ddp: wall {per_step(best['fsdp']) / per_step(best['ddp']) - 1:+.1%}, CPU {b / a - 1:+.1%}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
