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


def knowledge_sources(sources: list["SourceConfig"], run_dir: str | Path, knowledge: "KnowledgeConfig",
                      share: float | None = None) -> list["SourceConfig"]:
    """`sources` with the run's augmented forms added at `share` of the tokens (default
    `knowledge.ratio`; `night_plan` says how much a night needs), taken from the corpus replay's
    weight; unchanged when injection is off or wrote nothing."""
    share = knowledge.ratio if share is None else share
    folder = augmented_dir(run_dir)
    if not knowledge.enabled or share <= 0 or not any(folder.glob("*.parquet")):
        return sources
    corpus = [s for s in sources if s.kind == "corpus"]
    out = []
    for s in sources:
        if corpus and s is corpus[0]:
            if s.weight - share <= 1e-9:
                raise ValueError(f"knowledge.ratio {share:.3g} leaves the corpus replay no share (it had {s.weight:.3g}); "
                                 f"lower knowledge.ratio or sampling.new_data_ratio / memory_ratio")
            s = s.model_copy(update={"weight": s.weight - share})
        out.append(s)
    out.append(SourceConfig(name=KNOWLEDGE_SOURCE, path=folder, weight=share, kind="curated"))
    return out


def corpus_share(sources: Sequence["SourceConfig"]) -> float:
    """The corpus replay's weight among `sources` (what the knowledge share is taken from)."""
    return next((s.weight for s in sources if s.kind == "corpus"), 0.0)


def knowledge_tokens(run_dir: str | Path, tokenizer_dir: str | Path) -> int:
    """Tokens of the run's augmented forms under the night's tokenizer (one separator each)."""
    texts = [t for part in sorted(augmented_dir(run_dir).glob("*.parquet")) for t in pq.read_table(part, columns=["text"]).column("text").to_pylist()]
    if not texts:
        return 0
    return sum(len(ids) + 1 for ids in load_tokenizer(tokenizer_dir).encode_batch(texts))


def night_plan(num_iterations: int, total_batch_size: int, knowledge: "KnowledgeConfig", form_tokens: int,
               corpus: float = 1.0) -> tuple[int, float, str | None]:
    """(steps, share of the augmented forms, a note when the night changes) for a night whose
    forms are `form_tokens` long: each form should be drawn `knowledge.min_exposures` times.

    - The share is what that needs in `num_iterations` steps, at most `knowledge.ratio` and at
      most half the corpus replay's share `corpus` (the corpus keeps the rest): a night with a few
      facts spends a few tokens on them, not `ratio` of the night.
    - When the largest share is not enough, the night is lengthened to reach the exposures, up to
      `knowledge.max_steps_factor` × num_iterations, and the note says so.
    Measured on the tiny preset (docs/knowledge.md): ~28 exposures of each form at half the
    tokens make 92% of a night's facts answerable in a held-out question form."""
    top = min(knowledge.ratio, corpus / 2)
    if not knowledge.enabled or top <= 0 or form_tokens <= 0:
        return num_iterations, 0.0, None
    if knowledge.min_exposures <= 0:
        return num_iterations, top, None
    tokens = num_iterations * total_batch_size
    need = knowledge.min_exposures * form_tokens
    if need <= top * tokens:
        return num_iterations, need / tokens, None
    steps_needed = math.ceil(need / (top * total_batch_size))
    steps = min(steps_needed, int(knowledge.max_steps_factor * num_iterations))
    exposures = top * steps * total_batch_size / form_tokens
    capped = "" if top >= knowledge.ratio else f" (knowledge.ratio {knowledge.ratio:g} capped at half the corpus replay's share)"
    note = (f"knowledge: {form_tokens:,} tokens of augmented forms need {steps_needed} steps for {knowledge.min_exposures:g} "
            f"exposures each at a share of {top:.3g}{capped}; the night runs {steps} steps instead of {num_iterations} "
            f"(~{exposures:.1f} exposures{'; capped by knowledge.max_steps_factor' if steps < steps_needed else ''})")
    return steps, top, note


def read_stats(run_dir: str | Path) -> dict | None:
    path = knowledge_dir(run_dir) / "stats.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
