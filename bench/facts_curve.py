"""How fast do facts stick on a model? A training curve outside the pipeline, for choosing defaults.

Loads a champion (a version folder), then trains it in this process the way a night does (AdamW,
the same peak LR = original LR × lr_scale, rows of seq_len + 1 tokens, each document after the
separator) on a mix of: the night's documents, their augmented forms (lib/knowledge), and the
replay corpus; every `--every` steps it scores the fact items (held-out question forms) and the
natural questions (bench/fact_sets.py) with lib.evaluation.facts.score_facts, and old_val's bits
per byte on a small sample. Prints the curve. Used to pick knowledge.ratio, forms and steps;
bench/bench_facts.py measures the chosen defaults through the real pipeline.

    PYTHONPATH=. python bench/facts_curve.py --model WS/checkpoints/v0 --corpus WS/corpora/stdlib \
        --fact-set bio --steps 200 --every 25 [--ratio-new 0.25 --ratio-knowledge 0.25 --no-inject]

Any Hugging Face folder works as --model (a real pre-trained one: bench/gguf_to_hf.py); with
--device cuda the weights train in fp32 under bf16 autocast, as the trainer does on a GPU.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import pyarrow.parquet as pq
    import torch

    from bench.fact_sets import load_records, natural_items, records
    from lib.config import KnowledgeConfig
    from lib.evaluation.evaluate import EvalModel
    from lib.evaluation.facts import score_facts
    from lib.knowledge.augment import augment_documents
    from lib.knowledge.facts import extract_facts, fact_id

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True, help="a workspace corpus folder (train/ and val/ parquet shards)")
    ap.add_argument("--fact-set", default="bio")
    ap.add_argument("--fact-file", type=Path, default=None, help="a fact set of your own (bench/fact_sets.py); its night 1")
    ap.add_argument("--people", type=int, default=24)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--lr", type=float, default=3e-3 * 0.3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ratio-new", type=float, default=0.25)
    ap.add_argument("--ratio-knowledge", type=float, default=0.25)
    ap.add_argument("--forms", type=int, default=8)
    ap.add_argument("--kinds", default=None, help="augmentation kinds, comma-separated (qa,permuted,explicit); default the pipeline's knowledge.augmentations")
    ap.add_argument("--no-inject", action="store_true")
    ap.add_argument("--skip-before", action="store_true", help="no report at step 0 (the untrained model's figures)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda: on cuda, fp32 master weights with bf16 autocast")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    recs = load_records(args.fact_file, args.people)[1] if args.fact_file else records(args.fact_set, 1, args.people)
    texts = [r.text for r in recs]
    ids = [fact_id(r.subject, "doc", str(i)) for i, r in enumerate(recs)]
    kcfg = KnowledgeConfig(forms_per_document=args.forms, **({"augmentations": args.kinds.split(",")} if args.kinds else {}))
    items = extract_facts(texts, ids, heldout_share=kcfg.heldout_share, cloze=kcfg.cloze)
    forms = [] if args.no_inject else [a.text for a in augment_documents(
        ids, texts, items, forms_per_document=args.forms, kinds=tuple(kcfg.augmentations), heldout_share=kcfg.heldout_share,
        synonyms=kcfg.synonyms, kind_questions=kcfg.kind_questions)]
    natural = natural_items(recs)
    train_dir = args.corpus / "train" if (args.corpus / "train").is_dir() else args.corpus
    corpus_files = sorted(train_dir.glob("*.parquet"))
    corpus = [t for f in corpus_files for t in pq.read_table(f, columns=["text"]).column("text").to_pylist()]
    val_files = sorted((args.corpus / "val").glob("*.parquet"))
    val = [t for f in val_files for t in pq.read_table(f, columns=["text"]).column("text").to_pylist()][:40]

    em = EvalModel.load(args.model, device=args.device, max_len=args.seq)
    em.model.float()  # fp32 master weights, as the trainer keeps them
    model, tok = em.model, em.tokenizer
    cuda = em.device.type == "cuda"
    enc = lambda ts: tok.encode_batch(list(ts))  # noqa: E731
    pools = {"new": enc(texts), "knowledge": enc(forms) if forms else [], "corpus": enc(rng.sample(corpus, min(2000, len(corpus))))}
    weights = {"new": args.ratio_new, "knowledge": 0.0 if args.no_inject else args.ratio_knowledge}
    weights["corpus"] = 1 - sum(weights.values())
    names = [n for n in pools if pools[n] and weights[n] > 0]
    print(json.dumps({"facts": len(items), "forms": len(forms), "forms_tokens": sum(map(len, pools["knowledge"])),
                      "new_tokens": sum(map(len, pools["new"])), "weights": weights}), flush=True)

    def row() -> list[int]:
        out: list[int] = []
        while len(out) < args.seq + 1:
            src = rng.choices(names, [weights[n] for n in names])[0]
            doc = rng.choice(pools[src])
            out += [em.separator_id] + doc
        return out[: args.seq + 1]

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr,
                            betas=(0.9, 0.95))
    warm = max(1, int(0.1 * args.steps))

    # the same facts asked in a trained question form and as the document's own prefix (the cue):
    # tells "not memorised" (all low) from "memorised but not retrievable" (cue high, held-out low)
    from dataclasses import replace

    from lib.knowledge.forms import QUESTION_FORMS, split_forms

    def trained_form(it):
        k = [i for i in split_forms(it.id, QUESTION_FORMS, kcfg.heldout_share)[0] if QUESTION_FORMS[i].probe][0]
        return replace(it, question=QUESTION_FORMS[k].render(it.subject, it.relation, it.kind))

    trained_items = [trained_form(it) for it in items]
    cue_items = [replace(it, question=it.cue) for it in items]

    def report(step: int, t0: float) -> None:
        model.eval()
        f = score_facts(em, items)
        n = score_facts(em, natural)
        tq = score_facts(em, trained_items)
        cue = score_facts(em, cue_items)
        bpb = em.bits_per_byte(val, batch_size=8)
        print(f"step {step:4d}  held-out form {f.accuracy:6.1%} (exact {f.exact_match:5.1%}, rank {f.mean_rank:5.2f}, chance {f.chance:.1%}, n {f.n})"
              f"  natural {n.accuracy:6.1%} (chance {n.chance:.1%})  trained form {tq.accuracy:6.1%}  cue {cue.accuracy:6.1%}"
              f"  old_val bpb {bpb:.4f}  {time.perf_counter() - t0:.0f} s", flush=True)
        by_attr: dict[str, list[bool]] = {}
        for it, r in zip(natural, n.items):
            by_attr.setdefault(it.relation, []).append(r["correct"])
        print("           natural by attribute: " + ", ".join(f"{a} {sum(c) / len(c):.0%}" for a, c in by_attr.items()), flush=True)
        model.train()

    t0 = time.perf_counter()
    if not args.skip_before:
        report(0, t0)
    model.train()
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / warm) * (1.0 if step < 0.5 * args.steps else max(0.1, (args.steps - step) / (0.5 * args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        batch = torch.tensor([row() for _ in range(args.batch)], dtype=torch.long, device=em.device)
        with torch.autocast(em.device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.every == 0 or step == args.steps:
            report(step, t0)


if __name__ == "__main__":
    main()
