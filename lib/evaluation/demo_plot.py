"""The demo's picture: what one night did to the model, in one PNG.

- Left: the training loss per step of each run (v0's pre-training, then the night's
  consolidation), read from `<run>/train/metrics.jsonl`, with a 10-step moving average.
- Right: bits per byte of the parent (before) and the new version (after) on each evaluation
  set: old_val (forgetting: should stay flat), new_heldout and new_train (acquisition: should drop).
- `plot_retention`: the retention matrix (lib/evaluation/retention.py) as heat maps, versions × sets: bits
  per byte on the left, each night's facts answered closed-book on the right; the colour is the
  forgetting against the version that learnt the set (red: forgotten, blue: better), each cell
  annotated with its figure and the share of the night's gain kept; the learner's and the
  "before" cells are references, drawn neutral, not as forgetting.
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

from lib.evaluation.retention import is_fact_set


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
    """A lib.evaluation.retention.RetentionMatrix as heat maps in `out_png`: rows are versions (oldest on
    top). Left, bits per byte on old_val and each night's held-out set, coloured by the change
    against the version that learnt the set (red: rose, forgotten); right, when nights gave fact
    probes, the share of each night's facts answered, coloured by the points lost against the
    version that learnt them (red: fell, forgotten). The learner's cell and the "before" cell
    (its parent, not yet taught) are references, drawn neutral; a gap is grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(matrix.versions)
    bpb_cols = [s for s in matrix.sets if not is_fact_set(s)]
    fact_cols = [s for s in matrix.sets if is_fact_set(s)]
    panels = [(bpb_cols, False)] + ([(fact_cols, True)] if fact_cols else [])
    widths = [max(len(c), 1) for c, _ in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.6 + 1.7 * max(sum(widths), 3) + 1.6 * (len(panels) - 1), 1.8 + 0.6 * len(rows)),
                             width_ratios=widths, squeeze=False, layout="constrained")
    for ax, (cols, facts) in zip(axes[0], panels):
        _retention_panel(fig, ax, matrix, rows, cols, facts)
    axes[0][0].set_ylabel("version")
    fig.suptitle(title or "retention: what each version still knows")
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _retention_panel(fig, ax, matrix, rows: list[str], cols: list[str], facts: bool) -> None:
    """One heat map: `cols` of the matrix, coloured by forgetting (positive: forgotten)."""
    import matplotlib
    from matplotlib.colors import TwoSlopeNorm

    # forgetting > 0 is red in both panels: a rise of bits per byte, a fall of accuracy
    forgetting = np.full((max(len(rows), 1), max(len(cols), 1)), np.nan)
    for i, v in enumerate(rows):
        for j, s in enumerate(cols):
            c = matrix.cell(v, s)
            if c.change is not None and not matrix.role(v, s):
                forgetting[i, j] = -c.change if facts else c.change
    finite = np.abs(forgetting[np.isfinite(forgetting)])
    span = max(float(finite.max()) if finite.size else 0.0, 0.05 if facts else 0.01)
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#e4e4e4")
    image = ax.imshow(np.ma.masked_invalid(forgetting), cmap=cmap, norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
    for i, v in enumerate(rows):
        for j, s in enumerate(cols):
            c = matrix.cell(v, s)
            role = matrix.role(v, s)
            ref = matrix.references.get(s)
            shown = None if c.value is None else (f"{c.accuracy:.0%}" if facts else f"{c.bpb:.3f}")
            if shown is None:
                # before the night's parent a version never saw the set: no gap, nothing to measure
                learnt_at = rows.index(ref.learner) if ref is not None and ref.learner in rows else 0
                text = "" if s != "old_val" and i < learnt_at - 1 else "not measured"
            elif role:
                text = f"{shown}\n{'learnt' if role == 'reference' and s != 'old_val' else role}"
                ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#f7f7f7", edgecolor="#bbbbbb"))
            else:
                change = f"{c.change * 100:+.0f} pts" if facts else f"{c.change:+.1%}"
                text = f"{shown}\n{change}" + (f", {c.kept:.0%} kept" if c.kept is not None else "")
                if not facts and s != "old_val" and matrix.facts_lost(v, s):
                    text += "\nfacts lost"
            dark = np.isfinite(forgetting[i, j]) and abs(forgetting[i, j]) > 0.6 * span
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), [f"{v} ({matrix.status.get(v, '')})" for v in rows])
    if facts:
        ax.set_title("facts answered closed-book")
        ax.set_xlabel("each night's fact probes")
        fig.colorbar(image, ax=ax, label="points lost vs the learner", format=matplotlib.ticker.FuncFormatter(lambda x, _: f"{x * 100:+.0f}"))
    else:
        ax.set_title("bits per byte (lower is better)")
        ax.set_xlabel("the original corpus, then each night's held-out documents")
        fig.colorbar(image, ax=ax, label="rise vs the learner", format="{x:+.0%}")
