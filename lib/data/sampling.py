"""Prepare one run's training data (new text mixed with replay, weights annealed over the run, the drawn list deduplicated): the
sources and the token budget, then `prepare_training_data`, which tokenizes every source
(lib/data/token_cache.py), holds out new documents, draws the manifest (lib/data/manifest.py) and writes
the prepared-data folder (lib/data/prepared.py).

- Sources are named parquet folders with `id` and `text` columns, each with a weight counted in
  TOKENS. `default_sources` is the default mix, mostly replay: the original corpus at 1 - r - m, the night's
  curated data ("new") at r = `sampling.new_data_ratio`, the memory of accepted nights at
  m = `sampling.memory_ratio`; `corpus_sources` is pre-training's (the corpus alone), and
  `token_budget` the tokens either draws.
- Held out: documents of `kind="buffer"` sources below the night's hash cut go to
  `heldout/<source>.parquet` instead of the shards (same split every night for the same id;
  lib/data/token_cache.py says how the cut is chosen). When a night keeps none, data.json's warnings
  say so (the gate then falls back to new_train).
- Documents with identical text inside a source are kept once (dedup before resampling).
- Same inputs (content hashes), tokenizer and seed give a byte-identical manifest.parquet; with
  `cache_dir`, files tokenized before under the same tokenizer and rules are hard-linked from
  the token cache (the corpus is tokenized once, not nightly).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lib.config import SourceConfig
from lib.data.corpus import replay_corpus_name
from lib.data.manifest import SLACK, SourceStream, draw_manifest, source_documents, write_manifest
from lib.data.memory import MEMORY_NIGHT, REHEARSAL_SOURCE, rehearsal_weights, replay_weights
from lib.data.prepared import PreparedData
from lib.data.token_cache import tokenize_sources, tokenize_tasks
from lib.data.tokenizer import load_tokenizer
from lib.registry.lineage import Lineage
from lib.registry.records import portable_tree
from lib.serving.chat_format import template_markers
from lib.workspace import check_name

if TYPE_CHECKING:
    from lib.config import ConsolidationConfig, SamplingConfig

log = logging.getLogger(__name__)

NEW_SOURCE = "new"            # name of the night's curated data
MEMORY_SOURCE = "memory"      # name of the accepted nights' documents
EXPOSURE_RANGE = (3.0, 10.0)  # rule of thumb: a new document is learnt when seen 3-10 times, memorised past that


def default_sources(workspace, cfg: ConsolidationConfig, new_data_dir: str | Path) -> list[SourceConfig]:
    """The default mix: corpus train split (weight 1 - r - m, kind corpus) + tonight's curated data
    (weight r, kind buffer) + the memory of accepted nights (weight m = `sampling.memory_ratio`,
    kind memory, when there is one), then any extra `sampling.sources` with their own weights.
    r + m = 1 leaves the corpus out: no replay (an ablation, bench/bench_memory.py)."""
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
    corpus = replay_corpus_name(workspace, cfg)
    return [SourceConfig(name=corpus, path=workspace.corpus_train(corpus), weight=1.0, kind="corpus")]


def token_budget(cfg: ConsolidationConfig, pretrain: bool = False) -> int:
    """Tokens a manifest draws: the steps of a night (`training.num_iterations`) or of
    pre-training (`model.pretrain_iterations`) times `training.total_batch_size`."""
    steps = cfg.model.pretrain_iterations if pretrain else cfg.training.num_iterations
    return steps * cfg.training.total_batch_size


def memory_weights(workspace, cfg: ConsolidationConfig, sources: list[SourceConfig]) -> dict[str, dict[str, float]] | None:
    """{source: {doc_id: weight}} from lineage, lib.data.memory: the memory's documents by recency,
    exposures and the champion's fact slips (`replay_weights`), and the memory's question forms
    (the rehearsal source) by the slips of the documents they rehearse (`rehearsal_weights`); None
    when neither is among `sources`."""
    names = [s.name for s in sources if s.kind == "memory"]
    rehearsal = next((s for s in sources if s.name == REHEARSAL_SOURCE), None)
    boost = cfg.sampling.memory_fact_boost
    if not names and (rehearsal is None or not boost):
        return None

    lin = Lineage(workspace.lineage_db)
    champion = lin.alias("champion")
    out: dict[str, dict[str, float]] = {}
    if names:
        weights = replay_weights(lin, cfg.sampling.memory_recency, cfg.sampling.memory_exposure_power, boost, champion)
        out.update({name: weights for name in names})
    if rehearsal is not None and boost:
        out[REHEARSAL_SOURCE] = rehearsal_weights(lin, boost, champion, rehearsal.path)
    return out


def prepare_run_data(workspace, cfg: ConsolidationConfig, sources: list[SourceConfig], tokenizer_dir: str | Path,
                     out_dir: str | Path, budget: int, *, workers: int | None = None, cache: bool = True) -> dict:
    """`prepare_training_data` with the settings of `cfg` (sampling, seq_len, the document
    separator, the chat template's markers, the memory's weights) and the workspace's token
    cache: what a night, the bootstrap and `consolidate tokenize` run."""
    return prepare_training_data(sources, tokenizer_dir, out_dir, token_budget=budget, sampling=cfg.sampling,
                                 seq_len=cfg.training.seq_len, workers=workers or cfg.curation.workers,
                                 cache_dir=workspace.token_cache if cache else None,
                                 separator=cfg.tokenizer.document_separator, markers=template_markers(tokenizer_dir),
                                 doc_weights=memory_weights(workspace, cfg, sources), root=workspace.root)



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
    root: str | Path | None = None,
    markers: list[str] | None = None,
    doc_weights: dict[str, dict[str, float]] | None = None,
) -> dict:
    """Tokenize `sources` into `out_dir/shards/<source>/`, hold out new documents into
    `out_dir/heldout/<source>.parquet`, draw `out_dir/manifest.parquet` covering `token_budget`
    training tokens, and write `out_dir/data.json` (lib/data/prepared.py). Returns the data.json content.

    `cache_dir` (e.g. `Workspace.token_cache`): reuse shards of input files tokenized before with
    the same tokenizer and rules (hard links), so the corpus is tokenized once, not every night.
    `separator`: `tokenizer.document_separator` (auto: what the tokenizer folder's version recorded,
    else the tokenizer's convention); `markers`: the chat template's control tokens (new data);
    `doc_weights`: {source: {doc_id: weight}} for a weighted document order (the memory's
    recency and exposure weights, lib/data/memory.py); documents it does not name weigh 1."""
    _check_sources(sources, token_budget)
    out = PreparedData(out_dir)
    tok = load_tokenizer(tokenizer_dir)
    separator_id, separator_token = tok.separator(separator)
    tasks = tokenize_tasks(sources, tok, out.path, sampling, seq_len, markers)
    results = tokenize_sources(tasks, tokenizer_dir, tok.hash, workers, cache_dir)
    inputs_digest = hashlib.sha256(json.dumps(
        [[t["source"], t["input_hash"]] for t in tasks] + [tok.hash, seq_len, sampling.seed], sort_keys=True
    ).encode()).hexdigest()

    streams, stats = [], {}
    out.heldout.mkdir(parents=True, exist_ok=True)
    for si, s in enumerate(sources):
        mine = [(t, r) for t, r in zip(tasks, results) if t["source"] == s.name]
        stream, stats[s.name] = _source_stream(si, s, mine, out, seq_len, sampling.seed, inputs_digest, doc_weights)
        streams.append(stream)
        if s.kind == "buffer":
            out.write_heldout(s.name, [i for _, r in mine for i in r["heldout_ids"]],
                              [x for _, r in mine for x in r["heldout_texts"]])

    # Rows of seq_len + 1 tokens give seq_len trained positions each.
    target = int(math.ceil(token_budget * (seq_len + 1) / seq_len * (1 + SLACK)))
    cols, drawn = draw_manifest(streams, [s.weight for s in sources], sampling, target)
    manifest_hash = write_manifest(cols, out.manifest)
    warnings = _draw_stats(sources, streams, stats, cols, drawn, sampling)
    # How often each new and each memory document is drawn: the memory's exposure counts (recorded
    # in lineage when the night is accepted) and the 3-10 rule of thumb for new data.
    new_streams = [st for s, st in zip(sources, streams) if s.kind in ("buffer", "memory")]
    out.write_exposures({
        "source": [st.name for st in new_streams for _ in range(st.n_docs)],
        "doc_id": [d for st in new_streams for d in st.docs["doc_id"]],
        "night": [n for st in new_streams for n in st.night],
        "exposures": np.concatenate([st.exposures for st in new_streams]) if new_streams else [],
    })
    notes = []  # what a run does differently and why, not a problem
    if (sampling.fim_rate_code > 0 or any(s.fim_rate > 0 for s in sources)) and not tok.has_fim:
        notes.append(f"FIM is off: the tokenizer in {tokenizer_dir} has no FIM tokens (<|fim_prefix|>, <|fim_middle|>, "
                     f"<|fim_suffix|> or another family's names), so code is trained left to right")
    total_drawn = float(drawn.sum())
    data = {
        "format": "training-data", "version": 1,
        "seq_len": seq_len, "token_budget": token_budget, "tokens_drawn": int(total_drawn),
        "manifest": out.manifest.name, "manifest_hash": manifest_hash, "manifest_rows": len(cols["source"]),
        "inputs_digest": inputs_digest,
        "tokenizer_hash": tok.hash, "tokenizer_dir": str(tokenizer_dir), "vocab_size": tok.vocab_size,
        "separator_id": separator_id, "separator_token": separator_token,
        "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id,
        "fim": {"enabled": tok.has_fim, "middle_id": tok.fim_middle_id, "middle_only": sampling.fim_middle_only,
                "rate_code": sampling.fim_rate_code, "spm_rate": sampling.fim_spm_rate},
        "sampling": json.loads(sampling.model_dump_json()),
        "sources": stats,
        "tokens_per_source": {s.name: stats[s.name]["tokens_drawn"] for s in sources},
        "warnings": warnings,
        "notes": notes,
    }
    if root is not None:  # paths inside the workspace written relative to its root: the folder can move

        out.write_info(portable_tree(data, root))
    else:
        out.write_info(data)
    return data


def _check_sources(sources: list[SourceConfig], token_budget: int) -> None:
    if not sources:
        raise ValueError("prepare_training_data needs at least one source")
    if token_budget < 1:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique, got {names}")
    for s in sources:
        check_name(s.name, "source name")  # it becomes a folder name under shards/ and heldout/


def _source_stream(index: int, s: SourceConfig, mine: list[tuple[dict, dict]], out: PreparedData, seq_len: int, seed: int,
                   inputs_digest: str, doc_weights: dict[str, dict[str, float]] | None) -> tuple[SourceStream, dict]:
    """Source `s`'s documents (its tokenized files `mine`) as a seeded stream for the draw, and
    its data.json statistics so far."""
    docs, nights, duplicates = source_documents(mine, out.path, memory=s.kind == "memory")
    if not docs["doc_id"]:
        raise ValueError(f"source {s.name!r} ({s.path}): no non-empty documents left to train on")
    seed_key = [seed & 0xFFFFFFFF, zlib.crc32(s.name.encode()), int(inputs_digest[:8], 16)]
    weights = None
    if doc_weights and s.name in doc_weights:
        table = doc_weights[s.name]
        weights = np.asarray([float(table.get(d, 1.0)) for d in docs["doc_id"]], dtype=np.float64)
    stream = SourceStream(index, s.name, docs, seq_len, seed_key, weights)
    stream.night = nights
    stats = {
        "kind": s.kind, "path": str(s.path), "weight": s.weight,
        "files": [{"path": t["file"], "hash": t["input_hash"], "shard": str(Path(t["stem"]).relative_to(out.path)),
                   "tokens": r["tokens"], "docs": len(r["doc_ids"]), "cached": bool(r.get("cached"))} for t, r in mine],
        "docs": len(docs["doc_id"]), "duplicates_dropped": duplicates,
        "skipped_empty": sum(r["skipped"] for _, r in mine),
        "heldout_docs": sum(len(r["heldout_ids"]) for _, r in mine),
        "heldout_cut": str(mine[0][0]["heldout_cut"]) if s.kind == "buffer" and mine else None,
        "tokens_available": int(np.sum(docs["unit_len"])) + len(docs["unit_len"]),
        "fim_units": int(np.sum(docs["unit_fim"])), "units": len(docs["unit_len"]),
        "bytes": sum(r["bytes"] for _, r in mine),
    }
    return stream, stats


def _draw_stats(sources: list[SourceConfig], streams: list[SourceStream], stats: dict[str, dict], cols: dict,
                drawn: np.ndarray, sampling: SamplingConfig) -> list[str]:
    """Add what the draw took from each source to its `stats`; returns the warnings (no
    held-out documents, new documents seen outside the 3-10 rule of thumb)."""
    warnings = []
    total_drawn = float(drawn.sum())
    pieces = dict(zip(*np.unique(np.asarray(cols["source"], dtype=object), return_counts=True)))
    for s, st, n in zip(sources, streams, drawn):
        e = st.exposures
        mine = stats[s.name]
        mine.update({
            "tokens_drawn": int(n), "share": float(n / total_drawn), "epochs": st.epoch + (st.pos / max(1, st.order.size)),
            "pieces": int(pieces.get(s.name, 0)),
            "exposures": {"mean": float(e.mean()), "min": int(e.min()), "max": int(e.max()),
                          "histogram": {str(k): int(v) for k, v in zip(*np.unique(e, return_counts=True))}},
        })
        if s.kind == "buffer" and mine["heldout_docs"] == 0:
            warnings.append(
                f"source {s.name!r}: no document held out ({mine['docs']} documents; a night needs at least "
                f"{2 * sampling.heldout_min_docs} for sampling.heldout_min_docs={sampling.heldout_min_docs}): the gate's "
                f"acquisition rule measures new_train, documents the model trained on, instead of new_heldout")
        if s.kind == "buffer":
            lo, hi = EXPOSURE_RANGE
            if not lo <= e.mean() <= hi:
                warnings.append(
                    f"source {s.name!r}: each new document is seen {e.mean():.1f} times on average, outside the "
                    f"rule of thumb of {lo:g}-{hi:g} (fewer: not learnt; more: memorised); adjust training.num_iterations or sampling.new_data_ratio"
                    + ("; a night the knowledge stage lengthened for its facts ('the night runs N steps instead of M') draws them "
                       "more at the same share" if e.mean() > hi else ""))
    return warnings
