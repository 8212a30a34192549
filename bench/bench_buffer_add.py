"""Cost of the memory buffer's durability: one `add` with an fsync'd write-ahead log, against
the baseline of the same add handed to the OS only (durability="flush", survives a killed
process but not a power cut), and a batched `add_many` (one fsync per 100 records).

    python bench/bench_buffer_add.py [--records 2000] [--chars 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.buffer.store import Buffer  # noqa: E402


def per_add_us(folder: Path, durability: str, texts: list[str], batch: int = 1) -> float:
    buf = Buffer(folder, flush_size=len(texts) + 1, durability=durability)
    t0 = time.perf_counter()
    if batch == 1:
        for text in texts:
            buf.add(text)
    else:
        for i in range(0, len(texts), batch):
            buf.add_many(texts[i : i + batch])
    elapsed = time.perf_counter() - t0
    buf.close()
    return elapsed / len(texts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--chars", type=int, default=500)
    args = ap.parse_args()
    texts = [f"record {i}: " + "captured conversation text " * (args.chars // 27) for i in range(args.records)]
    # in the working tree's file system (tmpfs would hide the fsync cost)
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[1]) as tmp:
        tmp = Path(tmp)
        flush = per_add_us(tmp / "flush", "flush", texts)
        fsync = per_add_us(tmp / "fsync", "fsync", texts)
        batched = per_add_us(tmp / "batched", "fsync", texts, batch=100)
    print(f"records={args.records} chars={args.chars}")
    print(f"add, durability=flush (baseline): {flush:8.1f} us/add  {1e6 / flush:9.0f} adds/s")
    print(f"add, durability=fsync:            {fsync:8.1f} us/add  {1e6 / fsync:9.0f} adds/s  ratio {fsync / flush:.1f}x baseline")
    print(f"add_many(100), fsync:             {batched:8.1f} us/add  {1e6 / batched:9.0f} adds/s  ratio {batched / flush:.2f}x baseline")


if __name__ == "__main__":
    main()
