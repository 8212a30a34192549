"""Closed-book fact scores: does the model answer a night's fact items in a held-out phrasing?

For each item (lib/knowledge/facts.py) the model sees only `question` (a phrasing the night never
trained on, which ends where the answer starts) and is scored two ways:

- Multiple choice, as lm-evaluation-harness scores it: every option in {answer} ∪ distractors is
  scored by the log-likelihood of " " + option after the question (the question's trailing
  whitespace stripped, so "Answer:" + " Lisbon" tokenizes as running text does). The options
  are ranked by the *sum* of their token log-probabilities (the harness's `acc`), not by the
  byte-normalised mean (`acc_norm`). Why: the distractors are answers of the same night, so the
  model has met every option's spelling; once an option's first token is chosen its remaining
  tokens are near certain, and an option's score is its first token's log-probability plus about
  zero. Dividing that by the option's length would favour long options by their length, not by
  what the model knows; the sum does not. `rank` is 1-based (1 = answer ranked first, ties
  count against the answer), `accuracy` the share of rank 1, `chance` the mean of
  1 / (1 + len(distractors)).
- Exact match: the greedy continuation of the question (batched, KV cache) starts with the
  answer, both normalised (lower case, surrounding whitespace and punctuation stripped).

Every prompt starts with the document separator training packs with (as lib/evaluation/evaluate.py's
windows do), is cut from the left to fit the model's positions, and the forward passes run
batched under `inference_mode`, fp32 on CPU, the stored dtype (bf16 autocast) on CUDA.

Cost: one forward pass of ~20 tokens per option: 24 items × 24 options on the tiny preset take
~1 s on the 2-core CPU, the greedy pass under 1 s.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from lib.evaluation.eval_model import EvalModel
from lib.knowledge.facts import FactItem

# Metric names the night records per fact set ("facts:new", "facts:<version>").
FACT_ACCURACY, FACT_EXACT, FACT_MEAN_RANK, FACT_CHANCE, FACT_N = "fact_accuracy", "fact_exact", "fact_mean_rank", "fact_chance", "fact_n"
NEW_FACTS = "facts:new"


def facts_dataset(version: str | None = None) -> str:
    """The dataset name a fact set's metrics are recorded under: tonight's, or night `version`'s."""
    return NEW_FACTS if version is None else f"facts:{version}"


@dataclass
class FactScores:
    n: int
    accuracy: float
    exact_match: float
    mean_rank: float
    chance: float
    items: list[dict] = field(default_factory=list)  # per item: {"id", "rank", "correct", "exact"}

    def metrics(self) -> dict[str, float]:
        """The figures as the lineage records them."""
        return {FACT_ACCURACY: self.accuracy, FACT_EXACT: self.exact_match, FACT_MEAN_RANK: self.mean_rank,
                FACT_CHANCE: self.chance, FACT_N: float(self.n)}


_STRIP = string.whitespace + string.punctuation + "“”‘’«»—–…"


def normalise_answer(text: str) -> str:
    """Lower case, inner whitespace collapsed, surrounding whitespace and punctuation stripped."""
    return " ".join(text.lower().split()).strip(_STRIP)


def _load(model: Any, device: str | None) -> EvalModel:
    if isinstance(model, EvalModel):
        return model
    if isinstance(model, (str, Path)):
        return EvalModel.load(model, device=device)
    raise TypeError(f"score_facts needs a model folder or a lib.evaluation.evaluate.EvalModel, got {type(model).__name__}")


def _context(em: EvalModel, question_ids: list[int], room: int) -> list[int]:
    """Separator + question, cut from the left so `room` more tokens fit the model's positions."""
    ids = [em.separator_id] + question_ids
    keep = max(1, em.max_len - room)
    return ids[-keep:] if len(ids) > keep else ids


def option_logprobs(em: EvalModel, items: Sequence[FactItem], batch_size: int = 64) -> list[list[float]]:
    """Σ log p(" " + option | separator + question) for every option of every item (answer first)."""
    import torch

    questions = em.encode([it.question.rstrip() for it in items])
    rows: list[tuple[int, int, list[int], int]] = []  # (item, option, ids, continuation length)
    for i, it in enumerate(items):
        conts = em.encode([" " + o.strip() for o in it.options])
        for j, cont in enumerate(conts):
            ids = _context(em, questions[i], len(cont)) + cont
            rows.append((i, j, ids, len(cont)))
    out = [[0.0] * len(it.options) for it in items]
    order = sorted(range(len(rows)), key=lambda r: len(rows[r][2]))
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = [rows[r] for r in order[start : start + batch_size]]
            width = max(len(r[2]) for r in chunk)
            ids = torch.full((len(chunk), width), em.separator_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for k, (_, _, seq, _) in enumerate(chunk):
                ids[k, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                mask[k, : len(seq)] = 1
            with em._autocast():
                logits = em.model(input_ids=ids.to(em.device), attention_mask=mask.to(em.device)).logits
            logp = torch.log_softmax(logits.float(), -1).cpu()
            for k, (i, j, seq, n) in enumerate(chunk):
                end = len(seq)
                targets = torch.tensor(seq[end - n :], dtype=torch.long)
                out[i][j] = float(logp[k, end - n - 1 : end - 1].gather(1, targets[:, None]).sum())
    return out


def greedy_continuations(em: EvalModel, prompts: Sequence[str], max_new_tokens: int, batch_size: int = 64) -> list[str]:
    """Greedy continuations of `prompts` (each after the separator), batched with a KV cache:
    left-padded rows, positions counted from each row's first real token."""
    import torch

    encoded = [_context(em, q, max_new_tokens) for q in em.encode([p.rstrip() for p in prompts])]
    texts = [""] * len(prompts)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(encoded[i]) for i in idx)
            ids = torch.full((len(idx), width), em.separator_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for k, i in enumerate(idx):
                seq = encoded[i]
                ids[k, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
                mask[k, width - len(seq) :] = 1
            ids, mask = ids.to(em.device), mask.to(em.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            generated = []
            past = None
            step_ids, step_pos = ids, positions
            for _ in range(max_new_tokens):
                with em._autocast():
                    out = em.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                                   past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].float().argmax(-1, keepdim=True)
                generated.append(nxt)
                step_ids = nxt
                step_pos = step_pos[:, -1:] + 1
                mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
            tokens = torch.cat(generated, dim=1).cpu().tolist() if generated else [[] for _ in idx]
            for k, i in enumerate(idx):
                texts[i] = em.tokenizer.decode(tokens[k], skip_special_tokens=True)
    return texts


def score_facts(model_dir_or_loaded_model: Any, items: Sequence[FactItem], *, device: str | None = "cpu",
                batch_size: int = 64, max_new_tokens: int | None = None) -> FactScores:
    """Multiple-choice rank and greedy exact match of `items` under a model (folder or EvalModel).

    `max_new_tokens` defaults to the longest answer's token count + 1."""
    items = list(items)
    if not items:
        return FactScores(0, 0.0, 0.0, 0.0, 0.0, [])
    em = _load(model_dir_or_loaded_model, device)
    scores = option_logprobs(em, items, batch_size)
    if max_new_tokens is None:
        max_new_tokens = max(len(ids) for ids in em.encode([" " + it.answer.strip() for it in items])) + 1
    continuations = greedy_continuations(em, [it.question for it in items], max_new_tokens, batch_size)
    rows = []
    for it, s, text in zip(items, scores, continuations):
        rank = 1 + sum(1 for other in s[1:] if other >= s[0])
        answer = normalise_answer(it.answer)
        exact = bool(answer) and normalise_answer(text).startswith(answer)
        rows.append({"id": it.id, "rank": rank, "correct": rank == 1, "exact": exact, "greedy": text})
    n = len(rows)
    return FactScores(
        n=n,
        accuracy=sum(r["correct"] for r in rows) / n,
        exact_match=sum(r["exact"] for r in rows) / n,
        mean_rank=sum(r["rank"] for r in rows) / n,
        chance=sum(1.0 / (1 + len(it.distractors)) for it in items) / n,
        items=rows,
    )
