"""The night's knowledge stage: curated documents → fact set + augmented forms, before sampling.

`inject_knowledge(run_dir, knowledge, sampling, earlier)` is the one function the flow's task,
the CLI and the tests call:

1. read the run's curated documents (`<run>/curated/*.parquet`, id + text);
2. leave out documents curation marked as code, and cut the night's held-out documents exactly as tokenization will (lib.data.token_cache.heldout_cut
   over the ORIGINAL curated ids): they are neither augmented nor asked, so held-out bits per
   byte still measures text the night never saw in any form;
3. extract fact items from the rest (lib/knowledge/facts.py), distractors also drawn from
   `earlier` nights' items; write them to `<run>/knowledge/facts.jsonl` (their `question` is a
   held-out phrasing, never rendered into training text);
4. write the augmented forms (lib/knowledge/augment.py) to `<run>/knowledge/augmented/forms.parquet`
   (columns id, text, augments = the original document's id, form), which the night samples as
   its own source `knowledge` (kind curated: never held out, named in the manifest and in the
   lineage's tokens per source). The memory keeps the original documents only; a later night
   that needs the forms re-derives them from those (rules are deterministic and take ms).

`knowledge_sources(sources, run_dir, knowledge)` adds that source to the night's mix at
`knowledge.ratio` of the tokens, taken from the corpus replay's share. `sized_steps` lengthens a
night whose steps would show each augmented text fewer than `knowledge.min_exposures` times
(at most `max_steps_factor` × training.num_iterations), and says so.

Cost: rule-based extraction and augmentation take ~10 ms per document on the 2-core CPU
(24 biographies: well under a second), nothing next to a night's training.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lib.files import atomic_path, write_json
from lib.knowledge.augment import augment_documents
from lib.knowledge.facts import FactItem, extract_facts, read_facts, write_facts
from lib.config import SourceConfig
from lib.data.token_cache import _heldout_hash, heldout_cut
from lib.data.tokenizer import load_tokenizer
from lib.knowledge.writer import written_forms
from lib.workspace import RunDir

if TYPE_CHECKING:
    from lib.config import KnowledgeConfig, SamplingConfig, SourceConfig

log = logging.getLogger(__name__)

KNOWLEDGE_SOURCE = "knowledge"  # the augmented forms' source name in the manifest


def knowledge_dir(run_dir: str | Path) -> Path:
    return RunDir(Path(run_dir)).knowledge


def facts_file(run_dir: str | Path) -> Path:
    """`<run>/knowledge/facts.jsonl`: the night's fact set (held-out question phrasings only)."""
    return RunDir(Path(run_dir)).facts


def augmented_dir(run_dir: str | Path) -> Path:
    return knowledge_dir(run_dir) / "augmented"


def curated_documents(curated: str | Path, prose_only: bool = False) -> tuple[list[str], list[str]]:
    """(ids, texts) of the curated documents; `prose_only` leaves out those curation marked code."""
    ids, texts = [], []
    for part in sorted(Path(curated).glob("*.parquet")):
        table = pq.read_table(part)
        kinds = table.column("kind").to_pylist() if "kind" in table.column_names else [None] * table.num_rows
        for i, t, k in zip(table.column("id").to_pylist(), table.column("text").to_pylist(), kinds):
            if not (prose_only and k == "code"):
                ids.append(str(i))
                texts.append(str(t))
    return ids, texts


def trained_documents(ids: Sequence[str], texts: Sequence[str], sampling: "SamplingConfig") -> tuple[list[str], list[str], int]:
    """The documents the night trains on: the held-out cut tokenization applies, applied first."""
    cut = heldout_cut(list(ids), sampling.heldout_fraction, sampling.heldout_min_docs)
    keep = [k for k, i in enumerate(ids) if _heldout_hash(i) >= cut]
    return [ids[k] for k in keep], [texts[k] for k in keep], len(ids) - len(keep)


def earlier_facts(runs_root: str | Path, exclude: str | Path | None = None) -> list[FactItem]:
    """Fact items of earlier runs (`<runs>/*/knowledge/facts.jsonl`): distractors for tonight."""
    out = []
    for path in sorted(Path(runs_root).glob("*/knowledge/facts.jsonl")):
        if exclude is not None and path.parent.parent.resolve() == Path(exclude).resolve():
            continue
        try:
            out += read_facts(path)
        except (OSError, ValueError) as exc:
            log.warning("earlier fact set %s skipped: %s", path, exc)
    return out


def inject_knowledge(run_dir: str | Path, knowledge: "KnowledgeConfig", sampling: "SamplingConfig",
                     earlier: Sequence[FactItem] = (), champion_dir: str | Path | None = None) -> dict:
    """Fact set and augmented forms of the run's curated documents (see the module docstring)."""
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    all_ids, _ = curated_documents(run_dir / "curated")
    ids, texts = curated_documents(run_dir / "curated", prose_only=True)
    # the cut is over every curated id, as tokenization computes it; code documents are not augmented

    cut = heldout_cut(all_ids, sampling.heldout_fraction, sampling.heldout_min_docs)
    keep = [k for k, i in enumerate(ids) if _heldout_hash(i) >= cut]
    train_ids, train_texts = [ids[k] for k in keep], [texts[k] for k in keep]
    heldout = sum(1 for i in all_ids if _heldout_hash(i) < cut)
    items = extract_facts(train_texts, train_ids, earlier=earlier, max_per_doc=knowledge.max_facts_per_document,
                          n_distractors=knowledge.distractors, heldout_share=knowledge.heldout_share, seed=sampling.seed)
    write_facts(facts_file(run_dir), items)
    forms = augment_documents(train_ids, train_texts, items, forms_per_document=knowledge.forms_per_document,
                              kinds=tuple(knowledge.augmentations), heldout_share=knowledge.heldout_share, seed=sampling.seed)
    dropped = 0
    if knowledge.writer != "none" and knowledge.writer_paraphrases > 0:
        answers = {i: [f.answer for f in items if f.doc_id == i] for i in train_ids}
        written, dropped = written_forms(train_ids, train_texts, [answers[i] for i in train_ids], knowledge, champion_dir)
        forms += written
    out = augmented_dir(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.parquet"):
        old.unlink()
    if forms:
        table = pa.table({"id": pa.array([f.id for f in forms], pa.string()), "text": pa.array([f.text for f in forms], pa.string()),
                          "augments": pa.array([f.augments for f in forms], pa.string()),
                          "form": pa.array([f.form for f in forms], pa.string())})
        with atomic_path(out / "forms.parquet") as tmp:
            pq.write_table(table, tmp)
    counts: dict[str, int] = {}
    for f in forms:
        counts[f.form] = counts.get(f.form, 0) + 1
    stats = {"documents": len(all_ids), "prose_documents": len(ids), "heldout_documents": heldout, "facts": len(items),
             "kinds": _count(i.kind for i in items), "augmented": len(forms), "forms": counts, "writer_dropped": dropped,
             "augmented_bytes": sum(len(f.text.encode("utf-8")) for f in forms),
             "original_bytes": sum(len(t.encode("utf-8")) for t in train_texts),
             "seconds": round(time.perf_counter() - t0, 3)}
    write_json(knowledge_dir(run_dir) / "stats.json", stats, indent=2)
    return stats


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def knowledge_sources(sources: list["SourceConfig"], run_dir: str | Path, knowledge: "KnowledgeConfig") -> list["SourceConfig"]:
    """`sources` with the run's augmented forms added at `knowledge.ratio` of the tokens, taken from
    the corpus replay's weight; unchanged when injection is off or wrote nothing."""
    folder = augmented_dir(run_dir)
    if not knowledge.enabled or knowledge.ratio <= 0 or not any(folder.glob("*.parquet")):
        return sources
    corpus = [s for s in sources if s.kind == "corpus"]
    out = []
    for s in sources:
        if corpus and s is corpus[0]:
            if s.weight - knowledge.ratio <= 1e-9:
                raise ValueError(f"knowledge.ratio {knowledge.ratio} leaves the corpus replay no share (it had {s.weight:.3g}); "
                                 f"lower knowledge.ratio or sampling.new_data_ratio / memory_ratio")
            s = s.model_copy(update={"weight": s.weight - knowledge.ratio})
        out.append(s)
    out.append(SourceConfig(name=KNOWLEDGE_SOURCE, path=folder, weight=knowledge.ratio, kind="curated"))
    return out


def knowledge_tokens(run_dir: str | Path, tokenizer_dir: str | Path) -> int:
    """Tokens of the run's augmented forms under the night's tokenizer (one separator each)."""
    texts = [t for part in sorted(augmented_dir(run_dir).glob("*.parquet")) for t in pq.read_table(part, columns=["text"]).column("text").to_pylist()]
    if not texts:
        return 0
    return sum(len(ids) + 1 for ids in load_tokenizer(tokenizer_dir).encode_batch(texts))


def sized_steps(num_iterations: int, total_batch_size: int, knowledge: "KnowledgeConfig", form_tokens: int) -> tuple[int, str | None]:
    """The night's steps: `num_iterations`, lengthened so each augmented text is drawn
    `knowledge.min_exposures` times at `knowledge.ratio` of the tokens (at most
    `max_steps_factor` × num_iterations). Returns (steps, a note saying why when changed)."""
    if not knowledge.enabled or knowledge.ratio <= 0 or knowledge.min_exposures <= 0 or form_tokens <= 0:
        return num_iterations, None
    need = math.ceil(knowledge.min_exposures * form_tokens / (knowledge.ratio * total_batch_size))
    if need <= num_iterations:
        return num_iterations, None
    cap = int(knowledge.max_steps_factor * num_iterations)
    steps = min(need, cap)
    exposures = knowledge.ratio * steps * total_batch_size / form_tokens
    note = (f"knowledge: {form_tokens:,} tokens of augmented forms need {need} steps for {knowledge.min_exposures:g} exposures "
            f"each at knowledge.ratio {knowledge.ratio:g}; the night runs {steps} steps instead of {num_iterations} "
            f"(~{exposures:.1f} exposures{'; capped by knowledge.max_steps_factor' if steps < need else ''})")
    return steps, note


def read_stats(run_dir: str | Path) -> dict | None:
    path = knowledge_dir(run_dir) / "stats.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
