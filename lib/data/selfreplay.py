"""Self-generated replay: text sampled from v0 itself, for users who do not have its training corpus.

Replay needs the original data, and a user who adopted a public model
rarely has it. The model's own samples are the next best thing: replaying them pulls every night
back toward v0's distribution, a cheap form of distillation (no teacher kept in memory; the
samples are drawn once).

- `generate_replay(version_dir, out_corpus, n_tokens)` samples documents from the model in
  batches with a KV cache (`model.generate`, pure sampling: temperature 1, no top-k/top-p
  truncation, so the samples follow the model's distribution, tails included). Each sample
  starts from the document separator (an unconditional document, as pre-training began them) or
  from a short opening drawn from `prompts` (e.g. the memory's first tokens), and ends at an
  end-of-document token or at `max_len` tokens.
- The samples become a corpus in the workspace like any other (lib/data/replay.py's shard layout,
  train/val split by id hash with a minimum), so the nights replay it and its held-out part is
  `old_val`: forgetting is measured on v0's own distribution.
- Cached once per base model: `corpus.json` records the model's digest and the sampling
  parameters; asking again with the same ones reuses the corpus, anything else regenerates it.

Trade-off: samples of a small or undertrained model are repetitive and drift off-topic, so they
protect general fluency more than specific knowledge; docs/benchmarks.md ("Long-term memory") compares
them with real-corpus replay and with none on the forgetting of v0's own distribution
(bench/bench_memory.py).
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import hashlib
import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

from lib.checkpoints.checkpoint import materialize, read_meta
from lib.data.corpus import Document
from lib.data.replay import ShardWriter, finish_corpus, split_cut, split_hash
from lib.data.tokenizer import load_tokenizer
from lib.files import file_hash, temp_folder
from lib.workspace import check_name

log = logging.getLogger(__name__)

GENERATE_PREFIX = "generate:"


def parse_generate(spec: str) -> int | None:
    """`generate:N_TOKENS` (N may be written 2000000, 2e6 or 2M) -> N; None for a plain path."""
    if not isinstance(spec, str) or not spec.startswith(GENERATE_PREFIX):
        return None
    raw = spec[len(GENERATE_PREFIX):].strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000, "b": 1_000_000_000}.get(raw[-1:], 1)
    try:
        n = float(raw[:-1] if scale > 1 else raw) * scale
    except ValueError:
        raise ValueError(f"--replay {spec!r}: expected generate:N_TOKENS, e.g. generate:2000000 or generate:2M") from None
    if not math.isfinite(n) or n < 1:
        raise ValueError(f"--replay {spec!r}: the number of tokens to generate must be positive")
    return int(n)


def _params(digest: str, n_tokens: int, max_len: int, seed: int, prompts_digest: str | None) -> dict:
    return {"model_digest": digest, "n_tokens": n_tokens, "max_len": max_len, "seed": seed,
            "temperature": 1.0, "top_p": 1.0, "prompts": prompts_digest, "version": 1}


def generate_replay(
    workspace,
    version_dir: str | Path,
    name: str,
    n_tokens: int,
    *,
    max_len: int = 512,
    batch_size: int = 64,
    seed: int = 0,
    prompts: Sequence[str] | None = None,
    prompt_tokens: int = 16,
    val_fraction: float = 0.05,
    val_min_docs: int = 16,
    device: str | None = None,
    say: Callable[[str], None] = log.info,
) -> dict:
    """Sample `n_tokens` tokens from the model in `version_dir` into the corpus `name`; returns
    its corpus.json (with `reused: true` when the same model and parameters made it before)."""
    import torch
    from transformers import AutoModelForCausalLM

    check_name(name, "corpus name")
    version_dir = Path(version_dir)
    folder = materialize(version_dir)
    digest = read_meta(version_dir).get("digest") or file_hash(folder / "model.safetensors")
    tok = load_tokenizer(folder)
    sep_id, _ = tok.separator()
    prompt_ids = [ids[:prompt_tokens] for ids in tok.encode_batch(list(prompts))] if prompts else []
    prompt_ids = [p for p in prompt_ids if p]
    prompts_digest = hashlib.sha256(json.dumps(prompt_ids).encode()).hexdigest()[:16] if prompt_ids else None
    params = _params(digest, int(n_tokens), int(max_len), int(seed), prompts_digest)
    existing = workspace.corpus(name) / "corpus.json"
    if existing.is_file():
        stats = json.loads(existing.read_text(encoding="utf-8"))
        if stats.get("generation") == params:
            say(f"self-generated replay {name!r}: reused ({stats['docs']} documents from {digest[:12]}…)")
            return {**stats, "reused": True}

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32 if dev.type == "cpu" else "auto").to(dev).eval()
    positions = int(getattr(model.config, "max_position_embeddings", max_len) or max_len)
    length = max(2, min(max_len, positions - 1))
    ends = sorted({i for i in (tok.eos_id, sep_id) if i is not None})
    pad = tok.pad_id if tok.pad_id is not None else (ends[0] if ends else sep_id)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    final = workspace.corpus(name)
    final.parent.mkdir(parents=True, exist_ok=True)
    building = temp_folder(final)
    building.mkdir()
    train, val = ShardWriter(building / "train", 4_000_000), ShardWriter(building / "val", 4_000_000)
    docs: list[Document] = []
    produced, batches, t0 = 0, 0, time.perf_counter()
    try:
        while produced < n_tokens:
            # each row: the separator, then (when given) a short opening; left-padded to one width
            rows = []
            for _ in range(batch_size):
                opening = prompt_ids[int(torch.randint(len(prompt_ids), (1,), generator=gen))] if prompt_ids else []
                rows.append([sep_id] + opening)
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, row in enumerate(rows):
                ids[r, width - len(row):] = torch.tensor(row)
                mask[r, width - len(row):] = 1
            torch.manual_seed(seed + 1_000_003 * batches)  # sampling draws: reproducible per batch
            with torch.inference_mode():
                out = model.generate(ids.to(dev), attention_mask=mask.to(dev), do_sample=True, temperature=1.0, top_k=0,
                                     top_p=1.0, max_new_tokens=length - width, eos_token_id=ends or None, pad_token_id=pad)
            for r, row in enumerate(out[:, width:].tolist()):
                cut = next((k for k, t in enumerate(row) if t in ends), len(row))
                body = rows[r][1:] + row[:cut]
                text = tok.decode(body, skip_special_tokens=True)
                produced += cut
                if text.strip():
                    docs.append(Document(f"gen-{len(docs):07d}", text, None))
            batches += 1
        hashes = [split_hash(d.id) for d in docs]
        cut = split_cut(hashes, len(docs), val_fraction, val_min_docs)
        for d, h in zip(docs, hashes):
            (val if h < cut else train).add(d)
        stats = finish_corpus(building, final, name, "generated", train, val, extra={
            "generation": params, "produced_tokens": produced, "samples": len(docs), "batches": batches,
            "seconds": round(time.perf_counter() - t0, 3), "model": str(version_dir)})
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    say(f"self-generated replay {name!r}: {len(docs)} documents, {produced:,} tokens sampled from {version_dir.name} "
        f"in {stats['seconds']:.1f} s")
    return {**stats, "reused": False}
