"""Distractors: the answers a fact item is ranked against, and the item it becomes.

Same relation first (the answers a confusable question has), then the same kind: a relation's last
3, 2, 1 words ("tiles based in", "based in", "in": the answers that follow the same words are of one
sort, places after "in", agents after "by"), then every answer of the kind, from tonight's other
documents and from earlier nights' items. Each tier is shuffled by the fact's id and the seed, so a
fact's distractors are the same every run.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Sequence

from lib.knowledge.fact_items import FactItem, fact_id, relation_key
from lib.knowledge.forms import join_cue, split_forms


def with_distractors(found: Sequence, earlier: Sequence[FactItem], doc_ids: Sequence[str], *, n_distractors: int,
                     forms: Sequence, heldout_share: float, seed: int) -> list[FactItem]:
    """The fact items of `found` (extraction's finds: subject, relation, answer, kind and the index
    of their document in `doc_ids`), each with up to `n_distractors` answers of its relation, then
    its kind (a person's "name": then the other names), and a held-out question form; a fact with
    nothing to confuse it with is dropped (it is not multiple choice)."""
    by_relation: dict[tuple[str, str], list[str]] = defaultdict(list)
    by_kind: dict[str, list[str]] = defaultdict(list)
    for f in list(found) + list(earlier):
        for pool in [by_relation[(f.kind, relation_key(f.relation, k))] for k in (3, 2, 1)] + [by_kind[f.kind]]:
            if f.answer not in pool:
                pool.append(f.answer)
    out = []
    for f in found:
        fid = fact_id(f.subject, f.relation, f.answer)
        rng = random.Random(f"{seed}:{fid}")
        tiers, taken = [], {f.answer}
        also = [by_kind["proper"]] if f.kind == "name" else []   # a person's name, where no other is one: other names
        for pool in [by_relation[(f.kind, relation_key(f.relation, k))] for k in (3, 2, 1)] + [by_kind[f.kind]] + also:
            tier = [a for a in pool if a not in taken]
            taken.update(tier)
            rng.shuffle(tier)
            tiers.extend(tier)
        distractors = tuple(tiers[:n_distractors])
        if not distractors:
            continue
        _, heldout = split_forms(fid, forms, heldout_share)
        question = forms[heldout[0]].render(f.subject, f.relation, f.kind)
        out.append(FactItem(fid, str(doc_ids[f.doc]), f.subject, f.relation, f.answer, f.kind, join_cue(f.subject, f.relation),
                            question, distractors))
    return out
