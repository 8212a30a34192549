"""Fact extraction on the shapes of conversation and notes (lib/knowledge/talk.py and the rules it
feeds): speaker turns, headings, a name that acts on "it" inside a list of clauses. Each rule with
what it must find and what it must not."""

from __future__ import annotations

from lib.knowledge.cloze import is_cloze
from lib.knowledge.facts import extract_facts
from lib.knowledge.talk import heading, mail_header, speaker_turn, subject_line_name

# two documents with an answer of every kind, so that each fact under test has a distractor
_OTHERS = ["Ola Pask was seen in Pell on 2 May 1900 with 12 men in 1890.", "Ama Reed met Ola Pask and ran Kell Mills."]


def _triples(texts):
    """The rules' (subject, relation, answer); the clozes of what no rule read (cloze.py) aside."""
    return {(i.subject, i.relation, i.answer) for i in extract_facts(texts + _OTHERS, [f"d{i}" for i in range(len(texts) + 2)]) if not is_cloze(i.relation)}


def test_a_speaker_turn_is_a_sentence_of_its_own_and_i_is_the_speaker():
    assert speaker_turn("Riss Hastiand: I'll take Doutux.") == ("Riss Hastiand", "Riss Hastiand will take Doutux.")
    assert speaker_turn("Ada Lind: I am the owner of Kell Mills.")[1] == "Ada Lind is the owner of Kell Mills."
    assert speaker_turn("Bocem: Yes, and Cumo Dairy is paying 50,000 euros for it.")[1] == "Cumo Dairy is paying 50,000 euros for it."
    assert speaker_turn("Ivo: Then we start with the upload page.")[1] == "We start with the upload page."   # "we" is no speaker
    assert speaker_turn("Open item: the login page is late.") is None     # a label, not a name
    t = _triples(["Riss Hastiand: I'll take Doutux. Bocem: Yes, and Cumo Dairy is paying 50,000 euros for it."])
    assert ("Riss Hastiand", "will take", "Doutux") in t and ("Cumo Dairy", "is paying", "50,000") in t
    assert not any(r.startswith(":") or s == "Bocem" for s, r, _ in t)


def test_a_heading_names_no_entity_the_text_is_about():
    assert heading("Sync notes, Thursday.") and heading("Quick recap for anyone who missed Wednesday:")
    assert heading("From the call with Trouwar Health:") and heading("Open item:")
    assert not heading("The firm was founded by Ada Lind:") and not heading("Ada Lind said:") and not heading("Ada Lind sings.")
    assert not heading("Ada Lind was born in Oslo, Norway.")
    t = _triples(["Sync notes, Thursday. Troujial said the Traweirk project ships on October 15.",
                  "From the call with Trouwar Health: they want Vogrur live by 13 January."])
    assert ("Traweirk project", "ships on", "October 15") in t
    assert ("Trouwar Health", "want Vogrur live by", "13 January") in t       # "they": the name of the heading
    assert not any(s in ("Sync", "Quick") for s, _, _ in t)


def test_a_name_that_acts_on_it_in_a_list_of_clauses_and_the_passive_of_irregular_verbs():
    t = _triples(["Troujial said the Traweirk project ships on October 15. Vul Wimoth is leading it.",
                  "Pagress is being built for Treistind Insurance, Moul Gobross runs it, and it ships in 2027."])
    assert ("Traweirk project", "is being led by", "Vul Wimoth") in t and ("Vul Wimoth", "is leading", "Traweirk project") in t
    assert ("Pagress", "is run by", "Moul Gobross") in t and ("Moul Gobross", "runs", "Pagress") in t
    assert ("Pagress", "is being built for", "Treistind Insurance") in t
    assert not any(s == "Pagress" and a == "Moul Gobross" and r != "is run by" for s, r, a in t)   # not "is being built for Y, ..."
    # never: a name in a list that acts on nothing ("Vask, Moul Gobross and Ivo Brask")
    t = _triples(["Pagress is being built for Treistind Insurance, Moul Gobross and Ivo Brask."])
    assert not any(r.startswith(("is run", "runs")) for _, r, _ in t)


def test_who_runs_a_thing_is_asked_of_the_thing():
    t = _triples(["Hair Rezix has run Holenly since its founding in 2006.", "Ivo Brask leads the Velk Ensemble."])
    assert ("Holenly", "has been run by", "Hair Rezix") in t and ("Hair Rezix", "has run", "Holenly") in t
    assert ("Velk Ensemble", "is led by", "Ivo Brask") in t
    assert ("Kell Mills", "was run by", "Ama Reed") in t                       # "ran" (a past that is no participle)
    # never: a verb that runs nothing ("met", "visited"), nor one with more words ("has run Holenly since")
    t = _triples(["Hair Rezix met Ama Lind in 2006.", "Ivo Brask visited Holenly in 1999."])
    assert not any(r.endswith(" by") for s, r, _ in t if s in ("Ama Lind", "Holenly"))


def test_a_role_held_through_its_after_and_and_a_role_in_initials():
    t = _triples(["Stosisly employs about 515 workers. It was set up in 2008, and Tai Kaistour remains its CEO."])
    assert ("Stosisly", "'s CEO is", "Tai Kaistour") in t and ("Stosisly", "was set up in", "2008") in t
    # never: initials that are no role, nor a role of the person ("remains its NATO ally" has no initials of a role)
    t = _triples(["Stosisly employs about 515 workers. It was set up in 2008, and Tai Kaistour remains its USA agent."])
    assert not any(r.startswith("'s USA") for _, r, _ in t)


def test_a_subordinate_clause_has_a_subject_of_its_own():
    t = _triples(["Founded in 2012, Liquerkora makes cargo bikes. The firm, which is based in Stajeithton, has grown to 61 employees "
                  "since Zeikos Fund backed it last spring."])
    assert ("Liquerkora", "has grown to", "61") in t and ("Liquerkora", "was backed by", "Zeikos Fund") in t
    assert ("Zeikos Fund", "backed", "Liquerkora") in t
    assert not any(s == "Liquerkora" and a == "Zeikos Fund" and r != "was backed by" for s, r, a in t)
    # a name after "since" without a verb is still the answer of its own relation ("has lived in Vask since")
    t = _triples(["Ada Lind has worked for Kell Mills since 1990 and for Vask Radio since 2001."])
    assert ("Ada Lind", "has worked for", "Kell Mills") in t


def test_a_description_no_entity_was_typed_with_is_the_main_things_own():
    t = _triples(["Sync notes, Thursday. Troujial said the Traweirk project ships on October 15. Vul Wimoth is leading it, "
                  "and the client is Triatrul Dairy. We agreed the budget stays at 124,000 euros.",
                  "Pagress is being built for Treistind Insurance, Moul Gobross runs it, and the first release goes out on 11 March 2027."])
    assert ("Traweirk project", "'s client is", "Triatrul Dairy") in t and ("Traweirk project", "'s budget stays at", "124,000") in t
    assert ("Pagress", "'s first release goes out on", "11 March 2027") in t
    assert not any(s == "Vul Wimoth" and a in ("124,000", "Triatrul Dairy") for s, _, a in t)
    # never: a person's document (the budget is no person's own by rule), a clause of another verb (", and the crew reached")
    t = _triples(["Ada Lind was born in Oslo. She joined Kell Mills in 1990. The budget stays at 124,000 euros.",
                  "The Velk Star left Kell in 1840. The voyage took 45 days, and the crew reached Vask on 2 May 1840."])
    assert not any(r.startswith("'s budget") or s == "Ada Lind" and a == "124,000" for s, r, a in t)
    assert not any(r.startswith("'s crew") for _, r, _ in t)


def test_an_amount_is_its_currency_sign_and_its_scale_word_with_its_digits():
    k = {i.answer: (i.relation, i.kind) for i in extract_facts(
        ["Velk Labs raised $2.5 million from Ona Capital in 2021.", "Ada Lind sold Kell Mills for €124,000 in 1990.",
         "Vask has 2.5 million people."] + _OTHERS, list("abcde"))}
    assert k.get("$2.5 million") == ("raised", "number") and k.get("€124,000") == ("sold Kell Mills for", "number")
    assert k.get("2.5 million") == ("has", "number")
    assert "2.5" not in k and "124,000" not in k and not any(r.endswith(("$", "€")) for r, _ in k.values())
    # never: a year or a plain count changes ("in 2021", "with 12 men")
    assert k.get("2021", ("", ""))[1] == "year" and k.get("12", ("", ""))[1] == "number"


def test_a_quoted_line_and_a_semicolon_before_a_name_are_prose_not_code():
    from lib.knowledge.spans import _looks_like_code, looks_like_code_document

    post = ("> what's the story with zeseeslik?\nIt started as an internal tool at Titreetum Data and went public in 2008. "
            "Make sure you're on the latest tag; Neskin Dugi, who maintains it, fixed a leak there.")
    assert not looks_like_code_document(post)
    assert not _looks_like_code("> what's the story with zeseeslik?") and not _looks_like_code("the latest tag; Neskin Dugi, who")
    # a name after the semicolon with a letter beyond ASCII is a name too (a whole recipe was once dropped as code)
    dish = ("Pudrourk Thudith always insisted on the best mutton. The dish belongs to the Krabinax lowlands, where it was "
            "noted as early as 1864; Café Trialisk still cooks it the old way.")
    assert not looks_like_code_document(dish) and _looks_like_code("f(x); g(y)") and _looks_like_code("a; b")
    assert "1864" in {i.answer for i in extract_facts([dish] + _OTHERS, ["r", "o1", "o2"]) if i.doc_id == "r"}
    # code stays code, quoted or not
    assert _looks_like_code(">>> import os") and _looks_like_code("x += 1;") and _looks_like_code("> x = parse(y)")
    answers = {i.answer for i in extract_facts([post] + _OTHERS, ["p", "o1", "o2"]) if i.doc_id == "p"}
    assert {"Titreetum Data", "2008"} <= answers


def test_a_threads_reply_is_its_authors_turn():
    assert speaker_turn("Answer by Grynstod Vadrivraed: It's in Krurjud.") == ("Grynstod Vadrivraed", "It's in Krurjud.")
    assert speaker_turn("Reply from Voom Braebrael: we are at 60.")[0] == "Voom Braebrael"
    t = _triples(["Question: Does anyone have info on Rosrououm Winery? Saw it on a list.\n"
                  "Answer by Grynstod Vadrivraed: It's in Krurjud. Driakyth Jiagourgux created it in 1976."])
    assert ("Rosrououm Winery", "is in", "Krurjud") in t and not any(s.startswith("Answer") for s, _, _ in t)
    # a byline's names (the author, the forum) are never what the post is about
    post = ("Posted by Krusfud Hourtoud in Travel Buddies: Anyone else signed up for the Rerhu kickoff? "
            "We're meeting at Draakvrult Pavilion in Giakgoux.")
    subjects = {i.subject for i in extract_facts([post] + _OTHERS, ["p", "o1", "o2"]) if i.doc_id == "p"}
    assert subjects == {"Rerhu kickoff"}


def test_who_organises_or_hosts_a_thing_is_asked_of_the_thing_and_a_persons_name_has_other_names_to_confuse():
    from lib.knowledge.shapes import control_passive
    assert control_passive("is organising the") == "is being organised by" and control_passive("hosts") == "is hosted by"
    t = _triples(["Kriarbru Zorath is organising the Triniksok offsite. He has booked Vroukbryl Chalet for it.",
                  "Ada Brill runs Pell Lodge in Kell."])
    assert ("Triniksok", "is being organised by", "Kriarbru Zorath") in t


def test_a_mails_header_states_no_fact_and_its_subject_line_says_what_the_mail_is_about():
    assert mail_header(["From: Ada Lind", "To: Deal Team", "Subject: Re: Zentharo - signed", "All, ..."]) == {0: "", 1: "", 2: "Zentharo"}
    assert mail_header(["MEMORANDUM", "TO:", "All managers", "RE: Oberlaine Networks integration", "Effective ..."]) == \
        {0: "", 1: "", 2: "", 3: "Oberlaine Networks integration"}
    assert mail_header(["Kell Bridge: a bridge over the Orra.", "From: X"]) == {}   # a field later on is no header
    assert subject_line_name("Missing locomotive in Thistledown Railways", "", set()) == "Thistledown Railways"   # "Missing": a word
    assert subject_line_name("Zentharo", "Crallwick signed for Zentharo Biotics today.", set()) == "Zentharo Biotics"
    assert subject_line_name("Hidden gems from the 2010s?", "", set()) is None
    items = [(i.subject, i.relation, i.answer) for i in extract_facts(
        ["From: Ada Lind\nTo: Production team, Kell Mills\nSubject: Re: Vorlap Ferries - final figures\nHi all,\n"
         "The first crossing of Vorlap Ferries left Dunmore in 2019.",
         "MEMORANDUM\nTO:\nAll Kessvard Telecom managers\nFROM: Office of the General Counsel\nRE: Oberlaine Networks integration\n"
         "Employees at the Fallowmere campus should continue to report through Halvor Tzenkrit."] + _OTHERS, ["d0", "d1", "d2", "d3"])]
    assert ("Vorlap Ferries", "'s first crossing left", "Dunmore") in items
    assert ("Oberlaine Networks", ": Employees at the Fallowmere campus should continue to report through", "Halvor Tzenkrit") in items
    # before: "Ada Lind's to is Production", "Ada Lind's subject is Re", "General Counsel's re is Oberlaine Networks"
    assert not any(s in ("Ada Lind", "General Counsel") or "Production" in a or " re " in r or " to is" in r for s, r, a in items)


def test_a_transcripts_numbered_speaker_in_capitals_is_a_speaker_and_an_agenda_item_is_not():
    assert speaker_turn("HOST 1: So my pick this week is Orrin Lamps.") == ("HOST 1", "My pick this week is Orrin Lamps.")
    assert speaker_turn("Item 4: Trouvoult bachelor weekend.") is None
    assert not any(s == "So" for s, _, _ in _triples(["HOST 1: So my pick is Orrin Lamps. HOST 2: Oh, the lamp one!"]))


def test_it_before_any_subject_is_the_one_name_the_text_has_mentioned():
    t = _triples(["Re: Hidden gems from the 2010s?\nGonna throw Brindle Harbor Smugglers into the ring. Picked up my copy last spring. "
                  "It came out in 2014 from Lanternmoss Press. Teodor Maelgrin designed it."])
    assert {("Brindle Harbor Smugglers", "came out in", "2014"), ("Brindle Harbor Smugglers", "came out from", "Lanternmoss Press"),
            ("Brindle Harbor Smugglers", "was designed by", "Teodor Maelgrin")} <= t
    # two names mentioned: which one "it" means, no rule knows, and none is guessed
    t = _triples(['"I wanted the smell of rain," says Treiplu Flachen of Vosti, the scent Rauskan brought out in 1935. It retails at €80.'])
    assert not any(s == "Rauskan" and a == "€80" for s, _, a in t)
