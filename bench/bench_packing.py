"""BOS-aligned best-fit vs greedy in-order packing (baseline) on the same real documents.

Documents: the standard library's sources tokenized with a BPE trained on them. Both packers
put BOS before every document and never pad (utilisation 100%); they differ in how many tokens
they crop. Reported at two sequence lengths, for whole documents (nanochat's setting) and for
documents cut into pieces of at most seq_len tokens (what lib.data.manifest's manifest feeds the
loader). Also the seed-002 concatenate-and-chunk mode, and packing speed.

    .venv/bin/python bench/bench_packing.py --mb 3
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=3.0)
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[256, 2048])
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()

    import numpy as np

    from lib.data.packing import PackingStats, bos_bestfit_rows, chunk_rows, greedy_rows
    from lib.data.tokenizer import load_tokenizer, train_bpe

    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if text:
            texts.append(text)
            total += len(text.encode())
        if total >= args.mb * 1e6:
            break
    tok = load_tokenizer(train_bpe(texts[:200], args.vocab, Path(tempfile.mkdtemp()) / "tok"))
    # A fixed shuffle: the files arrive in an order that has nothing to do with their length.
    order = np.random.default_rng(0).permutation(len(texts))
    docs = [np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch([texts[i] for i in order])]
    n_tok = sum(d.size for d in docs)
    print(f"{len(docs)} stdlib documents, {n_tok:,} tokens (median {int(np.median([d.size for d in docs]))}), vocab {args.vocab}")
    print(f"{'seq_len':>7} {'input':>8} {'packer':>10} {'rows':>7} {'util':>6} {'cropped':>8} {'Mtok/s':>7}")
    for seq_len in args.seq_lens:
        pieces = [d[o:o + seq_len] for d in docs for o in range(0, d.size, seq_len)]
        for label, stream in (("documents", docs), ("pieces", pieces)):
            results = {}
            for name, packer in (("greedy", greedy_rows), ("best-fit", bos_bestfit_rows)):
                stats = PackingStats()
                t0 = time.perf_counter()
                rows = sum(1 for _ in packer(stream, seq_len, tok.bos_id, stats=stats))
                dt = time.perf_counter() - t0
                results[name] = stats
                assert rows == stats.rows and stats.utilisation == 1.0
                print(f"{seq_len:>7} {label:>8} {name:>10} {rows:>7} {stats.utilisation:>6.0%} {stats.cropped_fraction:>8.2%} {stats.tokens_in / dt / 1e6:>7.1f}")
            chunk = PackingStats()
            chunk_rows(stream, seq_len, tok.bos_id, seed=0, epoch=0, stats=chunk)
            print(f"{seq_len:>7} {label:>8} {'chunk':>10} {chunk.rows:>7} {chunk.utilisation:>6.0%} {chunk.cropped_fraction:>8.2%}      -")
            g, b = results["greedy"].cropped_fraction, results["best-fit"].cropped_fraction
            verdict = "PASS" if b < g else "FAIL"
            print(f"        ratio cropped greedy / best-fit = {g / max(b, 1e-12):.1f}x  (best-fit crops fewer: {verdict})")


if __name__ == "__main__":
    main()
