"""The spans a fact can be made of, and the sentences they sit in (lib/knowledge/facts.py uses
them): sentence splitting, code detection, proper-name spans (titles included), dates, years and
numbers."""

from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Sequence

from lib.knowledge.forms import ADVERBS, AUXILIARIES, PLACE_OPENERS, base_verb, person_role

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
_MONTH = "(?:" + "|".join(MONTHS) + ")"
# a day and month without a year is a date too ("ships on October 15", "by 13 January"): notes and news
# leave the year to the reader, as they leave the weekday; a number after the day is no year ("May 12 2027")
_DATE = re.compile(rf"\b(?:\d{{1,2}} {_MONTH},? \d{{4}}|{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}|\d{{4}}-\d{{2}}-\d{{2}}|{_MONTH} \d{{4}}"
                   rf"|\d{{1,2}}(?:st|nd|rd|th)? {_MONTH}(?!,? \d)|{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?(?![\d,.]\d|,? \d))\b")
_YEAR = re.compile(r"(?<![\d.,])(1[0-9]{3}|20[0-9]{2})(?!\d|[.,]\d)")
_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?%?(?![\w,]\d)|(?<![\w.,])\d+(?:\.\d+)?%?(?![\w.,]?\d)")
# a version number ("8.7.0", "1.18.12", "v2.3"): three parts, or a "v" before the number; kind "version"
VERSION = re.compile(r"(?<![\w.,])(?:v\d+(?:\.\d+)*|\d+\.\d+\.\d+(?:\.\d+)*)(?![\w]|[.,]\d)")
# the prepositions: where a noun phrase or a name before them ends ("Krova Lodge near ...")
PREPOSITIONS = frozenset({"in", "on", "at", "of", "for", "from", "with", "by", "to", "into", "near", "under", "above", "below", "over",
                          "across", "along", "around", "behind", "beside", "between", "beyond", "inside", "outside", "past", "through",
                          "toward", "towards", "within", "off", "onto", "upon", "about", "against", "among", "via"})

_WORD = re.compile(r"[^\W\d_][\w'’\-]*")
# words that may join the parts of one proper name ("Bank of Ostra", "Lena van Dijk")
_CONNECTORS = {"of", "de", "da", "del", "della", "di", "van", "von", "der", "den", "la", "le", "du", "y", "al", "bin", "&"}
_PRONOUNS = {"he": "subject", "she": "subject", "they": "subject", "it": "subject",
             "his": "possessive", "her": "possessive", "their": "possessive", "its": "possessive"}
_GENDERED = {"he", "she", "his", "her", "him", "hers", "himself", "herself"}
# the numbers in words: "Sixty years on, X is ..." names no "Sixty"
NUMBER_WORDS = frozenset({"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen",
                          "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty",
                          "sixty", "seventy", "eighty", "ninety"})
# a count in words inside a sentence: before a plural noun ("up to seven players", "twenty-four
# tracks") or ending a phrase after "of"/"to" ("a crew of twelve."): a number value as its digits
# are; not "one" (a pronoun as often as a count), not a partitive ("two of them"), not after "the"
# ("the two clubs": ones the text has named), not a span of time ("two years later")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_UNITS = ("two", "three", "four", "five", "six", "seven", "eight", "nine")
_NUMBER_WORD = re.compile(r"(?<![\w\-’'])(?<!the )(?<!The )(?:(?:" + "|".join(_TENS) + r")(?:-(?:one|" + "|".join(_UNITS) + r"))?|"
                          + "|".join(sorted(NUMBER_WORDS - {"one"} - set(_TENS), key=lambda w: (-len(w), w))) + r")"
                          r"(?:(?= (?!(?:years|months|weeks|days|nights|hours|minutes|seconds|decades|centuries|generations|times|seasons|summers|winters|springs|autumns|weekends|evenings|mornings|afternoons)\b)"
                          r"(?:[a-z]+ )?(?:[a-z]+s|people|staff|children|men|women|crew)\b)"
                          r"|(?=-(?:member|person|man|woman|strong|crew|seat|bed|room|storey|track|song)s?\b)|(?P<end>(?=[.,;)]|$)))")
# sentence-initial words that are never the start of a name, whatever the corpus says
_FUNCTION = {"the", "a", "an", "in", "on", "at", "after", "before", "during", "when", "while", "this", "that", "these",
             "those", "there", "here", "as", "by", "for", "from", "with", "without", "since", "until", "then", "but",
             "and", "or", "if", "although", "because", "later", "today", "yesterday", "born", "question", "answer", "q", "a",
             "we", "i", "you", "our", "my", "your", "every", "each", "both", "some", "many", "most",
             # the other prepositions: "Under its curator, X, the collection has grown" has no name "Under"
             "under", "over", "across", "through", "near", "behind", "beside", "beyond", "among", "between", "along",
             "around", "against", "towards", "toward", "within", "upon", "into", "onto", "despite", "unlike", "via",
             "according", "throughout", "beneath", "above", "below", "inside", "outside",
             # a question's words: "Who has tried Kell Works?", "Anyone going to X?"
             "who", "what", "which", "where", "why", "how", "whose", "anyone", "anybody", "someone", "everyone", "nobody",
             "ever", "never",
             # the other determiners and quantifiers, a closed class: "Few clubs in X are as old as Y"
             "few", "several", "all", "any", "no", "none", "other", "another", "such", "much", "more", "less", "fewer",
             "various", "numerous", "certain", "either", "neither", "its", "their", "his", "her",
             # the words that open a turn of talk: "HOST 1: So my pick this week is X" names no "So"
             "so", "well", "yes", "yeah", "yep", "oh", "ok", "okay", "anyway", "also", "plus", "now", "actually",
             "honestly", "basically", "please", "thanks"} | NUMBER_WORDS
_PARTICIPLES = {"born", "built", "founded", "grown", "known", "made", "raised", "run", "sold", "taken", "given", "written",
                "held", "begun", "chosen", "drawn", "seen", "shown", "led", "brought", "bought", "taught", "bound"}
_ABBREV = re.compile(r"\b(?:Dr|Mr|Mrs|Ms|St|Prof|Jr|Sr|Mt|No|vs|etc|e\.g|i\.e|est|estd|approx|ca|b|d)\.$")
# "return" and "import" are English words too ("on the return journey", "the import of grain"): code only
# where a line or sentence opens with them in lower case, as a statement does; a bracketed footnote
# mark ("[12]") is an encyclopedia's, not code's; a semicolon between two clauses of words ("since
# 1995; most of its people live in", "the latest tag; Neskin Dugi, who", "1864; Café Trialisk") is prose's, one that ends a
# statement ("x += 1;", "f(x); g(y)") code's
_CODE_CHARS = re.compile(r"[{}\[\]=<>]|(?<![\w'’\"”)]);|;(?! [^\W\d_](?:[^\W\d_A-Z]|['’])* [^\W_])|\bdef |^\s*(?:from \S+ )?import |^\s*return\b|::|->|#include|\(\)")
FOOTNOTE = re.compile(r"\[(?:\d{1,3}|citation needed)\]")


# a colon before a clause with a subject and a verb of its own ends a sentence: a label, a speaker or a
# heading in notes ("Quick recap: Pagress is being built for ...", "From the call: they want ..."), not a
# list ("released three albums: Songs, Harbour and Night")
_CLAUSE_SUBJECT = r"(?:(?:[Tt]he )?[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*(?: [a-z]+)?|the [a-z]+(?: [a-z]+)?|they|it|he|she|we)"
_FINITE = r"(?:is|are|was|were|has|have|had|will|would|can|could|want|need|[a-z]+s|[a-z]+ed)\b"
_COLON_CLAUSE = re.compile(rf": (?={_CLAUSE_SUBJECT} {_FINITE})")


# the mark that opens a list's item in notes: "- ", "* ", "• "
_BULLET = re.compile(r"\s*(?:[-*•–—]\s+)?")


# words that greet the one a letter, a mail or a message is to: "Dear Mum,", "Hi Stabim Dreikvialt,"
_GREETINGS = {"Dear", "Hi", "Hello", "Hey", "Hiya", "Greetings", "Morning", "Evening", "Afternoon"}


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of `text`: ends at . ! ? (and the quote that
    closes there) before a space and an upper-case letter, digit or quote (not after Dr., St.,
    e.g.), at line breaks and at the bars between a fact box's fields, and at a colon
    before a clause of its own (`_COLON_CLAUSE`); a list's bullet ("- ") is no part of its item."""
    spans = []
    for block in re.finditer(r"[^\n|]+", text):      # a fact box's fields: "House: X | Nose: Y | Launched: 1994"
        start = block.start() + len(_BULLET.match(block.group()).group())   # "- Date locked: 6 June": a list's item
        for m in re.finditer(r"[.!?](?:\[(?:\d{1,3}|citation needed)\])*[\"”’]?(?=\s+[\"'“(]?[A-Z0-9])", block.group()):
            end = block.start() + m.end()
            if _ABBREV.search(text[max(start, end - 6) : end]):
                continue
            spans.append((start, end))
            start = end
            while start < block.end() and text[start].isspace():
                start += 1
        if start < block.end():
            spans.append((start, block.end()))
    cut = []
    for s, e in spans:
        for m in _COLON_CLAUSE.finditer(text, s, e):
            cut.append((s, m.start() + 1))
            s = m.end()
        cut.append((s, e))
    return [(s, e) for s, e in cut if text[s:e].strip()]


# a quoted line of a reply, a mail or a forum post ("> what's the story with X?"): the quote mark is no code
_QUOTE_MARK = re.compile(r"^\s*(?:>\s?)+(?=\S)")


def _looks_like_code(sentence: str) -> bool:
    sentence = _QUOTE_MARK.sub("", FOOTNOTE.sub("", sentence))
    return bool(_CODE_CHARS.search(sentence)) or sentence.count("_") > 1 or sentence.count("(") > 2


def looks_like_code_document(text: str, max_share: float = 0.2) -> bool:
    """More than `max_share` of the non-blank lines look like code (brackets, `=`, keywords, or an
    indented line): a source file's docstrings ("Defaults to None.") are not facts."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return False
    code = sum(1 for ln in lines if _looks_like_code(ln) or ln.startswith(("    ", "\t")) or ln.rstrip().endswith(":") and " " not in ln.strip())
    return code > max_share * len(lines)


# a code of capitals and digits names a thing as a capitalised word does: a road ("M28"), a formula
# ("C12H22O11"), a model ("B-52")
_CODE_NAME = re.compile(r"^[A-Z][A-Z\-]*\d[A-Z0-9\-]*$")


def _capitalised(word: str) -> bool:
    return word[:1].isupper() and not word.isupper() or (len(word) > 1 and word.isupper() and word.isalpha() and len(word) <= 5) \
        or bool(_CODE_NAME.match(word))


@dataclass
class _Span:
    start: int
    end: int
    text: str
    kind: str


_HONORIFICS = {"Mr", "Mrs", "Ms", "Dr", "Prof", "St", "Mt"}


def _proper_spans(sentence: str, lowercase_words: set[str]) -> list[_Span]:
    """Runs of capitalised words (joined by name connectors), the sentence-initial ordinary word dropped."""
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(sentence)]
    spans, run = [], []

    def close():
        while run and run[-1][2].lower() in _CONNECTORS:
            run.pop()
        if run:
            spans.append(list(run))
        run.clear()

    for k, (s, e, w) in enumerate(words):
        gap = sentence[run[-1][1] : s] if run else ""
        if run and gap not in (" ", "-", " & ") and not (gap == ". " and run[-1][2] in _HONORIFICS):
            close()                                # "Mr. Abernathy", "Dr. Ada Lind": the title's period is no break
        if _capitalised(w):
            run.append((s, e, w))
        elif run and w.lower() in _CONNECTORS and k + 1 < len(words) and _capitalised(words[k + 1][2]):
            run.append((s, e, w))
        else:
            close()
    close()
    out = []
    for r in spans:
        if r[0][0] == words[0][0] and r[0][2] in _GREETINGS and sentence[r[-1][1] :].startswith((",", "!")):
            continue                               # "Dear Mum, greetings from X", "Hi Ada Lind,": a greeting, no name of the text's
        # a sentence-initial capital (also a quoted sentence's) is only a name if the word is never
        # written in lower case
        while r and (r[0][0] == words[0][0] or sentence[: r[0][0]].endswith(('"', "“"))) and (re.split(r"['’]", r[0][2].lower())[0] in _FUNCTION
                                                or r[0][2].lower() in lowercase_words
                                                or len(r) == 1 and _fronting_word(r[0][2]) or len(r) == 1 and _gerund(sentence, r[0])
                                                or len(r) == 1 and _common_opener(sentence, r[0])
                                                or len(r) == 1 and _plural_opener(sentence, r[0])
                                                or len(r) == 1 and _english_opener(sentence, r[0])
                                                or len(r) > 1 and _glued_opener(r)):
            r = r[1:]
            while r and r[0][2].lower() in _CONNECTORS:
                r = r[1:]
        end = r[-1][1] - 2 if r and r[-1][2].endswith(("'s", "’s")) and len(r[-1][2]) > 3 else (r[-1][1] if r else 0)
        if r and r[-1][2].endswith(("'", "’")) and sentence[: r[0][0]].endswith(("'", "‘", "’")):
            end -= 1                               # "'Tindlemoor Ruby'": a name in single quotes, not a plural's possessive
        if r and not (len(r) == 1 and (r[0][2] in WEEKDAYS or r[0][2] in MONTHS and not r[0][2] == "May")):
            # "The Subon Gallery's director": the owner's name without its possessive ending; a weekday ("on
            # Monday") or a lone month ("at the end of March") is a time relative to a day or a year the text
            # does not state ("May" is also a name)
            out.append(_Span(r[0][0], end, sentence[r[0][0] : end], "proper"))
    return _titles(sentence, [_with_version(sentence, sp) for sp in out])


# a release number after a name is part of it ("Draibia 2.7", "Kell OS 10.4.1"); not a quantity ("Vask 3.2 million")
_VERSION = re.compile(r"^ \d+\.\d+(?:\.\d+)?(?!\d|%|\.\d|,\d| (?:million|billion|thousand|per|percent|hundred)\b)")


# a number after "No." is part of the name: "Vrauliv No. 3", "Symphony No. 5"
_NUMBERED = re.compile(r"^\. ?\d+(?![\d,.]\d)")


def _with_version(sentence: str, span: _Span) -> _Span:
    """The name with the release number right after it: "Draibia 2.7, released by ..." names
    version 2.7 of Draibia, whose facts the sentence states; "Vrauliv No. 3" its number."""
    m = _VERSION.match(sentence[span.end :]) or (_NUMBERED.match(sentence[span.end :]) if span.text.endswith(" No") else None)
    return _Span(span.start, span.end + m.end(), sentence[span.start : span.end + m.end()], span.kind) if m else span


# short words a title may hold between its capitalised ones ("Letters from Geba", "Night at the Opera")
_TITLE_WORDS = {"from", "in", "on", "at", "for", "to", "of", "the", "a", "an", "and", "with", "without", "under", "over"}
_TITLE_GAP = re.compile(r"^ (?:from|in|on|at|for|to|of|the|with|without|under|over)(?: (?:the|a|an))? $")
_QUOTED = re.compile(r"[\"“](?P<inner>[A-Z][^\"“”]{0,80}?)[\"”]")


def _titles(sentence: str, spans: list[_Span]) -> list[_Span]:
    """Names whose title holds lower-case words, read whole where the text marks where they end:
    between quotes ('released "Night in Ceanam" in 2019'), or set off by commas after a common
    noun ("Their debut album, Letters from Geba, was ..."). Not elsewhere: "wrote the novel Ulysses
    in Paris" is a title and a place, which words alone cannot tell from "Night in Ceanam"."""
    for m in _QUOTED.finditer(sentence):
        inner = m.group("inner").rstrip(" ,.;:")
        words = inner.split()
        if len(words) <= 10 and all(w[:1].isupper() or w[:1].isdigit() or w in _TITLE_WORDS for w in words):
            a, b = m.start("inner"), m.start("inner") + len(inner)
            spans = [x for x in spans if x.end <= a or x.start >= b] + [_Span(a, b, inner, "proper")]
    spans.sort(key=lambda x: x.start)
    out: list[_Span] = []
    for sp in spans:
        prev = out[-1] if out else None
        if prev is not None and _TITLE_GAP.match(sentence[prev.end : sp.start]) and not sp.text.startswith(MONTHS) \
                and _title_closed(sentence, prev.start, sp.end):
            # "album, Letters from Geba,": one apposed title (a chain of them is merged step by step,
            # so the test of what follows is on the last part)
            out[-1] = _Span(prev.start, sp.end, sentence[prev.start : sp.end], "proper")
        else:
            out.append(sp)
    return out


def _title_closed(sentence: str, start: int, end: int) -> bool:
    """Whether the words between `start` and `end` ("Evening in Stefaix") are one name by where
    they stand: set off by commas after a common noun ("album, Letters from Geba,"); the subject
    of the sentence, or of its clause after a fronted phrase, right before its verb ("Evening in
    Stefaix is an oil painting", "Painted in 1679, Girl from Necith shows") where one word comes
    before the gap ("The Louvre in Paris holds" is a place's); or a verb's object
    that an apposition describes ("holds Evening in Bidroth, a portrait by"). A place and a place
    ("born in Oslo in Norway") stands in none of these."""
    before, after = sentence[:start], sentence[end:]
    if re.search(r"\b[a-z]+, $", before) and after.startswith(","):
        return True
    nxt = re.match(r"^ (?P<w>[a-z]+)\b", after)
    verb = bool(nxt) and (nxt.group("w") in AUXILIARIES or base_verb(nxt.group("w")) is not None)
    first = sentence[start:end].split()
    if verb and (before.strip() in ("", "The") or before.endswith(", ")) and (len(first) > 1 and first[1][:1].islower()
                                                                            or first[0] == "The" and first[2][:1].islower()):
        return True                     # one word before the gap: "Kiakoul Gallery in Jaibrirora holds" is a place's
    prev = re.search(r"\b(?P<w>[a-z]+) (?:the )?$", before)
    return bool(prev) and base_verb(prev.group("w")) is not None and bool(re.match(r"^, (?:a|an) [a-z]", after))


def _gerund(sentence: str, word: tuple[int, int, str]) -> bool:
    """ "Commanding her was ...", "Crossing the river took ...": an -ing word before an object is a
    verb, not a name ("Reading is a town" keeps its name); so is one before a preposition whose
    phrase a comma closes before any auxiliary, with the subject after it ("Rising to 1,349 metres,
    Mount X lies ...", "Standing on Mount X, overlooking Y, is ...": another participle's phrase after
    it; not "Evening in Stefaix is a painting by A, B and C" nor "Evening in Stefaix hangs in Oslo,
    which ...")."""
    if not word[2].endswith("ing"):
        return False
    rest = sentence[word[1] :]
    if re.match(r" (?:her|him|his|its|their|them|it|the|a|an) ", rest):
        return True
    phrase = re.match(r" (?:to|in|from|at|on|into|through|along|across|above|over|near|under|between|for) (?P<words>(?:[^,]|,(?=\d))*?), (?:the |[Tt]he |it |he |she |they |[A-Z]|[a-z]+ing )", rest)
    if phrase:
        return not set(phrase.group("words").split()) & AUXILIARIES
    # "Wearing maroon and black, the team hosts ...": lower-case words, then the subject after a comma
    phrase = re.match(r" (?P<words>[a-z][a-z ]*?), (?:the |it |he |she |they )", rest)
    return bool(phrase) and not set(phrase.group("words").split()) & AUXILIARIES


# a predicate that opens a fronted phrase before its subject: "Home to some 300 researchers, the X ...", "Close to Y, X ..."
FRONTED_PREDICATES = {"home", "close", "next", "adjacent"}
# participles of a state, which still holds: "Based in Y, X ..." → X is based in Y
STATIVE_PARTICIPLES = {"based", "located", "situated", "headquartered", "housed", "sited", "centred", "centered", "perched", "nestled"}


def _common_opener(sentence: str, word: tuple[int, int, str]) -> bool:
    """ "Version 3.6 of X ...", "Forces led by X defeated ...", "Home to some 300 researchers, X ...":
    a lone capitalised word before a number and "of", before a participle and "by" (a reduced
    relative clause), or a fronted predicate before "to", is a common word at the sentence start,
    not a name ("Apollo 11 landed", "Kell led by 3 points" keep theirs)."""
    rest = sentence[word[1] :]
    if word[2].lower() in FRONTED_PREDICATES and rest.startswith(" to "):
        return True
    return bool(re.match(r" \d+(?:\.\d+)* of ", rest)) or bool(re.match(r" (?P<w>[a-z]+) by ", rest)) \
        and (re.match(r" (?P<w>[a-z]+)", rest).group("w") in _PARTICIPLES or re.match(r" [a-z]{3,}ed ", rest) is not None)


# prepositions after a plural common noun that opens a generic sentence ("Sailors on the X", "Visitors to X")
_PLACE_PREPOSITIONS = {"in", "on", "at", "to", "from", "of", "aboard", "below", "above", "near", "along", "across", "around",
                       "inside", "outside", "beyond", "behind", "beside", "under", "over", "throughout", "within", "across"}


def _plural_opener(sentence: str, word: tuple[int, int, str]) -> bool:
    """ "Sailors on the X steer by ...", "Visitors to X often stop ...", "Pilgrims reach the X ...": a
    lone capitalised word in the plural (-s, -men) before a preposition and a word (not a number:
    "Athens in 1896 hosted" keeps its name), or before a lower-case word that is no verb of a
    singular subject and then an article or a name ("Commuters cross the X": a plural verb), is a
    common noun, the subject of a generic sentence, not a name ("Athens lies", "Athens was", "Jones
    said" keep theirs)."""
    w = word[2]
    if not (w.endswith("men") or w.endswith("s") and not w.endswith(("ss", "us", "is"))) or not w.isalpha():
        return False
    nxt = re.match(r" (?P<w>[a-z]+) (?P<after>\S+)", sentence[word[1] :])
    if not nxt:
        return False
    v, after = nxt.group("w"), nxt.group("after")
    if v in _PLACE_PREPOSITIONS:
        return not after[:1].isdigit()
    verb_like = v in AUXILIARIES or v in ADVERBS or base_verb(v) is not None or v in _PARTICIPLES
    return not verb_like and (after in ("the", "a", "an") or after[:1].isupper())


# how common a word must be in English (Zipf: log10 of uses per billion words; "key" 5.1, "founded"
# 4.5, "abstract" 4.1) to be taken for a word, not a name, when it opens a sentence alone; most
# place names lie below ("oslo" 3.5, "berkshire" 3.5)
COMMON_ZIPF = 4.0
# what follows a name that opens a sentence as its subject: "London is", "Apple released"
_SUBJECT_VERB = re.compile(r" (?:is|was|are|were|has|had|have|will|would|can|could|may|might|shall|should|must|did|does|do|[a-z]{2,}ed)\b")


@lru_cache(maxsize=65536)
def _zipf(word: str) -> float:
    """wordfreq's Zipf frequency of `word` in lower case (log10 of uses per billion words)."""
    from wordfreq import zipf_frequency

    return zipf_frequency(word.lower(), "en")


# how common a word in capitals must be to be a label, not a name ("REVIEW" 5.1, "CASE" 5.6, "HOLD" 5.2;
# "NASA" 4.2, "FIFA" 4.2, "NATO" 4.0 stay names)
LABEL_ZIPF = 4.5


def capitals_label(answer: str) -> bool:
    """Whether an answer is one everyday word in capitals, four letters or more: a genre's, a
    section's or a form's label ("REVIEW — It takes ...", "GALLERY 4, CASE 11", "rating HOLD"), no
    name; an acronym ("NASA", "US") is no everyday word or too short."""
    return len(answer) >= 4 and answer.isalpha() and answer.isupper() and _zipf(answer) >= LABEL_ZIPF


def common_word(word: str) -> bool:
    """Whether `word` is an everyday English word (wordfreq's frequency of its lower case at least
    `COMMON_ZIPF`): "key", "meet", "huge", "development"; not "miagror", "oslo"."""
    return _zipf(word) >= COMMON_ZIPF


# how common a word must be to be an English word at all ("assignee" 2.2, "varietal" 2.5); a made-up
# name is 0
ENGLISH_ZIPF = 2.0


def english_word(word: str) -> bool:
    """Whether `word` is an English word at all, however rare (`ENGLISH_ZIPF`): "assignee"; not "miagror"."""
    return _zipf(word) >= ENGLISH_ZIPF


def ly_adverb(word: str) -> bool:
    """Whether a word in "-ly" is an adverb made from an everyday word ("chiefly", "happily",
    "gently"), not a noun that ends so ("belly", "jelly", "family", "assembly")."""
    return word.endswith("ly") and (common_word(word[:-2]) or common_word(word[:-3] + "y") or common_word(word[:-1] + "e"))


def _english_opener(sentence: str, word: tuple[int, int, str]) -> bool:
    """ "Key facts about ...", "Meet the ...", "Huge thanks to ...", "Fun fact: ...": a lone
    capitalised everyday word at the sentence start is that word, not a name, unless a verb
    follows it as its subject ("London is ...", "Reading was ...", "Development took ..." keep
    theirs: a name that is also a word, or a word the text makes the subject), nor a title that
    goes on with a name ("Evening in Stefaix", "Bridge at Zairass"). A hyphened compound of everyday
    words ("Open-day") is one too."""
    rest = sentence[word[1] :]
    parts = word[2].split("-")                     # "Open-day schedule for ...": a compound of everyday words
    return all(p.isalpha() and common_word(p) for p in parts) and not _SUBJECT_VERB.match(rest) and not _TITLE_GOES_ON.match(rest)


# words that begin names as their first part, though everyday words: "Mount Zeigrol", "Lake Vrai", "New Drosk"
_NAME_OPENERS = PLACE_OPENERS | {"mount", "saint", "san", "santa", "river", "bay", "new", "north", "south",
                 "east", "west", "northern", "southern", "eastern", "western", "upper", "lower", "great", "little", "old",
                 "royal", "grand", "united", "central", "national", "university", "college", "bank", "club", "hotel",
                 "house", "st", "el", "los", "las", "le", "la", "al", "van", "von", "de", "camp", "loch", "sir",
                 "dame", "king", "queen", "prince", "princess", "lord", "lady", "general", "red", "white", "black", "blue",
                 "green", "golden", "silver", "air", "radio", "studio", "hall", "castle", "fc", "ac", "real", "sporting",
                 "athletic", "inter", "team", "taverna", "café", "cafe", "the"}


def _glued_opener(run: list[tuple[int, int, str]]) -> bool:
    """ "Founder Zytrolav Grorax, who ...", "Bought Kligrais No. 6 after ...", "Apparently Skuvre
    Skeirith made it", "Sales of Vrauliv No. 3 doubled": an everyday word that opens the sentence
    before a name of words English does not use (an adverb, a verb in the past, a person's role, a
    plural noun before "of") is not part of the name ("Hair Rezix", "Bus Quaviam" keep theirs); words that begin names ("Mount", "Lake", "New", "University")
    and names of English words ("United States", "Golden Gate") keep theirs."""
    first, second = run[0][2], run[1][2]
    if not first.isalpha() or first.lower() in _NAME_OPENERS or not common_word(first):
        return False
    w = first.lower()
    verb = base_verb(w)
    if not (w in ADVERBS or w.endswith("ly") or verb is not None and verb[1] == "did" or person_role(w)
            or second.lower() == "of"):
        return False                       # "Hair Rezix has run Holenly": a name may begin with a noun
    if second.lower() in _CONNECTORS:
        # "Sales of X": a plural noun's; "Bank of X", "University of X" name an institution
        return second.lower() == "of" and len(run) > 2 and first.endswith("s") and not first.endswith("ss") \
            and not common_word(run[2][2])
    return second[:1].isupper() and second.isalpha() and not common_word(second)


# what may stand before a name that opens its sentence as the subject: "The X", "That first X drew", "This year's X"
SUBJECT_OPENING = re.compile(r"(?:(?:the|this|that)(?: (?:first|second|third|last|latest|original|inaugural|next|annual))?|this year['’]s)?")


def glued_word(sentence: str, name: _Span) -> bool:
    """Whether all that comes before `name` in `sentence` is one word `_glued_opener` dropped from
    it ("Founder Zytrolav Grorax, who ..."): the name is the sentence's subject as if it opened it."""
    m = re.fullmatch(r"(?P<w>[A-Z][a-z]+) (?:of )?", sentence[: name.start])
    words = [(m.start("w"), m.end("w"), m.group("w"))] if m else []
    words += [(0, 0, w) for w in sentence[m.end("w") : name.end].split()] if m else []
    return bool(m) and _glued_opener(words)


_TITLE_GOES_ON = re.compile(r" (?:in|at|of|on|by|for|and|to|from|with|over|under) [A-Z]")


def _fronting_word(word: str) -> bool:
    """A word that opens a fronted phrase, not a name, when it stands alone at a sentence start:
    an adverb ("First described in 1782, ..."), a participle ("Written by ...", "Formed in ...")."""
    w = word.lower()
    return w in ADVERBS or w in _PARTICIPLES or (len(w) > 4 and w.endswith("ed"))


# the lower-case words a year is followed by ("in 1956 for", "since 1961 the"); any other word after a
# four-digit number is its unit or its noun ("1038 tons", "1200 people")
_NOT_UNITS = {"in", "on", "at", "by", "of", "from", "for", "to", "with", "under", "near", "into", "and", "or", "but", "the", "a",
              "an", "when", "while", "after", "before", "until", "since", "during", "as", "he", "she", "it", "they", "its", "his",
              "her", "their", "was", "is", "were", "are", "had", "has", "which", "who", "where", "that", "this", "then", "bc",
              "ad", "bce", "ce", "onwards", "onward"}


# an amount is its currency sign and its scale word with its digits ("$2.5 million", "€124,000", "£3m"), and a
# number is its scale word ("2.5 million people"): "2.5" alone answers no question of what was raised
_AMOUNT = re.compile(r"(?<![\w.,])(?:[$€£¥] ?\d(?:\d|,(?=\d))*(?:\.\d+)?(?: ?(?:million|billion|trillion|thousand|bn|m|k)\b)?"
                     r"|\d(?:\d|,(?=\d))*(?:\.\d+)? (?:million|billion|trillion)\b)(?![\w,]\d)")   # "$331, was": no comma of its own


def _value_spans(sentence: str) -> list[_Span]:
    spans = [_Span(m.start(), m.end(), m.group(), "date") for m in _DATE.finditer(sentence)]
    taken = [(s.start, s.end) for s in spans]
    free = lambda a, b: all(b <= s or a >= e for s, e in taken)  # noqa: E731
    for m in VERSION.finditer(sentence):
        if free(m.start(), m.end()):
            spans.append(_Span(m.start(), m.end(), m.group(), "version"))
            taken.append((m.start(), m.end()))
    for m in _AMOUNT.finditer(sentence):
        if free(m.start(), m.end()):
            spans.append(_Span(m.start(), m.end(), m.group(), "number"))
            taken.append((m.start(), m.end()))
    for m in _YEAR.finditer(sentence):
        unit = re.match(r" ([a-z]+)", sentence[m.end() :])
        if unit and unit.group(1) not in _NOT_UNITS or re.match(r" ?[°%]", sentence[m.end() :]):
            continue                                   # "a barque of 1038 tons", "melts at 1397 °C": a number with its unit, not a year
        if free(m.start(), m.end()):
            spans.append(_Span(m.start(), m.end(), m.group(), "year"))
            taken.append((m.start(), m.end()))
    for m in _NUMBER.finditer(sentence):
        if free(m.start(), m.end()):
            spans.append(_Span(m.start(), m.end(), m.group(), "number"))
            taken.append((m.start(), m.end()))
    for m in _NUMBER_WORD.finditer(sentence):
        if free(m.start(), m.end()) and (m.group("end") is None or sentence[: m.start()].endswith(("of ", "to "))):
            spans.append(_Span(m.start(), m.end(), m.group(), "number"))
            taken.append((m.start(), m.end()))
    return spans


def _lowercase_words(texts: Sequence[str]) -> set[str]:
    words: set[str] = set()
    for t in texts:
        words.update(w for w in _WORD.findall(t) if w.islower())
    return words
