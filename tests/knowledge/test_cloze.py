"""What no rule reads is still asked (lib/knowledge/cloze.py): a span of a document that no item
answers becomes a cloze on the document's main entity, in the words its sentence puts before it;
never in code, never a span the rules answered, never the entity's own name."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from lib.knowledge.cloze import is_cloze, topic, unread_spans
from lib.knowledge.facts import extract_facts
from lib.knowledge.forms import QUESTION_FORMS

LIGHTS = ["The Vofeth Lighthouse stands on Cape Pofon Head. Completed in 1809, the tower rises 69 metres above the rocks.",
          "The Brialeth Lighthouse stands on Point Traihoux. Completed in 1795, the tower rises 31 metres above the rocks.",
          "The Gomail Lighthouse stands on Cape Grariam. Completed in 1824, the tower rises 67 metres above the rocks."]


def test_a_span_no_rule_reads_is_a_cloze_on_the_main_entity_and_asked_in_a_question_form():
    items = extract_facts(LIGHTS, ["a", "b", "c"])
    rules = {(i.subject, i.relation, i.answer) for i in items if not is_cloze(i.relation)}
    cloze = {(i.subject, i.relation, i.answer): i for i in items if is_cloze(i.relation)}
    assert ("Vofeth Lighthouse", "stands on", "Cape Pofon Head") in rules
    # the fronted clause with a description as its subject: no rule reads it, the clozes do
    assert not any(a in ("1809", "69") for _, _, a in rules)
    year = cloze[("Vofeth Lighthouse", ": Completed in", "1809")]
    assert year.kind == "year" and year.cue == "Vofeth Lighthouse: Completed in"
    assert ("Vofeth Lighthouse", ": the tower rises", "69") in cloze               # its own clause, not the one before
    assert set(year.distractors) == {"1795", "1824"}                       # the other documents' years
    asked = [f.render(year.subject, year.relation, year.kind) for f in QUESTION_FORMS]
    assert "Question: Vofeth Lighthouse: Completed in what year?\nAnswer:" in asked
    assert year.question in asked
    # the rules' answer is never asked again as a cloze, nor the entity's own name
    assert not any(i.answer in ("Cape Pofon Head", "Vofeth Lighthouse", "Vofeth") for i in cloze.values())


def test_a_span_without_words_before_it_or_in_a_line_of_code_is_not_asked():
    text = "Ada Lind was born in Oslo. 1809 was a cold year for her. She wrote `x = parse(1911)` once. Her brother moved to Kell in 1950."
    spans = unread_spans(text, set(), "Ada Lind", {"Oslo"})
    assert [(r, a) for _, r, a, _, _ in spans] == [(": Her brother moved to", "Kell"), (": Her brother moved to Kell in", "1950")]
    assert unread_spans(text, set(), None, set()) == unread_spans(text, set(), topic(text, set()), set())
    # a source file gives no item at all, cloze or rule
    code = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text(encoding="utf-8")[:4000]
    assert extract_facts([code, LIGHTS[0], LIGHTS[1]], ["code", "a", "b"]) and \
        not [i for i in extract_facts([code, LIGHTS[0], LIGHTS[1]], ["code", "a", "b"]) if i.doc_id == "code"]


def test_a_document_no_sentence_of_which_opens_with_a_name_is_about_the_name_it_says_most_fully():
    text = ("Visitors to Fiqueilfield often stop at the Neijourk Botanical Garden, which opened to the public in 1958. "
            "Under its curator, Grewim Zouzaiard, the collection has grown to some 12990 species.")
    assert topic(text, set()) == "Neijourk Botanical Garden"
    got = {(s, a) for s, _, a, _, _ in unread_spans(text, set(), None, set())}
    assert {("Neijourk Botanical Garden", "1958"), ("Neijourk Botanical Garden", "12990"),
            ("Neijourk Botanical Garden", "Grewim Zouzaiard")} <= got
    assert topic("no names here at all.", set()) is None and unread_spans("no names here in 1950.", set(), None, set()) == []


def test_a_determiner_or_a_participle_phrase_opening_a_sentence_is_no_name_and_no_main_entity():
    texts = ["Few clubs in Reiwijuth are as old as Staflorn Albion: it was started in 1953. Wearing maroon and black, "
             "the team hosts visitors at Kroskond Arena.",
             "Several teams play in Kell. Staflorn Rovers was founded in 1901 in Mirr.",
             "Reading is a town in Berkshire. Evening in Stefaix is a painting by Ada Lind."]
    items = extract_facts(texts, ["a", "b", "c"])
    subjects = {i.subject for i in items}
    assert not subjects & {"Few", "Wearing", "Several"}
    assert {(i.subject, i.answer) for i in items if i.doc_id == "a"} >= {("Staflorn Albion", "Reiwijuth"), ("Staflorn Albion", "1953"),
                                                                         ("Staflorn Albion", "Kroskond Arena")}
    assert ("Staflorn Rovers", "was founded in", "1901") in {(i.subject, i.relation, i.answer) for i in items}
    # a name that is also a word keeps its name where a verb follows it
    assert {"Reading", "Evening in Stefaix"} <= subjects


def test_a_name_that_opens_a_sentence_is_asked_by_what_it_did_under_the_entity_the_rules_say_most_about():
    texts = ["Sailors on the Griabrain Sea steer by the Tridro Lighthouse, a 43-metre tower built in 1812 at the tip of Cape "
             "Hiakoum Ness. Tutouth Zistoummond, who lived in the keeper's cottage until the light was automated, is remembered.",
             "Sailors on the Joutrix Sea steer by the Vutrir Lighthouse, a 64-metre tower built in 1845 at the tip of Point "
             "Staibeith. Drinail Sebruxsen, who lived in the keeper's cottage until the light was automated, is remembered.",
             "At 7,420 metres, Beihekeind Spire is one of the highest points of the Olutropand Alps. Braisemirn Gaisifok made "
             "the first ascent in 1945, following the eastern ridge.",
             "At 4,722 metres, Mount Lester is one of the highest points of the Faikrauvem Highlands. Doma Thihairn made the "
             "first ascent in 1891, following the eastern ridge."]
    items = {(i.subject, i.relation, i.answer) for i in extract_facts(texts, ["a", "a2", "b", "c"])}
    # the rules' item says what the climber did; the cloze asks who did it, of the mountain
    assert ("Braisemirn Gaisifok", "made the first ascent in", "1945") in items
    assert ("Beihekeind Spire", ": the one who made the first ascent in 1945 is", "Braisemirn Gaisifok") in items
    # the lighthouse, not the keeper named later, is what the first document is about
    assert ("Tridro Lighthouse", ": the one who lived in the keeper's cottage until the light was automated is",
            "Tutouth Zistoummond") in items
    assert not any(s == "Tutouth Zistoummond" for s, _, _ in items)
    # a name with no verb phrase after it is not asked so
    spans = unread_spans("Ada Lind, 1901. Ada Lind's brother sold Kell Mills to Ivo Brask.", set(), "Kell Mills", set())
    assert [(r, a) for _, r, a, _, _ in spans] == [(": Ada Lind,", "1901"), (": Ada Lind's brother sold Kell Mills to", "Ivo Brask")]


def test_clozes_can_be_turned_off_and_leave_the_rules_items_as_they_are():
    on = extract_facts(LIGHTS, ["a", "b", "c"])
    off = extract_facts(LIGHTS, ["a", "b", "c"], cloze=False)
    assert off == [i for i in on if not is_cloze(i.relation)] and len(off) < len(on)


def test_a_cloze_keeps_its_own_clause_a_name_opening_a_clause_is_asked_by_what_it_did_and_a_label_is_a_relation():
    texts = ["Few clubs in Reiwijuth are as old as Staflorn Albion: it was started in 1953. Wearing maroon and black, the team "
             "hosts visitors at Kroskond Arena, where Gabairn Pouchol has been in charge of training since 2019.",
             "Stizil Albion (Zikrestek). Colours: orange and red. Ground: Bogrom Meadow. Founded: 1886. Head coach: Sukrend Teski.",
             "Vask Rovers was founded in 1901 in Kell. Its ground is Mirr Park, and the coach is Ada Lind."]
    items = {(i.subject, i.relation, i.answer) for i in extract_facts(texts, ["a", "b", "c"])}
    # the clause of the span, not the words of the clause before it (which held another answer)
    assert ("Staflorn Albion", ": the team hosts visitors at", "Kroskond Arena") in items
    assert ("Staflorn Albion", ": the one who has been in charge of training since 2019 is", "Gabairn Pouchol") in items
    assert not any("Kroskond Arena" in r for _, r, _ in items)
    # a fact box's labels: a role asked as the entity's, a participle as its passive
    assert {("Stizil Albion", "'s ground is", "Bogrom Meadow"), ("Stizil Albion", "was founded in", "1886"),
            ("Stizil Albion", "'s head coach is", "Sukrend Teski")} <= items
    # never: a speaker's name as a label, a label after other words
    talk = ["Ada: Kell Mills ships in 2024, says Ivo Brask.", "Kell Mills is a firm in Vask. The plan: Mirr Park opens in 2025."]
    got = {(i.subject, i.relation, i.answer) for i in extract_facts(talk, ["t", "u"])}
    assert ("Kell Mills", "ships in", "2024") in got and not any(r.startswith("'s") for _, r, _ in got)


def test_in_a_fact_box_any_english_word_is_a_label_outside_one_only_an_everyday_word():
    box = ["Patent application: the Siabis pressure gauge. Applicant: Mukund Labs. Inventor: Chari Lavax. Filed: 2003. "
           "Laboratory: Trechin.",
           "Patent application: the Neimecheim door lock. Applicant: Teigirex Dynamics. Inventor: Tehos Bregrus. Filed: 2020. "
           "Laboratory: Traifezold."]
    got = {(i.subject, i.relation, i.answer) for i in extract_facts(box, ["a", "b"])}
    # "applicant" (Zipf 3.6) is no everyday word, but four labelled lines make the document a fact box
    assert ("Siabis pressure gauge", "'s applicant is", "Mukund Labs") in got
    assert ("Siabis pressure gauge", "'s laboratory is", "Trechin") in got
    # one labelled line is no box: a rare word before a colon stays unread as a label
    lone = ["The Siabis pressure gauge was filed in 2003. Applicant: Mukund Labs.",
            "The Neimecheim door lock was filed in 2020. Applicant: Teigirex Dynamics."]
    got = {(i.subject, i.relation, i.answer) for i in extract_facts(lone, ["a", "b"])}
    assert not any(r == "'s applicant is" for _, r, _ in got)
    # a made-up word is never a label, box or not: a speaker ("Zeilev: ...") is no field
    talk = ["Zeilev: Kell Mills ships in 2024. Ground: Mirr Park. Founded: 1901. Colours: red.",
            "Zeilev: Vask Mills ships in 2025. Ground: Ost Park. Founded: 1902. Colours: blue."]
    assert not any(i.relation == "'s zeilev is" for i in extract_facts(talk, ["t", "u"]))


def test_an_everyday_word_opening_a_sentence_is_no_name_unless_it_is_the_subject_or_a_title():
    from lib.knowledge.spans import _proper_spans, common_word

    assert common_word("Key") and common_word("meet") and not common_word("Miagror") and not common_word("Oslo")
    names = lambda s: [sp.text for sp in _proper_spans(s, set())]   # noqa: E731
    assert names("Key facts about the Grobreth seed drill: invented by Traizinoul Hudrax.") == ["Grobreth", "Traizinoul Hudrax"]
    assert names("Meet the Miagror seed drill.") == ["Miagror"]
    assert names("Part of the Vauthist Range, the peak saw its first ascent in 1821.") == ["Vauthist Range"]
    # kept: a name that is also a word, as the subject of its verb, or a title that goes on with a name
    assert names("Reading is a town in Berkshire.") == ["Reading", "Berkshire"]
    assert names("London hosted the games.") == ["London"] and names("London was the host.") == ["London"]
    assert names("Evening in Stefaix is a painting by Ada Lind.") == ["Evening in Stefaix", "Ada Lind"]
    assert names("Huge thanks to Toamar Graigek.") == ["Toamar Graigek"]


def test_a_fact_box_lines_lower_case_value_is_a_term_of_its_label_never_outside_a_box():
    box = ["Serodram — origin: the Grakrond Highlands. First recorded: 1686. Championed by: Siasaitrim Prifess. "
           "Star ingredient: buckwheat. Book at: Café Chihald.",
           "Truhumeix tart — origin: Thamond Province. First recorded: 1765. Championed by: Ada Poube. "
           "Star ingredient: oysters. Book at: Taverna Breipith."]
    got = {(i.subject, i.relation, i.answer): i for i in extract_facts(box, ["a", "b"])}
    item = got[("Serodram", "'s star ingredient is", "buckwheat")]
    assert item.kind == "term" and "oysters" in item.distractors
    # one labelled line is no box; a value of more than four words is a sentence, not a field
    lone = ["Serodram is a dish from Kell. Star ingredient: buckwheat.", "Vask pie is a dish from Pell. Star ingredient: oysters."]
    assert not any(i.answer == "buckwheat" for i in extract_facts(lone, ["a", "b"]))
    long = [t.replace("Star ingredient: buckwheat.", "Note: the cooks of the valley use buckwheat.") for t in box]
    assert not any("buckwheat" in i.answer for i in extract_facts(long, ["a", "b"]))


def test_a_lower_case_phrase_is_asked_where_other_documents_end_the_same_words_with_another():
    from lib.knowledge.cloze import salient_contexts

    texts = ["Sales of Vrauliv No. 3 doubled. The fragrance has found a young audience thanks to its dark birch. "
             "It is the most wearable of the list.",
             "Sales of Mopustyre No. 2 doubled. The fragrance has found a young audience thanks to its waxy tuberose. "
             "It is the most wearable of the list.",
             "If you love dusty rhubarb, start with Mostal Ruplemek.", "If you love bruised tea, start with Tranvrov Nivaikul."]
    assert {"thanks to its", "if you love"} <= salient_contexts(texts)
    assert "wearable of the" not in salient_contexts(texts)        # every document ends it with "list": no attribute
    items = {(i.subject, i.answer): i for i in extract_facts(texts, ["a", "b", "c", "d"])}
    birch = items[("Vrauliv No. 3", "dark birch")]
    assert birch.kind == "term" and "waxy tuberose" in birch.distractors
    assert ("Mostal Ruplemek", "dusty rhubarb") in items                  # the verb after "you" is context, not answer
    assert not any(a == "list" for _, a in items)
    # one document alone has no salient phrase, nor does a night with clozes off
    assert not any(i.answer == "dark birch" for i in extract_facts(texts[:1] + texts[2:3], ["a", "c"]))
    assert not any(i.answer == "dark birch" for i in extract_facts(texts, ["a", "b", "c", "d"], cloze=False))


def test_a_lower_case_phrase_after_a_function_word_is_the_words_after_it_and_a_noun_in_ly_is_no_adverb():
    from lib.knowledge.cloze import _lower_phrases
    from lib.knowledge.spans import ly_adverb

    assert _lower_phrases("Everything hinges on sorrel.") == [("everything hinges on", "sorrel", 21)]
    assert ("that matters is", "pork belly") in [(c, p) for c, p, _ in _lower_phrases("The ingredient that matters is pork belly, and more.")]
    assert [ly_adverb(w) for w in ("chiefly", "happily", "gently", "belly", "family", "assembly")] == [True] * 3 + [False] * 3
    texts = ["If you only eat one thing in Skimox Valley, make it Skevu pudding. Everything hinges on sorrel.",
             "If you only eat one thing in Druthun Valley, make it Raibru pie. Everything hinges on rye bread.",
             "Nobody knows who invented Kunoval. We know that it depends on smoked ham."]
    items = {(i.subject, i.answer): i for i in extract_facts(texts, ["a", "b", "c"])}
    assert items[("Skevu pudding", "sorrel")].kind == "term" and "rye bread" in items[("Skevu pudding", "sorrel")].distractors
    assert not any(a == "smoked ham" for _, a in items)         # one document ends "depends on" so: no attribute


def test_a_count_without_words_before_it_is_the_main_entitys_number_of_what_it_counts():
    lower = set()
    got = {(r, a) for _, r, a, _, _ in unread_spans("Vell Orchard came out in 1994. 18 tracks and not a bad one. All 9 songs are short. "
                                                  "The 16-track edition followed.", lower, "Vell Orchard", {"1994"})}
    assert ("'s number of tracks is", "18") in got and ("'s number of songs is", "9") in got and ("'s number of tracks is", "16") in got
    # a time or a sum is no count of things; a number with words before it stays a cloze of its sentence
    got = {(r, a) for _, r, a, _, _ in unread_spans("Vell Orchard opened in 1994. 12 years later it shut. Tickets cost 40 euros there.",
                                                  lower, "Vell Orchard", {"1994"})}
    assert not any(r.startswith("'s number of") for r, _ in got)


def test_what_another_subject_did_in_a_things_text_is_told_of_the_thing_too():
    winery = "Tenuta Vell is a winery in Brova. Ivo Brask planted the first vines in 1938, and the estate now covers 40 hectares."
    person = "Ada Lind was born in Oslo in 1950. Ivo Brask met her in Kell in 1975."
    items = {(i.subject, i.relation, i.answer) for i in extract_facts([winery, person], ["w", "p"])}
    assert ("Ivo Brask", "planted the first vines in", "1938") in items                  # the rule's own item stays
    assert ("Tenuta Vell", ": Ivo Brask planted the first vines in", "1938") in items      # and the winery's year is asked of it
    # a text about a person tells nothing of her through another subject: Ivo Brask's meeting stays his
    assert not any(s == "Ada Lind" and a in ("Kell", "1975") and r.startswith(": Ivo Brask") for s, r, a in items)
