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

`night_plan` says what share of the night's tokens the forms get (enough for each to be drawn
`knowledge.min_exposures` times, at most `knowledge.ratio`) and lengthens a night that needs more
(at most `max_steps_factor` × training.num_iterations), saying so; `knowledge_sources(sources,
run_dir, knowledge, share)` adds the forms to the night's mix at that share, taken from the corpus
replay's.

Cost: rule-based extraction and augmentation take ~10 ms per document on the 2-core CPU
(24 biographies: well under a second), nothing next to a night's training.
"""

from __future__ import annotations

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
from lib.data.memory import FACTS_FILE, MEMORY_NIGHT, REHEARSAL_SOURCE
from lib.data.token_cache import _heldout_hash, heldout_cut
from lib.data.tokenizer import load_tokenizer
from lib.knowledge.writer import written_forms
from lib.workspace import RunDir

if TYPE_CHECKING:
    from lib.config import KnowledgeConfig, SamplingConfig

log = logging.getLogger(__name__)

KNOWLEDGE_SOURCE = "knowledge"  # the augmented forms' source name in the manifest


def knowledge_dir(run_dir: str | Path) -> Path:
    return RunDir(Path(run_dir)).knowledge


def facts_file(run_dir: str | Path) -> Path:
    """`<run>/knowledge/facts.jsonl`: the night's fact set (held-out question phrasings only)."""
    return RunDir(Path(run_dir)).facts


def augmented_dir(run_dir: str | Path) -> Path:
    return knowledge_dir(run_dir) / "augmented"


def rehearsal_dir(run_dir: str | Path) -> Path:
    return knowledge_dir(run_dir) / "rehearsal"


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


def memory_facts(memory_root: str | Path | None) -> tuple[list[str], list[str], list[FactItem]]:
    """(ids, texts, fact items) of the memory's documents that gave facts: every accepted night
    still in the memory (`<memory>/<version>/train/`, its `facts.jsonl`)."""
    ids: list[str] = []
    texts: list[str] = []
    items: list[FactItem] = []
    if memory_root is None:
        return ids, texts, items
    for night in sorted(Path(memory_root).glob(f"*/{MEMORY_NIGHT}")):
        path = night.parent / FACTS_FILE
        if not path.is_file():
            continue
        try:
            facts = read_facts(path)
        except (OSError, ValueError) as exc:
            log.warning("memory fact set %s skipped: %s", path, exc)
            continue
        wanted = {f.doc_id for f in facts}
        for i, t in zip(*curated_documents(night.parent / "train")):
            if i in wanted:
                ids.append(i)
                texts.append(t)
        items += facts
    return ids, texts, items


def _write_forms(folder: Path, forms) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    if forms:
        table = pa.table({"id": pa.array([f.id for f in forms], pa.string()), "text": pa.array([f.text for f in forms], pa.string()),
                          "augments": pa.array([f.augments for f in forms], pa.string()),
                          "form": pa.array([f.form for f in forms], pa.string())})
        with atomic_path(folder / "forms.parquet") as tmp:
            pq.write_table(table, tmp)


def inject_knowledge(run_dir: str | Path, knowledge: "KnowledgeConfig", sampling: "SamplingConfig",
                     earlier: Sequence[FactItem] = (), champion_dir: str | Path | None = None,
                     memory: str | Path | None = None) -> dict:
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
                          n_distractors=knowledge.distractors, heldout_share=knowledge.heldout_share, seed=sampling.seed,
                          cloze=knowledge.cloze)
    write_facts(facts_file(run_dir), items)
    forms = augment_documents(train_ids, train_texts, items, forms_per_document=knowledge.forms_per_document,
                              kinds=tuple(knowledge.augmentations), heldout_share=knowledge.heldout_share, seed=sampling.seed,
                              synonyms=knowledge.synonyms, kind_questions=knowledge.kind_questions)
    dropped = 0
    if knowledge.writer != "none" and knowledge.writer_paraphrases > 0:
        answers = {i: [f.answer for f in items if f.doc_id == i] for i in train_ids}
        written, dropped = written_forms(train_ids, train_texts, [answers[i] for i in train_ids], knowledge, champion_dir)
        forms += written
    _write_forms(augmented_dir(run_dir), forms)
    # rehearsal: the memory's facts in their trained question forms (their held-out forms never)
    rehearsal = []
    if knowledge.rehearsal_exposures > 0 and "qa" in knowledge.augmentations:
        mem_ids, mem_texts, mem_items = memory_facts(memory)
        tonight = {f.id for f in forms}
        rehearsal = [a for a in augment_documents(mem_ids, mem_texts, mem_items, forms_per_document=knowledge.rehearsal_forms,
                                                  kinds=("qa",), heldout_share=knowledge.heldout_share, seed=sampling.seed,
                                                  synonyms=knowledge.synonyms, kind_questions=knowledge.kind_questions)
                     if a.id not in tonight]
    _write_forms(rehearsal_dir(run_dir), rehearsal)
    counts: dict[str, int] = {}
    for f in forms:
        counts[f.form] = counts.get(f.form, 0) + 1
    stats = {"documents": len(all_ids), "prose_documents": len(ids), "heldout_documents": heldout, "facts": len(items),
             "kinds": _count(i.kind for i in items), "augmented": len(forms), "forms": counts, "writer_dropped": dropped,
             "rehearsal": len(rehearsal), "rehearsal_documents": len({a.augments for a in rehearsal}),
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


def knowledge_sources(sources: list["SourceConfig"], run_dir: str | Path, knowledge: "KnowledgeConfig",
                      share: float | None = None, rehearsal: float = 0.0) -> list["SourceConfig"]:
    """`sources` with the run's augmented forms added at `share` of the tokens (default
    `knowledge.ratio`; `night_plan` says how much a night needs) and the memory's rehearsal forms
    at `rehearsal`, both taken from the corpus replay's weight; unchanged when injection is off or
    wrote nothing."""
    share = knowledge.ratio if share is None else share
    if not knowledge.enabled:
        return sources
    add = [(name, folder, w) for name, folder, w in ((KNOWLEDGE_SOURCE, augmented_dir(run_dir), share),
                                                      (REHEARSAL_SOURCE, rehearsal_dir(run_dir), rehearsal))
           if w > 0 and any(folder.glob("*.parquet"))]
    taken = sum(w for _, _, w in add)
    if not add:
        return sources
    corpus = [s for s in sources if s.kind == "corpus"]
    out = []
    for s in sources:
        if corpus and s is corpus[0]:
            if s.weight - taken <= 1e-9:
                raise ValueError(f"knowledge.ratio {taken:.3g} leaves the corpus replay no share (it had {s.weight:.3g}); "
                                 f"lower knowledge.ratio or sampling.new_data_ratio / memory_ratio")
            s = s.model_copy(update={"weight": s.weight - taken})
        out.append(s)
    out += [SourceConfig(name=name, path=folder, weight=w, kind="curated") for name, folder, w in add]
    return out


def corpus_share(sources: Sequence["SourceConfig"]) -> float:
    """The corpus replay's weight among `sources` (what the knowledge share is taken from)."""
    return next((s.weight for s in sources if s.kind == "corpus"), 0.0)


def knowledge_tokens(run_dir: str | Path, tokenizer_dir: str | Path) -> tuple[int, int]:
    """(tokens of tonight's augmented forms, tokens of the memory's rehearsal forms) under the
    night's tokenizer, one separator each; the tokenizer is loaded once."""
    folders = [augmented_dir(run_dir), rehearsal_dir(run_dir)]
    texts = [[t for part in sorted(f.glob("*.parquet")) for t in pq.read_table(part, columns=["text"]).column("text").to_pylist()]
             for f in folders]
    if not any(texts):
        return 0, 0
    tokenizer = load_tokenizer(tokenizer_dir)
    new, old = (sum(len(ids) + 1 for ids in tokenizer.encode_batch(t)) if t else 0 for t in texts)
    return new, old


def night_plan(num_iterations: int, total_batch_size: int, knowledge: "KnowledgeConfig", form_tokens: int,
               corpus: float = 1.0, rehearsal_tokens: int = 0) -> tuple[int, float, float, str | None]:
    """(steps, share of tonight's forms, share of the rehearsal forms, a note when the night
    changes). Tonight's forms (`form_tokens` long) should each be drawn `knowledge.min_exposures`
    times, the memory's rehearsal forms `knowledge.rehearsal_exposures` times.

    - The shares are what that needs in `num_iterations` steps, together at most `knowledge.ratio`
      and at most half the corpus replay's share `corpus` (the corpus keeps the rest): a night with
      a few facts spends a few tokens on them. Rehearsal gets at most half of that.
    - When the largest share is not enough, the night is lengthened, up to
      `knowledge.max_steps_factor` × num_iterations, and the note says so. Past the cap the
      rehearsal keeps its exposures (within its half) and tonight's forms get fewer: what a night
      learnt is not traded for tonight's margin.
    Measured on the tiny preset (docs/knowledge.md): 28 exposures of each form made 69-91% of a
    night's facts answerable in a held-out question form, 60 made 85-97%."""
    top = min(knowledge.ratio, corpus / 2)
    if not knowledge.enabled or top <= 0 or form_tokens + rehearsal_tokens <= 0:
        return num_iterations, 0.0, 0.0, None
    if knowledge.min_exposures <= 0:
        return num_iterations, top, 0.0, None
    batch = total_batch_size
    need_new = knowledge.min_exposures * form_tokens
    need_old = min(knowledge.rehearsal_exposures * rehearsal_tokens, need_new if form_tokens else float("inf"))
    need = need_new + need_old
    if need <= top * num_iterations * batch:
        tokens = num_iterations * batch
        return num_iterations, need_new / tokens, need_old / tokens, None
    steps_needed = math.ceil(need / (top * batch))
    steps = min(steps_needed, int(knowledge.max_steps_factor * num_iterations))
    # past the cap the memory keeps its exposures (up to half the share) and tonight's forms get
    # the rest: scaled down together, a large second night left the rehearsal 1.7 of its 10 and
    # night 1's facts fell 69% -> 41% (refused); memory first they kept 66%, tonight's 61% -> 50%
    # (docs/knowledge.md)
    share_old = min(need_old / (steps * batch), top / 2) if form_tokens else top
    share_new = top - share_old if form_tokens else 0.0
    exposures = share_new * steps * batch / form_tokens if form_tokens else 0.0
    capped = "" if top >= knowledge.ratio else f" (knowledge.ratio {knowledge.ratio:g} capped at half the corpus replay's share)"
    also = f" and {rehearsal_tokens:,} of the memory's rehearsal forms" if rehearsal_tokens else ""
    kept = f", the rehearsal ~{share_old * steps * batch / rehearsal_tokens:.1f}" if rehearsal_tokens else ""
    note = (f"knowledge: {form_tokens:,} tokens of augmented forms{also} need {steps_needed} steps for {knowledge.min_exposures:g} "
            f"exposures each at a share of {top:.3g}{capped}; the night runs {steps} steps instead of {num_iterations} "
            f"(~{exposures:.1f} exposures{kept}{'; capped by knowledge.max_steps_factor' if steps < steps_needed else ''})")
    return steps, share_new, share_old, note
