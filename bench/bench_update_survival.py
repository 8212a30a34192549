"""How much of a gentle night's update survives bf16 storage, night after night, per storage policy.

A small Llama (`--layers`×`--width`) is pre-trained with the real trainer (fp32, `--pretrain-steps`
at 3e-3) and stored in bf16: the adopted v0, as a user's bf16 model would be. Then `--nights`
consolidations of `--steps` steps each (each night its own manifest draw), peak LR
`--peak-lr`, run by lib.training.train under five storage policies:

  reference        stored fp32 (no rounding at all): the trajectory the others should follow
  nearest          bf16, round-to-nearest, next night from the bf16 weights (the old behaviour)
  stochastic       bf16, stochastic rounding, next night from the bf16 weights
  nearest+master   bf16 round-to-nearest served, fp32 master kept, next night from the master
  stochastic+master  bf16 stochastic served, fp32 master kept (the product's default)

Per night it prints what the trainer itself wrote into meta.json (`update_kept`: the share of the
night's fp32 update u that the stored weights s carry, <s − start, u>/|u|²; `weights_changed`:
bf16 weights that differ from the parent's), and against the reference after k nights:
`cum_kept` = <s_k − v0, r_k − v0>/|r_k − v0|² (the share of all nights' learning being served),
`cum_err` = |s_k − r_k|/|r_k − v0|, the held-out loss of the served weights and, after the last
night, `gain`: its improvement over v0 as a share of the reference's. Storage: `delta` = bytes of
the served weights as a delta against the parent's (share of the bf16 file), `master` = the fp32
master weights as a delta against the version's own bf16 weights (same unit; full fp32 = 200%).

Run: .venv/bin/python bench/bench_update_survival.py [--nights 5 --steps 6 --peak-lr 1e-5]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

POLICIES = {
    "reference": ["checkpoints.dtype=float32", "checkpoints.master_weights=false"],
    "nearest": ["checkpoints.rounding=nearest", "checkpoints.master_weights=false"],
    "stochastic": ["checkpoints.rounding=stochastic", "checkpoints.master_weights=false"],
    "nearest+master": ["checkpoints.rounding=nearest", "checkpoints.master_weights=true"],
    "stochastic+master": ["checkpoints.rounding=stochastic", "checkpoints.master_weights=true"],
}


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    from lib.checkpoints.checkpoint import MODEL_FILE, materialize

    return {k: v.double() for k, v in load_file(str(materialize(folder) / MODEL_FILE)).items()}


def dot(a: dict, b: dict) -> float:
    return sum(float((a[k] * b[k]).sum()) for k in a)


def sub(a: dict, b: dict) -> dict:
    return {k: a[k] - b[k] for k in a}


def storage_shares(folder: Path, parent: Path) -> tuple[float, float]:
    """(bytes of the stored weights as a delta against the parent's, bytes of the master weights
    as a delta against the version's own stored weights), each as a share of the full stored file."""
    from lib.checkpoints.checkpoint import MODEL_FILE, master_dir, materialize
    from lib.checkpoints.delta import encode_delta

    stored = (materialize(folder) / MODEL_FILE).read_bytes()
    delta, _ = encode_delta(stored, (materialize(parent) / MODEL_FILE).read_bytes())
    master = master_dir(folder)
    if master is None:
        return len(delta) / len(stored), float("nan")
    m, _ = encode_delta((materialize(master) / MODEL_FILE).read_bytes(), stored)
    return len(delta) / len(stored), len(m) / len(stored)


def heldout_loss(folder: Path, batches) -> float:
    import torch
    import torch.nn.functional as F

    from lib.training.model import load_model

    model = load_model(folder).eval()  # the served (stored) weights, widened to fp32
    total = n = 0.0
    with torch.no_grad():
        for x, y, _ in batches:
            logits = model(input_ids=x).logits
            total += float(F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=-100, reduction="sum"))
            n += int((y != -100).sum())
    return total / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--peak-lr", type=float, default=1e-5)
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="keep the work folder here")
    args = ap.parse_args()

    import logging

    import torch

    from lib.checkpoints.checkpoint import read_meta, write_version
    from lib.config import load_config
    from lib.data.loader import TrainLoader
    from lib.training.model import load_model
    from lib.training.train import train
    from train_fixtures import prepare, write_config

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_survival_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        seq, batch = 64, 8
        base = prepare(work, token_budget=args.pretrain_steps * batch * seq + 20_000, seq_len=seq)
        tok = base["tokenizer"]
        nights = [prepare(work, tokenizer=tok, seed=k, token_budget=args.steps * batch * seq + 5_000, seq_len=seq,
                          data_name=f"night-{k}")["data"] for k in range(1, args.nights + 1)]
        heldout_data = prepare(work, tokenizer=tok, seed=99, token_budget=20 * batch * seq, seq_len=seq, data_name="heldout")["data"]
        loader = TrainLoader(heldout_data, batch, seq)
        heldout = [loader.next_batch() for _ in range(8)]
        cfg_file = write_config(
            work / "cfg.yaml",
            model={"hidden_size": args.width, "num_layers": args.layers, "num_heads": 4, "intermediate_size": 3 * args.width,
                   "max_position_embeddings": seq, "pretrain_lr": 3e-3, "pretrain_iterations": args.pretrain_steps},
            training={"seq_len": seq, "device_batch_size": batch, "total_batch_size": batch * seq, "num_iterations": args.steps,
                      "snapshot_every": 10_000, "lr_scale": 1.0})

        # v0: pre-trained in fp32, then stored in bf16 with an original_lr equal to the gentle peak
        pre = work / "pre"
        if not pre.exists():
            train(load_config(cfg_file), base["data"], pre, init=True, tokenizer_dir=tok, train_dir=work / "t-pre")
        v0 = work / "v0"
        if not v0.exists():
            meta = {**read_meta(pre), "version": "v0", "original_lr": args.peak_lr}
            write_version(v0, load_model(pre), tokenizer_dir=pre, meta=meta, dtype="bfloat16", rounding="nearest")
        w0 = weights(v0)
        print(f"{args.layers}×{args.width} Llama, v0 pre-trained {args.pretrain_steps} steps, stored bf16; "
              f"{args.nights} nights × {args.steps} steps of {batch}×{seq} tokens, peak LR {args.peak_lr:g}; held-out loss v0 {heldout_loss(v0, heldout):.5f}")

        served: dict[str, list[Path]] = {}
        for name, overrides in POLICIES.items():
            parent, chain = v0, []
            for k, data in enumerate(nights, 1):
                out = work / name / f"v{k}"
                if not out.exists():
                    train(load_config(cfg_file, overrides=overrides), data, out, parent=parent, train_dir=work / name / f"t{k}",
                          meta={"version": f"v{k}"})
                chain.append(out)
                parent = out
            served[name] = chain

        ref = [weights(p) for p in served["reference"]]
        loss0, ref_last = heldout_loss(v0, heldout), heldout_loss(served["reference"][-1], heldout)
        print(f"\n{'policy':<18} {'night':>5} {'update_kept':>11} {'changed':>8} {'cum_kept':>9} {'cum_err':>8} {'held-out':>9} "
              f"{'gain':>6} {'delta':>6} {'master':>7}")
        summary = {}
        for name, chain in served.items():
            for k, folder in enumerate(chain, 1):
                parent_dir = v0 if k == 1 else chain[k - 2]
                delta_share, master_share = storage_shares(folder, parent_dir)
                meta = read_meta(folder)
                kept = meta.get("update_kept") or {}
                w = weights(folder)
                r = sub(ref[k - 1], w0)
                cum = dot(sub(w, w0), r) / dot(r, r)
                err = math.sqrt(dot(sub(w, ref[k - 1]), sub(w, ref[k - 1])) / dot(r, r))
                loss = heldout_loss(folder, heldout)
                num = {key: float("nan") if kept.get(key) is None else kept[key] for key in ("update_kept", "weights_changed")}
                gain = (loss0 - loss) / (loss0 - ref_last) if k == len(chain) and loss0 != ref_last else float("nan")
                print(f"{name:<18} {k:>5} {num['update_kept']:>11.3f} {num['weights_changed']:>8.1%} "
                      f"{cum:>9.3f} {err:>8.3f} {loss:>9.5f} {gain:>6.0%} {delta_share:>6.1%} {master_share:>7.1%}")
                summary.setdefault(name, []).append({"night": k, "update_kept": kept.get("update_kept"),
                                                     "weights_changed": kept.get("weights_changed"),
                                                     "cum_kept": cum, "cum_err": err, "heldout_loss": loss,
                                                     "delta_share": delta_share, "master_share": master_share})
        (work / "summary.json").write_text(json.dumps(summary, indent=1))
        print(f"\nsummary: {work / 'summary.json'}" if args.keep else "")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
