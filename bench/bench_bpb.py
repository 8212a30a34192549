"""Throughput of `bits_per_byte` (windows sorted by length, batched) against the baseline of one
window per forward pass in text order (the straightforward loop), on the same model and texts;
also checks that both give the same number.

The model is a random-initialised Llama of the tiny preset's shape (4 layers, 128 wide, 256
positions) with a BPE tokenizer trained on the standard library; the texts are stdlib sources.

    python bench/bench_bpb.py [--docs 60] [--chars 3000] [--batch 8]
"""

from __future__ import annotations

import argparse
import math
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def stdlib_docs(n: int, chars: int) -> list[str]:
    out = []
    for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = p.read_text(encoding="utf-8", errors="replace")
        if len(text) >= 200:
            out.append(text[:chars])
        if len(out) >= n:
            break
    return out


def build_model(folder: Path, texts: list[str]) -> Path:
    import torch

    from lib.config import load_config
    from lib.training.model import build_model as build
    from lib.data.tokenizer import load_tokenizer, train_bpe

    tok_dir = train_bpe(texts, 4096, folder)
    tok = load_tokenizer(tok_dir)
    torch.manual_seed(0)
    model = build(load_config(preset="tiny").model, tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
    model.save_pretrained(folder)
    return folder


def one_window_at_a_time(em, texts: list[str]) -> float:
    """Baseline: the same windows, one forward pass each, in text order."""
    nats = sum(em.sum_nats([[em.bos_id] + ids[i : i + em.max_len - 1]], batch_size=1)
               for ids in em.encode(texts) for i in range(0, len(ids), em.max_len - 1))
    return nats / (math.log(2) * sum(len(t.encode()) for t in texts))


def main() -> None:
    import torch

    from lib.evaluation.evaluate import EvalModel

    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--chars", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    texts = stdlib_docs(args.docs, args.chars)
    nbytes = sum(len(t.encode()) for t in texts)
    with tempfile.TemporaryDirectory() as tmp:
        em = EvalModel.load(build_model(Path(tmp), texts), device="cpu")
        em.bits_per_byte(texts[:4], batch_size=args.batch)  # warm-up
        t0 = time.perf_counter()
        base = one_window_at_a_time(em, texts)
        t_base = time.perf_counter() - t0
        t0 = time.perf_counter()
        batched = em.bits_per_byte(texts, batch_size=args.batch)
        t_batched = time.perf_counter() - t0
    print(f"docs={len(texts)} bytes={nbytes} window={em.max_len} batch={args.batch}")
    print(f"one window per forward (baseline): {nbytes / t_base / 1e3:8.1f} kB/s  bpb={base:.5f}")
    print(f"sorted + batched bits_per_byte:    {nbytes / t_batched / 1e3:8.1f} kB/s  bpb={batched:.5f}  "
          f"ratio {t_base / t_batched:.2f}x baseline  |bpb diff| {abs(base - batched):.1e}")


if __name__ == "__main__":
    main()
