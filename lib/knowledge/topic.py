"""The entity a document is about, where its first subject is a person and the text goes on about a thing.

"Hapis Beipai took charge of Krirak Albion two summers ago. The basketball side, which dates back
to 1969, ... Its kit is grey and yellow.": the first sentence's subject is a person, but what the
text then says, of "it" and of "the <noun>" (no noun for a person), is said of a thing, and the
thing the first sentence names after the person is what the document is about: the club, not the
coach. A text about the person goes on with "he", "she", "his", "her" (or names a role of theirs:
"The coach ..."), and keeps the person as its main entity.
"""

from __future__ import annotations

import re
from typing import Callable, Collection, Sequence

from lib.knowledge.forms import _LAND, ADVERBS, AUXILIARIES, base_verb, person_role
from lib.knowledge.relations import ORDINALS, head_word, name_head, person_like
from lib.knowledge.spans import (_GENDERED, _NAME_OPENERS, _PARTICIPLES, _WORD, _zipf, PREPOSITIONS, STATIVE_PARTICIPLES, _proper_spans, _Span, capitals_label,
                                 common_word, ly_adverb, split_sentences)

# a sentence that goes on about a thing: "It was ...", "Its kit ...", "The basketball side ...", "This tree frog ...",
# also after a fronted participle's phrase ("Invented by X in Y, the device weighs ...")
_THING_LEAD = re.compile(r"^(?:[A-Z][a-z]+(?:ed|en|ing) [^,]*, )?(?:(?P<it>[Ii]ts?) [a-z]|(?:[Tt]he|[Tt]his) (?P<noun>[a-z]+)(?:['’]s)?[ ,;:])")
# what may end a lower-case head noun written after a name ("the Jiha glider in 1859", "the Miagror seed drill, which")
_AFTER_HEAD = re.compile(r"^(?:[,;:.!?)]|$| (?:in|on|at|of|for|from|with|by|to|into|near|under|and|or|but|that|which|who|whose|as|after|before|since|until)\b)")
# verbs that say where the subject is, not what it does: "lives in X", "lies in the X"
_WHERE_VERBS = {"lay", "stood", "sat", "rose", "grew", "settled", "resided", "lived", "remained", "stayed"}
_WHERE_BASES = {("live", "does"), ("lie", "does"), ("stand", "does"), ("sit", "does"), ("rise", "does"), ("reside", "does"),
                ("remain", "does"), ("stay", "does"), ("settle", "does"), ("grow", "does")}


def thing_talk(sentences: Sequence[str]) -> str | None:
    """How `sentences` (those after the first) go on about a thing: "described" where one (or a clause
    after its semicolon) opens with
    "The"/"This" and a noun that names no person and no part or event of the subject ("The basketball
    side", "This tree frog"; not "The coach", "The singer", "The first ascent"), else "it" where one
    opens with "It"/"Its" (which a firm named like a person may be as well), else None."""
    talk = None
    for sentence in sentences:
        m = _THING_LEAD.match(sentence.strip())
        m = m or next((c for c in map(_THING_LEAD.match, sentence.split("; ")[1:]) if c and c.group("noun")), None)   # "That was 1993; the formula"
        if m and m.group("it"):
            talk = "it"
        elif m and not person_role(m.group("noun")) and m.group("noun") not in ORDINALS:
            return "described"
    return talk


def described_thing(main: str, sentences: Sequence[str]) -> bool:
    """Whether a text with no "he" or "she" shows its `main` entity is a thing: the name may be no
    person's (not two or three capitalised words: "Vazudal") and a sentence opens with "The" and a
    noun for no person ("What makes Vazudal so good? ... The legend of X began long after the dish
    was first noted")."""
    return not person_like(main, set()) and thing_talk(sentences) == "described"


def named_with_head(sentence: str, span: _Span, articled: bool = True) -> str:
    """A name written after "the" with the lower-case nouns that head it ("described the Jiha glider
    in 1859" → "Jiha glider", "the Miagror seed drill, which" → "Miagror seed drill"), else the name:
    one or two words that are no verb ("seed", "reed" are nouns), adverb or function word, before a
    preposition, a conjunction, a relative pronoun or a punctuation mark. Not `articled`: also a
    name without "the", with one such noun before a punctuation mark ("the story behind Suziv
    tart?", "make it Skevu pudding."), not before more words ("Visitors to X often stop at")."""
    after_the = sentence[: span.start].endswith(("the ", "The "))
    if articled and not after_the:
        return span.text
    words = re.match(r"^((?: [a-z]{3,}(?:-[a-z]+)?){1,2})" if after_the else r"^( [a-z]{3,}(?:-[a-z]+)?)(?=[,;:.!?)]|$| and | or | but )", sentence[span.end :])
    if not words:
        return span.text
    nouns = words.group(1).split()
    for k in range(len(nouns), 0, -1):
        head = nouns[:k]
        rest = sentence[span.end + sum(len(w) + 1 for w in head) :]
        if all(head_word(w) and (base_verb(w) is None or len(w) <= 5 and w.endswith("eed")) for w in head) \
                and _AFTER_HEAD.match(rest):
            return f"{span.text} {' '.join(head)}"
    return span.text


def acted_on(between: str, values: Sequence[_Span]) -> bool:
    """Whether a name after the words `between` it and the subject is what the subject acts on or
    works with: a verb's object ("bought X", "leads the X", "to conquer X"), a noun's after one ("took
    charge of X", "kept the light at X"), a place the subject acts in ("served aboard the X"); not
    where the subject is ("was born in X", "is based in X", "lives in X", "lies in the X"), nor a
    name after a measure ("rises to 6,950 metres above sea level in the X")."""
    words = re.findall(r"[A-Za-z'’-]+|\d[\d,.]*", between)
    if words[-1:] == ["the"]:
        words = words[:-1]
    if not words or any(w[:1].isdigit() for w in words) or values and any(v.text in between for v in values):
        return False
    if words[-1] not in PREPOSITIONS or len(words) < 2:
        return True
    verb = words[-2].lower()
    return not (verb in _PARTICIPLES or verb in STATIVE_PARTICIPLES or verb in _WHERE_VERBS or base_verb(verb) in _WHERE_BASES)

# the subject's apposition, a noun phrase ("X, an engineer who joined Y, ..."): its names are what the subject
# is, not what it acts on (a relative clause is: "X, who took over the Y, ...")
_APPOSITION = re.compile(r"^, (?:an?|the) [^,]*, ")


def thing_topic(sentence: str, subj_end: int, propers: Sequence[_Span], values: Sequence[_Span], subject: str,
                later: Sequence[str], thing: Callable[[str], bool], gendered: bool = False, told: bool = False) -> str | None:
    """The thing a document is about where its first sentence's subject (`subject`, a name like a
    person's in a text with no "he" or "she") acts on it and the `later` sentences go on about a
    thing (`thing_talk`): the first name after the subject ("Hapis Beipai took charge of Krirak
    Albion", "... to conquer Mount Zeigrol", "described the Jiha glider in 1859"), with its head noun,
    past the subject's apposition ("X, an engineer who joined Y, conceived the Sigre pressure gauge");
    where the text only says "it", a name the text shows is a thing (`thing`: "bought the Coudail
    Brewing Company", "the Miagror seed drill"; not "Kell Brask bought Vask Mills. It employs ...",
    where Kell Brask may be the firm). Where the subject is a thing itself (a firm: "Lonun Systems is
    pleased to introduce the Ridias knee brace. ... the device weighs"), only a thing named with its
    head noun. A name a colon presents at the end of the sentence is the topic whatever follows ("X
    has one dish everyone orders: Keskolos.", "X sent a new freighter down its slipway: the Diprus
    Kabask. Today she ..."), not a label's value ("X — origin: the Y Highlands."); otherwise none in
    a text that says "he" or "she" (`gendered`: the person's). `told`: the sentence is the clause
    that opened it ("When Zaikram Shipworks launched the Bakrobix in 1972, few expected her to
    last": `shapes.fronted_clause`), told for what the subject did to the thing the text is about:
    the first name it acts on, however the text goes on. None where there is none."""
    last = propers[-1] if propers else None
    presented = last is not None and last.start >= subj_end and re.search(r"(?:\w+ ){3,}\w+: (?P<the>the )?$", sentence[subj_end : last.start])
    if presented and sentence[last.end :].strip() in ("", ".", "!") and (presented.group("the") or not person_like(last.text, set())):
        return named_with_head(sentence, last)    # a person's name after a colon ("Its founder: Ada Lind.") is no topic
    talk = "described" if told else thing_talk(later) if not gendered else None
    if talk is None:
        return None
    person = person_like(subject, set()) and not thing(subject)
    appos = _APPOSITION.match(sentence[subj_end:])     # "X, an engineer who joined Y straight out of school, conceived the Z"
    for p in propers:
        if p.start < subj_end + (appos.end() if appos else 0) or p.text in subject or subject in p.text or sentence[p.end :].startswith(("'s", "’s")):
            continue
        if not acted_on(sentence[subj_end : p.start], values):
            return None
        name = named_with_head(sentence, p)
        if not person and name == p.text and not told and not re.match(r", (?:an?|the) [a-z]", sentence[p.end :]):
            return None                            # a firm's text about a thing it made names the thing with its noun, or types it
                                                   # ("X is proud to announce Y, the long-awaited new album from Z, ...")
        if talk == "described" or name != p.text or sentence[: p.start].endswith(("the ", "The ")) or thing(name):
            return name
        return None
    return None


def modified_description(sentence: str, name: str, noun: str, before: str, mentions: list[tuple[str, str]],
                         types: dict[str, set[str]], last: str | None) -> str:
    """What "The <Name> <noun>" opening a sentence means: a name the text has not written `before`,
    with a noun, is an entity named before described by a word of where it is from: the latest one
    typed with the noun, else, where the last subject may be a person and the noun names none, the
    first name after that subject ("Hair Rezix has run Holenly since 2006. The Lodrourk company
    sells ...": Holenly); else the name with its noun ("The Nuheind creeper is")."""
    named = f"{name} {noun}"
    if not sentence.startswith("The ") or name in before or last is None:
        return named
    typed = next((m for m, _ in reversed(mentions) if noun in types.get(m, ())), None)
    if typed is not None:
        return typed
    k = max((i for i, (_, how) in enumerate(mentions) if how == "subject"), default=len(mentions))
    since = [m for m, _ in mentions[k + 1 :] if m != last and name not in m]
    return since[0] if since and person_like(last, set()) and not person_role(noun) else named


# "The bulk carrier ", "The rugby club ", "A young perfumer ": an article and lower-case nouns before a name
_ADJECTIVES = {"old", "new", "big", "small", "great", "little", "young", "tiny", "huge", "large", "long", "short", "local", "popular",
               "former", "current", "late", "early", "main", "original", "historic", "ancient", "modern", "beloved", "legendary",
               "renowned", "celebrated", "humble", "quiet", "busy", "annual", "whole", "same", "other", "real", "official"}
_TYPED_PREFIX = re.compile(r"(?:The|A|An) (?P<nouns>(?:[a-z][a-z-]+ ){1,3})|(?:The|Their|Its|His|Her|Our|My) (?:[a-z][a-z-]+ ){0,2}(?P<noun>[a-z][a-z-]+), (?:the )?")


def typed_name(sentence: str, name: _Span) -> str | None:
    """The noun that types a name opening `sentence` after an article and lower-case words, where
    the name is the sentence's subject (a verb or a comma follows it): "The bulk carrier Boprav
    Kraidouv docked at ..." → "carrier", "The rugby club FC Wagri was established" → "club", the
    name set off as the noun's apposition: "The result, the Binvrei Bridge, opened in" → "result"; None
    where the words are no nouns ("The first Rikler Festival", "The newly opened X") or a verb does
    not follow."""
    m = _TYPED_PREFIX.fullmatch(sentence[: name.start])
    if not m or sentence[name.end :].startswith(("'s", "’s")) or m.group("noun") and not sentence[name.end :].startswith(", "):
        return None
    nouns = (m.group("nouns") or m.group("noun")).split()
    if any(not head_word(w) or w in ORDINALS or w.endswith(("ly", "ing"))
           or base_verb(w) is not None and not w.endswith("s") for w in nouns):
        return None
    if nouns[-1] in _ADJECTIVES or nouns[-1].endswith(("ous", "ful", "ive", "ic", "able", "ible", "less", "ish", "ese", "est")):
        return None                                  # "The old Drosk Bridge spans": an adjective, no type
    nxt = re.match(r"^(?:, | (?P<w>[a-z]+)\b)", sentence[name.end :])
    if not nxt or nxt.group("w") and not (nxt.group("w") in AUXILIARIES or nxt.group("w") in ADVERBS or base_verb(nxt.group("w")) is not None):
        return None
    return nouns[-1]


_PLACE_BEFORE = re.compile(r"\b(?:from|in|at|near|around|of|across|over) (?:the )?$")


# between a thing and the name of where it stands: " up on ", " on the ", " near "
_WHERE_AFTER = re.compile(r" (?:up |high |just )?(?:on|upon|near|above|atop|outside|beside|overlooking) (?:the )?")


# a description that a copula identifies with the name after it: "The scent that made X's name was "
_CLEFT = re.compile(r"^The (?:[a-z]+ )?(?P<noun>[a-z]+) (?:that|which|who|whose) [^,;]*? (?:was|is) (?:the )?$")


def named_thing(sentence: str, propers: Sequence[_Span], articled: set[str], words: set[str], opening: bool = False) -> tuple[str, bool] | None:
    """(name, whether the text is about it) of the thing a sentence without a subject names, for a
    document no sentence has given a subject yet: what "it" and "the <noun>" then mean. A name of
    one word with its noun ("Meet the Miagror seed drill.", "Ever tried Drell cake?"); else a name
    written after "the", built on one of `words` (those the texts write in lower case, or that end
    several names), or described by an apposition ("miss Brufeik Dome, a giant"): the last one after
    no "of" (a name after "of" is another noun's: "call Lefaund Dome the old giant of the Peigasir
    Highlands. It ...": the dome), else the last ("the sale of the Pouskaipum. The ship"), what the
    text is about unless it stands in a fronted phrase ("Part of the X, the peak ..."); the one name of
    a question ("What makes Vazudal so good?") or of the text's `opening` sentence ("Nobody knows who
    invented Kunoval."), no acronym and no name like a person's ("Visitors meet Ada Lind"); the one
    name outside a place phrase, after every such thing, where each is in one ("eat one thing in X,
    make it Y": Y; not "Visitors to Y often stop at the X"); the name a description of no person is
    (a cleft: "The scent that made X's name was Y, which ...": Y). None where the sentence names no such thing."""
    cleft = next((p for p in propers if (m := _CLEFT.match(sentence[: p.start])) and not person_role(m.group("noun"))), None)
    if cleft:                              # "The scent that made X's name was Torfost Dutork, which ...": the scent
        return named_with_head(sentence, cleft), True
    headed = [t for p in propers if " " not in p.text and (t := named_with_head(sentence, p, articled=False)) != p.text]
    if headed:
        return headed[-1], True
    things = [p for p in propers if p.text in articled or name_head(p.text) in words or re.match(r", (?:a|an) [a-z]", sentence[p.end :])]
    unplaced = [p for p in propers if not _PLACE_BEFORE.search(sentence[: p.start])]
    if things and len(unplaced) == 1 and unplaced[0].start > things[-1].end and all(_PLACE_BEFORE.search(sentence[: p.start]) for p in things) \
            and not unplaced[0].text.isupper() and not person_like(unplaced[0].text, set()):
        return unplaced[0].text, True      # "If you only eat one thing in Druthun Province, make it Raibruhor.": where, and what
    if not things:
        # a question that names one name opens a text about it ("What makes Vazudal so good?", "Have
        # you met Ada Lind?"), whatever it names; not a place it asks from ("the dome you can see from X?")
        lone = len(propers) == 1 and (sentence.rstrip().endswith("?") or opening and not propers[0].text.isupper()
                                      and not person_like(propers[0].text, set()))
        return (propers[0].text, True) if lone and not _PLACE_BEFORE.search(sentence[: propers[0].start]) else None
    free = [p for p in things if not re.search(r"\bof (?:the )?$", sentence[: p.start])]
    # "a night at Osmiri Station up on Korva Ridge": the ridge is where the station is, not the thing
    free = [p for k, p in enumerate(free) if not (k and _WHERE_AFTER.fullmatch(sentence[free[k - 1].end : p.start]))] if free else free
    thing = (free or things)[-1]
    return thing.text, bool(free) or not sentence[thing.end :].startswith(",")


def unnamed_it(text: str, mentioned: Sequence[tuple[str, str]], persons: Collection[str], besides: str | None = None) -> str | None:
    """What "it" means where no sentence of `text` has had a subject yet: the one name the text has
    `mentioned` so far, never one after a preposition of place ("the rose garden in Pell? X planted
    it"), no person it shows (`persons`) and not `besides` ("Gonna throw X into the ring. ... It came
    out in 2014", "In X, four players chart ... Y released it in 1987": X); None where it has
    mentioned two or more ("says X, the scent Y brought out in 1935. It retails at": which, no rule knows)."""
    names = {name for name, _ in mentioned if name not in persons and name != besides
             and not re.search(rf"\b(?:in|at|near|from|to|on) (?:the )?{re.escape(name)}\b", text)}
    return names.pop() if len(names) == 1 else None


# nouns that type a place, which an apposition names where the thing is
_PLACE_NOUNS = _LAND | {"town", "city", "village", "hamlet", "port", "harbour", "suburb", "parish", "borough", "capital", "street",
                        "road", "lane", "square", "neighbourhood", "quarter", "country", "state", "area"}
# a name spoken to, not spoken of: "Q: Kestrel, The Oriel Descent turns forty", "Jeleid Tousbyrn, tell us how X came about"
_ADDRESSED = re.compile(r"^, (?:you|tell|what|how|when|why|where|who|can|could|would|do|did|is|are|was|so|thanks|thank)\b", re.I)
# a thing typed by the noun phrase after it: "Ninefold Meridian, the album Bellfounder Records issued", "Zitei Gardens, a
# 2-bedroom apartment", "Raniark Mews, a beautifully refurbished 39-bedroom student block"
_TYPED_AFTER = re.compile(r"^,? (?:an?|the) (?:[a-z0-9][\w'’-]* ){0,4}?(?P<noun>[a-z][a-z-]+)"
                          r"(?= (?:that|which|whose|of|from|by|with|in|on|at|for|and|but|where|when|[A-Z])\b|[,.;:!?()]|$)")
# where a name stands after these, it is where something is or whom it is with, not what the text is about
_AROUND = re.compile(r"\b(?:in|near|outside|around|across|from|(?<!been )(?<!going )(?<!get )(?<!got )to|along|opposite)(?: the)? $")
_WITH_PERSON = re.compile(r"(?:\b(?:called|named|by|with)\s*|\(\s*)$")
# a thing the text names by what it is called: "It's called the Aviary of Springs", "a little museum called X"
_CALLED = re.compile(r"(?:\b[Ii]t(?:['’]s| is| was)|\b(?P<noun>[a-z]{3,})) (?:called|named) (?:the )?$")
_TOPIC_WORDS = re.compile(r"\b(?:about|re|regarding|concerning|Re:)(?: the)? $")
# a label that names what a record, a listing or an agenda item is: "Title: X [game] / ...", "Demo: X", "Item 4: X."
_TOPIC_LABEL = re.compile(r"^(?:Title|Subject|Topic|Demo|Item \d+|Listing history for|Listing for)\s*[:.]?\s*(?:the )?$", re.I)


def document_topic(text: str, lowercase_words: set[str], main: str | None) -> str | None:
    """The name a document is about where the first subject extraction found (`main`) is likely not
    it, else None. A title line over the text's fields ("Thistledown Avenue\nStudio album by ...") is
    its topic whatever `main` is (not a person's card that says he or she). Otherwise only where
    `main` is weak: none, a word or label rather than a name ("Traffic", "Voicemail", "HQ", "PUB
    QUIZ", "Jovumest Therapeutics today"), or a name like a person's:
    - a later "the <noun>" names exactly one name of the text by its last word ("The bridge, whose
      span ..." after "Stonbund Jokrothath, the engineer behind the Flabisush Footbridge, has died";
      "the festival" → Siralax Festival), not in a text that says "he" or "she" of a person's main;
    - the person is spoken to ("Q: Kestrel, The Oriel Descent turns forty"): the next name;
    - a record's label names it ("Title: X", "Demo: X", "Item 4: X");
    - a name typed by the noun phrase after it ("Zitei Gardens, a 2-bedroom apartment"), where the
      main is no name or, in a text that says no "he" or "she", a person's;
    - for no main or a word: the name after "about", "re", "regarding" ("Notes - call re Fennoric
      Data", "Quick one about the Kasom retreat"); for no main or one word, the first name that is
      not where something is ("in X", "from X") or someone's ("owner called X", "(X)", "X said"),
      a person-like name only after "at" ("Stopped at Bodega Seeir").
    A night asks a document's facts of its main entity: a text about a winery whose first sentence
    begins with its founder's name files the hectares under the founder, and a question about the
    winery does not reach them."""
    gendered = any(w.lower() in _GENDERED for w in _WORD.findall(text))
    title = re.match(r"^\s*(?P<name>[^\n]+?)(?:: (?:a|an|the) [a-z ]+)?[.:]?\s*\n", text)   # "Thistledown Avenue\nStudio album by ...", "X: a timeline\n"
    if title and (spans := _proper_spans(title.group("name"), lowercase_words)) and len(spans) == 1 \
            and spans[0].text == title.group("name") and not _weak_name(spans[0].text) and not (gendered and person_like(spans[0].text, set())):
        return spans[0].text                     # its topic even where it is the first subject: what no rule reads is asked of it
    none = _weak_name(main) or _passing_word(main, text) or _only_placed(main, text)
    names = []   # (name with its head noun, sentence, span), names that are no word or label
    for s, e in split_sentences(text):
        sentence = text[s:e]
        names += [(named_with_head(sentence, sp), sentence, sp) for sp in _proper_spans(sentence, lowercase_words)
                  if not _weak_name(sp.text) and not _passing_word(sp.text, text)]
    if main:                                     # a person spoken to is not spoken of: the next name is
        for n, sentence, sp in names:
            if sp.text == main and _SPEAKER.fullmatch(sentence[: sp.start]) and _ADDRESSED.match(sentence[sp.end :]):
                k = next(j for j, (_, s2, p) in enumerate(names) if p is sp)
                after = [m for m, s2, p in names[k + 1 :] if m != main and not (s2 is sentence and p.start < sp.end)]
                return after[0] if after else None     # the next name, in its sentence or a later one
    if not none and not person_like(main, set()):
        return None

    def other(name: str) -> str | None:
        return name if main is None or not (name == main or main in name or name in main) else None

    if not (gendered and main and person_like(main, set())):
        for noun in dict.fromkeys(re.findall(r"\b[Tt]he ([a-z]{4,})\b", text)):
            named = {n for n, _, _ in names if n.split()[-1].lower().endswith(noun)}
            if not person_role(noun) and len(named) == 1 and (found := other(named.pop())):
                return found
    for n, sentence, sp in names:
        if _TOPIC_LABEL.match(sentence[: sp.start].lstrip()) and (found := other(n)):
            return found
    if none or not gendered and not _thing_worded(main):      # a thing's name ("Jostar Bridge") keeps its text
        for n, sentence, sp in names:
            typed = _TYPED_AFTER.match(sentence[sp.end :])
            noun = typed.group("noun").split("-")[-1] if typed else ""
            if typed and not person_role(noun) and common_word(noun) and not noun.endswith(("ed", "en", "ing")) \
                    and noun not in _PLACE_NOUNS:      # "in Brantlewick, a market town": where it is, not what
                return other(n)
    if not none:
        return None
    opening = split_sentences(text)[:3]
    for n, sentence, sp in names:
        if text.find(sentence) >= (opening[-1][1] if opening else 0):
            break
        if (_TOPIC_WORDS.search(sentence[: sp.start]) or (called := _CALLED.search(sentence[: sp.start]))
                and not person_role(called.group("noun") or "person")) and (found := other(n)):
            return found
    if main is None or " " not in main or main.isupper():   # no main, a word ("Just back from ..."), a heading: the first name no one's and nowhere's
        for n, sentence, sp in names:
            before, word = sentence[: sp.start], re.search(r"\b([a-z]+)\W*$", sentence[: sp.start])
            if _AROUND.search(before) or _WITH_PERSON.search(before) or word and person_role(word.group(1)) \
                    or re.match(r"^(?:,? who\b| said\b| says\b|:)", sentence[sp.end :]) or person_like(n, set()) and not _thing_worded(n) and not before.endswith(" at "):
                continue
            return n
    return None


# how common the last word of a name must be for the name to be a thing's ("Kyrfas Mill" 4.4, "Skaxpor Wharf" 3.5,
# "Trellvane Station" 5.0), not a person's ("Ada Lind" 2.8, "Ola Voss" 3.2)
THING_WORD_ZIPF = 3.4


def _thing_worded(name: str) -> bool:
    """Whether a name like a person's is built as a thing's: its first word one that begins names of
    places ("Mount Yohor"), or its last an everyday noun (`THING_WORD_ZIPF`: "Kyrfas Mill")."""
    words = name.split()
    return words[0].lower() in _NAME_OPENERS or _zipf(words[-1]) >= THING_WORD_ZIPF


def _passing_word(main: str | None, text: str) -> bool:
    """A main entity of one word the text writes once and English uses (wordfreq at least
    `PASSING_ZIPF`: "Spectators gathered ...", "Section A: Applicant", "Voicemail received"): a word
    in passing, not the name a text about it repeats."""
    return main is not None and " " not in main and _zipf(main) >= PASSING_ZIPF and len(re.findall(rf"\b{re.escape(main)}\b", text)) == 1


PASSING_ZIPF = 3.0
def _only_placed(main: str | None, text: str) -> bool:
    """A main entity of one word the text names only after "in" or "near" ("Any bat groups near
    Widdenhope? ... We meet in Widdenhope"): a place, not what the text is about."""
    if not main:
        return False
    at = [m.start() for m in re.finditer(rf"(?<![\w'’-]){re.escape(main)}(?![\w'’-])", text)]
    return bool(at) and " " not in main and all(re.search(r"\b(?:in|near)\s+$", text[:k]) for k in at)


# what may stand before a name spoken to: a speaker's label, "Q:", "...and", "so"
_SPEAKER = re.compile(r"(?:(?:Q|[A-Z][A-Z ]*\d*):\s*)?(?:\.\.\.\s*)?(?:(?:and|so|well|now),? )?")
_WEEKDAYS = {"Mon", "Tue", "Tues", "Wed", "Weds", "Thu", "Thur", "Thurs", "Fri", "Sat", "Sun"}


def _weak_name(name: str | None) -> bool:
    """Whether a main entity is no name: none, one everyday word ("Traffic", "Voicemail"), a label in
    capitals ("PUB QUIZ", "HQ"), or words with a lower-case word after the first ("Jovumest
    Therapeutics today", "Trodwelath average")."""
    if name is None:
        return True
    words = name.split()
    return len(words) == 1 and (common_word(words[0]) or words[0] in _WEEKDAYS) or capitals_label(words[0]) or name.isupper() \
        or ly_adverb(words[0]) \
        or any(w.islower() and w not in ("of", "de", "la", "and", "the", "&") for w in words[1:])
