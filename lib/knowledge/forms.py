"""Question forms: the phrasings a fact is asked and trained in.

A form renders (subject, relation, kind) as a prompt that ends where the answer starts. Forms are
generic, built from the words the document itself used for the relation, so they work for any
attribute without a template per attribute: "Mara Quillon was born in" becomes "Question: Mara
Quillon was born in which city?" only through the relation's own words plus a kind-specific
question word ("what year", "what date", "how many", "whom", "what").

- Question forms (`probe=True`) ask; cloze forms ("A fact about X: X was born in") only train,
  since they read almost like the document's own sentence. Each fact holds out `heldout_share` of
  the question forms (at least one), chosen by its id's hash: its `question` is the first
  held-out form, and none of its held-out forms is ever rendered into training text.
  Every form is still trained on *other* facts, so the model meets each question format, never
  this fact in the held-out one (the split of Physics of Language Models 3.1: QA of some
  people trained, others' asked).
- Trade-off: generic forms read less naturally than a hand-written question per attribute, but
  they need no knowledge of the attribute; bench/bench_facts.py also asks a natural question in a
  phrasing no form produces, and reports both.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Sequence

WH = {"year": "what year", "date": "what date", "number": "what number", "name": "whom", "proper": "what"}
NOUN = {"year": "year", "date": "date", "number": "number", "name": "person", "proper": "name"}


def _cue(subject: str, relation: str) -> str:
    return subject + ("" if relation.startswith(("'s", "’s")) else " ") + relation


@dataclass(frozen=True)
class QuestionForm:
    name: str
    template: str       # {cue} {subject} {relation} {wh} {noun}
    probe: bool = True  # a question a fact may be asked in; False: a cloze form, trained only

    def render(self, subject: str, relation: str, kind: str) -> str:
        return self.template.format(cue=_cue(subject, relation), subject=subject, relation=relation,
                                    wh=WH.get(kind, "what"), noun=NOUN.get(kind, "name"))


QUESTION_FORMS: tuple[QuestionForm, ...] = (
    QuestionForm("echo", "Question: {cue} {wh}?\nAnswer:"),
    QuestionForm("which", "Q: According to what we know, {cue} which {noun}?\nA:"),
    QuestionForm("blank", "Fill in the blank: {cue} ____.\nAnswer:"),
    QuestionForm("about", "A fact about {subject}: {cue}", probe=False),
    QuestionForm("recall", "Do you remember {subject}? {cue}", probe=False),
    QuestionForm("note", "Note on {subject}.\n{cue}", probe=False),
)


def split_forms(fact_id: str, forms: Sequence[QuestionForm], heldout_share: float) -> tuple[list[int], list[int]]:
    """(trained, held-out) form indices for one fact: ceil(share × question forms) of the question
    forms held out (≥ 1, and ≥ 1 question form still trained), picked by the fact id's hash so
    the split is stable night after night; cloze forms are always trained."""
    questions = [i for i, f in enumerate(forms) if f.probe]
    if len(questions) < 2:
        raise ValueError(f"question forms: need at least 2 with probe=True (one trained, one held out), got {len(questions)}")
    k = min(len(questions) - 1, max(1, math.ceil(heldout_share * len(questions))))
    start = int(hashlib.sha256(fact_id.encode()).hexdigest()[:8], 16) % len(questions)
    held = [questions[(start + j) % len(questions)] for j in range(k)]
    return [i for i in range(len(forms)) if i not in held], held
