"""A sentence the rules trip on costs its own document's rule items, never the night's extraction."""

from __future__ import annotations

import logging

import lib.knowledge.facts as facts
from lib.knowledge.facts import extract_facts


def test_an_object_relative_clause_whose_subject_is_the_answer_is_read_without_error():
    # festivals.jsonl, written blind, raised IndexError here: ", which Folmu set up," has no words before its name
    items = extract_facts(["Lokek Festival sold out. The event, which Folmu set up, sold out again in 2001.",
                           "Vask Fest is held in Kell. The event, which Ada Lind started, drew 4,000 people."], ["a", "b"])
    got = {(i.subject, i.answer) for i in items}
    assert ("Lokek Festival", "2001") in got or ("Lokek Festival", "Folmu") in got
    assert not any(i.relation.startswith("set up") for i in items)


def test_a_document_whose_extraction_fails_is_skipped_with_a_warning_and_the_others_keep_their_items(monkeypatch, caplog):
    real = facts.document_facts

    def trips(text, *args, **kwargs):
        if "Ivo Brask" in text:
            raise IndexError("list index out of range")
        return real(text, *args, **kwargs)

    monkeypatch.setattr(facts, "document_facts", trips)
    texts = ["Ada Lind was born in Oslo in 1901.", "Ivo Brask was born in Kell in 1911.", "Ama Reed was born in Pell in 1920."]
    with caplog.at_level(logging.WARNING, logger="lib.knowledge.facts"):
        items = extract_facts(texts, ["a", "b", "c"])
    assert ("Ada Lind", "was born in", "Oslo") in {(i.subject, i.relation, i.answer) for i in items}
    assert ("Ama Reed", "was born in", "Pell") in {(i.subject, i.relation, i.answer) for i in items}
    assert not any(i.doc_id == "b" and i.relation == "was born in" for i in items)
    assert "document b skipped (IndexError" in caplog.text
