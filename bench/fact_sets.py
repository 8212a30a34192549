"""Three fictional fact sets for bench/bench_facts.py and tests/test_knowledge.py: no model can know
them beforehand (names, places and numbers are generated), and they share no template.

- `bio`: a person's biography: birth city, employer, field of study, birth year. One document per
  person, later sentences refer to the person by pronoun.
- `other`: a ship's record (other attributes, other templates, "it" instead of he/she): home
  port, builder, captain, launch year, crew size.
- `rivers`: a river's course (source hills, length in kilometres, the town at its mouth, a
  tributary), written after the extraction rules (see RIVER_TEMPLATES).
- `islands`: an island's group, population, chief town, governor and the year the governor took
  office, written after the rules of 2026-11-26 and measured as written (ISLAND_TEMPLATES).

Each record also carries natural questions in a phrasing that no question form of
lib/knowledge/forms.py produces ("Question: In which city was X born?\\nAnswer:"), each with the
attribute's values of the other records as its options.

A fact set of your own (`bench_facts.py --fact-file F`, `facts_curve.py --fact-file F`): JSON
Lines, one record a line, read by `load_records`:

    {"subject": "Ivel Darro", "text": "Ivel Darro was born in Quenholm ...",
     "questions": {"city": ["Question: Where was Ivel Darro born?\\nAnswer:", "Quenholm"]},
     "night": 1}

`night` (1-based) is optional: without it, the records are dealt into nights of `--people` in
file order. Every record of a night should ask the same attributes: each natural question is
ranked among that attribute's answers of the night's other records.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "st", "t", "tr", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou", "ia"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "nd", "rk", "ss", "x", "m"]


def _word(rng: random.Random, syllables: int) -> str:
    w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CODAS)
    return w.capitalize()


@dataclass
class Record:
    subject: str
    text: str
    questions: dict[str, tuple[str, str]]  # attribute -> (natural question, answer)


def _unique(rng, make, taken: set[str]) -> str:
    while True:
        w = make()
        if w not in taken:
            taken.add(w)
            return w


BIO_FIELDS = ["marine biology", "astronomy", "medieval history", "organic chemistry", "linguistics", "geology",
              "economics", "mathematics", "architecture", "botany", "philosophy", "music theory"]
BIO_TEMPLATES = [
    "{name} was born in {city} in {year}. {He} studied {field} and later worked for {company}. "
    "{His} colleagues at {company} remember {him} as patient and precise.",
    "{name} grew up in {city}, where {he} was born in {year}. After university, where {he} read {field}, {he} joined {company}. "
    "{He} still lives near {city}.",
    "Born in {year} in {city}, {name} took a degree in {field}. {His} whole career was spent at {company}, "
    "first as an assistant and then as a director.",
]
BIO_QUESTIONS = {
    "city": "Question: In which city was {name} born?\nAnswer:",
    "company": "Question: Which company did {name} work for?\nAnswer:",
    "field": "Question: What subject did {name} study?\nAnswer:",
    "year": "Question: In what year was {name} born?\nAnswer:",
}

SHIP_TEMPLATES = [
    "The {ship} is a cargo ship whose home port is {port}. It was built by {builder} and launched in {year}. "
    "Its captain is {captain}, who commands a crew of {crew} sailors.",
    "Launched in {year} from the yard of {builder}, the {ship} sails out of {port}. A crew of {crew} serves under captain {captain}.",
    "The {ship} was launched in {year}. Its builder was {builder}. The ship is registered in {port} and carries a crew of {crew}, "
    "led by {captain}.",
]
SHIP_QUESTIONS = {
    "port": "Q: What is the home port of the {ship}?\nA:",
    "builder": "Q: Which shipyard built the {ship}?\nA:",
    "captain": "Q: Who is the captain of the {ship}?\nA:",
    "year": "Q: When was the {ship} launched?\nA:",
    "crew": "Q: How many sailors are in the crew of the {ship}?\nA:",
}


# Written on 2026-11-26 after the extraction rules of that day and measured as written (tiny preset,
# one night: 48.8% in a held-out form, bio 81-89%): extraction found 43 of its 80 facts. The three
# rules it showed missing were then added (subordinate clauses, listed verbs with "and", a fronted
# "From its source in the X,"): since then it is a set tuned on, like the other two.
RIVER_TEMPLATES = [
    "The {river} rises in the {hills} and flows for {length} kilometres before it reaches the sea at {mouth}. "
    "Its largest tributary is the {trib}.",
    "From its source in the {hills}, the {river} runs {length} kilometres south to {mouth}, where it enters the sea. "
    "The {trib} joins it halfway along its course.",
    "At {length} kilometres, the {river} is one of the longer rivers of the region. It begins in the {hills}, "
    "takes in the waters of the {trib}, and ends at {mouth}.",
]
RIVER_QUESTIONS = {
    "hills": "Question: In which hills does the {river} have its source?\nAnswer:",
    "length": "Question: How many kilometres long is the {river}?\nAnswer:",
    "mouth": "Question: At which town does the {river} meet the sea?\nAnswer:",
    "trib": "Question: Which river flows into the {river}?\nAnswer:",
}
# Written on 2026-11-26 (session E) after that day's extraction rules, without looking at what
# they find, and measured as written: the set the project has not tuned on (docs/knowledge.md).
ISLAND_TEMPLATES = [
    "{island} is an island in the {group}, home to some {pop} people. Its chief town is {town}, "
    "and since {year} it has been governed by {governor}.",
    "The island of {island} lies at the eastern end of the {group}. {governor} has governed it since {year}; "
    "most of its {pop} inhabitants live in {town}.",
    "With a population of {pop}, {island} is the largest island of the {group}. Its capital, {town}, was founded "
    "by fishermen, and its current governor, {governor}, took office in {year}.",
]
ISLAND_QUESTIONS = {
    "group": "Question: Which island group does {island} belong to?\nAnswer:",
    "pop": "Question: How many people live on {island}?\nAnswer:",
    "town": "Question: What is the main town of {island}?\nAnswer:",
    "governor": "Question: Who governs {island}?\nAnswer:",
    "year": "Question: Since what year has the governor of {island} been in office?\nAnswer:",
}
FACT_SETS = ("bio", "other", "rivers", "islands")


def records(fact_set: str, night: int, n: int, seed: int = 0) -> list[Record]:
    """`n` records of `fact_set` (one of FACT_SETS) for night `night` (1-based): different people or
    ships every night, the same ones for the same arguments."""
    rng = random.Random(f"{fact_set}:{seed}:{night}")
    taken: set[str] = set()
    out = []
    for i in range(n):
        if fact_set == "bio":
            female = rng.random() < 0.5
            name = f"{_unique(rng, lambda: _word(rng, 2), taken)} {_unique(rng, lambda: _word(rng, 2) + rng.choice(['son', 'ley', 'ard', 'ine', 'ez']), taken)}"
            v = {"name": name, "city": _unique(rng, lambda: _word(rng, 2) + rng.choice(["ford", "holm", "ora", "burg", "ia"]), taken),
                 "company": _unique(rng, lambda: _word(rng, 2) + " " + rng.choice(["Labs", "Industries", "Works", "Group", "Systems"]), taken),
                 "field": rng.choice(BIO_FIELDS), "year": str(rng.randint(1931, 1999)),
                 "He": "She" if female else "He", "he": "she" if female else "he", "His": "Her" if female else "His",
                 "him": "her" if female else "him"}
            text = BIO_TEMPLATES[i % len(BIO_TEMPLATES)].format(**v)
            qs = {k: (q.format(**v), v[k]) for k, q in BIO_QUESTIONS.items()}
            out.append(Record(name, text, qs))
        elif fact_set == "other":
            v = {"ship": _unique(rng, lambda: _word(rng, 2) + " " + rng.choice(["Star", "Tide", "Wind", "Crown"]), taken),
                 "port": _unique(rng, lambda: "Port " + _word(rng, 2), taken),
                 "builder": _unique(rng, lambda: _word(rng, 1) + " & " + _word(rng, 2) + " Yards", taken),
                 "captain": f"{_word(rng, 2)} {_unique(rng, lambda: _word(rng, 3), taken)}",
                 "year": str(rng.randint(1850, 1990)), "crew": str(rng.randint(12, 480))}
            text = SHIP_TEMPLATES[i % len(SHIP_TEMPLATES)].format(**v)
            qs = {k: (q.format(**v), v[k]) for k, q in SHIP_QUESTIONS.items()}
            out.append(Record(v["ship"], text, qs))
        elif fact_set == "rivers":
            v = {"river": _unique(rng, lambda: _word(rng, 2) + " River", taken),
                 "hills": _unique(rng, lambda: _word(rng, 2) + " " + rng.choice(["Hills", "Fells", "Mountains", "Moors"]), taken),
                 "mouth": _unique(rng, lambda: _word(rng, 2) + rng.choice(["mouth", "haven", "port", "wick"]), taken),
                 "trib": _unique(rng, lambda: _word(rng, 2) + " " + rng.choice(["Water", "Brook", "Beck"]), taken),
                 "length": str(rng.randint(40, 900))}
            text = RIVER_TEMPLATES[i % len(RIVER_TEMPLATES)].format(**v)
            qs = {k: (q.format(**v), v[k]) for k, q in RIVER_QUESTIONS.items()}
            out.append(Record(v["river"], text, qs))
        elif fact_set == "islands":
            v = {"island": _unique(rng, lambda: _word(rng, 2), taken),
                 "group": _unique(rng, lambda: _word(rng, 2) + " " + rng.choice(["Islands", "Isles"]), taken),
                 "town": _unique(rng, lambda: _word(rng, 2) + rng.choice(["haven", "by", "sund", "wick"]), taken),
                 "governor": f"{_word(rng, 2)} {_unique(rng, lambda: _word(rng, 2) + rng.choice(['sen', 'ez', 'ova', 'ard']), taken)}",
                 "pop": str(rng.randint(300, 90000)), "year": str(rng.randint(1990, 2024))}
            text = ISLAND_TEMPLATES[i % len(ISLAND_TEMPLATES)].format(**v)
            qs = {k: (q.format(**v), v[k]) for k, q in ISLAND_QUESTIONS.items()}
            out.append(Record(v["island"], text, qs))
        else:
            raise ValueError(f"fact set must be one of {', '.join(FACT_SETS)}, got {fact_set!r}")
    return out


def natural_items(recs: list[Record], asked=lambda r: True) -> list:
    """The natural questions of the records `asked` picks, as lib.knowledge FactItems: each ranked
    among its attribute's other answers in `recs` (a record without the attribute is not asked it)."""
    from lib.knowledge.facts import FactItem, fact_id

    attrs = list(dict.fromkeys(a for r in recs for a in r.questions))
    out = []
    for attr in attrs:
        values = list(dict.fromkeys(r.questions[attr][1] for r in recs if attr in r.questions))
        for r in recs:
            if attr in r.questions and asked(r):
                q, a = r.questions[attr]
                out.append(FactItem(fact_id(r.subject, attr, a), "", r.subject, attr, a, "natural", "", q,
                                    tuple(v for v in values if v != a)))
    return out


def load_records(path: str | Path, people: int) -> dict[int, list[Record]]:
    """A fact set of one's own (the module's docstring): {night: records}, nights from 1. A line
    that is not such a record is an error naming the file and line; nothing is guessed."""
    nights: dict[int, list[Record]] = {}
    unnumbered: list[Record] = []
    path = Path(path)
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("subject"), str) or not isinstance(row.get("text"), str) \
                or not isinstance(row.get("questions"), dict) or not row["questions"]:
            raise ValueError(f"{where}: a record needs \"subject\" and \"text\" (strings) and \"questions\" "
                             f"({{attribute: [question, answer]}}, at least one)")
        questions = {}
        for attr, qa in row["questions"].items():
            if not (isinstance(qa, list) and len(qa) == 2 and all(isinstance(x, str) and x.strip() for x in qa)):
                raise ValueError(f"{where}: questions[{attr!r}] must be [question, answer], two non-empty strings")
            if qa[1] not in row["text"]:
                raise ValueError(f"{where}: the answer {qa[1]!r} of {attr!r} is not in the record's text")
            questions[attr] = (qa[0], qa[1])
        rec = Record(row["subject"], row["text"], questions)
        night = row.get("night")
        if night is None:
            unnumbered.append(rec)
        elif isinstance(night, int) and not isinstance(night, bool) and night >= 1:
            nights.setdefault(night, []).append(rec)
        else:
            raise ValueError(f"{where}: \"night\" must be a whole number from 1, got {night!r}")
    if nights and unnumbered:
        raise ValueError(f"{path}: either every record names its \"night\" or none does")
    for i in range(0, len(unnumbered), max(people, 1)):
        nights[i // max(people, 1) + 1] = unnumbered[i:i + people]
    if not nights:
        raise ValueError(f"{path}: no records")
    if sorted(nights) != list(range(1, len(nights) + 1)):
        raise ValueError(f"{path}: nights must run 1, 2, ... without a gap, got {sorted(nights)}")
    for k, recs in nights.items():
        if len(recs) < 2:
            raise ValueError(f"{path}: night {k} has {len(recs)} record; a natural question needs the answers of other records")
    return nights


def _same_answer(item: str, asked: str) -> bool:
    """An item's answer gives the asked one: the same words ("the" and case aside), its number
    without the unit the question's answer adds ("7,420" for "7,420 metres"), or an amount's number
    the question asks without its currency ("£500" for "500")."""
    item, asked = item.lower().removeprefix("the "), asked.lower().removeprefix("the ")
    if item[:1] in "£$€¥" and item[1:2].isdigit() and not asked[:1] in "£$€¥":
        item = item[1:]
    return item == asked or item[:1].isdigit() and asked.startswith(item + " ") and " " not in asked[len(item) + 1:]


def extraction_coverage(recs: list[Record], items, text_of: dict[str, str]) -> tuple[dict[str, tuple[int, int, int]], set[tuple[str, str]], set[tuple[str, str]]]:
    """({attribute: (read, read under the record's own name, asked)}, the (subject, attribute) pairs
    read, those read under the record's own name): of the records' natural questions, how many the
    night's extraction read, i.e. some fact item of the record's own document (`text_of`: item
    doc_id → text) has that answer ("the" and case aside), and how many of them an item whose subject
    is the record's own (`_same_subject`). A fact extraction does not read is never trained in a
    question form: the night can store it only as the documents say it; one read under another name
    ("Hapis Beipai: ... draws its crowds from" for Krirak Albion's city) is trained, but a question
    that names the record's subject does not reach it."""
    by_text: dict[str, list] = {}
    for it in items:
        by_text.setdefault(text_of.get(it.doc_id, ""), []).append(it)
    out: dict[str, list[int]] = {}
    read_pairs, own_pairs = set(), set()
    for r in recs:
        mine = by_text.get(r.text, [])
        for attr, (_, a) in r.questions.items():
            cell = out.setdefault(attr, [0, 0, 0])
            hits = [it for it in mine if _same_answer(it.answer, a)]
            if hits:
                cell[0] += 1
                read_pairs.add((r.subject, attr))
            if any(_same_subject(it.subject, r.subject) for it in hits):
                cell[1] += 1
                own_pairs.add((r.subject, attr))
            cell[2] += 1
    return {attr: tuple(cell) for attr, cell in out.items()}, read_pairs, own_pairs


def coverage_line(cov: dict[str, tuple[int, int, int]]) -> str:
    """"read 41 of 120 facts (34%), 30 under the record's own name (25%): city 14/24, ..." for
    `extraction_coverage`'s result (per attribute: read/asked)."""
    read, own, asked = (sum(c[i] for c in cov.values()) for i in range(3))
    return (f"read {read} of {asked} facts ({read / max(asked, 1):.0%}), {own} under the record's own name "
            f"({own / max(asked, 1):.0%}): " + ", ".join(f"{k} {r}/{a}" for k, (r, _, a) in cov.items()))


def _same_subject(item: str, record: str) -> bool:
    """An item's subject names the record's: the same words ("the" and case aside), or one holds the
    other as whole words, of more than 3 letters ("Miagror" for "the Miagror seed drill")."""
    a, b = (x.lower().removeprefix("the ").strip() for x in (item, record))
    return a == b or any(len(x) > 3 and re.search(rf"(?<!\w){re.escape(x)}(?!\w)", y) for x, y in ((a, b), (b, a)))
