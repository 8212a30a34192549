"""Fact extraction on the shapes of start-up news, species accounts and meeting notes, measured on
three sets no rule had seen (2026-11-26): each rule with what it must find and what it must not."""

from __future__ import annotations

from lib.knowledge.cloze import is_cloze
from lib.knowledge.facts import extract_facts
from lib.knowledge.spans import split_sentences

# two documents with an answer of every kind, so that each fact under test has a distractor
_OTHERS = ["Ola Pask was seen in Pell on 2 May 1900 with 12 men in 1890.", "Ama Reed met Ola Pask."]


def _triples(texts):
    """The rules' (subject, relation, answer); the clozes of what no rule read (cloze.py) aside."""
    return {(i.subject, i.relation, i.answer) for i in extract_facts(texts + _OTHERS, [f"d{i}" for i in range(len(texts) + 2)]) if not is_cloze(i.relation)}


def _kinds(texts):
    return {i.answer: i.kind for i in extract_facts(texts + _OTHERS, [f"d{i}" for i in range(len(texts) + 2)]) if not is_cloze(i.relation)}


def test_a_day_and_month_without_a_year_is_a_date_and_a_lone_month_no_name():
    k = _kinds(["The Velk bridge opens on October 15.", "Ivo Brask sailed from Kell on 13 December.",
                "The Orla Mill reopened on 2 May 1901.", "Teja Lund had 18 staff at the end of March."])
    assert k.get("October 15") == "date" and k.get("13 December") == "date"
    assert "15" not in k and "13" not in k and "October" not in k and "December" not in k   # not a number and a name
    assert k.get("2 May 1901") == "date"                                       # the year stays with its date
    assert "March" not in k                                                    # a month alone is a time, like a weekday


def test_a_name_with_a_lower_case_head_noun_is_one_subject():
    t = _triples(["The Nuheind creeper is a species of lizard endemic to the Haquom Basin. It was first described in 1870.",
                  "Known only from Mount Vouna, the Viaveir glider was described by Breilar Houleirkley in 1977.",
                  "The Quozer creeper, a skink first described by Feirox Jeinoundley, is confined to the Dradex Valley.",
                  "The Traweirk project ships on October 15."])
    assert ("Nuheind creeper", "is a species of lizard endemic to the", "Haquom Basin") in t
    assert ("Nuheind creeper", "was first described in", "1870") in t          # "It": the whole name
    assert ("Viaveir glider", "was described by", "Breilar Houleirkley") in t   # after a fronted phrase
    assert ("Quozer creeper", "is confined to the", "Dradex Valley") in t      # before an apposition
    assert ("Traweirk project", "ships on", "October 15") in t
    # never: a verb, an adverb or a pronoun after the name, nor a noun no verb follows
    t = _triples(["Ada Lind once lived in Kell in 1901.", "The Harl flows into the Orla Sea.", "Ivo Brask himself built the Vask Mill.",
                  "Teja Lund daughter of Ivo Brask was born in Pell."])
    assert ("Ada Lind", "once lived in", "Kell") in t and ("Harl", "flows into the", "Orla Sea") in t
    assert ("Ivo Brask", "himself built the", "Vask Mill") in t
    assert not any(s.startswith("Teja Lund ") for s, _, _ in t)


def test_a_colon_before_a_clause_ends_a_sentence_and_a_list_stays():
    t = _triples(["Quick recap for anyone who missed Wednesday: Pagress is being built for Treistind Insurance.",
                  "Their records: Vask Harbour was released in 1990."])
    assert ("Pagress", "is being built for", "Treistind Insurance") in t
    assert ("Vask Harbour", "was released in", "1990") in t
    assert not any(s in ("Quick", "Their") for s, _, _ in t)
    assert split_sentences("The trio released three albums: Songs, Harbour and Night.") == [(0, 57)]   # a list, not a clause


def test_what_a_speaker_said_is_a_sentence_of_its_own():
    t = _triples(["Troujial said the Traweirk project ships on October 15.",
                  "Vel Orrin told reporters on Friday that Kell Motors employs 310 people.",
                  "We agreed the Vosk budget stays at 124,000 euros."])
    assert ("Traweirk project", "ships on", "October 15") in t
    assert ("Kell Motors", "employs", "310") in t
    assert ("Vosk budget", "stays at", "124,000") in t
    assert not any(s in ("Troujial", "Vel Orrin") for s, _, _ in t)
    # never: a speech verb whose object is no clause keeps its own facts
    t = _triples(["Ivo Brask told Ama Reed the news in Pell."])
    assert ("Ivo Brask", "told", "Ama Reed") in t


def test_a_class_noun_and_an_owned_noun_with_its_verb_are_terms():
    t = _triples(["The Nuheind creeper is a species of lizard endemic to the Haquom Basin. Its diet consists largely of young snails.",
                  "The Feper spotwing is a species of tree frog. Its diet consists largely of fallen figs.",
                  "Vask Moss is a species of fern found in Kell. Orla Tide feeds mainly on wild berries.",
                  "Ama Vell is a kind of very old song. Teja Lund feeds mainly on dried peas."])
    assert ("Nuheind creeper", "is a species of", "lizard") in t                # the modifier "endemic to" ends it
    assert ("Feper spotwing", "is a species of", "tree frog") in t              # "-ing" noun before its verb
    assert ("Vask Moss", "is a species of", "fern") in t
    assert ("Nuheind creeper", "'s diet consists largely of", "young snails") in t
    assert ("Orla Tide", "feeds mainly on", "wild berries") in t
    # never: a class "of" words that are no noun, or a modifier as the class
    assert not any(a in ("very old song", "lizard endemic", "fern found") for _, _, a in t)


def test_a_passive_without_its_subject_states_a_fact_of_what_the_text_is_about():
    t = _triples(["Kell Bridge spans the Vask river. Designed by Ama Reed. Opened in 1921.",
                  "Our pick this month: Tougreth No. 14. Think wet saffron. Created for Touralt by Tromurk Flalvrodux back in 2018.",
                  "Meet the Miagror seed drill. Built in Dorn by Ivo Lask.",
                  "Ada Vell was a Vaskian painter. Buried in Pirrel."])
    assert {("Kell Bridge", "was designed by", "Ama Reed"), ("Kell Bridge", "was opened in", "1921"),
            ("Tougreth No. 14", "was created for", "Touralt"), ("Tougreth No. 14", "was created by", "Tromurk Flalvrodux"),
            ("Miagror seed drill", "was built by", "Ivo Lask"), ("Ada Vell", "was buried in", "Pirrel")} <= t
    # never: a fronted phrase before its subject ("Launched in 1943, X remains"), a sentence with no name before it
    t = _triples(["Launched in 1943, Vrostor No. 4 remains the bestseller at Nuskultule.", "Designed by Ama Reed."])
    assert ("Vrostor No. 4", "was launched in", "1943") in t and not any(r == "was designed by" for _, r, _ in t)


def test_a_lists_bullets_a_title_line_and_a_label_that_names_a_thing_with_its_noun():
    notes = ("Ops sync - notes\n- Draetaern hackathon: Steivem Goudo owns it\n- Location: Casa Skikrylkou\n"
             "- Griith Kroulkhil to sort catering")
    t = _triples([notes])
    assert {("Draetaern hackathon", "is owned by", "Steivem Goudo"), ("Draetaern hackathon", "'s location is", "Casa Skikrylkou")} <= t
    assert not any(s in ("Ops", "Steivem Goudo") and a == "Casa Skikrylkou" for s, _, a in t)   # a title is no entity
    assert [notes[s:e] for s, e in split_sentences(notes)][1:3] == ["Draetaern hackathon:", "Steivem Goudo owns it"]
    # a name with its noun in a title line is what the form is about
    t = _triples(["Budget request - Theinae kickoff\nRequested by: Tramox Pounial\nQuote: Kuldyk Manor (Port Gathune)\nTotal: EUR 18,518"])
    assert ("Theinae kickoff", "was requested by", "Tramox Pounial") in t


def test_a_timelines_year_dates_its_line():
    t = _triples(["1883 - Miatiak Steifor establishes Brustiam Estate in Krusstouth Valley.\n1923 - The estate expands to 339 hectares."])
    assert {("Miatiak Steifor", "establishes Brustiam Estate in", "1883"), ("Brustiam Estate", "is established in", "1883"),
            ("Brustiam Estate", "expands to", "339")} <= t


def test_a_news_items_dateline_is_where_its_story_happens():
    from lib.knowledge.talk import dateline
    assert dateline("Port Fidouhae - Some 130 former pupils are expected at Dulrei Grand.")[0] == "Port Fidouhae"
    assert dateline("Laugai, Tuesday.")[0] == "Laugai" and dateline("Bumox Sound — Bynai.")[0] is None   # a listing's name and place
    assert dateline("Dear Rounek,")[0] is None and dateline("Kell Bridge.")[0] is None
    t = _triples(["Laugai, Tuesday. Repairs begin next month on the Chaidrern Rail Bridge, the 1903 crossing of the Havrusk."])
    assert ("Chaidrern Rail Bridge", "is in", "Laugai") in t


def test_a_tables_rows_state_their_first_cells_facts_column_by_column():
    table = ("| Building | City | Beds | Rent ($/month) | Owner |\n|---|:---|---|---:|---|\n"
             "| Shapa Lodge | Fiban | 9 | 3,900 | Kydwebom Plouneind |\n| Vorn Hall | Kesk | 4 | | Ada Prell |")
    t = _triples([table])
    assert {("Shapa Lodge", "'s city is", "Fiban"), ("Shapa Lodge", "'s beds is", "9"), ("Shapa Lodge", "'s rent is", "3,900"),
            ("Shapa Lodge", "'s owner is", "Kydwebom Plouneind"), ("Vorn Hall", "'s city is", "Kesk")} <= t
    assert not {a for s, _, a in t if s == "Vorn Hall"} & {"3,900", "Fiban", "9"}   # an empty cell takes no other row's value
    # bars that make no table (a fact box's fields, a header with no rule under it) are read as they were
    from lib.knowledge.talk import table_rows
    box = "House: Vemmel | Nose: cedar | Launched: 1994\n| a | b |\n| c | d |"
    assert table_rows(box) == box


def test_what_a_band_confirmed_about_its_album_is_the_albums_fact():
    # the speaker may have words before its name and an auxiliary; the clause's subject may be a
    # noun set off with the name it types ("their second album, X,"): the text is about X
    t = _triples(["Leeds five-piece The Vashmoor Kites have confirmed that their second album, Vellum Orchard Nights, will arrive "
                  "on Pallow Street Records this autumn. It is due out in October 2016."])
    assert {("Vellum Orchard Nights", "will arrive on", "Pallow Street Records"), ("Vellum Orchard Nights", "is due out in", "October 2016")} <= t
    # after a named entity, "Its engineer, X," is still that entity's engineer, not a new subject
    t = _triples(["Kraskam Bridge opened in 1903. Its engineer, Leithaux Lindulurn, drew it in Pell."])
    assert ("Kraskam Bridge", "'s engineer is", "Leithaux Lindulurn") in t


def test_a_firms_release_about_a_thing_it_types_is_about_the_thing():
    # "X is proud to announce Y, the long-awaited new album from Z": Y set off with its noun is the
    # topic, as a thing named with its noun is ("the Ridias knee brace")
    items = extract_facts(["FOR IMMEDIATE RELEASE: Marrowbine Records is proud to announce Saltwick Reverie, the long-awaited new "
                           "album from Brackenhollow. Produced by Teodor Hallwyck, the record gathers 17 songs.",
                           "Kosk Records signed Ama Reed."] + _OTHERS, ["d0", "d1", "d2", "d3"])   # "records" ends two names: a firm's
    assert {i.subject for i in items if i.answer in ("17", "Teodor Hallwyck")} == {"Saltwick Reverie"}


def test_a_number_in_words_that_opens_a_sentence_is_no_name():
    items = extract_facts(["Sixty years on, Glass Bells of Uttery is finally getting the deluxe treatment. It was first released "
                           "by Copperwhistle Records in 1963."] + _OTHERS, ["d0", "d1", "d2"])
    assert {i.subject for i in items if i.doc_id == "d0"} == {"Glass Bells of Uttery"} and "Sixty" not in {i.answer for i in items}
