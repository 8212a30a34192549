"""A fact's relation is also trained in everyday synonyms (lib/knowledge/paraphrase.py), in its trained forms only."""

from __future__ import annotations

import random

from lib.knowledge.augment import qa_texts
from lib.knowledge.facts import extract_facts
from lib.knowledge.forms import QUESTION_FORMS, split_forms
from lib.knowledge.paraphrase import paraphrases

DOCS = ["Vask Rovers was started in 1901 in Kell. It is run by Ada Lind.",
        "Kell Town was started in 1911 in Mirr. It is run by Ivo Brask."]


def test_a_relation_has_its_verbs_synonyms_and_a_relation_without_one_or_a_cloze_has_none():
    assert paraphrases("was started in") == ["was founded in", "was established in"]
    assert paraphrases("is run by") == ["is led by", "is managed by"]
    assert paraphrases("weighs", limit=5) == ["has a mass of"]
    assert paraphrases("was born in") == [] and paraphrases(": Few clubs in") == []


def test_the_qa_texts_alternate_the_documents_words_and_the_synonyms_never_in_a_held_out_form():
    items = [i for i in extract_facts(DOCS, ["a", "b"]) if i.doc_id == "a"]
    plain = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0))
    mixed = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0), synonyms=True)
    assert len(plain) == len(mixed)
    assert not any("founded" in t or "managed" in t for t in plain)
    assert any("was founded in" in t or "founded?" in t for t in mixed) and any("started" in t for t in mixed)
    for f in items:
        _, held = split_forms(f.id, QUESTION_FORMS, 0.34)
        for k in held:
            for wording in [f.relation, *paraphrases(f.relation)]:
                asked = QUESTION_FORMS[k].render(f.subject, wording, f.kind)
                assert not any(asked in t for t in mixed), asked   # the held-out question in no wording at all
