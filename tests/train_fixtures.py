"""Prepared training data and configs for the trainer's tests: a real BPE tokenizer, real text
(the standard library = old corpus, installed packages' sources = new data), real
`prepare_training_data`. Shared by test_train.py, test_train_distributed.py and test_checkpoint.py."""

from __future__ import annotations

from conftest import site_packages

import json
import sys
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]

# 2 layers, 64 wide, seq 64: a few ms per step on 2 cores
TINY = {
    "model": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128,
              "max_position_embeddings": 64, "pretrain_lr": 3e-3, "pretrain_iterations": 12},
    "training": {"num_iterations": 12, "total_batch_size": 512, "device_batch_size": 4, "seq_len": 64,
                 "lr_scale": 0.3, "snapshot_every": 4, "keep_snapshots": 2, "device": "cpu", "seed": 7},
    "tokenizer": {"vocab_size": 512},
}


def _texts(paths: list[Path], limit: int, min_chars: int = 400) -> list[tuple[str, str]]:
    out = []
    for p in paths:
        text = p.read_text(encoding="utf-8", errors="replace")
        if len(text) >= min_chars:
            out.append((p.name, text[:6000]))
        if len(out) >= limit:
            break
    return out


def _write_source(folder: Path, docs: list[tuple[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [d[0] for d in docs], "text": [d[1] for d in docs], "kind": ["code"] * len(docs)})
    pq.write_table(table, folder / "shard-00000.parquet")
    return folder


def prepare(root: Path, *, token_budget: int = 40_000, seq_len: int = 64, vocab_size: int = 512,
            tokenizer: Path | None = None, seed: int = 0, data_name: str = "data") -> dict[str, Path]:
    """tokenizer/, old/, new/ sources and data/ (prepared) under `root`; with `tokenizer`, that
    one instead of a new one, and `seed` draws another manifest (another night's mix)."""
    from lib.config import SamplingConfig, SourceConfig
    from lib.data.sampling import prepare_training_data
    from lib.data.tokenizer import train_bpe

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    old_docs = _texts(sorted(stdlib.glob("*.py")), 60)
    new_root = site_packages() / "pyarrow"
    new_docs = _texts(sorted(new_root.glob("*.py")), 30)
    tok = tokenizer or train_bpe([t for _, t in old_docs], vocab_size, root / "tokenizer")
    old = _write_source(root / "old", old_docs)
    new = _write_source(root / "new", new_docs)
    sources = [SourceConfig(name="stdlib", path=old, weight=0.75, kind="corpus"),
               SourceConfig(name="new", path=new, weight=0.25, kind="buffer")]
    sampling = SamplingConfig(new_data_ratio=0.25, heldout_fraction=0.1, fim_rate_code=0.0, seed=seed)
    prepare_training_data(sources, tok, root / data_name, token_budget=token_budget, sampling=sampling,
                          seq_len=seq_len, workers=1)
    return {"tokenizer": tok, "data": root / data_name, "root": root}


def write_config(path: Path, **sections) -> Path:
    """A YAML config: TINY merged with the given sections."""
    data = json.loads(json.dumps(TINY))
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    import yaml

    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def train_cmd(config: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lib.training.train", "--config", str(config), "--data", str(data), "--out", str(out), *extra]
