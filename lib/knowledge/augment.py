"""Knowledge injection: each curated document rewritten into the varied forms that make its facts
retrievable, before the night trains (Physics of Language Models 3.1: one statement per fact is
stored in a form a question cannot reach; paraphrased, permuted and name-explicit variants plus
question-answer renderings make it extractable).

Forms of one document (by rule, no model needed):
- `explicit`: every sentence-initial pronoun replaced by the entity named in full ("She joined"
  → "Mara Quillon joined", "Her sister" → "Mara Quillon's sister"), so each sentence carries its
  subject on its own;
- `permuted`: the explicit text with its sentences in a shuffled order (a fact no longer rides on
  the sentence before it);
- `qa`: the document's facts as question-and-answer pairs, one text per trained question form
  (lib/knowledge/forms.py), pairs in a shuffled order. A fact's held-out forms are never
  rendered: they are its probe. With `kind_questions`, each text also asks every fact by a name and
  its answer's kind only ("What year goes with X?"), of its subject or of another name of the
  document (`_asked_of`), and by the question people ask most, its relation's verb kept ("When did
  X open?", "Who designed X?": forms.people_question).
- `writer` (optional): paraphrases written by a model (lib/knowledge/writer.py).

A night writes `qa` alone by default (`knowledge.augmentations`): with every fact in each of its
trained forms it answered 4-19 points more in a held-out question form than with a third of its
texts spent on `permuted` and `explicit` copies (docs/knowledge.md, "Measured: question forms only").

Only documents with at least one fact item are augmented (code and fact-less prose train as
captured). `forms_per_document` caps the texts one document yields: QA texts first (they carry every fact
in several question forms), then permutations, then the explicit text. Held-out documents (the
night's hash cut, lib/tokenization.heldout_cut) are never augmented and give no fact items.

Trade-off: rule-based forms cost milliseconds per document and cannot invent a wrong fact, but they
do not paraphrase the relation's own words; a writer model does, at the cost of generation time
(and of trusting what it writes).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from lib.knowledge.facts import FactItem, document_facts
from lib.knowledge.spans import _lowercase_words, split_sentences
from lib.knowledge.forms import (PEOPLE_FORMATS, QUESTION_FORMS, QuestionForm, common_question, kind_question, people_question,
                                 question_class, split_forms)
from lib.knowledge.paraphrase import paraphrases

_LEAD_PRONOUN = re.compile(r"^(He|She|They|It|His|Her|Their|Its)\b")
_POSSESSIVE = {"His", "Her", "Their", "Its"}
AUGMENTED_KINDS = ("qa", "permuted", "explicit", "writer")


@dataclass(frozen=True)
class AugmentedText:
    id: str        # content hash of the text
    augments: str  # the original document's id
    form: str      # qa | permuted | explicit | writer
    text: str


def text_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def explicit_names(text: str, entity: str | None) -> list[str]:
    """The sentences of `text`, each sentence-initial pronoun replaced by `entity` in full."""
    out = []
    for s, e in split_sentences(text):
        sentence = text[s:e].strip()
        if entity:
            m = _LEAD_PRONOUN.match(sentence)
            if m:
                name = entity + ("'s" if m.group(1) in _POSSESSIVE else "")
                sentence = name + sentence[m.end():]
        out.append(sentence)
    return out


def _asked_of(fact: FactItem, names: Sequence[str], j: int, offset: int) -> str:
    """Whom the j-th text's kind question of `fact` names: its subject in even texts; in odd texts
    another name of the same document (a subject or a name answer), rotated, so that a fact filed
    under "Founder Zytrolav Grorax" is also asked of "Songram Festival", the festival the document is
    about ("What year goes with Songram Festival?": it is that document's year)."""
    others = [n for n in names if n not in (fact.subject, fact.answer)]
    if j % 2 == 0 or not others:
        return fact.subject
    return others[(j // 2 + offset) % len(others)]


def qa_texts(facts: Sequence[FactItem], forms: Sequence[QuestionForm], heldout_share: float, rng: random.Random,
             synonyms: bool = False, kind_questions: bool = False) -> list[str]:
    """Question-and-answer texts: text j renders every fact once, in its j-th trained form (each
    fact's trained forms rotated from an offset its id picks), pairs in a shuffled order. So the
    first few texts, all a `forms_per_document` cap may keep, already train every form on some
    facts and every fact in several forms; a fact's held-out forms are never rendered. `synonyms`:
    every second text words the relation in everyday synonyms where it has some (paraphrase.py:
    "was started in" → "was founded in"), still only in the fact's trained forms."""
    trained = [split_forms(f.id, forms, heldout_share)[0] for f in facts]
    offsets = [int(hashlib.sha256(f.id.encode()).hexdigest()[:8], 16) for f in facts]
    wordings = [[w for other in (paraphrases(f.relation) if synonyms else []) for w in (f.relation, other)] or [f.relation]
                for f in facts]                    # "was started in", "was founded in", "was started in", "was established in"
    names = list(dict.fromkeys([f.subject for f in facts] + [f.answer for f in facts if f.kind in ("proper", "name")]))
    asked = [people_question(f.subject, f.relation, f.kind) for f in facts]  # as people ask it: "When did X open?"
    classes = [question_class(f.relation, f.kind, f.answer) for f in facts]
    sole = Counter((f.subject, wh) for f, wh in zip(facts, classes) if wh)  # a subject's facts per wh-word: one answers them all
    texts = []
    for j in range(max((len(t) for t in trained), default=0)):
        lines = [f"{forms[t[(o + j) % len(t)]].render(f.subject, w[j % len(w)], f.kind)} {f.answer}"
                 for f, t, o, w in zip(facts, trained, offsets, wordings)]
        if kind_questions:  # each fact also asked without its relation's words: of its subject, then of the document's other names
            lines += [f"{kind_question(_asked_of(f, names, j, o), f.relation, f.kind, j // 2 + o)} {f.answer}"
                      for f, o in zip(facts, offsets)]
            lines += [PEOPLE_FORMATS[j % 2].format(question=q) + f" {f.answer}" for f, q in zip(facts, asked) if q]
            lines += [PEOPLE_FORMATS[(j + 1) % 2].format(question=common_question(f.subject, wh, j + o)) + f" {f.answer}"
                      for f, o, wh in zip(facts, offsets, classes) if wh and sole[(f.subject, wh)] == 1]  # "When was X founded?": its only year
        rng.shuffle(lines)
        texts.append("\n\n".join(lines))
    return texts


def augment_document(doc_id: str, text: str, facts: Sequence[FactItem], *, entity: str | None, forms_per_document: int,
                     kinds: Sequence[str] = ("qa", "permuted", "explicit"), heldout_share: float = 0.34,
                     forms: Sequence[QuestionForm] = QUESTION_FORMS, seed: int = 0, synonyms: bool = False,
                     kind_questions: bool = False) -> list[AugmentedText]:
    """Up to `forms_per_document` augmented texts of one document (see the module docstring)."""
    rng = random.Random(f"{seed}:{doc_id}")
    out: list[str] = []
    kinds_out: list[str] = []
    sentences = explicit_names(text, entity)
    if "qa" in kinds and facts:
        for t in qa_texts(facts, forms, heldout_share, rng, synonyms, kind_questions):
            out.append(t)
            kinds_out.append("qa")
    if "explicit" in kinds and entity:
        explicit = " ".join(sentences)
        if explicit != " ".join(text.split()):
            out.append(explicit)
            kinds_out.append("explicit")
    if "permuted" in kinds and len(sentences) > 1:
        seen = {tuple(sentences)}
        for _ in range(4 * max(1, forms_per_document)):
            if sum(k == "permuted" for k in kinds_out) + len(out) >= 2 * forms_per_document:
                break
            order = sentences[:]
            rng.shuffle(order)
            if tuple(order) not in seen:
                seen.add(tuple(order))
                out.append(" ".join(order))
                kinds_out.append("permuted")
    # interleave kinds so a cap keeps some of each: qa, permuted, explicit, qa, permuted, ...
    by_kind: dict[str, list[str]] = {}
    for k, t in zip(kinds_out, out):
        by_kind.setdefault(k, []).append(t)
    picked: list[AugmentedText] = []
    while len(picked) < forms_per_document and any(by_kind.values()):
        for k in ("qa", "permuted", "explicit"):
            if by_kind.get(k) and len(picked) < forms_per_document:
                t = by_kind[k].pop(0)
                picked.append(AugmentedText(text_id(t), doc_id, k, t))
    return picked


def augment_documents(ids: Sequence[str], texts: Sequence[str], facts: Sequence[FactItem], *, forms_per_document: int,
                      kinds: Sequence[str] = ("qa", "permuted", "explicit"), heldout_share: float = 0.34, seed: int = 0,
                      forms: Sequence[QuestionForm] = QUESTION_FORMS, synonyms: bool = False,
                      kind_questions: bool = False) -> list[AugmentedText]:
    """Augmented texts of every document (the facts grouped by their `doc_id`), duplicates dropped."""
    by_doc: dict[str, list[FactItem]] = {}
    for f in facts:
        by_doc.setdefault(f.doc_id, []).append(f)
    lower = _lowercase_words(texts)
    seen: set[str] = set()
    out = []
    for doc_id, text in zip(ids, texts):
        if doc_id not in by_doc:
            continue  # no fact to make retrievable: the document trains as captured
        _, entity, _ = document_facts(text, lower)
        for a in augment_document(doc_id, text, by_doc.get(doc_id, []), entity=entity, forms_per_document=forms_per_document,
                                  kinds=kinds, heldout_share=heldout_share, forms=forms, seed=seed, synonyms=synonyms,
                                  kind_questions=kind_questions):
            if a.id not in seen:
                seen.add(a.id)
                out.append(a)
    return out
