"""Each QA text also asks each fact by a name and its answer's kind only, not in the relation's
words (lib/knowledge/forms.py KIND_QUESTIONS): of its subject in even texts, of another name of its
document in odd ones; and as people ask it, the relation's verb kept ("When was X started?",
forms.people_question); trained, never a held-out form."""

from __future__ import annotations

import random

from lib.knowledge.augment import qa_texts
from lib.knowledge.facts import extract_facts
from lib.knowledge.forms import COMMON_QUESTIONS, QUESTION_FORMS, common_question, kind_question, people_question, question_class, split_forms

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


def test_people_ask_when_where_and_who_with_the_relations_own_verb():
    assert people_question("Vrelkan Observatory", "opened in", "year") == "When did Vrelkan Observatory open?"
    assert people_question("Vask Rovers", "was started in", "year") == "When was Vask Rovers started?"
    assert people_question("Ada Lind", "was born in", "proper") == "Where was Ada Lind born?"
    assert people_question("Ada Lind", "comes from", "proper") == "Where does Ada Lind come from?"
    assert people_question("Kantauchu Bridge", "was designed by", "name") == "Who designed Kantauchu Bridge?"  # the active voice
    assert people_question("Vask Rovers", "is run by", "proper") == "Who runs Vask Rovers?"
    assert people_question("The Vela", "was written by", "name") == "Who wrote The Vela?"                 # irregular
    assert people_question("Ada Lind", "was first described by", "name") == "Who first described Ada Lind?"
    assert people_question("Quorbek", "first opened its doors in", "year") == "When did Quorbek first open its doors?"
    assert people_question("Gallvori", "has watched the skies since", "year") == "Since when has Gallvori watched the skies?"
    assert people_question("Umbrathil", ": Commissioned in", "year") == "When was Umbrathil commissioned?"  # a cloze that opens with its verb
    assert people_question("Songram", "struggled with", "number") == "How much did Songram struggle with?"
    assert people_question("Gaitrourk Spirit", "can load", "number") == "How much can Gaitrourk Spirit load?"
    # a count by its noun, a thing's colour and what it is known for, as people ask them
    assert people_question("Vellum Nights", "'s number of tracks is", "number") == "How many tracks does Vellum Nights have?"
    assert people_question("Orlwick Dawn", "'s colour is", "term") == "What colour is Orlwick Dawn?"
    assert people_question("Wheel Hall", "is known for", "term") == "What is Wheel Hall known for?"
    # none where no question keeps the relation: another clause, an object to ask around, no
    # preposition for a year, a thing (the strand form asks it), a cloze with its own subject, a role
    assert people_question("Nouthould Wind", "rated at 61,840 tonnes and was launched in", "year") is None
    assert people_question("Suneld", "has a mass of", "number") is None
    assert people_question("Ada Lind", "won the", "proper") is None
    assert people_question("Ada Lind", "worked for", "proper") is None
    assert people_question("Pouskaipum", ": the vessel is rated at", "number") is None
    assert people_question("The Vela", "'s captain is", "name") is None
    assert people_question("Kell", "is", "number") is None
    assert people_question("Stekiv", "died aged", "number") is None


def test_each_qa_text_asks_each_fact_as_people_ask_it_where_its_relation_has_a_verb():
    items = [i for i in extract_facts(DOCS, ["a", "b"]) if i.doc_id == "a"]
    plain = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0))
    kinds = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0), kind_questions=True)
    assert not any("When was Vask Rovers started?" in t for t in plain)
    for j, t in enumerate(kinds):
        ask = ("Question: {}\nAnswer: {}", "Q: {}\nA: {}")[j % 2]
        assert ask.format("When was Vask Rovers started?", "1901") in t, (j, t)
        assert ask.format("Who runs Vask Rovers?", "Ada Lind") in t, (j, t)


def test_a_subjects_only_year_place_person_or_number_is_asked_in_everyday_questions_of_any_verb():
    assert [question_class(r, k) for r, k in [("was started in", "year"), ("was born in", "proper"), ("is run by", "proper"),
                                              ("has", "number"), ("won the", "proper"), ("'s coach is", "name")]] \
        == ["when", "where", "who", "how", None, "who"]
    assert common_question("Vask Rovers", "when", 0) == "When was Vask Rovers founded?"
    assert common_question("Vask Rovers", "when", len(COMMON_QUESTIONS["when"])) == common_question("Vask Rovers", "when", 0)  # cycled
    docs = ["Vask Rovers was started in 1901 in Kell. It is run by Ada Lind. It was rebuilt in 1950.",
            "Kell Town was started in 1911 in Mirr. It is run by Ivo Brask."]
    items = [i for i in extract_facts(docs, ["a", "b"]) if i.doc_id == "a"]
    kinds = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0), kind_questions=True)
    plain = qa_texts(items, QUESTION_FORMS, 0.34, random.Random(0))
    everyday = {q.format(s="Vask Rovers") for bank in COMMON_QUESTIONS.values() for q in bank}
    asked = [(q, a) for t in kinds for q in everyday for a in ("1901", "1950", "Kell", "Ada Lind")
             if f"Question: {q}\nAnswer: {a}" in t or f"Q: {q}\nA: {a}" in t]
    assert not any(q in t for t in plain for q in everyday)
    assert {a for _, a in asked} == {"Kell", "Ada Lind"}        # its only place, its only person
    assert len({q for q, _ in asked}) >= 4                       # in several questions, text by text
    # never: a year of a subject with two years (1901 started, 1950 rebuilt): which one "When was it founded?" means, no rule knows


def test_a_place_named_as_one_or_after_a_place_phrase_is_asked_where():
    from lib.knowledge.forms import place_name, place_relation, wh_word
    assert question_class("belongs to the", "proper", "Krihon lowlands") == "where"       # the answer's own noun of land
    assert question_class("'s appellation is", "proper", "Beikvi Valley") == "where"
    assert question_class("belongs to the", "proper", "Vask Rovers") is None               # no place's name
    assert place_relation("lies in the hills of", "proper") and wh_word("is on the outskirts of", "proper") == "which place"
    assert not place_relation("is in charge of", "proper") and not place_relation("is the capital of", "proper")
    assert place_name("Port Fasgotou") and not place_name("Ada Hill") and not place_name("Vask")
