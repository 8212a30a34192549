"""Sentence shapes around a main clause (lib/knowledge/facts.py uses them): what a fronted time or
measure phrase, an object's apposition, a relative clause, a pronoun object or a title before a
name states, each as (relation, answer) of a known subject.

- "On 3 May 1921, the X left Y" / "In 1798 X took the Y": the value is the date of the main
  verb's event: (X, "left Y on", 3 May 1921), the verb phrase with its direct object named;
- "At 194 kilometres, the X is ...": a length or a weight is what the subject measures or weighs
  (other units, which could be an age or a price, give nothing); "With a population of 25128, X
  is ...": X has a population of 25128;
- ", and since 1993 it has been governed by Y": a coordinated clause whose subject is a pronoun
  dates its own verb ("has been governed since", 1993); "X has governed it since 1995" is also
  the entity's, in the passive ("has been governed by", X);
- "; most of its 39086 inhabitants live in Y": the entity's inhabitants number 39086 and mostly
  live in Y;
- "holds X, a portrait painted by Y in 1842": the apposition's answers are facts of X;
- "..., which bought it in 1956 for 22,818": a relative clause is a fact of its antecedent, the head
  of "the A in B" (the Jepei Gallery in Oslo, which ...: the gallery);
- "The Lorun Brook joins it": the entity before is the answer, where "it" cannot be a person;
- "under Captain Ada Lind": the answer is the person, the title stays in the relation;
- "Ada Lind (born 1961)", "Hujiax Peak (1,930 m)": a parenthesis after a name is the name's;
- "The first ascent was made by X": an ordinal and a noun are the entity's thing ("'s first ascent");
- "was signed by A and B": the last of listed answers takes the first's relation, the list named;
  "... and Ivo Brask bought": a name with a verb after "and" opens a clause of its own;
- "the X, which the University of Y has run since 1946", "X, a playhouse the architect Y completed
  in 1792": a name after "which (the)" is the subject of a clause whose object is the name before;
- "Y has served as its editor since 1995": the entity's editor is Y ("became its director": Y
  became the director of the entity).
- "The Nuheind creeper is a species of ...", "Known only from X, the Viaveir glider is ...": a name
  with a lower-case head noun before its verb is one subject, "Nuheind creeper" (`head_noun`);
- "Troujial said the Traweirk project ships on October 15", "X told reporters that it would ...": what
  a speaker said is read as a sentence of its own (`reported_clause`), the speaker dropped;
- "Sailors on the Wana Sea steer by the X, a 43-metre tower built in 1812": a sentence whose subject
  is no name still gives its objects' appositions (`object_appositions`); "a 43-metre tower" is
  X's length (`hyphen_measure`), "a 1,200-pupil school" no relation.

Trade-off: each is a rule about English word order, not about a domain, so each misses what it
does not see (a fronted time phrase with no verb phrase after the subject, an age "At 90, ...")
rather than guess.
"""

from __future__ import annotations

import re
from typing import Sequence

from lib.knowledge.forms import _COPULAS, _IRREGULAR, _PERSON_NOUNS, ADVERBS, AUXILIARIES, PAST_PARTICIPLES, _agent_noun, base_verb, third_person
from lib.knowledge.relations import ORDINALS, without_answers
from lib.knowledge.spans import _PARTICIPLES, PREPOSITIONS, _Span
from lib.knowledge.terms import _NOT_TERM

# a fronted time phrase: its preposition is the relation's last word ("left Y on", "has hosted Z since")
FRONTED_TIME = re.compile(r"^(?P<prep>In|On|Since|By|During|Until|From|After|Before) (?P<value>[^,]+?)(?P<comma>,)? (?:the )?$")
_MEASURE = re.compile(r"^At (?:about |some |around )?(?P<value>[\d,.]+) (?P<unit>[a-z]+)$")
# "With a population of 25128, X is ...", "With an area of 45 square kilometres, ...": what X has
_WITH = re.compile(r"^With (?P<noun>(?:a|an) [a-z]+(?: [a-z]+)?) of (?:about |some |around |over |nearly |almost )?(?P<value>[\d,.]+)(?: [a-z]+){0,2}$")
# a coordinated clause opened by a time phrase before its pronoun subject: ", and since 1993 it has ..."
_CLAUSE_TIME = re.compile(r"(?:, (?:and|but)|;) (?P<prep>since|in|on|from|until|after|before|during|by) $")
_CLAUSE_PRONOUN = re.compile(r"^,? (?:it|they|he|she)(?= [a-z])")
# "; most of its 39086 inhabitants live in": a quantified clause about the entity's own people or things
_OWN_QUANTIFIED = re.compile(r"(?:, (?:and|but)|;) (?:(?P<q>most|all) of )?(?:its|their) (?P<count>[\d,]+ )?(?P<noun>[a-z]+s) (?P<rest>[a-z][^,;]*)$")
_OWN_COUNT = re.compile(r"(?:, (?:and|but)|;) (?:(?:most|all|many|some|half|each) of )?(?:its|their) $")
_QUANTITY = {"most": "mostly ", "all": "all ", None: ""}
_UNITS = {"measures": {"metres", "meters", "kilometres", "kilometers", "miles", "feet", "foot", "yards", "centimetres", "inches",
                       "metre", "meter", "kilometre", "mile", "km", "m", "ft"},
          "weighs": {"tonnes", "tons", "kilograms", "kilogrammes", "kg", "pounds", "grams", "tonne", "ton"}}
HONORIFICS = {"Captain", "Capt", "Commander", "Admiral", "Colonel", "Lieutenant", "Sergeant", "Dr", "Doctor", "Professor",
              "Prof", "Sir", "Dame", "Mr", "Mrs", "Ms", "Miss", "Senator", "Judge", "Bishop", "President"}
_STOPS = PREPOSITIONS | {"after", "before", "since", "during", "until", "as"}
_IRREGULAR_PAST, _IRREGULAR_BASES = set(_IRREGULAR), set(_IRREGULAR.values())
_NEW_CLAUSE = re.compile(r"(?:, (?:and|but)|;) (?P<w>\S+)")
_OBJECT_PRONOUN = re.compile(r"^ (?P<verb>[a-z]+(?: [a-z]+)?) (?:it|them)(?=[ .,;]|$)")


def without_honorific(span: _Span) -> _Span:
    """ "Captain Ada Lind" → "Ada Lind": a person's title before a first name and a surname is not
    the answer (the question asks for the person); "King Street", "General Motors" stay whole."""
    words = span.text.split(" ")
    if len(words) == 3 and words[0] in HONORIFICS and all(w[:1].isupper() for w in words[1:]):
        cut = len(words[0]) + 1
        return _Span(span.start + cut, span.end, span.text[cut:], span.kind)
    return span


def verb_phrase(sentence: str, subj_end: int, spans: Sequence[_Span]) -> str | None:
    """The main verb after the subject, with its direct object when a name follows it at once:
    " took the Brewiss Queen, a barque" → "took the Brewiss Queen", " sailed from X" → "sailed";
    None when no verb follows the subject."""
    words = []
    for m in re.finditer(r"\S+", sentence[subj_end:]):
        start = subj_end + m.start()
        named = next((sp for sp in spans if sp.start == start and sp.kind == "proper"), None)
        if named is not None:
            return " ".join(words + [named.text]) if words else None
        w = m.group()
        bare = w.rstrip(",;:.")
        if not bare.isalpha() or not bare.islower() or bare in _STOPS or (words and words[-1] in ("the", "a", "an") and bare != w):
            break
        words.append(bare)
        if bare != w:
            break
    while words and words[-1] in ("the", "a", "an"):
        words.pop()
    if not words or not (words[0] in AUXILIARIES or words[0] in ADVERBS or base_verb(words[0]) is not None):
        return None
    return " ".join(words)


def fronted_value_facts(fronted: str, sentence: str, subj_end: int, spans: Sequence[_Span],
                        values: Sequence[_Span]) -> list[tuple[str, _Span]]:
    """(relation, answer) of a fronted time or measure phrase, the answer's offsets in `fronted`."""
    m = FRONTED_TIME.match(fronted + " ")
    if m:
        value = next((v for v in values if v.start == m.start("value") and v.end == m.end("value")), None)
        vp = verb_phrase(sentence, subj_end, spans) if value is not None else None
        if vp and len(vp.split()) <= 10:
            return [(f"{vp} {m.group('prep').lower()}", value)]
        return []
    m = _MEASURE.match(fronted)
    if m:
        verb = next((v for v, units in _UNITS.items() if m.group("unit") in units), None)
        value = next((v for v in values if v.start == m.start("value")), None)
        if verb and value is not None:
            return [(verb, value)]
        return []
    m = _WITH.match(fronted)
    value = next((v for v in values if v.start == m.start("value")), None) if m else None
    return [(f"has {m.group('noun')} of", value)] if value is not None else []


def clause_time(sentence: str, answer: _Span, spans: Sequence[_Span]) -> str | None:
    """The relation of a year or date that opens a coordinated clause before its pronoun subject:
    "..., and since 1993 it has been governed by Y" → "has been governed since"; None elsewhere.
    The pronoun is the sentence's subject, as in any clause of its own (relations._pronoun_clause)."""
    m = _CLAUSE_TIME.search(sentence[: answer.start])
    after = _CLAUSE_PRONOUN.match(sentence[answer.end :]) if m and answer.kind in ("year", "date") else None
    vp = verb_phrase(sentence, answer.end + after.end(), spans) if after else None
    return f"{vp} {m.group('prep')}" if vp and len(vp.split()) <= 10 else None


def own_quantified(sentence: str, answer: _Span) -> str | None:
    """The relation of an answer in a clause about the entity's own people or things: "; most of its
    39086 inhabitants live in Y" → "'s inhabitants number" for 39086, "'s inhabitants mostly live
    in" for Y; None elsewhere (also for "many of its", which no relation of the entity states)."""
    before = sentence[: answer.start]
    if answer.kind == "number" and _OWN_COUNT.search(before):
        noun = re.match(r"^ (?P<noun>[a-z]+s)\b", sentence[answer.end :])
        return f"'s {noun.group('noun')} number" if noun else None
    m = _OWN_QUANTIFIED.search(before)
    if not m:
        return None
    rest = m.group("rest").split()
    if not (rest[0] in AUXILIARIES or base_verb(rest[0]) is not None or rest[0] in _PLURAL_VERBS):
        return None
    return f"'s {m.group('noun')} {_QUANTITY[m.group('q')]}{' '.join(rest)}"


_PLURAL_VERBS = {"live", "work", "speak", "come", "belong", "say", "hold", "own", "vote", "make", "go", "stay", "reside", "dwell"}


def passive(verb: str) -> str | None:
    """The passive of a verb: "has governed" → "has been governed", "governed" → "was governed",
    "governs" → "is governed", "runs" → "is run", "has run" → "has been run", "is leading" → "is
    being led", "will take" → "will be taken" (an irregular verb's participle from
    `PAST_PARTICIPLES`); None for a verb whose participle no rule or table gives ("wrote", "cuts"
    of an unknown verb) or a verb with a preposition ("flows into")."""
    words = verb.split()
    if len(words) == 2 and words[0] in ("has", "have", "had"):
        done = _participle(words[1])
        return f"{words[0]} been {done}" if done else None
    if len(words) == 2 and words[0] in ("is", "are", "was", "were") and words[1].endswith("ing"):
        base = third_person(words[1])          # "is leading" → "leads" → "lead", "is organising" → "organise"
        done = _base_participle(base_verb(base)[0]) if base and base_verb(base) else None
        return f"{words[0]} being {done}" if done else None
    if len(words) == 2 and words[0] in ("will", "would", "can", "could", "must", "should", "may", "might"):
        return f"{words[0]} be {done}" if (done := _base_participle(words[1])) else None
    if len(words) != 1:
        return None
    w = words[0]
    if w in _IRREGULAR_PAST:
        done = PAST_PARTICIPLES.get(_IRREGULAR[w])
        return f"was {done}" if done else None
    if w.endswith("ed") and base_verb(w) is not None:
        return f"was {w}"
    base = base_verb(w)
    if base is None or base[1] != "does":
        return None
    if base[0] in PAST_PARTICIPLES:
        return f"is {PAST_PARTICIPLES[base[0]]}"   # "runs" → "is run", "leads" → "is led"
    if base[0] in _IRREGULAR_BASES or re.search(r"[^aeiou][aeiou][^aeiouwxy]$", base[0]):
        return None                          # "cuts", "visits": no participle by rule
    return f"is {base[0]}{'d' if base[0].endswith('e') else 'ed'}"


# verbs of running a thing: "who runs Y" is asked of Y as often as "what does X run" of X
_CONTROL = {"run", "lead", "head", "manage", "direct", "chair", "own", "found", "co-found", "command", "captain", "coach",
            "govern", "edit", "helm", "steer", "oversee", "supervise", "organise", "organize", "arrange", "coordinate", "host",
            "plan", "curate", "produce", "sponsor", "fund"}
_BY_PARTICIPLE = {done: base for base, done in PAST_PARTICIPLES.items()}


def control_passive(relation: str) -> str | None:
    """The passive ("has been run by") of a relation that is a verb of running a thing alone ("has
    run", "runs", "leads", "is leading", "founded"): the reverse fact, whose answer is who runs it;
    None for other verbs ("has visited", "met": no one is asked as who met a place) and for a verb
    with more words ("has run Kell since")."""
    words = relation.split()
    if words[-1:] == ["the"]:
        words = words[:-1]                   # "leads the Velk Ensemble"
    if not 1 <= len(words) <= 2 or len(words) == 2 and words[0] not in AUXILIARIES:
        return None
    w = words[-1]
    base = _BY_PARTICIPLE.get(w) or (base_verb(third_person(w))[0] if third_person(w) else None) or (base_verb(w) or ("",))[0]
    if base not in _CONTROL:
        return None
    done = passive(" ".join(words))
    return done + " by" if done else None


def _base_participle(w: str) -> str | None:
    """A verb base's past participle ("take" → "taken", "organise" → "organised"); None where a regular one may be wrong ("plan")."""
    regular = not (re.search(r"[^aeiou][aeiou][^aeiouwxy]$", w) or w in _IRREGULAR_BASES or not w.isalpha())
    return PAST_PARTICIPLES.get(w) or (w + ("d" if w.endswith("e") else "ed") if regular else None)


def _participle(word: str) -> str | None:
    """The past participle of a verb's participle or past form: "governed", "run", "led" (after
    "has"); None for an irregular past that is no participle ("ran", "wrote")."""
    if word in PAST_PARTICIPLES.values():
        return word
    if word.endswith("ed") and base_verb(word) is not None and word not in _IRREGULAR_PAST:
        return word
    return PAST_PARTICIPLES.get(word)


def relative_fact(sentence: str, earlier: Sequence[_Span], answer: _Span) -> tuple[str, str] | None:
    """(antecedent, relation) when `answer` stands in a relative clause (", which bought it in 1956
    for") that follows an earlier name: the clause's words without the answers before it inside."""
    for k in range(len(earlier) - 1, -1, -1):
        e = earlier[k]
        if e.kind != "proper":
            continue
        m = re.match(r"^,? (?:who|which) (?P<relation>.+)$", sentence[e.end : answer.start])
        if not m or "," in m.group("relation"):
            return None
        relation = without_answers(" ".join(m.group("relation").split()), [x.text for x in earlier[k + 1 :]])
        head = e
        if k > 0 and earlier[k - 1].kind == "proper" and sentence[earlier[k - 1].end : e.start] in (" in ", " at "):
            head = earlier[k - 1]            # "the Jepei Gallery in Oslo, which ...": the gallery
        return head.text, relation
    return None


# what comes between a relative clause's object (a name before it) and its subject: ", which the",
# ", a playhouse the architect" (a reduced clause in an apposition), " is a lager that the"
_OBJECT_RELATIVE = re.compile(r"^(?:,? (?:which|that)|, (?:a|an) [a-z]+(?: [a-z]+)?(?: (?:which|that))?"
                              r"| (?:is|was) (?:a|an|the) [a-z]+(?: [a-z]+)? (?:which|that)) (?:the (?:[a-z]+ )?)?$")


def object_relative(sentence: str, names: Sequence[tuple[int, str]], answer: _Span, spans: Sequence[_Span]) -> tuple[str, str] | None:
    """(object, verb) when `answer` is the subject of a relative clause whose object is the name
    before it (`names`: (end, name) of the sentence's subject and earlier answers): "leads the X,
    which the University of Y has run since 1946" → (X, "has run"); "X, a playhouse the architect Y
    completed in 1792" → (X, "completed"); "X is a lager that the Y has brewed" → (X, "has
    brewed"). None where no verb follows the answer or the verb has an object of its own."""
    before = [(end, name) for end, name in names if end <= answer.start]
    if answer.kind not in ("proper", "name") or not before or not _OBJECT_RELATIVE.match(sentence[before[-1][0] : answer.start]):
        return None
    vp = verb_phrase(sentence, answer.end, spans)
    if vp is None or vp != vp.lower() or vp.split()[-1] in AUXILIARIES or sentence[before[-1][0] : answer.start].startswith(" is") and len(before) > 1:
        return None
    return before[-1][1], vp


def apposed_object(sentence: str, earlier: Sequence[_Span], answer: _Span) -> tuple[str, str] | None:
    """(object, relation) when `answer` stands in an apposition that describes an earlier name:
    "holds Evening in Kowous, a portrait painted by Ada Lind" → ("Evening in Kowous", "is a portrait
    painted by"), "the Zabiam baby monitor, the brainchild of Ada Lind" → (..., "is the brainchild
    of"; "the" only before a noun and "of" or "behind": ", the ship will leave" is a clause); a
    measure joined to its noun is left out of the relation ("the X, a 43-metre tower built in" → "is
    a tower built in") and is a fact of its own (`hyphen_measure`)."""
    for k in range(len(earlier) - 1, -1, -1):
        e = earlier[k]
        m = re.match(r"^(?P<head>(?: [a-z]+){0,2}), (?P<relation>(?:a|an) (?:[a-z]|\d[\d,.]*-[a-z])[^,]*|the [a-z]+ (?:of|behind) )$",
                     sentence[e.end : answer.start])
        head = m.group("head").split() if m else []     # "the Zabiam baby monitor, the brainchild of": the name's noun, after "the"
        if m and e.kind == "proper" and (not head or m.group("relation").startswith("the ") and sentence[: e.start].endswith(("the ", "The "))
                                         and not any(w in ADVERBS or w.endswith("ly") for w in head)):
            relation = re.sub(r"^a (?=[aeiou])", "an ", _HYPHENED.sub("", " ".join(m.group("relation").split())))
            return e.text + m.group("head"), without_answers("is " + relation, [x.text for x in earlier[k + 1 :]])
    return None


_HYPHENED = re.compile(r"(?<![\w.,])\d[\d,.]*-[a-z]+ ")
_HYPHEN_UNIT = re.compile(r"^-(?P<unit>[a-z]+)\b")


def hyphen_measure(sentence: str, answer: _Span) -> str | None:
    """What a number joined to its unit by a hyphen states of the thing its noun phrase names: "a
    43-metre tower" → "measures" (a length, as in "At 43 metres, ..."), "a 9-tonne bell" → "weighs";
    "" for another unit ("a 1,200-pupil school", "a 12th-century priory": no relation the words
    state); None where no hyphen follows the number."""
    m = _HYPHEN_UNIT.match(sentence[answer.end :]) if answer.kind in ("number", "year") else None
    if not m:
        return None
    return next((v for v, units in _UNITS.items() if m.group("unit") in units), "")


def measured_name(sentence: str, earlier: Sequence[_Span], answer: _Span) -> str | None:
    """The name a hyphened measure (`hyphen_measure`) opens the apposition of: "the X, a 43-metre
    tower" → X; None elsewhere."""
    for e in reversed(earlier):
        if e.kind == "proper" and sentence[e.end : answer.start] in (", a ", ", an "):
            return e.text
    return None


def object_appositions(sentence: str, spans: Sequence[_Span]) -> list[tuple[str, str, _Span]]:
    """(name, relation, answer) of the appositions of a sentence whose subject is no name
    ("Sailors on the Wana Sea steer by the X, a 43-metre tower built in 1812 at the tip of Y"): the
    apposition describes its name whatever the subject is: (X, measures, 43), (X, is a tower built
    in, 1812), (X, is a tower built at the tip of, Y); nothing else of the sentence is a name's."""
    spans = sorted(spans, key=lambda x: x.start)
    out = []
    for k, a in enumerate(spans):
        unit = hyphen_measure(sentence, a)
        named = measured_name(sentence, spans[:k], a) if unit else None
        got = (named, unit) if named else apposed_object(sentence, spans[:k], a) if unit is None else None
        if got and len(got[1].split()) <= 12 and got[1][-1:] not in ",;:(" and a.text not in got[0] and got[0] not in a.text:
            out.append((got[0], got[1], a))
    return out


def without_appositions(raw: str) -> str:
    """The main clause's words without an object's apposition: "took the Brewiss Queen, a barque
    of 1038 tons, from" → "took the Brewiss Queen from"."""
    return re.sub(r", (?:a|an) [^,]*,", "", raw)


def new_clause(relation: str) -> bool:
    """Whether the relation runs into a coordinated clause with a subject of its own ("took 45
    days, and 478 passengers reached"), whose answers are not facts of this subject."""
    if relation.endswith((", and", ", but", ", or")):
        return True                         # a list's last item ("Oslo and Bergen") stays the same subject's
    m = None
    for m in _NEW_CLAUSE.finditer(relation):
        pass
    if m is None:
        return False
    w = m.group("w")
    return not (w in AUXILIARIES or w in ADVERBS or base_verb(w) is not None)


# the conjunctions of a subordinate clause, whose subject is its own: "has grown since Zeikos Fund backed it"
SUBORDINATORS = r"(?:since|after|before|when|because|until|while|once|although|though|whereas)"


def clause_subject(sentence: str, answer: _Span) -> bool:
    """Whether a name after "and"/"but" opens a clause of its own as its subject, a verb after it:
    "was sold to A in 1901 and Ivo Brask bought the Vask Mill" (neither Ivo Brask nor the Vask Mill
    is the first subject's); so does a name after a subordinating conjunction ("has grown to 61
    employees since Zeikos Fund backed it")."""
    if answer.kind not in ("proper", "name") or not re.search(r"(?:^|[^,]) (?:and|but) $| " + SUBORDINATORS + " $", sentence[: answer.start]):
        return False
    nxt = re.match(r"^ (?P<w>[a-z]+)", sentence[answer.end :])
    return bool(nxt) and (nxt.group("w") in AUXILIARIES or base_verb(nxt.group("w")) is not None)


def listed_first(sentence: str, earlier: Sequence[_Span], answer: _Span) -> _Span | None:
    """The first of the answers `answer` closes a list of with "and"/"or": "by A and B", "between
    A and B", "defeated A, B and C" → A; its relation, with the list up to `answer`, is the
    answer's ("was signed by A and"): the relation alone would give two answers of one subject one
    relation. None where a verb follows `answer`, which is then the subject of a clause of its own
    ("met A and B left"), where the answers are of different kinds, or where no list closes."""
    def same(x: _Span, y: _Span) -> bool:
        return x.kind == y.kind or {x.kind, y.kind} <= {"proper", "name"}

    if not earlier or not same(earlier[-1], answer) or sentence[earlier[-1].end : answer.start] not in (" and ", ", and ", " or ", ", or "):
        return None
    nxt = re.match(r"^ (?P<w>[a-z]+)", sentence[answer.end :])
    if nxt and (nxt.group("w") in AUXILIARIES or base_verb(nxt.group("w")) is not None):
        return None
    k = len(earlier) - 1
    while k > 0 and sentence[earlier[k - 1].end : earlier[k].start] == ", " and same(earlier[k - 1], answer):
        k -= 1
    return earlier[k]


_NAME_PAREN = re.compile(r"^ \((?P<inner>[^()]{1,60})\)")
_BORN = re.compile(r"^born (?:in |on )?$")


# a parenthesis's word that dates the name: "(Rurdesk, est. 2009)", "(founded 1886)", "(opened in 1907)"
_DATED_PAREN = re.compile(r"(?:^|, )(?P<word>est\.|estd\.|established|founded|opened|built|launched)(?: in| on)? ?$", re.IGNORECASE)
_DATED_PAREN_RELATIONS = {"est.": "was established", "estd.": "was established", "established": "was established", "founded": "was founded", "opened": "opened", "built": "was built", "launched": "was launched"}


def name_parenthesis(sentence: str, name_end: int, values: Sequence[_Span]) -> tuple[int, list[tuple[str, _Span]]] | None:
    """(end, facts) of a parenthesis right after a name: "Ada Lind (born 1961)" → (was born in,
    1961); "Dohoum Sound (Rurdesk, est. 2009)" → (was established in, 2009); "Hujiax Peak (1,930
    m)" → (measures, 1,930), a length or a weight as in "At 1,930 metres, ..."; anything else (a formula, an abbreviation, a lifespan) states no relation and
    gives none. `end` is where the sentence goes on, the parenthesis left out of its relations.
    None when no parenthesis follows the name."""
    m = _NAME_PAREN.match(sentence[name_end:])
    if not m:
        return None
    start, end = name_end + m.start("inner"), name_end + m.end()
    inside = [v for v in values if start <= v.start and v.end <= end - 1]
    if len(inside) != 1:
        return end, []
    value, before, after = inside[0], sentence[start : inside[0].start], sentence[inside[0].end : end - 1]
    if _BORN.match(before) and not after.strip() and value.kind in ("year", "date"):
        return end, [("was born on" if value.kind == "date" else "was born in", value)]
    dated = _DATED_PAREN.search(before)
    if dated and not after.strip() and value.kind in ("year", "date"):    # "Dohoum Sound (Rurdesk, est. 2009)"
        return end, [(_DATED_PAREN_RELATIONS[dated.group("word").lower()] + (" on" if value.kind == "date" else " in"), value)]
    unit = after.strip()
    verb = next((v for v, units in _UNITS.items() if unit in units), None)
    return end, [(verb, value)] if verb and not before and value.kind == "number" else []


def ordinal_thing(words: Sequence[str]) -> str | None:
    """ "first ascent" for a sentence "The first ascent was made by ...": an ordinal and a noun name
    one of the entity's things or events, not the entity (`relations.ORDINALS`); None elsewhere
    ("The first was ...", "The first built ...": no noun after the ordinal)."""
    if len(words) < 4 or words[1] not in ORDINALS:
        return None
    noun = words[2].rstrip(",;:")
    if not noun.isalpha() or not noun.islower() or noun in AUXILIARIES or noun in _STOPS or base_verb(noun) and base_verb(noun)[1] == "did":
        return None
    return f"{words[1]} {noun}"


_POSSESSED_ROLE = re.compile(r"^ (?P<verb>is|was|has been|had been|serves as|served as|has served as|became|remains|remained|stays) (?:its|their) "
                             r"(?P<words>[a-z][a-z -]*|[A-Z]{2,4}\b)")
# a role written as its initials: "remains its CEO"
_ROLE_INITIALS = {"CEO", "CFO", "CTO", "COO", "CIO", "MD", "GM"}


def pronoun_role(sentence: str, subj_end: int) -> tuple[str, str] | None:
    """(relation, direction) of a role the subject holds through "its": "Ada Lind has served as its
    chief engineer since 2001" → ("'s chief engineer is", "held": the entity's chief engineer is Ada
    Lind); "was its director" → "'s director was"; "became its director in 1990" → ("became the
    director of", "holder": Ada Lind became the director of the entity, who may no longer be);
    "remains its CEO" → "'s CEO is" (a role's initials are a role). None
    where the noun names no person's role ("is its largest town")."""
    m = _POSSESSED_ROLE.match(sentence[subj_end:])
    if not m:
        return None
    words = m.group("words").split()
    k = next((i for i, w in enumerate(words) if w in _STOPS or w in AUXILIARIES), len(words))
    role = " ".join(words[:k])
    if role in _ROLE_INITIALS:
        pass
    elif not 0 < k <= 3 or not (_agent_noun(role.split()[-1]) or role.split()[-1] in _PERSON_NOUNS) or role.split()[-1] in ORDINALS:
        return None
    if m.group("verb") == "became":
        return f"became the {role} of", "holder"
    return f"'s {role} {'was' if m.group('verb') in ('was', 'had been', 'served as', 'remained') else 'is'}", "held"


_PARTICIPLE_FORMS = set(PAST_PARTICIPLES.values())


def pronoun_object(sentence: str, subj_end: int) -> str | None:
    """The verb of "The Lorun Brook joins it" / "flows into it" / "Vul Wimoth is leading it": the
    relation whose answer is the entity "it" refers to."""
    m = _OBJECT_PRONOUN.match(sentence[subj_end:])
    if not m:
        return None
    verb = m.group("verb").split()
    going = len(verb) == 2 and (verb[0] in _COPULAS and verb[1].endswith("ing") and third_person(verb[1]) is not None  # "is leading it"
                                or verb[0] in AUXILIARIES and verb[1] in _PARTICIPLE_FORMS)                         # "has run it"
    if not going and (not (verb[0] in AUXILIARIES and len(verb) == 2 or base_verb(verb[0]) is not None) or (len(verb) == 2 and verb[1] not in _STOPS
                                                                                                             and base_verb(verb[1]) is None)):
        return None
    return m.group("verb")


_HEAD_NOUN = re.compile(r"^ (?P<noun>[a-z]{3,}(?:-[a-z]+)?)(?: (?P<next>[a-z]+)|, (?:a|an|which|who|the) )")


def head_noun(sentence: str, name_end: int) -> int:
    """Where a sentence subject that is a name ends, with the lower-case noun after it that heads
    it ("The Nuheind creeper is", "the Traweirk project ships", "The Kell company, which ...":
    species, projects and firms are named so), or `name_end`: the noun is no verb, adverb or
    function word and a verb, an auxiliary or an apposition follows ("Ada Lind once lived", "The
    Harl flows", "Ada Lind herself said" keep their name alone)."""
    m = _HEAD_NOUN.match(sentence[name_end:])
    if not m:
        return name_end
    noun, nxt = m.group("noun"), m.group("next")
    if noun in _NOT_TERM or noun in ADVERBS or noun in AUXILIARIES or noun in _PARTICIPLES or noun.endswith(("ly", "ed", "self")) \
            or noun.endswith("ing") and nxt is None or base_verb(noun) is not None:   # "The Kell building is", not "X, having"
        return name_end
    if nxt is not None and not (nxt in AUXILIARIES or nxt in ADVERBS or base_verb(nxt) is not None):
        return name_end
    return name_end + 1 + len(noun)


_SPEECH = r"(?:said|says|told [a-z]+|announced|mentioned|confirmed|added|noted|stated|reported|agreed|explained)"
_REPORTED = re.compile(r"^(?:(?:[A-Z][\w'’-]* (?:[a-z][\w'’-]* ){1,2})?[A-Z][\w'’-]*(?: [A-Z][\w'’-]*){0,3}|He|She|They|We|I|It) (?:has |have |had )?"
                       + _SPEECH + r"(?: on [A-Z][a-z]+| last [a-z]+| this [a-z]+)?(?: that)? (?P<clause>(?:(?:the |The )?[A-Z][\w'’-]*"
                       r"(?: [A-Z][\w'’-]*)*(?: [a-z]+)?|the [a-z]+(?: [a-z]+)?|it|they|(?:their|its|his|her|our|the) (?:[a-z][\w-]* ){0,3}[a-z]+, "
                       r"(?:the |The )?[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*,) (?:is|are|was|were|has|have|had|will|would|can|could|[a-z]+s|[a-z]+ed)\b.*)$")


def reported_clause(sentence: str) -> str | None:
    """What a speaker said, as a sentence of its own: "Troujial said the Traweirk project ships on
    October 15" → "The Traweirk project ships on October 15", "Stosisly told reporters on Friday
    that it would ..." → "It would ..."; None where no clause with a subject and a verb follows the
    speech verb ("Ada Lind said nothing", "Ivo Brask told Ama Reed the news"). News and notes state
    their facts so; the speaker's act itself is no fact a question asks."""
    m = _REPORTED.match(sentence)
    if not m:
        return None
    clause = m.group("clause")
    return clause[:1].upper() + clause[1:]


# a subordinate clause with a name for its subject before a main clause whose subject is no name and
# no pronoun: "When Kabrind Braisthik delivered Saugraurk to Drynix in 1921, nobody in the office expected"
_FRONTED_CLAUSE = re.compile(r"^(?:When|After|Before|Once|Although|Though|While|Because|Until) (?P<clause>(?:The )?[A-Z][\w'’-]*"
                             r"(?: [A-Z][\w'’-]*)* (?:had |has |was |were )?[a-z]+ [^,]+), (?P<main>[a-z][a-z]*)\b")


def fronted_clause(sentence: str) -> str | None:
    """The subordinate clause that opens a sentence, as a sentence of its own, where its subject is
    a name and the main clause's is neither a name nor a pronoun: "When Kabrind Braisthik delivered
    Saugraurk to Drynix in 1921, nobody expected ..." → "Kabrind Braisthik delivered Saugraurk to
    Drynix in 1921." (what it presupposes is a fact; "nobody" says none the rules read, and the
    cloze still asks its spans); None elsewhere ("When she was 12, Ada Lind moved": the main
    clause's)."""
    m = _FRONTED_CLAUSE.match(sentence)
    if not m or m.group("main") in ("he", "she", "it", "they", "we", "i", "you", "his", "her", "its", "their"):
        return None
    return m.group("clause") + "."


# a fronted phrase before a pronoun or a description subject: "Designed by Ada Lind, it was opened"
FRONTED_LONE = re.compile(r"^(?P<fronted>[A-Z](?:[^,]|,(?=\d{3}))*), (?P<who>it|he|she|they|the (?P<noun>[a-z]+))(?= [a-z])")


# a time phrase that opens a sentence before its pronoun subject with no comma: "In 1954 she opened"
_TIMED_PRONOUN = re.compile(r"^((?:In|By|Since|Until|From|During) (?:\d{4}|the \d{4}s)) (?=(?:he|she|it|they) [a-z])")


def timed_pronoun(sentence: str) -> str:
    """ "In 1954 she opened X" written as "In 1954, she opened X", the comma a fronted phrase takes
    before its pronoun subject (facts.py reads "Designed by X, it was opened" so)."""
    return _TIMED_PRONOUN.sub(r"\1, ", sentence)
