"""Fact recall in the night's evaluation: which fact probes a night asks, cached per weights.

A night asks parent and candidate its own fact probes (`facts:new`, from
`<run>/knowledge/facts.jsonl`) and every kept night's (`facts:<vK>`, lib/data/memory.py `fact_sets`),
scored by lib/evaluation/facts.py `score_facts` (the answer ranked first among its distractors by
log-likelihood after the question: accuracy; the greedy continuation starting with it: exact match).

- A set is capped at `eval.fact_max_items` probes, picked in the order of a hash of their ids, so
  the same probes come out every night whatever order they were written in: tonight's figure and
  the figure of the night that learnt a set are on the same probes.
- A result is cached per (weights digest, probes digest, window, separator, tokenizer, dtype,
  device, max_new_tokens) as a JSON record under the eval cache (never pickle), like bits per
  byte: the parent was the candidate last night, so it is asked each set once.
- Figures recorded in lineage per set: `fact_accuracy`, `fact_exact`, `fact_mean_rank`,
  `fact_chance` (1 / candidates), `fact_n`; a night whose documents held no fact records only
  `fact_n` = 0 for `facts:new`, so the gate can tell "no facts tonight" from "not measured".
- Per-document recall (probes and answers per `doc_id`) goes to lineage `fact_recall`: what memory
  replay reads to favour documents whose facts slip.

Trade-off: one short forward pass per option (answer and up to 23 distractors) plus a few greedy
steps per probe. Measured in a demo night on the 2-core CPU under load ~15: 39 probes asked of
both sides in 64 s, beside 188 s of bits per byte and 388 s of training (45 steps); the cap bounds
a night with many kept sets (`eval.memory_sets` x `eval.fact_max_items`), and the parent's kept
sets come from the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Sequence
import xxhash

from lib.files import write_json
from lib.data.memory import night_facts_file
from lib.evaluation.eval_model import EvalModel
from lib.evaluation.facts import score_facts
from lib.knowledge.facts import read_facts

FACT_METRICS = ("fact_accuracy", "fact_exact", "fact_mean_rank", "fact_chance", "fact_n")
FACT_CACHE_VERSION = 1  # bump when the scores for the same inputs would change


def sample_facts(items: Sequence[Any], max_items: int | None) -> list[Any]:
    """At most `max_items` of `items`, in the order of a hash of their ids (a fixed sample)."""
    ordered = sorted(items, key=lambda it: (xxhash.xxh64_intdigest(str(it.id).encode("utf-8"), seed=0x66616374), str(it.id)))
    return ordered if max_items is None else ordered[:max_items]


def night_facts(run_dir, max_items: int | None) -> list[Any] | None:
    """Tonight's probes from `<run>/knowledge/facts.jsonl` (capped); [] when the night extracted
    none (the file is empty), None when the night has no such file (no knowledge stage ran)."""
    path = night_facts_file(run_dir)
    if not path.is_file():
        return None

    return sample_facts(read_facts(path), max_items) if path.stat().st_size else []


def facts_digest(items: Sequence[Any]) -> str:
    h = hashlib.sha256()
    for it in items:
        h.update(json.dumps([it.id, it.question, it.answer, list(it.distractors)], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def _as_dict(scores: Any) -> dict[str, Any]:
    return dataclasses.asdict(scores) if dataclasses.is_dataclass(scores) else dict(scores)


def cached_fact_scores(em, items: Sequence[Any], cache_dir: Path | None, *, batch_size: int, max_new_tokens: int,
                       on_progress: Callable[[str, int, int], None] | None = None, name: str = "") -> dict[str, Any]:
    """score_facts of `items` under `em` (a lib.evaluation.evaluate.EvalModel) as a dict {n, accuracy,
    exact_match, mean_rank, chance, items}, from `cache_dir` when the same weights answered the
    same probes with the same settings before."""
    path = None
    if cache_dir is not None and em.digest:
        key = json.dumps({"v": FACT_CACHE_VERSION, "facts": facts_digest(items), "window": em.max_len, "sep": em.separator_id,
                          "tok": em.tokenizer.hash, "dtype": str(next(em.model.parameters()).dtype), "device": em.device.type,
                          "max_new_tokens": max_new_tokens}, sort_keys=True)
        path = Path(cache_dir) / em.digest[:32] / ("facts-" + hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
        if path.is_file():
            try:
                value = json.loads(path.read_text(encoding="utf-8"))["scores"]
                if int(value["n"]) == len(items):
                    if on_progress is not None:
                        on_progress(name, 1, 1)
                    return value
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                pass  # a damaged record is measured again
    value = _as_dict(score_facts(em, list(items), device=em.device, batch_size=batch_size, max_new_tokens=max_new_tokens))
    if on_progress is not None:
        on_progress(name, 1, 1)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"scores": value, "model": str(em.path)})
    return value


def fact_metrics(scores: dict[str, Any] | None) -> dict[str, float]:
    """The figures lineage records for one set; `{"fact_n": 0}` for an empty set (None)."""
    if not scores or not scores.get("n"):
        return {"fact_n": 0}
    return {"fact_accuracy": float(scores["accuracy"]), "fact_exact": float(scores["exact_match"]),
            "fact_mean_rank": float(scores["mean_rank"]), "fact_chance": float(scores["chance"]), "fact_n": int(scores["n"])}


def recall_by_document(items: Sequence[Any], scores: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """{doc_id: (probes asked, answered)} from the per-probe scores."""
    doc_of = {it.id: it.doc_id for it in items}
    out: dict[str, list[int]] = {}
    for row in scores.get("items") or []:
        doc = doc_of.get(row["id"])
        if doc is None:
            continue
        counts = out.setdefault(str(doc), [0, 0])
        counts[0] += 1
        counts[1] += bool(row["correct"])
    return {d: (n, c) for d, (n, c) in out.items()}


def ask_versions(lineage, versions: Sequence[str], items: Sequence[Any], *, window: int | None, separator: str = "auto",
                 batch_size: int = 8, cache_dir: Path | None = None, device: str | None = None) -> dict[str, dict[str, Any]]:
    """{version: scores} of `items` asked of each version (by id, from lineage), one model in
    memory at a time, through the eval cache: what the demo asks v0 and v1."""
    out = {}
    for version in versions:
        em = EvalModel.load(lineage.get_version(version)["path"], device=device, max_len=window, separator=separator)
        out[version] = cached_fact_scores(em, items, cache_dir, batch_size=batch_size, max_new_tokens=None)
        del em
    return out
