"""How a fact's relation is cut from its sentence (lib/knowledge/facts.py uses it): the answer's own
clause (`last_clause`, `without_answers`, `possessive`), pronouns named in full (`_resolve`), and
what a definite description ("The novel ...") refers to (`_referent`)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Sequence

from lib.knowledge.forms import _PERSON_NOUNS, ADVERBS, AUXILIARIES, _agent_noun, base_verb, person_role
from lib.knowledge.spans import _NOT_UNITS, _PARTICIPLES, PREPOSITIONS, _Span, _proper_spans, common_word, ly_adverb, split_sentences


def _resolve(relation: str, person: str | None, thing: str | None = None) -> str:
    """Object pronouns in a relation named in full: "hired her in" → "hired Mara Quillon in"; with
    `thing` (the entity before a newly named subject), "has been its mayor since" → "has been
    Elmsby's mayor since"."""
    if thing is not None:
        relation = re.sub(r"\b(?:its|their)\b", thing + "'s", relation)
    if person is None:
        return relation

    def sub(m):
        w = m.group(0).lower()
        if w in ("him", "her"):
            return person
        if w in ("his",):
            return person + "'s"
        return m.group(0)

    return re.sub(r"\b(?:him|her|his)\b", sub, relation)


# a subordinate clause whose pronoun is the sentence's subject: "grew up in Oslo, where she was born
# in", "flows for 96 kilometres before it reaches the sea at"
_WHERE_CLAUSE = re.compile(r",? (?:where|when|before|after|until|while|because|once) (?:he|she|they|it) ", re.IGNORECASE)


# a fronted phrase about the subject's own thing: "From its source in the", "Through her work at"
_FRONTED_OWN = re.compile(r"^(?:[A-Z][a-z]+) (?:its|his|her|their) (?P<noun>[a-z]+(?: [a-z]+)?) (?P<prep>in|at|on|near|by|with|for|under)(?: (?P<art>the|a|an))? ")
_PREPOSITIONS = ("in", "on", "at", "by", "of", "from", "for", "to", "with", "under", "near", "into")


def without_answers(relation: str, answers: Sequence[str]) -> str:
    """The relation without the earlier answers its sentence states inside it, each with the
    preposition before it: "was launched in 1979 from the yard of" → "was launched from the yard
    of"; "worked for Brill Tanneries in Harrow until" → "worked until"; "in Kell was laid out in" →
    "was laid out in". Kept where the removal would leave the answer's own relation ("was born in
    Oslo in" stays: "was born in" is the relation of Oslo itself, and two answers of one subject
    must not share it). An
    article between the preposition and the answer goes with them ("rises in the Oska Hills and").
    An answer that names the noun after it stays ("lies in the Zigriark district of"); a verb or a
    preposition after it is no noun ("The X in Y was opened by", "was fought on 8 May 1552 between")."""
    for answer in answers:
        m = re.search(r"(?:^|\s)(?P<prep>" + "|".join(_PREPOSITIONS) + r")\s+(?:the\s+|a\s+|an\s+)?" + re.escape(answer) + r"(?=[\s,;]|$)", relation)
        noun = re.match(r" ([a-z]+)", relation[m.end() :]) if m else None
        if noun and noun.group(1) not in _NOUN_STOP and noun.group(1) not in ("while", "until", "because", "once") \
                and noun.group(1) not in AUXILIARIES and base_verb(noun.group(1)) is None:
            continue                        # "lies in the Zigriark district of": the answer names the noun after it
        if m and (relation[: m.start()] + " " + m.group("prep")).split() != (relation[: m.start()] + " " + relation[m.end() :]).split():
            relation = relation[: m.start()] + " " + relation[m.end():]
    return re.sub(r"\s+,", ",", " ".join(relation.split()))


def possessive(relation: str) -> str:
    """A "whose" clause as the subject's own: "is a cargo ship whose home port is" → "'s home port
    is" (the question then asks for the subject's home port, not for "a cargo ship whose ...")."""
    head, sep, tail = relation.partition(" whose ")
    return f"'s {tail}" if sep and tail and head.split()[:1] and head.split()[0] in ("is", "was") else relation


def last_clause(relation: str) -> str:
    """The relation's own clause, without the clauses chained before it: "studied music theory
    and later worked for" → "later worked for"; "was built by X Yards and launched in" → "was
    launched in" (the auxiliary carried over); "grew up in Oslo, where she was born in" → "was
    born in". Unchanged when the tail does not start with a verb."""
    m = None
    for m in _WHERE_CLAUSE.finditer(relation):
        pass
    if m is not None and m.end() < len(relation):
        return relation[m.end():]
    head, sep, tail = relation.rpartition(" and ")
    words = tail.split()
    verbs = [w for w in words if w.lower() not in ADVERBS]
    if not sep or not verbs or not verbs[0][:1].islower():
        return _listed_clause(relation)
    if verbs[0] in AUXILIARIES:
        return tail
    if verbs[0] in ("a", "an", "the"):
        return _second_object(head, tail) or _listed_clause(relation)
    if base_verb(verbs[0]) is None:
        return _listed_clause(relation)
    aux = head.split()[0] if head.split() and head.split()[0] in AUXILIARIES else ""
    return f"{aux} {tail}".strip() if aux and (verbs[0].endswith("ed") or verbs[0] in _PARTICIPLES) else tail


def _second_object(head: str, tail: str) -> str | None:
    """ "has a hardness of" for "has a melting point of 1397 °C and" + "a hardness of": a second
    object of the verb the first one follows at once (the first object's answer is not this one's
    question); None where a preposition comes between the verb and the first object ("lies
    between the Vask and the")."""
    words = head.split()
    k = next((i for i, w in enumerate(words) if w in ("a", "an", "the")), 0)
    verbs = words[:k]
    if not verbs or not all(w in AUXILIARIES or w in ADVERBS or base_verb(w) is not None for w in verbs):
        return None
    return f"{' '.join(verbs)} {tail}"


def _listed_clause(relation: str) -> str:
    """The last of verb phrases listed with commas: "is deep red, has a melting point of" → "has
    a melting point of"; "is a novel, published in" → "is published in" (a participle after a
    copula takes the copula). A participle after any other verb describes that verb's object
    ("carries a crew, led by") and the relation stays whole, as it does when nothing after the
    comma is a verb."""
    head, sep, tail = relation.rpartition(", ")
    verbs = [w for w in tail.split() if w.lower() not in ADVERBS]
    if not sep or not head or not verbs or not verbs[0][:1].islower():
        return relation
    if verbs[0] in AUXILIARIES:
        return tail
    lone = base_verb(head) if len(head.split()) == 1 else None
    if lone and (verbs[0] in _PARTICIPLES or verbs[0].endswith("ed")):
        # "sailed, bound for": a participle after a verb with no object describes the subject
        return f"{'was' if lone[1] == 'did' else 'is'} {tail}"
    base = base_verb(verbs[0])
    if base is None:
        return relation
    if base[1] == "does":
        return tail                                 # "has", "occurs in": a finite verb of its own
    first = head.split()[0]
    if first in ("is", "was", "are", "were"):
        return f"{first} {tail}"
    return relation


_OF_HEAD = re.compile(r"^(?:(?:The|the) )?(?:(?P<ord>first|second|third|last|latest|earliest|original) )?(?P<noun>[A-Za-z]+)"
                      r"(?: (?P<num>\d+(?:\.\d+)*))? of $")
# an ordinal before a noun names one of an entity's things or events ("The first ascent", "the second album"), never the entity
ORDINALS = {"first", "second", "third", "fourth", "fifth", "last", "latest", "earliest", "original"}
# ", a maker of tiles," / ", which is twinned with Y," / ", named in honour of Y," (a participle) / ", under Y," (a preposition)
_PARENTHETICAL = re.compile(r"^,\s+(?P<inner>(?P<lead>which|who|a|an|the|one|" + "|".join(sorted(_PARTICIPLES)) + r"|[a-z]{3,}ed"
                            r"|under|with|alongside|like|unlike|despite)\b[^,]*?),\s+(?=[a-z])")
PARENTHESIS_PREPOSITIONS = {"under", "with", "alongside", "like", "unlike", "despite"}
# a clause of its own whose subject is a pronoun, perhaps after a time phrase (", and since 1993 it has")
_PRONOUN_CLAUSE = re.compile(r"(?:,? and|,? but|;)\s+(?:(?:since|in|on|from|until|after|before|during|by) [^,;]+?,?\s+)?(?P<pro>it|they|he|she)\s+(?=[a-z])|, (?:and|but) (?P<pos>its|their|his|her)\s+(?=[a-z])")
_COPULA = {"is", "was", "are", "were"}


def _pronoun_clause(relation: str) -> tuple[str, str, str] | None:
    """("", "has a population of", "it") for "'s mayor is X, and it has a population of"; ("'s",
    "current mayor is", "its") for "was granted a charter, and its current mayor is": a clause of its
    own whose pronoun is the sentence's subject (or, for "it", the thing a person subject acts on:
    `it_referent`); None when the relation has none."""
    m = None
    for m in _PRONOUN_CLAUSE.finditer(relation):
        pass
    if m is None or m.end() >= len(relation):
        return None
    return ("'s" if m.group("pos") else ""), relation[m.end():], m.group("pos") or m.group("pro")


_DESCRIBED_CLAUSE = re.compile(r"(?:, (?:and|but)|;) the (?P<ord>(?:first|second|third|last|latest|next) )?(?P<noun>[a-z]+) (?P<rest>[a-z].*)$")


def described_clause(relation: str, mentions: list[tuple[str, str]], types: dict[str, set[str]],
                     main: str | None = None, answer: str = "") -> tuple[str, str] | None:
    """(entity, relation) of a coordinated clause whose subject is a description of a named entity:
    "was designed by X, and the airport serves about" → (Kell Airport, "serves about"), the noun
    one the text typed the entity with or its name's head word (`name_head`); a noun no entity was
    typed with is the `main` entity's (a thing the text is about) after a copula or an ordinal: ",
    and the client is Y" → (main, "'s client is"), ", and the first release goes out on" → (main,
    "'s first release goes out on"; the `answer` itself, typed by the clause, is no such entity); None elsewhere (", and the crew reached": no entity is a crew)."""
    m = None
    for m in _DESCRIBED_CLAUSE.finditer(relation):
        pass
    if m is None or "," in m.group("rest"):
        return None
    verb = m.group("rest").split()[0]
    if not (verb in AUXILIARIES or verb in ADVERBS or base_verb(verb) is not None):
        return None
    noun = m.group("noun")
    entity = next((name for name, _ in reversed(mentions) if name != answer and (noun in types.get(name, ()) or name_head(name) == noun)), None)
    if entity is None and main and (verb in _COPULA or m.group("ord")) and not any(noun in t for x, t in types.items() if x != answer):
        return main, f"'s {m.group('ord') or ''}{noun} {m.group('rest')}".replace("  ", " ")   # ", and the client is": the main entity's
    return (entity, m.group("rest")) if entity else None


# -- what a definite description ("The novel ...") refers to -----------------------------------------
_NOUN_STOP = PREPOSITIONS | {"close", "next", "north", "south", "east", "west", "whose", "which", "who", "that", "where", "when", "and",
                            "or", "but", "as", "since", "after", "before", "during", "beneath", "without", "the", "a", "an"}
_TYPED = re.compile(r"^(?:,\s+(?:which|who)\s+|\s+)(?:is|was|are|were)\s+(?:a|an|the)\s+(?P<rest>.*)$|^,\s+(?:a|an|the)\s+(?P<appos>.*)$")
_ROLE_BEFORE = re.compile(r"(?:['’]s|\b(?:[Ii]ts|[Tt]heir|[Hh]is|[Hh]er|[Tt]he))\s+(?:[a-z]+\s+){0,2}?(?P<noun>[a-z]+)\s+(?:is|was|are|were)\s*$")


def _head_noun(text: str) -> str | None:
    """The head of the noun phrase that opens `text`: "small town on the River Hien" → "town",
    "novel, published in" → "novel", "folk group led by" → "group"; None when it opens with no
    lower-case word."""
    head = None
    for w in text.split():
        bare = w.rstrip(",;:.")
        if not bare.isalpha() or not bare.islower() or bare in _NOUN_STOP or bare in _PARTICIPLES \
                or (head is not None and len(bare) > 4 and bare.endswith("ed")):
            break
        head = bare
        if bare != w:
            break
    return head


def _subject_type(rest: str) -> str | None:
    """The noun the sentence types its subject with, from the text after the subject: " is a novel
    by" → "novel", ", a maker of tiles" → "maker", ", which is a port" → "port"."""
    m = _TYPED.match(rest)
    if not m:
        return None
    return _head_noun(m.group("rest") if m.group("rest") is not None else m.group("appos"))


def _object_role(sentence: str, span: _Span) -> tuple[str, str | None]:
    """How a name after the subject is introduced: ("direct", None) right after a verb ("wrote The
    Nuzel Road"), ("taken", None) after a verb and "the" ("leads the Varo Ensemble"); ("object", noun) after a common noun ("the novel X", "album, X,", "singer X"), a
    role ("Its builder was X"), or before an apposition ("X, a novel by"); ("object", None) after a
    preposition or anything else."""
    before = sentence[: span.start]
    role, noun = "object", None
    m = re.search(r"(?:^|\s)(?P<w>[A-Za-z'’]+)(?P<comma>,?)\s*$", before)
    the = re.search(r"\b(?P<w>[a-z]+) the $", before)
    if the and base_verb(the.group("w")) is not None and the.group("w") not in AUXILIARIES:
        role = "taken"                      # "won the Kell Cup": a verb's object, which "The team" may not mean
    if m and m.group("w").islower():
        w = m.group("w")
        if w in _COPULA:
            r = _ROLE_BEFORE.search(before)
            noun = r.group("noun") if r else None
        elif w in _NOUN_STOP or w in ("the", "a", "an") or w in AUXILIARIES or w in ADVERBS:
            pass
        elif base_verb(w) is not None:
            role = "direct" if not m.group("comma") else "object"
        else:
            noun = w
    after = re.match(r",\s+(?:a|an|the)\s+(?P<rest>.*)$", sentence[span.end :])
    if after and noun is None:
        noun = _head_noun(after.group("rest"))
    return role, noun


def name_head(name: str) -> str:
    """The common noun a name is built on, in lower case: its last word ("Truvair Bridge" →
    "bridge"), or its first before "of" ("Battle of Kell" → "battle", "Bank of Ostra" → "bank")."""
    words = name.split()
    if len(words) > 2 and words[1] == "of":
        return words[0].lower()
    return words[-1].lower()


def person_like(name: str, things: set[str]) -> bool:
    """Whether a name may be a person's ("Ada Lind"): two or three capitalised words of letters, no
    acronym among them ("Fawouss RFC"), none of the `things` (`thing_like`)."""
    words = name.split()
    return name not in things and 2 <= len(words) <= 3 and all(w[:1].isupper() and w.isalpha() and not w.isupper() for w in words)


def thing_like(name: str, articled: set[str], types: dict[str, set[str]], lowercase_words: set[str]) -> bool:
    """Whether the text shows a name is no person's: written after "the" (`articled`: "leads the Varo
    Ensemble"), typed with a noun that names no agent ("X is a brewery"), or built on a word the
    texts write in lower case ("Kell Airport": "the airport")."""
    return name in articled or any(not _agent_noun(x) and x not in _PERSON_NOUNS for x in types.get(name, ())) \
        or name.split()[-1].lower() in lowercase_words


_ROLE_IS = re.compile(r"^'s (?:[a-z-]+ ){0,2}(?P<noun>[a-z]+) (?:is|was)$")
_HOLDS_ROLE = re.compile(r"^(?:became|is|was|has been|had been|has served as|served as|serves as) (?:the )?[^']*'s (?:[a-z-]+ ){0,2}?(?P<noun>[a-z]+)(?: [a-z]+)?$")


def role_holder(subject: str, relation: str, answer: str) -> tuple[str, str] | None:
    """(name, role) of a person a fact shows: the answer of "'s artistic director is" ("Its artistic
    director is X": X, "director"), the subject of "became Kell Airport's director in" or of "was
    born in" (no role)."""
    m = _ROLE_IS.match(relation)
    if m and (_agent_noun(m.group("noun")) or m.group("noun") in _PERSON_NOUNS):
        return answer, m.group("noun")
    m = _HOLDS_ROLE.match(relation)
    if m and (_agent_noun(m.group("noun")) or m.group("noun") in _PERSON_NOUNS):
        return subject, m.group("noun")
    return (subject, "") if relation.startswith("was born") else None


def it_referent(last: str, mentions: list[tuple[str, str]], persons: set[str], things: set[str], known: frozenset[str] = frozenset()) -> str:
    """What "it"/"its" refers to: the last subject, unless that may be a person (`persons`), whom
    "it" never names, and a thing (`things`) stands near: the latest thing a verb took since
    ("Ada Lind leads the Varo Ensemble. Its home is ...": the ensemble), else the latest thing
    subject before ("The X is ... Ada Lind became its director, and it handles ...": X), else the
    latest thing named before, where `last` is `known` for a person (he or she, a role): "X is
    organising the Y offsite. He has booked Z. It is on": Y."""
    if last not in persons:
        return last
    k = max((i for i, (name, how) in enumerate(mentions) if how == "subject" and name == last), default=len(mentions))
    for name, how in reversed(mentions[k + 1 :]):
        if how in ("direct", "taken") and name in things:
            return name
    for name, how in reversed(mentions[:k]):
        if how == "subject" and name in things:
            return name
    for name, how in reversed(mentions[:k] if last in known else ()):
        if how != "subject" and name in things:
            return name                     # "X is organising the Y offsite. He has booked Z for it. It is on": Y
    return last


def _referent(noun: str, mentions: list[tuple[str, str]], types: dict[str, set[str]], last: str,
              persons: set[str]) -> str:
    """What "The <noun>" refers to: the latest entity introduced with that noun ("a novel", "the
    novel X", "X, a novel") or named with it ("The bridge": the Truvair Bridge); else, unless the noun names a person's role, the latest name a verb took
    as its object since the last subject ("X wrote The Nuzel Road. The novel ..."), or, when the
    last subject is a person, the latest untyped name after it; else the last subject."""
    for name, _ in reversed(mentions):
        if noun in types.get(name, ()):
            return name
    for name, _ in reversed(mentions):
        if name_head(name) == noun:
            return name                     # "The bridge" is the Truvair Bridge, "The battle" the Battle of Kell: the name's own head word
    if _agent_noun(noun):
        return last
    k = max((i for i, (_, how) in enumerate(mentions) if how == "subject"), default=-1)
    since = [(name, how) for name, how in mentions[k + 1 :] if name not in persons and not types.get(name)]
    for name, how in reversed(since):
        if how == "direct":
            return name
    if last in persons and since:
        return since[-1][0]
    thing = not any(_agent_noun(x) or x in _PERSON_NOUNS for x in types.get(last, ()))
    if types.get(last) and since and not (thing and since[-1][1] == "object" and person_like(since[-1][0], set())):
        return since[-1][0]                 # "X is a lager that Y brews. The brewery ...": not the lager (nor "X is a winery
                                            # founded by Ada Lind. The estate": the winery)
    return last


def _names_outside_dates(text: str, lowercase_words: set[str], values: list[_Span]) -> list[_Span]:
    """The proper-name spans of `text` but a month inside one of its dates ("on 8 May 1810" is one
    date, not a name of its own) and the scale of a measure ("melts at 346 degrees Celsius", "a
    hardness of 7 on the Mohs scale": the unit's name, not a thing of its own); `values` are the
    text's value spans."""
    dates = [v for v in values if v.kind == "date"]
    out = []
    for p in _proper_spans(text, lowercase_words):
        if any(v.start <= p.start < v.end for v in dates) or _UNIT_BEFORE.search(text[: p.start]) or _SCALE_BEFORE.search(text[: p.start]):
            continue
        cut = next((v.start for v in dates if p.start < v.start < p.end), None)   # "Effective July 1, 2021, X is": the date's month
        if cut is not None:
            words = text[p.start : cut].split()
            if not words or p.start == 0 and len(words) == 1 and common_word(words[0]):
                continue                                                          # "Effective": a word, not a name
            p = _Span(p.start, p.start + len(" ".join(words)), " ".join(words), p.kind)
        out.append(p)
    return out


# a number measured "on the" named scale: "a hardness of 7 on the Mohs scale", "6.1 on the Richter scale"
_SCALE_BEFORE = re.compile(r"(?<![\w.,])\d[\d,.]*(?: [a-z°]+)? on the $")
# a number and its unit word right before a name: the name is the unit's scale ("346 degrees Celsius")
_UNIT_BEFORE = re.compile(r"(?<![\w.,])\d[\d,.]* (?!(?:" + "|".join(sorted(_NOT_UNITS | _NOUN_STOP | AUXILIARIES)) + r") )[a-z]+ $")


def _note_names(sentence: str, propers: Sequence[_Span], subj_end: int, subject: str, mentions: list[tuple[str, str]],
                types: dict[str, set[str]], articled: set[str]) -> None:
    """The names of a sentence after its subject (`subject`, "" where it has none), for the
    descriptions of later sentences: how each is introduced (`_object_role`), the noun it is typed
    with, and whether "the" comes before it."""
    for p in propers:
        name = p.text[4:] if p.text.startswith("The ") and len(p.text.split()) > 2 else p.text
        if p.text.startswith("The ") or sentence[: p.start].endswith(("the ", "The ")):
            articled.add(name)
        if p.start >= subj_end and (not subject or p.text not in subject and subject not in p.text):
            how, noun = _object_role(sentence, p)
            mentions.append((name, how))
            if noun:
                types[name].add(noun)


def shared_heads(texts: Sequence[str], lowercase_words: set[str]) -> frozenset[str]:
    """The last words, in lower case, that end two or more different names of `texts` ("Gopin
    Manufacturing", "Hahask Manufacturing": "manufacturing"): a kind of thing a name is built on,
    as a word the texts write in lower case is ("Kell Airport": "the airport"), never a person's
    surname unless two persons share it; and the lower-case nouns that two or more names take
    after "the" ("the Nemurk family", "the Beifiv family who"; `lower_head`), which `with_heads` makes part of the name."""
    firsts: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        for s, e in split_sentences(text):
            sentence = text[s:e]
            for p in _proper_spans(sentence, lowercase_words):
                words = p.text.split()
                if len(words) > 1:
                    firsts[words[-1].lower()].add(" ".join(words[:-1]))
                if (head := lower_head(sentence, p, strict=True)):
                    firsts[head].add(p.text)
    return frozenset(w for w, names in firsts.items() if len(names) > 1)


# a lower-case noun after a name that follows "the": "the Nemurk family." (the end of the name phrase: a
# punctuation mark, a preposition, a conjunction or a relative word after it, where `strict`)
_LOWER_HEAD = re.compile(r"^ (?P<w>[a-z]{3,})\b(?P<end>[,;:.!?)]|$| (?:in|on|at|of|for|from|with|by|to|and|or|but|who|whose|which|that)\b)?")


def lower_head(sentence: str, p: _Span, strict: bool = False) -> str | None:
    """The lower-case noun a name written after "the" takes ("the Nemurk family", "the Krihon
    lowlands"): a `head_word`, no verb ("the Vofeth tower rises": none)."""
    m = _LOWER_HEAD.match(sentence[p.end :]) if sentence[: p.start].endswith(("the ", "The ")) else None
    w = m.group("w") if m and (m.group("end") is not None or not strict) else None
    verb = base_verb(w) if w else None
    if not w or not head_word(w) or verb is not None and not (verb[1] == "does" and m.group("end") is not None):
        return None                   # a plural before the phrase's end is a noun: "the Krihon lowlands, where"
    return w


# words that never head a name: function words, numbers and quantifiers, and a time after the name ("took
# over the Nubin Crest last spring")
NOT_HEAD = {"the", "a", "an", "and", "or", "but", "of", "in", "on", "at", "to", "for", "from", "with", "by", "as", "that", "which",
            "who", "whose", "this", "these", "those", "its", "his", "her", "their", "our", "my", "your", "was", "has", "had",
            "one", "two", "three", "all", "any", "some", "most", "many", "few", "own", "same", "other", "such", "years", "ago",
            "last", "next", "spring", "summer", "autumn", "winter", "year", "week", "month", "morning", "evening", "night",
            "yesterday", "today", "tonight", "again", "once", "twice", "earlier", "later", "recently"}


def head_word(w: str) -> bool:
    """Whether the lower-case word `w` may be a noun that heads a name ("family", "lowlands", "seed"; "pork
    belly"): no function word, auxiliary, adverb, participle or past tense ("-ed", but "seed", "reed")."""
    return not (w in NOT_HEAD or w in AUXILIARIES or w in ADVERBS or w in _PARTICIPLES or ly_adverb(w)
                or w.endswith("ed") and not (len(w) <= 5 and w.endswith("eed")))


def with_heads(sentence: str, spans: Sequence[_Span], heads: frozenset[str]) -> list[_Span]:
    """`spans` with the lower-case noun of `heads` (`shared_heads`) that a one-word name after "the"
    takes made part of it: "gave the Krihoprirk family the credit" → "Krihoprirk family" (not "the
    Griabrain Sea steer by": a name with a head of its own). For answers: a sentence's subject and
    what a text is about keep their rules (topic.py)."""
    out = []
    for p in spans:
        head = lower_head(sentence, p) if heads and p.kind == "proper" and " " not in p.text else None
        out.append(_Span(p.start, p.end + 1 + len(head), f"{p.text} {head}", p.kind) if head in heads else p)
    return out


# "is the engineer behind the", "was the founding director of": a person's role in a thing
_ROLE_IN = re.compile(r"(?:is|was) (?:the|its|their) (?P<role>(?:[a-z-]+ ){0,2}(?P<head>[a-z-]+)) (?:of|behind|at|for)(?: the)?")


def role_of_thing(subject: str, relation: str, answer: str, kind: str) -> tuple[str, str, str] | None:
    """The same fact under the thing's name: (X, "is the engineer behind the", Y) → (Y, "'s engineer
    is", X), so a question that names the thing ("Who was the engineer of Y?") reaches it; only a
    role that names a person (forms.person_role: engineer, founder, chef, captain), never "is the
    capital of", "is the largest town of"."""
    m = _ROLE_IN.fullmatch(relation)
    if not m or kind not in ("proper", "name") or not person_role(m.group("head")):
        return None
    return answer, f"'s {m.group('role')} is", subject
