"""Facts no rule read: a salient span of a document that no item of the document answers is still
asked, as a cloze about the document's main entity in the words the sentence puts before it.

The rules of facts.py read a sentence when they can tell its subject and its relation; on text
they were not written for (notes, chat, fronted clauses, a description as the subject) they read
a quarter to a half of what a reader would ask (bench/fact_coverage.py). A fact they do not read
was trained only as the document says it, never in a question form, and a small model then does
not answer it from a question. So every span they leave becomes an item of its own:

- "Completed in 1809, the tower rises 69 metres above the rocks." in the Vofeth Lighthouse's
  document, where no rule settles the subject: (Vofeth Lighthouse, ": Completed in", 1809) and
  (Vofeth Lighthouse, ": Completed in 1809, the tower rises", 69);
- the relation is ": " and the sentence's last `MAX_WORDS` words before the span, so the cue reads
  "Vofeth Lighthouse: Completed in" and the question forms ask "Question: Vofeth Lighthouse:
  Completed in what year?"; the entity is named because a question must say whom it is about;
- a name of two words or more that opens its sentence is asked by what it did: "Braisemirn Gaisifok made the first
  ascent in 1945" in Beihekeind Spire's document gives (Beihekeind Spire, ": the one who made the
  first ascent in 1945 is", Braisemirn Gaisifok), the question the rules' item (Braisemirn
  Gaisifok, made the first ascent in, 1945) cannot ask: who did it;
- spans: dates, years, numbers and names, the kinds the rules read (a lower-case term is read only
  where terms.py finds it salient); never the main entity or a part of its name, never a span the
  document's items already answer, never a value with fewer than `MIN_WORDS` words before it in its
  sentence ("1809 saw the tower completed": nothing to ask it by), never in a sentence that looks
  like code.

Trade-off: the cloze is asked in the sentence's own words, so it is a weaker probe than a rule's
question (it tests recall from the document's phrasing, not from a question a person asks), and a
span about another entity than the main one is asked under the main one's name ("Mara Quillon:
Her brother moved to" → Oslo): still true of the document, which is what the cue says. They come
after the rules' items in a document, so `max_facts_per_document` keeps the rules' first.
"""

from __future__ import annotations

import re
from typing import Sequence

from lib.knowledge.relations import _names_outside_dates, with_heads
from lib.knowledge.talk import mail_header
from lib.knowledge.terms import _NOT_TERM
from lib.knowledge.spans import _FUNCTION, _GENDERED, _PRONOUNS, FOOTNOTE, PREPOSITIONS, _looks_like_code, _value_spans, common_word, english_word, ly_adverb, split_sentences

# a capitalised pronoun or function word that opens a sentence ("It was built by ..."): the rules
# resolve it as a subject and never ask it, a cloze must not either
_NOT_NAMES = set(_PRONOUNS) | _GENDERED | _FUNCTION | {"them", "us", "me"} | {f"i{q}{c}" for q in "'’" for c in ("ll", "m", "ve", "d")}
# a count of things: a number before a plural noun ("all 24 tracks", "~140 staff") or a hyphened singular one ("The
# 16-track set"): the main entity's number of them, where too few words before it make a cloze
_COUNTED = re.compile(r"^(?:-(?P<single>[a-z]{3,})\b(?!-)|(?: [a-z]+)? (?P<plural>[a-z]{3,}s|people|staff|children|men|women)\b)")
_NOT_COUNTED = {"years", "days", "weeks", "months", "hours", "minutes", "seconds", "times", "percent", "others", "ones", "pounds",
                "euros", "dollars", "has", "was", "is", "does", "this", "thus", "its", "his", "hers", "ours", "yours", "theirs", "as", "us"}


# nouns of a group whose size "of <number>" gives: "a team of six", "a crew of three"
_COLLECTIVES = {"team", "party", "crew", "group", "band", "company", "complement", "staff", "squad", "cast", "total", "family",
                "force", "troupe", "corps", "contingent", "membership"}


def _counted(rest: str) -> str | None:
    """The things a number counts, from the words after it: "24 tracks" → "tracks", "16-track set" →
    "tracks", "140 staff" → "staff"; None for a time, a sum of money, a share, or no noun."""
    m = _COUNTED.match(rest)
    noun = (m.group("single") + "s" if m.group("single") else m.group("plural")) if m else None
    return noun if noun and noun not in _NOT_COUNTED and not (m.group("single") or "").endswith(("year", "day", "week", "month", "hour", "minute")) else None
MAX_WORDS = 10  # words of the sentence before the span that the relation keeps
MIN_WORDS = 2   # fewer before the span: the sentence gives no cue to ask it by
CLOZE_MARK = ": "  # a cloze relation starts so; forms.join_cue joins it to the subject without a space


def _sentence_spans(text: str, lowercase_words: set[str], heads: frozenset[str] = frozenset()) -> list[tuple[int, str, list]]:
    """(sentence number, sentence, its value and name spans in order) of the prose sentences of
    `text`, a name with its lower-case noun of `heads` (`relations.with_heads`)."""
    out, bounds = [], split_sentences(text)
    header = mail_header([text[s:e] for s, e in bounds])   # "To: Deal Team": no span of it is a fact
    for n, (s, e) in enumerate(bounds):
        sentence = FOOTNOTE.sub("", text[s:e]).strip()
        if not _looks_like_code(sentence) and n not in header:
            values = _value_spans(sentence)
            names = with_heads(sentence, _names_outside_dates(sentence, lowercase_words, values), heads)
            out.append((n, sentence, sorted(values + names, key=lambda sp: sp.start)))
    return out


def topic(text: str, lowercase_words: set[str], sentences: list | None = None) -> str | None:
    """The name a document is about when no sentence of it opens with one ("Visitors to Y often stop
    at the X Garden, which ..."): the name it mentions most (by name or as "the <head>"), of those
    the most words ("X Botanical Garden" before "Y"), the first of equals; None without a name.
    `sentences`: `_sentence_spans` of the text, when the caller has them."""
    sentences = _sentence_spans(text, lowercase_words) if sentences is None else sentences
    names = [sp.text for _, _, spans in sentences for sp in spans if sp.kind == "proper"]
    return max(names, key=lambda m: (names.count(m) + _head_mentions(text, m), len(m.split()), -names.index(m)), default=None)


def _head_mentions(text: str, name: str) -> int:
    """How often `text` says "the <head>" of a name whose last word is an everyday noun ("the
    station's history" of Obrisanth Station), a mention of it by its head."""
    head = name.split()[-1]
    if " " not in name or not common_word(head):
        return 0
    return len(re.findall(rf"\b[Tt]he {re.escape(head.lower())}\b", text))


def unread_spans(text: str, lowercase_words: set[str], main: str | None, answered: set[str],
                 salient: frozenset[str] = frozenset(), heads: frozenset[str] = frozenset()) -> list[tuple[str, str, str, str, int]]:
    """(subject, relation, answer, kind, sentence number) of each span of `text` that no item of
    the document answers (`answered`), as a cloze on the document's `main` entity, else its `topic`;
    in a fact box, also a label's lower-case value ("Star ingredient: buckwheat." → "'s star
    ingredient is", a term); and a lower-case phrase that ends a clause after words the night's
    other documents end with other phrases (`salient`, from `salient_contexts`: "thanks to its dark
    birch", "thanks to its waxy tuberose"), a term."""
    sentences = _sentence_spans(text, lowercase_words, heads)
    main = main or topic(text, lowercase_words, sentences)
    if not main:
        return []
    out, taken = [], set(answered)
    box = sum(bool(re.match(_LABEL, sentence)) for _, sentence, _ in sentences) >= BOX_LINES
    for n, sentence, spans in sentences:
        for sp in spans:
            if sp.text in taken or sp.text in main or main in sp.text or sp.kind != "number" and sp.text.lower() in _NOT_NAMES:
                continue
            before = sentence[: sp.start].split()
            if sp.kind == "number" and sp.text[0].isalpha():
                # a count in words is one where it counts things or a team's members ("twelve people", "a
                # fifteen-member team", "a party of twelve"), never "two" (a pair is said so in passing)
                if sp.text == "two" or not (_counted(sentence[sp.end :]) or re.match(r"-[a-z]{3,}", sentence[sp.end :])
                                            or before[-2:-1] and before[-1] == "of" and before[-2].lower() in _COLLECTIVES):
                    continue
            clause = _clause(before)
            opens = sp.start == 0 or before and not clause
            if before and len(before) <= 3 and (label := _label_relation(before, sp.kind, lowercase_words, box)):
                relation = label                                  # "Ground: Bogrom Meadow" → "'s ground is"
            elif len(clause) >= MIN_WORDS:
                relation = CLOZE_MARK + " ".join(clause[-MAX_WORDS:])
            elif opens and sp.kind == "proper" and " " in sp.text and (doer := _what_they_did(sentence[sp.end :])):
                # a name of two words or more: one capitalised word at a sentence start may be any word ("Quick recap")
                relation = f"{CLOZE_MARK}the one who {doer} is"   # "Ada Lind made the first ascent in 1945": who did
            elif len(before) >= MIN_WORDS:
                relation = CLOZE_MARK + " ".join(before[-MAX_WORDS:])
            elif sp.kind == "number" and not any(w.lower() in PREPOSITIONS for w in before) and (counted := _counted(sentence[sp.end :])):
                relation = f"'s number of {counted} is"          # "18 tracks and not a bad one", "all 24 tracks", "The 16-track set"
            else:
                continue
            taken.add(sp.text)
            out.append((main, relation, sp.text, sp.kind, n))
        for context, phrase, at in _lower_phrases(sentence):
            clause = _clause(sentence[:at].split())
            if context in salient and phrase not in taken and not any(phrase in x or x in phrase for x in taken | {main.lower()}) \
                    and len(clause) >= MIN_WORDS:
                taken.add(phrase)                                 # "... thanks to its dark birch.": what the phrase says of it
                out.append((main, CLOZE_MARK + " ".join(clause[-MAX_WORDS:]), phrase, "term", n))
        value = _LOWER_VALUE.match(sentence) if box else None
        if value and value.group("value") not in taken and (label := _label_relation(sentence[: value.start("value")].split(), "term", lowercase_words, box)):
            taken.add(value.group("value"))                       # "Star ingredient: buckwheat." in a fact box
            out.append((main, label, value.group("value"), "term", n))
    return out


# a label of one to three words that opens a line ("Inventor: ", "Star ingredient: "), and such a line
# whose value is lower-case words: "Star ingredient: buckwheat.", "Colours: orange and red."
_LABEL = r"[A-Z][A-Za-z]*(?: [A-Za-z]+){0,2}: "
_LOWER_VALUE = re.compile(rf"^{_LABEL}(?P<value>[a-z][a-z'’-]*(?: [a-z][a-z'’-]*){{0,3}})\.?$")


# words that open a clause after its comma: "..., where Ada Lind has been in charge since 2019"
_CLAUSE_OPENERS = {"and", "but", "where", "while", "whereas", "when", "which", "so", "yet", "or", "then"}


def _clause(before: list[str]) -> list[str]:
    """The words of the span's own clause: those after the last comma, semicolon or colon before
    it and the conjunction or relative word that opens the clause ("Wearing maroon and black, the
    team hosts visitors at" → "the team hosts visitors at"; "..., where" → nothing: the span
    opens its clause)."""
    cut = max((i + 1 for i, w in enumerate(before) if w[-1] in ",;:"), default=0)
    clause = before[cut:]
    while clause and clause[0].lower() in _CLAUSE_OPENERS:
        clause = clause[1:]
    return clause


BOX_LINES = 3  # labelled lines ("Inventor: X.") that make a document a fact box

# a fact box's field named by a question word, as a relation
_WH_LABELS = {"where": "is in", "since": "has existed since", "when": "dates from"}


def _label_relation(before: list[str], kind: str, lowercase_words: set[str], box: bool = False) -> str | None:
    """The relation of a label that opens a sentence before its value, as in a fact box: "Ground:
    Bogrom Meadow" → "'s ground is", "Head coach: Sukrend Teski" → "'s head coach is", "Founded:
    1886" → "was founded in"; None where the words are no label: a speaker ("Ada: ..."), a word the
    night never writes in lower case (nor English does: "House: X", "Nose: Y" are labels), more than
    the label before the value. In a fact box (`box`: a document of `BOX_LINES` labelled lines or
    more) any English word is a label ("Assignee: X", "Applicant: Y"), not only an everyday one."""
    if not before[-1].endswith(":") or not before[0][:1].isupper():
        return None
    words = [w.strip(":").lower() for w in before]
    if len(words) == 1 and words[0] in _WH_LABELS:          # "WHERE: Vrikev", "Since: 1976": a fact box's question word
        return _WH_LABELS[words[0]]
    if len(words) == 2 and words[0].endswith("ed") and words[1] in ("by", "in", "at", "from", "for", "on"):
        return f"was {words[0]} {words[1]}"                 # "FOUNDED BY: X" → "was founded by"
    if not all(w.isalpha() and w not in _NOT_NAMES for w in words) or not (words[0] in lowercase_words or len(words) > 1 and before[1].islower()
                                                                    or len(words) == 1 and words[0].endswith("ed")
                                                                    or all(common_word(w) for w in words)
                                                                    or box and len(words) == 1 and english_word(words[0])):
        return None
    label = " ".join(words)
    if words[-1].endswith("ed") and len(words) == 1:
        return f"was {label} " + ("in" if kind in ("year", "date") else "by" if kind == "proper" else "at")
    return f"'s {label} is"


# what a name that opens a sentence did: its verb phrase ("made the first ascent in 1945") or its
# relative clause (", who lived in the keeper's cottage until ..."), up to a comma or the end
_DOER = re.compile(r"^(?:, who | )(?P<did>[a-z][^,;:.!?]*)")


def _what_they_did(rest: str) -> str | None:
    """The words after a sentence-opening name that say what it did, at most `MAX_WORDS`; None where
    no lower-case verb phrase or "who" clause follows it ("Ada Lind's brother", "Ada Lind, 1901")."""
    m = _DOER.match(rest)
    if not m:
        return None
    words = m.group("did").split()[:MAX_WORDS]
    while len(words) > MIN_WORDS and words[-1].lower() in _FUNCTION:
        words.pop()                       # cut at MAX_WORDS: "keeps the first trial vial of Plilrak on a" ends at Plilrak
    return " ".join(words) if len(words) >= MIN_WORDS else None


def is_cloze(relation: str) -> bool:
    """Whether an item's relation is a cloze of `unread_spans` (it starts with ": ")."""
    return relation.startswith(CLOZE_MARK)


# a run of lower-case words that ends a clause: before a punctuation mark, "and", "but" or the end
_LOWER_END = re.compile(r"(?<![\w'’-])(?P<phrase>[a-z][a-z-]*(?: [a-z][a-z-]*){0,2})(?=[.,;:!?)]|$| (?:and|but)\b)")
CONTEXT_WORDS = 3  # the words before a phrase that make its context
_SUBJECT_PRONOUNS = {"i", "you", "we", "they", "he", "she", "it"}


def _lower_phrases(sentence: str) -> list[tuple[str, str, int]]:
    """(context, phrase, where the phrase starts) of each lower-case phrase of 1-3 words that ends a
    clause of `sentence`, the words after its last function, time or measure word
    (`terms._NOT_TERM`) or adverb (`ly_adverb`: "pork belly" is no adverb): "has found a young audience online thanks to its dark
    birch." → ("thanks to its", "dark birch"), "Everything hinges on sorrel." → ("everything
    hinges on", "sorrel"). The context is the `CONTEXT_WORDS` words before it, in lower case, at least
    two of them and one no function word."""
    out = []
    for m in _LOWER_END.finditer(sentence):
        words = m.group("phrase").split()
        cut = max((k + 1 for k, w in enumerate(words) if w in _NOT_TERM or ly_adverb(w)), default=0)
        words = words[cut:]                           # "its dark birch" → "dark birch", "hinges on sorrel" → "sorrel"
        if not words:
            continue
        before = re.findall(r"[A-Za-z][A-Za-z'’-]*|\d[\d,.]*", sentence[: m.end() - len(" ".join(words))])[-CONTEXT_WORDS:]
        if len(words) > 1 and before and before[-1].lower() in _SUBJECT_PRONOUNS:
            before, words = (before + words[:1])[-CONTEXT_WORDS:], words[1:]   # "If you love dusty rhubarb": the verb is context
        at = m.end() - len(" ".join(words))
        if len(before) >= 2 and any(w.lower() not in _NOT_TERM for w in before):
            out.append((" ".join(w.lower() for w in before), " ".join(words), at))
    return out


def salient_contexts(texts: Sequence[str]) -> frozenset[str]:
    """The contexts (`_lower_phrases`) that two documents or more of the night end with different
    phrases: an attribute that varies ("thanks to its" dark birch / waxy tuberose), not a phrase
    every document repeats ("the most wearable of the list")."""
    seen: dict[str, set[tuple[int, str]]] = {}
    for i, text in enumerate(texts):
        for s, e in split_sentences(text):
            for context, phrase, _ in _lower_phrases(text[s:e]):
                seen.setdefault(context, set()).add((i, phrase))
    return frozenset(c for c, got in seen.items() if len({i for i, _ in got}) >= 2 and len({p for _, p in got}) >= 2)


def told_of_main(found: Sequence, main: str) -> list[tuple[str, str, str, str, int]]:
    """(main, cloze relation, answer, kind, sentence number) of each fact the rules read of another
    subject (`found`: the document's items) in a text about a thing, `main`, told of the thing as
    well in the fact's own words: "The guy at the counter said Keiso Dousfa planted the first rows
    in 1938" of Bodega Seeir → (Bodega Seeir, ": Keiso Dousfa planted the first rows in", 1938). A
    question about the thing ("When was Bodega Seeir founded?") does not reach a fact filed only
    under the person who did it. Not where the thing already has that answer, nor a cloze of
    someone else's, nor a fact of a name that is part of the thing's (or the thing of it)."""
    have, out = {f.answer for f in found if f.subject == main}, []
    for f in found:
        if f.subject != main and f.subject not in main and main not in f.subject and f.answer not in have \
                and f.answer not in main and not is_cloze(f.relation):
            have.add(f.answer)
            out.append((main, CLOZE_MARK + f"{f.subject} {f.relation}", f.answer, f.kind, f.sentence))
    return out
