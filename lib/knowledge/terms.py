"""Terms: facts whose answer is a lower-case noun phrase ("studied marine biology", "plays the
cello", "its glasshouses are known for their alpine plants"), read after lib/knowledge/facts.py
has settled each sentence's subject.

- a clause is the sentence after its subject (as `document_facts` resolved it), a clause
  coordinated to it (", and later worked as"), or one whose pronoun means the document's person or
  the sentence's subject ("where she read", ", and its glasshouses are");
- its verb phrase is read word by word: adverbs, auxiliaries, one verb (a copula only with a
  participle or adjective and a preposition: "is known for"; or "is mostly"), a preposition, a
  determiner, then 1-3 lower-case words that end the clause (punctuation, "and", a preposition);
  "took a degree in marine biology" reads through the light object to `took a degree in`; a
  copula with a noun of classification names the class ("is a species of lizard endemic to",
  the modifier ending it); an owned noun may take a verb ("Its diet consists largely of young
  snails"), and an -ly adverb may stand between a verb and its preposition ("feeds mainly on");
- never read: a pronoun or determiner alone, a number or a capitalised word (a name's, read as
  such), adverbs and adjectives of manner (-ly, -ous, -ful, -ive, -able, "is patient"), generic
  time and measure nouns ("a year", "each season", "a long search", "most of"), objects that are
  clauses ("to", "that", "how"), places after a preposition ("above the rocks");
- salience: a term is kept only where the same relation carries a *different* term in another
  document of the night, so it has distractors of its own kind and is an attribute that varies,
  not a phrase every document repeats ("took a degree"); a night of one document has none.

Trade-off: precision over recall. Words alone cannot tell "studied geology" from "studied hard"
or "is patient" from "is a painter", so the rules read only plain verb-object shapes and the
cross-document check drops the rest; the bench's 24 biographies give one term each (the field of
study), set phrases no term. ~0.1 ms a sentence.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Sequence

from lib.knowledge.forms import _COPULAS, _IRREGULAR, ADVERBS, AUXILIARIES, base_verb
from lib.knowledge.spans import _PARTICIPLES, NUMBER_WORDS, PREPOSITIONS, split_sentences

_TOKEN = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d[\d,.]*|[^\sA-Za-z\d]")
_DETERMINERS = {"the", "a", "an", "its", "their", "his", "her"}
_PREPOSITIONS = PREPOSITIONS | {"as", "after", "before", "since", "during", "until", "without", "like", "than"}
_PERFECT = {"has", "have", "had", "been", "being", "be"}
# words that no term is made of: function words, pronouns, quantifiers, and nouns of time, measure
# and order that say how much or when, not what
_NOT_TERM = _DETERMINERS | _PREPOSITIONS | AUXILIARIES | _PERFECT | NUMBER_WORDS | {
    "and", "or", "but", "nor", "that", "which", "who", "whom", "whose", "what", "where", "when", "how", "why", "whether",
    "this", "these", "those", "there", "here", "it", "he", "she", "they", "him", "them", "us", "we", "you", "i", "me",
    "himself", "herself", "itself", "themselves", "one", "ones", "other", "others", "some", "many", "most", "much",
    "more", "less", "few", "several", "all", "each", "every", "both", "either", "neither", "any", "no", "not", "such",
    "same", "own", "whole", "first", "second", "third", "last", "next", "former", "latter", "only", "very", "so",
    "year", "years", "season", "seasons", "time", "times", "day", "days", "week", "weeks", "month", "months", "decade",
    "decades", "century", "centuries", "hour", "hours", "while", "moment", "age", "spring", "summer", "autumn", "winter",
    "way", "ways", "part", "parts", "lot", "lots", "number", "numbers", "kind", "kinds", "sort", "type", "rest", "end",
    "start", "beginning", "side", "edge", "top", "bottom", "half", "search", "thing", "things", "something", "anything",
    "nothing", "everything", "place", "places", "total", "average", "range", "variety", "dozen", "hundreds",
    "thousands", "millions", "percent", "per", "cent", "career", "life", "public", "people", "world", "home", "death",
    "ever", "again", "too", "well", "instead", "together", "alone", "away", "back", "up", "down", "out", "off",
    "hundred", "thousand", "million", "billion", "once", "twice",
    "hard", "fast", "late", "early", "abroad", "long", "far", "little", "best", "better", "worse", "least", "overseas"}
# endings of adjectives and manner adverbs: "patient", "precise" have none, and are stopped elsewhere
_ADJECTIVE_ENDINGS = ("ly", "ous", "ful", "ive", "able", "ible", "less", "ish")
# a light object a relation reads through to its prepositional object: "took a degree in", "has a collection of"
_THROUGH = {"in", "of", "on"}
# a copula that states what the subject is made of or holds most: "the collection is mostly ceramics"
_PROPORTION = {"mostly", "largely", "mainly", "chiefly", "predominantly"}
# words that open a clause whose pronoun is the subject's: ", where she read geology", ", and its glasshouses are"
_EMBEDDED = re.compile(r"(?:, |\b)(?:where|when|while|and|but|after|before|until|because|once|then) (?P<pro>he|she|it|its|they|their)\b")
_COORDINATED = re.compile(r"(?:,? and|,? but) (?=(?:[a-z]+ )?[a-z]+ed\b|(?:[a-z]+ )?[a-z]+s\b)")


def _noun_words(tokens: Sequence[str], i: int) -> int:
    """How many words from `i` are a noun phrase's (lower-case words that are no function word,
    number or capitalised name), 0-3; more than 3 is no term's."""
    k = i
    while k < len(tokens) and re.fullmatch(r"[a-z][a-z-]*", tokens[k]) and tokens[k] not in _NOT_TERM:
        k += 1
    return k - i if k - i <= 3 else 0


def _closes(tokens: Sequence[str], i: int) -> bool:
    """Whether a noun phrase may end before token `i`: at the clause's end, punctuation, "and",
    "but" or a preposition (whatever follows it is another phrase's)."""
    return i >= len(tokens) or tokens[i] in (",", ";", ".", ":", "!", "?", ")", "and", "but") or tokens[i] in _PREPOSITIONS


# nouns of classification: "is a species of lizard", "is a variety of apple", "was a breed of sheep"
_CLASS_NOUNS = {"species", "subspecies", "genus", "kind", "type", "sort", "form", "breed", "variety", "cultivar", "family", "style", "dialect"}


def _class_term(tokens: Sequence[str], i: int, words: list[str]) -> tuple[str, str] | None:
    """The class noun after "is a species of": 1-3 lower-case words, which a modifier after them
    with its preposition ends ("of lizard endemic to", "of moth native to", "of fern found in"), as
    punctuation, "and" or a preposition do."""
    n = 0
    while n < 3 and i + n < len(tokens) and re.fullmatch(r"[a-z][a-z-]*", tokens[i + n]) and tokens[i + n] not in _NOT_TERM:
        w, nxt = tokens[i + n], tokens[i + n + 1] if i + n + 1 < len(tokens) else ""
        if n and nxt in _PREPOSITIONS and (w.endswith(("ic", "ive", "ous", "ed")) or w in _PARTICIPLES or w in _IRREGULAR):
            break                                  # "lizard endemic to": the modifier is no part of the noun
        n += 1
    end = i + n
    if not n or not (_closes(tokens, end) or tokens[end] not in _NOT_TERM and end + 1 < len(tokens) and tokens[end + 1] in _PREPOSITIONS):
        return None
    return " ".join(words), " ".join(tokens[i:end])


def clause_term(clause: str, owned: bool = False) -> tuple[str, str] | None:
    """(relation, answer) of a clause that opens right after its subject, or None: " studied
    marine biology and later ..." → ("studied", "marine biology"); `owned`, the subject was a
    possessive ("Its glasshouses are known for their alpine plants") and the clause opens with
    the owned noun → ("'s glasshouses are known for their", "alpine plants")."""
    tokens = _TOKEN.findall(clause)
    words: list[str] = []
    i = 0
    if owned:                                      # "'s glasshouses are": 1-2 nouns, then an auxiliary
        n = _noun_words(tokens, 0)
        if n > 1 and tokens[1].endswith("s") and base_verb(tokens[1]) is not None and tokens[0] not in _NOT_TERM:
            n = 1                                  # "Its diet consists of": one noun, then its verb
        elif not n or n > 2 or n >= len(tokens) or tokens[n] not in AUXILIARIES:
            return None
        words, i = ["'s"] + list(tokens[:n]), n
    while i < len(tokens) and (tokens[i] in ADVERBS or tokens[i] in ("also", "currently", "now", "today", "mostly", "chiefly")
                               and i + 1 < len(tokens) and tokens[i + 1] not in _NOT_TERM):
        words.append(tokens[i])
        i += 1
    if i >= len(tokens):
        return None
    verb = tokens[i]
    if verb in _COPULAS:
        # a copula states a property, not a term, unless a participle or adjective with a preposition
        # follows ("is known for", "are famous for") or a proportion ("is mostly ceramics")
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        cls = tokens[i + 2] if i + 3 < len(tokens) and nxt in ("a", "an") and tokens[i + 3] == "of" else ""
        if nxt in _PROPORTION:
            words += [verb, nxt]
            i += 2
        elif cls in _CLASS_NOUNS:                  # "is a species of lizard": the class it belongs to
            words += [verb, nxt, cls, "of"]
            i += 4
            return _class_term(tokens, i, words)
        elif re.fullmatch(r"[a-z]+", nxt) and nxt not in _NOT_TERM and i + 2 < len(tokens) and tokens[i + 2] in ("for", "of", "in", "on", "with"):
            words += [verb, nxt, tokens[i + 2]]
            i += 3
        else:
            return None
    else:
        while verb in _PERFECT and i + 1 < len(tokens) and (tokens[i + 1] in _PERFECT or tokens[i + 1].endswith(("ed", "en", "wn", "ght"))):
            words.append(verb)                     # "has been", "has taught": auxiliaries before the verb
            i += 1
            verb = tokens[i]
        if not re.fullmatch(r"[a-z]+", verb) or verb in _NOT_TERM - _PERFECT - {"have", "had", "has"} \
                or (base_verb(verb) is None and not verb.endswith(("ed", "en", "wn", "ght")) and verb not in ("have", "had", "has", "read", "hold", "grow")):
            return None
        words.append(verb)
        i += 1
        if i + 1 < len(tokens) and tokens[i].endswith("ly") and tokens[i + 1] in _PREPOSITIONS - {"to", "than", "like"}:
            words.append(tokens[i])                # "consists largely of", "feeds mainly on": how much, not what
            i += 1
        if i < len(tokens) and tokens[i] in _PREPOSITIONS:
            if tokens[i] in ("to", "than", "like"):
                return None                        # "decided to retire", "moved to the coast": a clause or a place
            words.append(tokens[i])
            i += 1
    determined = i < len(tokens) and tokens[i] in _DETERMINERS
    if determined:
        words.append(tokens[i])
        i += 1
    n = _noun_words(tokens, i)
    if not n:
        return None
    answer, end = list(tokens[i : i + n]), i + n
    if end < len(tokens) and tokens[end] in _THROUGH and n <= 2:
        # "took a degree in marine biology": the light object belongs to the relation
        j = end + 1
        det = j < len(tokens) and tokens[j] in _DETERMINERS
        m = _noun_words(tokens, j + det)
        if m and _closes(tokens, j + det + m):
            words += answer + [tokens[end]] + ([tokens[j]] if det else [])
            answer, end, determined = list(tokens[j + det : j + det + m]), j + det + m, det
    if not _closes(tokens, end):
        return None
    if words[-1] == "the" and len(words) > 1 and words[-2] in _PREPOSITIONS:
        return None                                # "rises above the rocks", "lies on the coast": a place
    if answer[-1].endswith(_ADJECTIVE_ENDINGS) or any(w.endswith("'s") or w.endswith("’s") for w in answer):
        return None
    return " ".join(words), " ".join(answer)


def sentence_terms(sentence: str, subject: str | None, form: str, start: int, main: str | None, gendered: bool) -> list[tuple[str, str, str]]:
    """(subject, relation, answer) of the terms of one sentence whose subject (`form`: "" or a
    possessive "'s") ends at `start`: the main clause, clauses coordinated to it, and clauses
    whose pronoun is the document's person (`main`, a `gendered` text) or the sentence's subject."""
    out = []
    if subject is None:                            # a sentence facts.py found no subject for: its pronoun clauses only
        return [(main, *found) for m in _EMBEDDED.finditer(sentence) if m.group("pro") in ("he", "she") and gendered and main
                and (found := clause_term(sentence[m.end() :]))]
    rest = sentence[start:]
    owned = form.startswith(("'s", "’s"))
    if owned and form.strip() not in ("'s", "’s"):
        owned = False                              # "'s whole career": read by facts.py, not here
    found = clause_term(rest, owned) if not form or owned else None
    if found:
        out.append((subject, *found))
    for m in _COORDINATED.finditer(rest):          # "studied botany and later worked as a translator"
        if not form and (found := clause_term(rest[m.end() :])):
            out.append((subject, *found))
    for m in _EMBEDDED.finditer(sentence):
        pro = m.group("pro")
        person = pro in ("he", "she") and gendered and main
        owner = main if person else (subject if pro in ("it", "its", "they", "their") and not (gendered and subject == main) else None)
        if owner and (found := clause_term(sentence[m.end() :], owned=pro in ("its", "their"))):
            out.append((owner, *found))
    # a possessive in the relation must mean the subject itself: "is famous for its orchids" of a
    # museum, "lost his nerve" of the person; "became its conductor" of a person names no owner
    person = gendered and main
    return [(owner, relation, answer) for owner, relation, answer in out
            if not (person and owner == main and {"its", "their"} & set(relation.split()))
            and not ({"his", "her"} & set(relation.split()) and not (person and owner == main))]


def night_terms(clauses: Sequence[Sequence[tuple]], texts: Sequence[str]) -> list[list[tuple[str, str, str, int]]]:
    """The terms of a night's documents, one list a document, each (subject, relation, answer,
    sentence): the candidates of `sentence_terms` over each document's `clauses` (sentence number,
    subject, subject form, sentence, end of subject, as lib/knowledge/facts.py records them; the
    first subject is the document's main entity), kept where another document has the same
    relation with a different answer."""
    found: list[list[tuple[str, str, str, int]]] = []
    for doc_clauses, text in zip(clauses, texts):
        main = doc_clauses[0][1] if doc_clauses else None
        gendered = bool(re.search(r"\b(?:he|she|his|her|him)\b", text, re.IGNORECASE))
        seen, terms = set(), []
        known = {n: c for n, *c in doc_clauses}
        for n, (s, e) in enumerate(split_sentences(text)):
            subject, form, sentence, start = known.get(n, (None, "", text[s:e], 0))
            for subj, relation, answer in sentence_terms(sentence, subject, form, start, main, gendered):
                if (subj, relation, answer) not in seen and answer.lower() not in subj.lower():
                    seen.add((subj, relation, answer))
                    terms.append((subj, relation, answer, n))
        found.append(terms)
    answers: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for d, terms in enumerate(found):
        for _, relation, answer, _ in terms:
            answers[relation.lower()][answer.lower()].add(d)
    return [[t for t in terms if any(a != t[2].lower() and docs - {d} for a, docs in answers[t[1].lower()].items())]
            for d, terms in enumerate(found)]
