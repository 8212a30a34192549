"""Real inputs for the data area's tests: a BPE tokenizer trained on the standard library, the
stdlib sources as the old corpus (with a `kind` column), installed packages' sources as new data,
written as parquet sources the way the corpus and curation stages write them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import stdlib_texts, site_packages


def train_tokenizer(out: Path, vocab_size: int = 512) -> Path:
    from lib.data.tokenizer import train_bpe

    return train_bpe(stdlib_texts(60), vocab_size, out)


def package_texts(limit: int = 40, max_chars: int = 6000) -> list[tuple[str, str]]:
    """(id, text) of installed packages' sources: real text that is not in the stdlib corpus."""
    root = site_packages()
    out = []
    for pkg in ("pyarrow", "xxhash", "zstandard", "tokenizers"):
        for p in sorted((root / pkg).glob("*.py")):
            text = p.read_text(encoding="utf-8", errors="replace")
            if len(text) >= 300:
                out.append((f"{pkg}/{p.name}", text[:max_chars]))
            if len(out) >= limit:
                return out
    return out


def write_parquet(path: Path, docs: list[tuple[str, str]], kind: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = {"id": [d[0] for d in docs], "text": [d[1] for d in docs]}
    if kind is not None:
        cols["kind"] = [kind] * len(docs)
    pq.write_table(pa.table(cols), path)
    return path


def write_sources(root: Path, *, corpus_docs: int = 40, new_docs: int = 30, max_chars: int = 6000, new_max_chars: int = 800):
    """corpus/ (two parquet shards of stdlib code, kind=code) and new/ (one curated part)."""
    texts = [t[:max_chars] for t in stdlib_texts(corpus_docs, min_chars=300)]
    half = len(texts) // 2
    write_parquet(root / "corpus" / "shard-00000.parquet", [(f"std/{i}", t) for i, t in enumerate(texts[:half])], "code")
    write_parquet(root / "corpus" / "shard-00001.parquet", [(f"std/{i}", t) for i, t in enumerate(texts[half:], half)], "code")
    write_parquet(root / "new" / "part-00000.parquet", package_texts(new_docs, new_max_chars))
    return root / "corpus", root / "new"


def two_sources(corpus: Path, new: Path, new_weight: float = 0.25):
    from lib.config import SourceConfig

    return [SourceConfig(name="stdlib", path=corpus, weight=1 - new_weight, kind="corpus"),
            SourceConfig(name="new", path=new, weight=new_weight, kind="buffer")]
