"""Tokenization: every input parquet file of a run's sources becomes one token shard
(lib/data/shards.py), in parallel processes, through a token cache so a file is tokenized once under
the same tokenizer and rules (the corpus once, not nightly).

- `tokenize_tasks`: one plain-data task per input file (what `tokenize_file` needs; a task can
  travel to another process or a mapped flow task). `tokenize_sources` runs them for
  `prepare_training_data` (lib/data/sampling.py): cache hits are hard-linked into place, misses are
  tokenized (`run_tokenize_tasks`, a process pool, inline below `MIN_PARALLEL_BYTES`) and stored.
  `tokenize_to_cache` is the per-file step a flow maps before the data stage.
- Held-out split: documents of `kind="buffer"` sources whose salted id hash falls below the
  night's cut (`heldout_cut`: `heldout_fraction` of the hash range, raised to the
  `heldout_min_docs` lowest hashes when the night has at least twice as many) are kept out of the
  shard and returned as text; a memory file keeps the cut its night was trained with.
- New-data (`buffer`) documents may contain the chat template's own markers (`markers=`): those
  become control tokens; every other special-token string in any document stays text.
- FIM (lib/data/fim.py) is applied per piece at tokenization time: code documents (a `kind` column
  equal to "code") at `fim_rate_code`, or at the source's own `fim_rate` when it sets one.
- Token cache (`cache_key`/`cache_store`/`cache_load`): `<cache>/<key>/` holds the shard and the
  per-document records; the key covers the input's content hash, the tokenizer, the held-out cut,
  the markers and the FIM settings. `CACHE_VERSION` changes when the output for the same inputs
  would.

Shards hold documents without separators: the loader adds the document separator when it packs
rows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from lib.data.fim import fim_rng, fim_tokens, split_spans
from lib.data.memory import MEMORY_NIGHT
from lib.data.prepared import PreparedData
from lib.data.shards import write_shard_arrays
from lib.data.tokenizer import load_tokenizer
from lib.files import file_hash, link_or_copy, temp_folder

if TYPE_CHECKING:  # tokenizer worker processes import this module: keep pydantic out of their start-up
    from lib.config import SamplingConfig, SourceConfig

MIN_PARALLEL_BYTES = 1 << 20  # parquet bytes to tokenize below which one process does it all


def source_files(source: SourceConfig) -> list[Path]:
    path = Path(source.path)
    if path.is_file():
        files = [path]
    elif path.is_dir() and source.kind == "memory":  # <memory>/<version>/train/*.parquet, nights in order
        files = sorted(p for p in path.glob("*/train/*.parquet") if p.is_file())
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
    else:
        raise FileNotFoundError(f"source {source.name!r}: {path} does not exist")
    if not files:
        raise FileNotFoundError(f"source {source.name!r}: no .parquet files under {path}")
    return files


# Salted: other stages split by an unsalted xxh64 of the id too (the corpus's validation split is
# the ids hashing below 5%), and the same hash would hold out exactly those documents again.
HELDOUT_SALT = 0x68656C646F7574  # "heldout"


def _heldout_hash(doc_id: str) -> int:
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=HELDOUT_SALT)


def is_heldout(doc_id: str, fraction: float) -> bool:
    """Deterministic held-out split by id: the same document is held out every night."""
    return fraction > 0 and _heldout_hash(doc_id) < fraction * 2.0**64


def heldout_cut(doc_ids: list[str], fraction: float, min_docs: int) -> int:
    """The hash below which a document of this set is held out: `fraction` of the hash range,
    raised to take the `min_docs` lowest hashes when the fraction alone leaves fewer and the set
    has at least 2 × min_docs documents (so most of a small night still trains)."""
    cut = int(fraction * 2**64) if fraction > 0 else 0
    hashes = sorted({_heldout_hash(i) for i in doc_ids if i is not None})
    below = sum(1 for h in hashes if h < cut)
    if min_docs > 0 and below < min_docs and len(hashes) >= 2 * min_docs:
        cut = hashes[min_docs - 1] + 1
    return cut



# -- tokenization workers -----------------------------------------------------------------------

_WORKER_TOKENIZER = None


def _init_worker(tokenizer_dir: str) -> None:
    # One tokenizer thread per process: parallelism comes from processes over input shards.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    global _WORKER_TOKENIZER

    _WORKER_TOKENIZER = load_tokenizer(tokenizer_dir)


def _read_source_file(path: Path) -> tuple[list[str], list[str], list[str] | None]:
    try:
        schema = pq.read_schema(path)
    except Exception as exc:
        raise ValueError(f"{path} is not a readable parquet file: {exc}") from exc
    missing = [c for c in ("id", "text") if c not in schema.names]
    if missing:
        raise ValueError(f"{path} lacks column(s) {missing}: a training source needs `id` and `text` (has {schema.names})")
    cols = ["id", "text"] + (["kind"] if "kind" in schema.names else [])
    table = pq.read_table(path, columns=cols)
    ids = [str(x) if x is not None else None for x in table.column("id").to_pylist()]
    texts = table.column("text").to_pylist()
    kinds = table.column("kind").to_pylist() if "kind" in cols else None
    return ids, texts, kinds


def tokenize_file(task: dict, tokenizer=None) -> dict:
    """Tokenize one parquet file into one token shard. Returns per-document records (small)."""
    tok = tokenizer or _WORKER_TOKENIZER
    path = Path(task["file"])
    ids, texts, kinds = _read_source_file(path)
    cut = task.get("heldout_cut")
    if cut is None:  # a task built by hand with only the fraction
        cut = int(task["heldout_fraction"] * 2**64) if task["heldout_fraction"] > 0 else 0
    heldout_ids, heldout_texts = [], []
    keep_ids, keep_texts, keep_fim = [], [], []
    skipped = 0
    for i, (doc_id, text) in enumerate(zip(ids, texts)):
        if doc_id is None or text is None or text == "":
            skipped += 1
            continue
        if task["kind"] in ("buffer", "memory") and _heldout_hash(doc_id) < cut:
            heldout_ids.append(doc_id)
            heldout_texts.append(text)
            continue
        rate = task["fim_rate"]
        if rate is None:  # source did not set one: code documents get the code rate
            rate = task["fim_rate_code"] if kinds is not None and kinds[i] == "code" else 0.0
        keep_ids.append(doc_id)
        keep_texts.append(text)
        keep_fim.append(rate)

    unit_tokens: list[list[int]] = []
    unit_doc: list[int] = []      # index into keep_* of the document a unit belongs to
    unit_fim: list[bool] = []
    fim_on = task["fim_enabled"]
    piece_tokens = task["fim_piece_tokens"]
    batch = 512
    markers = task.get("markers") or []
    for start in range(0, len(keep_texts), batch):
        chunk = keep_texts[start:start + batch]
        encodings = tok.encode_batch_raw(chunk)
        # documents with the chat template's markers: those become control ids (never FIM)
        marked_at = [j for j, t in enumerate(chunk) if any(m in t for m in markers)] if markers else []
        marked = dict(zip(marked_at, tok.encode_batch([chunk[j] for j in marked_at], markers))) if marked_at else {}
        fim_jobs: list[tuple[int, bool]] = []   # (unit position, spm) waiting for their parts' ids
        fim_parts: list[str] = []               # prefix, middle, suffix of each job, flat
        for j, enc in enumerate(encodings):
            d = start + j
            ids_ = marked.get(j, enc.ids)
            if not fim_on or keep_fim[d] <= 0 or len(ids_) < 2 or j in marked:
                unit_tokens.append(ids_)
                unit_doc.append(d)
                unit_fim.append(False)
                continue
            # FIM per piece: cut at every piece_tokens-th token (at its character offset), so
            # each FIM example fits in one row with its sentinels; pieces that stay plain keep
            # the document's own ids, FIM pieces have their three parts encoded in one batch.
            text = keep_texts[d]
            offsets = enc.offsets
            for p, k in enumerate(range(0, len(ids_), piece_tokens)):
                rng = fim_rng(task["seed"], task.get("fim_stream", task["source"]), keep_ids[d], p)
                if rng.random() < keep_fim[d]:
                    end = offsets[k + piece_tokens][0] if k + piece_tokens < len(ids_) else len(text)
                    prefix, middle, suffix = split_spans(text[offsets[k][0] if k else 0:end], rng)
                    fim_jobs.append((len(unit_tokens), bool(rng.random() < task["fim_spm_rate"])))
                    fim_parts += [prefix, middle, suffix]
                    unit_tokens.append([])
                    unit_fim.append(True)
                else:
                    unit_tokens.append(ids_[k:k + piece_tokens])
                    unit_fim.append(False)
                unit_doc.append(d)
        if fim_jobs:
            parts = tok.encode_batch(fim_parts)
            for n, (pos, spm) in enumerate(fim_jobs):
                unit_tokens[pos] = fim_tokens(parts[3 * n], parts[3 * n + 1], parts[3 * n + 2], spm=spm,
                                              prefix_id=tok.fim_prefix_id, middle_id=tok.fim_middle_id,
                                              suffix_id=tok.fim_suffix_id, eos_id=tok.eos_id)

    lengths = np.fromiter((len(u) for u in unit_tokens), dtype=np.int64, count=len(unit_tokens))
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(unit_tokens), dtype=np.int64, count=total)
    write_shard_arrays(flat, np.cumsum(lengths).astype(np.uint64), task["stem"],
                       tokenizer_hash=tok.hash, vocab_size=tok.vocab_size,
                       extra={"source": task["source"], "input": str(path), "input_hash": task["input_hash"]})
    doc_hashes = [xxhash.xxh3_64_intdigest(t.encode("utf-8")) for t in keep_texts]
    return {
        "file_index": task["file_index"],
        "doc_ids": keep_ids,
        "doc_hash": np.asarray(doc_hashes, dtype=np.uint64),
        "unit_doc": np.asarray(unit_doc, dtype=np.int64),
        "unit_len": lengths,
        "unit_fim": np.asarray(unit_fim, dtype=bool),
        "heldout_ids": heldout_ids,
        "heldout_texts": heldout_texts,
        "skipped": skipped,
        "tokens": total,
        "bytes": sum(len(t.encode("utf-8")) for t in keep_texts),
    }


def pool_context():
    """fork when this process runs no other Python thread (CLI, scripts): workers start in ~ms.
    Otherwise spawn (~1-2 s per worker to import numpy/pyarrow): forking a threaded process (a
    Prefect task runner, a server) can copy a lock some other thread holds and hang the child.
    Native pools are safe either way: tokenizers and Arrow reset theirs after fork, and workers
    run the tokenizer single-threaded. Spawn re-imports the caller's script, so a script that
    calls this from a thread needs the usual `if __name__ == "__main__":` guard."""
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return get_context("fork")
    return get_context("spawn")


def run_tokenize_tasks(tasks: list[dict], tokenizer_dir: str | Path, workers: int | None) -> list[dict]:
    """Tokenize files in `workers` processes (inline when 1); results in task order."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    if workers == 1:
        tok = load_tokenizer(tokenizer_dir)
        return [tokenize_file(t, tok) for t in tasks]
    with ProcessPoolExecutor(max_workers=workers, mp_context=pool_context(),
                             initializer=_init_worker, initargs=(str(tokenizer_dir),)) as pool:
        # Largest files first so the last worker does not start the biggest shard alone.
        order = sorted(range(len(tasks)), key=lambda i: -Path(tasks[i]["file"]).stat().st_size)
        futures = {i: pool.submit(tokenize_file, tasks[i]) for i in order}
        return [futures[i].result() for i in range(len(tasks))]



# -- token cache: the corpus is tokenized once, not every night -----------------------------------

CACHE_VERSION = 2  # bump when tokenize_file's output for the same inputs changes (2: held-out cut, markers)
_CACHE_FILES = (".bin", ".idx", ".json")


def cache_key(task: dict, tokenizer_hash: str) -> str:
    """Everything that decides a shard's content: input bytes, tokenizer, hold-out and FIM rules."""
    fim_active = task["fim_enabled"] and (task["fim_rate"] or 0) + task["fim_rate_code"] > 0
    key = {
        "v": CACHE_VERSION, "input": task["input_hash"], "tokenizer": tokenizer_hash,
        # a memory file is the file its night tokenized as new data: same cut, markers, FIM stream
        "heldout": str(task.get("heldout_cut", task["heldout_fraction"])) if task["kind"] in ("buffer", "memory") else 0.0,
        "markers": task.get("markers") or None,
        # FIM draws depend on the source name and seed; without FIM they do not matter
        "fim": [task["fim_rate"], task["fim_rate_code"], task["fim_spm_rate"], task["fim_piece_tokens"],
                task["seed"], task.get("fim_stream", task["source"])] if fim_active else None,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def cache_store(cache_dir: Path, key: str, task: dict, result: dict) -> None:
    """Keep a tokenized file's shard and per-document records under cache_dir/<key>/."""
    final = cache_dir / key
    if final.exists():
        return
    tmp = temp_folder(final)  # unique per writer: two threads may store the same key
    tmp.mkdir(parents=True, exist_ok=True)
    for suffix in _CACHE_FILES:
        link_or_copy(Path(task["stem"] + suffix), tmp / f"shard{suffix}")  # shards are never modified in place
    pq.write_table(pa.table({"id": pa.array(result["doc_ids"], pa.string()),
                             "hash": pa.array(result["doc_hash"], pa.uint64())}), tmp / "docs.parquet")
    pq.write_table(pa.table({"doc": result["unit_doc"], "len": result["unit_len"], "fim": result["unit_fim"]}),
                   tmp / "units.parquet")
    pq.write_table(pa.table({"id": pa.array(result["heldout_ids"], pa.string()),
                             "text": pa.array(result["heldout_texts"], pa.string())}), tmp / "heldout.parquet")
    (tmp / "result.json").write_text(json.dumps({k: result[k] for k in ("skipped", "tokens", "bytes")}))
    try:
        os.rename(tmp, final)  # atomic: a concurrent run that got there first wins, ours is dropped
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_load(cache_dir: Path, key: str, task: dict) -> dict | None:
    """Link a cached shard into place and return its records, or None on a miss."""
    entry = cache_dir / key
    if not (entry / "result.json").is_file():
        return None
    for suffix in _CACHE_FILES:
        link_or_copy(entry / f"shard{suffix}", Path(task["stem"] + suffix))
    docs = pq.read_table(entry / "docs.parquet")
    units = pq.read_table(entry / "units.parquet")
    held = pq.read_table(entry / "heldout.parquet")
    return {
        "file_index": task["file_index"],
        "doc_ids": docs.column("id").to_pylist(),
        "doc_hash": docs.column("hash").to_numpy().astype(np.uint64),
        "unit_doc": units.column("doc").to_numpy().astype(np.int64),
        "unit_len": units.column("len").to_numpy().astype(np.int64),
        "unit_fim": units.column("fim").to_numpy(zero_copy_only=False).astype(bool),
        "heldout_ids": held.column("id").to_pylist(),
        "heldout_texts": held.column("text").to_pylist(),
        **json.loads((entry / "result.json").read_text()),
        "cached": True,
    }



# -- tasks: one per input file -------------------------------------------------------------------

def _source_ids(files: list[Path]) -> list[str]:
    ids = []
    for f in files:
        try:
            column = pq.read_table(f, columns=["id"]).column("id")
        except Exception as exc:  # the tokenize step names the file and the problem
            raise ValueError(f"{f} is not a readable training source with an `id` column: {exc}") from exc
        ids += [str(x) for x in column.to_pylist() if x is not None]
    return ids


def tokenize_tasks(sources: list[SourceConfig], tok, out_dir: str | Path, sampling: SamplingConfig, seq_len: int,
                   markers: list[str] | None = None) -> list[dict]:
    """One tokenization task per input file of `sources`: what `tokenize_file` needs (plain
    data, so a task can travel to another process or machine). `markers`: the chat template's
    control tokens, read as such in new-data documents."""
    fim_piece_tokens = max(8, seq_len - 8)  # room for 3 sentinels + EOS + re-encoding drift
    tasks = []
    for s in sources:
        files = source_files(s)
        cut = heldout_cut(_source_ids(files), sampling.heldout_fraction, sampling.heldout_min_docs) if s.kind == "buffer" else 0
        new_data = s.kind in ("buffer", "memory")
        for k, f in enumerate(files):
            if s.kind == "memory":  # each night keeps the cut it was trained with: its held-out stays out
                cut = int(json.loads((f.parent.parent / MEMORY_NIGHT).read_text(encoding="utf-8"))["heldout_cut"])
            tasks.append({
                "source": s.name, "kind": s.kind, "file": str(f), "file_index": k,
                "stem": str(PreparedData(out_dir).shard_stem(s.name, k)), "input_hash": file_hash(f, "xxh3_128"),
                "heldout_fraction": sampling.heldout_fraction, "heldout_cut": cut,
                "markers": sorted(markers) if (markers and new_data) else [],
                # new data keeps its FIM draws when it comes back as memory (one token cache entry)
                "fim_stream": "new-data" if new_data else s.name,
                "fim_rate": s.fim_rate if "fim_rate" in s.model_fields_set else None,
                "fim_rate_code": sampling.fim_rate_code, "fim_spm_rate": sampling.fim_spm_rate,
                "fim_enabled": tok.has_fim, "fim_piece_tokens": fim_piece_tokens, "seed": sampling.seed,
            })
    return tasks


def tokenize_to_cache(task: dict, tokenizer_dir: str | Path, cache_dir: str | Path) -> dict:
    """Make sure `task`'s file is in the token cache (tokenize it if not): the per-file step a
    flow maps over files before `prepare_training_data`, which then only links shards."""
    tok = load_tokenizer(tokenizer_dir)
    cache_dir = Path(cache_dir)
    key = cache_key(task, tok.hash)
    if (cache_dir / key / "result.json").is_file():
        return {"file": task["file"], "key": key, "cached": True, "tokens": None}
    work = cache_dir / f".work-{key}-{os.getpid()}-{threading.get_ident()}"
    try:
        mine = {**task, "stem": str(work / "shard")}
        result = tokenize_file(mine, tok)
        cache_store(cache_dir, key, mine, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"file": task["file"], "key": key, "cached": False, "tokens": int(result["tokens"])}



def tokenize_sources(tasks: list[dict], tokenizer_dir: str | Path, tokenizer_hash: str, workers: int | None,
                     cache_dir: str | Path | None = None) -> list[dict]:
    """Every task's shard in place and its per-document records, in task order: from the token
    cache when `cache_dir` has it (hard links), else tokenized now (and stored there)."""
    results: list[dict | None] = [None] * len(tasks)
    keys = [cache_key(t, tokenizer_hash) for t in tasks] if cache_dir is not None else []
    if cache_dir is not None:
        cache_dir = Path(cache_dir)
        results = [cache_load(cache_dir, k, t) for k, t in zip(keys, tasks)]
    misses = [i for i, r in enumerate(results) if r is None]
    if sum(Path(tasks[i]["file"]).stat().st_size for i in misses) < MIN_PARALLEL_BYTES:
        workers = 1  # starting worker processes (~1 s each) would cost more than it saves
    for i, r in zip(misses, run_tokenize_tasks([tasks[i] for i in misses], tokenizer_dir, workers) if misses else []):
        results[i] = r
        if cache_dir is not None:
            cache_store(cache_dir, keys[i], tasks[i], r)
    return results
