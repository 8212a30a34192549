"""Loader batch rate against the rate the tiny demo model consumes batches (baseline).

Data: stdlib sources (corpus) + installed packages' sources (new data) prepared by
lib.data.sampling.prepare_training_data at the tiny preset's seq_len. Model: a LlamaForCausalLM built
directly with transformers from the tiny preset's `model` section; one step = forward, backward
and AdamW update on a [device_batch_size, seq_len] batch on CPU. Target: loader ≥ 50× faster.

    .venv/bin/python bench/bench_loader.py --steps 5
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _write(folder: Path, docs: list[tuple[str, str]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [d[0] for d in docs], "text": [d[1] for d in docs]}), folder / "part-00000.parquet")
    return folder


def _docs(root: Path, pattern: str, limit_bytes: int) -> list[tuple[str, str]]:
    out, total = [], 0
    for p in sorted(root.glob(pattern)):
        text = p.read_text(encoding="utf-8", errors="replace")
        if len(text) > 100:
            out.append((str(p.relative_to(root)), text))
            total += len(text)
        if total >= limit_bytes:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="model steps timed (loader: 50x as many batches)")
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lib.config import SourceConfig, load_config
    from lib.data.loader import TrainLoader
    from lib.data.sampling import prepare_training_data
    from lib.data.tokenizer import load_tokenizer, train_bpe

    cfg = load_config(preset="tiny")
    B, T = cfg.training.device_batch_size, cfg.training.seq_len
    tmp = Path(tempfile.mkdtemp(prefix="bench_loader_"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    old = _docs(stdlib, "*.py", 1_500_000)
    new = _docs(Path(sysconfig.get_paths()["purelib"]), "*/*.py", 300_000)
    tok_dir = train_bpe([t for _, t in old[:150]], cfg.tokenizer.vocab_size, tmp / "tok")
    sources = [SourceConfig(name="stdlib", path=_write(tmp / "old", old), weight=1 - cfg.sampling.new_data_ratio, kind="corpus"),
               SourceConfig(name="new", path=_write(tmp / "new", new), weight=cfg.sampling.new_data_ratio, kind="buffer")]
    budget = cfg.training.num_iterations * cfg.training.total_batch_size
    prepare_training_data(sources, tok_dir, tmp / "data", token_budget=budget, sampling=cfg.sampling, seq_len=T, workers=1)

    m = cfg.model
    tok = load_tokenizer(tok_dir)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=tok.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_kv_heads or m.num_heads, max_position_embeddings=m.max_position_embeddings,
        bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id, tie_word_embeddings=True))
    opt = torch.optim.AdamW(model.parameters(), lr=m.pretrain_lr)
    params = sum(p.numel() for p in model.parameters())

    loader = TrainLoader(tmp / "data", B, T, tokenizer_hash=tok.hash)
    x, y, _ = loader.next_batch()
    model(input_ids=x, labels=y).loss.backward()  # warm-up (allocations, kernels)
    opt.step(), opt.zero_grad()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x, y, _ = loader.next_batch()
        loss = model(input_ids=x, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    t_model = (time.perf_counter() - t0) / args.steps

    n = args.steps * 50
    fresh = TrainLoader(tmp / "data", B, T, tokenizer_hash=tok.hash)
    t0 = time.perf_counter()
    for _ in range(n):
        fresh.next_batch()
    t_loader = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    TrainLoader(tmp / "data", B, T, tokenizer_hash=tok.hash)
    t_open = time.perf_counter() - t0

    ratio = t_model / t_loader
    print(f"tiny preset: {params / 1e6:.1f} M parameters, batch {B} x {T}, vocab {tok.vocab_size}, torch threads {torch.get_num_threads()}")
    print(f"{'model step (baseline)':24s} {t_model * 1e3:9.2f} ms/batch  {B * T / t_model:10,.0f} tokens/s")
    print(f"{'loader next_batch':24s} {t_loader * 1e3:9.3f} ms/batch  {B * T / t_loader:10,.0f} tokens/s")
    print(f"loader open + validate: {t_open * 1e3:.1f} ms; cropped {fresh.stats.cropped_fraction:.2%}, utilisation {fresh.stats.utilisation:.0%}")
    print(f"ratio loader / model = {ratio:.0f}x  (target >= 50: {'PASS' if ratio >= 50 else 'FAIL'})")


if __name__ == "__main__":
    main()
