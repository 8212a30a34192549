"""Fact items: what a night's documents state, as (subject, relation, answer) with a held-out question.

A fact item is one answer span of a curated document (a name, a number, a date, a year, a
multi-word proper noun) with the entity its sentence is about, the words between them, a cue (the
trained phrasing: the sentence up to the answer, subject named in full) and a question (a
held-out phrasing that ends where the answer starts, never trained on). Distractors are answers
of the same kind from other documents, so the item is scored as multiple choice
(lib/evaluation/facts.py) as well as by greedy exact match.

Extraction (`extract_facts`), rule-based, no model:
- sentences split at . ! ? before a capital or digit (not after Dr., St., e.g.) and at line
  breaks; a sentence that looks like code (brackets, `=`, `def `, `import `) is skipped, and so is
  a whole document whose lines are more than 20% code (a source file's docstrings);
- candidate answers: dates (three formats), years, numbers, and runs of capitalised words joined
  by name connectors (of, de, van, &), a title with lower-case words whole where quotes or commas
  close it ("album, Songs for the Harbour,"), a sentence-initial capital only if the texts never
  write it in lower case ("After"), nor a role, adverb or past verb glued to a name ("Founder Zytrolav
  Grorax", "Apparently X", "Bought Kligrais No. 6"); lower-case ones ("studied geology"), kind "term": terms.py;
- the subject is the name that opens the sentence, a pronoun resolved (he/she/his/her → the
  document's main entity, it/its/they → the last named one, "The novel ..." → the latest entity
  typed "novel", else the object a verb last took, else the last named one), or the name after
  a fronted phrase ("Born in 1934 in Oslo, Mara Quillon took ..."), or the name after nouns that type
  it ("The bulk carrier Boprav Kraidouv docked at"); before any subject, "it" and "the <noun>" mean
  the thing the text named ("Anyone going to Kousstilt Festival? It's in Teirev"), which is then what the
  document is about, its clozes asked of it (cloze.py); answers after it, with the
  words between as the relation (≤ 12 words), become items;
- dropped: answers that are (part of) the subject, answers found in every document (≥ 3), facts
  with no same-kind distractor; distractors come from the same relation first, then the same kind.

Trade-off: rules find the salient spans of prose (24 biographies give 80 items, 24 terms) in ~10 ms
a document, never invent an answer, and miss facts whose subject follows ("Commanding her was X").

The item and its file format (JSON Lines): lib/knowledge/fact_items.py.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Sequence

from lib.knowledge.distractors import with_distractors
from lib.knowledge.fact_items import FactItem, Found as _Found, fact_id, kept_found, read_facts, write_facts  # noqa: F401  (the item, where callers import it)
from lib.knowledge.forms import ADVERBS, AUXILIARIES, QUESTION_FORMS, person_role, role_noun, third_person
from lib.knowledge.relations import (_COPULA, PARENTHESIS_PREPOSITIONS, name_head, _FRONTED_OWN, _OF_HEAD, _PARENTHETICAL, _names_outside_dates, _note_names, _pronoun_clause, shared_heads, with_heads,
                                     _referent, described_clause, it_referent, person_like, role_holder, thing_like, _resolve, _subject_type, last_clause, possessive, without_answers)
from lib.knowledge.things import based_facts, colour_facts, known_for, named_roles, thing_facts
from lib.knowledge.talk import (byline, dated_line, dateline, elliptical, heading, mail_header, role_before_name, speaker_turn, subject_line_name,
                                table_rows, uncontracted)
from lib.knowledge.topic import document_topic, modified_description, named_thing, described_thing, named_with_head, thing_topic, typed_name, unnamed_it
from lib.knowledge.terms import night_terms
from lib.knowledge.lower_names import lower_names, purposes, unread_versions, with_lower_name
from lib.knowledge.cloze import salient_contexts, told_of_main, unread_spans
from lib.knowledge.spans import (FOOTNOTE, _GENDERED, _PARTICIPLES, _PRONOUNS, _WORD, _Span, _looks_like_code, _lowercase_words, _proper_spans,
                                 _fronting_word, _value_spans, glued_word, looks_like_code_document, split_sentences,
                                 FRONTED_PREDICATES, STATIVE_PARTICIPLES, SUBJECT_OPENING)
from lib.knowledge.shapes import (FRONTED_LONE, FRONTED_TIME, SUBORDINATORS, apposed_object, fronted_clause, timed_pronoun, control_passive, head_noun, reported_clause, hyphen_measure, measured_name, object_appositions, object_relative, clause_subject, listed_first, name_parenthesis, ordinal_thing, clause_time, fronted_value_facts, new_clause, own_quantified, passive,
                                  pronoun_object, pronoun_role, relative_fact, without_appositions, without_honorific)

log = logging.getLogger(__name__)


# -- extraction (spans: lib/knowledge/spans.py; relations: lib/knowledge/relations.py) --------------
def document_facts(text: str, lowercase_words: set[str], max_relation_words: int = 12,
                   name_heads: frozenset[str] = frozenset(), clauses: list | None = None, lower_name: str | None = None,
                   topic: str | None = None) -> tuple[list[_Found], str | None, str | None]:
    """Facts of one document, its main entity (the first named sentence subject, or the thing a
    person's first sentence names where the text goes on about it: topic.py), and the person it names first: the main
    entity where that may be a person (not where the text shows a thing, `thing_like`: "the Varo Ensemble", "X is a
    brewery"; an answer naming it is then asked with "what", not "whom"), else the person a thing's text begins with; `name_heads`
    (`shared_heads`) are words that end several names, which no person's name is built on; `clauses` gets each sentence's subject (terms.py);
    `lower_name`: the package the text is about (lower_names.py), its main entity from the start, a name in every sentence;
    `topic`: a name the text is about though its first subject is another's (topic.py `document_topic`), its main entity from the start."""
    found: list[_Found] = []
    topic = lower_name or topic
    main: str | None = topic
    agent: str | None = None  # the person a thing's text begins with (topic.py): "Hapis Beipai took charge of Krirak Albion"
    last: str | None = topic
    # the names met so far, in order, and how ("subject", "direct" object of a verb, other "object"),
    # with the nouns the text typed them with: what "The novel ..." refers to
    mentions: list[tuple[str, str]] = []
    types: dict[str, set[str]] = defaultdict(set)
    gendered = any(w.lower() in _GENDERED for w in _WORD.findall(text))
    articled: set[str] = set()  # names written after "the": no person's

    roles: dict[str, set[str]] = defaultdict(set)  # the persons the text shows, with their roles ("Its editor is X")
    role_from = 0                # the found items scanned for them

    def it_means(last: str, shown: bool = False) -> str:
        """What "it" (or, `shown`, a description) means after `last` (`it_referent`): no person
        where the text shows a thing; a description only where the text shows the person (`roles`)."""
        things = {name for name, _ in mentions if thing_like(name, articled, types, lowercase_words)}
        known = frozenset(roles) | ({main} if gendered and main else set())   # persons the text shows are persons
        persons = known | ({name for name, _ in mentions if person_like(name, things)} if not shown else set())
        return it_referent(last, mentions, persons, things, known)

    def described_as(name: str, noun: str) -> bool:
        """Whether "The <noun>" may mean `name`, the last subject `_referent` fell back on: a person
        (`roles`, the gendered text's main entity, a name like a person's that no noun shows a
        thing) only where the noun is a role the text gave them or a noun for people (`role_noun`),
        or the noun they were typed with."""
        things = {m for m, _ in mentions if thing_like(m, articled, types, lowercase_words | name_heads)}
        person = name in roles or (gendered and name == main) or person_like(name, things)
        return not person or role_noun(noun, roles.get(name, set())) or noun in types.get(name, ())

    def main_owns(noun: str, word: str) -> bool:
        """Whether "The <noun>" that the last subject, a person, cannot be described as is the main
        entity's own (a project's budget, deadline, client): no entity was typed with the noun, and the
        main entity is no person (notes and news about one thing name its parts and terms so)."""
        if main is None or gendered or main in roles or word.endswith(("'s", "’s")) or any(noun in t for t in types.values()):
            return False
        return thing_like(main, articled, types, lowercase_words | name_heads) or not person_like(main, set())

    bounds = split_sentences(text)
    header = mail_header([text[s:e] for s, e in bounds])   # "From: X", "To: Y", "Subject: Z - final changes"
    where: str | None = None
    heard = 0   # the names mentioned before this sentence
    for n, (s, e) in enumerate(bounds):
        heard = len(mentions)
        for name, role in filter(None, (role_holder(f.subject, f.relation, f.answer) for f in found[role_from:])):
            roles[name].add(role)
        role_from = len(found)
        sentence = FOOTNOTE.sub("", text[s:e]).strip()
        if _looks_like_code(sentence):
            continue
        if n in header:                                     # a mail's header: no one's facts; its subject line, what it is about
            if header[n] and main is None and (about := subject_line_name(header[n], text, lowercase_words)):
                main = last = about
                mentions.append((about, "subject"))
            continue
        where, sentence = dateline(sentence) if n == 0 else (where, sentence)   # "Port Fidouhae - Some 130 ...": the story's place
        turn = speaker_turn(sentence)                       # "Riss Hastiand: I'll take Doutux": the speaker's words
        sentence = turn[1] if turn else sentence
        if (titled := role_before_name(sentence)) and main is not None and main not in roles and titled[1] not in main:
            found.append(_Found(-1, main, f"'s {titled[0]} is", titled[1], "proper", n))   # "Founder X, who ...": the thing's founder
        told = None if (reported := reported_clause(sentence)) else fronted_clause(sentence)   # "When X delivered Y to Z in 1921, nobody"
        sentence = reported or told or sentence   # "Mara said the Velk project ships on": what she said; else the fronted clause
        sentence = timed_pronoun(uncontracted(elliptical(dated_line(sentence), main)))   # "It's in Teirev": it is; "Designed by X.": it was
        first = _WORD.match(sentence)
        lead = first.group().lower() if first and first.start() == 0 else ""
        values = _value_spans(sentence)
        propers = with_lower_name(sentence, _names_outside_dates(sentence, lowercase_words, values), lower_name, text)
        if heading(sentence):                              # "Sync notes, Thursday.": no entity the text is about
            named = [p for p in propers if (p.start > 0 or sentence.endswith(":")) and not byline(sentence)]   # "Draetaern hackathon:"
            if named:                                      # "From the call with X: they want": X is who "they" are
                last = named_with_head(sentence, named[-1], articled=False)   # "Budget request - Theinae kickoff"
                mentions.append((last, "object"))
                if last != named[-1].text:                 # "A word on the Dolvek tide gauge:": what the text is about
                    main = main or last
            continue
        subject, subj_end, subj_form = None, 0, ""
        of_subject = False  # "The first ascent of X, the highest summit of Y, was made": the apposition is X's
        previous = last  # the entity of the sentences before: what "its" means after a new name
        role = ""  # "The singer is X": X is the last entity's singer
        if lead in _PRONOUNS and not (main is last is None and propers and typed_name(sentence, propers[0])):   # a text's "Their new album, X, is"
            referent = main if lead in _GENDERED else (last or main)
            if lead in ("it", "its") and referent is not None:
                referent = it_means(referent)          # "Ada Lind leads the X. Its ...": the X
            elif lead in ("it", "its") and (referent := unnamed_it(text, mentions[:heard], roles)) is not None:
                main = last = referent                 # "Gonna throw X into the ring. It came out in": X, what the text is about
            if referent is None:
                continue
            subject, subj_end = referent, first.end()
            subj_form = "'s" if _PRONOUNS[lead] == "possessive" else ""
        elif propers and (SUBJECT_OPENING.fullmatch(sentence[: propers[0].start].strip().lower()) or glued_word(sentence, propers[0])):
            subj_end, subj_form = head_noun(sentence, propers[0].end), ""
            subject = sentence[propers[0].start : subj_end]       # "The Nuheind creeper is": the name with its noun
            if subj_end > propers[0].end:   # "The Lodrourk company sells", after "X has run Holenly": Holenly, where it is from
                subject = modified_description(sentence, propers[0].text, sentence[propers[0].end + 1 : subj_end], text[:s], mentions, types, last)
                articled.add(subject)
            if sentence[subj_end:].startswith(("'s ", "’s ")):
                subj_end, subj_form = subj_end + 2, "'s"   # "The Subon Gallery's director, X, said": the gallery's director is X
            elif glued := re.fullmatch(r"(?P<noun>[A-Z][a-z]+) of ", sentence[: propers[0].start]):
                subj_form = "'s " + glued.group("noun").lower()   # "Sales of Vrauliv No. 3 doubled": its sales
            head, sep, owner = subject.partition(" of ")
            if sep and " " not in head and owner in (main, last) and sentence[: propers[0].start].strip() == "":
                # "Deposits of Goroantite are ...": the known entity's own, "Goroantite's deposits"
                subject, subj_form = owner, "'s " + head.lower()
            main = main or subject
            last = subject
        elif propers and (typed := typed_name(sentence, propers[0])):
            # "The bulk carrier Boprav Kraidouv docked at", "The rugby club FC Wagri was established": the
            # name is the subject, its noun the type that "The vessel", "The club" may refer to later; "The result, the X, opened"
            subject, subj_end = propers[0].text, propers[0].end + (2 if "," in sentence[: propers[0].start] else 0)
            types[subject].add(typed)
            if not person_role(typed):
                articled.add(subject)
            main = main or subject
            last = subject
        elif propers and _OF_HEAD.match(sentence[: propers[0].start]) and not sentence[propers[0].end :].startswith(("'s", "’s")):
            # "The village of X lies ...": X itself when X is new; "The capital of X is ..." of a
            # known X is X's capital
            of_head = _OF_HEAD.match(sentence[: propers[0].start])
            noun = of_head.group("noun").lower()
            subject, subj_end = propers[0].text, propers[0].end
            of_subject = True
            if of_head.group("ord"):
                subj_form = f"'s {of_head.group('ord')} {noun}"   # "The first ascent of X was made by": X's, new or known
            elif of_head.group("num"):
                subj_form = f"'s {noun} {of_head.group('num')}"   # "Version 3.6 of X was released in": X's version 3.6
            elif subject in (main, last):
                subj_form = "'s " + noun
            main = main or subject
            last = subject
        fronted = ""
        if subject is None:
            # "The ship is registered in ...": a definite description refers to the latest entity that
            # fits it (`_referent`): one typed with that noun, else the object a verb just took, else
            # the last entity
            words = sentence.split()
            # "The 12-kilometre canal was dug in": the noun after a hyphened measure, the measure its length
            measured = len(words) > 3 and re.match(r"^\d[\d,.]*-[a-z]+$", words[1]) and words[2].isalpha() and words[2].islower()
            if measured:
                words = [words[0]] + words[2:]
            described = len(words) > 2 and words[0] in ("The", "This") and words[1].islower() and \
                (last or main or measured or any(name_head(m) == words[1].rstrip(",;:") for m, _ in mentions))   # "... launched Rinjeiv Festival. The festival"
            head_len = len(words[0]) + 1 + len(words[1].rstrip(",;:")) + (len(sentence.split()[1]) + 1 if measured else 0) if described else 0
            if described and not any(p.start < head_len + 1 for p in propers):
                noun = re.sub(r"['’]s$", "", words[1].rstrip(",;:"))
                subject = _referent(noun, mentions, types, last or main, {main} if gendered and main else set()) if last or main else \
                    next((m for m, _ in reversed(mentions) if noun in types.get(m, ()) or name_head(m) == noun), None)
                if subject in roles and not role_noun(noun, roles[subject]) and noun not in types[subject]:
                    subject = it_means(subject, True)  # "Ada Lind is its editor. The paper sells ...": no person
                owned, owner = ordinal_thing(words), None
                if subject is not None and subject != main and not owned and subject == (last or main) and main_owns(noun, words[1]):
                    owned, owner = noun, main              # "Vul Wimoth leads it. The budget stays at": the project's budget
                if subject is None or not owned and subject == (last or main) and not described_as(subject, noun):
                    _note_names(sentence, propers, 0, "", mentions, types, articled)
                    continue                           # "Ada Lind kept the light. The lighthouse ...": not Ada Lind
                subj_end = head_len
                if measured:
                    value = next((v for v in values if v.start == len(words[0]) + 1), None)
                    unit = hyphen_measure(sentence, value) if value else None
                    if unit:
                        found.append(_Found(-1, subject, unit, value.text, value.kind, n))
                if owned:                              # "The first ascent was made by": the entity's first ascent
                    subject, subj_form, subj_end = owner or last or main, "'s " + owned, len(words[0]) + 1 + len(owned)
                else:
                    types[subject].add(noun)
                last = previous = subject
                if words[1].endswith(("'s", "’s")):
                    subj_form = "'s"                   # "The group's second album ..."
                elif words[2] in _COPULA and not owned:
                    role = words[1]                    # "The singer is X": the entity's singer
        if subject is None:
            # a fronted phrase ("Born in 1934 in Oslo, Mara Quillon took ..."): the subject is the name
            # after ", " (or ", the ") followed by a lower-case word
            for p in propers:
                before = sentence[: p.start]
                rest = sentence[p.end :].lstrip(" ")
                timed = FRONTED_TIME.match(before)     # "In 1798 Ada Lind took ...": a time phrase needs no comma
                timed = timed if timed and any(v.start == timed.start("value") and v.end == timed.end("value") for v in values) else None
                if p.start > 0 and rest[:1].islower() and (before.endswith(", ") or before.endswith(", the ") or timed):
                    subj_end = head_noun(sentence, p.end)  # ", the Viaveir glider is": the name with its noun
                    subject = sentence[p.start : subj_end]
                    if subject.startswith("The ") and len(subject.split()) > 2:
                        subject = subject[4:]          # ", The Ciefal Lanterns released": as named at a sentence start
                    fronted = before[: timed.end("value")] if timed else before[: before.rindex(",")]
                    break
            lone = FRONTED_LONE.match(sentence) if subject is None else None
            if lone and (_fronting_word(lone.group("fronted").split()[0]) or lone.group("fronted").split()[0].lower() in FRONTED_PREDICATES or fronted_value_facts(lone.group("fronted"), sentence, lone.end("who"), propers, values)):
                # "Designed by Ada Lind, it was opened ...", "Built at a cost of 9 million, the ground holds ...":
                # a fronted phrase before a pronoun or a description, which mean what they mean at a sentence start
                noun = lone.group("noun")
                if noun is None:
                    subject = main if lone.group("who") in _GENDERED else (last or main)
                    if lone.group("who") == "it" and subject is not None:
                        subject = it_means(subject)
                else:                                  # only a description the text typed, or a name's own head word
                    subject = next((m for m, _ in reversed(mentions) if noun in types.get(m, ()) or name_head(m) == noun), None)
                subj_end, fronted = lone.end("who"), lone.group("fronted")
            if subject is None:                    # "Sailors on the X steer by the Y, a 43-metre tower ...": Y's apposition only
                _note_names(sentence, propers, 0, "", mentions, types, articled)
                if last is None and (named := named_thing(sentence, propers, articled, lowercase_words | name_heads, n == 0)):
                    last, about = named             # "Meet the X seed drill. It ...", "Anyone going to X? It's in Y"
                    main = main or (last if about else None)
                    mentions += [(last, "subject")] if about else []   # "make it Raibruhor. The recipe": Raibruhor's
                found.extend(_Found(-1, name, relation, a.text, a.kind, n) for name, relation, a in object_appositions(sentence, propers + values))
                continue
            main = main or subject
            last = subject
            fronted_words = [w for w in fronted.split() if w.lower() not in ADVERBS]
            lead_word = fronted_words[0].lower() if fronted_words else ""
            acting = third_person(lead_word) if fronted_words and fronted_words[0] == fronted.split()[0] else None
            # "Based in Y, X ...", "Home to some 300 researchers, X ...": a state that holds ("is based in", "is home to")
            state = lead_word in STATIVE_PARTICIPLES or lead_word in FRONTED_PREDICATES and fronted.split()[1:2] == ["to"]
            if lead_word in _PARTICIPLES or lead_word.endswith("ed") or acting or state:
                # "Born in 1934 in Oslo, X ..." → (X, was born in, 1934), (X, was born in 1934 in, Oslo); a present
                # participle is what the subject does: "Rising to 1,349 metres, X lies ..." → (X, rises to, 1,349)
                fronted_values = _value_spans(fronted)
                spans = sorted(fronted_values + _names_outside_dates(fronted, lowercase_words, fronted_values), key=lambda x: x.start)
                for k, a in enumerate(spans):
                    head = acting + fronted[len(lead_word) : a.start] if acting else ("is " if state else "was ") + fronted[:1].lower() + fronted[1 : a.start]
                    relation = " ".join(head.split())
                    relation = without_answers(last_clause(relation), [e.text for e in spans[:k]])
                    if a.start > 0 and relation[-1:] not in ",;:(" and len(relation.split()) <= max_relation_words \
                            and a.text not in subject and subject not in a.text:
                        found.append(_Found(-1, subject, _resolve(relation, main), a.text, a.kind, n))
            for relation, a in fronted_value_facts(fronted, sentence, subj_end, propers, values):
                if a.text not in subject:              # "On 3 May 1921, X left Y" → (X, left Y on, 3 May 1921)
                    found.append(_Found(-1, subject, relation, a.text, a.kind, n))
            own = _FRONTED_OWN.match(fronted)
            if own and lead_word not in _PARTICIPLES:
                # "From its source in the Oska Hills, X runs ..." → (X, 's source is in the, Oska Hills)
                spans = [sp for sp in _proper_spans(fronted, lowercase_words) + _value_spans(fronted) if sp.start == own.end()]
                if spans and spans[0].end == len(fronted.rstrip()) and spans[0].text not in subject and subject not in spans[0].text:
                    relation = f"'s {own.group('noun')} is {own.group('prep')}{(' ' + own.group('art')) if own.group('art') else ''}"
                    found.append(_Found(-1, subject, relation, spans[0].text, spans[0].kind, n))
        kind_noun = _subject_type(sentence[subj_end:])     # the names of this sentence, for the descriptions of later ones
        if kind_noun:
            types[subject].add(kind_noun)
        of_head = _OF_HEAD.match(sentence[: propers[0].start]) if propers else None
        if of_head and subject == propers[0].text and not subj_form:
            types[subject].add(of_head.group("noun").lower())   # "The village of Wrenby lies ..."
        mentions.append((subject, "subject"))
        _note_names(sentence, propers, subj_end, subject, mentions, types, articled)
        if main == subject and not topic and [h for _, h in mentions].count("subject") == 1:
            topic = thing_topic(sentence, subj_end, propers, values, subject, [text[a:b] for a, b in bounds[n + 1 :]],
                                lambda x: thing_like(x, articled, types, lowercase_words | name_heads), gendered, told is not None)
            if topic:                              # "Hapis Beipai took charge of Krirak Albion. The basketball side ...": the club's text
                main, last, agent = topic, topic, subject
                articled.add(topic)
                if not any(topic in (m, "The " + m) for m, _ in mentions):
                    mentions.append((topic, "subject"))  # "the Sigre pressure gauge. The patent": the gauge's, not a name before it
        said = name_parenthesis(sentence, subj_end, values) if lead not in _PRONOUNS else None
        if said:                                   # "Ada Lind (born 1961) has led ...", "X (1,930 m)": the name's own
            subj_end = said[0]
            found.extend(_Found(-1, subject, relation, a.text, a.kind, n) for relation, a in said[1] if a.text not in subject)
        # "X, a maker of tiles based in Y, was ..." / "X, which is twinned with Y, has ...": the
        # parenthesis states facts of X in its own words and is not part of the main clause's relation
        paren = _PARENTHETICAL.match(sentence[subj_end:])
        paren_end = subj_end + paren.end() if paren else subj_end
        clauses is None or clauses.append((n, subject, subj_form, sentence, subj_end))
        answers = [without_honorific(p) for p in with_heads(sentence, propers, name_heads) if p.start >= subj_end and not sentence[p.end :].startswith(("'s", "’s"))] \
            + [v for v in values if v.start >= subj_end]   # "met Ada Lind's brother": the owner is not what was met
        it_verb = pronoun_object(sentence, subj_end) if lead not in _PRONOUNS and not fronted else None
        it_thing = previous if it_verb and previous and previous != subject and not (gendered and previous == main) else \
            unnamed_it(text, mentions[:heard], roles, subject) if it_verb and previous is None else None   # "In X, four players chart ... Y released it in"
        if it_thing:
            found.append(_Found(-1, subject, it_verb, it_thing, "proper", n))   # "The Lorun Brook joins it"
            as_passive = passive(it_verb)
            if as_passive and subject not in it_thing and it_thing not in subject:
                found.append(_Found(-1, it_thing, as_passive + " by", subject, "proper", n))  # "X has governed it"
        held = pronoun_role(sentence, subj_end) if lead not in _PRONOUNS and not fronted and previous and previous != subject \
            and previous not in subject and subject not in previous else None
        if held:                                   # "Ada Lind has served as its editor since": the entity's editor
            relation, direction = held
            found.append(_Found(-1, previous, relation, subject, "proper", n) if direction == "held"
                         else _Found(-1, subject, relation, previous, "proper", n))
        before: list[_Span] = []  # the answers earlier in this sentence
        apposed: _Span | None = None  # "Their coach, Vera Lind, joined ...": the name in apposition
        taker: tuple[_Span, str, str] | None = None  # "which the Y has run": a relative clause's subject, verb, object
        here = len(found)  # this sentence's items start here
        for a in sorted(answers, key=lambda x: x.start):
            earlier, before = list(before), before + [a]
            names = [part for part in a.text.split() if part[:1].isupper()]
            if a.text in subject or subject in a.text or names and all(part in subject.split() for part in names):
                continue  # never the subject (or its name's words) as its own answer; "Peagesk House" of "Bolint House" is one
            joined = pronoun_role(sentence, a.end) if a.kind == "proper" and re.search(r" (?:and|but) $", sentence[: a.start]) else None
            owner = it_means(subject) if joined and joined[1] == "held" else None
            if owner and owner not in a.text and a.text not in owner:   # ", and Y has served as its head brewer": the entity's
                found.append(_Found(-1, owner, joined[0], a.text, a.kind, n))
            acting = pronoun_object(sentence, a.end) if a.kind == "proper" and re.search(rf"(?:,| and| {SUBORDINATORS}) $", sentence[: a.start]) else None
            if acting and it_means(subject) not in a.text and a.text not in it_means(subject):
                # "X is being built for Y, Moul Gobross runs it, and ...", "since Zeikos Fund backed it": a clause
                # of its own, "it" the entity
                thing = it_means(subject)
                found.append(_Found(-1, a.text, acting, thing, "proper", n))
                if passive(acting):
                    found.append(_Found(-1, thing, passive(acting) + " by", a.text, a.kind, n))
                continue
            if clause_subject(sentence, a):
                break                                  # "was sold in 1901 and Ivo Brask bought ...": a clause with a subject of its own
            unit = hyphen_measure(sentence, a)
            if unit is not None:                       # "the X, a 43-metre tower", "is a 12-kilometre canal": a length
                named = measured_name(sentence, earlier, a) or (subject if sentence[subj_end : a.start] in (" is a ", " was a ", " is an ", " was an ") else None)
                if unit and named and named not in a.text:
                    found.append(_Found(-1, named, unit, a.text, a.kind, n))
                continue
            first = listed_first(sentence, earlier, a)
            twin = next((f for f in reversed(found[here:]) if f.answer == first.text), None) if first else None
            if twin is not None:                       # "was signed by A and B" → "was signed by A and": A's relation, A named
                found.append(_Found(-1, twin.subject, f"{twin.relation} {sentence[first.start : a.start].strip()}", a.text, a.kind, n))
                continue
            if taker is not None and "," not in sentence[taker[0].end : a.start]:
                # "which the University of Y has run since 1946": the clause's subject's fact, its object named
                span, verb, taken = taker
                rest = " ".join(sentence[span.end : a.start].split())
                relation = without_answers(f"{verb} {taken}{rest[len(verb):]}", [e.text for e in earlier if e.start > span.end])
                if rest.startswith(verb) and len(relation.split()) <= max_relation_words:
                    found.append(_Found(-1, span.text, relation, a.text, a.kind, n))
                continue
            taker = None
            took = object_relative(sentence, [(subj_end, subject)] + [(e.end, e.text) for e in earlier if e.start >= subj_end], a, propers)
            if took:                                   # "the X, which the Y has run since": (Y, has run, X)
                taken, verb = took
                found.append(_Found(-1, a.text, verb, taken, "proper", n))
                if passive(verb):
                    found.append(_Found(-1, taken, passive(verb) + " by", a.text, a.kind, n))
                taker = (a, verb, taken)
                continue
            clause = relative_fact(sentence, earlier, a)
            if apposed is not None and a.start > apposed.end and sentence[apposed.end :].startswith(", "):
                tail = re.match(r"^, (?P<relation>.+)$", sentence[apposed.end : a.start])
                relation = without_answers(" ".join(tail.group("relation").split()), [e.text for e in earlier if e.start > apposed.end]) \
                    if tail else ""
                if relation and (_pronoun_clause(relation) is not None or new_clause(relation)):
                    apposed = None                     # ", and its governor, Y, took ...": a clause of its own, not the apposed name's
                else:
                    relation = last_clause(relation)
                    if relation and len(relation.split()) <= max_relation_words and relation[-1:] not in ",;:(" \
                            and a.text not in apposed.text and apposed.text not in a.text:
                        found.append(_Found(-1, apposed.text, _resolve(relation, main), a.text, a.kind, n))
                    continue
            if clause or (clause := apposed_object(sentence, [e for e in earlier if e.start >= subj_end], a)):
                # "Its captain is Vera Lind, who commands a crew of 40": a fact of Vera Lind's; so is
                # "holds Evening in Kowous, a portrait painted by Ada Lind" of the portrait
                head, relation = clause
                relation = re.sub(r"\bit\b", subject, relation)     # "..., which bought it in": the sentence's subject
                if len(relation.split()) <= max_relation_words and relation[-1:] not in ",;:(" \
                        and a.text not in head and head not in a.text:
                    found.append(_Found(-1, head, _resolve(relation, main), a.text, a.kind, n))
                continue
            form = subj_form
            if paren and a.start < paren_end:
                lead_word = paren.group("lead")
                inner = sentence[subj_end + paren.start("inner") : a.start]
                if lead_word in PARENTHESIS_PREPOSITIONS or lead_word in ("which", "who") and len(inner.split()) < 2:
                    continue  # "Heipundia, under Ada Lind, defeated": none of its own; "The event, which Folmu set up": its subject
                form = "" if of_subject else form
                raw = inner.split(None, 1)[1] if lead_word in ("which", "who") else \
                    ("is " if lead_word in ("a", "an", "the", "one") else "was ") + inner
                earlier_here = [e.text for e in earlier if e.start >= subj_end]
            else:
                raw = without_appositions(sentence[paren_end : a.start])
                earlier_here = [e.text for e in earlier if e.start >= paren_end]
            relation = without_answers(" ".join(re.sub(r"[\"“”]", " ", raw).split()), earlier_here)  # a title's quotes are not words
            thing = previous if previous and subject != previous and lead not in _PRONOUNS else None
            timed = clause_time(sentence, a, propers)
            if timed:                                  # ", and since 1993 it has been governed by": the clause's verb, dated
                found.append(_Found(-1, subject, timed, a.text, a.kind, n))
                continue
            mine = own_quantified(sentence, a)
            if mine:                                   # "; most of its 39086 inhabitants live in Y": the entity's
                owner = thing or subject
                if owner not in a.text and a.text not in owner and not (gendered and owner == main):
                    found.append(_Found(-1, owner, mine, a.text, a.kind, n))
                continue
            own = _pronoun_clause(relation)
            owner = subject
            if own is not None:                        # ", and it has", ", and its current governor, Y,": the subject's clause
                form, relation, pronoun = own
                if pronoun in ("it", "its"):           # "Ada Lind became its director, and it handles": not the person
                    owner = it_means(subject)
            named = relation[:-4] if relation.endswith(", the") else relation    # "Its flagship, the MV Weicur, was"
            if form == "'s" and a.kind == "proper" and named.endswith(",") and sentence[a.end :].startswith(",") \
                    and 0 < len(named.split()) <= 3 and not set(named.lower().split()) & (_COPULA | AUXILIARIES):
                # "Their coach, Vera Lind, ...": the subject's coach is Vera Lind
                relation, apposed = named[:-1] + " is", a
            if not relation or relation[-1:] in ",;:(":
                continue
            if own is None and new_clause(relation):   # the clause's own words count, not the clauses before it
                described = described_clause(relation, mentions, types, main if main_owns("", "") else None, a.text)
                if described is None:
                    continue                           # "took 45 days, and 478 passengers reached": another subject's
                (owner, relation), form = described, ""  # ", and the airport serves about": the airport's
            if len(relation.split()) > max_relation_words:
                continue
            relation = last_clause(relation) if form else possessive(last_clause(relation))
            if role and relation in _COPULA:
                form, relation = "'s " + role, relation
            if it_thing:                               # "has governed it since": the entity "it" is
                relation = re.sub(rf"^{re.escape(it_verb)} (?:it|them)\b", f"{it_verb} {it_thing}", relation)
            if not form and relation in ("in", "at", "near", "on") and a.start == subj_end + len(relation) + 2:
                relation = "is " + relation            # "The Soraim Tunnel in Fouworton was opened": where the subject is
            relation = _resolve((form + " " + relation).strip(), main, thing)
            if owner not in a.text and a.text not in owner:
                found.append(_Found(-1, owner, relation, a.text, a.kind, n))
                run_by = control_passive(relation) if a.kind == "proper" else None
                if run_by:                             # "Hair Rezix has run Holenly": who runs Holenly
                    found.append(_Found(-1, a.text, run_by, owner, "proper", n))
    if main and where and where not in main and main not in where:
        found.append(_Found(-1, main, "is in", where, "proper", 0))   # a dateline's place: where the story happens
    if main and (main == topic or thing_like(main, articled, types, lowercase_words | name_heads)
                 or not gendered and main != agent and described_thing(main, [text[a:b] for a, b in bounds])):
        return found, main, agent
    return found, main, main


def extract_facts(texts: Sequence[str], doc_ids: Sequence[str], *, earlier: Sequence[FactItem] = (),
                  max_per_doc: int | None = 8, n_distractors: int = 23, question_forms: Sequence | None = None,
                  heldout_share: float = 0.34, seed: int = 0, cloze: bool = True) -> list[FactItem]:
    """Fact items of `texts` (one id per text), with distractors of the same relation, else kind,
    from the other documents and from `earlier` nights' items; `question` is a held-out question form.

    Dropped: answers that are the subject or part of its name, sentence-initial ordinary words
    (a capitalised word the texts also write in lower case), sentences that look like code, and
    answers that occur in every document (boilerplate) when there are at least 3. `cloze`: what no
    rule read is asked as a cloze on the document's main entity (lib/knowledge/cloze.py), after
    the rules' items."""
    if len(texts) != len(doc_ids):
        raise ValueError(f"extract_facts: {len(texts)} texts but {len(doc_ids)} ids")
    forms, texts = list(question_forms or QUESTION_FORMS), [table_rows(t) for t in texts]
    lower = _lowercase_words(texts)
    heads = shared_heads(texts, lower)
    per_doc: list[list[_Found]] = []
    doc_mains: list[str | None] = []
    things: list[bool] = []
    mains: set[str] = set()
    clauses: list[list[tuple]] = [[] for _ in texts]   # each sentence's subject, for the terms
    code = [looks_like_code_document(t) for t in texts]
    packages = lower_names(texts)                      # "Has anyone tried kubravil?": a lower-case main entity
    for i, text in enumerate(texts):
        try:
            found, main, person = ([], None, None) if code[i] else \
                document_facts(text, lower, name_heads=heads, clauses=clauses[i], lower_name=packages[i])
            if not code[i] and not packages[i] and (topic := document_topic(text, lower, main)):
                clauses[i][:] = []                     # a text about a thing its first subject is not: read again, about it
                found, main, person = document_facts(text, lower, name_heads=heads, clauses=clauses[i], topic=topic)
        except Exception as e:  # a sentence the rules trip on costs its own document's items, never the night
            log.warning("fact extraction: document %s skipped (%s: %s); please report its text", doc_ids[i], type(e).__name__, e)
            found, main, person, clauses[i][:] = [], None, None, []
        doc_mains.append(main)
        things.append(main is not None and person != main)   # the text shows its main entity is a thing
        found += [_Found(i, *r, f.sentence) for f in found for r in thing_facts(f.subject, f.relation, f.answer, f.kind)]
        per_doc.append([replace(f, doc=i) for f in found])
        if person:
            mains.add(person)
    for i, terms in enumerate(night_terms(clauses, texts)):   # after the doc's other items: the cap keeps those
        per_doc[i].extend(_Found(i, subject, relation, answer, "term", n) for subject, relation, answer, n in terms)
        per_doc[i].extend(_Found(i, *fact) for fact in purposes(texts[i], packages[i], {f.answer for f in per_doc[i]})
                          + based_facts(texts[i], doc_mains[i], lower) + named_roles(texts[i], doc_mains[i])
                          + known_for(texts[i], doc_mains[i], things[i], {f.answer for f in per_doc[i]})
                          + colour_facts(texts[i], doc_mains[i], things[i], {f.answer for f in per_doc[i]}))
    salient = salient_contexts(texts) if cloze else frozenset()   # "thanks to its" dark birch / waxy tuberose
    for i, (text, main) in enumerate(zip(texts, doc_mains)):    # last: what no rule read, as a cloze on the main entity
        if cloze and not code[i]:
            # the thing the text is about, else the entity the rules say most about, else the first
            said = Counter(f.subject for f in per_doc[i])
            about = packages[i] or (main if things[i] else None) or (max(said, key=lambda e: (said[e], e == main)) if said else main)
            per_doc[i].extend(_Found(i, *span) for span in unread_spans(text, lower, about, {f.answer for f in per_doc[i]}, salient, heads))
            per_doc[i].extend(_Found(i, *span) for span in unread_versions(text, packages[i], {f.answer for f in per_doc[i]}))
    for i, main in enumerate(doc_mains):   # a thing's text: what another subject did, told of the thing too
        per_doc[i].extend(_Found(i, *told) for told in (told_of_main(per_doc[i], main) if main and things[i] else []))
    items = kept_found(per_doc, mains, max_per_doc)
    return with_distractors(items, earlier, doc_ids, n_distractors=n_distractors, forms=forms, heldout_share=heldout_share, seed=seed)
