"""Question forms: the phrasings a fact is asked and trained in.

A form renders (subject, relation, kind) as a prompt that ends where the answer starts. Forms are
generic, built from the words the document itself used for the relation, so they work for any
attribute without a template per attribute: "Mara Quillon was born in" becomes "Question: Mara
Quillon was born in which city?" only through the relation's own words plus a kind-specific
question word ("what year", "what date", "how many", "whom", "what").

- Question forms (`probe=True`) ask; cloze forms ("A fact about X: X was born in") only train,
  since they read almost like the document's own sentence. Each fact holds out `heldout_share` of
  the question forms (at least one), chosen by its id's hash: its `question` is the first
  held-out form, and none of its held-out forms is ever rendered into training text.
  Every form is still trained on *other* facts, so the model meets each question format, never
  this fact in the held-out one (the split of Physics of Language Models 3.1: QA of some
  people trained, others' asked).
- Trade-off: generic forms read less naturally than a hand-written question per attribute, but
  they need no knowledge of the attribute; bench/bench_facts.py also asks a natural question in a
  phrasing no form produces, and reports both.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

WH = {"year": "what year", "date": "what date", "number": "what number", "name": "whom", "proper": "what", "term": "what", "version": "what version"}
NOUN = {"year": "year", "date": "date", "number": "number", "name": "person", "proper": "name", "term": "thing", "version": "version"}

AUXILIARIES = {"was", "is", "were", "are", "has", "had", "have", "will", "would", "can", "could"}
_COPULAS = {"is", "was", "are", "were"}
_PREPS = {"in", "at", "for", "by", "from", "to", "with", "on", "of", "near", "into", "under", "as", "about", "after",
          "before", "since", "during", "through", "over", "behind", "beside", "across"}
ADVERBS = {"still", "later", "first", "then", "also", "now", "once", "soon", "eventually", "finally", "always", "never"}
_IRREGULAR = {
    "grew": "grow", "took": "take", "spent": "spend", "left": "leave", "went": "go", "made": "make", "became": "become",
    "wrote": "write", "built": "build", "led": "lead", "won": "win", "taught": "teach", "met": "meet", "bought": "buy",
    "sold": "sell", "found": "find", "gave": "give", "began": "begin", "ran": "run", "came": "come", "held": "hold",
    "read": "read", "knew": "know", "saw": "see", "chose": "choose", "drew": "draw", "flew": "fly", "fell": "fall",
    "kept": "keep", "lost": "lose", "paid": "pay", "said": "say", "sent": "send", "told": "tell", "brought": "bring",
    "thought": "think", "fought": "fight", "sang": "sing", "sat": "sit", "stood": "stand", "swam": "swim", "wore": "wear",
}


# the past participles of the irregular verbs that differ from their past tense or that `_IRREGULAR` holds
# ("run", not "ran"): the passive of "Ada Lind runs it" is "is run by"
PAST_PARTICIPLES = {
    "grow": "grown", "take": "taken", "spend": "spent", "leave": "left", "make": "made", "write": "written", "build": "built",
    "lead": "led", "win": "won", "teach": "taught", "meet": "met", "buy": "bought", "sell": "sold", "find": "found",
    "give": "given", "begin": "begun", "run": "run", "hold": "held", "read": "read", "know": "known", "see": "seen",
    "choose": "chosen", "draw": "drawn", "keep": "kept", "lose": "lost", "pay": "paid", "send": "sent", "tell": "told",
    "bring": "brought", "fight": "fought", "sing": "sung", "wear": "worn", "set": "set", "put": "put", "cut": "cut",
    "shut": "shut", "split": "split", "let": "let", "fund": "funded", "head": "headed", "own": "owned", "chair": "chaired",
}


def join_cue(subject: str, relation: str) -> str:
    """ "Mara Quillon" + "was born in" → "Mara Quillon was born in"; a possessive relation ("'s
    sister lives in") or a cloze (": Completed in", lib/knowledge/cloze.py) joins without a space."""
    return subject + ("" if relation.startswith(("'s", "’s", ":")) else " ") + relation


def _silent_e(stem: str) -> bool:
    """Whether a past tense lost a silent e with its -d: "liv" (lived), "caus" (caused), "retir",
    "locat", "decid", "nam"; not "work", "enter", "appear" (two vowels), "visit", "form"."""
    if stem[-1] in "vcgzu":
        return True                                 # lived, managed, argued
    if stem[-1] == "l" and len(stem) > 2 and stem[-2] not in "aeioul":
        return True                                 # struggled, handled, settled (not travelled, sailed)
    if stem[-1] == "s":
        return len(stem) > 1 and stem[-2] in "aeiou"  # caused, used, released, closed
    if len(stem) < 3:
        return False
    vowel, before = stem[-2], stem[-3]
    if before in "aeiou":
        return False                                # appeared, treated, joined, looked
    if stem[-1] == "t":
        return vowel in "aou"                       # located, executed, voted (not visited)
    if stem[-1] in "rdnkblm":
        return vowel in "aiou" and not (stem[-1] == "n" and vowel == "o")  # retired, decided, defined, named (not opened, questioned)
    if stem[-1] == "p":
        return vowel in "aiu"                       # escaped, wiped (not developed)
    return False


def base_verb(word: str) -> tuple[str, str] | None:
    """("work", "did") for "worked", ("live", "does") for "lives": the do-support a question needs;
    None when the word does not look like a finite verb."""
    w = word.lower()
    if w in _IRREGULAR:
        return _IRREGULAR[w], "did"
    if len(w) > 4 and w.endswith("ied"):
        return w[:-3] + "y", "did"
    if len(w) > 3 and w.endswith("ed"):
        stem = w[:-2]
        if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
            stem = stem[:-1]                        # stopped → stop
        elif w.endswith("eed"):
            stem = w[:-1]                           # agreed → agree
        elif _silent_e(stem):
            stem += "e"                             # lived → live, released → release, named → name
        return stem, "did"
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y", "does"                 # carries → carry
    if len(w) > 4 and w.endswith("ses") and w[-4] in "aeiou":
        return w[:-1], "does"                       # rises → rise, causes → cause (passes → pass below)
    if len(w) > 3 and w.endswith("es") and w[:-2].endswith(("s", "x", "ch", "sh", "z")):
        return w[:-2], "does"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1], "does"
    return None


# prepositions made of participles: "According to X, ...", "Following the war, ..." state no act of the subject's
ING_PREPOSITIONS = {"according", "following", "including", "regarding", "concerning", "excluding", "considering", "pending",
                    "having", "being", "notwithstanding", "barring", "beginning", "starting", "excepting", "during"}


def third_person(participle: str) -> str | None:
    """The present tense of a present participle: "rising" → "rises", "lying" → "lies", "running"
    → "runs", "stretching" → "stretches"; None for a word that is no participle or is a
    preposition ("according", "following")."""
    w = participle.lower()
    if not w.endswith("ing") or len(w) < 5 or w in ING_PREPOSITIONS:
        return None
    stem = w[:-3]
    if w.endswith("ying") and len(w) == 5:
        base = stem[:-1] + "ie"                     # lying, dying, tying
    elif stem[-1] == stem[-2] and stem[-1] not in "lsz":
        base = stem[:-1]                            # running, sitting
    elif _silent_e(stem):
        base = stem + "e"                           # rising, serving, measuring
    else:
        base = stem                                 # flowing, standing, covering
    if base.endswith(("s", "x", "z", "ch", "sh")):
        return base + "es"
    if base.endswith("y") and base[-2:-1] not in "aeiou":
        return base[:-1] + "ies"
    return base + "s"


# a name after these is a place (born in, based in, performs at, comes from): asked "where" / "which place"
PLACE_PREPOSITIONS = {"in", "at", "from"}


# nouns of a place a name ends with ("Skeilkeis Hills", "the Krihon lowlands") or a place phrase puts
# before "of" ("lies in the hills of X", "on the outskirts of X")
_LAND = {"hills", "valley", "vale", "coast", "lowlands", "highlands", "uplands", "foothills", "province", "county", "region",
         "district", "island", "islands", "bay", "plains", "plain", "heights", "mountains", "range", "shore", "shores", "delta",
         "basin", "peninsula", "downs", "moor", "moors", "slopes", "banks", "suburbs"}
_PLACE_OF = _LAND | {"heart", "outskirts", "foot", "edge", "centre", "center", "middle", "north", "south", "east", "west",
                     "town", "city", "village", "port", "harbour", "area", "countryside"}
_IN_PLACE_OF = re.compile(r"\b(?:in|at|on|near|from)(?: the)?(?: [a-z]+)? (?P<noun>[a-z]+) of$")


def place_relation(relation: str, kind: str) -> bool:
    """Whether the answer of `relation` is a place: a name after "in", "at" or "from" ("was born
    in", "performs at the") or after a place's noun in a place phrase ("lies in the hills of", "on
    the outskirts of"), not a year or a number after them ("was founded in 1915")."""
    words = question_relation(relation).split()
    phrase = _IN_PLACE_OF.search(" ".join(words))
    return kind == "proper" and bool(words) and (words[-1] in PLACE_PREPOSITIONS or bool(phrase and phrase.group("noun") in _PLACE_OF))


# words that open a place's name: "Port Trimaild", "Lake Vrai", "Glen Orra"
PLACE_OPENERS = frozenset({"port", "lake", "cape", "isle", "glen", "fort"})


def place_name(answer: str) -> bool:
    """Whether a name is a place's by its own words: a noun of land at its end ("Skeilkeis Hills",
    "Beikvi Valley", "Krihon lowlands"), or "Port", "Lake", "Cape" before it."""
    words = answer.split()
    return len(words) > 1 and (words[-1].lower() in _LAND or words[0].istitle() and words[0].lower() in PLACE_OPENERS)


def answer_noun(relation: str, kind: str) -> str:
    """The noun a question names its answer by: "place" after a place preposition, else by kind."""
    return "place" if place_relation(relation, kind) else NOUN.get(kind, "name")


def wh_word(relation: str, kind: str) -> str:
    """The question word of a kind; a name after a passive "by" is an agent, asked with "whom"
    ("was built by" → "by whom"), whatever kind of name it is; a name after a place preposition
    is a place ("was born in" → "in which place")."""
    if kind == "proper" and relation.split()[-1:] == ["by"]:
        return "whom"
    if place_relation(relation, kind):
        return "which place"
    return WH.get(kind, "what")


def question_relation(relation: str) -> str:
    """The relation a wh-question is built on: without a trailing article ("won the" → "won"),
    since "X won the what?" asks for a noun the answer already is."""
    words = relation.split()
    while len(words) > 1 and words[-1].lower() in ("the", "a", "an"):
        words.pop()
    return " ".join(words)


def _agent_noun(noun: str) -> bool:
    """A noun that names a person by what they do ("author", "singer", "pianist"): a description
    with it may well be the person subject itself, so it is left to mean the last subject. Not an
    abstract noun in -ment or -ness, nor an everyday thing that ends so (`_THING_NOUNS`: "patent",
    "monitor", "scent")."""
    return noun.endswith(("er", "or", "ist", "ian", "ess", "ant", "ent")) and not noun.endswith(("ment", "ness")) \
        and noun not in _THING_NOUNS


# things whose nouns end as agent nouns do: "The patent was filed in", "The monitor weighs"
_THING_NOUNS = {"patent", "event", "plant", "restaurant", "scent", "talent", "content", "extent", "accent", "tent", "vent",
                "current", "continent", "component", "variant", "pendant", "monitor", "motor", "sector", "factor", "mirror",
                "reactor", "corridor", "elevator", "generator", "tractor", "vector", "error", "colour", "color", "harbor",
                "interior", "exterior", "meteor", "process", "business", "address", "access", "fortress", "congress",
                "progress", "success", "press", "mattress", "list", "mist", "twist", "floor", "door", "indoor", "outdoor"}


# nouns for people that carry no agent ending: "The poet", "The couple" may well be the person subject
_PERSON_NOUNS = {"man", "woman", "boy", "girl", "child", "king", "queen", "prince", "poet", "chef", "monk", "priest", "nun",
                 "bishop", "judge", "pope", "duke", "lord", "lady", "saint", "couple", "pair", "duo", "family", "chief",
                 "captain", "pilot", "coach", "guide", "nurse", "athlete", "architect", "scientist", "native", "widow"}


def role_noun(noun: str, roles: set[str]) -> bool:
    """Whether "The <noun>" may name a person: one of the `roles` the text gave, a noun for people
    ("The poet"), or an agent noun not in -er, which many things end in ("The paper", "The tower")."""
    return noun in roles or noun in _PERSON_NOUNS or _agent_noun(noun) and not noun.endswith("er")


# agent nouns in -er that name people: -er alone also ends "tower", "river", "paper", "water"
_ER_PEOPLE = {"keeper", "founder", "owner", "manager", "leader", "designer", "builder", "producer", "writer", "singer",
              "player", "teacher", "member", "partner", "farmer", "brewer", "engineer", "officer", "minister", "publisher",
              "commander", "skipper", "ranger", "preacher", "painter", "photographer", "trainer", "caretaker"}


def person_role(noun: str) -> bool:
    """Whether a role noun names a person: `role_noun`'s nouns (captain, poet, an agent
    noun in -or, -ist, -ian ...) or an -er noun of `_ER_PEOPLE`."""
    return noun in _ER_PEOPLE or role_noun(noun, set())


# "'s captain is", "'s last keeper was": a role of the subject named by a copula, lower-case words only
_POSSESSIVE_ROLE = re.compile(r"[’']s ((?:[a-z][a-z-]* ){0,3}[a-z][a-z-]*) (is|was|are|were)")


def possessive_question(subject: str, relation: str, kind: str, *, strand: bool) -> str | None:
    """A role of the subject asked the way people ask for it: "'s captain is" → "Who is the captain
    of X?" (strand=False) or "Who is X's captain?" (strand=True). "Who" for a name (an answer that
    is some document's own entity) or a role people hold (`person_role`: captain, keeper,
    governor), "what" for the rest (a town, a port, a tributary); a number or a year in a role
    ("'s tower is 43") has no such question: None."""
    m = _POSSESSIVE_ROLE.fullmatch(relation)
    if not m or kind not in ("name", "proper"):
        return None
    role, copula = m.groups()
    wh = "Who" if kind == "name" or person_role(role.split()[-1]) else "What"
    return f"{wh} {copula} {subject}'s {role}?" if strand else f"{wh} {copula} the {role} of {subject}?"


def _inversion(relation: str) -> tuple[str, list[str], list[str], str | None] | None:
    """(auxiliary, leading adverbs, the verb and its words, trailing preposition) of a relation a
    question can invert: "was born in" → ("was", [], ["born"], "in"), "later worked for" →
    ("did", ["later"], ["work"], "for"); None when it has no verb of that shape."""
    words = relation.split()
    adverbs = []
    while words and words[0].lower() in ADVERBS:
        adverbs.append(words.pop(0))
    if not words:
        return None
    if words[0].lower() in AUXILIARIES:
        aux, rest = words[0].lower(), words[1:]
        if aux in _COPULAS and rest[:1] and rest[0].lower() in ("a", "an"):
            return None  # "is a novel by": "By whom is X a novel?" is not how anyone asks
    else:
        base = base_verb(words[0])
        if base is None:
            return None
        aux, rest = base[1], [base[0]] + words[1:]
    prep = rest.pop() if len(rest) > 1 and rest[-1].lower() in _PREPS else None
    return aux, adverbs, rest, prep


def inverted_question(subject: str, relation: str, kind: str, *, strand: bool) -> str | None:
    """The relation turned into a wh-question, the way people ask: "was born in" → "In what year
    was X born?" (strand=False) or "What year was X born in?" (strand=True); "worked for" → "For
    whom did X work?"; a possessive role, "'s captain is" → "Who is the captain of X?"
    (possessive_question). Generic: an auxiliary or a do-support verb, a trailing preposition,
    leading adverbs; None when the relation is not of that shape (no verb, a possessive with more
    after it)."""
    if relation.startswith(("'s", "’s")):
        return possessive_question(subject, relation, kind, strand=strand)
    parts = _inversion(relation)
    if parts is None:
        return None
    aux, adverbs, rest, prep = parts
    wh = wh_word(relation, kind)
    if strand and wh == "whom":
        wh = "who"
    body = " ".join([aux, subject] + adverbs + rest)
    if strand and prep and place_relation(relation, kind):
        return f"Where {body}{' from' if prep.lower() == 'from' else ''}?"  # "Where was X born?", "Where is X from?"
    if prep and not strand:
        return f"{prep.capitalize()} {wh} {body}?"
    return f"{wh[:1].upper() + wh[1:]} {body}{' ' + prep if prep else ''}?"


_PARTICIPLE_BASE = {participle: base for base, participle in PAST_PARTICIPLES.items()}
_PAST = {base: past for past, base in _IRREGULAR.items()}


def _present(base: str) -> str:
    """ "run" → "runs", "teach" → "teaches", "carry" → "carries"."""
    if base.endswith(("s", "x", "z", "ch", "sh")):
        return base + "es"
    if base.endswith("y") and base[-2:-1] not in "aeiou":
        return base[:-1] + "ies"
    return base + "s"


def active_verb(participle: str, present: bool) -> str | None:
    """The active verb of a passive one: "founded" → "founded" (or "founds" in the present), "built"
    → "built", "written" → "wrote", "run" → "runs"; None for a word that is no past participle."""
    w = participle.lower()
    if w in _PARTICIPLE_BASE:
        base = _PARTICIPLE_BASE[w]
    elif w.endswith("ed") and base_verb(w):
        base = base_verb(w)[0]
    else:
        return None
    if present:
        return _present(base)
    return _PAST.get(base) or (w if w.endswith("ed") or w == base else None)


def _cloze_verb(relation: str) -> str:
    """A cloze's words as a relation of the thing it is about, where they open with its verb:
    ": Commissioned in" → "was commissioned in", ": opened in" → "opened in"; other relations as
    they are (a cloze that opens with another subject, ": the vessel is rated at", stays a cloze)."""
    if not relation.startswith(":"):
        return relation
    words = relation[1:].split()
    if words and len(words[0]) > 4 and words[0].endswith("ed") and words[0][0].isupper():
        return " ".join(["was", words[0].lower()] + words[1:])
    if words and words[0].islower() and base_verb(words[0]) and words[0].endswith("ed"):
        return " ".join(words)
    return relation


_PASSIVE_AGENT = re.compile(r"(was|were|is|are|has been|have been|had been)((?: [a-z]+ly| first| later| also| originally)*) ([a-z]+) by")


# the relations things.py gives a thing's lower-case attributes, as people ask them
_THING_QUESTIONS = {"'s colour is": "What colour is {s}?", "is known for": "What is {s} known for?"}


def people_question(subject: str, relation: str, kind: str) -> str | None:
    """The question people ask most for a fact, its relation's verb kept and the answer named by
    the plainest wh-word: "opened in" (a year) → "When did X open?", "was founded in" → "When was X
    founded?", "was born in" (a place) → "Where was X born?", "was designed by" → "Who designed X?",
    "is run by" → "Who runs X?", "weighs" (a number) → "How much does X weigh?", a count ("'s number
    of tracks is") → "How many tracks does X have?", a colour → "What colour is X?". None where the
    relation has no verb to keep, or the answer is a thing (the strand form asks "What did X win?").
    Trained beside the kind questions, never asked: the held-out forms keep "In what year did X
    open?" and "What year did X open in?"."""
    relation = question_relation(_cloze_verb(relation))
    if kind == "number" and (count := re.fullmatch(r"['’]s number of ([a-z]+) is", relation)):
        return f"How many {count.group(1)} does {subject} have?"     # "18 tracks": "How many tracks does X have?"
    if kind == "term" and relation in _THING_QUESTIONS:
        return _THING_QUESTIONS[relation].format(s=subject)
    m = _PASSIVE_AGENT.fullmatch(relation)
    if m and kind in ("name", "proper"):
        verb = active_verb(m.group(3), present=m.group(1) in ("is", "are"))
        return f"Who{m.group(2)} {verb} {subject}?" if verb else None
    if relation.startswith(("'s", "’s", ":")):
        return None
    if kind in ("year", "date"):
        wh = "When"
    elif place_relation(relation, kind):
        wh = "Where"
    elif kind == "number":
        wh = "How much"
    else:
        return None
    parts = _inversion(relation)
    if parts is None:
        return None
    aux, adverbs, rest, prep = parts
    if not rest or len(rest) > 5 or any(not w.isalpha() or w.lower() in _NOT_IN_QUESTION for w in rest):
        return None  # "is", "rated at 61,840 tonnes and was launched in", "has a mass of": no question keeps them
    if wh == "How much" and len(rest) > 1:
        return None  # "How much has X died aged?": a number's question keeps one verb ("weighs", "can load")
    if wh != "How much" and prep is None:
        return None  # a year or a place the relation gives no preposition for ("won the 1998")
    body = " ".join([aux, subject] + adverbs + rest)
    if wh == "When" and prep and prep.lower() == "since":
        return f"Since when {body}?"
    tail = " from" if wh == "Where" and prep.lower() == "from" else (f" {prep}" if wh == "How much" and prep else "")
    return f"{wh} {body}{tail}?"


# words a kept relation must not hold: another clause ("and was launched in"), an object the
# question would have to ask around ("has a mass of")
_NOT_IN_QUESTION = AUXILIARIES | {"and", "but", "or", "a", "an"}


@dataclass(frozen=True)
class QuestionForm:
    name: str
    template: str       # {cue} {subject} {relation} {wh} {noun}; an inverted form: {question}
    probe: bool = True  # a question a fact may be asked in; False: a cloze form, trained only
    invert: str = ""    # "front" / "strand": the relation inverted (inverted_question), preposition first / last
    fallback: str = ""  # template when the relation cannot be inverted (inverted forms only)

    def render(self, subject: str, relation: str, kind: str) -> str:
        if self.invert or "{wh}" in self.template or "{noun}" in self.template:
            relation = question_relation(relation)  # a question; a blank or cloze keeps "won the ____"
            if kind == "term" and relation.split()[-1:] in (["its"], ["their"], ["his"], ["her"]) and len(relation.split()) > 1:
                relation = relation.rsplit(" ", 1)[0]  # "is famous for its": "What is X famous for?"
        values = dict(cue=join_cue(subject, relation), subject=subject, relation=relation,
                      wh=wh_word(relation, kind), noun=answer_noun(relation, kind))
        if self.invert:
            question = inverted_question(subject, relation, kind, strand=self.invert == "strand")
            if question is None:
                return self.fallback.format(**values)
            values["question"] = question
        return self.template.format(**values)


QUESTION_FORMS: tuple[QuestionForm, ...] = (
    QuestionForm("echo", "Question: {cue} {wh}?\nAnswer:"),
    QuestionForm("which", "Q: According to what we know, {cue} which {noun}?\nA:"),
    QuestionForm("blank", "Fill in the blank: {cue} ____.\nAnswer:"),
    QuestionForm("front", "Question: {question}\nAnswer:", invert="front", fallback="Question: Tell me, {cue} {wh}?\nAnswer:"),
    QuestionForm("strand", "Q: {question}\nA:", invert="strand", fallback="Q: About {subject}: {cue} {wh}?\nA:"),
    QuestionForm("ask", "Someone asked: {cue} {wh}? The answer:"),
    QuestionForm("about", "A fact about {subject}: {cue}", probe=False),
    QuestionForm("recall", "Do you remember {subject}? {cue}", probe=False),
    QuestionForm("note", "Note on {subject}.\n{cue}", probe=False),
)


# Questions that name the subject and the answer's kind but not the relation ("What year goes
# with Kantauchu Bridge?"): the document's words for a fact are rarely the words a user asks it in
# ("clears the Treruk" / "What river is it built over?"), and a small model trained only on the
# relation's own words answers only questions that repeat them. Trained, never asked.
KIND_QUESTIONS = (
    "Question: What {noun} goes with {subject}?\nAnswer:",
    "Q: {wh_cap}, about {subject}?\nA:",
    "Question: Which {noun} do the records give for {subject}?\nAnswer:",
)
# Everyday questions by what they ask, one set per wh-word: a question about a thing's only year,
# place, person or quantity ("When was X founded?", "Where is X?", "Who is behind X?", "How big is
# X?") is answered by that one fact whatever verb it uses, so a night trains a fact in several of
# them and a question in a verb the document never used still reaches it. Trained, never asked.
COMMON_QUESTIONS = {
    "when": ("When was {s} founded?", "When did {s} begin?", "When was {s} built?", "When did {s} first appear?",
             "When was {s} established?", "When did {s} start?", "When was {s} first recorded?", "When did {s} open?"),
    "where": ("Where is {s}?", "Where is {s} located?", "Where can you find {s}?", "Which place is {s} in?",
              "Where does {s} come from?", "Where is {s} based?"),
    "who": ("Who is behind {s}?", "Who founded {s}?", "Who made {s}?", "Who is {s} linked to?", "Who created {s}?",
            "Who runs {s}?", "Who started {s}?", "Who led {s}?"),
    "how": ("How big is {s}?", "How much is {s}?", "How many does {s} have?", "How large is {s}?", "How long is {s}?",
            "How heavy is {s}?", "How tall is {s}?", "What size is {s}?"),
}


def question_class(relation: str, kind: str, answer: str = "") -> str | None:
    """Which of COMMON_QUESTIONS' wh-words asks a fact: "when" a year or a date, "where" a place
    (`place_relation`, or an `answer` named as a place: "belongs to the" Krihon lowlands, "'s
    appellation is" Beikvi Valley), "who" a person or an agent ("was built by"), "how" a number; None
    for a thing or a version."""
    if kind in ("year", "date"):
        return "when"
    if place_relation(relation, kind) or kind == "proper" and place_name(answer):
        return "where"
    if kind == "name" or wh_word(relation, kind) == "whom":
        return "who"
    return "how" if kind == "number" else None


def common_question(subject: str, wh: str, k: int) -> str:
    """The `k`-th everyday question of wh-word `wh` (COMMON_QUESTIONS, cycled) about `subject`."""
    bank = COMMON_QUESTIONS[wh]
    return bank[k % len(bank)].format(s=subject)


# the two wrappings of a people_question, alternated text by text
PEOPLE_FORMATS = ("Question: {question}\nAnswer:", "Q: {question}\nA:")
_KIND_WH = {"version": "which version"}  # the kinds question_class has no wh-word for


def kind_question(subject: str, relation: str, kind: str, k: int) -> str:
    """The `k`-th relation-free question of a fact (KIND_QUESTIONS, cycled): "What year goes with
    X?", "Q: When, about X?", a place "Where, about X?"."""
    noun = answer_noun(relation, kind)
    wh = {"how": "how many"}.get(c, c) if (c := question_class(relation, kind)) else _KIND_WH.get(kind, "what")
    return KIND_QUESTIONS[k % len(KIND_QUESTIONS)].format(noun=noun, subject=subject, wh_cap=wh[:1].upper() + wh[1:])


def split_forms(fact_id: str, forms: Sequence[QuestionForm], heldout_share: float) -> tuple[list[int], list[int]]:
    """(trained, held-out) form indices for one fact: share × question forms, rounded, of the question
    forms held out (≥ 1, and ≥ 1 question form still trained), picked by the fact id's hash so
    the split is stable night after night; cloze forms are always trained."""
    questions = [i for i, f in enumerate(forms) if f.probe]
    if len(questions) < 2:
        raise ValueError(f"question forms: need at least 2 with probe=True (one trained, one held out), got {len(questions)}")
    k = min(len(questions) - 1, max(1, round(heldout_share * len(questions))))
    start = int(hashlib.sha256(fact_id.encode()).hexdigest()[:8], 16) % len(questions)
    held = [questions[(start + j) % len(questions)] for j in range(k)]
    return [i for i in range(len(forms)) if i not in held], held
