"""Each QA text also asks each fact by a name and its answer's kind only, not in the relation's
words (lib/knowledge/forms.py KIND_QUESTIONS): of its subject in even texts, of another name of its
document in odd ones; trained, never a held-out form."""

from __future__ import annotations

import random

from lib.knowledge.augment import qa_texts
from lib.knowledge.facts import extract_facts
from lib.knowledge.forms import QUESTION_FORMS, kind_question, split_forms

DOCS = ["Vask Rovers was started in 1901 in Kell. It is run by Ada Lind.",
        "Kell Town was started in 1911 in Mirr. It is run by Ivo Brask."]


def test_a_kind_question_names_the_subject_and_the_kind_never_the_relation():
    assert kind_question("Vask Rovers", "was started in", "year", 0) == "Question: What year goes with Vask Rovers?\nAnswer:"
    assert kind_question("Vask Rovers", "was started in", "year", 1) == "Q: When, about Vask Rovers?\nA:"
    assert kind_question("Ada Lind", "was born in", "proper", 1) == "Q: Where, about Ada Lind?\nA:"   # a place
    assert kind_question("Vask Rovers", "is run by", "proper", 1) == "Q: Who, about Vask Rovers?\nA:"  # an agent
    assert kind_question("Vask Rovers", "has", "number", 2) == "Question: Which number do the records give for Vask Rovers?\nAnswer:"
    assert kind_question("Vask Rovers", "was started in", "year", 3) == kind_question("Vask Rovers", "x", "year", 0)  # cycled


def test_each_qa_text_asks_each_fact_by_its_kind_of_its_subject_or_of_another_name_and_never_a_held_out_form():
    items = [i for i in extract_facts(DOCS, ["a", "b"]) if i.doc_id == "a"]
    assert {(i.subject, i.relation, i.answer) for i in items} >= {("Vask Rovers", "was started in", "1901"),
                                                                  ("Vask Rovers", "is run by", "Ada Lind")}
    plain = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0))
    kinds = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0), kind_questions=True)
    assert len(plain) == len(kinds) >= 2
    assert not any("goes with" in t or ", about " in t or "the records give" in t for t in plain)
    names = {"Vask Rovers", "Ada Lind", "Kell"}
    for j, t in enumerate(kinds):
        for f in items:
            of = {n for n in names for k in range(3) if f"{kind_question(n, f.relation, f.kind, k)} {f.answer}" in t}
            # even texts: of the fact's subject; odd: of another name of the document, never of the answer itself
            assert of == {f.subject} if j % 2 == 0 else (len(of) == 1 and f.subject not in of and f.answer not in of), (j, f, t)
            for k in split_forms(f.id, QUESTION_FORMS, 0.34)[1]:
                assert QUESTION_FORMS[k].render(f.subject, f.relation, f.kind) not in t
    assert any("goes with Ada Lind?" in t or "about Ada Lind?" in t or "for Ada Lind?" in t for t in kinds[1::2])  # the club's year, of its chairman
