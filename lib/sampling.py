"""Prepare one run's training data: tokenize every source to shards, hold out new documents for
evaluation, and draw the sampling manifest (seed 000 section 4, seed 004 sections 11.2 and 11.5).

- Sources are named parquet folders with `id` and `text` columns, each with a weight counted in
  TOKENS. `default_sources` is the seed's two-source case: the original corpus at 1 - r, the
  night's curated data ("new") at r = `sampling.new_data_ratio`; `corpus_sources` is
  pre-training's (the corpus alone), and `token_budget` the tokens either draws.
- Every input parquet file becomes one token shard (lib/shards.py), tokenized in parallel
  processes. Documents of `kind="buffer"` sources whose salted id hash falls below
  `heldout_fraction` go to `heldout/<source>.parquet` instead (same split every night for the
  same id). When that leaves fewer than `heldout_min_docs` and the night has at least twice as
  many documents, the cut is raised to the `heldout_min_docs` lowest hashes, so the acquisition
  rule always has documents it never trained on; a night with fewer documents keeps what the
  fraction gives, and when that is nothing data.json's warnings say so (the gate then falls back
  to new_train).
  Documents with identical text inside a source are kept once (seed 004 11.5: dedup before
  resampling). Shards hold documents without separators: the loader adds the document
  separator (data.json `separator_id`, lib/tokenizer.py) when it packs rows.
- New-data (`buffer`) documents may contain the chat template's own markers (`markers=`, what
  capture renders around cleaned message contents): those become control tokens; every other
  special-token string in any document stays text.
- FIM (lib/fim.py) is applied per piece at tokenization time: code documents (a `kind` column
  equal to "code") at `fim_rate_code`, or at the source's own `fim_rate` when it sets one.
- The manifest lists pieces of at most `seq_len` tokens (one packed row with its BOS) in training
  order. Each source walks its documents in a fresh seeded permutation per epoch (no document
  twice in an epoch until the source is exhausted); the next piece comes from the source whose
  token count lags its target the most, where the target grows by p_i(T) per token drawn and
  p_i ∝ w_i^(1/T) with T annealed constant/linear/cosine over training progress. So the token
  ratio is exact to within one piece, not just in expectation.
- Same inputs (content hashes), tokenizer and seed give a byte-identical manifest.parquet.
- With `cache_dir`, a file tokenized before under the same tokenizer and rules is hard-linked
  from the cache instead (the corpus is tokenized once, not nightly).

Manifest columns: `source`, `doc_id`, `shard` (shard stem relative to the data folder, e.g.
`shards/new/shard-00000`), `doc_index` (document number inside that token shard), `offset` (token
offset of the piece inside that document), `length` (tokens of the piece, BOS not counted),
`epoch` (pass over that source), `fim` (the document is a FIM example).

Trade-off: the draw covers the budget plus 5% slack because best-fit cropping wastes ~1-2% of
tokens; if training still runs out, the loader wraps around the manifest deterministically.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import sys
import threading
import zlib
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from lib.files import atomic_path, file_hash, link_or_copy, temp_folder, write_json
from lib.fim import fim_rng, fim_tokens, split_spans
from lib.shards import write_shard_arrays
from lib.workspace import check_name

if TYPE_CHECKING:  # tokenizer worker processes import this module: keep pydantic out of their start-up
    from lib.config import ConsolidationConfig, SamplingConfig, SourceConfig

log = logging.getLogger(__name__)

NEW_SOURCE = "new"            # name of the night's curated data
MEMORY_SOURCE = "memory"      # name of the accepted nights' documents
SLACK = 0.05                  # over-draw for tokens lost to cropping
EXPOSURE_RANGE = (3.0, 10.0)  # seed 000 rule of thumb: each new document seen 3-10 times
MIN_PARALLEL_BYTES = 1 << 20  # parquet bytes to tokenize below which one process does it all
MANIFEST_SCHEMA = pa.schema([
    ("source", pa.string()), ("doc_id", pa.string()), ("shard", pa.string()),
    ("doc_index", pa.int64()), ("offset", pa.int64()), ("length", pa.int64()),
    ("epoch", pa.int32()), ("fim", pa.bool_()),
])


def default_sources(workspace, cfg: ConsolidationConfig, new_data_dir: str | Path) -> list[SourceConfig]:
    """The seed's mix: corpus train split (weight 1 - r - m, kind corpus) + tonight's curated data
    (weight r, kind buffer) + the memory of accepted nights (weight m = `sampling.memory_ratio`,
    kind memory, when there is one), then any extra `sampling.sources` with their own weights.
    r + m = 1 leaves the corpus out: no replay (an ablation, bench/bench_memory.py)."""
    from lib.config import SourceConfig
    from lib.corpus import replay_corpus_name

    r, m = cfg.sampling.new_data_ratio, cfg.sampling.memory_ratio
    if not any(workspace.memory.glob(f"*/{MEMORY_NIGHT}")):
        m = 0.0
    if r + m > 1 + 1e-9:
        raise ValueError(f"sampling.new_data_ratio {r} + sampling.memory_ratio {m} add up to more than 1: keep their sum at most 1 "
                         f"(the corpus gets the rest)")
    corpus = replay_corpus_name(workspace, cfg)
    sources = []
    if 1 - r - m > 1e-9:
        sources.append(SourceConfig(name=corpus, path=workspace.corpus_train(corpus), weight=1 - r - m, kind="corpus"))
    else:
        log.warning("sampling.new_data_ratio %g + sampling.memory_ratio %g = 1: no replay of the corpus %r tonight", r, m, corpus)
    sources.append(SourceConfig(name=NEW_SOURCE, path=Path(new_data_dir), weight=r, kind="buffer"))
    if m > 0:
        sources.append(SourceConfig(name=MEMORY_SOURCE, path=workspace.memory, weight=m, kind="memory"))
    for extra in cfg.sampling.sources:
        path = extra.path if extra.path.is_absolute() else workspace.resolve(extra.path)
        sources.append(extra.model_copy(update={"path": path}))
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"sampling.sources: source names must be unique, got {names}")
    return sources


def corpus_sources(workspace, cfg: ConsolidationConfig) -> list[SourceConfig]:
    """Pre-training's mix (v0): the replay corpus's train split alone."""
    from lib.config import SourceConfig
    from lib.corpus import replay_corpus_name

    corpus = replay_corpus_name(workspace, cfg)
    return [SourceConfig(name=corpus, path=workspace.corpus_train(corpus), weight=1.0, kind="corpus")]


def token_budget(cfg: ConsolidationConfig, pretrain: bool = False) -> int:
    """Tokens a manifest draws: the steps of a night (`training.num_iterations`) or of
    pre-training (`model.pretrain_iterations`) times `training.total_batch_size`."""
    steps = cfg.model.pretrain_iterations if pretrain else cfg.training.num_iterations
    return steps * cfg.training.total_batch_size


def memory_weights(workspace, cfg: ConsolidationConfig, sources: list[SourceConfig]) -> dict[str, dict[str, float]] | None:
    """{memory source: {doc_id: weight}} from lineage (recency and exposures, lib.memory), when
    one of `sources` is the memory."""
    names = [s.name for s in sources if s.kind == "memory"]
    if not names:
        return None
    from lib.lineage import Lineage
    from lib.memory import replay_weights

    weights = replay_weights(Lineage(workspace.lineage_db), cfg.sampling.memory_recency, cfg.sampling.memory_exposure_power)
    return {name: weights for name in names}


def prepare_run_data(workspace, cfg: ConsolidationConfig, sources: list[SourceConfig], tokenizer_dir: str | Path,
                     out_dir: str | Path, budget: int, *, workers: int | None = None, cache: bool = True) -> dict:
    """`prepare_training_data` with the settings of `cfg` (sampling, seq_len, the document
    separator, the chat template's markers, the memory's weights) and the workspace's token
    cache: what a night, the bootstrap and `consolidate tokenize` run."""
    from lib.chat_format import template_markers

    return prepare_training_data(sources, tokenizer_dir, out_dir, token_budget=budget, sampling=cfg.sampling,
                                 seq_len=cfg.training.seq_len, workers=workers or cfg.curation.workers,
                                 cache_dir=workspace.token_cache if cache else None,
                                 separator=cfg.tokenizer.document_separator, markers=template_markers(tokenizer_dir),
                                 doc_weights=memory_weights(workspace, cfg, sources))


def temperature_at(sampling: SamplingConfig, progress: float) -> float:
    """T at training progress in [0, 1] (seed 004 11.2: anneal from explore to exploit)."""
    t0, t1 = sampling.temperature, sampling.final_temperature
    if t1 is None or sampling.temperature_schedule == "constant":
        return t0
    x = min(max(progress, 0.0), 1.0)
    if sampling.temperature_schedule == "linear":
        return t0 + (t1 - t0) * x
    return t1 + (t0 - t1) * 0.5 * (1 + math.cos(math.pi * x))


def source_probabilities(weights, temperature: float) -> np.ndarray:
    """p_i ∝ w_i^(1/T), computed in log space so tiny weights at small T do not underflow."""
    logw = np.log(np.asarray(weights, dtype=np.float64)) / temperature
    p = np.exp(logw - logw.max())
    return p / p.sum()


from lib.memory import MEMORY_NIGHT  # noqa: E402  beside each night's train/ folder: its held-out cut


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
    from lib.tokenizer import load_tokenizer

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
        from lib.tokenizer import load_tokenizer

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
        link_or_copy(Path(task["stem"] + suffix), tmp / f"shard{suffix}")
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
        import shutil

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


# -- the manifest draw ---------------------------------------------------------------------------

class _SourceStream:
    """One source's pieces in epoch order: a seeded permutation of its documents per epoch, or
    with per-document `weights` a seeded weighted order (Efraimidis-Spirakis: key log(u)/w,
    largest first), so heavier documents come earlier in every pass and a night that draws only
    part of a pass draws mostly them."""

    def __init__(self, index: int, name: str, docs: dict, seq_len: int, seed_key: list[int],
                 weights: np.ndarray | None = None):
        self.index, self.name = index, name
        self.docs = docs  # doc_id, shard, unit_start, unit_count; units: doc_index, len, fim
        self.seq_len = seq_len
        self.seed_key = seed_key
        self.n_docs = len(docs["doc_id"])
        self.epoch = -1
        self.order = np.zeros(0, dtype=np.int64)
        self.pos = 0
        self.pending: list[tuple] = []
        self.exposures = np.zeros(self.n_docs, dtype=np.int64)
        self.weights = weights

    def _next_doc(self) -> int:
        if self.pos >= self.order.size:
            self.epoch += 1
            rng = np.random.default_rng(self.seed_key + [self.epoch])
            if self.weights is None:
                self.order = rng.permutation(self.n_docs)
            else:
                keys = np.log(rng.random(self.n_docs)) / np.maximum(self.weights, 1e-12)
                self.order = np.argsort(-keys, kind="stable")
            self.pos = 0
        d = int(self.order[self.pos])
        self.pos += 1
        return d

    def next_piece(self) -> tuple:
        while not self.pending:
            d = self._next_doc()
            self.exposures[d] += 1
            u0, n = int(self.docs["unit_start"][d]), int(self.docs["unit_count"][d])
            for u in range(u0, u0 + n):
                length = int(self.docs["unit_len"][u])
                for off in range(0, length, self.seq_len):
                    self.pending.append((d, u, off, min(self.seq_len, length - off)))
            self.pending.reverse()
        d, u, off, length = self.pending.pop()
        return (self.docs["doc_id"][d], self.docs["unit_shard"][u], int(self.docs["unit_index"][u]),
                off, length, self.epoch, bool(self.docs["unit_fim"][u]))


def draw_manifest(streams: list[_SourceStream], weights: list[float], sampling: SamplingConfig,
                  target_tokens: int) -> tuple[dict, np.ndarray]:
    """Interleave pieces by token deficit until `target_tokens` packed tokens (pieces + BOS)."""
    cols = {name: [] for name in MANIFEST_SCHEMA.names}
    appends = [cols[name].append for name in MANIFEST_SCHEMA.names]
    n_src = len(streams)
    drawn = [0.0] * n_src
    expected = [0.0] * n_src
    total = 0
    # T moves with progress; p is recomputed per 1/1024 of the budget, not per piece.
    buckets = 1024
    bucket, p = -1, None
    while total < target_tokens:
        b = min(buckets - 1, total * buckets // target_tokens)
        if b != bucket:
            bucket = b
            p = source_probabilities(weights, temperature_at(sampling, b / buckets)).tolist()
        # the source furthest behind its token target; ties go to the first
        i = max(range(n_src), key=lambda k: expected[k] - drawn[k])
        s = streams[i]
        piece = s.next_piece()
        for append, value in zip(appends, (s.name, *piece)):
            append(value)
        n = piece[4] + 1  # the BOS the packer adds is a trained token too
        drawn[i] += n
        for k in range(n_src):
            expected[k] += p[k] * n
        total += n
    return cols, np.asarray(drawn)


def write_manifest(cols: dict, path: Path) -> str:
    """Write the manifest with fixed writer options (byte-identical for equal content); returns
    its sha256."""
    table = pa.table({k: pa.array(cols[k], type=MANIFEST_SCHEMA.field(k).type) for k in MANIFEST_SCHEMA.names},
                     schema=MANIFEST_SCHEMA)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", compression_level=3, row_group_size=1 << 20,
                       use_dictionary=["source", "shard"], write_statistics=False, store_schema=False)
    return file_hash(path)


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
                "stem": str(Path(out_dir) / "shards" / s.name / f"shard-{k:05d}"), "input_hash": file_hash(f, "xxh3_128"),
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
    from lib.tokenizer import load_tokenizer

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
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return {"file": task["file"], "key": key, "cached": False, "tokens": int(result["tokens"])}


def prepare_training_data(
    sources: list[SourceConfig],
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    *,
    token_budget: int,
    sampling: SamplingConfig,
    seq_len: int,
    workers: int | None = None,
    cache_dir: str | Path | None = None,
    separator: str = "auto",
    markers: list[str] | None = None,
    doc_weights: dict[str, dict[str, float]] | None = None,
) -> dict:
    """Tokenize `sources` into `out_dir/shards/<source>/`, hold out new documents into
    `out_dir/heldout/<source>.parquet`, draw `out_dir/manifest.parquet` covering `token_budget`
    training tokens, and write `out_dir/data.json`. Returns the data.json content.

    `cache_dir` (e.g. `Workspace.token_cache`): reuse shards of input files tokenized before with
    the same tokenizer and rules (hard links), so the corpus is tokenized once, not every night.
    `separator`: `tokenizer.document_separator` (auto: what the tokenizer folder's version recorded,
    else the tokenizer's convention); `markers`: the chat template's control tokens (new data);
    `doc_weights`: {source: {doc_id: weight}} for a weighted document order (the memory's
    recency and exposure weights, lib/memory.py); documents it does not name weigh 1."""
    from lib.tokenizer import load_tokenizer

    if not sources:
        raise ValueError("prepare_training_data needs at least one source")
    if token_budget < 1:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique, got {names}")
    for s in sources:
        check_name(s.name, "source name")  # it becomes a folder name under shards/ and heldout/
    out = Path(out_dir)
    tok = load_tokenizer(tokenizer_dir)
    warnings: list[str] = []
    notes: list[str] = []  # what a run does differently and why, not a problem
    separator_id, separator_token = tok.separator(separator)
    tasks = tokenize_tasks(sources, tok, out, sampling, seq_len, markers)
    wants_fim = sampling.fim_rate_code > 0 or any(s.fim_rate > 0 for s in sources)
    if wants_fim and not tok.has_fim:
        notes.append(f"FIM is off: the tokenizer in {tokenizer_dir} has no FIM tokens (<|fim_prefix|>, <|fim_middle|>, "
                     f"<|fim_suffix|> or another family's names), so code is trained left to right")
    results: list[dict | None] = [None] * len(tasks)
    keys = [cache_key(t, tok.hash) for t in tasks] if cache_dir is not None else []
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

    inputs_digest = hashlib.sha256(json.dumps(
        [[t["source"], t["input_hash"]] for t in tasks] + [tok.hash, seq_len, sampling.seed], sort_keys=True
    ).encode()).hexdigest()
    streams, source_stats = [], {}
    (out / "heldout").mkdir(parents=True, exist_ok=True)
    for si, s in enumerate(sources):
        mine = [(t, r) for t, r in zip(tasks, results) if t["source"] == s.name]
        doc_id, doc_hash, unit_start, unit_count, doc_night = [], [], [], [], []
        unit_shard, unit_index, unit_len, unit_fim = [], [], [], []
        seen: set[int] = set()
        duplicates = 0
        for t, r in mine:
            shard_rel = str(Path(t["stem"]).relative_to(out))
            unit_doc = r["unit_doc"]
            bounds = np.searchsorted(unit_doc, np.arange(len(r["doc_ids"]) + 1))
            for d, did in enumerate(r["doc_ids"]):
                h = int(r["doc_hash"][d])
                u0, u1 = int(bounds[d]), int(bounds[d + 1])
                if h in seen:
                    duplicates += 1
                    continue
                if int(r["unit_len"][u0:u1].sum()) == 0:
                    continue
                seen.add(h)
                doc_id.append(did)
                doc_night.append(Path(t["file"]).parent.parent.name if s.kind == "memory" else "")
                doc_hash.append(h)
                unit_start.append(len(unit_len))
                unit_count.append(u1 - u0)
                for u in range(u0, u1):
                    unit_shard.append(shard_rel)
                    unit_index.append(u)
                    unit_len.append(int(r["unit_len"][u]))
                    unit_fim.append(bool(r["unit_fim"][u]))
        if not doc_id:
            raise ValueError(f"source {s.name!r} ({s.path}): no non-empty documents left to train on")
        docs = {"doc_id": doc_id, "unit_start": np.asarray(unit_start), "unit_count": np.asarray(unit_count),
                "unit_shard": unit_shard, "unit_index": np.asarray(unit_index), "unit_len": np.asarray(unit_len),
                "unit_fim": np.asarray(unit_fim)}
        seed_key = [sampling.seed & 0xFFFFFFFF, zlib.crc32(s.name.encode()), int(inputs_digest[:8], 16)]
        weights = None
        if doc_weights and s.name in doc_weights:
            table = doc_weights[s.name]
            weights = np.asarray([float(table.get(d, 1.0)) for d in doc_id], dtype=np.float64)
        streams.append(_SourceStream(si, s.name, docs, seq_len, seed_key, weights))
        streams[-1].night = doc_night
        if s.kind == "buffer":
            held = pa.table({"id": pa.array([i for _, r in mine for i in r["heldout_ids"]], pa.string()),
                             "text": pa.array([x for _, r in mine for x in r["heldout_texts"]], pa.string())})
            pq.write_table(held, out / "heldout" / f"{s.name}.parquet", compression="zstd")
        source_stats[s.name] = {
            "kind": s.kind, "path": str(s.path), "weight": s.weight,
            "files": [{"path": t["file"], "hash": t["input_hash"], "shard": str(Path(t["stem"]).relative_to(out)),
                       "tokens": r["tokens"], "docs": len(r["doc_ids"]), "cached": bool(r.get("cached"))} for t, r in mine],
            "docs": len(doc_id), "duplicates_dropped": duplicates,
            "skipped_empty": sum(r["skipped"] for _, r in mine),
            "heldout_docs": sum(len(r["heldout_ids"]) for _, r in mine),
            "heldout_cut": str(mine[0][0]["heldout_cut"]) if s.kind == "buffer" and mine else None,
            "tokens_available": int(np.sum(unit_len)) + len(unit_len),
            "fim_units": int(np.sum(unit_fim)), "units": len(unit_len),
            "bytes": sum(r["bytes"] for _, r in mine),
        }

    # Rows of seq_len + 1 tokens give seq_len trained positions each.
    target = int(math.ceil(token_budget * (seq_len + 1) / seq_len * (1 + SLACK)))
    weights = [s.weight for s in sources]
    cols, drawn = draw_manifest(streams, weights, sampling, target)
    manifest_hash = write_manifest(cols, out / "manifest.parquet")

    total_drawn = float(drawn.sum())
    pieces = dict(zip(*np.unique(np.asarray(cols["source"], dtype=object), return_counts=True)))
    for s, st, n in zip(sources, streams, drawn):
        e = st.exposures
        stats = source_stats[s.name]
        stats.update({
            "tokens_drawn": int(n), "share": float(n / total_drawn), "epochs": st.epoch + (st.pos / max(1, st.order.size)),
            "pieces": int(pieces.get(s.name, 0)),
            "exposures": {"mean": float(e.mean()), "min": int(e.min()), "max": int(e.max()),
                          "histogram": {str(k): int(v) for k, v in zip(*np.unique(e, return_counts=True))}},
        })
        if s.kind == "buffer" and stats["heldout_docs"] == 0:
            warnings.append(
                f"source {s.name!r}: no document held out ({stats['docs']} documents; a night needs at least "
                f"{2 * sampling.heldout_min_docs} for sampling.heldout_min_docs={sampling.heldout_min_docs}): the gate's "
                f"acquisition rule measures new_train, documents the model trained on, instead of new_heldout")
        if s.kind == "buffer":
            lo, hi = EXPOSURE_RANGE
            if not lo <= e.mean() <= hi:
                warnings.append(
                    f"source {s.name!r}: each new document is seen {e.mean():.1f} times on average, outside the "
                    f"seed's rule of thumb of {lo:g}-{hi:g}; adjust training.num_iterations or sampling.new_data_ratio")
    # How often each new and each memory document is drawn: the memory's exposure counts (recorded
    # in lineage when the night is accepted) and the seed's 3-10 rule for new data.
    new_streams = [st for s, st in zip(sources, streams) if s.kind in ("buffer", "memory")]
    pq.write_table(pa.table({
        "source": pa.array([st.name for st in new_streams for _ in range(st.n_docs)], pa.string()),
        "doc_id": pa.array([d for st in new_streams for d in st.docs["doc_id"]], pa.string()),
        "night": pa.array([n for st in new_streams for n in st.night], pa.string()),
        "exposures": pa.array(np.concatenate([st.exposures for st in new_streams]) if new_streams else [], pa.int64()),
    }), out / "exposures.parquet", compression="zstd")
    data = {
        "format": "training-data", "version": 1,
        "seq_len": seq_len, "token_budget": token_budget, "tokens_drawn": int(total_drawn),
        "manifest": "manifest.parquet", "manifest_hash": manifest_hash, "manifest_rows": len(cols["source"]),
        "inputs_digest": inputs_digest,
        "tokenizer_hash": tok.hash, "tokenizer_dir": str(tokenizer_dir), "vocab_size": tok.vocab_size,
        "separator_id": separator_id, "separator_token": separator_token,
        "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id,
        "fim": {"enabled": tok.has_fim, "middle_id": tok.fim_middle_id, "middle_only": sampling.fim_middle_only,
                "rate_code": sampling.fim_rate_code, "spm_rate": sampling.fim_spm_rate},
        "sampling": json.loads(sampling.model_dump_json()),
        "sources": source_stats,
        "tokens_per_source": {name: source_stats[name]["tokens_drawn"] for name in names},
        "warnings": warnings,
        "notes": notes,
    }
    write_json(out / "data.json", data, indent=1, sort_keys=True, default=str, newline=True)
    return data
