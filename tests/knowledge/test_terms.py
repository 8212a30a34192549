"""Terms: facts whose answer is a lower-case noun phrase (lib/knowledge/terms.py), read from
multi-document nights, and the shapes that must never be read."""

from bench.fact_sets import records
from lib.knowledge.cloze import is_cloze
from lib.knowledge.facts import extract_facts
from lib.knowledge.terms import clause_term

GARDENS = [
    "The Treinar Botanical Garden in Stabriasburgh was laid out in 1990. It grows about 2391 species of plants, "
    "and its glasshouses are known for their alpine plants. The garden's curator is Grequund Quaikarton.",
    "The Faigeith Botanical Garden in Ziasunham was laid out in 1804. It grows about 7215 species of plants, "
    "and its glasshouses are known for their camellias. The garden's curator is Hounair Liadendton.",
    "Quudreiss Poquusard has looked after the Samess Botanical Garden since the spring of 2009. Founded in 1850 "
    "on the edge of Nouposham, the garden now holds around 16559 species and a celebrated collection of orchids.",
]
MUSEUMS = [
    "The Oskar Museum in Lessow opened in 1901. Its collection is mostly ceramics. The museum specialises in rare books.",
    "The Brill Museum in Harrow opened in 1921. Its collection is mostly textiles. The museum specialises in old maps.",
    "The Tamber Museum in Elmsby opened in 1950. It is famous for its orchids. Most of its visitors come in summer.",
    "The Kellin Museum in Quenby opened in 1930. It is famous for its tapestries. The museum said that it would close.",
]
MUSICIANS = [
    "Ada Lind was born in Oslo in 1961. She plays the cello and teaches at the Varo School. "
    "Critics remember her as patient and precise.",
    "Ivo Brask was born in Lisbon in 1970. He plays the oboe and gives about 40 concerts a year. He is patient.",
    "Vera Holm was born in Turku in 1955. She plays the harp. She worked first as an assistant at the Holm Trust.",
    "Ona Brisk was born in Riga in 1980. She works as a translator and lives in Tallinn.",
    "Pel Arvo was born in Bergen in 1966. He works as a carpenter. He became its conductor after a long search.",
]


def _terms(texts):
    """The terms of the clause rules (lib/knowledge/terms.py); what a thing is known for is things.py's, tested below."""
    items = extract_facts(texts, [f"d{i}" for i in range(len(texts))])
    return {(i.subject, i.relation, i.answer) for i in items if i.kind == "term" and i.relation != "is known for"}, items


def test_bio_fields_of_study_are_terms():
    recs = records("bio", 1, 24)
    terms, items = _terms([r.text for r in recs])
    by_subject = {s: a for s, _, a in terms}
    assert len(terms) == 24                        # one a biography: its field, in each of the three phrasings
    assert all(by_subject[r.subject] == r.questions["field"][1] for r in recs)
    relations = {r for _, r, _ in terms}
    assert relations == {"studied", "took a degree in", "read"}
    for item in items:
        if item.kind == "term":                    # ranked only among terms
            assert item.distractors and all(d in {a for _, _, a in terms} for d in item.distractors)
            assert "what" in item.question.lower() or "thing" in item.question or "____" in item.question


def test_old_items_are_kept_before_terms():
    recs = records("bio", 1, 24)
    items = extract_facts([r.text for r in recs], [f"d{i}" for i in range(len(recs))])
    other = [i for i in items if i.kind != "term" and not is_cloze(i.relation)]
    assert len(other) == 80                        # the 80 items of docs/knowledge.md, unchanged (the clozes come after)
    assert all(d not in {t.answer for t in items if t.kind == "term"} for i in other for d in i.distractors)


def test_gardens_museums_musicians():
    terms, _ = _terms(GARDENS)
    assert terms == {("Treinar Botanical Garden", "'s glasshouses are known for their", "alpine plants"),
                     ("Faigeith Botanical Garden", "'s glasshouses are known for their", "camellias")}
    terms, items = _terms(MUSEUMS)
    assert terms == {("Oskar Museum", "'s collection is mostly", "ceramics"), ("Brill Museum", "'s collection is mostly", "textiles"),
                     ("Oskar Museum", "specialises in", "rare books"), ("Brill Museum", "specialises in", "old maps"),
                     ("Tamber Museum", "is famous for its", "orchids"), ("Kellin Museum", "is famous for its", "tapestries")}
    famous = next(i for i in items if i.answer == "orchids")
    assert famous.distractors[0] == "tapestries"   # the same relation first
    terms, _ = _terms(MUSICIANS)
    assert terms == {("Ada Lind", "plays the", "cello"), ("Ivo Brask", "plays the", "oboe"), ("Vera Holm", "plays the", "harp"),
                     ("Ona Brisk", "works as a", "translator"), ("Pel Arvo", "works as a", "carpenter")}


def test_a_night_of_one_document_has_no_terms():
    assert not _terms(MUSEUMS[:1])[0]
    assert not _terms([records("bio", 1, 24)[0].text])[0]


def test_never_read():
    # manner, adjectives, pronouns, quantities, generic time and measure nouns, clauses, places
    for clause in (" remember him as patient and precise.", " is patient.", " was patient and kind.",
                   " gives about 33 concerts a year.", " plays roughly 50 concerts each season.", " rises 69 metres above the rocks.",
                   " stands above the rocks.", " began a long search.", " spent most of its life abroad.", " studied hard and won.",
                   " decided to retire.", " said that the road was closed.", " is a painter.", " has two sons.",
                   " met him there.", " moved to the coast.", " studied there for years.", " joined Grilith Industries."):
        assert clause_term(clause) is None, clause
    assert clause_term(" colleagues at Stidraith Works remember him as patient.", owned=True) is None
    # two documents that differ only in such words still give no term
    pairs = [("She remembers him as patient.", "He remembers her as kind."),
             ("She gives 12 concerts each season.", "He gives 30 concerts a year."),
             ("She became its director after a vote.", "He became its conductor after a long search."),
             ("She worked first as an assistant.", "He worked first as a clerk.")]
    for a, b in pairs:
        texts = [f"Ada Lind was born in Oslo in 1961. {a}", f"Ivo Brask was born in Riga in 1970. {b}"]
        assert not _terms(texts)[0], (a, b)


def test_clause_shapes():
    assert clause_term(" took a degree in marine biology.") == ("took a degree in", "marine biology")
    assert clause_term(" studied organic chemistry and later worked for Trisi Group.") == ("studied", "organic chemistry")
    assert clause_term(" sells sourdough bread.") == ("sells", "sourdough bread")
    assert clause_term(" glasshouses are known for their alpine plants.", owned=True) == \
        ("'s glasshouses are known for their", "alpine plants")


def test_what_a_thing_is_known_for_whatever_the_words():
    from lib.knowledge.things import known_for
    # one relation for fame, aboutness and holdings, so a night's documents are each other's distractors
    items = extract_facts(GARDENS, ["g0", "g1", "g2"])
    assert ("Samess Botanical Garden", "is known for", "orchids") in {(i.subject, i.relation, i.answer) for i in items}
    # read in a night of one document too: the cue, not a second document, says the phrase is an attribute
    assert {(i.subject, i.answer) for i in extract_facts(MUSEUMS[:1], ["m0"]) if i.relation == "is known for"} \
        == {("Oskar Museum", "ceramics"), ("Oskar Museum", "rare books")}
    def one(text, main, thing=True):
        return [(s, a) for s, _, a, _, _ in known_for(text, main, thing, set())]
    assert one("Founded by Ysa Marr, it first opened in 1962 and remains famous for its tin cups: hundreds of them.", "Glint Room") \
        == [("Glint Room", "tin cups")]                              # the pronoun after the founder's name is the thing
    assert one("In 1954 he turned his dairy into Wheel Hall, a small museum devoted to carved forks, many of which he made.",
               "Orm Tallis", thing=False) == [("Wheel Hall", "carved forks")]   # apposed to a name: that name's, in a person's text
    assert one("The Wire Loft, the volunteer-run museum of brass horns founded by Cara Ib in 1999, said so.", "Wire Loft") \
        == [("The Wire Loft", "brass horns")]                        # a participle closes the phrase
    assert one("Name: Museum of Vanes\nLocation: Brisk\nKnown for: weather cocks (over 400)\nOpened: 1991", "Museum of Vanes") \
        == [("Museum of Vanes", "weather cocks")]                    # a fact box's line
    assert one("It's a converted garage full of antique keys, and I mean thousands.", "Key Box") == [("Key Box", "antique keys")]
    assert one("It's mostly felt hats, going back two centuries.", "Hatbox Museum") == [("Hatbox Museum", "felt hats")]
    assert one("Founded in 1850 on the edge of Nouposham, the garden now holds a celebrated collection of orchids.", "Samess Garden") \
        == [("Samess Garden", "orchids")]                            # the place in the opening phrase is not what holds them
    # what a group does: "devotes itself to", "promotes", "we do", "Activity:", the kind of club it is
    assert one("The society devotes itself to moth trapping and keeps a record.", "Vell Moth Society") == [("Vell Moth Society", "moth trapping")]
    assert one("Founded in 2008 by Bram Kell, the club promotes responsible falconry.", "Tess Club") == [("Tess Club", "responsible falconry")]
    assert one("Mostly we do bat watching along the canal.", "Cran Bat Group") == [("Cran Bat Group", "bat watching")]
    assert one("Founded: 1999\nActivity: wood carving\nMembers: 145", "Corv Guild") == [("Corv Guild", "wood carving")]
    assert one("Yes, we're a sea kayaking club, and it's a big year.", "Yelver Club") == [("Yelver Club", "sea kayaking")]
    assert one("It's a friendly crochet group.", "Plum Collective") == [("Plum Collective", "crochet")]
    assert one("We are a volunteer group.", "Kell Side") == []                       # how a group is, not what it does
    # what people come for, and the thing said before the words that say it is known for it
    assert one("Most people come for the hot chocolate, made with real chocolate.", "Quor Cafe") == [("Quor Cafe", "hot chocolate")]
    assert one("People drive from Annerholt for our soda bread.", "Pott Bakery") == [("Pott Bakery", "soda bread")]
    assert one("Open since 2014 and known across the valley for our doughnuts.", "Sall Kitchen") == [("Sall Kitchen", "doughnuts")]
    assert one("A staff of seven turns out pies and the apple turnovers the bakery is famous for.", "Moss Bakery") \
        == [("Moss Bakery", "apple turnovers")]
    assert one("Mum had two iced buns, which is what the place is known for.", "Icker Bakery") == [("Icker Bakery", "iced buns")]
    assert one("Founded in 2010 by Casimir Oldwreath, the bakery is best known for its brioche.", "Harn Bakery") \
        == [("Harn Bakery", "brioche")]                              # ", the bakery is": a clause, no apposition
    # in a person's text, "it" is the last thing named before: the bakery, not the baker
    assert known_for("Ada Lind opened Kell Bakery in Pell in 2004. It is famous for its rye bread.", "Ada Lind", False, set())[0][:3] \
        == ("Kell Bakery", "is known for", "rye bread")
    # never: another name nearer the cue, a person's text, a lone participle, a time or a quantity
    assert one("1958: Clem Aub begins collecting bobbin lace from village households.", "Lace House") == []
    assert one("It is famous for its scones.", "Ada Lind", thing=False) == []
    assert one("The estate is chiefly planted with Zybaen.", "Zaes Vineyards") == []
    assert one("It is known for its many years of service.", "Kell Works") == []


def test_a_things_colour_is_a_run_of_colour_words():
    from lib.knowledge.things import colour_facts

    def one(text, main, thing=True):
        return [(s, a) for s, _, a, _, _ in colour_facts(text, main, thing, set())]
    assert one("Velmira Dawn bears deep crimson blooms from June.", "Velmira Dawn") == [("Velmira Dawn", "deep crimson")]
    assert one("Its fruit ripens to russet gold.", "Sennow Blush") == [("Sennow Blush", "russet gold")]
    assert one("Colour: smoky violet\nHardness: 5", "quellite") == [("quellite", "smoky violet")]
    assert one("It forms pale green crystals in a white matrix.", "quellite") == [("quellite", "pale green")]
    assert one("A russet gold apple, it keeps till March.", "Sennow Blush") == [("Sennow Blush", "russet gold")]
    assert one("Bunches ripen to an inky purple by late September.", "Velmarsh Noir") == [("Velmarsh Noir", "inky purple")]
    assert one("1920s - Widely planted; the slate blue fruit is prized.", "Quarn Sovereign") == [("Quarn Sovereign", "slate blue")]
    assert one("Year: 1947\nFlower colour: vermilion\nPods: 30 cm", "Crowdwell Scarlet") == [("Crowdwell Scarlet", "vermilion")]
    assert one("HOST: It's a lovely lemon yellow.", "Oskar Giant") == [("Oskar Giant", "lemon yellow")]
    # never: a name's colour word, one colour word before any noun, a colour word that is a thing here, a person's colours
    assert one("We met at the Red Lion and painted the green door.", "Kell Rose") == []
    assert one("It was preserved in amber.", "quellite") == []
    assert one("Her dress was blue.", "Ada Lind", thing=False) == []
    items = extract_facts(["Orlwick Dawn is a rose bred by Ada Lind in 1990. It bears deep crimson blooms.",
                           "Sennow Blush is an apple raised by Ivo Brask in 1971. Its fruit ripens to russet gold."], ["a", "b"])
    colour = next(i for i in items if i.relation == "'s colour is" and i.subject == "Orlwick Dawn")
    assert colour.answer == "deep crimson" and colour.kind == "term" and colour.distractors[0] == "russet gold"
