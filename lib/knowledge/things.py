"""Facts said of a person that are a thing's as well, under the thing's own name (facts.py adds
them to the rules' items): a question names the thing ("When was Ishbrenna Observatory
opened?", "Who was Kligrais No. 6 made for?"), and a fact stored only as the person's ("X opened
Ishbrenna Observatory in 1966") is then not reached from it.
"""

from __future__ import annotations

import re

from lib.knowledge.forms import base_verb, person_role
from lib.knowledge.relations import person_like, role_of_thing
from lib.knowledge.shapes import passive
from lib.knowledge.spans import _zipf, common_word, split_sentences
from lib.knowledge.topic import _thing_worded
from lib.knowledge.terms import _ADJECTIVE_ENDINGS, _NOT_TERM, _PREPOSITIONS, _TOKEN, _noun_words


# verbs that make or start a thing: "X opened Y in 1966" dates Y as well ("When was Y opened?")
_MADE = {"open", "found", "build", "design", "launch", "complete", "establish", "create", "start", "release", "publish",
         "discover", "invent", "commission", "compose", "write", "paint", "record", "introduce", "erect", "construct", "inaugurate",
         "make", "conceive", "develop", "devise"}
# verbs that hand a thing on: "X delivered Y to Z", "X sold Y to Z" (and those of making: "made Y for Z")
_HANDED = {"deliver", "sell", "give", "hand", "present", "dedicate", "license", "bring"}
_DATED_OBJECT = re.compile(r"(?P<verb>[a-z]+) (?:the )?(?P<thing>[A-Z][\w'’-]*(?: (?:[A-Z][\w'’-]*|of|&|No\.|\d+))*) (?P<prep>in|on|for|to)")


def thing_facts(subject: str, relation: str, answer: str, kind: str) -> list[tuple[str, str, str, str]]:
    """(subject, relation, answer, kind) of a fact said of a person that is also the thing's, under
    the thing's own name, so a question that names the thing reaches it: a role
    (`relations.role_of_thing`: "X, the engineer behind the Y" → Y's engineer is X), and the date a
    verb of making or starting gives its object (`_MADE`: "opened Ishbrenna Observatory in" 1966 →
    (Ishbrenna Observatory, "was opened in", 1966)) and who did ("opened" Y → (Y, "was opened by",
    X)); whom such a verb or one of handing on (`_HANDED`) gave it to: "made Kligrais No. 6 for"
    Plilush → (Kligrais No. 6, "was made for", Plilush), "delivered Saugraurk to" Drynix; never a
    verb of anything else ("visited Kell in 1990" dates no Kell)."""
    out = [(*role, "name")] if (role := role_of_thing(subject, relation, answer, kind)) else []
    verb = relation.removesuffix(" the")                           # "conceived the Sigre pressure gauge"
    if " " not in verb and kind in ("proper", "name") and (done := _made(verb)):
        out.append((answer, f"{done} by", subject, "proper"))     # "X opened Y" → Y was opened by X
    m = _DATED_OBJECT.fullmatch(relation)
    dated = m and m.group("prep") in ("in", "on") and kind in ("year", "date")
    if dated and (done := _made(m.group("verb"))):
        out.append((m.group("thing"), f"{done} {m.group('prep')}", answer, kind))
    elif m and m.group("prep") in ("for", "to") and kind in ("proper", "name") and (done := _made(m.group("verb"), _MADE | _HANDED)):
        out.append((m.group("thing"), f"{done} {m.group('prep')}", answer, kind))   # "made Kligrais No. 6 for" Plilush
    return out


def _made(verb: str, verbs: set[str] = _MADE) -> str | None:
    """The passive ("was opened") of a past verb of `verbs` (making or starting, `_MADE`), else None."""
    return passive(verb) if (base_verb(verb) or ("",))[0] in verbs else None


# "Thorngallow-based Nimbrel Aerospace", "the Skerravel-based maker of sensors": where a thing is based
_BASED = re.compile(r"(?<![\w-])(?P<place>[A-Z][\w'’]*(?: [A-Z][\w'’]*){0,2})-based\b")
_NAME_AFTER = re.compile(r"^ (?P<name>[A-Z][\w'’-]*(?: (?:[A-Z][\w'’-]*|of|&))*)")
_APPOSED_BEFORE = re.compile(r"(?P<name>[A-Z][\w'’-]*(?: (?:[A-Z][\w'’-]*|of|&))*), (?:the|a|an) $")


def based_facts(text: str, main: str | None, lowercase_words: set[str]) -> list[tuple[str, str, str, str, int]]:
    """(subject, "is based in", place, "proper", sentence number) of each "<Place>-based" the text
    writes, of the name right after it ("Thorngallow-based Nimbrel Aerospace"), else of the name its
    noun phrase is in apposition to ("Vorthex Labs, the Skerravel-based maker of sensors"), else of
    the document's `main` entity ("values the Norrowick-based resin maker at 14x"); never a word
    the night writes in lower case or a common word opening the sentence ("Web-based tools",
    "Plant-based menus": no place)."""
    out = []
    for n, (s, e) in enumerate(split_sentences(text)):
        sentence = text[s:e]
        for m in _BASED.finditer(sentence):
            place = re.sub(r"^(?:The|A|An|Its|Their|Our) ", "", m.group("place"))
            if place.lower() in lowercase_words or place == m.group("place") and m.start() == 0 and common_word(place) \
                    or place.split()[0] in ("The", "A", "An"):
                continue
            after, before = _NAME_AFTER.match(sentence[m.end() :]), _APPOSED_BEFORE.search(sentence[: m.start()])
            subject = after.group("name") if after else before.group("name") if before else main
            if subject and place not in subject:
                out.append((subject, "is based in", place, "proper", n))
    return out


# the titles people hold of a firm or a study, in capitals: "Keshra Umbervane (CEO)", "Trevanix CEO Sabeth Qorvanne"
_ROLE_CAPS = {"CEO", "CFO", "CTO", "COO", "PI", "MD", "GM", "CIO"}
_NAME = r"[A-Z][\w'’-]*(?: (?:[A-Z][\w'’-]*|of|&))*"
_ROLE = r"[A-Z]{2,3}|(?:chief |managing |executive |general |artistic |head )?[a-z]{3,}"
_ROLE_IN_PARENS = re.compile(rf"(?P<person>{_NAME}) \((?:the |its |our )?(?:(?P<org>{_NAME}) )?(?P<role>{_ROLE})[,)]")
_ROLE_BETWEEN = re.compile(rf"(?<![\w'’-])(?P<org>{_NAME}) (?P<role>{'|'.join(sorted(_ROLE_CAPS))}) (?P<person>{_NAME})")
# a role apposed to a name, either way round: "Vrouvur Daixjal, the PI, rang", "The owner, Bryvark Jijeist, showed us round"
_ROLE_APPOSED = re.compile(rf"(?P<person>{_NAME}), (?:the|its|our|their) (?P<role>{_ROLE})(?=[,.;])"
                           rf"|(?<![\w'’-])(?:[Tt]he|[Ii]ts|[Oo]ur|[Tt]heir) (?P<role2>{_ROLE}), (?P<person2>{_NAME}),")


def named_roles(text: str, main: str | None) -> list[tuple[str, str, str, str, int]]:
    """(whose, "'s <role> is", person, "proper", sentence number) of the roles a text gives people by
    their names: in brackets after one ("Keshra Umbervane (CEO) confirmed ..." of the document's
    `main` entity, "Ilsabet Murrenhok (Rhundale CEO)" of Rhundale), between a firm and a name
    ("Trevanix CEO Sabeth Qorvanne"), apposed to one ("X, the PI, rang", "The owner, X, showed us"); a role is a title in capitals (CEO, PI) or a noun for people
    (`person_role`: "founder", "chief executive", "editor"), not any word in brackets ("(UGC)")."""
    out = []
    for n, (s, e) in enumerate(split_sentences(text)):
        sentence = text[s:e]
        for m in list(_ROLE_IN_PARENS.finditer(sentence)) + list(_ROLE_BETWEEN.finditer(sentence)) + list(_ROLE_APPOSED.finditer(sentence)):
            found = m.groupdict()
            role, person = found["role"] or found.get("role2"), found["person"] or found.get("person2")
            if not (role in _ROLE_CAPS or role.islower() and person_role(role.split()[-1])):
                continue
            whose = found.get("org") or main
            if whose and person not in whose and whose not in person:
                out.append((whose, f"'s {role} is", person, "proper", n))
    return out


# what a thing is known for, whatever the words: "famous for its glass eyes", "all about church
# bells", "a small museum devoted to carved spoons", "specialises in cheese presses", "home to
# thousands of tin soldiers", "full of antique locks", "Known for: weathervanes": one relation, so
# the night's documents are each other's distractors
_KNOWN_CUE = re.compile(
    r"(?:\b(?:(?:famous|known|renowned|noted|celebrated|loved|prized|remembered)(?: [a-z]+){0,3}? for|all about|(?:devoted|dedicated|given over) to"
    r"|(?:come|comes|came|coming|queue|queues|queued|queuing|go|goes|drive|drives|travel|travels)(?: in| here| back| from [A-Z][\w'’-]*)? for(?= (?:the|our|its|your|their) )"
    r"|(?:its|our|their) (?:signature|trademark|famous|best-selling|bestselling)(?= [a-z])"
    r"|devot(?:es|ed) (?:itself|themselves|ourselves) to|(?:has |have )?promot(?:es|ed|ing|e)|interested in|(?:[Ww]e|[Tt]hey) (?:mostly |mainly )?(?:do|practi[sc]e)"
    r"|speciali[sz](?:es|ed|ing|e) in|home to|full of|filled with|packed with|crammed with|stuffed with"
    r"|(?:museum|collection|archive|society|club|circle|guild|shop|store|school) (?:of|for)"
    r"|collect(?:s|ed|ing)?|displays|exhibits|showcases|houses|holds|to house|(?:is|are|was|were|[Ii]t's|[Ii]t’s) (?:mostly|mainly|largely|chiefly|all))"
    r"|(?:^|[.!?:]\s+|\n)(?:Mostly|Mainly|Largely|All))\s+"
    r"|^(?P<box>Known for|Famous for|Collection|Speciality|Specialty|Focus|Theme|Subject|Activity|Activities|Pursuit|Hobby|Interest|Sport)\s*:\s*", re.MULTILINE)
# what it is known for, said before the words that say so: "the apple turnovers the bakery is famous for", "the
# walnut bread everyone knows it for", "iced buns, which is what the place is known for"
_KNOWN_BEFORE = re.compile(r"\b(?:the|its|our|their|some|two|three|four|five|six) (?P<what>[a-z]+(?: [a-z]+){0,2}),? (?:(?:which|that) )?(?:is what )?"
                           r"(?:the [a-z]+|it|they|we|everyone|people|everybody) (?:is |are |was |were )?(?:best |most |still )?"
                           r"(?:known|famous|renowned|knows it|know it|knew it|loves it|love it) for\b")
# what kind of club a thing is says what it does: "we're an amateur astronomy club", "a sea kayaking club", "an origami group"
_KIND_OF_GROUP = re.compile(r"(?:\b(?:is|are|was|were|[Ii]t['’]s|[Ww]e['’]re|[Tt]hey['’]re)\s+(?:a|an)|^(?:[A-Z][a-z]+ )?|\n(?:[A-Z][a-z]+ )?)\s*"
                            r"(?P<what>[a-z]+(?: [a-z]+){0,2}) (?:club|group|society|circle|collective|guild|association|team)\b")
# words that say how a group is, not what it does: "a friendly crochet group", "a volunteer group"
_GROUP_MANNER = {"small", "local", "friendly", "volunteer", "new", "old", "big", "little", "thriving", "informal", "lively", "tiny",
                 "large", "busy", "active", "community", "village", "town", "private", "registered", "independent", "social",
                 "youth", "family", "weekly", "monthly", "online", "proper", "real", "serious", "casual", "keen"}
_DETERMINED = re.compile(r"(?:(?:its|their|the|a|an|her|his|our|my|old|some) )?"
                         r"(?:(?:[a-z]+ )?(?:collection|selection|array|range|display|set|hoard|trove) of (?:the )?)?"
                         r"(?:(?:thousands|hundreds|dozens|scores|rows|shelves|cases|drawers|rooms|walls|lots) of (?:the |old )?)?")
# cues that are verbs: what stands before them is their subject, never a name in apposition ("of X, the garden now holds")
_VERB_CUES = ("collect", "displays", "exhibits", "showcases", "houses", "holds", "to house", "speciali", "promot", "has promot", "have promot",
              "devotes ", "devoted itself", "devoted themselves", "devoted ourselves", "we ", "We ", "they ", "They ")
_CLOSE = {",", ";", ".", ":", "!", "?", ")", "(", "—", "-", "and", "but", "or", "that", "which", "who", "from", "she", "he", "they",
          "we", "i", "you", "many", "some", "most", "all", "each"}
_PRONOUNS = {"It", "Its", "It's", "It’s", "They", "Their", "This", "That", "These", "Those", "He", "She", "We", "I", "You", "There", "Here"}
_NEAREST = re.compile(r"\b(?:[Ii]t|[Ii]ts|[Ii]t's|[Ii]t’s|[Tt]hey|[Tt]heir|[Ww]e|[Oo]ur)\b|(?P<name>[A-Z][\w'’-]*(?: (?:[A-Z][\w'’-]*|of|&))*)(?![\w'’:-])")


def known_for(text: str, main: str | None, thing: bool, answered: set[str]) -> list[tuple[str, str, str, str, int]]:
    """(subject, "is known for", what, "term", sentence number) of what a text says a thing is known
    for, holds or is about: 1-3 lower-case words (`terms` rules: no function word, number, name,
    time or measure noun, no adjective ending) after a cue of fame or aboutness (`_KNOWN_CUE`), a
    quantity or determiner read through ("home to thousands of tin soldiers"), closed by
    punctuation, a conjunction, a relative, a preposition or a participle. The subject is the name
    the cue is apposed or said of ("The Wireless Attic, the volunteer-run museum of valve radios",
    "Whittler's Hall, a small museum devoted to"), else the document's `main` entity when the text
    shows it is a `thing` and the nearest subject before the cue is the main or a pronoun; never a
    person's ("Clemence Aubravel begins collecting bobbin lace": another name is nearer)."""
    out, taken = [], {a.lower() for a in answered}

    def add(subject: str | None, what: str, n: int) -> None:
        if subject and what not in subject.lower():
            taken.add(what)
            out.append((subject, "is known for", what, "term", n))

    for n, (s, e) in enumerate(split_sentences(text)):
        sentence = text[s:e]
        for m in _KNOWN_CUE.finditer(sentence):
            rest = sentence[m.end() :]
            rest = rest[_DETERMINED.match(rest).end() :]
            tokens = _TOKEN.findall(rest)
            k = _noun_words(tokens, 0)
            k = next((j for j in range(1, k) if tokens[j].endswith("ed")), k)   # "brass horns founded by"
            if not k or k < len(tokens) and not (tokens[k].lower() in _CLOSE or tokens[k] in _PREPOSITIONS or tokens[k].endswith("ed")):
                continue
            what = " ".join(tokens[:k])
            if tokens[k - 1].endswith(_ADJECTIVE_ENDINGS) or k == 1 and tokens[0].endswith(("ed", "ing")) or what in taken or tokens[0] in ("museum", "collection", "place", "room"):
                continue
            verb = m.group().lstrip().startswith(_VERB_CUES)
            add((main if thing else None) if m.group("box") else _known_subject(sentence[: m.start()], main, thing, verb, text[:s]), what, n)
        for m in list(_KIND_OF_GROUP.finditer(sentence)) + list(_KNOWN_BEFORE.finditer(sentence)):
            words = m.group("what").split()
            while words and words[0] in _GROUP_MANNER and len(words) > 1 and words[1] not in _NOT_TERM:
                words.pop(0)                       # "a friendly crochet group": crochet
            what = " ".join(words)
            if not words or words[-1] in _GROUP_MANNER or any(w in _NOT_TERM or w.endswith(_ADJECTIVE_ENDINGS) for w in words) or what in taken:
                continue
            add(_known_subject(sentence[: m.start("what")], main, thing, False, text[:s]), what, n)
    return out


def _known_subject(before: str, main: str | None, thing: bool, verb: bool = False, earlier: str = "") -> str | None:
    """Whose a cue is: the name it is apposed to ("X, a small museum devoted to") or said of ("X is
    famous for", "X specialises in"); else `main` where the nearest subject is a pronoun, the main,
    or none at all and the text is a `thing`'s; in a person's text, "it" is the last name before
    the cue (`earlier`: the text before its sentence) that is no person's ("Ada Lind opened Kell
    Bakes in 2004. It is famous for its rye bread": Kell Bakes)."""
    if re.fullmatch(r"(?:.*\n)?[A-Z][a-z]+(?: [a-z]+)?:\s*", before, re.DOTALL):
        return main if thing else None           # a fact box's line: "Flower colour: vermilion"
    before = before.rsplit("\n", 1)[-1]          # a line is a record's own unit

    def weak(m: re.Match) -> bool:              # a pronoun, or an English word opening the sentence or a clause
        words = re.sub(r"^(?:The|A|An) ", "", m.group("name")).split()
        opens = m.start() == 0 or re.search(r"[-:;.!?]\s*$", before[: m.start()])
        return words[0] in _PRONOUNS or bool(opens) and words == m.group("name").split() and len(words) == 1 and _zipf(words[0]) >= 2.5
    apposed = re.search(r"(?P<name>[A-Z][\w'’-]*(?: (?:[A-Z][\w'’-]*|of|&))*)(?:, (?:the|a|an) (?:(?!(?:is|was|are|were|has|have|had|now|also|still) )[\w'’-]+ ){0,3}| (?:is|was|has|remains)[^,]*)$", before)
    names = [m for m in _NEAREST.finditer(before) if not (m.group("name") and weak(m))]
    nearest = names[-1] if names else None
    said_of = apposed and not (verb and apposed.group().startswith(apposed.group("name") + ","))   # "X, the garden now holds": no apposition
    if said_of and not weak(apposed) and nearest and nearest.group("name") and apposed.group("name").endswith(nearest.group("name")):
        return apposed.group("name")
    if not thing and nearest is not None and not nearest.group("name") and nearest.group().lower().startswith("it"):
        names = [m.group("name") for m in _NEAREST.finditer(earlier + " " + before[: nearest.start()]) if m.group("name")]
        return next((n for n in reversed(names) if " " in n and (not person_like(n, set()) or _thing_worded(n)) and not common_word(n.split()[0])
                     and not (main and (n in main or main in n))), None)
    if not thing or not main:
        return None
    clause = nearest and re.match(r", (?:the|this|our) [a-z]+ ", before[nearest.end() :])   # "of Traseimouth, the garden now holds"
    if nearest is None or not nearest.group("name") or nearest.group("name") in main or main in nearest.group("name") or clause:
        return main
    return None


# the colour words, a closed class: basic terms and the names of colours from things ("apricot", "russet")
_COLOURS = {"red", "orange", "yellow", "green", "blue", "purple", "violet", "pink", "brown", "black", "white", "grey", "gray",
            "gold", "golden", "silver", "silvery", "cream", "creamy", "ivory", "crimson", "scarlet", "maroon", "burgundy", "amber",
            "apricot", "peach", "salmon", "coral", "lilac", "lavender", "mauve", "magenta", "indigo", "teal", "turquoise", "cyan",
            "azure", "navy", "olive", "lime", "emerald", "jade", "ochre", "russet", "bronze", "copper", "tan", "beige", "buff",
            "lemon", "mustard", "plum", "cherry", "ruby", "cerise", "fuchsia", "saffron", "tangerine", "charcoal", "slate",
            "vermilion", "carmine", "claret", "sepia", "umber", "rust", "honey", "butter", "primrose", "sky", "blush", "rose",
            "wine", "sand", "straw", "smoke", "ash", "flame", "fawn", "khaki", "aubergine", "chestnut", "mahogany", "pewter"}
# words that shade a colour: "pale apricot", "deep crimson", "smoky violet"
_SHADES = {"pale", "deep", "dark", "light", "bright", "dusky", "soft", "rich", "vivid", "pastel", "dull", "muted", "smoky",
           "milky", "brilliant", "warm", "cool", "clear", "dusty", "icy", "inky", "glossy", "burnt", "bluish", "reddish",
           "greenish", "yellowish", "pinkish", "purplish", "brownish", "greyish", "whitish", "blackish", "orangey", "steely"}
# what a colour is the colour of: "deep crimson blooms", "a russet gold skin", "pale green crystals"
_BEARERS = {"flower", "flowers", "bloom", "blooms", "blossom", "blossoms", "petal", "petals", "fruit", "fruits", "skin", "skins",
            "flesh", "berries", "berry", "leaves", "foliage", "crystals", "crystal", "colour", "color", "hue", "tone", "shade",
            "tint", "coat", "shell", "cap", "head", "heads", "pods", "tubers", "spears", "cones", "body", "finish", "lustre", "glaze"}
_COLOUR_CUE = re.compile(r"(?:\b(?:[Cc]olou?rs?|[Hh]ue|[Ss]hade|[Tt]int)(?: is| was| are|:| of)?|\b(?:is|are|was|were|['’]s|turns?|turned"
                         r"|ripens?|ripened|flowers?|blooms?|opens?|fades?|fading|comes?|grows?) (?:(?:a|an|to|into) ){0,2}(?:[a-z]+ )?"
                         r"|\b(?:in|of) (?:a |an )?|^[A-Z][a-z]+(?: [a-z]+)?:)\s*$")
_WORD_AT = re.compile(r"[A-Za-z][a-z]*(?:-[a-z]+)*")


def colour_facts(text: str, main: str | None, thing: bool, answered: set[str]) -> list[tuple[str, str, str, str, int]]:
    """(subject, "'s colour is", colour, "term", sentence number) of the colour a text gives a thing:
    a run of 1-3 colour words (`_COLOURS`, shaded or hyphened: "pale apricot", "russet gold",
    "blue-green") ending in a colour, before a noun that bears a colour (`_BEARERS`: "deep crimson
    blooms"), a run of two before any noun ("a russet gold apple"), or after a verb or noun that
    states one ("ripens to russet gold.", "Colour: smoky violet", "Fruit: glossy scarlet", "a lovely
    lemon yellow."); the subject as for `known_for`. A colour of one word only where it is a basic
    term ("red", "green") or after "colour" ("Flower colour: vermilion"): "in amber" is no colour."""
    out, taken = [], {a.lower() for a in answered}
    for n, (s, e) in enumerate(split_sentences(text)):
        sentence = text[s:e]
        words = list(_WORD_AT.finditer(sentence))
        i = 0
        while i < len(words):
            j = i
            while j < len(words) and j - i < 3 and (words[j].group() in _SHADES or _colour(words[j].group())) \
                    and (j == i or sentence[words[j - 1].end() : words[j].start()] == " "):
                j += 1
            while j > i and not _colour(words[j - 1].group()):
                j -= 1                             # a run ends in a colour, not a shade
            if j == i:
                i += 1
                continue
            run, start, end = [w.group() for w in words[i:j]], words[i].start(), words[j - 1].end()
            i = j
            after = re.match(r" ([a-z]+)\b", sentence[end:])
            bearer = after and after.group(1) in _BEARERS
            closed = re.match(r"[ \t]*(?:[,.;:!?)\n]|$|and\b|or\b|with\b|when\b|in\b|as\b)", sentence[end:])
            cue = _COLOUR_CUE.search(sentence[:start])
            if not (bearer or len(run) > 1 and after or closed and cue):
                continue
            named = re.search(r"\b(?:[Cc]olou?rs?|[Hh]ues?|[Ss]hades?|[Tt]ints?)(?: is| was| are|:| of)?\s*$", sentence[:start])
            if len(run) == 1 and run[0] not in _BASIC_COLOURS and not named:
                continue                           # "in amber": one colour word of a thing's name only after "colour"
            colour = " ".join(run)
            subject = _known_subject(sentence[:start], main, thing, verb=True, earlier=text[:s])
            if subject and colour not in taken:
                taken.add(colour)
                out.append((subject, "'s colour is", colour, "term", n))
    return out


_BASIC_COLOURS = {"red", "orange", "yellow", "green", "blue", "purple", "violet", "pink", "brown", "black", "white", "grey", "gray",
                  "crimson", "scarlet"}


def _colour(word: str) -> bool:
    """A colour word, hyphened ones too ("blue-green", "rose-pink")."""
    return all(part in _COLOURS for part in word.split("-"))
