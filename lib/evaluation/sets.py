"""The texts a night is evaluated on: fixed samples of parquet documents, named as the gate and the
lineage registry read them.

- `run_eval_sets`: old_val (the replay corpus's validation shards: forgetting), new_heldout (the
  night's held-out documents: acquisition) and new_train (the night's curated documents minus the
  held-out ones).
- `retention_sets`: the held-out documents of every accepted night in the memory (lib/data/memory.py),
  or a spread of them once there are more than `max_sets`: what the night keeps.
- `fixed_sample`: documents in the order of a hash of their id, capped in count and bytes, so the
  same documents come out whatever order the files were written in.

Trade-off: every file of a set is read whole before it is sampled (`eval.max_docs` and
`eval.max_bytes` cap what is scored, not what is read): one pass, where reading only the sampled
rows would need the ids first and a second pass over every file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pyarrow.parquet as pq
import xxhash

from lib.data.memory import FACTS_FILE, FACTS_PREFIX, RETENTION_PREFIX
from lib.evaluation.fact_recall import sample_facts
from lib.knowledge.facts import read_facts

# Metric names as the gate and the lineage registry read them.
OLD_VAL, NEW_HELDOUT, NEW_TRAIN, PROBES = "old_val", "new_heldout", "new_train", "probes"


def parquet_texts(files: Iterable[Path], exclude_ids: set[str] | None = None) -> list[tuple[str, str]]:
    out = []
    for f in sorted(files):
        table = pq.read_table(f)
        if "text" not in table.column_names:
            raise ValueError(f"{f}: no `text` column (columns: {', '.join(table.column_names)})")
        ids = table.column("id").to_pylist() if "id" in table.column_names else [f"{f.name}:{i}" for i in range(table.num_rows)]
        for doc_id, text in zip(ids, table.column("text").to_pylist()):
            if text and (exclude_ids is None or doc_id not in exclude_ids):
                out.append((str(doc_id), text))
    return out


def fixed_sample(rows: list[tuple[str, str]], max_docs: int | None, max_bytes: int | None = None) -> list[str]:
    """A fixed sample: documents in the order of a hash of their id (not the alphabet, which
    would favour one corner of a corpus), up to `max_docs` and `max_bytes`; whatever order the
    files were written in, the same documents come out."""
    rows = sorted(rows, key=lambda r: (xxhash.xxh64_intdigest(r[0].encode("utf-8"), seed=0x65766C), r[0]))
    out, size = [], 0
    for _, text in rows:
        if max_docs is not None and len(out) >= max_docs:
            break
        n = len(text.encode("utf-8"))
        if max_bytes is not None and out and size + n > max_bytes:
            break
        out.append(text)
        size += n
    return out


def run_eval_sets(workspace, corpus: str, run_dir=None, max_docs: int | None = None,
                  max_bytes: int | None = None) -> dict[str, list[str]]:
    """The texts the gate compares on: old_val = `<ws>/corpora/<corpus>/val/*.parquet`;
    new_heldout = the run's held-out documents (`run_dir.prepared`, lib/data/prepared.py: kept out of
    the manifest by the data stage);
    new_train = `<run>/curated/*.parquet` minus the held-out ids. Each a fixed sample capped at
    `max_docs` documents and `max_bytes` bytes."""
    val_dir = workspace.corpus_val(corpus)
    val_files = list(val_dir.glob("*.parquet"))
    if not val_files:
        raise FileNotFoundError(f"no validation shards in {val_dir}: build the corpus first (workspace.corpus={corpus!r})")
    sets = {OLD_VAL: fixed_sample(parquet_texts(val_files), max_docs, max_bytes)}
    if run_dir is not None:
        heldout = parquet_texts(run_dir.prepared.heldout_files())
        sets[NEW_HELDOUT] = fixed_sample(heldout, max_docs, max_bytes)
        sets[NEW_TRAIN] = fixed_sample(parquet_texts(run_dir.curated.glob("*.parquet"), {i for i, _ in heldout}), max_docs, max_bytes)
    return sets


def _pick_nights(nights: list[dict[str, Any]], max_sets: int | None) -> list[dict[str, Any]]:
    """All nights up to `max_sets`; beyond, the newest half and an even spread over the older."""
    if max_sets is None or len(nights) <= max_sets:
        return nights
    recent = max_sets - max_sets // 2
    older, newest = nights[:-recent], nights[-recent:]
    k = max_sets - recent
    pick = [older[round(i * (len(older) - 1) / max(1, k - 1))] for i in range(k)] if k else []
    return list({n["version"]: n for n in pick}.values()) + newest


def retention_sets(ws, lineage, max_sets: int | None, max_docs: int | None, max_bytes: int | None) -> dict[str, list[str]]:
    """{"night:<version>": held-out texts} of the accepted nights to check, oldest first."""
    nights = [n for n in lineage.memory_nights() if (Path(n["path"]) / "heldout.parquet").is_file() and n["heldout_docs"]]
    return {f"{RETENTION_PREFIX}{n['version']}": fixed_sample(parquet_texts([Path(n["path"]) / "heldout.parquet"]), max_docs, max_bytes)
            for n in _pick_nights(nights, max_sets)}


def fact_sets(ws, lineage, max_sets: int | None, max_items: int | None) -> dict[str, list]:
    """{"facts:<version>": FactItems} of the accepted nights to check, oldest first: the nights
    with a non-empty fact set, picked as `retention_sets` picks, each capped at `max_items`
    (lib.evaluation.fact_recall.sample_facts: the same items every night)."""
    out = {}
    nights = [n for n in lineage.memory_nights() if (Path(n["path"]) / FACTS_FILE).is_file()]
    for n in _pick_nights([n for n in nights if (Path(n["path"]) / FACTS_FILE).stat().st_size], max_sets):
        items = read_facts(Path(n["path"]) / FACTS_FILE)
        if items:
            out[f"{FACTS_PREFIX}{n['version']}"] = sample_facts(items, max_items)
    return out
