"""Training-step overhead of lib.train against a bare loop (same model, same batches), CPU.

Baseline "bare": build the same v0 model (same seed), the same TrainLoader over the same prepared
data, and run forward → fp32 cross-entropy → backward → clip → AdamW step, nothing else.
Measured "trainer": `lib.train.train(--init)` on the same data with its metrics.jsonl line per
step, LR schedule, per-step stop/metrics collective (no-op on 1 process), deterministic
algorithms and snapshots every `--snapshot-every` steps; its loop time is the run's elapsed_s
(setup and the final version write excluded, like the bare loop's).
The two are interleaved `--repeats` times and the fastest of each is compared, in wall time and in
process CPU time (steadier when other work shares the cores).

Run: .venv/bin/python bench/bench_train_overhead.py [--steps 40 --width 128 --layers 4 --seq 128]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def bare_loop(cfg, data_dir: Path, tokenizer_dir: Path) -> float:
    import torch
    import torch.nn.functional as F

    from lib.loader import TrainLoader
    from lib.model import build_model
    from lib.tokenizer import load_tokenizer

    t = cfg.training
    tok = load_tokenizer(tokenizer_dir)
    model = build_model(cfg.model, tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id, seed=t.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.model.pretrain_lr, betas=tuple(t.adam_betas), weight_decay=t.weight_decay)
    loader = TrainLoader(data_dir, t.device_batch_size, t.seq_len)
    accum = t.total_batch_size // (t.device_batch_size * t.seq_len)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(cfg.model.pretrain_iterations):
        for _ in range(accum):
            x, y, _ = loader.next_batch()
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), ignore_index=-100)
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, time.process_time() - c0


def trainer_loop(cfg, data_dir: Path, tokenizer_dir: Path, work: Path, i: int) -> float:
    from lib.train import train

    result = train(cfg, data_dir, work / f"v-{i}", init=True, tokenizer_dir=tokenizer_dir, train_dir=work / f"t-{i}")
    return result["final_metrics"]["elapsed_s"], result["final_metrics"]["cpu_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--snapshot-every", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads; 1 keeps CPU time free of spin-waits")
    args = ap.parse_args()

    import logging

    import torch

    from lib.config import load_config
    from train_fixtures import prepare, write_config

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench_overhead_"))
    try:
        tokens = args.steps * args.batch * args.seq
        paths = prepare(work, token_budget=2 * tokens + 50_000, seq_len=args.seq)
        cfg = load_config(write_config(
            work / "cfg.yaml",
            model={"hidden_size": args.width, "num_layers": args.layers, "intermediate_size": 3 * args.width,
                   "max_position_embeddings": args.seq, "pretrain_iterations": args.steps},
            training={"seq_len": args.seq, "device_batch_size": args.batch, "total_batch_size": args.batch * args.seq,
                      "snapshot_every": args.snapshot_every}))
        bare, trainer = [], []
        for i in range(args.repeats):
            bare.append(bare_loop(cfg, paths["data"], paths["tokenizer"]))
            trainer.append(trainer_loop(cfg, paths["data"], paths["tokenizer"], work, i))
        print(f"model {args.layers}×{args.width}, seq {args.seq}, batch {args.batch}, {args.steps} steps, "
              f"snapshot every {args.snapshot_every}, torch threads {torch.get_num_threads()}")
        for k, what in ((0, "wall"), (1, "cpu")):
            b, t = min(x[k] for x in bare), min(x[k] for x in trainer)
            print(f"{what:<5}bare loop {b:7.2f} s ({b / args.steps * 1000:6.1f} ms/step) runs {[round(x[k], 2) for x in bare]}")
            print(f"{what:<5}lib.train {t:7.2f} s ({t / args.steps * 1000:6.1f} ms/step) runs {[round(x[k], 2) for x in trainer]}")
            print(f"{what:<5}overhead: {t / b - 1:+.1%} (target ≤ +5%)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
