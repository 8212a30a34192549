"""One night's curation: pending memory buffer files → curated parquet, every drop counted.

- ingest (lib.ingest): pending buffer files, bad files and rows quarantined, registered by hash.
- exact dedup: xxh3-64 of the normalised text; the earliest copy survives; a hash kept on an
  earlier (promoted) night drops the document (`workspace.index/exact_hashes.npy`).
- near dedup: MinHash-LSH within the night (lib.dedup), then tonight's signatures against the
  signatures earlier nights kept (`workspace.index/minhash/`), matches confirmed by the estimated
  Jaccard ≥ threshold.
- length filter and concatenation of short documents (lib.textfilters), then the fastText language
  filter and, when a model is configured, the quality filter (lib.fasttext_filters).
- Output: `run_dir.curated/part-00000.parquet` (id, text, source_ids, lang, lang_score,
  quality_score), `stats.json`, `duplicates.json`-like report in `run_dir.path/curation/`, and the
  night's dedup state, committed to the persisted index only by `commit_index` when the night is
  promoted (a rejected night must not make its documents look "seen" to the next one).

Trade-off: the history is matched on signatures, not texts, so an earlier night's document can't
be verified exactly; the estimate from 128 permutations has a standard error of ~0.035 at J=0.8.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lib.config import ConsolidationConfig
from lib.dedup import DedupIndex, exact_hashes, first_occurrence, lsh_params, match_history, near_dedup
from lib.fasttext_filters import identify_languages, quality_scores
from lib.ingest import atomic_write_table, ingest
from lib.lineage import Lineage
from lib.minhash import normalize_text
from lib.textfilters import Doc, length_filter
from lib.workspace import RunDir, Workspace

CURATED_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("text", pa.string()),
    ("source_ids", pa.list_(pa.string())),
    ("lang", pa.string()),
    ("lang_score", pa.float32()),
    ("quality_score", pa.float32()),
])
_SEED = 1


def _state_path(run_dir: RunDir) -> Path:
    return run_dir.path / "curation" / "dedup_state.npz"


def curate(ws: Workspace, cfg: ConsolidationConfig, run_dir: RunDir, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
    """Curate this rank's share of the pending buffer files into `run_dir.curated`."""
    c = cfg.curation
    lineage = Lineage(ws.lineage_db)
    run_dir.curated.mkdir(parents=True, exist_ok=True)
    report_dir = run_dir.path / "curation"
    report_dir.mkdir(parents=True, exist_ok=True)

    got = ingest(ws, lineage, rank, world_size)
    stats: dict[str, Any] = {"ingest": dict(got.counts), "buffer_hashes": list(got.file_hashes)}
    ids, texts = got.ids, got.texts
    norm = [normalize_text(t) for t in texts]
    duplicates: list[dict[str, Any]] = []

    # exact: within the night, then against what earlier nights kept
    index = DedupIndex(ws.index)
    keep = np.ones(len(texts), dtype=bool)
    hashes = exact_hashes(norm, normalized=True)
    rep = first_occurrence(hashes)
    for i in np.flatnonzero(rep != np.arange(len(texts))):
        keep[i] = False
        duplicates.append({"id": ids[i], "duplicate_of": ids[rep[i]], "kind": "exact", "jaccard": 1.0})
    seen = np.isin(hashes, index.exact()) & keep
    for i in np.flatnonzero(seen):
        keep[i] = False
        duplicates.append({"id": ids[i], "duplicate_of": "earlier-night", "kind": "exact", "jaccard": 1.0})
    stats["exact"] = {"in": len(texts), "dropped_within_night": int((rep != np.arange(len(texts))).sum()),
                      "dropped_against_history": int(seen.sum())}
    stats["exact"]["out"] = int(keep.sum())

    # near: within the night, then against earlier nights' signatures
    alive = np.flatnonzero(keep)
    sig = np.zeros((0, c.num_perm), np.uint32)
    if c.near_dedup and len(alive):
        res = near_dedup([norm[i] for i in alive], c.threshold, c.num_perm, c.ngram, c.shingle,
                         c.verify_jaccard, c.workers, seed=_SEED)
        sig = res.signatures
        local = np.ones(len(alive), dtype=bool)
        from lib.minhash import estimated_jaccard

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
    kept = np.flatnonzero(keep)
    np.savez(_state_path(run_dir), exact=hashes[kept], ids=np.asarray([ids[i] for i in kept], dtype=str),
             signatures=sig, params=np.array(json.dumps({"num_perm": c.num_perm, "ngram": c.ngram, "shingle": c.shingle, "seed": _SEED}, sort_keys=True)))

    # length filter and concatenation
    docs = [Doc(ids[i], texts[i], [ids[i]]) for i in kept]
    docs, stats["length"] = length_filter(docs, c.min_chars, c.max_chars, c.long_docs, c.concatenate_short)

    # language and quality
    langs, lang_scores = identify_languages([d.text for d in docs])
    quality: list[float | None] = [None] * len(docs)
    if c.quality_model is not None:
        quality = quality_scores([d.text for d in docs], ws.resolve(c.quality_model))
    ok_lang = [not c.languages or (lang in c.languages and s >= c.language_threshold) for lang, s in zip(langs, lang_scores)]
    ok_quality = [q is None or q >= c.quality_threshold for q in quality]
    stats["language"] = {"in": len(docs), "dropped": len(docs) - sum(ok_lang),
                         "by_language": {lang: langs.count(lang) for lang in sorted(set(langs))}}
    stats["quality"] = {"in": sum(ok_lang), "dropped": sum(1 for a, b in zip(ok_lang, ok_quality) if a and not b),
                        "model": str(c.quality_model) if c.quality_model else None}
    final = [i for i in range(len(docs)) if ok_lang[i] and ok_quality[i]]

    table = pa.table({
        "id": [docs[i].id for i in final],
        "text": [docs[i].text for i in final],
        "source_ids": [docs[i].source_ids for i in final],
        "lang": [langs[i] for i in final],
        "lang_score": [lang_scores[i] for i in final],
        "quality_score": [quality[i] for i in final],
    }, schema=CURATED_SCHEMA)
    atomic_write_table(table, run_dir.curated / f"part-{rank:05d}.parquet")
    atomic_write_table(pa.Table.from_pylist(duplicates, schema=pa.schema([
        ("id", pa.string()), ("duplicate_of", pa.string()), ("kind", pa.string()), ("jaccard", pa.float64())])),
        report_dir / f"duplicates-{rank:05d}.parquet")
    stats["docs_in"] = len(texts)
    stats["docs_out"] = len(final)
    stats["chars_out"] = int(sum(len(docs[i].text) for i in final))
    (run_dir.curated / "stats.json").write_text(json.dumps(stats, indent=1, sort_keys=True))
    return stats


def commit_index(ws: Workspace, run_dir: RunDir) -> bool:
    """Add what this night kept to the persisted dedup index (call when the night is promoted).
    Idempotent: False if the night was committed already or has no state."""
    path = _state_path(run_dir)
    if not path.exists():
        return False
    with np.load(path, allow_pickle=False) as z:
        return DedupIndex(ws.index).add(run_dir.run_id, z["exact"], z["ids"], z["signatures"], json.loads(str(z["params"])))
