"""One night's curation as a list of steps: pending buffer files → curated parquet, every
drop counted.

`curation_steps(ws)` is the list; each step is `run(input, output, rank, world_size, section) ->
Stats` (lib.curation.steps: `output` is the run folder, `section` the `curation` config). `curate` runs
it in this process (lib.curation.steps.run_steps: the CLI, the tests, the benches); the curation flow maps
the same list as Prefect tasks (flows/curation.py), a task per rank, cached on content.

1. `IngestStep` (per shard, task `ingest-shard`): this rank's share of the pending files (by
   position in the sorted list) → documents with their declared kind, the normalised texts'
   exact hashes and MinHash signatures. Registry changes are recorded, not written.
2. `RecordIngestStep` (once, `record-ingest`, never cached): the one place ingest's registry
   changes reach lineage (lib.buffer.ingest.record_ingest), quarantines a killed rank left included.
3. `DedupStep` (once, `dedup-shards`): exact dedup, then MinHash-LSH near dedup over the whole
   night (the earliest copy by file then row survives, so the survivors do not depend on the
   number of shards), then against what earlier nights kept; a keep mask per shard.
4. `FilterStep` (per shard, `filter-shard`): kinds, length filter and concatenation, then the
   filters of each kind (prose: `LanguageFilter`, `QualityFilter`; code: `CodeFilter`).
5. `ReportStep` (once, `curation-report`, never cached): every step's stats → `curated/stats.json`.

Files outside a workspace (`consolidate dedup`) go through the same `DedupStep`:
lib/curation/dedup_files.py.

Intermediate formats (relative to the run folder; `<r>` is the rank, 5 digits):

- input of step 1: `{"files": [...], "already": {...}}`: the pending buffer files, sorted by path,
  each `{path, content_hash, rows, bytes, error, status}` (lib.buffer.ingest.select_pending: hashed
  once per night, by `inspect_buffer_file`); `already`: how many files the choice skipped as
  consumed / quarantined (counted by rank 0).
- `curation/shards/docs-<r>.parquet`: id, text, order (uint64: file position << 32 | row, the
  night order), kind (declared or null); plain pages, no compression (`SHARD_PARQUET`: the next
  steps read it two or three times).
- `curation/shards/dedup-<r>.npz`: `exact` (uint64 xxh3 of the normalised text, a row per doc),
  `signatures` (uint32, docs × num_perm; zeros when near dedup is off).
- `curation/shards/ingest-<r>.json`: `stats` (Stats), `file_hashes` (the files whose rows are in
  docs), `registry_events` (lib.buffer.ingest.DeferredRegistry events).
- `curation/shards/keep-<r>.npy`: bool, a row per doc of docs-<r>: survived dedup.
- `curation/duplicates.parquet`: id, duplicate_of (an id, or "earlier-night" for an exact match
  in the index), kind (exact | near), jaccard (1.0 for exact, else the MinHash estimate).
- `curation/dedup_state.npz`: what the night kept (exact, ids, signatures, params), committed to
  the workspace's index only by `commit_index` when the night is promoted (a rejected night must
  not make its documents look "seen" to the next one). `curation/dedup.json`: its Stats.
- `curated/part-<r>.parquet`: id, text, source_ids, lang, lang_score, quality_score, kind (code
  has no lang); `curation/shards/dropped-<r>.parquet`: id, reason, kind, a row per document that
  left in step 4; `curation/shards/filter-<r>.json`: its Stats.
- `curated/stats.json`: each stage's counts (ingest, exact, near, kinds, length, language,
  quality, code), `dropped_by_reason` for the whole night (every `dropped_<reason>` of the
  steps' Stats), `warnings` (a filter that dropped more than `curation.max_drop_share` of what it
  saw), shards, docs_in, docs_out, chars_out, buffer_hashes.

Rules: exact dedup is xxh3-64 of the normalised text, a hash kept on an earlier (promoted) night
drops the document (`workspace.index/exact_hashes.npy`); near dedup matches tonight's signatures
within the night (lib.curation.dedup) and against those earlier nights kept (`workspace.index/minhash/`),
confirmed by the estimated Jaccard ≥ threshold. Kinds and the code rule: lib.curation.textfilters; the
language and quality models: lib.curation.fasttext_filters.

Trade-offs: the history is matched on signatures, not texts, so an earlier night's document can't
be verified exactly; the estimate from 128 permutations has a standard error of ~0.035 at J=0.8.
Filters judge one document at a time (`reject(doc) -> reason | None`, lib/curation/filters.py) on line features computed
for the whole shard in one polars query (lib.curation.textfilters), so a new filter is a few lines and the
column work stays batched.
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

from lib.buffer.ingest import (
    DEFAULT_MAX_TEXT_BYTES, DeferredRegistry, atomic_write_table, ingest, pending_buffer_files,
    record_ingest,
)
from lib.config import ConsolidationConfig, CurationConfig
from lib.curation.dedup import DedupIndex, compute_signatures, exact_hashes, first_occurrence, match_history, near_dedup, signature_params
from lib.curation.filters import kind_filters
from lib.curation.minhash import estimated_jaccard
from lib.curation.steps import Stats, Step, run_steps
from lib.curation.text import TextBuffer, normalize_texts
from lib.curation.textfilters import Doc, declared_kind, detect_kinds, length_filter, line_features
from lib.faults import fault_point
from lib.files import atomic_path, write_json
from lib.registry.lineage import Lineage
from lib.registry.records import portable_tree
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
DUPLICATES_SCHEMA = pa.schema([("id", pa.string()), ("duplicate_of", pa.string()), ("kind", pa.string()), ("jaccard", pa.float64())])
DEDUP_OUTPUTS = ["curation/duplicates.parquet", "curation/dedup_state.npz", "curation/dedup.json"]
_SEED = 1
# docs-<r>.parquet is written by one step and read by the next two or three, in this process
# (`curate`, `consolidate dedup`) or another: plain pages, no compression and no dictionary (the
# texts are unique) cost less to write and far less to read than the defaults, for ~3x the bytes
# on disk (5.6 MB of stdlib sources, load 4: write 11.8 ms, read 2.6 ms, 5.6 MB on disk; the
# defaults: 28.8 ms, 31.0 ms, 1.8 MB; lz4: 25.0 ms, 5.4 ms, 2.0 MB).
SHARD_PARQUET = {"compression": "none", "use_dictionary": False}


def shard_outputs(rank: int) -> dict[str, str]:
    """Files the steps write for `rank`, relative to the run folder."""
    return {
        "docs": f"curation/shards/docs-{rank:05d}.parquet",
        "dedup": f"curation/shards/dedup-{rank:05d}.npz",
        "ingest": f"curation/shards/ingest-{rank:05d}.json",
        "keep": f"curation/shards/keep-{rank:05d}.npy",
        "filter": f"curation/shards/filter-{rank:05d}.json",
        "dropped": f"curation/shards/dropped-{rank:05d}.parquet",
        "part": f"curated/part-{rank:05d}.parquet",
    }


def shard_count(cfg: ConsolidationConfig, n_files: int) -> int:
    """Shards of a night: `curation.shards`, else one per worker; never more than the files."""
    want = cfg.curation.shards or cfg.curation.workers or os.cpu_count() or 1
    return max(1, min(want, n_files))


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, obj, indent=1, sort_keys=True)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


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


def write_documents(run: Path, rank: int, ids: list[str], texts: list[str], order: list[int], kinds: list[str | None],
                    c: CurationConfig) -> None:
    """A rank's documents as the steps after it read them: `docs-<r>.parquet` and `dedup-<r>.npz`
    (exact hashes and MinHash signatures of the normalised texts)."""
    out = shard_outputs(rank)
    norm = normalize_texts(texts, c.workers or 1)
    atomic_write_table(pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string()),
                                 "order": pa.array(order, pa.uint64()), "kind": pa.array(kinds, pa.string())}), run / out["docs"],
                       **SHARD_PARQUET)
    sig = (compute_signatures(norm, c.num_perm, c.ngram, c.shingle, _SEED, c.workers) if c.near_dedup and len(norm)
           else np.zeros((len(norm), c.num_perm), np.uint32))
    with atomic_path(run / out["dedup"], suffix=".npz") as tmp:
        np.savez(tmp, exact=exact_hashes(norm), signatures=sig)


# -- 1. ingest ---------------------------------------------------------------------------------------
class IngestStep(Step):
    """This rank's pending buffer files → documents, exact hashes, signatures (registry changes
    recorded in `ingest-<r>.json`, applied by `RecordIngestStep`)."""

    name = "ingest-shard"

    def __init__(self, ws: Workspace, max_text_bytes: int | None = None):
        self.ws = ws
        self.max_text_bytes = max_text_bytes or DEFAULT_MAX_TEXT_BYTES  # buffer.max_text_bytes

    def reads(self, input: dict, output: Path, rank: int, world_size: int, section: CurationConfig) -> list[Path]:
        return [Path(f["path"]) for f in input["files"][rank::world_size]]

    def writes(self, rank: int, world_size: int) -> list[str]:
        return [shard_outputs(rank)[k] for k in ("docs", "dedup", "ingest")]

    def run(self, input: dict, output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        c, out, run = section, shard_outputs(rank), Path(output)
        files = [Path(f["path"]) for f in input["files"]]
        registry = DeferredRegistry({f["content_hash"]: f["status"] for f in input["files"] if f.get("status")})
        got = ingest(self.ws, registry, rank, world_size, flush=False, files=files,
                     digests={f["path"]: f["content_hash"] for f in input["files"]}, max_text_bytes=self.max_text_bytes)
        write_documents(run, rank, got.ids, got.texts, got.order, declared_kinds(files, got.order, got.sources, c.source_kinds), c)
        stats = Stats({"ingest": got.counts})
        already = input.get("already", {}) if rank == 0 else {}
        for status, n in already.items():  # files the choice of pending files skipped: counted once
            if n:
                stats.add("ingest.files", n)
                stats.add(f"ingest.files_already_{status}", n)
        stats.drop("quarantined_rows", got.counts.get("rows_quarantined", 0))

        # the events name buffer files relative to the workspace: RecordIngestStep may apply them
        # after the workspace moved (a resumed night)
        _write_json(run / out["ingest"], {"rank": rank, "stats": stats.to_dict(), "file_hashes": got.file_hashes,
                                          "registry_events": portable_tree(registry.events, self.ws.root)})
        return stats


# -- 2. registry -------------------------------------------------------------------------------------
class RecordIngestStep(Step):
    """Every rank's registry changes into lineage, and every quarantine lineage does not know yet
    (a rank that quarantined a file and then failed, was retried, or was killed). Idempotent."""

    name = "record-ingest"
    per_shard = False
    cached = False

    def __init__(self, ws: Workspace):
        self.ws = ws

    def run(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        fault_point("curate")  # bad files moved to quarantine/, lineage not told yet
        events = [e for r in range(world_size) for e in _read_json(Path(output) / shard_outputs(r)["ingest"])["registry_events"]]
        late = record_ingest(self.ws, Lineage(self.ws.lineage_db), events)
        stats = Stats({"registry": {"events": len(events), "late_quarantines": late}})
        if late:
            stats.warn(f"recorded {late} quarantined file(s) an earlier attempt had not recorded")
        for e in events:
            if e["op"] == "quarantine":
                stats.warn(f"quarantined {Path(e['path']).name}: {e['reason']}")
        return stats


# -- 3. dedup ----------------------------------------------------------------------------------------
class DedupStep(Step):
    """Exact and near dedup over every shard, tonight and against earlier nights (`index`: the
    dedup history; a folder with none is an empty history)."""

    name = "dedup-shards"
    per_shard = False

    def __init__(self, index: DedupIndex):
        self.index = index

    def reads(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> list[Path]:
        history = [self.index.exact_path] if self.index.exact_path.exists() else []
        history += sorted(self.index.minhash_dir.glob("*.npz")) if self.index.minhash_dir.is_dir() else []
        return [Path(output) / shard_outputs(r)[k] for r in range(world_size) for k in ("docs", "dedup")] + history

    def writes(self, rank: int, world_size: int) -> list[str]:
        return DEDUP_OUTPUTS + [shard_outputs(r)["keep"] for r in range(world_size)]

    def run(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        c, run = section, Path(output)
        ids: list[str] = []
        order_parts, hash_parts, sig_parts, rank_of = [], [], [], []
        for r in range(world_size):
            docs = pq.read_table(run / shard_outputs(r)["docs"], columns=["id", "order"])
            ids += docs.column("id").to_pylist()
            order_parts.append(docs.column("order").to_numpy().astype(np.uint64))
            with np.load(run / shard_outputs(r)["dedup"], allow_pickle=False) as z:
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
        stats = Stats()

        # exact: within the night, then against what earlier nights kept
        if c.exact_dedup:
            rep = first_occurrence(hashes)
            for i in np.flatnonzero(rep != np.arange(n)):
                keep[i] = False
                duplicates.append({"id": ids[i], "duplicate_of": ids[rep[i]], "kind": "exact", "jaccard": 1.0})
            seen = np.isin(hashes, self.index.exact()) & keep
            for i in np.flatnonzero(seen):
                keep[i] = False
                duplicates.append({"id": ids[i], "duplicate_of": "earlier-night", "kind": "exact", "jaccard": 1.0})
            within, against = int((rep != np.arange(n)).sum()), int(seen.sum())
            stats.set("exact", {"in": n, "dropped_within_night": within, "dropped_against_history": against, "out": int(keep.sum())})
            stats.drop("exact_duplicate", within)
            stats.drop("exact_duplicate_of_earlier_night", against)

        # near: within the night, then against earlier nights' signatures
        alive = np.flatnonzero(keep)
        sig = np.zeros((0, c.num_perm), np.uint32)
        if c.near_dedup and len(alive):
            norm = _NightTexts(run, world_size, perm, alive) if c.verify_jaccard else None
            res = near_dedup(norm, c.threshold, c.num_perm, c.ngram, c.shingle, c.verify_jaccard, c.workers,
                             signatures=sig_all[alive], seed=_SEED)
            sig = res.signatures
            local = np.ones(len(alive), dtype=bool)
            for j in np.flatnonzero(res.representative != np.arange(len(alive))):
                r = res.representative[j]
                local[j] = False
                est = float(estimated_jaccard(sig[j : j + 1], sig[r : r + 1])[0])
                duplicates.append({"id": ids[alive[j]], "duplicate_of": ids[alive[r]], "kind": "near", "jaccard": est})
            hist_ids, hist_sig = self.index.signatures(c.num_perm, c.ngram, c.shingle, _SEED)
            match, est = match_history(sig, hist_ids, hist_sig, res.bands, res.rows, min_jaccard=c.threshold)
            against = (match >= 0) & local
            for j in np.flatnonzero(against):
                duplicates.append({"id": ids[alive[j]], "duplicate_of": str(hist_ids[match[j]]), "kind": "near", "jaccard": float(est[j])})
            local &= ~against
            within = int((res.representative != np.arange(len(alive))).sum())
            keep[alive[~local]] = False
            sig = sig[local]
            stats.set("near", {"in": len(alive), "bands": res.bands, "rows": res.rows, "candidate_pairs": res.candidate_pairs,
                               "verified_pairs": res.verified_pairs if c.verify_jaccard else None,
                               "dropped_within_night": within, "dropped_against_history": int(against.sum()),
                               "out": int(keep.sum())})
            stats.drop("near_duplicate", within)
            stats.drop("near_duplicate_of_earlier_night", int(against.sum()))
        elif len(alive):
            sig = sig_all[alive]
        kept = np.flatnonzero(keep)
        np.savez(run / "curation" / "dedup_state.npz", exact=hashes[kept], ids=np.asarray([ids[i] for i in kept], dtype=str),
                 signatures=sig, params=np.array(json.dumps(signature_params(c.num_perm, c.ngram, c.shingle, _SEED), sort_keys=True)))
        atomic_write_table(pa.Table.from_pylist(duplicates, schema=DUPLICATES_SCHEMA), run / "curation" / "duplicates.parquet")
        # back to each shard's own row order
        keep_by_row = np.empty(n, dtype=bool)
        keep_by_row[perm] = keep
        ranks = np.concatenate(rank_of) if rank_of else np.zeros(0, np.int64)
        for r in range(world_size):
            np.save(run / shard_outputs(r)["keep"], keep_by_row[ranks == r])
        _write_json(run / "curation" / "dedup.json", stats.to_dict())
        return stats


class _NightTexts:
    """The texts of the night's surviving documents (position i: alive[i] in night order), read
    from the shards; `take` normalises only the documents asked for (verification touches the
    candidates, not the whole night)."""

    def __init__(self, run: Path, world_size: int, perm: np.ndarray, alive: np.ndarray):
        self._texts = pa.chunked_array([chunk for r in range(world_size) for chunk in pq.read_table(
            run / shard_outputs(r)["docs"], columns=["text"]).column("text").chunks], type=pa.string())
        self._rows = perm[alive]

    def __len__(self) -> int:
        return len(self._rows)

    def take(self, idx: np.ndarray) -> TextBuffer:
        return normalize_texts(self._texts.take(pa.array(self._rows[idx])))


# -- 4. filters ---------------------------------------------------------------------------------------
class FilterStep(Step):
    """Each surviving document's kind (declared, else detected), length filter and concatenation
    (within a kind), then its kind's filters; every drop written with its reason."""

    name = "filter-shard"

    def __init__(self, ws: Workspace):
        self.ws = ws

    def _quality_model(self, c: CurationConfig) -> Path | None:
        return self.ws.resolve(c.quality_model) if c.quality_model else None

    def reads(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> list[Path]:
        out = shard_outputs(rank)
        model = self._quality_model(section)
        return [Path(output) / out["docs"], Path(output) / out["keep"]] + ([model] if model else [])

    def writes(self, rank: int, world_size: int) -> list[str]:
        return [shard_outputs(rank)[k] for k in ("part", "filter", "dropped")]

    def run(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        c, out, run = section, shard_outputs(rank), Path(output)
        table = pq.read_table(run / out["docs"])
        keep = np.load(run / out["keep"])
        ids, texts = table.column("id").to_pylist(), table.column("text").to_pylist()
        declared = table.column("kind").to_pylist() if "kind" in table.column_names else [None] * len(ids)
        rows = np.flatnonzero(keep).tolist()
        feats_in = line_features([texts[i] for i in rows])
        detected = detect_kinds(feats_in, c.language_min_prose_chars) if c.detect_kinds else ["prose"] * len(rows)
        kind_of = {i: declared[i] or k for i, k in zip(rows, detected)}
        docs_in = [Doc(ids[i], texts[i], [ids[i]], kind_of[i]) for i in rows]
        stats = Stats({"kinds": {k: sum(1 for d in docs_in if d.kind == k) for k in ("prose", "code")}})
        stats.set("kinds.declared", sum(1 for i in rows if declared[i] is not None))
        dropped: list[tuple[str, str]] = []
        docs, length = length_filter(docs_in, c.min_chars, c.max_chars, c.long_docs, c.concatenate_short, dropped)
        stats.set("length", length)
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
        for d, f in zip(docs, feats.iter_rows(named=True)):
            d.features = f

        filters = kind_filters(stats, c, self._quality_model(c))
        for name in ("language", "quality", "code"):
            stats.add(f"{name}.in", 0)
            stats.add(f"{name}.dropped", 0)
        verdict: list[str | None] = [None] * len(docs)
        for i, d in enumerate(docs):
            for f in filters[d.kind]:
                stats.add(f"{f.name}.in")
                verdict[i] = f.reject(d)
                if verdict[i] is not None:
                    stats.add(f"{f.name}.dropped")
                    break
        for i, v in enumerate(verdict):  # a piece of a split document is dropped alone: its own id
            if v is not None:
                reasons.update((s, v) for s in (docs[i].source_ids if docs[i].id.startswith("concat:") else [docs[i].id]))
        by_id = {d.id: d.kind for d in docs} | {ids[i]: kind_of[i] for i in rows}
        dropped_ids = sorted(reasons)
        atomic_write_table(pa.table({"id": dropped_ids, "reason": [reasons[k] for k in dropped_ids],
                                     "kind": [by_id.get(k) for k in dropped_ids]}, schema=DROPPED_SCHEMA), run / out["dropped"])
        for r in sorted(set(reasons.values())):
            stats.drop(r, list(reasons.values()).count(r))

        final = [docs[i] for i in range(len(docs)) if verdict[i] is None]
        atomic_write_table(pa.table({
            "id": [d.id for d in final],
            "text": [d.text for d in final],
            "source_ids": [d.source_ids for d in final],
            "lang": [d.lang for d in final],
            "lang_score": [d.lang_score for d in final],
            "quality_score": [d.quality_score for d in final],
            "kind": [d.kind for d in final],
        }, schema=CURATED_SCHEMA), run / out["part"])
        stats.add("docs_out", len(final))
        stats.add("chars_out", int(sum(len(d.text) for d in final)))
        _write_json(run / out["filter"], stats.to_dict())
        return stats


# -- 5. report ---------------------------------------------------------------------------------------
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


class ReportStep(Step):
    """The night's counts from every step and shard → `curated/stats.json` (see the module
    docstring), with a warning for each filter that dropped more than `max_drop_share`."""

    name = "curation-report"
    per_shard = False
    cached = False

    def run(self, input: Any, output: Path, rank: int, world_size: int, section: CurationConfig) -> Stats:
        run = RunDir(Path(output))
        ingested = [_read_json(run.path / shard_outputs(r)["ingest"]) for r in range(world_size)]
        night = Stats.total([Stats(i["stats"]) for i in ingested]
                            + [Stats(_read_json(run.path / "curation" / "dedup.json"))]
                            + [Stats(_read_json(run.path / shard_outputs(r)["filter"])) for r in range(world_size)])
        stats = {k: v for k, v in night.to_dict().items() if not k.startswith("dropped_")}
        stats["shards"] = world_size
        stats["buffer_hashes"] = [h for i in ingested for h in i["file_hashes"]]
        stats.setdefault("ingest", {}).setdefault("docs_out", 0)
        stats["docs_in"] = stats["ingest"]["docs_out"]
        stats.setdefault("docs_out", 0)
        stats.setdefault("chars_out", 0)
        stats["dropped_by_reason"] = night.dropped()
        stats["warnings"] = drop_warnings(stats, section.max_drop_share)
        for w in stats["warnings"]:
            log.warning("curation of %s: %s", run.run_id, w)
        run.curated.mkdir(parents=True, exist_ok=True)
        _write_json(run.curated / "stats.json", stats)
        return Stats(stats)


# -- the list, and running it here ------------------------------------------------------------------
def curation_steps(ws: Workspace, max_text_bytes: int | None = None) -> list[Step]:
    """The night's curation, in order (what `curate` runs here and the flow maps as tasks);
    `max_text_bytes`: buffer.max_text_bytes, the longest text a buffer file's row may hold."""
    return [IngestStep(ws, max_text_bytes), RecordIngestStep(ws), DedupStep(DedupIndex(ws.index)), FilterStep(ws), ReportStep()]


def curate(ws: Workspace, cfg: ConsolidationConfig, run_dir: RunDir, shards: int | None = None) -> dict[str, Any]:
    """The whole curation of the pending buffer files in this process (`shards`: default
    `shard_count`): the contents of `curated/stats.json`."""
    run_dir.curated.mkdir(parents=True, exist_ok=True)
    files, counts = pending_buffer_files(ws, Lineage(ws.lineage_db))
    n = shards or shard_count(cfg, len(files))
    pending = {"files": files, "already": {"consumed": counts["already_consumed"], "quarantined": counts["already_quarantined"]}}
    *_, report = run_steps(curation_steps(ws, cfg.buffer.max_text_bytes), pending, run_dir.path, n, cfg.curation)
    return report.to_dict()


def commit_index(ws: Workspace, run_dir: RunDir) -> bool:
    """Add what this night kept to the persisted dedup index (call when the night is promoted).
    Idempotent: False if the night was committed already or has no state."""
    path = run_dir.path / "curation" / "dedup_state.npz"
    if not path.exists():
        return False
    with np.load(path, allow_pickle=False) as z:
        return DedupIndex(ws.index).add(run_dir.run_id, z["exact"], z["ids"], z["signatures"], json.loads(str(z["params"])))
