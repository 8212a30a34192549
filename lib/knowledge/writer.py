"""Paraphrases written by a model: the champion itself or an OpenAI-compatible endpoint.

- Prompt: "Rewrite the following text in other words. Keep every name, number and date
  exactly.\\n\\n<document>\\n\\nRewritten:" — a plain completion for the champion (a base model
  continues it), a chat message for an endpoint (an instruct model answers it).
- champion: one batched `model.generate` over all documents (left-padded, KV cache, sampling at
  temperature 0.7), `writer_paraphrases` samples per document, each at most 1.5× the
  document's tokens + 16.
- endpoint: POST `<writer_url>/chat/completions` with `n = writer_paraphrases`, the API key read
  from the environment variable `writer_api_key_env` names (never stored, never logged).
- A paraphrase is kept only if it repeats every answer the rules extracted from its document
  (a writer that changes a name or a year would teach a wrong fact) and differs from the
  original; the rest are dropped and counted.

Trade-off: a small champion writes poor paraphrases (the tiny preset's model mostly fails the
answer check, so it adds little but time); a bigger model behind an endpoint writes good ones at
the cost of a network call per document.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from lib.knowledge.augment import AugmentedText, text_id
from lib.evaluation.eval_model import EvalModel

if TYPE_CHECKING:
    from lib.config import KnowledgeConfig

log = logging.getLogger(__name__)

PROMPT = "Rewrite the following text in other words. Keep every name, number and date exactly.\n\n{text}\n\nRewritten:"


def keeps_answers(paraphrase: str, original: str, answers: Sequence[str]) -> bool:
    p = " ".join(paraphrase.split())
    return bool(p) and p != " ".join(original.split()) and all(a in p for a in answers)


def champion_paraphrases(model_dir: str | Path, texts: Sequence[str], n: int, device: str | None = None) -> list[list[str]]:
    """`n` sampled paraphrases per text from the model in `model_dir` (batched, KV cache)."""
    import torch

    em = EvalModel.load(model_dir, device=device)
    prompts = [[em.separator_id] + ids for ids in em.encode([PROMPT.format(text=t) for t in texts])]
    out: list[list[str]] = [[] for _ in texts]
    torch.manual_seed(0)
    with torch.inference_mode():
        for i, ids in enumerate(prompts):
            budget = min(int(1.5 * len(ids)) + 16, max(1, em.max_len - len(ids)))
            if len(ids) >= em.max_len - 8:
                continue  # no room left to write in
            batch = torch.tensor([ids] * n, dtype=torch.long, device=em.device)
            gen = em.model.generate(input_ids=batch, attention_mask=torch.ones_like(batch), max_new_tokens=budget, do_sample=True,
                                    temperature=0.7, pad_token_id=em.separator_id)
            out[i] = [em.tokenizer.decode(g[len(ids):].tolist(), skip_special_tokens=True).strip() for g in gen]
    return out


def endpoint_paraphrases(url: str, model: str, api_key_env: str | None, texts: Sequence[str], n: int,
                         timeout: float = 120.0) -> list[list[str]]:
    """`n` paraphrases per text from an OpenAI-compatible /chat/completions endpoint."""
    headers = {"Content-Type": "application/json"}
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ValueError(f"knowledge.writer_api_key_env names {api_key_env!r}, but that environment variable is not set")
        headers["Authorization"] = f"Bearer {key}"
    out = []
    for text in texts:
        body = json.dumps({"model": model, "n": n, "temperature": 0.7,
                           "messages": [{"role": "user", "content": PROMPT.format(text=text)}]}).encode("utf-8")
        req = urllib.request.Request(url.rstrip("/") + "/chat/completions", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                reply = json.loads(resp.read().decode("utf-8"))
        except OSError as exc:
            raise RuntimeError(f"knowledge.writer_url {url}: the paraphrase request failed ({exc}); check the server "
                               f"or set knowledge.writer=none") from None
        out.append([c.get("message", {}).get("content", "") or "" for c in reply.get("choices", [])])
    return out


def written_forms(ids: Sequence[str], texts: Sequence[str], answers: Sequence[Sequence[str]], knowledge: "KnowledgeConfig",
                  champion_dir: str | Path | None = None) -> tuple[list[AugmentedText], int]:
    """(kept paraphrases as augmented texts, how many were dropped by the answer check)."""
    n = knowledge.writer_paraphrases
    if knowledge.writer == "champion":
        if champion_dir is None:
            raise ValueError("knowledge.writer=champion needs the champion's folder")
        written = champion_paraphrases(champion_dir, texts, n)
    elif knowledge.writer == "endpoint":
        if not knowledge.writer_url or not knowledge.writer_model:
            raise ValueError("knowledge.writer=endpoint needs knowledge.writer_url and knowledge.writer_model")
        written = endpoint_paraphrases(knowledge.writer_url, knowledge.writer_model, knowledge.writer_api_key_env, texts, n)
    else:
        return [], 0
    kept, dropped = [], 0
    for doc_id, text, want, outs in zip(ids, texts, answers, written):
        for p in outs:
            if keeps_answers(p, text, want):
                kept.append(AugmentedText(text_id(p), doc_id, "writer", p.strip()))
            else:
                dropped += 1
    return kept, dropped
