"""Fact extraction on sentence shapes of encyclopedia and news prose that no bench set uses: each
rule with what it must find and what it must not (lib/knowledge/shapes.py, spans.py)."""

from __future__ import annotations

from lib.knowledge.cloze import is_cloze
from lib.knowledge.facts import extract_facts
from lib.knowledge.forms import base_verb
from lib.knowledge.relations import head_word
from lib.knowledge.shapes import passive
from lib.knowledge.spans import _proper_spans
from lib.knowledge.topic import typed_name


# two documents with an answer of every kind, so that each fact under test has a distractor
_OTHERS = ["Ola Pask was seen in Pell on 2 May 1900 with 12 men in 1890.", "Ama Reed met Ola Pask."]


def _triples(texts):
    """The rules' (subject, relation, answer); the clozes of what no rule read (cloze.py) aside."""
    return {(i.subject, i.relation, i.answer) for i in extract_facts(texts + _OTHERS, [f"d{i}" for i in range(len(texts) + 2)]) if not is_cloze(i.relation)}


def _kinds(texts):
    return {i.answer: i.kind for i in extract_facts(texts, [f"d{i}" for i in range(len(texts))]) if not is_cloze(i.relation)}


def test_a_fronted_time_phrase_dates_the_main_verb_with_its_object():
    t = _triples(["On 11 June 1871, the Giabo Heron left Wevissport for Cotroxia.",
                  "In 1798 Teteir Feibeth took the Brewiss Queen from Komormouth to Ceirourka.",
                  "Since 1967, Daidanby has hosted the Tove Gathering."])
    assert ("Giabo Heron", "left Wevissport on", "11 June 1871") in t
    assert ("Teteir Feibeth", "took the Brewiss Queen in", "1798") in t        # no comma after the year
    assert ("Teteir Feibeth", "took the Brewiss Queen from", "Komormouth") in t
    assert ("Daidanby", "has hosted the Tove Gathering since", "1967") in t
    # never: a time phrase that is not a date or a year, or a name inside it as the subject
    t = _triples(["In the west of Kell, Ada Lind built a mill.", "Ivo Brask built a barn in 1901. In Tovel he met Ama Reed."])
    assert not any(s in ("Kell", "Tovel") for s, _, _ in t)


def test_a_fronted_length_is_measured_and_other_units_are_not():
    t = _triples(["At 4,886 metres, the Pustes Bridge is the longest bridge in Teistiko.",
                  "At 90 years, the Orla Mill is the oldest mill in Vask."])
    assert ("Pustes Bridge", "measures", "4,886") in t and ("Pustes Bridge", "is the longest bridge in", "Teistiko") in t
    assert not any(a == "90" for _, _, a in t)                                  # an age is not a length


def test_the_subject_after_a_fronted_phrase_may_be_a_pronoun_or_a_typed_description():
    t = _triples(["The Truvair Bridge is a suspension bridge over the River Rer. Designed by Teiwa Woufulez, it was opened on 27 January 1881.",
                  "Pouqueix Wanderers moved to Griajou Arena in 2005. Built at a cost of 329 million pounds, the ground holds 50,392 people."])
    assert ("Truvair Bridge", "was designed by", "Teiwa Woufulez") in t and ("Truvair Bridge", "was opened on", "27 January 1881") in t
    # "the ground" is neither typed nor a name's head word: the club is not its referent
    assert not any(s == "Pouqueix Wanderers" and a in ("329", "50,392") for s, _, a in t)


def test_an_unmarked_title_is_one_name_as_a_subject_or_an_apposed_object():
    t = _triples(["Evening in Stefaix is an oil painting by Droustiam Migrith, completed in 1694.",
                  "Painted in 1705, The Bridge at Zairass shows a family at supper.",
                  "The Kiakoul Gallery in Jaibrirora holds Evening in Kowous, a portrait painted by Raimiark Stustixine in 1842."])
    assert ("Evening in Stefaix", "is an oil painting by", "Droustiam Migrith") in t
    assert ("Evening in Stefaix", "is completed in", "1694") in t
    assert ("Bridge at Zairass", "was painted in", "1705") in t
    assert ("Kiakoul Gallery", "holds", "Evening in Kowous") in t
    assert ("Evening in Kowous", "is a portrait painted by", "Raimiark Stustixine") in t
    assert ("Evening in Kowous", "is a portrait painted in", "1842") in t
    # never: a place in a place, whether subject or object ("The Louvre in Paris"), or a novel and a city
    t = _triples(["The Kiakoul Gallery in Jaibrirora holds a portrait.", "Ivo Brask wrote the novel Ulysses in Paris in 1920.",
                  "Mara Sorn was born in Oslo in Norway, a country of lakes."])
    subjects, answers = {s for s, _, _ in t}, {a for _, _, a in t}
    assert "Kiakoul Gallery" in subjects and not answers & {"Ulysses in Paris", "Oslo in Norway"}


def test_a_relative_clause_is_a_fact_of_the_head_it_follows_and_it_is_named():
    t = _triples(["Evening in Stefaix hangs in the Jepei Gallery in Pelairkholm, which bought it in 1956 for 22,818 pounds."])
    assert ("Jepei Gallery", "bought Evening in Stefaix in", "1956") in t
    assert ("Jepei Gallery", "bought Evening in Stefaix for", "22,818") in t
    assert not any(", which" in r or s == "Pelairkholm" for s, r, _ in t)


def test_an_answer_before_its_subject_through_a_pronoun_object():
    t = _triples(["The Wogend River rises in the Rouzouth Fells. The Lorun Brook joins it halfway along its course."])
    assert ("Lorun Brook", "joins", "Wogend River") in t
    # never where "it" cannot be the entity before: a person's document
    t = _triples(["Ada Lind wrote a novel in 1950. Brisk Press published it in 1951. She died in Vask."])
    assert not any(a == "Ada Lind" for _, _, a in t)


def test_a_coordinated_clause_with_its_own_subject_gives_no_fact_of_the_first():
    t = _triples(["The Giabo Heron left Wevissport in 1871, and 478 passengers reached Cotroxia.",
                  "The Brisk Line starts at Tamber Halt, passes the Kellin Viaduct, and terminates at Ruelford."])
    assert not any(s == "Giabo Heron" and a in ("478", "Cotroxia") for s, _, a in t)
    assert ("Brisk Line", "terminates at", "Ruelford") in t                    # a listed verb is the same subject's


def test_a_participle_after_a_lone_verb_describes_the_subject():
    t = _triples(["The Bricei Queen sailed from Drebrainmouth in 1785, bound for Dimusia.",
                  "The Ask Star carries a crew of 40, led by Vera Lind."])
    assert ("Bricei Queen", "was bound for", "Dimusia") in t
    assert ("Ask Star", "carries a crew, led by", "Vera Lind") in t                 # after an object: the object's
    assert not any(r == "was led by" for _, r, _ in t)


def test_titles_codes_units_and_gerunds_are_read_as_english_reads_them():
    t = _triples(["The Giabo Heron left Wevissport under Captain Jeness Trumourkine.",
                  "The Pustes Bridge carries the M28 across the River Stoun.",
                  "Brougruthine has the formula C12H23O3.",
                  "Pustes Lane runs past King Street."])
    assert ("Giabo Heron", "left Wevissport under Captain", "Jeness Trumourkine") in t
    assert ("Pustes Bridge", "carries the", "M28") in t and ("Brougruthine", "has the formula", "C12H23O3") in t
    assert ("Pustes Lane", "runs past", "King Street") in t                    # a street is not a title and a name
    kinds = _kinds(["The Brewiss Queen, a barque of 1038 tons, sailed in 1798.", "The Ask Star, a barque of 840 tons, sailed in 1801."])
    assert kinds.get("1038") == "number" and kinds.get("1798") == "year"
    t = _triples(["The Bricei Queen sailed in 1785. Commanding her was Mutroul Dreifoez."])
    assert "Commanding" not in {s for s, _, _ in t}
    t = _triples(["The Brebou Viaduct crosses the Wai. It lies in the Zigriark district of Loukiaville."])
    assert ("Brebou Viaduct", "lies in the Zigriark district of", "Loukiaville") in t


def test_prose_words_are_not_code_and_footnote_marks_are_not_words():
    t = _triples(["The Bricei Queen sailed in 1785. She was wrecked off Cape Brevais on the return journey.",
                  "Pelk Mills began the import of grain in 1901.[3] It stands in Vask.[12]"])
    assert ("Bricei Queen", "was wrecked off", "Cape Brevais") in t
    assert ("Pelk Mills", "began the import of grain in", "1901") in t and ("Pelk Mills", "stands in", "Vask") in t
    assert base_verb("rises") == ("rise", "does") and base_verb("passes") == ("pass", "does")


def test_the_noun_of_a_name_opens_a_document_about_the_name_and_a_named_institution_stays_whole():
    t = _triples(["The island of Draibos lies at the eastern end of the Brajum Isles.",
                  "The city of Oskelby lies on the River Wend.", "The county of Harlmoor borders Wenmoor."])
    assert ("Draibos", "lies at the eastern end of the", "Brajum Isles") in t
    assert ("Oskelby", "lies on the", "River Wend") in t and ("Harlmoor", "borders", "Wenmoor") in t
    # never: "The Bank of England" or "The University of Oslo" cut to the name after "of"
    t = _triples(["The Bank of England opened a branch in Leeds in 1826.", "The University of Oslo hired Ada Lind in 1990."])
    assert ("Bank of England", "opened a branch in", "Leeds") in t and ("University of Oslo", "hired", "Ada Lind") in t
    assert not any(s in ("England", "Oslo") for s, _, _ in t)


def test_a_semicolon_between_clauses_is_prose_and_one_that_ends_a_statement_is_code():
    from lib.knowledge.spans import _looks_like_code
    assert not _looks_like_code("Woudus Jiaciaova has governed it since 1995; most of its 39086 inhabitants live in Jeiceissund.")
    assert all(_looks_like_code(s) for s in ["x += 1;", "f(x); g(y)", "print(x); print(y)", "return x; }"])
    assert _kinds(["With a population of 18056, Biwe is an island.", "Ola Pask has 12,000 sheep."]).get("18056") == "number"


def test_a_coordinated_clause_whose_subject_is_a_pronoun_is_the_entitys_and_its_time_phrase_dates_it():
    t = _triples(["Brirouth is an island in the Driavum Islands. Its chief town is Wozensund, and since 1993 it has been governed by Niameir Diborsen."])
    assert ("Brirouth", "has been governed by", "Niameir Diborsen") in t and ("Brirouth", "has been governed since", "1993") in t
    assert ("Brirouth", "'s chief town is", "Wozensund") in t
    assert not any(a in ("1993", "Niameir Diborsen") and "Wozensund" in r for _, r, a in t)
    # never: a coordinated clause with a subject of its own after the time phrase, or one with no answer
    t = _triples(["The Giabo Heron left Wevissport in 1871, and in 1872 the crew reached Cotroxia.",
                  "Ada Lind sailed from Vask in 1901, and it rained."])
    assert not any(s == "Giabo Heron" and a in ("1872", "Cotroxia") for s, _, a in t)
    assert not any("rain" in r for _, r, _ in t) and ("Ada Lind", "sailed from", "Vask") in t


def test_a_fronted_with_phrase_states_what_the_subject_has():
    t = _triples(["With a population of 25128, Pustiar is the largest island of the Cibeim Islands.",
                  "With an area of 45 square kilometres, Vask Island is the smallest of the Holm Isles."])
    assert ("Pustiar", "has a population of", "25128") in t and ("Pustiar", "is the largest island of the", "Cibeim Islands") in t
    assert ("Vask Island", "has an area of", "45") in t
    # never: a "with" phrase that is no measure of the subject
    t = _triples(["With 300 men, Ada Lind took Fort Kell in 1702.", "With a grant from Kell Trust, Ivo Brask built a mill."])
    assert not any(a == "300" or r.startswith("has a") for _, r, a in t)


def test_a_role_apposed_in_a_coordinated_clause_is_the_entitys_and_not_the_first_apposed_name():
    t = _triples(["With a population of 25128, Pustiar is the largest island of the Cibeim Islands. Its capital, Reibrawick, was "
                  "founded by fishermen, and its current governor, Trunum Quiakumard, took office in 2007."])
    assert ("Pustiar", "'s capital is", "Reibrawick") in t and ("Pustiar", "'s current governor is", "Trunum Quiakumard") in t
    assert ("Trunum Quiakumard", "took office in", "2007") in t
    assert not any(s == "Reibrawick" for s, _, _ in t)
    # never: a clause with a subject of its own after an apposed name gives that name's facts
    t = _triples(["The Kell Rovers play in Vask. Their coach, Vera Lind, joined in 1999, and the club won the Harl Cup in 2001."])
    assert ("Vera Lind", "joined in", "1999") in t and not any(s == "Vera Lind" and a in ("Harl Cup", "2001") for s, _, a in t)


def test_a_name_that_acts_on_the_entity_and_the_entitys_quantified_people():
    t = _triples(["The island of Draibos lies at the eastern end of the Brajum Isles. Woudus Jiaciaova has governed it since 1995; "
                  "most of its 39086 inhabitants live in Jeiceissund."])
    assert ("Draibos", "has been governed by", "Woudus Jiaciaova") in t and ("Woudus Jiaciaova", "has governed", "Draibos") in t
    assert ("Woudus Jiaciaova", "has governed Draibos since", "1995") in t
    assert ("Draibos", "'s inhabitants number", "39086") in t and ("Draibos", "'s inhabitants mostly live in", "Jeiceissund") in t
    assert not any(s == "Woudus Jiaciaova" and a in ("39086", "Jeiceissund") for s, _, a in t)
    # never: "many of its" (no relation of the entity says it), a passive of a prepositional verb; an
    # irregular verb's passive takes its participle ("has run" → "has been run")
    t = _triples(["Kell Mills stands in Vask. Ada Lind has run it since 1990; many of its 300 workers live in Harlby.",
                  "The Wend rises in the Oska Hills. The Lorun Brook flows into it at Harlby."])
    assert not any(a == "Harlby" and s in ("Kell Mills", "Ada Lind") for s, _, a in t)
    assert ("Kell Mills", "has been run by", "Ada Lind") in t and not any(r.startswith("is flowed") for _, r, _ in t)
    assert passive("governs") == "is governed" and passive("runs") == "is run" and passive("wrote") == "was written"
    assert passive("is leading") == "is being led" and passive("will take") == "will be taken" and passive("visits") is None


def test_a_verb_or_a_preposition_after_an_earlier_answer_is_no_noun_it_names():
    t = _triples(["The Soraim Tunnel in Fouworton was opened by Grocou Piahaez on 11 December 2000.",
                  "The Battle of Kell was fought on 8 May 1552 between Vaskia and Harlia."])
    assert ("Soraim Tunnel", "was opened by", "Grocou Piahaez") in t and ("Soraim Tunnel", "was opened on", "11 December 2000") in t
    assert ("Battle of Kell", "was fought between", "Vaskia") in t
    # an answer that names the noun after it stays in the relation
    t = _triples(["The Brebou Viaduct crosses the Wai. It lies in the Zigriark district of Loukiaville."])
    assert ("Brebou Viaduct", "lies in the Zigriark district of", "Loukiaville") in t


def test_a_measure_is_a_number_with_its_unit_and_the_units_scale_is_no_name():
    t = _triples(["Quiagine has a melting point of 1397 °C.", "Bomiaxase melts at 346 degrees Celsius.",
                  "At 2,141 metres, it is the highest peak in Keiwelstan."])
    kinds = _kinds(["Quiagine has a melting point of 1397 °C.", "Vaskite melts at 1201 °C and was found in 1990.",
                    "Ivo Brask was born in 1901."])
    assert kinds.get("1397") == "number" and kinds.get("1990") == "year"
    assert ("Bomiaxase", "melts at", "346") in t and not any(a == "Celsius" for _, _, a in t)
    # never: a name after a year and a preposition ("in 1901 by Ada Lind" is the agent)
    t = _triples(["Kell Mill was built in 1901 by Ada Lind."])
    assert ("Kell Mill", "was built by", "Ada Lind") in t


def test_a_fronted_measure_with_a_thousands_comma_before_a_pronoun():
    t = _triples(["Tropux Peak is a mountain in the Perouss Mountains. At 2,141 metres, it is the highest peak in Keiwelstan."])
    assert ("Tropux Peak", "measures", "2,141") in t and ("Tropux Peak", "is the highest peak in", "Keiwelstan") in t


def test_a_fronted_present_participle_is_what_the_subject_does():
    t = _triples(["Rising to 1,349 metres above sea level, Mount Brouja lies in the Baihiax Alps close to the village of Juviandby."])
    assert ("Mount Brouja", "rises to", "1,349") in t and ("Mount Brouja", "lies in the", "Baihiax Alps") in t
    assert ("Mount Brouja", "lies close to the village of", "Juviandby") in t
    assert not any(s == "Rising" for s, _, _ in t)
    # never: a preposition made of a participle ("According to", "Following")
    t = _triples(["According to Ada Lind, Kell Mill was built in 1901.", "Following the war, Ivo Brask moved to Vask in 1919."])
    assert not any(r.startswith(("accords", "follows")) for _, r, _ in t) and ("Ivo Brask", "moved to", "Vask") in t


def test_an_ordinal_and_a_noun_name_the_entitys_thing_and_a_names_head_may_come_before_of():
    t = _triples(["Mount Brouja lies in the Baihiax Alps. The first ascent was made by Zoustass Piaciarkson in 1889.",
                  "The first ascent of Hujiax Peak was made on 13 May 1847 by Stuwan Quenouard.",
                  "The Battle of Kell was fought in 1594. Vaskia defeated Harlia there. The battle ended the Brike War."])
    assert ("Mount Brouja", "'s first ascent was made by", "Zoustass Piaciarkson") in t
    assert ("Mount Brouja", "'s first ascent was made in", "1889") in t
    assert ("Hujiax Peak", "'s first ascent was made on", "13 May 1847") in t
    assert ("Battle of Kell", "ended the", "Brike War") in t and not any(s == "Harlia" for s, _, _ in t)
    # never: an ordinal with no noun after it, or the entity itself as the thing
    t = _triples(["Ada Lind wrote two novels. The first was published in 1950."])
    assert not any(r.startswith("'s first") for _, r, _ in t)
    assert not any(s == "Mount Brouja" and r.startswith("ascent") for s, r, _ in _triples(["Mount Brouja lies in the Baihiax Alps. The first ascent was made by Ada Lind."]))


def test_a_parenthesis_after_a_name_is_the_names_and_leaves_the_relation():
    t = _triples(["Heilith Hihuthley (born 1960) has led the Subon Gallery since 2021.",
                  "The first ascent of Hujiax Peak (1,930 m), the highest summit of the Nostuth Alps, was made on 13 May 1847.",
                  "Quiagine (Zn5Si8O4) is a violet mineral first described in 1929 by Tube Piatreline."])
    assert ("Heilith Hihuthley", "was born in", "1960") in t and ("Heilith Hihuthley", "has led the Subon Gallery since", "2021") in t
    assert ("Hujiax Peak", "measures", "1,930") in t and ("Hujiax Peak", "is the highest summit of the", "Nostuth Alps") in t
    assert ("Hujiax Peak", "'s first ascent was made on", "13 May 1847") in t
    assert ("Quiagine", "is a violet mineral first described in", "1929") in t
    # never: a relation for what the parenthesis does not say (a formula, a lifespan, an age)
    t = _triples(["Ada Lind (1901-1980) wrote Kell in 1950.", "Ivo Brask (45) moved to Vask in 1999."])
    assert not any("(" in r for _, r, _ in t) and not any(a in ("1901", "1980", "45") for _, _, a in t)
    assert ("Ada Lind", "wrote", "Kell") in t


def test_a_participle_or_a_preposition_set_off_after_the_subject():
    t = _triples(["Heipundia, under Griquoss Suliarkez, defeated Pucailand.",
                  "Draibia, released by Stuwair Labs in 2002, is written in Traipond."])
    assert ("Heipundia", "defeated", "Pucailand") in t and not any(a == "Griquoss Suliarkez" for _, _, a in t)
    assert ("Draibia", "was released by", "Stuwair Labs") in t and ("Draibia", "was released in", "2002") in t
    assert ("Draibia", "is written in", "Traipond") in t
    # never: a list of names read as a parenthesis
    t = _triples(["Ada Lind visited Vask, Kell, and Harl in 1901."])
    assert not any(s == "Ada Lind" and r.startswith("was") for s, r, _ in t)


def test_the_last_of_listed_answers_takes_the_firsts_relation_with_the_list():
    t = _triples(["The Treaty of Kell was signed on 4 August 1211 by Nobroth Weigraard and Stoteirk Femundez.",
                  "Quozeith Baihouxley defeated Staidiar Retaiez, Puviass Mozethine and Didreir Nabialey in 2001."])
    assert ("Treaty of Kell", "was signed by", "Nobroth Weigraard") in t
    assert ("Treaty of Kell", "was signed by Nobroth Weigraard and", "Stoteirk Femundez") in t
    assert ("Quozeith Baihouxley", "defeated Staidiar Retaiez, Puviass Mozethine and", "Didreir Nabialey") in t
    assert not any(r.endswith("signed and") for _, r, _ in t)
    # never: a name after "and" that opens a clause of its own
    t = _triples(["The Kell Mill was sold to Ada Lind in 1901 and Ivo Brask bought the Vask Mill."])
    assert not any(a == "Ivo Brask" and s == "Kell Mill" for s, _, a in t)


def test_a_common_noun_opening_a_sentence_and_release_numbers():
    t = _triples(["Version 3.6 of Niasissix was released in January 2005 by Pijain Software; it is written in Vobes.",
                  "Draibia 2.7, released by Stuwair Labs in 2002, is written in Traipond.",
                  "The Battle of Kell was fought in 1594. Forces led by Suke Ceidreez defeated the army of Sodum Hafumley."])
    assert ("Niasissix", "'s version 3.6 was released in", "January 2005") in t
    assert ("Niasissix", "'s version 3.6 was released by", "Pijain Software") in t and ("Niasissix", "is written in", "Vobes") in t
    assert ("Draibia 2.7", "was released by", "Stuwair Labs") in t and ("Draibia 2.7", "is written in", "Traipond") in t
    assert not {s for s, _, _ in t} & {"Version", "Forces"}
    assert _kinds(["Kell Mill opened in May 2019.", "Vask Mill opened in June 2001."]).get("May 2019") == "date"
    # never: a quantity after a name read as its release number
    t = _triples(["Vask 3.2 million people visited in 1999.", "In 1999 Kell had 3.5 million visitors."])
    assert not any("3.2" in s or "3.5" in a and a != "3.5 million" for s, _, a in t)   # a scale word is the number's


def test_a_possessive_subject_names_its_role_and_a_weekday_is_no_answer():
    t = _triples(["The Subon Gallery's director, Heilith Hihuthley, said on Monday that a new wing would open in 2029.",
                  "The Soraim Tunnel in Fouworton was opened by Grocou Piahaez."])
    assert ("Subon Gallery", "'s director is", "Heilith Hihuthley") in t
    assert ("Soraim Tunnel", "is in", "Fouworton") in t
    assert not any(a == "Monday" or s.endswith("'s") for s, _, a in t)
    # never: the owner in "met Ada Lind's brother" as what was met
    t = _triples(["Ivo Brask met Ada Lind's brother in Vask."])
    assert not any(a.startswith("Ada Lind") for _, _, a in t) and ("Ivo Brask", "met Ada Lind's brother in", "Vask") in t


def test_a_second_object_of_one_verb_and_a_named_scale():
    t = _triples(["Quiagine has a melting point of 1397 °C and a hardness of 7 on the Mohs scale."])
    assert ("Quiagine", "has a melting point of", "1397") in t and ("Quiagine", "has a hardness of", "7") in t
    assert not any(a == "Mohs" for _, _, a in t)
    # never: a second object after a preposition ("lies between the Vask and the Kell") cut to the verb
    t = _triples(["Harl Mill lies between the Vask Water and the Kell Water."])
    assert not any(r in ("lies the", "lies") for _, r, _ in t)


def test_it_never_names_a_person_subject_when_the_text_shows_a_thing():
    t = _triples(["Hitrel Pafaxard leads the Daistim Observatory. Its largest telescope was built by Bouhos Instruments.",
                  "Zeifom Stequoundson bought the Coudail Brewing Company in 1998. It brews some 480,581 hectolitres each year, "
                  "and its head brewer is Tenoum Daijunard.",
                  "Graice Airport is the main airport of Tejithby. Feibo Hiaborkley became its director in 2011, and it handles "
                  "roughly 738 flights a week.",
                  "The Wizil Gazette is a daily newspaper. Cimex Voubroun has served as its editor since 1995. The paper sells about 309,607 copies a day."])
    assert ("Daistim Observatory", "'s largest telescope was built by", "Bouhos Instruments") in t
    assert ("Coudail Brewing Company", "brews some", "480,581") in t and ("Coudail Brewing Company", "'s head brewer is", "Tenoum Daijunard") in t
    assert ("Graice Airport", "handles roughly", "738") in t and ("Feibo Hiaborkley", "became Graice Airport's director in", "2011") in t
    assert ("Wizil Gazette", "sells about", "309,607") in t
    assert not {s for s, _, a in t if a in ("Bouhos Instruments", "480,581", "738", "309,607")} & {"Hitrel Pafaxard", "Zeifom Stequoundson",
                                                                                                    "Feibo Hiaborkley", "Cimex Voubroun"}
    # never: "it" moved off a subject the text does not show is a person, nor "The singer" off the person it names
    t = _triples(["Kell Brask bought Vask Mills in 1901. It employs 300 people.",
                  "Fawouss RFC have won the Dokeis Premier League. The team's coach, Ada Lind, joined in 1999.",
                  "Vask Hall is a concert hall. Its singer is Ada Lind. The singer was born in 1950."])
    assert ("Kell Brask", "employs", "300") in t and ("Fawouss RFC", "'s coach is", "Ada Lind") in t
    assert ("Ada Lind", "was born in", "1950") in t


def test_a_fronted_state_holds_and_a_fronted_predicate_is_no_name():
    t = _triples(["Home to some 139 researchers, the Miagriark Institute was set up in 1935 by the Vihe Trust.",
                  "Based in Mevaithford, the Breper Observatory was founded in 1972.",
                  "Located near Reitaith Market in Ceipouby, the Zounaind Library holds some 325,348 volumes."])
    assert ("Miagriark Institute", "is home to some", "139") in t and ("Miagriark Institute", "was set up in", "1935") in t
    assert ("Breper Observatory", "is based in", "Mevaithford") in t and ("Breper Observatory", "was founded in", "1972") in t
    assert ("Zounaind Library", "is located near", "Reitaith Market") in t and ("Zounaind Library", "is located in", "Ceipouby") in t
    assert "Home" not in {s for s, _, _ in t}
    # never: an event's participle made a state, or a preposition made of a predicate ("According to", "Due to")
    t = _triples(["Built in 1901, the Kell Mill stands in Vask.", "Due to Ada Lind, the Vask Mill was sold in 1950."])
    assert ("Kell Mill", "was built in", "1901") in t and not any(r.startswith(("is due", "is according")) for _, r, _ in t)


def test_a_name_after_which_or_in_a_reduced_clause_is_the_subject_of_a_relative_clause_about_the_name_before():
    t = _triples(["Hitrel Pafaxard leads the Daistim Observatory, which the University of Dreheirkton has run since 1946.",
                  "The Jeimia Chronicle, which the Zastian Press Trust bought in 2016, is published in Gobairkton.",
                  "Ratem Wuvaison runs the Riapeil Playhouse, a playhouse the architect Pozi Hapouez completed in 1792.",
                  "Greidirk Gold is a lager that the Maigia Brewing Company has brewed since 1741."])
    assert ("University of Dreheirkton", "has run", "Daistim Observatory") in t
    assert ("University of Dreheirkton", "has run Daistim Observatory since", "1946") in t
    assert ("Zastian Press Trust", "bought Jeimia Chronicle in", "2016") in t and ("Jeimia Chronicle", "is published in", "Gobairkton") in t
    assert ("Pozi Hapouez", "completed Riapeil Playhouse in", "1792") in t and ("Riapeil Playhouse", "was completed by", "Pozi Hapouez") in t
    assert ("Maigia Brewing Company", "has brewed Greidirk Gold since", "1741") in t and ("Greidirk Gold", "has been brewed by", "Maigia Brewing Company") in t
    assert not any(r in ("the", "which") or "which" in r or "that the" in r or s == "Hitrel Pafaxard" and a == "1946" for s, r, a in t)
    # never: a subject relative ("which links"), or a name in apposition with no verb after it
    t = _triples(["The Kell Bridge, which links Vask and Harl, opened in 1901.", "Ivo Brask met Ada Lind, a painter the critic Ola Brisk admired."])
    assert ("Kell Bridge", "opened in", "1901") in t and not any(s in ("Vask", "Harl") for s, _, _ in t)


def test_a_role_apposed_with_the_and_a_description_that_a_typed_subject_cannot_be():
    t = _triples(["The Koukaind Ferries carries roughly 707,843 passengers a year. Its flagship, the MV Weicur, was launched in 1994 by Postairk Shipyard.",
                  "Greidirk Gold is a lager that the Maigia Brewing Company has brewed since 1741. The brewery is owned by Cuquil Jehixard."])
    assert ("Koukaind Ferries", "'s flagship is", "MV Weicur") in t and ("MV Weicur", "was launched in", "1994") in t
    assert ("MV Weicur", "was launched by", "Postairk Shipyard") in t and ("Maigia Brewing Company", "is owned by", "Cuquil Jehixard") in t
    assert not any(r.startswith("'s was") or r.endswith(", the") or s == "Greidirk Gold" and a == "Cuquil Jehixard" for s, r, a in t)
    # never: a description that is the typed subject's own noun moved off it
    t = _triples(["Greidirk Gold is a lager that the Maigia Brewing Company has brewed since 1741. The lager is sold in Vask."])
    assert ("Greidirk Gold", "is sold in", "Vask") in t


def test_a_coordinated_clause_whose_subject_describes_a_named_entity_is_that_entitys():
    t = _triples(["Draigeix Titruthez has managed Stiaquair International Airport since 2007. Its main terminal was designed by "
                  "Wougross Dibrerkine, and the airport serves about 21 million passengers a year.",
                  "The Quudrond Library was founded in 1924. Its chief librarian is Quougrum Cuborkson, and the library is visited by some 31,529 readers each month."])
    assert ("Stiaquair International Airport", "serves about", "21 million") in t
    assert ("Quudrond Library", "is visited by some", "31,529") in t and ("Quudrond Library", "'s chief librarian is", "Quougrum Cuborkson") in t
    assert not any(r.startswith("'s serves") or s == "Quougrum Cuborkson" for s, r, _ in t)
    # never: a description that names no entity of the text ("the crew")
    t = _triples(["The Giabo Heron left Wevissport in 1871, and the crew reached Cotroxia in 1872."])
    assert not any(a in ("Cotroxia", "1872") for _, _, a in t)


def test_a_role_held_through_its_is_the_entitys():
    t = _triples(["The Wizil Gazette is a daily newspaper. Cimex Voubroun has served as its editor since 1995.",
                  "Graice Airport lies near Tejithby. Feibo Hiaborkley became its director in 2011.",
                  "The Kell Works opened in 1950. Ada Lind was its chief engineer."])
    assert ("Wizil Gazette", "'s editor is", "Cimex Voubroun") in t and ("Cimex Voubroun", "has served as Wizil Gazette's editor since", "1995") in t
    assert ("Feibo Hiaborkley", "became the director of", "Graice Airport") in t   # who became it may no longer be
    assert ("Kell Works", "'s chief engineer was", "Ada Lind") in t
    assert not any(r == "'s director is" for _, r, _ in t)
    assert ("Vask", "'s first settler was", "Ada Lind") in _triples(["Vask is a town in Harl. Ada Lind was its first settler."])
    # never: "its" and a noun that names no person's role
    t = _triples(["Vask is a town in Harl. Kell Mill is its oldest building.", "Harl is a town in Kell. Ada Lind was its first."])
    assert not any(a in ("Kell Mill", "Ada Lind") and s in ("Vask", "Harl") for s, _, a in t)


def test_a_role_held_through_its_in_a_clause_of_its_own():
    t = _triples(["The Driatur Brewery is owned by Dreiniax Keiselez, and Stojia Ligrourez has served as its head brewer since 2015."])
    assert ("Driatur Brewery", "'s head brewer is", "Stojia Ligrourez") in t and ("Driatur Brewery", "is owned by", "Dreiniax Keiselez") in t
    assert not any(a in ("Stojia Ligrourez", "2015") and s == "Dreiniax Keiselez" for s, _, a in t)
    # never: a clause whose role is no person's
    t = _triples(["The Kell Mill was sold to Ada Lind, and Vask Hall is its oldest building."])
    assert not any(a == "Vask Hall" for _, _, a in t)


def test_a_plural_common_noun_opening_a_sentence_is_no_name():
    t = _triples(["Sailors on the Griabrain Sea steer by the Tridro Lighthouse.",
                  "Commuters cross the River Vask on the Kell Bridge.",
                  "Engineers at Bebrir Contractors restored the Vask Canal in 1990."])
    assert not any(s.startswith(("Sailors", "Commuters", "Engineers")) for s, _, _ in t)
    # never: a name that ends in -s before a verb of its own, or before a preposition and a year
    t = _triples(["Tiates lies on the Wana Sea.", "Athens in 1896 hosted the Kell Games."])
    assert ("Tiates", "lies on the", "Wana Sea") in t
    assert ("Athens", "hosted the", "Kell Games") in t


def test_an_apposition_with_a_hyphened_measure_is_its_names_whatever_the_subject():
    t = _triples(["Sailors on the Griabrain Sea steer by the Tridro Lighthouse, a 43-metre tower built in 1812 at the tip of Cape Hiakoum Ness.",
                  "Ada Lind designed the Kell Bridge, a 120-metre span built by Vask Ironworks."])
    assert ("Tridro Lighthouse", "measures", "43") in t
    assert ("Tridro Lighthouse", "is a tower built in", "1812") in t
    assert ("Tridro Lighthouse", "is a tower built at the tip of", "Cape Hiakoum Ness") in t
    assert ("Kell Bridge", "measures", "120") in t and ("Kell Bridge", "is a span built by", "Vask Ironworks") in t
    # never: the generic subject's items, a count as a length, or the measure inside a relation
    t = _triples(["Parents in Wodby praise the Kell Academy, a 1,200-pupil school founded in 1901."])
    assert not any(a == "1,200" for _, _, a in t) and not any(s == "Parents" for s, _, _ in t)
    assert ("Kell Academy", "is a school founded in", "1901") in t


def test_a_description_of_a_thing_never_means_a_person_the_text_gives_no_such_role():
    t = _triples(["Roubuth Moudeixwick kept the light at Staitiass for many years. The lighthouse, first lit in 1951, "
                  "guards Cape Stajan Head, and its tower is 43 metres tall.",
                  "Ivo Brask took command of the RV Kell Star in 2011. The vessel, built at Vask Yards in 1990, is based in Pell."])
    assert ("Roubuth Moudeixwick", "kept the light at", "Staitiass") in t
    assert not any(s in ("Roubuth Moudeixwick", "Ivo Brask") and a in ("1951", "Cape Stajan Head", "43", "Vask Yards", "1990", "Pell")
                   for s, _, a in t)
    # still: a description of a thing named with the same word, a role the text gave, a name other names are built on
    t = _triples(["Ada Lind drew the plans for the Kell Bridge. The bridge was opened in 1901.",
                  "Its editor is Ama Reed. The editor was born in 1950.",
                  "Gopin Manufacturing was founded by Ola Voss. The company is headquartered in Vaskby.",
                  "Hahask Manufacturing makes rope."])
    assert ("Kell Bridge", "was opened in", "1901") in t
    assert ("Gopin Manufacturing", "is headquartered in", "Vaskby") in t


def test_a_description_after_a_hyphened_measure_is_the_named_thing_and_measures_it():
    t = _triples(["Barges on the Kell Canal carry grain. The 12-kilometre canal was dug in 1790.",
                  "Farmers below the Vask Dam depend on its water. The 95-metre dam holds back the River Sask."])
    assert ("Kell Canal", "measures", "12") in t and ("Kell Canal", "was dug in", "1790") in t
    assert ("Vask Dam", "measures", "95") in t and ("Vask Dam", "holds back the", "River Sask") in t
    # a description no name is built on, where no sentence before has a subject: the thing named before it
    t = _triples(["Barges on the Kell Navigation carry grain. The 12-kilometre canal was dug in 1790."])
    assert ("Kell Navigation", "was dug in", "1790") in t
    # never: a person named before it, where no sentence has a subject
    t = _triples(["Visitors meet Ada Lind at the gate. The 12-kilometre canal was dug in 1790."])
    assert not any(a in ("12", "1790") for _, _, a in t)


def test_an_answer_naming_a_nights_entity_is_asked_with_whom_only_where_the_entity_may_be_a_person():
    texts = ["The Varo Ensemble was founded in 1901 in Kell. Ada Lind became its conductor in 1990.",
             "The Osk Quartet was founded in 1950 in Mirr. Bo Tam became its conductor in 2001.",
             "Mara Quillon was born in Oslo in 1950. She married Tor Vik in 1975.",
             "Tor Vik was born in Bergen in 1948. He later married Mara Quillon."]
    items = {(it.subject, it.relation, it.answer): it.kind for it in extract_facts(texts, ["a", "b", "c", "d"])}
    # "the Varo Ensemble": a thing; the night's people stay names, asked with "whom"
    assert items[("Ada Lind", "became the conductor of", "Varo Ensemble")] == "proper"
    assert items[("Mara Quillon", "married", "Tor Vik")] == items[("Tor Vik", "later married", "Mara Quillon")] == "name"


def test_a_fronted_preposition_is_no_name_and_a_place_after_the_subject_leaves_the_next_relation():
    texts = ["Visitors to Kellham often stop at the Osk Garden, which opened in 1901. Under its curator, Ada Lind, the "
             "collection has grown to some 4000 species.",
             "The Varo Garden in Mirrburgh was laid out in 1850. It grows about 2391 species of plants.",
             "Tor Vik was born in Oslo in 1950. He worked for Brill Tanneries in Harrow until 1990."]
    items = {(it.subject, it.relation, it.answer) for it in extract_facts(texts, ["a", "b", "c"])}
    assert not any(s == "Under" for s, _, _ in items)                      # "Under its curator, ...": no subject "Under"
    assert ("Varo Garden", "is in", "Mirrburgh") in items
    assert ("Varo Garden", "was laid out in", "1850") in items           # not "in Mirrburgh was laid out in"
    assert ("Tor Vik", "was born in Oslo in", "1950") in items           # "was born in" is Oslo's own relation


def test_a_sentence_of_one_word_gives_nothing_and_breaks_nothing():
    # a package's docstring line "Sphinx." once stopped a night's knowledge stage (IndexError)
    texts = ["Sphinx.", "Numpy", "The Kell Bridge crosses the Osk River. Finished.", "The Varo Bridge crosses the Imm River."]
    items = {(it.subject, it.relation, it.answer) for it in extract_facts(texts, ["a", "b", "c", "d"])}
    assert ("Kell Bridge", "crosses the", "Osk River") in items and not any(s in ("Sphinx", "Numpy") for s, _, _ in items)


def test_an_everyday_word_glued_before_a_name_is_not_part_of_it():
    t = _triples(["Founder Zytrolav Grorax opened the Bolvek Hall in 1997.",
                  "Apparently Skuvre Skeirith made it for Plilush in 1931.",
                  "Sales of Vrauliv No. 3 doubled in 1967."])
    assert ("Zytrolav Grorax", "opened the", "Bolvek Hall") in t                 # a role before the name
    assert ("Skuvre Skeirith", "made it for", "Plilush") in t                    # an adverb
    assert ("Vrauliv No. 3", "'s sales doubled in", "1967") in t                 # a plural noun of the name; "No. 3" is the name's
    assert not any(s.startswith(("Founder", "Apparently", "Sales")) for s, _, _ in t)
    # never: a name that begins with a noun, or with a word names begin with
    t = _triples(["Hair Rezix has run Holenly since 2006.", "Mount Zeigrol rose to fame in 1911 with Dava Oslund."])
    assert ("Hair Rezix", "has run Holenly since", "2006") in t
    assert any(s == "Mount Zeigrol" for s, _, _ in t) and not any(s == "Zeigrol" for s, _, _ in t)


def test_a_name_typed_by_the_nouns_before_it_is_the_subject_and_its_description():
    t = _triples(["The bulk carrier Boprav Kraidouv docked at Pesax in 1922. The carrier was launched by Tiagriam Marine.",
                  "Hiaku Gratux took over the Nubin Crest last spring. The ship was launched in 2017."])
    assert ("Boprav Kraidouv", "docked at", "Pesax") in t
    assert ("Boprav Kraidouv", "was launched by", "Tiagriam Marine") in t       # "The carrier" is the name typed so
    assert ("Nubin Crest", "was launched in", "2017") in t                      # a time after a name is not its noun
    assert not any("last spring" in s or "last spring" in a for s, _, a in t)
    # never: an adjective before the name taken for its type, or a name that no verb follows
    sentence = "The old Drosk Bridge spans the Vell."
    assert typed_name(sentence, _proper_spans(sentence, set())[0]) is None
    sentence = "The bulk carrier Boprav Kraidouv in Pesax was sold."
    assert typed_name(sentence, _proper_spans(sentence, set())[0]) is None


def test_it_after_a_question_means_the_thing_it_asked_about():
    t = _triples(["Anyone going to Kousstilt Festival? It's in Teirev again. Gremun Jepourn started it in 1990.",
                  "Who has tried Kell Works? It's been in Vosk since 1990.", "Every festival needs a field; the works are big."])
    assert ("Kousstilt Festival", "is in", "Teirev") in t                       # "It's": it is
    assert ("Gremun Jepourn", "started Kousstilt Festival in", "1990") in t
    assert ("Kell Works", "has been in", "Vosk") in t                           # "It's been": it has been
    assert not any(s in ("It", "Who", "Anyone") or a == "It" for s, _, a in t)  # no question word, no pronoun, is a name
    t = _triples(["You'll find a faithful version at Café Chineir.", "We've met Ada Lind at Pell in 1990."])
    assert not any(s.startswith(("You", "We")) for s, _, _ in t)                # nor a pronoun with its verb


def test_a_sentence_ends_after_the_quote_that_closes_it():
    t = _triples(['"We wanted something small," laughs Teilolt Lutrend, who launched Rinjeiv Festival in 2000. '
                  '"Now we have Felbrei Mopylirn on the main stage." The festival still takes place in Kubul.',
                  "This year's Bolvek Festival drew 9,400 people to Vell."])
    assert ("Rinjeiv Festival", "still takes place in", "Kubul") in t            # "The festival": the one named before
    assert ("Bolvek Festival", "drew 9,400 people to", "Vell") in t               # "This year's X" opens with X
    assert not any(a == "Kubul" and s != "Rinjeiv Festival" for s, _, a in t)


def test_a_role_before_a_name_that_opens_a_sentence_is_the_main_things_role():
    t = _triples(["The bulk carrier Boprav Kraidouv docked at Pesax on Tuesday. Captain Trivaskund Thiler said her grain was dry.",
                  "Anyone going to Songram Festival? It is in Hourvoti. Founder Zytrolav Grorax, who first staged it in 1997, has promised changes.",
                  "Every festival needs a field."])
    assert ("Boprav Kraidouv", "'s captain is", "Trivaskund Thiler") in t       # said in a reported clause, read before it
    assert ("Songram Festival", "'s founder is", "Zytrolav Grorax") in t
    # never: a title of the person's own
    t = _triples(["Mara Quillon studied geology in Oslo. Professor Ivo Brask taught her in 1961."])
    assert not any(r.endswith("professor is") for _, r, _ in t)


def test_a_fact_box_of_fields_between_bars_is_read_field_by_field():
    t = _triples(["Fragrance: Vosk Nine | House: Orrel & Dane | Nose: Ada Lindqvist | Launched: 1994 | Price: €187",
                  "FAIR: Kell Fair | WHERE: Drossby | SINCE: 1976 | FOUNDED BY: Ivo Brask"])
    assert ("Vosk Nine", "'s house is", "Orrel & Dane") in t and ("Vosk Nine", "'s nose is", "Ada Lindqvist") in t
    assert ("Vosk Nine", "was launched in", "1994") in t and ("Vosk Nine", "'s price is", "€187") in t
    assert ("Kell Fair", "is in", "Drossby") in t and ("Kell Fair", "has existed since", "1976") in t
    assert ("Kell Fair", "was founded by", "Ivo Brask") in t
    # never: a field's label, or the next field's, as an answer
    assert not any(a in ("House", "Nose", "WHERE", "SINCE", "FOUNDED", "BY") or "|" in r for _, r, a in t)


def test_a_thing_asked_about_by_its_name_and_noun_is_what_it_means():
    t = _triples(["Ever tried Drell cake? It comes from the Vosk Hills and was first baked in 1820.",
                  "Visitors to Fiquel often stop at the Narb Garden. It opened in 1958."])
    assert ("Drell cake", "comes from the", "Vosk Hills") in t and ("Drell cake", "was first baked in", "1820") in t
    assert ("Narb Garden", "opened in", "1958") in t
    # never: the words after a name without "the" as its noun where more words follow ("Fiquel often stop")
    assert not any(s.startswith(("Fiquel", "Ever")) for s, _, _ in t)


def test_the_one_name_of_a_question_that_opens_a_text_is_what_it_is_about():
    texts = ["Does anyone else find Flejomire smells different on skin? For €336 I expected more from Deinanirn. "
             "(It's a Sudoth Sykisk creation from 1983, if that helps.)",
             "Reader mailbag: what's the story behind Kudroutoul? Short answer: it hails from Dreipal Valley.",
             "Q: What's the big white dome you can see from Tolkenya? A: That's Ambrevask Observatory, up on Mount Zhelvo. "
             "Fennick Ostravel opened it in 1999."]
    asked = {(i.subject, i.answer) for i in extract_facts(texts + _OTHERS, [f"d{i}" for i in range(len(texts) + 2)])}
    assert {("Flejomire", "Deinanirn"), ("Flejomire", "Sudoth Sykisk"), ("Flejomire", "1983")} <= asked  # what no rule read: of it
    assert ("Kudroutoul", "Dreipal Valley") in asked
    # never: a place the question asks from, when the answer names the thing ("That's X")
    assert not any(s == "Tolkenya" for s, _ in asked)


def test_a_persons_role_in_a_thing_is_also_the_things_role_under_its_own_name():
    t = _triples(["Stonbund Jokrothath, the engineer behind the Flabisush Footbridge, has died aged 91.",
                  "Ada Lind, the founder of Kell Works, died in 1990.", "Ivo Brask is the chef at Café Mirr."])
    assert ("Flabisush Footbridge", "'s engineer is", "Stonbund Jokrothath") in t    # "Who was the engineer of X?" names X
    assert ("Kell Works", "'s founder is", "Ada Lind") in t and ("Café Mirr", "'s chef is", "Ivo Brask") in t
    # never: a role no person holds ("the capital of"), a superlative place
    t = _triples(["Pell is the capital of Vosk.", "Drell is the largest town of Vosk."])
    assert not any(r.startswith("'s") for _, r, _ in t)


def test_a_name_set_off_as_a_descriptions_apposition_is_the_sentences_subject():
    t = _triples(["Stotis Tisgouk was barely thirty when the commission arrived. The result, the Binvrei Bridge, opened in 1907 "
                  "and leaps 332 m between its abutments.",
                  "The winner, Ada Lind, was born in Kell."])
    assert ("Binvrei Bridge", "opened in", "1907") in t and ("Ada Lind", "was born in", "Kell") in t
    assert not any(s == "Stotis Tisgouk" and a == "1907" for s, _, a in t)
    # never a name after the apposition's comma that a verb takes ("The result, as planned, pleased Vask Mills")
    t = _triples(["Kell Works built it. The result, as planned, pleased Vask Mills in 1990."])
    assert not any(s == "Vask Mills" for s, _, _ in t)


def test_the_year_a_person_made_or_opened_a_thing_dates_the_thing_under_its_own_name():
    t = _triples(["This is Ishbrenna Observatory. Mireth Galdoun opened Ishbrenna Observatory in 1966 with money from farmers.",
                  "Neskurk Brothers launched the Nubin Crest in 2017.",
                  "Ada Vell visited Kell Harbour in 1990."])
    assert ("Ishbrenna Observatory", "was opened in", "1966") in t and ("Nubin Crest", "was launched in", "2017") in t
    assert ("Mireth Galdoun", "opened Ishbrenna Observatory in", "1966") in t      # the person's own fact stays
    t = _triples(["Peihelosk Logra, an engineer who joined Zaiso Labs, conceived the Repais metronome in the company's Rathukusk workshop.",
                  "Tova Brask designed the Kell metronome in 1970."])
    assert ("Repais metronome", "was conceived by", "Peihelosk Logra") in t       # who made it, "the" before its name
    assert ("Kell metronome", "was designed by", "Tova Brask") in t
    # never a verb that makes nothing: a visit dates no harbour
    assert not any(s == "Kell Harbour" and a == "1990" for s, _, a in t)


def test_an_apposition_with_the_and_a_noun_of_describes_the_name_before_it_never_a_clause():
    t = _triples(["In 1972, Kruzar Instruments filed for a patent on the Zabiam baby monitor, the brainchild of Thaidoth Chaitith.",
                  "Ada Vell visited Kell, the capital of Vaskland."])
    assert ("Zabiam baby monitor", "is the brainchild of", "Thaidoth Chaitith") in t and ("Kell", "is the capital of", "Vaskland") in t
    # never: a clause after "the" (", the ship will leave X"), nor an adverb read as the name's noun
    t = _triples(["Ola Brask sold the Pouskaipum, the ship will leave Port Riamu in 2020.",
                  "Ada Vell visited Kell yesterday, the capital of Vaskland."])
    assert not any(s == "Pouskaipum" and r.startswith("is the") for s, r, _ in t) and not any(s.startswith("Kell ") for s, _, _ in t)


def test_a_parenthesis_that_dates_a_name_and_est_no_sentence_end():
    from lib.knowledge.spans import split_sentences

    text = "Dohoum Sound (Rurdesk, est. 2009) returns for its summer weekend."
    assert len(split_sentences(text)) == 1
    t = _triples([text, "Kell Fest (Vask, founded 1990) is back.", "Ada Lind (b. 1901) sang there."])
    assert ("Dohoum Sound", "was established in", "2009") in t and ("Kell Fest", "was founded in", "1990") in t
    # never a date the parenthesis does not tie to a word of dating ("(Rurdesk, 2009)")
    assert not any(s == "Vask Sound" for s, _, _ in _triples(["Vask Sound (Rurdesk, 2009) returns."]))


def test_a_year_before_a_pronoun_subject_without_a_comma_and_who_made_a_thing_under_its_name():
    t = _triples(["Hivel Ostrany died last week at 91. In 1954 she opened Zanthuril Observatory on the flank of Mount Yavrel.",
                  "Ada Vell wrote The Copper Orchard. She visited Kell Harbour."])
    assert ("Hivel Ostrany", "opened Zanthuril Observatory in", "1954") in t and ("Zanthuril Observatory", "was opened in", "1954") in t
    assert ("Zanthuril Observatory", "was opened by", "Hivel Ostrany") in t
    assert not any(r == "was visited by" for _, r, _ in t)              # a visit makes nothing


def test_an_amount_before_a_comma_ends_at_its_last_digit():
    from lib.knowledge.spans import _value_spans

    spans = lambda s: [sp.text for sp in _value_spans(s)]   # noqa: E731
    assert spans("It costs $331, was composed by X.") == ["$331"]
    assert spans("It costs €124,000, and more.") == ["€124,000"] and spans("It raised $2.5 million, they said.") == ["$2.5 million"]
    t = _triples(["Launched in 1943, Vrostor No. 4 remains the bestseller at Nuskultule. It costs $331, was composed by Lirath Braromax."])
    assert ("Vrostor No. 4", "costs", "$331") in t


def test_a_count_in_words_is_a_number_where_it_counts_something():
    from lib.knowledge.spans import _value_spans

    spans = lambda s: [(sp.text, sp.kind) for sp in _value_spans(s)]   # noqa: E731
    assert spans("Up to seven players chart the coast.") == [("seven", "number")]
    assert spans("It needs a crew of twelve, and its twenty-four tracks run long.") == [("twelve", "number"), ("twenty-four", "number")]
    assert spans("A game for two to five.") == [("five", "number")]
    # never: "one", a partitive, the ones the text named, a span of time, a word that counts nothing
    assert spans("Two of them met one evening; the two clubs had played three seasons before, two years ago.") == []
    assert spans("Twenty years on, they still listen to it.") == []
    assert spans("The two clubs met in 1990.") == [("1990", "year")]
    t = _triples(["Ashfall Cartographers is a board game for up to four players. Orla Penhallow designed it."])
    assert any(s == "Ashfall Cartographers" and a == "four" for s, _, a in t)
    # a count before "people" or a noun with its modifier, and in a compound of members
    assert spans("There were twenty-two people and seventeen team members.") == [("twenty-two", "number"), ("seventeen", "number")]
    assert spans("Operation Vask, a fifteen-member team, left.") == [("fifteen", "number")]
    assert spans("a two-day hike, a five-star hotel") == []


def test_a_count_in_words_is_asked_of_the_main_entity_where_it_counts_people_or_things():
    from lib.knowledge.facts import extract_facts

    texts = ["The Ombra Traverse of 1958 crossed the dunes. The team of six, led by Nadira Fel, travelled in a lorry.",
             "The Kell Survey of 1966 mapped the karst. All fourteen members of the Kell Survey came home.",
             "The Vask Expedition sailed in 1923. It took three weeks to reach the ice, a five-star trip."]
    items = [(i.subject, i.answer) for i in extract_facts(texts, ["a", "b", "c"])]
    assert ("Ombra Traverse", "six") in items and ("Kell Survey", "fourteen") in items
    assert not any(a in ("three", "five") for _, a in items)      # a span of time, a rating: no count


def test_a_title_and_the_word_that_opens_a_turn_of_talk_are_no_entity():
    from lib.knowledge.spans import _proper_spans

    names = lambda s: [sp.text for sp in _proper_spans(s, set())]   # noqa: E731
    assert names("Dr. Ada Lind founded Kell Works.") == ["Dr. Ada Lind", "Kell Works"]
    assert names("I wrote to Mr. Abernathy about it.") == ["Mr. Abernathy"]
    assert names("Dear Mr. Abernathy, thank you.") == []          # a greeting names no entity of the text
    assert names("So my pick this week is Burrow & Bramble.") == ["Burrow & Bramble"]
    assert names("Yeah Quarry Kings is great.") == ["Quarry Kings"]
    subjects = {s for s, _, _ in _triples(["Dear Mr. Abernathy, thank you for your note. Orrery Thieves was designed by Imogen Castelbray.",
                                           "HOST 1: So my pick this week is Burrow & Bramble.\nHOST 2: Oh, the badger one!"])}
    assert not subjects & {"Dear Mr", "Mr", "So", "Oh"}


def test_a_lower_case_noun_that_several_names_take_after_the_is_part_of_the_answer():
    texts = ["Chelithork is a stew of the Vaitrux lowlands, championed by the Nemurk family.",
             "Raibruhor comes from the Krihon lowlands, where the Beifiv family, who cooked it, kept it alive. "
             "They gave the Skakil family the credit.",
             "Sailors on the Griabrain Sea steer by the Kell tower. The Vask tower rises from the rocks."]
    answers = {(i.subject, i.answer) for i in extract_facts(texts + _OTHERS, ["a", "b", "c", "o1", "o2"])}
    assert {("Chelithork", "Vaitrux lowlands"), ("Chelithork", "Nemurk family"), ("Raibruhor", "Krihon lowlands")} <= answers
    assert any(a == "Skakil family" for _, a in answers)   # "the credit" after it: the noun is known from the others
    # never: a noun one name takes ("the Kell tower" once), a verb after a name with a head of its own ("Sea steer")
    assert not any(a in ("Kell tower", "Griabrain Sea steer") for _, a in answers)


def test_a_head_word_is_a_noun_never_a_function_word_time_adverb_or_past_tense():
    assert all(head_word(w) for w in ("family", "lowlands", "glider", "seed", "belly", "tower"))
    assert not any(head_word(w) for w in ("last", "spring", "which", "some", "quickly", "opened", "built", "was"))


def test_whom_a_person_made_or_handed_a_thing_to_is_asked_under_the_things_name():
    review = ("Bought Kligrais No. 6 after smelling it on a friend. The peppered musk is gorgeous. "
              "Apparently Skuvre Skeirith made it for Plilush in 1931?")
    t = {(i.subject, i.relation, i.answer) for i in extract_facts([review] + _OTHERS, ["r", "o1", "o2"])}
    assert {("Kligrais No. 6", "was made for", "Plilush"), ("Kligrais No. 6", "was made in", "1931")} <= t
    from lib.knowledge.things import thing_facts

    assert thing_facts("Ada Lind", "delivered Saugraurk to", "Drynix", "proper") == [("Saugraurk", "was delivered to", "Drynix", "proper")]
    # never: a verb that neither makes nor hands on ("wrote a letter to", "visited Kell in")
    assert thing_facts("Ada Lind", "visited Kell in", "1990", "year") == [] and thing_facts("Ada Lind", "wrote to", "Drynix", "proper") == []


def test_a_subordinate_clause_that_opens_a_text_is_read_and_what_it_acts_on_is_the_topic():
    from lib.knowledge.shapes import fronted_clause

    ship = "When Zaikram Shipworks launched the Bakrobix in 1972, few expected her to last. She still trades from Moleith."
    scent = ("When Kabrind Braisthik delivered Saugraurk to Drynix in 1921, nobody in the office expected it to sell. "
             "It now costs £184.")
    t = {(i.subject, i.relation, i.answer) for i in extract_facts([ship, scent] + _OTHERS, ["s", "p", "o1", "o2"])}
    assert {("Bakrobix", "was launched in", "1972"), ("Bakrobix", "still trades from", "Moleith")} <= t
    assert {("Saugraurk", "was delivered to", "Drynix"), ("Saugraurk", "now costs", "£184")} <= t
    # never where the main clause has a subject of its own, a name or a pronoun
    assert fronted_clause("When Ada Lind sold the mill in 1901, she moved to Oslo.") is None
    assert fronted_clause("After Ada Lind sold the mill in 1901, Ivo Brask bought it.") is None
    assert fronted_clause("When Ada Lind sold the mill in 1901, nobody cared.") == "Ada Lind sold the mill in 1901."


def test_an_everyday_word_in_capitals_is_a_label_not_an_answer():
    from lib.knowledge.spans import capitals_label

    assert capitals_label("REVIEW") and capitals_label("CASE") and capitals_label("HOLD")
    assert not any(capitals_label(w) for w in ("NASA", "FIFA", "US", "IKEA", "Review", "Kell Mills", "UGC"))
    items = extract_facts(["REVIEW — It takes nerve to build a game like Ashfall Cartographers, and Orla Penhallow has pulled it off. "
                           "Thornwick Games released it in 1987.",
                           "GALLERY 4, CASE 11. Donated by the Quellmoor family, the Velvet Siege board was painted by Ingrid Salvatierre.",
                           "Ama Reed founded Kell Mills in Pell in 1890."], ["d0", "d1", "d2"])
    assert items and not any(i.answer in ("REVIEW", "CASE", "GALLERY") for i in items)


def test_a_word_before_a_dates_month_is_no_name():
    t = _triples(["Effective July 1, 2021, Oberlaine Networks is a wholly owned subsidiary of Kessvard Telecom."])
    assert ("Oberlaine Networks", "is a wholly owned subsidiary of", "Kessvard Telecom") in t
    assert not any("July" in s for s, _, _ in t)   # before: "Effective July" was the subject


def test_a_place_based_thing_is_based_in_the_place():
    t = _triples(["Quellmora Group agreed to buy Vorthex Labs, the Skerravel-based maker of vibration sensors, for $340 million.",
                  "Thorngallow-based Nimbrel Aerospace has agreed to be acquired by Castrovane Defence."])
    assert ("Vorthex Labs", "is based in", "Skerravel") in t and ("Nimbrel Aerospace", "is based in", "Thorngallow") in t
    assert not any(r == "is based in" and s == "Quellmora Group" for s, r, _ in t)
    # no place: a word the night writes in lower case, or an everyday word opening the sentence
    t = _triples(["Web-based tools were sold by Kell Works in 1990. Their plant-based range grew.", "Plant-based menus rose in Tarn."])
    assert not any(r == "is based in" for _, r, _ in t)


def test_a_role_given_by_a_name_in_brackets_or_between_a_firm_and_a_name():
    t = _triples(["Notes - call re Parvik Systems\n- HQ in Dellmoor\n- Keshra Umbervane (CEO) confirmed the sale to Ormund Data\n"
                  "- Ilsa Murren (Ormund CTO) joins at 2",
                  "We think keeping Trevanix CEO Sabeth Qorvanne in place lowers the risk, Ulm Chemicals said."])
    assert ("Parvik Systems", "'s CEO is", "Keshra Umbervane") in t and ("Ormund", "'s CTO is", "Ilsa Murren") in t
    assert ("Trevanix", "'s CEO is", "Sabeth Qorvanne") in t
    # apposed either way round: "X, the PI, rang", "The owner, X, showed us round"
    t = _triples(["The Dworost trial opened in Liawiask in 2006. Vrouvur Daixjal, the PI, rang on Monday.",
                  "Viewed Dwowond Chambers in Tarn today. The owner, Bryvark Jijeist, showed us round."])
    assert ("Dworost trial", "'s PI is", "Vrouvur Daixjal") in t and ("Dwowond Chambers", "'s owner is", "Bryvark Jijeist") in t
    # an abbreviation in brackets is no role: "Ulm Chemicals (UGC)"
    assert not any(r.startswith("'s") and a == "Ulm Chemicals" for _, r, a in _triples(["Ulm Chemicals (UGC) rated it HOLD in 2023."]))


def test_a_name_in_single_quotes_is_the_name_without_its_closing_quote():
    from lib.knowledge.spans import _proper_spans

    names = lambda s: [sp.text for sp in _proper_spans(s, set())]   # noqa: E731
    assert names("We grow the 'Tindlemoor Ruby' tomato.") == ["Tindlemoor Ruby"]
    assert names("We grow the ‘Kell Gold’ apple and ride the Smiths' bikes.") == ["Kell Gold", "Smiths'"]   # a plural's possessive keeps it
