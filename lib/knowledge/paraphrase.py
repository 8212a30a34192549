"""A relation in other words: the verbs people ask with are not always the document's.

A small model answers a question whose words meet the words it trained on, and hardly a paraphrase
(docs/knowledge.md: on `clubs`, "What year was X founded?" against a document that says "was
started in" is answered no better than chance). So the question-and-answer texts of a fact
alternate its relation with the same relation in everyday synonyms: "was started in" is also
trained as "was founded in" and "was established in", "is run by" as "is managed by" and "is led
by". The synonym sets are general English, by what a verb does, not by any fact set's attributes;
a writer model (lib/knowledge/writer.py) does this with any words, a table only with these.

Off by default (`knowledge.synonyms`): on the tiny preset, one night of `bridges` (written blind)
answered 12% of its natural questions with synonyms and 19% without (held-out form 89% / 92%),
within the spread of single runs: no gain to show for it.

Trade-off: a synonym is not always one in context ("formed" a habit, "run" a race), and a fact is
then also trained in a phrasing that reads oddly; it never states anything the document does not.
"""

from __future__ import annotations

import re

# each set: words of one inflection that can stand for one another in a relation
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("founded", "established", "started", "formed", "set up", "created"),
    ("founds", "establishes", "starts", "forms", "sets up", "creates"),
    ("built", "constructed", "erected"),
    ("designed", "planned", "engineered"),
    ("located", "based", "situated"),
    ("lies", "sits", "stands", "is located"),
    ("led", "managed", "run", "headed", "directed", "coached", "trained"),
    ("leads", "manages", "runs", "heads", "directs", "coaches", "trains"),
    ("opened", "inaugurated", "unveiled"),
    ("launched", "introduced", "released", "unveiled"),
    ("invented", "devised", "conceived", "developed", "created"),
    ("published", "released", "issued", "brought out"),
    ("owned", "held"),
    ("owns", "holds"),
    ("weighs", "has a mass of"),
    ("joined", "signed for", "went to work for"),
    ("works for", "is employed by", "works at"),
    ("worked for", "was employed by", "worked at"),
    ("studied", "read", "trained in"),
    ("grew up in", "was raised in"),
    ("moved to", "relocated to", "settled in"),
    ("died", "passed away"),
    ("won", "took", "claimed"),
    ("wrote", "penned", "authored"),
    ("written", "penned", "authored"),
    ("painted", "made"),
    ("climbed", "scaled", "ascended", "conquered"),
    ("serves", "is served by"),
    ("hosts", "holds", "stages"),
    ("hosted", "held", "staged"),
    ("filed", "lodged", "submitted"),
    ("first", "originally"),
)
_BY_WORD: dict[str, list[tuple[str, ...]]] = {}
for _group in SYNONYMS:
    for _w in _group:
        _BY_WORD.setdefault(_w, []).append(_group)
_PATTERN = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _BY_WORD), key=len, reverse=True)) + r")\b")


def paraphrases(relation: str, limit: int = 2) -> list[str]:
    """Up to `limit` versions of `relation` with its first word or phrase of a synonym set replaced
    by the set's others, in the set's order: "was started in" → ["was founded in", "was established
    in"]; [] where no word of the relation has a set. A cloze's relation (": ...") is left as the
    document says it."""
    if relation.startswith(":"):
        return []
    m = _PATTERN.search(relation)
    if not m:
        return []
    out = []
    for group in _BY_WORD[m.group(1)]:
        for other in group:
            if other != m.group(1):
                candidate = relation[: m.start()] + other + relation[m.end() :]
                if candidate not in out and candidate != relation:
                    out.append(candidate)
    return out[:limit]
