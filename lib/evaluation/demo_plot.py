"""The demo's picture: what one night did to the model, in one PNG.

- Left: the training loss per step of each run (v0's pre-training, then the night's
  consolidation), read from `<run>/train/metrics.jsonl`, with a 10-step moving average.
- Right: bits per byte of the parent (before) and the new version (after) on each evaluation
  set: old_val (forgetting: should stay flat), new_heldout and new_train (acquisition: should drop).
- `plot_retention`: the retention matrix (lib/evaluation/retention.py) as a heat map, versions × sets, the
  colour the change against the version that learnt the set (blue: better, red: forgotten),
  each cell annotated with its bits per byte and the share of the night's gain kept.
- matplotlib with the Agg backend: no display, no GUI toolkit, works on a headless CPU box.

Trade-off: one static PNG instead of an interactive dashboard: it opens anywhere and can be
committed next to a README, at the cost of hovering for exact values (they are in lineage).
"""

from __future__ import annotations

# matplotlib is imported inside functions: importing this module must not cost its ~1.4 s
import json
from pathlib import Path
from typing import Mapping

import numpy as np


def read_losses(metrics_jsonl: str | Path) -> list[tuple[int, float]]:
    out = []
    path = Path(metrics_jsonl)
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append((int(rec["step"]), float(rec["loss"])))
    return out


def _moving_average(values: list[float], window: int = 10) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_story(losses: Mapping[str, str | Path], bpb: Mapping[str, tuple[float | None, float | None]],
               out_png: str | Path, *, labels: tuple[str, str] = ("before", "after"), title: str = "") -> Path:
    """`losses`: run label -> metrics.jsonl; `bpb`: dataset -> (before, after). Writes `out_png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_bpb) = plt.subplots(1, 2, figsize=(12, 4.5))
    offset = 0
    for label, path in losses.items():
        points = read_losses(path)
        if not points:
            continue
        steps = [offset + s for s, _ in points]
        values = [v for _, v in points]
        ax_loss.plot(steps, values, alpha=0.3)
        ax_loss.plot(steps, _moving_average(values), label=label)
        offset = steps[-1] + 1  # the night continues where pre-training stopped
    ax_loss.set_xlabel("optimizer step")
    ax_loss.set_ylabel("training loss (nats/token)")
    ax_loss.set_title("training loss")
    ax_loss.legend()

    names = list(bpb)
    width = 0.38
    for k, (label, color) in enumerate(zip(labels, ("#888888", "#1f77b4"))):
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        ys = [bpb[n][k] if bpb[n][k] is not None else 0.0 for n in names]
        bars = ax_bpb.bar(xs, ys, width, label=label, color=color)
        for bar, y in zip(bars, ys):
            ax_bpb.annotate(f"{y:.3f}", (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom", fontsize=8)
    for i, n in enumerate(names):
        before, after = bpb[n]
        if before and after is not None:
            ax_bpb.annotate(f"{(after - before) / before:+.1%}", (i, max(before, after) * 1.06), ha="center", fontsize=9)
    ax_bpb.set_xticks(range(len(names)), names)
    ax_bpb.set_ylabel("bits per byte (lower is better)")
    ax_bpb.set_title("old data (forgetting) vs new data (acquisition)")
    ax_bpb.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_retention(matrix, out_png: str | Path, *, title: str = "") -> Path:
    """A lib.evaluation.retention.RetentionMatrix as a heat map in `out_png`: rows are versions (oldest on
    top), columns the sets, the colour each cell's change against its reference on a scale
    centred at 0 (red: bits per byte rose, i.e. forgotten); a cell never measured is grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    rows, cols = list(matrix.versions), list(matrix.sets)
    change = np.full((max(len(rows), 1), max(len(cols), 1)), np.nan)
    for i, v in enumerate(rows):
        for j, s in enumerate(cols):
            c = matrix.cell(v, s)
            if c.change is not None:
                change[i, j] = c.change
    finite = np.abs(change[np.isfinite(change)])
    span = max(float(finite.max()) if finite.size else 0.0, 0.01)
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#dddddd")
    fig, ax = plt.subplots(figsize=(2.0 + 1.7 * len(cols), 1.2 + 0.6 * len(rows)))
    image = ax.imshow(np.ma.masked_invalid(change), cmap=cmap, norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
    for i, v in enumerate(rows):
        for j, s in enumerate(cols):
            c = matrix.cell(v, s)
            role = matrix.role(v, s)
            ref = matrix.references.get(s)
            if c.bpb is None:
                # before the night's parent a version never saw the set: no gap, nothing to measure
                learnt_at = rows.index(ref.learner) if ref is not None and ref.learner in rows else 0
                text = "" if s != "old_val" and i < learnt_at - 1 else "not measured"
            elif role:
                text = f"{c.bpb:.3f}\n{'learnt' if role == 'reference' and s != 'old_val' else role}"
            else:
                text = f"{c.bpb:.3f}\n{c.change:+.1%}" + (f", {c.kept:.0%} kept" if c.kept is not None else "")
            dark = np.isfinite(change[i, j]) and abs(change[i, j]) > 0.6 * span
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), [f"{v} ({matrix.status.get(v, '')})" for v in rows])
    ax.set_xlabel("eval set: the original corpus, then each night's held-out documents")
    ax.set_ylabel("version")
    fig.colorbar(image, ax=ax, label="bits per byte vs the version that learnt it", format="{x:+.0%}")
    ax.set_title(title or "retention: what each version still knows")
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
