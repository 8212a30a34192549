"""A fact item (what lib/knowledge/facts.py extracts: subject, relation, answer, the held-out
question and its distractors) and its file format.

Stored as JSON Lines, one item a line, written atomically (lib.files): a night's set lies at
`<run_dir>/knowledge/facts.jsonl`; a bad line is an error that names the file and the line. The id
is a hash of (subject, relation, answer), so the same fact has the same id every night.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from collections import Counter
from typing import Collection, Iterable, Sequence

from lib.files import JsonLineError, json_lines, write_text
from lib.knowledge.cloze import is_cloze
from lib.knowledge.spans import capitals_label


@dataclass
class Found:
    """A fact as the rules found it in document `doc`'s sentence `sentence`, before its id, cue,
    question and distractors (lib/knowledge/facts.py)."""
    doc: int
    subject: str
    relation: str
    answer: str
    kind: str
    sentence: int


def kept_found(per_doc: Sequence[Sequence[Found]], mains: Collection[str], max_per_doc: int | None) -> list[Found]:
    """What a night keeps of what its rules found, document by document: not an answer every
    document gives (three or more), a fact twice, a cloze's answer a fifth of the documents share
    (a word of their kind: "CEO", "CI"), an everyday word in capitals ("REVIEW — It takes ...": a
    label); a proper answer that is some document's main person is a "name"; at most `max_per_doc`
    of a document, in the order found."""
    doc_freq = Counter(a for found in per_doc for a in {f.answer for f in found})
    everywhere = {a for a, c in doc_freq.items() if len(per_doc) >= 3 and c >= len(per_doc)}
    common = {a for a, c in doc_freq.items() if c >= 3 and 5 * c >= len(per_doc)}
    items: list[Found] = []
    for found in per_doc:
        seen, kept = set(), []
        for f in found:
            if f.answer in everywhere or (f.subject, f.relation, f.answer) in seen or is_cloze(f.relation) and f.answer in common \
                    or f.kind in ("proper", "name") and capitals_label(f.answer):
                continue
            if f.kind == "proper" and f.answer in mains:
                f.kind = "name"
            seen.add((f.subject, f.relation, f.answer))
            kept.append(f)
        items.extend(kept[:max_per_doc] if max_per_doc else kept)
    return items


@dataclass(frozen=True)
class FactItem:
    id: str            # stable: short hash of (subject, relation, answer)
    doc_id: str        # the document it came from (its content hash, as curation/ingest name documents)
    subject: str       # the entity the fact is about, named in full ("Mara Quillon")
    relation: str      # the words that link subject and answer in the text ("was born in")
    answer: str        # the answer span exactly as in the text ("Lisbon")
    kind: str          # the answer's type: "name", "number", "date", "year", "proper", ...
    cue: str           # the trained phrasing: the text before the answer in its sentence, subject named
    question: str      # a held-out phrasing: a prompt that ends where the answer starts, never trained on
    distractors: tuple[str, ...] = ()  # same-kind answers from other documents / earlier nights

    @property
    def options(self) -> tuple[str, ...]:
        """The answer first, then the distractors: what multiple choice ranks."""
        return (self.answer,) + tuple(self.distractors)

    def to_json(self) -> dict:
        row = asdict(self)
        row["distractors"] = list(self.distractors)
        return row

    @classmethod
    def from_json(cls, row: dict) -> "FactItem":
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(row) - {"distractors"})
        if missing:
            raise ValueError(f"fact item lacks field(s) {', '.join(missing)}")
        values = {k: row[k] for k in names if k in row}
        values["distractors"] = tuple(str(d) for d in row.get("distractors") or ())
        return cls(**values)


def fact_id(subject: str, relation: str, answer: str) -> str:
    """Stable id of a fact: 16 hex digits of sha256 over its three parts."""
    return hashlib.sha256("\x1f".join((subject, relation, answer)).encode("utf-8")).hexdigest()[:16]


def write_facts(path: str | Path, items: Iterable[FactItem]) -> Path:
    """Write `items` as JSON Lines to `path` atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(item.to_json(), ensure_ascii=False) + "\n" for item in items)
    write_text(path, text)
    return path


def read_facts(path: str | Path) -> list[FactItem]:
    """The items of a facts.jsonl file; an error names the file and line that is wrong."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fact set {path} does not exist")
    items = []
    try:
        with open(path, "rb") as fh:
            for n, row in json_lines(fh):
                try:
                    items.append(FactItem.from_json(row))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{n}: {exc}") from None
    except JsonLineError as exc:
        raise ValueError(f"{path}:{exc.line}: {exc.problem}") from None
    return items


def relation_key(relation: str, words: int = 3) -> str:
    """The relation's last words in lower case: "was born in" and "she was born in" pool together."""
    return " ".join(relation.lower().split()[-words:])
