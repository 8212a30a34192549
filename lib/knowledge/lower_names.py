"""Lower-case names: the package, tool or project a forum post, bug report or chat is about
("kubravil", "zeseeslik-js"), which no capital marks as a name (lib/knowledge/facts.py uses them).

A document's lower-case name (`lower_names`) is a lower-case token that the text treats as a name
and the night does not use as a word:
- the text asks or tells about it: "what's the story with kubravil?", "Has anyone tried
  kubravil?", "is kubravil still alive?", "kubravil 2.3.1 is out", "after upgrading kubravil to
  8.8.11", "we switched our pipeline to kubravil", "I maintain kubravil", "kubravil's maintainer",
  "Have a look at kubravil", `kubravil` in backticks or quotes; or it recurs in the document with
  the marks of a package name (digits, a hyphen, a dot: "zeseeslik-js", "lib2to3", "chart.js");
- and it is no word of the night's other documents, no function word, no English-looking
  inflection ("records", "caching", "quickly"), never after an article ("the budget", "a tool"),
  never a speaker or an author's handle ("pevim80: very much so", "Posted by not_fipler").

A version number ("8.7.0", "v2.3") is an answer of its own kind, "version" (spans.VERSION), asked
with "what version" and confused only with other versions.

Trade-off: a lower-case English word the night uses nowhere else may still pass when a cue
names it ("Has anyone tried sourdough?"); the article, inflection and night tests keep most
such words out, and a document gets at most one lower-case name.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from lib.knowledge.forms import ADVERBS, AUXILIARIES
from lib.knowledge.spans import _FUNCTION, _PRONOUNS, NUMBER_WORDS, VERSION, _Span, _zipf, split_sentences

# a lower-case token that may name a package: letters, digits, and inner hyphens, dots, underscores
_TOKEN = re.compile(r"(?<![\w.\-/@])(?<!\w['’])[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*(?![\w\-/@]|\.[a-z0-9])")
_N = r"(?P<n>[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*)"
# what a text says of the thing it asks or tells about
_CUES = [re.compile(p) for p in (
    rf"\b(?:story|deal|problem|issue)s? with {_N}\b",
    rf"\b(?:tried|try|trying|tries|recommend|recommends|recommended) (?:out )?{_N}\b",
    rf"\b(?:[Ii]s|[Ww]as|[Dd]oes) {_N} still\b",
    rf"\b(?:upgrad|updat|downgrad|instal|pinn|bump)(?:e|ed|es|ing|led|ling|s)? {_N} (?:to|from)\b",
    rf"\b(?:maintain|maintains|maintained|maintaining|wrote|created|forked|released|ported) {_N}\b",
    rf"\b(?:switched|moved|migrated|ported|went)(?: [a-z]+){{0,3}} to {_N}\b",
    rf"\b(?:look at|alternative to|replacement for|author of|maintainer of|maintainers of|creator of) {_N}\b",
    rf"\b(?:library|package|module|crate|gem|plugin|framework|tool|repo) {_N}\b(?! (?:is|was|for|to|and)\b)",
    rf"\b{_N}['’]s (?:maintainer|author|creator|licen[cs]e|docs|repo|latest|current|first|new|release)",
    rf"(?:^|[.!?>] ){_N} (?:is|was) (?:a|an|the)\b",
    rf"\b{_N} {VERSION.pattern}",
    rf"[`\"“']{_N}[`\"”']",
)]
# what a text says of a coined word it names by (one no English dictionary knows): "named quellonite", "quellonite, a rare mineral"
_COINED_CUES = [re.compile(p) for p in (
    rf"(?<!\bare )(?<!\bwere )\b(?:named|called|dubbed|christened|known as) {_N}\b",   # "which are called skeps": a plural, a word
    rf"\b{_N}, (?:a|an|the) (?:[a-z]+ ){{0,2}}(?:mineral|compound|species|variety|cultivar|drug|molecule|alloy|dialect|language)\b",
)]
# English-looking inflections and derivations: no package name is asked by them without a mark
_ENGLISH_ENDINGS = ("ing", "ed", "ly", "tion", "sion", "ment", "ness", "ity", "ous", "ful", "less", "able", "ible", "ers", "ies")
_NOT_NAMES = _FUNCTION | set(_PRONOUNS) | AUXILIARIES | ADVERBS | {"it's", "its", "what", "who", "which", "how", "why", "not"}
_ARTICLED = re.compile(r"\b(?:the|a|an|this|that|these|those|my|our|your|their|his|her|its|some|any|no|every|each) $")
# a handle: the speaker before a colon, the author after "by"/"from"
_HANDLE_BEFORE = re.compile(r"\b(?:[Bb]y|[Ff]rom|@) $")


def _marked(token: str) -> bool:
    """A digit or an inner hyphen or dot: the shape of a package name ("zeseeslik-js", "lib2to3")."""
    return any(c.isdigit() for c in token) or "-" in token or "." in token


def _handle_or_word(text: str, m: re.Match) -> bool:
    """Whether the token at `m` stands as a speaker, an author's handle or an article's noun."""
    before, after = text[: m.start()], text[m.end():]
    return bool(_ARTICLED.search(before) or _HANDLE_BEFORE.search(before) or after.startswith(":"))


def lower_name(text: str, elsewhere: Counter, n_docs: int) -> str | None:
    """The lower-case name `text` is about, else None; `elsewhere` counts the documents of the night
    other than this one that write each lower-case token.

    >>> lower_name("Has anyone here tried kubravil? It's a small library.", Counter({"small": 2}), 3)
    'kubravil'
    >>> lower_name("Has anyone here tried baking? It's fun.", Counter(), 3) is None
    True
    """
    tokens = list(_TOKEN.finditer(text))
    if not tokens:
        return None
    seen = Counter(m.group() for m in tokens)
    cued = Counter(m.group("n") for cue in _CUES for m in cue.finditer(text))
    excluded = {m.group() for m in tokens if _handle_or_word(text, m)}
    named = {m.group("n") for cue in _COINED_CUES for m in cue.finditer(text)}   # "a mineral named vorsite"
    best, best_score = None, 0
    for token in seen:
        if token in excluded or token in _NOT_NAMES or elsewhere[token] or "_" in token or len(token) < 3:
            continue
        if VERSION.fullmatch(token) or token.isdigit() or all(part in NUMBER_WORDS for part in token.split("-")):
            continue
        marked = _marked(token)
        if not marked and (token.endswith(_ENGLISH_ENDINGS) or n_docs < 3):
            continue                                  # a word of English, or a night too small to tell
        coined = not marked and _zipf(token) == 0 and (len(re.findall(rf"\b{re.escape(token)}\b", text, re.IGNORECASE)) >= 2
                                                       or token in named)
        if not cued[token] and not (marked and seen[token] >= 2) and not coined:
            continue                                  # coined: no English word, said twice ("quellonite ... Quellonite")
        score = 2 * cued[token] + seen[token] + marked
        if score > best_score:
            best, best_score = token, score
    return best


def lower_names(texts: Sequence[str]) -> list[str | None]:
    """`lower_name` of each of the night's `texts`."""
    per_doc = [set(m.group() for m in _TOKEN.finditer(t)) | set(re.findall(r"[a-z][a-z'’]*", t)) for t in texts]
    counts = Counter(w for words in per_doc for w in words)
    out = []
    for text, words in zip(texts, per_doc):
        elsewhere = counts.copy()
        elsewhere.subtract(Counter(words))
        out.append(lower_name(text, +elsewhere, len(texts)))
    return out


def with_lower_name(sentence: str, propers: list[_Span], name: str | None, text: str) -> list[_Span]:
    """The sentence's name spans with the document's lower-case `name` among them; a lone capitalised
    word that opens the sentence and that `text` writes nowhere else ("Huge thanks to ...", "Fun
    fact:", "Development is sponsored by ...") is then no name: a post about a package opens its
    sentences with ordinary words, and its one name is the package's."""
    if not name:
        return propers
    spelt = f"[{name[0]}{name[0].upper()}]{re.escape(name[1:])}"       # capitalised where a sentence opens with it
    own = [_Span(m.start(), m.end(), name, "proper") for m in re.finditer(rf"(?<![\w.\-/@]){spelt}(?![\w\-/@]|\.[a-z0-9])", sentence)]
    out = [p for p in propers if not any(p.start < o.end and o.start < p.end for o in own)]
    if out and out[0].start == 0 and " " not in out[0].text and len(re.findall(rf"\b{re.escape(out[0].text)}\b", text)) == 1:
        out = out[1:]
    return sorted(out + own, key=lambda p: p.start)


def unread_versions(text: str, name: str | None, answered: set[str]) -> list[tuple[str, str, str, str, int]]:
    """(subject, relation, answer, kind, sentence number) of each version number of `text` that no
    item answers (`answered`), as a version of the document's lower-case `name`: "skoval 6.18.1 is
    out!", "Version 5.0.9 is the one to grab." → (skoval, 's version is, 6.18.1)."""
    if not name:
        return []
    out, taken = [], set(answered)
    for n, (s, e) in enumerate(split_sentences(text)):
        for m in VERSION.finditer(text, s, e):
            if m.group() not in taken:
                taken.add(m.group())
                out.append((name, "'s version is", m.group(), "version", n))
    return out


# what a package is for: "a small library for deduplicating records.", "switched to kubravil for
# transcoding video and", "Nothing beats it for rate limiting.": up to four words a clause's end closes
_PURPOSE = re.compile(r"\b(?P<what>library|package|module|framework|tool|crate|plugin|it|{name}) for "
                      r"(?P<purpose>[a-z][\w-]*(?: (?!(?:and|or|but|the|a|an|it|its|with|in|on|at|to|from|since|when|which|that)\b)[A-Za-z][\w-]*){{0,3}})"
                      r"(?=[,.;!?]|$| (?:and|or|but|since|when|which|that)\b)")


def purposes(text: str, name: str | None, answered: set[str]) -> list[tuple[str, str, str, str, int]]:
    """(subject, relation, answer, kind, sentence number) of what the document's lower-case `name`
    is for, kind "term": "it's a small library for deduplicating records" → (kubravil, is a library
    for, deduplicating records); "I switched our pipeline to pyplarax for transcoding video and ..."
    → (pyplarax, is used for, transcoding video)."""
    if not name:
        return []
    out, taken = [], set(answered)
    pattern = re.compile(_PURPOSE.pattern.format(name=re.escape(name)))
    for n, (s, e) in enumerate(split_sentences(text)):
        for m in pattern.finditer(text[s:e]):
            purpose, what = m.group("purpose"), m.group("what")
            if purpose not in taken and purpose.split()[0] not in _NOT_NAMES:
                taken.add(purpose)
                out.append((name, f"is a {what} for" if what not in ("it", name) else "is used for", purpose, "term", n))
    return out
