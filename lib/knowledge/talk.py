"""Shapes of conversation and notes (lib/knowledge/facts.py uses them): what the product captures
from a served model, chat transcripts and meeting notes, states its facts in turns and headings
that encyclopedia prose never uses.

- "Riss Hastiand: I'll take Doutux." is a speaker's turn: what follows the colon is a sentence of
  its own, "I" the speaker ("Riss Hastiand will take Doutux"); an answer word that opens the turn
  ("Yes, and ...", "OK, ...", "Then ...") is no part of what was stated. "We" and "you" stay
  unresolved: a group or a listener is not the speaker, and a fact of theirs would be false of them;
- "Designed by Ama Reed." and "Created for Touralt by X back in 2018." state a fact with no subject
  (listings, fact sheets, product copy, notes): a passive whose subject is what the text is about;
- "1883 - X establishes Y in Z." is a timeline's line: the year dates what follows it;
- "| Building | City |" over "|---|---|" and "| Shapa Lodge | Fiban |" is a table (Markdown's): each
  row states its first cell's facts, one a column, "Shapa Lodge's city is Fiban." (`table_rows`);
- "Sync notes, Thursday." and "Quick recap for anyone who missed Wednesday:" are headings: a
  label before a colon, or a few words and a day; they name no entity a document is about
  ("Sync", "Quick" are no main entity), though a name in them is one "they" may mean ("From the
  call with Trouwar Health: they want ...").
"""

from __future__ import annotations

import re

from lib.knowledge.forms import ADVERBS, AUXILIARIES, base_verb, person_role
from lib.knowledge.relations import _names_outside_dates
from lib.knowledge.shapes import _participle
from lib.knowledge.spans import _FUNCTION, MONTHS, WEEKDAYS, _value_spans, common_word

# the words of a thread or a review that say whose text follows: "Reply from", "Posted by", "Reviewed by"
_POSTED = "Posted|Post|Written|Reviewed|Sent|Submitted|Shared|Reply|Answer|Comment|Response|Message|Note|Update"
# a speaker's name before a colon at a turn's start: one to four capitalised words ("Bocem", "Riss Hastiand"), a
# transcript's number after them ("HOST 1", "Speaker 2"), perhaps
# after the words of a thread that say whose it is ("Reply from Voom Braebrael:", "Posted by X in Travel Buddies:")
_TURN = re.compile(rf"^(?:(?P<by>{_POSTED}) (?:from|by) )?"
                   r"(?P<speaker>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*){0,3}(?: \d{1,2})?)(?(by)(?: in [A-Z][\w'’-]*(?: [A-Z][\w'’-]*){0,3})?): (?P<said>\S.*)$")
# what answers the turn before and states nothing: "Yes, and", "OK,", "Then", "Right, so"
_REPLY = re.compile(r"^(?:(?:Yes|Yeah|No|OK|Okay|Sure|Right|Well|Agreed|Great|Fine)\b,?(?: (?:and|but|so))? |(?:Then|So|And|But|Also) )")
# "I" as a turn's subject, with its contracted auxiliary: "I'll" → "will", "I'm" → "is"
_FIRST_PERSON = re.compile(r"^I(?P<aux>['’](?:ll|m|ve|d)| (?=[a-z]))")
_CONTRACTED = {"ll": " will", "m": " is", "ve": " has", "d": " would"}
_THIRD = {"am": "is", "have": "has", "do": "does"}
_TIMES = "|".join(sorted(WEEKDAYS) + list(MONTHS))
# a heading: a few words and a day ("Sync notes, Thursday.", "Minutes, 3 May"), or a label a colon closes
_DAY_HEADING = re.compile(rf"^[A-Z][\w'’-]*(?: [\w'’-]+){{0,3}}, (?:(?:{_TIMES})(?: \d{{1,2}})?|\d{{1,2}} (?:{_TIMES})|\d{{4}}-\d{{2}}-\d{{2}})\.?$")
# a title line of notes: parts a dash divides, or a number after "#" ("Ops sync - notes", "Booking confirmation #30751")
_TITLE_LINE = re.compile(r"^[A-Z][^.!?:;,\"]*(?: [-–|] |#\d)[^.!?:;,\"]*$")
_LABEL_PREPOSITIONS = {"from", "after", "before", "during", "for", "about", "re", "on", "at", "in", "with"}
_LABEL = re.compile(r"^(?P<first>[A-Z][a-z]*) (?P<second>[a-z]+)\b[^:]*:$")


# what a fact box says a name is, after its colon: "a summit of the", "an open-air festival in"
_DESCRIBED = re.compile(r"^(?:a|an) (?:[a-z-]+ ){0,3}[a-z-]+ (?:of|in|on|near|by|from|for|at)\b")


def speaker_turn(sentence: str) -> tuple[str, str] | None:
    """(speaker, what they said) for a turn "Name: clause": the clause without the words that
    answer the turn before, "I" replaced by the speaker ("Riss Hastiand: I'll take Doutux" →
    ("Riss Hastiand", "Riss Hastiand will take Doutux")); None where no turn opens the sentence or
    nothing but a label precedes the colon ("Open item: the ...": "item" is lower case, no name). A
    name and what it is ("X: a summit of the Y") is no turn but a description: "X is a summit of the Y"."""
    m = _TURN.match(sentence)
    if not m:
        return None
    speaker, said = m.group("speaker"), m.group("said")
    if speaker[-1].isdigit() and not speaker.rstrip(" 0123456789").isupper():
        return None                               # "Item 4: X weekend.": an agenda's item; "HOST 1:" is a transcript's speaker
    if _DESCRIBED.match(said):                    # "Fosveithal Spire: a summit of the Nikorn Range.": a fact box's name and
        return speaker, f"{speaker} is {said}"    # what it is, no one's words
    said = _REPLY.sub("", said, count=1) or said
    me = _FIRST_PERSON.match(said)
    if me:
        aux = me.group("aux").strip()
        rest = said[me.end():]
        if aux:                                   # "I'll take" → "Riss Hastiand will take"
            said = speaker + _CONTRACTED[aux[1:]] + rest
        else:                                     # "I am", "I have": the speaker's own forms
            verb, _, tail = rest.partition(" ")
            said = f"{speaker} {_THIRD.get(verb, verb)} {tail}".rstrip()
    return speaker, said[:1].upper() + said[1:]


def heading(sentence: str) -> bool:
    """Whether the sentence is a heading or a label, which names no entity the document is about:
    is a few words and a day ("Sync notes, Thursday.", "Minutes, 3 May."), a title line of parts a
    dash divides or with a number after "#" ("Ops sync - notes", "Booking confirmation #30751"), or a label a colon closes,
    opened by a preposition or by a word and a lower-case noun ("From the call with Trouwar Health:",
    "Quick recap for anyone who missed Wednesday:", "Open item:"), not by a subject and its verb
    ("The firm was founded by Ada Lind:")."""
    sentence = sentence.strip()
    if _DAY_HEADING.match(sentence) or _TITLE_LINE.match(sentence) and len(sentence.split()) <= 8:
        return True
    label = _LABEL.match(sentence)           # "Open item:", "From the call with X:"; not "X was founded by Y:"
    if not label:
        return False
    first, second = label.group("first").lower(), label.group("second")
    return first in _LABEL_PREPOSITIONS or first not in _FUNCTION and second not in AUXILIARIES and second not in ADVERBS \
        and base_verb(second) is None


# a role before a person's name that opens a sentence: "Founder Zytrolav Grorax, who", "Captain Ada Lind said"
_TITLED = re.compile(r"^(?P<role>[A-Z][a-z]+) (?P<name>[A-Z][a-z'’-]+(?: [A-Z][a-z'’-]+){1,2})(?=[ ,])")
# titles a person has of their own, not of the thing a text is about ("Professor Ivo Brask taught her")
_TITLES = {"doctor", "professor", "sir", "dame", "lord", "lady", "saint", "senator", "president", "judge", "bishop", "king", "queen",
           "prince", "princess", "duke", "pope", "father", "brother", "sister", "mother", "uncle", "aunt", "chief"}
# "It's in Teirev", "It's been": a pronoun's contracted verb
_PRONOUN_IS = re.compile(r"^(?P<who>It|He|She)['’]s (?P<been>been )?")


def role_before_name(sentence: str) -> tuple[str, str] | None:
    """(role, name) where a person's role opens the sentence before their name ("Founder Zytrolav
    Grorax, who ...", "Captain Ada Lind said ..."): the role they hold of the thing the text is
    about; None for a title of their own ("Professor Ivo Brask") or no role."""
    m = _TITLED.match(sentence)
    role = m.group("role").lower() if m else ""
    return (role, m.group("name")) if m and person_role(role) and role not in _TITLES else None


def uncontracted(sentence: str) -> str:
    """ "It's in Teirev" → "It is in Teirev", "It's been" → "It has been": the pronoun the sentence
    opens with, its verb in full."""
    return _PRONOUN_IS.sub(lambda m: m.group("who") + (" has " if m.group("been") else " is ") + (m.group("been") or ""), sentence)


# a sentence that is a passive without its subject: "Designed by Ama Reed.", "Opened in 1921 by X."
_ELLIPTICAL = re.compile(r"^(?P<done>[A-Z][a-z]+) (?P<rest>(?:by|in|on|at|for|from|to|with|near|under|during|after|before|back|first|"
                         r"originally|jointly)\b[^,;:]*)$")


def elliptical(sentence: str, main: str | None) -> str:
    """A passive with no subject, after the text has named what it is about (`main`), as a sentence
    of that name: "Designed by Ama Reed." → "Kell Bridge was designed by Ama Reed.", "Buried in
    Dorn." (a text about a person) → "Ama Reed was buried in Dorn." (a name with its noun: "It was");
    any other sentence as it is.
    The participle opens the sentence and no comma follows it (a fronted phrase: "Launched in 1943,
    X remains")."""
    m = _ELLIPTICAL.match(sentence)
    if main is None or not m or not _participle(m.group("done").lower()):
        return sentence
    named = "It" if main.split()[-1].islower() else main   # "the Miagror seed drill": "It", which means it
    return f"{named} was {m.group('done').lower()} {m.group('rest')}"


# a timeline's or a changelog's line: a year, a dash or a colon, what happened ("1883 - X establishes Y in Z.")
_DATED_LINE = re.compile(r"^(?P<year>1\d{3}|20\d{2})\s*[-–—:]\s+(?P<rest>[A-Z].*)$")


def dated_line(sentence: str) -> str:
    """A timeline's line as a sentence its year opens: "1883 - Miatiak Steifor establishes Brustiam
    Estate in Krusstouth Valley." → "In 1883, Miatiak Steifor establishes ..."; any other sentence as it is."""
    m = _DATED_LINE.match(sentence)
    if not m:
        return sentence
    first, _, rest = m.group("rest").partition(" ")
    lead = first.lower() if first.lower() in ("the", "a", "an", "first", "second", "third", "last") else first   # "First X vintage bottled"
    return f"In {m.group('year')}, {lead} {rest}".rstrip()


# who wrote or sent a post, a reply or a review: "Posted by X in Y:", "Reviewed by X.", "Sent from X"
_BYLINE = re.compile(rf"^(?:{_POSTED}) (?:by|from)\b")


def byline(sentence: str) -> bool:
    """Whether a sentence only says who wrote or sent the text ("Posted by X in Travel Buddies:"):
    its names are the author's and the forum's, never what the text is about."""
    return bool(_BYLINE.match(sentence))


# a mail's or a memo's header line: who sent it, to whom, when, what about ("From: X", "Subject: Re: Y - final changes")
_MAIL_FIELD = re.compile(r"^(?P<field>from|to|cc|bcc|date|sent|subject|re|fwd?)\s*:\s*(?P<value>.*)$", re.IGNORECASE)
# what a reply or a forward puts before a subject line's words: "Re: ", "Fwd: ", "AW: "
_REPLY_MARKS = re.compile(r"^(?:(?:re|fwd?|aw|sv)\s*:\s*)+", re.IGNORECASE)
# what ends a subject line's name: its dash and the words after it ("Zentharo - signed", "X – final masters")
_SUBJECT_TAIL = re.compile(r"\s+[-–—|]\s.*$")
_TITLE_WORD = re.compile(r"^[A-Z]+$")   # "MEMORANDUM" over a memo's fields


def mail_header(sentences: list[str]) -> dict[int, str]:
    """The header lines a mail, a memo or a forum reply opens with, by sentence number, each with
    what its subject line says the text is about ("" for the other fields): "From: X", "To: Y",
    "Subject: Re: Z - final changes" → {0: "", 1: "", 2: "Z - final changes"}. The block starts at
    the first sentence (after a title in capitals: "MEMORANDUM") and holds a field whose value is
    on the next line ("TO:" over "All managers"). Those lines state no fact of anyone ("X's to is
    Y"); the subject line names what the text is about. {} where the text opens with no field."""
    out: dict[int, str] = {}
    n = 1 if sentences and _TITLE_WORD.match(sentences[0].strip()) and len(sentences) > 1 else 0
    if n and _MAIL_FIELD.match(sentences[1].strip()):
        out[0] = ""
    while n < len(sentences) and (m := _MAIL_FIELD.match(sentences[n].strip())):
        value, about = m.group("value").strip(), m.group("field").lower() in ("subject", "re")
        if not value and n + 1 < len(sentences) and not _MAIL_FIELD.match(sentences[n + 1].strip()):
            out[n] = ""
            n, value = n + 1, sentences[n + 1].strip()
        out[n] = _SUBJECT_TAIL.sub("", _REPLY_MARKS.sub("", value)) if about else ""
        n += 1
    return out


def subject_line_name(line: str, text: str, lowercase_words: set[str]) -> str | None:
    """The name a subject line says a mail is about (`mail_header`'s words): its first name, not an
    everyday word that opens the line ("Missing locomotive in Thistledown Railways" → "Thistledown
    Railways"), in full where the text writes more of it ("Zentharo" of "Zentharo Biotics"); None
    where the line names nothing ("Hidden gems from the 2010s?")."""
    names = [p for p in _names_outside_dates(line, lowercase_words, _value_spans(line))
             if not (p.start == 0 and " " not in p.text and common_word(p.text))]
    if not names:
        return None
    longer = re.search(rf"(?<![\w'’-]){re.escape(names[0].text)}(?: [A-Z][\w'’-]*)+", text)
    return longer.group() if longer else names[0].text


# a news item's dateline: where the story is, before a dash ("Port Fidouhae - Some 130 ...", "Makrousod Coast,
# Tuesday - X said"), or a heading of the place and a day ("Laugai, Tuesday.")
_DATELINE = re.compile(rf"^(?P<place>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*){{0,2}})(?P<day>, (?:{_TIMES})(?: \d{{1,2}})?)?"
                       rf"(?: [-–—] (?P<rest>[A-Z]\S*(?: \S+){{3,}})|\.?$)")   # a story: four words or more


def dateline(sentence: str) -> tuple[str | None, str]:
    """(the place of a news item's dateline, the sentence after it): "Port Fidouhae - Some 130 former
    pupils are expected ..." → ("Port Fidouhae", "Some 130 ..."), "Laugai, Tuesday." → ("Laugai",
    "Laugai, Tuesday."); (None, the sentence) where it opens with none. The story happens there: its
    main entity "is in" it (facts.py)."""
    m = _DATELINE.match(sentence)
    if not m or m.group("rest") is None and m.group("day") is None:   # "Dear Rounek,", "Kell Bridge.": no dateline
        return None, sentence
    return m.group("place"), m.group("rest") or sentence


# a table's line, "| Shapa Lodge | Fiban | 9 |", and its rule under the header, "|---|:---:|"
_TABLE_LINE = re.compile(r"^\s*\|(?P<cells>.*)\|\s*$")
_RULE_CELL = re.compile(r"^\s*:?-{3,}:?\s*$")


def _cells(line: str) -> list[str] | None:
    m = _TABLE_LINE.match(line)
    return [c.strip() for c in m.group("cells").split("|")] if m else None


def table_rows(text: str) -> str:
    """`text` with each Markdown table written as the sentences its rows state: a row's first cell
    is what the row is about, each other cell its value under its column's header, in lower case
    and without a parenthesis ("| Building | Rent ($/month) |" → "Shapa Lodge's rent is 3,900.").
    Read cell by cell (split_sentences breaks at the bars), a table relates nothing to anything."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        head, rule = _cells(lines[i]), _cells(lines[i + 1]) if i + 1 < len(lines) else None
        if not (head and rule and len(rule) == len(head) > 1 and all(_RULE_CELL.match(c) for c in rule)):
            out.append(lines[i])
            i += 1
            continue
        labels = [re.sub(r"\s*\([^)]*\)", "", h).strip().lower() for h in head]
        i += 2
        while i < len(lines) and (row := _cells(lines[i])) is not None and len(row) == len(head):
            if row[0]:
                out.append(" ".join(f"{row[0]}'s {label} is {cell}." for label, cell in zip(labels[1:], row[1:]) if label and cell))
            i += 1
    return "\n".join(out)
