"""Length filter and concatenation of short documents (seed 001).

- Documents shorter than `min_chars` carry too little context to learn from alone; seed 001
  concatenates them (joined by a blank line) up to `max_chars` instead of dropping them, and keeps
  the ids of what went in (`source_ids`). A group still under `min_chars` at the end is dropped.
- Documents over `max_chars` are dropped or split at line boundaries (a line longer than
  `max_chars` is cut), pieces named `<id>#<k>`.
- Order is preserved, so the output is deterministic for a given input.

Trade-off: concatenation joins unrelated short texts into one training document; with BOS-aligned
packing they would share a row anyway, and this keeps them from being cropped one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Doc:
    id: str
    text: str
    source_ids: list[str] = field(default_factory=list)


def split_text(text: str, max_chars: int) -> list[str]:
    pieces, current = [], ""
    for line in text.splitlines(keepends=True):
        while len(line) > max_chars:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(line[:max_chars])
            line = line[max_chars:]
        if len(current) + len(line) > max_chars:
            pieces.append(current)
            current = ""
        current += line
    if current:
        pieces.append(current)
    return [p for p in pieces if p.strip()]


def length_filter(
    docs: list[Doc], min_chars: int, max_chars: int, long_docs: str = "split", concatenate_short: bool = True
) -> tuple[list[Doc], dict[str, int]]:
    if min_chars > max_chars:
        raise ValueError(f"curation.min_chars ({min_chars}) is larger than curation.max_chars ({max_chars})")
    counts = {"in": len(docs), "dropped_too_long": 0, "split_long": 0, "dropped_too_short": 0, "concatenated_groups": 0}
    out: list[Doc] = []
    group: list[Doc] = []

    def close_group() -> None:
        if not group:
            return
        text = "\n\n".join(d.text for d in group)
        if len(text) < min_chars:
            counts["dropped_too_short"] += len(group)
        elif len(group) == 1:
            out.append(group[0])
        else:
            counts["concatenated_groups"] += 1
            out.append(Doc(f"concat:{group[0].id}+{len(group) - 1}", text, [s for d in group for s in d.source_ids]))
        group.clear()

    for doc in docs:
        n = len(doc.text)
        if n > max_chars:
            if long_docs == "drop":
                counts["dropped_too_long"] += 1
                continue
            counts["split_long"] += 1
            for k, piece in enumerate(split_text(doc.text, max_chars)):
                if len(piece) >= min_chars:
                    out.append(Doc(f"{doc.id}#{k}", piece, list(doc.source_ids)))
            continue
        if n >= min_chars:
            out.append(doc)
            continue
        if not concatenate_short:
            counts["dropped_too_short"] += 1
            continue
        if group and sum(len(d.text) + 2 for d in group) + n > max_chars:
            close_group()
        group.append(doc)
        if sum(len(d.text) + 2 for d in group) >= min_chars:
            close_group()
    close_group()
    counts["out"] = len(out)
    return out, counts
