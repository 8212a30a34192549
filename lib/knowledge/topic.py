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

from lib.knowledge.forms import ADVERBS, AUXILIARIES, base_verb, person_role
from lib.knowledge.relations import ORDINALS, head_word, name_head, person_like
from lib.knowledge.spans import _PARTICIPLES, PREPOSITIONS, STATIVE_PARTICIPLES, _Span

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
