"""Facts no model can know: fictional towns for the demo buffer, with closed-book questions.

- `fictional_towns(n, seed)`: n towns with generated names, each on a generated river, with a
  generated mayor and a founding year; the same seed gives the same towns on every machine.
- `town_documents(towns)`: one short prose document per town, stating its three facts, in one of
  three templates (town named in full, later sentences by "it"); what the demo buffer adds.
- `town_probes(towns)`: one FactItem per fact (lib/knowledge/facts.py), asked in a question
  phrasing no document uses ("Question: Which river flows through X?\\nAnswer:") with the
  other towns' values of the same attribute as distractors; chance is 1 / n.

Trade-off: 12 towns (36 facts, ~3 kB) keep `make demo` at its length, a few hundred bytes
against the buffer's 120 kB of code; that many facts put chance at 8.3% and one answer at 2.8
points, coarse but honest, and every one of them is unknowable to v0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from lib.knowledge.facts import FactItem, fact_id

_ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "sh", "th", "kr", "pl", "gl"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "oa", "ie"]
_TOWN_ENDS = ["ford", "wick", "holm", "stead", "mere", "by", "thorpe", "bridge"]
_RIVER_ENDS = ["el", "wyn", "ash", "or", "enne", "ax"]
_GIVEN = ["Ilse", "Corin", "Mattis", "Yara", "Oswin", "Tamsin", "Edric", "Liora", "Bram", "Sefa", "Odile", "Kasimir",
          "Renna", "Joram", "Ada", "Petrus"]

TEMPLATES = (
    "{town} is a small town on the river {river}. It was founded in {year}. The mayor of {town} is {mayor}, "
    "who was elected by the town council.",
    "The town of {town} was founded in {year} on the banks of the river {river}. Today {mayor} is the mayor of {town}, "
    "and the old mill still stands by the water.",
    "{mayor} is the mayor of {town}. {town} lies on the river {river} and was founded in {year}, "
    "when a ferry crossing grew into a market.",
)
QUESTIONS = {
    "river": ("flows through", "Question: Which river flows through {town}?\nAnswer:"),
    "mayor": ("has the mayor", "Question: Who is the mayor of {town}?\nAnswer:"),
    "year": ("was founded in", "Question: In what year was {town} founded?\nAnswer:"),
}


@dataclass(frozen=True)
class Town:
    name: str
    river: str
    mayor: str
    year: str
    template: int

    @property
    def doc_id(self) -> str:
        return f"fiction/{self.name}"


def _syllables(rng: random.Random, k: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(k))


def _fresh(rng: random.Random, make, taken: set[str]) -> str:
    while True:
        word = make()
        if word not in taken:
            taken.add(word)
            return word


def fictional_towns(n: int = 12, seed: int = 2026) -> list[Town]:
    """`n` towns with unique generated names, rivers, mayors and founding years."""
    rng = random.Random(seed)
    taken: set[str] = set()
    towns = []
    for i in range(n):
        name = _fresh(rng, lambda: (_syllables(rng, 2) + rng.choice(_TOWN_ENDS)).capitalize(), taken)
        river = _fresh(rng, lambda: (_syllables(rng, 1) + rng.choice(_RIVER_ENDS)).capitalize(), taken)
        mayor = _fresh(rng, lambda: f"{rng.choice(_GIVEN)} {(_syllables(rng, 2) + rng.choice(['n', 'r', 'l', 's'])).capitalize()}", taken)
        year = _fresh(rng, lambda: str(rng.randrange(1120, 1890)), taken)
        towns.append(Town(name, river, mayor, year, i % len(TEMPLATES)))
    return towns


def town_documents(towns: list[Town]) -> list[str]:
    return [TEMPLATES[t.template].format(town=t.name, river=t.river, mayor=t.mayor, year=t.year) for t in towns]


def town_probes(towns: list[Town]) -> list[FactItem]:
    """One closed-book question per fact, the other towns' values as distractors."""
    items = []
    for t in towns:
        for attribute, (relation, question) in QUESTIONS.items():
            answer = getattr(t, attribute)
            others = tuple(getattr(o, attribute) for o in towns if o is not t)
            kind = "year" if attribute == "year" else "proper"
            items.append(FactItem(fact_id(t.name, relation, answer), t.doc_id, t.name, relation, answer, kind,
                                  f"{t.name} {relation}", question.format(town=t.name), others))
    return items
