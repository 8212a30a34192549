"""The long-term memory: what accepted nights taught, replayed on later nights and checked on each.

Replaying only the original corpus protects what the model knew before it was adopted, not what
it learnt since: measured on the tiny preset, night 1's held-out gain fell to 26% after three more
nights while every night passed its gate (issue #14). So:

- `remember(ws, lineage, version, run_dir)`: when a night's candidate is accepted, its curated
  documents join the memory (`<ws>/memory/<version>/train/`, hard links to the run's curated
  files: stored once, and tokenized once, since a memory file hits the token cache entry its night
  made) and its held-out documents become a named retention set (`heldout.parquet`, dataset
  `night:<version>`); its fact probes (`<run>/knowledge/facts.jsonl`, lib/knowledge/facts.py) are
  kept beside them (`facts.jsonl`, dataset `facts:<version>`). `night.json` keeps the night's held-out cut, so its held-out documents are
  never trained on later. The documents' exposure counts (how often each was drawn into an
  accepted training) go to lineage (`memory_exposures`), from that night on.
- `replay_weights(lineage, recency, exposure_power, fact_boost, champion)`: a memory document's
  weight is `recency ** age / (1 + exposures) ** exposure_power * (1 + fact_boost * slip)` (age
  in accepted nights, 0 for the newest; slip = the share of the document's facts the night that
  learnt them answered and the champion no longer does, 0 for a document without facts), so the
  memory source (`sampling.memory_ratio` of the tokens) replays recent, rarely seen and
  slipping documents first (lib/data/manifest.py draws a weighted order).
- `rehearsal_weights(...)`: the same boost for the memory's question forms (the rehearsal, the
  source that keeps a night's facts answerable, lib/knowledge/inject.py): the forms of a document
  whose facts slip are drawn more, within the rehearsal's share.
- `retention_sets(ws, lineage, ...)` and `fact_sets(...)` (lib/evaluation/sets.py): the sets a night evaluates champion
  and candidate on: every accepted night's held-out documents and fact probes, or once there are
  more than `max_sets`, the newest half of them plus an even spread over the older ones.
- `forget(lineage, version)`: a rolled-back night leaves the memory (lib.registry.promotion.rollback).

Trade-off: replaying the memory costs the corpus `memory_ratio` of its share (default 10%). In
bench/bench_memory.py (tiny preset, 4 nights, one seed) that cost no measurable learning (each
night's own held-out set fell 4.6% on average, 4.5% with corpus replay only), and night 1 kept 167%
of its held-out gain after night 4 against 105% with corpus replay only (the issue's manual
experiment had seen nights learn 1-2 points less). `memory_ratio` 0.05 kept less (131%).
The fact boost moves replay between memory documents, never more of it: with `fact_boost` 4 a
document that lost every fact is drawn 5x as often as a steady one of the same age and exposure,
so the other memory documents get that much less of the fixed `memory_ratio`; a document whose
only fact flipped on rank noise (one item of a few) is boosted as much as one truly forgotten.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from lib.data.prepared import PreparedData
from lib.files import link_or_copy, publish_folder

MEMORY_NIGHT = "night.json"
RETENTION_PREFIX = "night:"
FACTS_PREFIX = "facts:"         # dataset of an earlier night's fact set: facts:<version> (tonight's: facts:new)
FACTS_FILE = "facts.jsonl"      # <run>/knowledge/facts.jsonl -> <ws>/memory/<version>/facts.jsonl
REHEARSAL_SOURCE = "rehearsal"  # the manifest's source of the memory's question forms (lib/knowledge/inject.py)


def remember(ws, lineage, version: str, run_dir) -> dict[str, Any]:
    """Add the accepted night of `run_dir` (which trained `version`) to the memory; idempotent.
    Returns what was added."""
    run = Path(getattr(run_dir, "path", run_dir))
    prepared = PreparedData(run)
    new = prepared.info["sources"].get("new") or {}
    folder = ws.memory / version
    if not (folder / MEMORY_NIGHT).is_file():
        with publish_folder(folder) as tmp:  # replaces a half-made folder of a killed promotion
            for part in sorted((run / "curated").glob("*.parquet")):
                link_or_copy(part, tmp / "train" / part.name)  # curated files are never modified in place
            heldout = prepared.heldout_file("new")
            if heldout.is_file():
                link_or_copy(heldout, tmp / "heldout.parquet")
            facts = night_facts_file(run)
            if facts.is_file():
                link_or_copy(facts, tmp / FACTS_FILE)  # the night's probes, never rewritten in place
            (tmp / MEMORY_NIGHT).write_text(json.dumps({"version": version, "run_id": run.name,
                                                         "heldout_cut": new.get("heldout_cut") or "0"}) + "\n", encoding="utf-8")
    exposures = prepared.read_exposures()
    first = {r["doc_id"]: int(r["exposures"]) for r in exposures if r["source"] == "new"}
    replayed: dict[str, dict[str, int]] = {}
    for r in exposures:
        if r["source"] == "memory" and r.get("night") and r["exposures"]:
            replayed.setdefault(r["night"], {})[r["doc_id"]] = int(r["exposures"])
    heldout_docs = pq.ParquetFile(folder / "heldout.parquet").metadata.num_rows if (folder / "heldout.parquet").is_file() else 0
    lineage.record_memory_night(version, run.name, folder, int(new.get("docs") or 0), heldout_docs,
                                int(new.get("heldout_cut") or 0), first)
    lineage.record_replay_exposures(version, replayed)
    return {"version": version, "path": str(folder), "docs": int(new.get("docs") or 0), "heldout_docs": heldout_docs,
            "replayed_docs": sum(len(v) for v in replayed.values()), "facts": (folder / FACTS_FILE).is_file()}


def night_facts_file(run_dir) -> Path:
    """`<run>/knowledge/facts.jsonl`: the fact probes the night's knowledge stage extracted."""
    return Path(getattr(run_dir, "path", run_dir)) / "knowledge" / FACTS_FILE


def replay_weights(lineage, recency: float, exposure_power: float, fact_boost: float = 0.0,
                   champion: str | None = None) -> dict[str, float]:
    """{doc_id: weight} of every memory document (see the module docstring). `champion`: the
    version tonight continues; its latest fact recall per document (lineage `fact_recall`)
    against the learner's own gives the slip that `fact_boost` multiplies."""
    nights = [n["version"] for n in lineage.memory_nights()]
    age = {v: len(nights) - 1 - i for i, v in enumerate(nights)}
    slip = fact_slips(lineage, champion) if fact_boost and champion else {}
    return {doc: (recency ** age.get(night, 0)) / (1.0 + exposures) ** exposure_power * (1.0 + fact_boost * slip.get((night, doc), 0.0))
            for (night, doc), exposures in lineage.memory_exposures().items() if night in age}


def fact_slips(lineage, version: str) -> dict[tuple[str, str], float]:
    """{(night, doc_id): slip} for every memory document whose facts `version` was measured on:
    (learnt correct - correct now) / items, at least 0; `learnt` is the night's own version in
    the night's own run (what it answered the morning after)."""
    out = {}
    learnt = {(r["night"], r["doc_id"]): r for r in lineage.fact_recall(learner_only=True)}
    for r in lineage.fact_recall(version=version):
        ref = learnt.get((r["night"], r["doc_id"]))
        if ref is None or r["night"] == version or not r["items"]:
            continue
        out[(r["night"], r["doc_id"])] = max(0.0, (ref["correct"] - r["correct"]) / r["items"])
    return out


def rehearsal_weights(lineage, fact_boost: float, champion: str | None, forms_dir: str | Path) -> dict[str, float]:
    """{form id: weight} of tonight's rehearsal forms (`<run>/knowledge/rehearsal/*.parquet`, each
    the question forms of one memory document, its `augments`): 1 + `fact_boost` × that document's
    slip under `champion` (`fact_slips`), as `replay_weights` boosts the document itself. The
    rehearsal's share stays what `night_plan` gave it; the forms of documents whose facts slip
    take more of it (4: one that lost them all, 5x a steady one's)."""
    slip: dict[str, float] = {}
    if fact_boost and champion:
        for (_, doc), s in fact_slips(lineage, champion).items():
            slip[doc] = max(slip.get(doc, 0.0), s)
    weights = {}
    for part in sorted(Path(forms_dir).glob("*.parquet")):
        table = pq.read_table(part, columns=["id", "augments"])
        for form, doc in zip(table.column("id").to_pylist(), table.column("augments").to_pylist()):
            weights[form] = 1.0 + fact_boost * slip.get(doc, 0.0)
    return weights


def forget(lineage, version: str) -> bool:
    """`version` was rolled back: its documents are no longer replayed, its set no longer checked.
    Returns whether it was in the memory."""
    night = next((n for n in lineage.memory_nights() if n["version"] == version), None)
    lineage.forget_memory_night(version)
    if night is not None:
        shutil.rmtree(night["path"], ignore_errors=True)
    return night is not None
