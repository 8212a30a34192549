"""One night's curation: pending memory buffer files → curated parquet, every drop counted.

Three steps, so the per-shard work can run as mapped tasks (threads, processes, a Ray cluster):

1. `ingest_shard(rank)`: this rank's share of the buffer files → documents (with their declared
   kind, if any), the normalised texts' exact hashes and MinHash signatures (`curation/shards/`);
   registry changes are recorded, not written.
2. `dedup_shards` (one reduce over every shard): apply the registry changes, exact dedup and
   MinHash-LSH near dedup over the whole night (the earliest copy by file then row survives, so the
   survivors do not depend on the number of shards), then against earlier nights; a keep mask per
   shard, `curation/duplicates.parquet`, and the night's dedup state.
3. `filter_shard(rank)`: kinds, length filter and concatenation, then the language and quality
   rules for prose and the code rule for code → `curated/part-<rank>.parquet`, and every drop
   with its reason (`curation/shards/dropped-<rank>.parquet`).

`curate` runs the three in one process; `merge_stats` folds the per-step counts into
`curated/stats.json`: each stage's counts, `dropped_by_reason` for the whole night, and a warning
for each filter that dropped more than `curation.max_drop_share` of what it saw.

- ingest (lib.ingest): pending buffer files, bad files and rows quarantined, registered by hash.
- exact dedup: xxh3-64 of the normalised text; the earliest copy survives; a hash kept on an
  earlier (promoted) night drops the document (`workspace.index/exact_hashes.npy`).
- near dedup: MinHash-LSH within the night (lib.dedup), then tonight's signatures against the
  signatures earlier nights kept (`workspace.index/minhash/`), matches confirmed by the estimated
  Jaccard ≥ threshold.
- kinds (lib.textfilters): a buffer file's `kind` column, else `curation.source_kinds` on the
  record's `source`, else detected from the document's lines (code or prose).
- length filter and concatenation of short documents (within a kind), then for prose the fastText
  language rule on its prose paragraphs and, when a model is configured, the quality rule
  (lib.fasttext_filters); for code the code rule (line lengths, alphanumeric share, generated).
- Output: `run_dir.curated/part-<rank>.parquet` (id, text, source_ids, lang, lang_score,
  quality_score, kind; code has no lang), `stats.json`, `curation/duplicates.parquet` (id,
  duplicate_of, kind, jaccard), `curation/shards/dropped-<rank>.parquet` (id, reason, kind),
  and the night's dedup state, committed to the persisted index only by `commit_index` when the
  night is promoted (a rejected night must not make its documents look "seen" to the next one).

Trade-offs: the history is matched on signatures, not texts, so an earlier night's document can't
be verified exactly; the estimate from 128 permutations has a standard error of ~0.035 at J=0.8.
The column work over documents (line features) is polars, in lib.textfilters; counts by reason
are a few dict entries per shard, where polars would add a dependency edge and no speed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from lib.config import ConsolidationConfig
from lib.dedup import DedupIndex, compute_signatures, exact_hashes, first_occurrence, match_history, near_dedup, signature_params
from lib.fasttext_filters import identify_languages, identify_paragraph_languages, quality_scores
from lib.ingest import DeferredRegistry, apply_registry_events, atomic_write_table, buffer_files, flush_buffer, ingest
from lib.lineage import Lineage
from lib.minhash import TextBuffer, estimated_jaccard, normalize_texts
from lib.textfilters import CODE_REASONS, Doc, code_rule, declared_kind, detect_kinds, length_filter, line_features
from lib.workspace import RunDir, Workspace

log = logging.getLogger(__name__)

CURATED_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("text", pa.string()),
    ("source_ids", pa.list_(pa.string())),
    ("lang", pa.string()),
    ("lang_score", pa.float32()),
    ("quality_score", pa.float32()),
    ("kind", pa.string()),
])
DROPPED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("kind", pa.string())])
_SEED = 1


def _state_path(run_dir: RunDir) -> Path:
    return run_dir.path / "curation" / "dedup_state.npz"


def shard_outputs(rank: int) -> dict[str, str]:
    """Files each step writes for `rank`, relative to the run folder (what a cached step adopts)."""
    return {
        "docs": f"curation/shards/docs-{rank:05d}.parquet",
        "dedup": f"curation/shards/dedup-{rank:05d}.npz",
        "ingest": f"curation/shards/ingest-{rank:05d}.json",
        "keep": f"curation/shards/keep-{rank:05d}.npy",
        "filter": f"curation/shards/filter-{rank:05d}.json",
        "dropped": f"curation/shards/dropped-{rank:05d}.parquet",
        "part": f"curated/part-{rank:05d}.parquet",
    }


DEDUP_OUTPUTS = ["curation/duplicates.parquet", "curation/dedup_state.npz", "curation/dedup.json"]
DUPLICATES_SCHEMA = pa.schema([("id", pa.string()), ("duplicate_of", pa.string()), ("kind", pa.string()), ("jaccard", pa.float64())])


def pending_files(ws: Workspace, lineage: Lineage) -> tuple[list[Path], dict[str, str]]:
    """Flush the buffer's logs; the sorted buffer files and the registry's statuses."""
    flush_buffer(ws)
    return buffer_files(ws), {b.content_hash: b.status for b in lineage.buffer_files()}


def shard_count(cfg: ConsolidationConfig, n_files: int) -> int:
    """Shards of a night: `curation.shards`, else one per worker; never more than the files."""
    want = cfg.curation.shards or cfg.curation.workers or os.cpu_count() or 1
    return max(1, min(want, n_files))


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


def declared_kinds(files: list[Path], order: list[int], sources: list[str | None], source_kinds: dict[str, str]) -> list[str | None]:
    """Each ingested record's declared kind: the `kind` column of its buffer file if it has one
    ("code" or "prose"), else `curation.source_kinds` matched on its `source`; None: detect it.
    `order` is ingest's (file position << 32 | row), so only the kind column is read again."""
    own: list[str | None] = [None] * len(order)
    by_file: dict[int, list[int]] = {}
    for i, o in enumerate(order):
        by_file.setdefault(o >> 32, []).append(i)
    for pos, members in by_file.items():
        path = Path(files[pos])
        if "kind" in pq.read_schema(path).names:
            col = pq.read_table(path, columns=["kind"]).column("kind").to_pylist()
            for i in members:
                own[i] = col[order[i] & 0xFFFFFFFF]
    return [declared_kind(k, src, source_kinds) for k, src in zip(own, sources)]


def ingest_shard(
    ws: Workspace, cfg: ConsolidationConfig, run_dir: RunDir, rank: int, world_size: int, files: list[Path],
    statuses: dict[str, str], workers: int | None = 1,
) -> dict[str, Any]:
    """Step 1 for one rank: documents, exact hashes and signatures of its share of `files`."""
    c = cfg.curation
    registry = DeferredRegistry(statuses)
    got = ingest(ws, registry, rank, world_size, flush=False, files=files)
    norm = normalize_texts(got.texts, workers or 1)
    out = shard_outputs(rank)
    kinds = declared_kinds(files, got.order, got.sources, c.source_kinds)
    atomic_write_table(pa.table({"id": pa.array(got.ids, pa.string()), "text": pa.array(got.texts, pa.string()),
                                 "order": pa.array(got.order, pa.uint64()), "kind": pa.array(kinds, pa.string())}),
                       run_dir.path / out["docs"])
    sig = (compute_signatures(norm, c.num_perm, c.ngram, c.shingle, _SEED, workers) if c.near_dedup and len(norm)
           else np.zeros((len(norm), c.num_perm), np.uint32))
    tmp = run_dir.path / f"curation/shards/.dedup-{rank:05d}.tmp.npz"
    np.savez(tmp, exact=exact_hashes(norm), signatures=sig)
    os.replace(tmp, run_dir.path / out["dedup"])
    info = {"rank": rank, "counts": got.counts, "file_hashes": got.file_hashes, "registry_events": registry.events}
    _write_json(run_dir.path / out["ingest"], info)
    return info


def dedup_shards(ws: Workspace, cfg: ConsolidationConfig, run_dir: RunDir, world_size: int, lineage: Lineage | None) -> dict[str, Any]:
    """Step 2, over every shard: registry changes (unless `lineage` is None: the caller records
    them), exact and near dedup (tonight, then against earlier nights), a keep mask per shard."""
    c = cfg.curation
    if lineage is not None:
        for r in range(world_size):
            info = json.loads((run_dir.path / shard_outputs(r)["ingest"]).read_text())
            apply_registry_events(lineage, info["registry_events"])
    ids: list[str] = []
    order_parts, hash_parts, sig_parts, rank_of = [], [], [], []
    for r in range(world_size):
        docs = pq.read_table(run_dir.path / shard_outputs(r)["docs"], columns=["id", "order"])
        ids += docs.column("id").to_pylist()
        order_parts.append(docs.column("order").to_numpy().astype(np.uint64))
        with np.load(run_dir.path / shard_outputs(r)["dedup"], allow_pickle=False) as z:
            hash_parts.append(z["exact"])
            sig_parts.append(z["signatures"])
        rank_of.append(np.full(docs.num_rows, r, dtype=np.int64))
    # Night order: file position, then row (what "the earliest copy" means), whatever the sharding.
    perm = np.argsort(np.concatenate(order_parts), kind="stable")
    ids = [ids[i] for i in perm]
    hashes = np.concatenate(hash_parts)[perm]
    sig_all = np.concatenate(sig_parts).reshape(-1, c.num_perm)[perm]
    n = len(ids)
    keep = np.ones(n, dtype=bool)
    duplicates: list[dict[str, Any]] = []
    index = DedupIndex(ws.index)
    stats: dict[str, Any] = {}

    # exact: within the night, then against what earlier nights kept
    if c.exact_dedup:
        rep = first_occurrence(hashes)
        for i in np.flatnonzero(rep != np.arange(n)):
            keep[i] = False
            duplicates.append({"id": ids[i], "duplicate_of": ids[rep[i]], "kind": "exact", "jaccard": 1.0})
        seen = np.isin(hashes, index.exact()) & keep
        for i in np.flatnonzero(seen):
            keep[i] = False
            duplicates.append({"id": ids[i], "duplicate_of": "earlier-night", "kind": "exact", "jaccard": 1.0})
        stats["exact"] = {"in": n, "dropped_within_night": int((rep != np.arange(n)).sum()),
                          "dropped_against_history": int(seen.sum()), "out": int(keep.sum())}

    # near: within the night, then against earlier nights' signatures
    alive = np.flatnonzero(keep)
    sig = np.zeros((0, c.num_perm), np.uint32)
    if c.near_dedup and len(alive):
        norm = _NightTexts(run_dir, world_size, perm, alive) if c.verify_jaccard else None
        res = near_dedup(norm, c.threshold, c.num_perm, c.ngram, c.shingle, c.verify_jaccard, c.workers,
                         signatures=sig_all[alive], seed=_SEED)
        sig = res.signatures
        local = np.ones(len(alive), dtype=bool)
        for j in np.flatnonzero(res.representative != np.arange(len(alive))):
            r = res.representative[j]
            local[j] = False
            est = float(estimated_jaccard(sig[j : j + 1], sig[r : r + 1])[0])
            duplicates.append({"id": ids[alive[j]], "duplicate_of": ids[alive[r]], "kind": "near", "jaccard": est})
        hist_ids, hist_sig = index.signatures(c.num_perm, c.ngram, c.shingle, _SEED)
        match, est = match_history(sig, hist_ids, hist_sig, res.bands, res.rows, min_jaccard=c.threshold)
        against = (match >= 0) & local
        for j in np.flatnonzero(against):
            duplicates.append({"id": ids[alive[j]], "duplicate_of": str(hist_ids[match[j]]), "kind": "near", "jaccard": float(est[j])})
        local &= ~against
        stats["near"] = {"in": len(alive), "bands": res.bands, "rows": res.rows, "candidate_pairs": res.candidate_pairs,
                         "dropped_within_night": int((res.representative != np.arange(len(alive))).sum()),
                         "dropped_against_history": int(against.sum())}
        keep[alive[~local]] = False
        sig = sig[local]
        stats["near"]["out"] = int(keep.sum())
    elif len(alive):
        sig = sig_all[alive]
    kept = np.flatnonzero(keep)
    np.savez(_state_path(run_dir), exact=hashes[kept], ids=np.asarray([ids[i] for i in kept], dtype=str),
             signatures=sig, params=np.array(json.dumps(signature_params(c.num_perm, c.ngram, c.shingle, _SEED), sort_keys=True)))
    atomic_write_table(pa.Table.from_pylist(duplicates, schema=DUPLICATES_SCHEMA), run_dir.path / "curation" / "duplicates.parquet")
    # back to each shard's own row order
    keep_by_row = np.empty(n, dtype=bool)
    keep_by_row[perm] = keep
    ranks = np.concatenate(rank_of) if rank_of else np.zeros(0, np.int64)
    for r in range(world_size):
        np.save(run_dir.path / shard_outputs(r)["keep"], keep_by_row[ranks == r])
    _write_json(run_dir.path / "curation" / "dedup.json", stats)
    return stats


class _NightTexts:
    """The texts of the night's surviving documents (position i: alive[i] in night order), read
    from the shards; `take` normalises only the documents asked for (verification touches the
    candidates, not the whole night)."""

    def __init__(self, run_dir: RunDir, world_size: int, perm: np.ndarray, alive: np.ndarray):
        self._texts = pa.chunked_array([chunk for r in range(world_size) for chunk in pq.read_table(
            run_dir.path / shard_outputs(r)["docs"], columns=["text"]).column("text").chunks], type=pa.string())
        self._rows = perm[alive]

    def __len__(self) -> int:
        return len(self._rows)

    def take(self, idx: np.ndarray) -> TextBuffer:
        return normalize_texts(self._texts.take(pa.array(self._rows[idx])))


def filter_shard(ws: Workspace, cfg: ConsolidationConfig, run_dir: RunDir, rank: int) -> dict[str, Any]:
    """Step 3 for one rank: each document's kind (declared, else detected), length filter and
    concatenation (within a kind); prose: language rule on its prose lines, then the quality
    model; code: the code rule. Every drop is written with its reason (`dropped` output)."""
    c = cfg.curation
    out = shard_outputs(rank)
    table = pq.read_table(run_dir.path / out["docs"])
    keep = np.load(run_dir.path / out["keep"])
    ids, texts = table.column("id").to_pylist(), table.column("text").to_pylist()
    declared = table.column("kind").to_pylist() if "kind" in table.column_names else [None] * len(ids)
    rows = np.flatnonzero(keep).tolist()
    feats_in = line_features([texts[i] for i in rows])
    detected = detect_kinds(feats_in, c.language_min_prose_chars) if c.detect_kinds else ["prose"] * len(rows)
    kind_of = {i: declared[i] or k for i, k in zip(rows, detected)}
    docs_in = [Doc(ids[i], texts[i], [ids[i]], kind_of[i]) for i in rows]
    stats: dict[str, Any] = {"kinds": {k: sum(1 for d in docs_in if d.kind == k) for k in ("prose", "code")}}
    stats["kinds"]["declared"] = sum(1 for i in rows if declared[i] is not None)
    dropped: list[tuple[str, str]] = []
    docs, stats["length"] = length_filter(docs_in, c.min_chars, c.max_chars, c.long_docs, c.concatenate_short, dropped)
    reasons = {s: r for s, r in dropped}

    # line features: those of the documents the length filter left as they were, computed anew
    # for the concatenated and the split ones (a piece is detected again on its own lines)
    row_of = {id(d): k for k, d in enumerate(docs_in)}
    fresh = [i for i, d in enumerate(docs) if id(d) not in row_of]
    where = {i: len(docs_in) + k for k, i in enumerate(fresh)}
    feats = pl.concat([feats_in, line_features([docs[i].text for i in fresh])])[
        [row_of[id(d)] if i not in where else where[i] for i, d in enumerate(docs)]]
    row_of_id = {ids[i]: i for i in rows}
    pieces = [i for i in fresh if not docs[i].id.startswith("concat:") and declared[row_of_id[docs[i].source_ids[0]]] is None]
    if c.detect_kinds and pieces:
        for i, k in zip(pieces, detect_kinds(feats[pieces], c.language_min_prose_chars)):
            docs[i].kind = k

    prose = [i for i, d in enumerate(docs) if d.kind == "prose"]
    code = [i for i, d in enumerate(docs) if d.kind == "code"]
    verdict: list[str | None] = [None] * len(docs)
    langs: list[str | None] = [None] * len(docs)
    lang_scores: list[float | None] = [None] * len(docs)
    quality: list[float | None] = [None] * len(docs)

    # prose: the language rule on its prose lines (the whole text when they are too few)
    prose_lines, prose_chars = feats.get_column("prose").to_list(), feats.get_column("prose_chars").to_list()
    chars = feats.get_column("chars").to_list()
    on_lines = [i for i in prose if prose_chars[i] >= min(c.language_min_prose_chars, chars[i] / 2)]
    whole = [i for i in prose if i not in set(on_lines)]
    for idx, (got_l, got_s) in ((on_lines, identify_paragraph_languages([prose_lines[i] for i in on_lines])),
                                (whole, identify_languages([docs[i].text for i in whole]))):
        for i, lang, score in zip(idx, got_l, got_s):
            langs[i], lang_scores[i] = lang, score
    got_langs = [langs[i] for i in prose]
    for i in prose:
        lang, score = langs[i], lang_scores[i]
        if c.languages and not (lang in c.languages and score >= c.language_threshold):
            verdict[i] = "language"
    judged = [i for i in prose if verdict[i] is None]
    if c.quality_model is not None and judged:
        for i, q in zip(judged, quality_scores([docs[i].text for i in judged], ws.resolve(c.quality_model))):
            quality[i] = q
            if q < c.quality_threshold:
                verdict[i] = "quality"
    # code: the code rule
    if code:
        broken = code_rule(feats[code], c.code_max_line_chars, c.code_max_mean_line_chars, c.code_min_alnum_share,
                           c.code_drop_generated)
        for i, r in zip(code, broken):
            verdict[i] = r

    stats["language"] = {"in": len(prose), "dropped": sum(1 for i in prose if verdict[i] == "language"),
                         "judged_on_prose_lines": len(on_lines),
                         "by_language": {lang: got_langs.count(lang) for lang in sorted(set(got_langs))}}
    stats["quality"] = {"in": len(prose) - stats["language"]["dropped"], "dropped": sum(1 for v in verdict if v == "quality"),
                        "model": str(c.quality_model) if c.quality_model else None}
    stats["code"] = {"in": len(code), "dropped": sum(1 for i in code if verdict[i] is not None),
                     "by_reason": {r: sum(1 for i in code if verdict[i] == r) for r in CODE_REASONS}}
    for i, v in enumerate(verdict):  # a piece of a split document is dropped alone: its own id
        if v is not None:
            reasons.update((s, v) for s in (docs[i].source_ids if docs[i].id.startswith("concat:") else [docs[i].id]))
    by_id = {d.id: d.kind for d in docs} | {ids[i]: kind_of[i] for i in rows}
    dropped_ids = sorted(reasons)
    atomic_write_table(pa.table({"id": dropped_ids, "reason": [reasons[k] for k in dropped_ids],
                                 "kind": [by_id.get(k) for k in dropped_ids]}, schema=DROPPED_SCHEMA), run_dir.path / out["dropped"])
    stats["dropped_by_reason"] = {r: list(reasons.values()).count(r) for r in sorted(set(reasons.values()))}

    final = [i for i in range(len(docs)) if verdict[i] is None]
    atomic_write_table(pa.table({
        "id": [docs[i].id for i in final],
        "text": [docs[i].text for i in final],
        "source_ids": [docs[i].source_ids for i in final],
        "lang": [langs[i] for i in final],
        "lang_score": [lang_scores[i] for i in final],
        "quality_score": [quality[i] for i in final],
        "kind": [docs[i].kind for i in final],
    }, schema=CURATED_SCHEMA), run_dir.path / out["part"])
    stats["docs_out"] = len(final)
    stats["chars_out"] = int(sum(len(docs[i].text) for i in final))
    _write_json(run_dir.path / out["filter"], stats)
    return stats


def _add(into: dict[str, Any], more: dict[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, dict)):
            into.setdefault(k, v)
        elif isinstance(v, dict):
            _add(into.setdefault(k, {}), v)
        else:
            into[k] = into.get(k, 0) + v


def drop_warnings(stats: dict[str, Any], max_share: float) -> list[str]:
    """One line for every filter that dropped more than `max_share` of the documents it saw."""
    seen = {
        "exact dedup": (stats.get("exact", {}).get("in", 0), stats.get("exact", {}).get("dropped_within_night", 0)
                        + stats.get("exact", {}).get("dropped_against_history", 0), None),
        "near dedup": (stats.get("near", {}).get("in", 0), stats.get("near", {}).get("dropped_within_night", 0)
                       + stats.get("near", {}).get("dropped_against_history", 0), None),
        "length": (stats.get("length", {}).get("in", 0), stats.get("length", {}).get("dropped_too_short", 0)
                   + stats.get("length", {}).get("dropped_too_long", 0), None),
        "language": (stats.get("language", {}).get("in", 0), stats.get("language", {}).get("dropped", 0),
                     stats.get("language", {}).get("by_language")),
        "quality": (stats.get("quality", {}).get("in", 0), stats.get("quality", {}).get("dropped", 0), None),
        "code": (stats.get("code", {}).get("in", 0), stats.get("code", {}).get("dropped", 0),
                 {k: v for k, v in stats.get("code", {}).get("by_reason", {}).items() if v}),
    }
    out = []
    for name, (n, dropped, detail) in seen.items():
        if n and dropped / n > max_share:
            out.append(f"the {name} filter dropped {dropped} of the {n} documents it saw ({dropped / n:.0%}), more than "
                       f"curation.max_drop_share={max_share:g}" + (f"; {json.dumps(detail, sort_keys=True)}" if detail else ""))
    return out


def merge_stats(run_dir: RunDir, ingested: list[dict[str, Any]], dedup: dict[str, Any], filtered: list[dict[str, Any]],
                max_drop_share: float = 0.5) -> dict[str, Any]:
    """The night's counts from every step and shard, written to `curated/stats.json`: per stage,
    `dropped_by_reason` over the whole night, and `warnings` for filters that dropped more than
    `max_drop_share` of what they saw (also logged)."""
    stats: dict[str, Any] = {"shards": len(ingested), "ingest": {}, "buffer_hashes": []}
    for info in ingested:
        _add(stats["ingest"], info["counts"])
        stats["buffer_hashes"] += info["file_hashes"]
    stats["ingest"].setdefault("docs_out", 0)
    stats.update(dedup)
    for part in filtered:
        _add(stats, part)
    stats["docs_in"] = stats["ingest"]["docs_out"]
    stats.setdefault("docs_out", 0)
    stats.setdefault("chars_out", 0)
    reasons = {"quarantined_rows": stats["ingest"].get("rows_quarantined", 0),
               "exact_duplicate": stats.get("exact", {}).get("dropped_within_night", 0),
               "exact_duplicate_of_earlier_night": stats.get("exact", {}).get("dropped_against_history", 0),
               "near_duplicate": stats.get("near", {}).get("dropped_within_night", 0),
               "near_duplicate_of_earlier_night": stats.get("near", {}).get("dropped_against_history", 0),
               **stats.get("dropped_by_reason", {})}
    stats["dropped_by_reason"] = {k: v for k, v in reasons.items() if v}
    stats["warnings"] = drop_warnings(stats, max_drop_share)
    for w in stats["warnings"]:
        log.warning("curation of %s: %s", run_dir.run_id, w)
    run_dir.curated.mkdir(parents=True, exist_ok=True)
    _write_json(run_dir.curated / "stats.json", stats)
    return stats


def curate(ws: Workspace, cfg: ConsolidationConfig, run_dir: RunDir, shards: int | None = None) -> dict[str, Any]:
    """The whole curation of the pending buffer files in this process (`shards`: default
    `shard_count`); a flow runs the same steps as mapped tasks."""
    lineage = Lineage(ws.lineage_db)
    run_dir.curated.mkdir(parents=True, exist_ok=True)
    files, statuses = pending_files(ws, lineage)
    n = shards or shard_count(cfg, len(files))
    ingested = [ingest_shard(ws, cfg, run_dir, r, n, files, statuses, cfg.curation.workers) for r in range(n)]
    dedup = dedup_shards(ws, cfg, run_dir, n, lineage)
    filtered = [filter_shard(ws, cfg, run_dir, r) for r in range(n)]
    return merge_stats(run_dir, ingested, dedup, filtered, cfg.curation.max_drop_share)


def commit_index(ws: Workspace, run_dir: RunDir) -> bool:
    """Add what this night kept to the persisted dedup index (call when the night is promoted).
    Idempotent: False if the night was committed already or has no state."""
    path = _state_path(run_dir)
    if not path.exists():
        return False
    with np.load(path, allow_pickle=False) as z:
        return DedupIndex(ws.index).add(run_dir.run_id, z["exact"], z["ids"], z["signatures"], json.loads(str(z["params"])))
