"""The entity a document is about where its first subject is a person and the text goes on about a thing (topic.py)."""

from __future__ import annotations

from lib.knowledge.facts import document_facts, extract_facts
from lib.knowledge.topic import acted_on, document_topic, named_with_head, thing_talk
from lib.knowledge.spans import _lowercase_words, _proper_spans

_OTHERS = ["Vask Hall is a concert hall in Brill, opened in 1901.", "Tomas Orr was born in Kell in 1950."]


def _main(text):
    return document_facts(text, _lowercase_words([text]))[1]


def _items(texts):
    return {(i.subject, i.relation, i.answer) for i in extract_facts(texts + _OTHERS, [f"d{i}" for i in range(len(texts) + 2)])}


def test_a_thing_a_persons_first_sentence_names_is_the_main_entity_where_the_text_goes_on_about_it():
    club = ("Hapis Beipai took charge of Krirak Albion two summers ago. The basketball side, which dates back to 1969, "
            "draws its crowds from Suchouthi and fills Zobak Park on match days. Its kit is grey and yellow.")
    peak = ("Geraizern Vrasvish is remembered as the first mountaineer to conquer Mount Zeigrol, in the summer of 1917. "
            "The mountain, which belongs to the Droli Massif, measures 7,381 metres and consists mostly of pale dolomite.")
    frog = ("Grurur Jesandini described the Jiha glider in 1859 from specimens that had been collected in Mount Triaweind. "
            "This tree frog grows to 24 cm and is believed to depend on wild ants for most of the year.")
    assert _main(club) == "Krirak Albion" and _main(peak) == "Mount Zeigrol" and _main(frog) == "Jiha glider"
    t = _items([club, peak, frog])
    assert ("Krirak Albion", "draws its crowds from", "Suchouthi") in t and ("Krirak Albion", "fills", "Zobak Park") in t
    assert ("Mount Zeigrol", "belongs to the", "Droli Massif") in t and ("Mount Zeigrol", "measures", "7,381") in t
    assert ("Hapis Beipai", "took charge of", "Krirak Albion") in t          # what the person did stays the person's
    assert not {s for s, _, a in t if a in ("Suchouthi", "Zobak Park", "Droli Massif", "7,381", "24")} & {"Hapis Beipai", "Geraizern Vrasvish", "Grurur Jesandini"}
    # the person the text begins with is still a person: an answer naming them is asked with "whom"
    assert document_facts(club, _lowercase_words([club]))[2] == "Hapis Beipai"

def test_a_person_stays_the_main_entity_of_a_text_about_the_person():
    assert _main("Ada Lind was born in Oslo. She joined Kell Works in 1990.") == "Ada Lind"
    assert _main("Ada Lind joined Kell Works in 1990. Her first book appeared in 1995. The company ...") == "Ada Lind"
    assert _main("Ada Lind leads the Kell Choir. The singer was born in 1950.") == "Ada Lind"        # a noun for a person
    assert _main("Ada Lind was born in Oslo. The city lies on a fjord.") == "Ada Lind"               # where she is, not what she acts on
    assert _main("Mount Brouja lies in the Baihiax Alps. The first ascent was made by Zoustass Piaciarkson in 1889.") == "Mount Brouja"
    assert _main("Mount Limikrern rises to 6,950 metres above sea level in the Thoga Massif. The summit was first reached in 1900.") \
        == "Mount Limikrern"
    # "it" alone: a name like a person's may be a firm's ("Kell Brask"), unless the name it acted on is shown a thing
    assert _main("Kell Brask bought Vask Mills in 1901. It employs 300 people.") == "Kell Brask"
    assert _main("Kell Brask bought the Vask paper mill in 1901. It employs 300 people.") == "Vask paper mill"
    assert _main("The Jirouss Crown is a cargo ship. It was built by Tras Yards.") == "Jirouss Crown"


def test_the_evidence_a_topic_needs():
    assert thing_talk(["The basketball side dates back to 1969."]) == "described"
    assert thing_talk(["This tree frog grows to 24 cm."]) == "described"
    assert thing_talk(["The coach joined in 1999."]) is None and thing_talk(["The first ascent was made in 1889."]) is None
    assert thing_talk(["Its kit is grey."]) == "it"
    s = "Grurur Jesandini described the Miagror seed drill, which ..."
    assert named_with_head(s, type("S", (), {"start": s.index("Miagror"), "end": s.index("Miagror") + 7, "text": "Miagror"})()) == "Miagror seed drill"
    assert acted_on(" took charge of ", []) and acted_on(" kept the light at ", []) and acted_on(" leads the ", [])
    assert not acted_on(" was born in ", []) and not acted_on(" lives in ", []) and not acted_on(" rises to 6,950 metres above sea level in the ", [])


def test_a_new_name_before_a_noun_describes_the_entity_a_person_acted_on():
    t = _items(["Hair Rezix has run Holenly since its founding in 2006. The Lodrourk company sells smart greenhouse fans "
                "and counts Griser Ventures among its investors; it had 18 staff at the end of March."])
    assert ("Holenly", "counts", "Griser Ventures") in t and not any(s == "Lodrourk company" for s, _, _ in t)
    # a name's first mention with its noun stays a name; a person's name with a role noun is no description of a thing
    assert _main("The Nuheind creeper is a species of lizard. It was first described in 1870.") == "Nuheind creeper"
    t = _items(["Ada Lind joined Kell Works in 1990. The Oslo singer was born in 1950."])
    assert not any(s == "Kell Works" and a == "1950" for s, _, a in t)


def test_a_firms_text_about_a_thing_it_made_and_named_with_its_noun_is_the_things():
    monitor = ("In 1972, Kruzar & Sons filed for a patent on the Zabiam baby monitor, the brainchild of Thaidoth "
               "Chaitith. It emerged from a small lab in Zutragaiss, and it weighs no more than 1,933 grams.")
    assert _main(monitor) == "Zabiam baby monitor"
    # a firm that acts on a name without a noun keeps its text: "it" may be the firm itself
    assert _main("Kell Works bought Vask Mills in 1901. It employs 300 people.") == "Kell Works"


def test_it_after_an_opening_sentence_without_a_subject_means_the_thing_it_names_with_its_noun():
    t = _items(["Meet the Miagror seed drill. It is the work of Gredreix Skuziark, who built the first one in Gruhodraix. "
                "It weighs 2,395 grams."])
    assert ("Miagror seed drill", "is the work of", "Gredreix Skuziark") in t
    # never: a name without a noun of its own after "the" ("crossing the Veidel Alps rarely miss Brufeik Dome, ... It"),
    # nor the verb after a name of two words ("Barges on the Kell Navigation carry grain": no "Kell Navigation carry")
    t = _items(["Travellers crossing the Veidel Alps rarely miss Brufeik Dome, a giant of blue basalt that towers 1,727 metres "
                "over the sea. It remained unclimbed until 1881."])
    assert not any(s == "Veidel Alps" for s, _, _ in t)


def test_a_thing_named_before_any_subject_is_what_the_text_is_about_and_what_no_rule_reads_is_asked_of_it():
    gauge = "A word on the Dolvek tide gauge: the board says Vrask Instruments paid for it in 1987. Ama Teil keeps the logbook at Pell."
    peak = "Teskil Peak: a summit of the Orvane Range. Height 3,120 metres. First climbed: 1911."
    assert _main(gauge) == "Dolvek tide gauge" and _main(peak) == "Teskil Peak"
    t = _items([gauge, peak])
    assert ("Dolvek tide gauge", ": the board says Vrask Instruments paid for it in", "1987") in t   # a cloze on the thing
    assert ("Ama Teil", "keeps the logbook at", "Pell") in t                                      # the rules' own subject
    assert ("Teskil Peak", "is a summit of the", "Orvane Range") in t     # a fact box's "X: a ..." describes X; no speaker's words
    # never: a person named first, the rules saying most of a thing, their clozes on the person
    garden = ("Ivo Maskel has looked after the Samo Botanical Garden since the spring. The garden was founded in 1850 on "
              "the edge of Drosk. Every summer, coaches from Vellum bring school groups to see its orchids.")
    t = _items([garden])
    assert ("Samo Botanical Garden", ": coaches from", "Vellum") in t
    assert not any(s == "Ivo Maskel" and r.startswith(":") for s, r, _ in t)


def test_a_firms_text_goes_on_about_the_thing_after_a_fronted_participles_phrase_too():
    brace = ("FOR IMMEDIATE RELEASE. Vrask Systems is pleased to introduce the Ridias knee brace. Invented by Leseld Prekrufand "
             "at the company's research lab in Thofith and protected by a patent filed in 1977, the device weighs just 131 grams.")
    t = _items([brace])
    assert ("Ridias knee brace", ": Invented by", "Leseld Prekrufand") in t and not any(s == "Vrask Systems" and a == "131" for s, _, a in t)


def test_the_name_in_a_persons_apposition_is_what_they_are_and_a_patent_is_no_person():
    gauge = ("Graiher Louchan, an engineer who joined Hutrov Dynamics straight out of school, conceived the Sigre pressure "
             "gauge in the company's Braikoun workshop. The patent was filed in 1976; the production model tips the scales at 1,200 grams.")
    t = _items([gauge])
    assert ("Sigre pressure gauge", "was filed in", "1976") in t
    assert not any(s in ("Graiher Louchan", "Hutrov Dynamics", "Braikoun") and a == "1976" for s, _, a in t)
    # a relative clause is something the person did: what they took over is the text's thing
    ship = ("Hiaku Gratux, who took over the Nubin Crest last spring, brought the vessel back to Zosiask yesterday. The ship, "
            "which Neskurk Brothers launched in 2017, was laden with 27,700 tonnes of timber.")
    assert ("Nubin Crest", "was launched by", "Neskurk Brothers") in _items([ship])


def test_an_everyday_opening_a_letters_greeting_and_a_participles_phrase_are_no_subject():
    from lib.knowledge.spans import _proper_spans

    names = lambda s: [sp.text for sp in _proper_spans(s, set())]   # noqa: E731
    assert names("Open-day schedule for Obrisanth Station: tours at noon.") == ["Obrisanth Station"]
    assert names("Dear Mum, greetings from Marnibost!") == ["Marnibost"] and names("Dear Ada Lind, thanks.") == []
    assert names("Hi Stabim Dreikvialt,") == [] and names("Hello Ada, Kell Works is here.") == ["Kell Works"]
    assert names("Standing on Mount Quellisk, overlooking the town of Lossambre, is the telescope of Wendiquar Observatory.") \
        == ["Mount Quellisk", "Lossambre", "Wendiquar Observatory"]
    # kept: a hyphened name, a title that goes on with its verb
    assert names("Jean-Luc Vask is here.") == ["Jean-Luc Vask"] and names("Evening in Stefaix is a painting.") == ["Evening in Stefaix"]
    letter = ("Dear Mum, greetings from Marnibost! Today we hiked Mount Pelvro to Yelqueth Observatory, which has been open "
              "since 1969. A guide told us its founder, Corvalla Dunsterik, insisted on a 2.5-metre telescope.")
    assert _main(letter) != "Dear Mum" and not any(s.startswith("Dear") for s, _, _ in _items([letter]))


def test_a_name_no_persons_is_a_thing_where_the_text_describes_one_and_says_no_she():
    dish = ("What makes Vazudal so good? Start with pumpkin, add a little patience, and you have the pride of Rolaibros. "
            "The legend of Ruchurk Foufagroun began long after the dish was first noted, in 1731.")
    t = _items([dish])
    assert ("Vazudal", ": you have the pride of", "Rolaibros") in t
    assert not any(s == "Ruchurk Foufagroun" and r.startswith(":") for s, r, _ in t)
    # kept a person: a text that says "she", or a name like a person's
    assert _main("Have you met Ada Lind? She was born in Kell in 1950. The town lies on the Vell.") == "Ada Lind"


def test_the_one_name_of_an_opening_sentence_without_a_subject_is_what_the_text_is_about():
    dish = "Nobody knows who invented Kunoval. What we do know is that it was eaten in Ziazaisk Valley by 1759."
    assert _main(dish) == "Kunoval"
    assert ("Kunoval", ": What we do know is that it was eaten in", "Ziazaisk Valley") in _items([dish])
    # never an acronym ("AMA"), nor a name in a sentence after the first
    ama = "I work the night shift at an observatory — AMA! Prevo Lanquedis founded it in 1992."
    assert _main(ama) != "AMA"


def test_of_two_things_an_opening_sentence_names_the_one_the_other_is_where_it_stands_is_not_the_topic():
    post = ("Just got back from a night at Osmiri Station up on Korva Ridge. Hard to believe the place has been running "
            "since 1978. Raise a glass to Ordune Feskalby for founding it.")
    t = _items([post, "Vask Station stands on Pell Ridge, near Kell."])   # "station" and "ridge" end several names: things
    assert ("Osmiri Station", ": Raise a glass to", "Ordune Feskalby") in t and not any(s == "Korva Ridge" for s, _, _ in t)


def test_a_name_a_colon_presents_at_the_end_of_the_first_sentence_is_the_topic_even_in_a_text_that_says_she():
    ship = ("In 2016, Drilosk Dockyard sent a new freighter down its slipway: the Diprus Kabask. Today she is registered in "
            "Piziss and answers to Hithald Kaiskais.")
    assert _main(ship) == "Diprus Kabask"
    dish = "Trichin House has one dish everyone orders: Keskolos. It belongs to the Krihon lowlands."
    assert ("Keskolos", "belongs to the", "Krihon") in _items([dish, "Vask House has one dish: Pell pie. It belongs to Kell."])
    # never a label's value, nor a person a colon names
    assert _main("Serodram — origin: the Grakrond Highlands. First recorded: 1686.") == "Serodram"
    assert _main("Kell Works has one new director: Ada Lind. She was born in Vask.") != "Ada Lind"


def test_the_one_name_outside_the_place_phrases_of_an_opening_sentence_is_the_topic_and_what_the_description_means():
    # "in Druthun Province" is where (a name two texts end with "Province": a thing), "make it Raibruhor" what
    texts = ["If you only eat one thing in Druthun Province, make it Raibruhor. The recipe turns up in a parish "
             "cookbook from 1713, but it was Beifiv Arrol who put it on the map.",
             "Pell Province is a dry plateau."]
    t = _items(texts)
    assert ("Raibruhor", "turns up in a parish cookbook from", "1713") in t           # "The recipe": Raibruhor's
    assert not any(s == "Druthun Province" for s, _, _ in t)
    # never the name before the place: "Visitors to X often stop at the Y Garden" is no text about X
    garden = ["Visitors to Fiqueilfield often stop at the Neijourk Botanical Garden. It opened in 1958.",
              "Visitors to Kell often stop at the Vask Botanical Garden. It opened in 1901."]
    assert not any(s == "Fiqueilfield" for s, _, _ in _items(garden))
    # a name with its noun before "and" ("about Notusk broth and they'll name X"): the thing the text describes
    broth = "Ask anyone in Likrouv Province about Notusk broth and they'll name Chokias Kibezo. The dish, first written down in 1810, is old."
    assert named_with_head(broth, next(p for p in _proper_spans(broth, set()) if p.text == "Notusk"), articled=False) == "Notusk broth"
    assert ("Notusk broth", ", first written down in", "1810") in _items([broth])


def test_a_cleft_names_the_topic_and_a_description_after_a_semicolon_goes_on_about_the_thing_a_person_acted_on():
    cleft = ("The scent that made Felteim Naganeth's name was Torfost Dutork, which Zauvo & Vroflik put on shelves in 1986 "
             "and which still sells for $380. Its signature is sun-dried amber.")
    t = _items([cleft])
    assert ("Torfost Dutork", ": Zauvo & Vroflik put on shelves in", "1986") in t and not any(s == "Zauvo & Vroflik" for s, _, _ in t)
    vial = ("Granoumu Nushynd still keeps the first trial vial of Plilrak on a shelf in the lab. That was 1993; the formula, "
            "anchored by burnt vetiver, went to Surpu a few months later and now sells at €236.")
    t = _items([vial])
    assert ("Plilrak", ": That was", "1993") in t
    from lib.knowledge.cloze import _what_they_did

    assert _what_they_did(" still keeps the first trial vial of Plilrak on a shelf") == "still keeps the first trial vial of Plilrak"   # no "on a"
    # never: a description of a person ("The man who founded it was X": X may be the person), nor "it" after a semicolon
    assert _main("The man who founded Vask Mills was Ivo Brask. He died in 1950.") != "Vask Mills"
    assert thing_talk(["Hair Rezix has run it; it had 18 staff."]) is None


def test_it_in_a_text_that_says_he_of_its_person_means_the_thing_the_person_acted_on_never_the_person():
    text = "Kriarbru Zorath is organising the Triniksok offsite. He has booked Vroukbryl Chalet for it. It takes place in Port Gryrbyrrak."
    t = _items([text])
    assert ("Triniksok", "takes place in", "Port Gryrbyrrak") in t and not any(s == "Kriarbru Zorath" and a == "Port Gryrbyrrak" for s, _, a in t)
    # a name only like a person's ("Vivroul Weekender", no he or she) stays what "its" means
    t = _items(["Of all the gatherings in Falkoshouk, the one locals love is Vivroul Weekender, which Ama Susymirn dreamed up in 1989. "
                "Its crowd, 54,300 strong this year, came mainly for Kruvas Gosynoth."])
    assert any(s == "Vivroul Weekender" and a == "Kruvas Gosynoth" for s, _, a in t)


def test_a_description_means_the_thing_never_the_person_who_founded_it_or_the_role_before_it():
    t = _items(["Zaesskarn Vineyards is a winery in Soumyn, established in 1941 by Koukpou Hugevrilt. "
                "The estate covers 156 hectares and is chiefly planted with Zybaenzaed."])
    assert ("Zaesskarn Vineyards", "is chiefly planted with", "Zybaenzaed") in t
    assert not any(s == "Koukpou Hugevrilt" and a == "Zybaenzaed" for s, _, a in t)
    # "the engineer behind the X": the person is an engineer (not typed "the"), so "The bridge" is X
    from lib.knowledge.relations import _subject_type
    assert _subject_type(", the engineer behind the Flabisush Footbridge, has died") == "engineer"


def _topic(text):
    lower = _lowercase_words([text])
    return document_topic(text, lower, document_facts(text, lower)[1])


def test_a_document_whose_first_subject_is_not_what_it_is_about_is_read_again_about_its_topic():
    addressed = "Q: Brenna Holt, tell us how Castel Vour came about.\nA: My uncle planted the first vines in Serra Vale in 1931."
    regarding = "Notes - call re Parvik Systems\n- HQ in Dellmoor, ~90 staff\n- sale to Ormund Data confirmed\n- price: 14 million"
    typed = ("DUNMORE — A derelict tannery has been reborn as Oskel Yard, a 3-bedroom apartment that landlord Pia Varn says "
             "will open to tenants on 4 May. The asking figure of €1,200 a month includes heating.")
    described = ("Obel Trask, the engineer behind the Yarrow Footbridge, has died aged 91. The bridge, whose 49-metre span "
                 "crosses the Lisk in Tormouth, opened in 1987 and was listed in 2004.")
    unnamed = "ok Halvey Mill in Crossby is £700/mo per room for 6 bedrooms?? already messaged the owner (Ruth Penn) #flathunting"
    assert _topic(addressed) == "Castel Vour"          # a person spoken to is not spoken of
    assert _topic(regarding) == "Parvik Systems"       # "re", "about": not "HQ", a word
    assert _topic(typed) == "Oskel Yard"               # typed by "a 3-bedroom apartment"; not "DUNMORE", a dateline
    assert _topic(described) == "Yarrow Footbridge"    # "The bridge" names one name of the text
    assert _topic(unnamed) == "Halvey Mill"            # no subject at all: the first name no one's and nowhere's
    # a first subject that is an everyday word: the first name no one's and nowhere's, a person's only after "at"
    assert _topic("Traffic will be diverted off the Lusk Bridge this weekend, Tarn council has confirmed.") == "Lusk Bridge"
    assert _topic("Just back from a week in Brova. Stopped at Kelda Veir - modest place, about 40 hectares.") == "Kelda Veir"
    # a title line over a record's fields: its topic, so what no rule reads is asked of it, not of a name in the fields
    box = "Harrow Lane\nStudio album by Ivo Brask\nReleased: 9 May 1992\nLabel: Tarn Fidelity\nChronology: Pell Road (1990) → Harrow Lane"
    assert _topic(box) == "Harrow Lane"
    assert ("Harrow Lane", "'s label is", "Tarn Fidelity") in _items([box])
    assert _topic("Ada Lind\nBorn: 1950, Oslo\nShe led Kell Works.") is None     # a person's card: her own
    # a name with its head noun is a topic too: "the Higrand trial" is no word like "Drove"
    assert _topic("Drove to Soubom again for my injection, week 30 of the Higrand trial. The nurse said 729 of us are in it.") == "Higrand trial"
    # a record's label names it ("Title:", "Demo:", "Item 4:"); a lettings firm presents a typed thing
    assert _topic("Title: The Salt Harrow [game] / designed by Ivo Brask.\nPublisher: Kell House, 1999.") == "The Salt Harrow"
    assert _topic("Minutes. Item 4: Dunlin ski weekend. The chair said Ada Lind had booked Pell Lodge.") == "Dunlin"
    assert _topic("Orrin Lettings is pleased to present Vesk Mews, a refurbished 12-bedroom student block in Tarn.") == "Vesk Mews"
    # a thing "called" so; an English word written once in passing ("Spectators", "Applicant"), a weekday, an -ly heading
    assert _topic("Dear Aunt Pip,\nWe found a little museum in Greythorpe. It's called the Aviary of Springs and it's full of birds.") \
        == "Aviary of Springs"
    assert _topic("Spectators gathered on Saturday as the Skelbourne Kite Fighters marked 30 years on Quenmoor Common.") \
        == "Skelbourne Kite Fighters"
    assert _topic("Thurs. Rain again, so we did the Narrow Neck Museum, which the B&B lady swore by.") == "Narrow Neck Museum"
    from lib.knowledge.topic import _weak_name
    assert _weak_name("Frequently Asked Questions") and not _weak_name("Rolling Gallery")
    # a person spoken to after a speaker's label; a one-word place the text names only after "in"/"near"
    assert _topic("HOST: ...and Petronella, you've brought a sunflower? GUEST: I have! This is Oskarrow Giant.") == "Oskarrow Giant"
    assert _topic("Re: Any bat groups near Widdenhope?\nYes! Join the Crannock Bat Group. We meet in Widdenhope on Tuesdays.") \
        == "Crannock Bat Group"
    assert _topic("Researchers in Kvynlok say early results from the Kostei trial are good. Kostei began in 2021.") is None
    # a chat's "been to X"; a heading in capitals; a title line "X: a timeline"; a place typed by its apposition is where, not what
    assert _topic("[09:12] jen_p: anyone been to Kestle & Brisk in Ockhollow?\n[09:13] tomasz: yes!! unreal") == "Kestle & Brisk"
    assert _topic("BAKERY MARKS ANNIVERSARY WITH FREE TURNOVERS\n\nCustomers queued along Vane Street in Pell on Saturday "
                  "as Moss & Tennery celebrated another year.") == "Moss & Tennery"
    assert _topic("Ottersmay Bakery: a timeline\n1952: Opens on Bridge Street, Fallowmede.\n1968: Begins baking pretzels.") == "Ottersmay Bakery"
    assert _topic("Quillbarrow Bakehouse is an independent bakery on Cobble Row in Brantlewick, a market town. It opened in 1987.") is None
    t = _items([addressed, regarding, typed])
    assert ("Castel Vour", ": My uncle planted the first vines in Serra Vale in", "1931") in t
    assert ("Parvik Systems", ": sale to", "Ormund Data") in t and ("Oskel Yard", "is in", "DUNMORE") in t
    assert not {s for s, _, a in t if a in ("1931", "Serra Vale", "Ormund Data")} & {"Brenna Holt", "HQ"}


def test_a_text_about_a_person_keeps_the_person_whatever_it_describes():
    # "the university" names Vask University, but the text says "she": it is about Ada Lind
    bio = "Ada Lind was born in Oslo in 1950. She studied at Vask University, and the university gave her a chair in 1980."
    assert _topic(bio) is None
    assert ("Ada Lind", "was born in", "Oslo") in _items([bio])
    # no subject, and the first name a person's: no topic ("Visitors meet Ada Lind at the gate" is not about her)
    assert _topic("Visitors meet Ada Lind at the gate. The 12-kilometre canal was dug in 1790.") is None
    assert _topic("Kell Works was founded by Ada Lind in 1990. The company makes rope.") is None   # a thing's main stays
