"""Lower-case names (lib/knowledge/lower_names.py): the package a forum post, bug report or chat is
about becomes the subject of its facts, and its version numbers are answers of kind "version".
What it must find, and the ordinary lower-case words it must never take for a name."""

from __future__ import annotations

from lib.knowledge.cloze import is_cloze
from lib.knowledge.facts import extract_facts
from lib.knowledge.forms import QUESTION_FORMS
from lib.knowledge.lower_names import lower_names
from lib.knowledge.spans import _value_spans

STORY = ("> what's the story with zeseeslik-js?\nIt started as an internal tool at Titreetum Data and went public in 2008. "
         "These days it's the go-to package for drawing vector charts. Make sure you're on 8.7.0, the latest tag; "
         "Neskin Dugi, who maintains it, fixed a nasty memory leak there.")
TRIED = ("Q: Has anyone here tried kubravil? A: Yes, it's a small library for deduplicating records. Poadrer Skudrek has "
         "looked after it since the first release in 2001, and the work is funded by Noataik Labs. The current version is 9.1.11.")
OUT = ("skoval 6.18.1 is out! For anyone new: it's a library for streaming audio, first published in 1999. Huge thanks to "
       "Toamar Graigek for carrying the project and to Skenin Systems for the funding.")
REPORT = ("Bug report from staplai_dev: after upgrading halathaskit to 8.8.11, the latest release, my code for sending push "
          "notifications throws on empty input. Quoastam Xastekeem, who has maintained the package since it appeared in 2013, "
          "replied that a fix is coming. Development is sponsored by Krikre Data.")
# prose whose lower-case words are ordinary ones: no name among them
GARDEN = ("Has anyone tried the rose garden in Pell? Ada Lind planted it in 1901, and the garden is open daily. "
          "We switched to composting last year; the compost is great.")
BAKERY = "Posted by ivo_b: is baking still fun? Ola Pask: very much so, I bake bread every day in Kell."
NIGHT = [STORY, TRIED, OUT, REPORT, GARDEN, BAKERY]


def _items(texts=NIGHT):
    return extract_facts(texts, [f"d{i}" for i in range(len(texts))])


def test_the_package_a_post_asks_or_tells_about_is_its_lower_case_name():
    assert lower_names(NIGHT) == ["zeseeslik-js", "kubravil", "skoval", "halathaskit", None, None]
    # no handle ("staplai_dev", "ivo_b"), no ordinary word after a cue ("tried the rose", "switched to composting", "is baking still")
    assert lower_names(["I maintain `fetchr`; it is fast.", "The fetch was slow.", "We tried everything."])[0] == "fetchr"
    assert lower_names(["Has anyone tried kubravil?"]) == [None]    # a night of one document cannot tell a name from a word


def test_a_version_number_is_an_answer_of_its_own_kind():
    spans = _value_spans("Make sure you're on 8.7.0, or v2.3, not 2.5 or 1999.")
    assert [(s.text, s.kind) for s in spans if s.kind == "version"] == [("8.7.0", "version"), ("v2.3", "version")]
    assert {(s.text, s.kind) for s in spans} >= {("2.5", "number"), ("1999", "year")}
    form = QUESTION_FORMS[0]
    assert "version" in form.render("kubravil", "'s current version is", "version").lower()


def test_the_package_is_the_subject_of_its_facts_not_an_opening_word_or_a_person():
    items = _items()
    by_doc = {}
    for it in items:
        by_doc.setdefault(it.doc_id, []).append(it)
    story = {(i.subject, i.answer) for i in by_doc["d0"]}
    assert {("zeseeslik-js", "Titreetum Data"), ("zeseeslik-js", "2008"), ("zeseeslik-js", "8.7.0"), ("zeseeslik-js", "Neskin Dugi")} <= story
    assert not any(i.subject == "Make" for i in by_doc["d0"])
    tried = {(i.subject, i.relation, i.answer, i.kind) for i in by_doc["d1"]}
    assert ("kubravil", "'s current version is", "9.1.11", "version") in tried
    assert ("kubravil", "'s work is funded by", "Noataik Labs", "proper") in tried
    assert any(s == "kubravil" and a == "Poadrer Skudrek" for s, _, a, _ in tried)     # its maintainer, asked by what he did
    out = {(i.subject, i.answer, i.kind) for i in by_doc["d2"]}
    assert ("skoval", "6.18.1", "version") in out and ("skoval", "Toamar Graigek", "proper") in out
    assert not any(i.subject == "Huge" for i in by_doc["d2"])
    report = {(i.subject, i.answer) for i in by_doc["d3"]}
    assert {("halathaskit", "8.8.11"), ("halathaskit", "Quoastam Xastekeem"), ("halathaskit", "Krikre Data")} <= report
    assert not any(i.subject in ("Development", "Bug") for i in by_doc["d3"])
    versions = [i for i in items if i.kind == "version"]
    assert versions and all(d[:1].isdigit() or d.startswith("v") for i in versions for d in i.distractors)   # versions only


def test_ordinary_lower_case_words_are_never_a_subject():
    items = _items()
    subjects = {i.subject for i in items}
    assert not subjects & {"rose", "garden", "composting", "compost", "baking", "bread", "fun", "staplai_dev", "ivo_b"}
    garden = [i for i in items if i.doc_id == "d4" and not is_cloze(i.relation)]
    assert ("Ada Lind", "planted it in", "1901") in {(i.subject, i.relation, i.answer) for i in garden}


def test_a_coined_lower_case_name_is_the_subject_a_mineral_or_a_compound_is_named_by():
    # no English word, said twice (once opening a sentence) or named by "named"/"X, a mineral": the document's subject
    minerals = ["Quellonite was first described by Ada Lind in 1931. It is pale green, and quellonite crystals are rare.",
                "A new mineral named vorsite was found at the Harrow Mine in 1950 by Ivo Brask.",
                "Ola Pask described drennite, a rare mineral from Kell, in 1977.",
                "The straw beehives, which are called skeps, date from 1901. Ada Crane wove them in Pell."]
    assert lower_names(minerals) == ["quellonite", "vorsite", "drennite", None]   # "are called skeps": a plural, a word
    items = {(i.subject, i.answer) for i in extract_facts(minerals, ["m0", "m1", "m2", "m3"])}
    assert {("quellonite", "Ada Lind"), ("quellonite", "1931"), ("vorsite", "1950"), ("drennite", "1977")} <= items
    # a count in words is no name, hyphen or not
    assert lower_names(["We are twenty-nine now; twenty-nine of us came to the Kell meeting.", "Ivo met Ola.", "Ada met Ivo."])[0] is None


def test_what_the_package_is_for_is_a_term_of_its_own():
    from lib.knowledge.lower_names import purposes
    assert purposes(TRIED, "kubravil", set()) == [("kubravil", "is a library for", "deduplicating records", "term", 1)]
    switched = "Posted by ivo_b: I switched our pipeline to pyplarax for transcoding video and it halved our build time."
    assert [p[1:3] for p in purposes(switched, "pyplarax", set())] == [("is used for", "transcoding video")]
    assert purposes("Nothing beats it for the money.", "pyplarax", set()) == []       # no purpose opens with "the"
    assert purposes(TRIED, None, set()) == []                                          # no package, no purpose
    items = {(i.subject, i.relation, i.answer, i.kind) for i in _items()}
    assert ("skoval", "is a library for", "streaming audio", "term") in items
    assert not any(i.relation.startswith("is a library for") for i in _items() if i.doc_id in ("d4", "d5"))
