"""Evaluation of a checkpoint: bits per byte on text, and probes scored before and after.

- Bits per byte (BPB) = Σ next-token loss in nats / (ln 2 · Σ UTF-8 bytes of the scored text).
  Dividing by bytes instead of tokens makes the number comparable across tokenizers, so a parent
  and a candidate (or two model families) are measured on the same footing.
- Each text is tokenized without special tokens (a literal "<|eos|>" in the text is scored as
  text), cut into non-overlapping windows of at most `max_len - 1` tokens, and every window gets
  a BOS prepended as context: the BOS is never scored, every text token is scored exactly once,
  and targets that are special tokens carry no loss.
- Windows are sorted by length and batched (right padding, masked), so the result does not depend
  on the order of `texts`; fp32 on CPU, bf16 autocast on CUDA with the loss in fp32.
- `evaluate_pair` measures parent and candidate on the same sets (old_val: forgetting,
  new_heldout: generalisation, new_train: acquisition) and reports the relative change;
  `score_probes` runs {prompt, expected} pairs: exact match of the greedy continuation and the
  log-probability of `expected` given `prompt`.

Trade-off: non-overlapping windows re-start from a bare BOS every `max_len - 1` tokens, which
costs the first tokens of a window their context; on the tiny preset (256 positions) that is
under 1 window in 3 for stdlib-sized documents and raises BPB by a few percent for parent and
candidate alike, while a sliding window with half overlap would double the compute.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

# Metric names as the gate and the lineage registry read them.
OLD_VAL, NEW_HELDOUT, NEW_TRAIN, PROBES = "old_val", "new_heldout", "new_train", "probes"


def _materialize(model_dir: str | Path) -> Path:
    """A folder `from_pretrained` loads: delta-stored versions are rebuilt by the checkpoint module."""
    from lib.checkpoint import materialize

    return Path(materialize(Path(model_dir)))


def _pick_device(device: str | None):
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@dataclass
class EvalModel:
    """A causal LM and its tokenizer, loaded once and reused for several data sets."""

    model: Any
    tokenizer: Any
    device: Any
    max_len: int
    bos_id: int
    special_ids: frozenset[int]
    path: Path

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None, max_len: int | None = None) -> "EvalModel":
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file() and not (model_dir / "meta.json").is_file():
            raise FileNotFoundError(f"{model_dir} is not a model folder: no config.json (nor a version's meta.json) in it")
        folder = _materialize(model_dir)
        dev = _pick_device(device)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(dev)
        model.eval()
        positions = getattr(model.config, "max_position_embeddings", None) or 2048
        window = min(max_len, positions) if max_len else positions
        if window < 2:
            raise ValueError(f"max_len {max_len}: a window needs at least 2 positions (BOS + one token)")
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if bos is None:
            raise ValueError(f"tokenizer in {folder} has neither a BOS nor an EOS token to use as the first context token")
        return cls(model, tokenizer, dev, window, int(bos), frozenset(int(i) for i in tokenizer.all_special_ids), model_dir)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        # split_special_tokens: text that spells a special token is scored as text, not as a control token.
        return self.tokenizer(list(texts), add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def _autocast(self):
        import contextlib

        import torch

        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def sum_nats(self, windows: list[list[int]], batch_size: int) -> float:
        """Σ loss in nats over every non-BOS, non-special token of `windows` (each starts with BOS)."""
        import torch
        import torch.nn.functional as F

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.bos_id
        order = sorted(range(len(windows)), key=lambda i: (len(windows[i]), windows[i]))
        total = 0.0
        special = torch.tensor(sorted(self.special_ids), dtype=torch.long)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = [windows[i] for i in order[start : start + batch_size]]
                width = max(len(w) for w in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for r, w in enumerate(chunk):
                    ids[r, : len(w)] = torch.tensor(w, dtype=torch.long)
                    mask[r, : len(w)] = 1
                targets = ids[:, 1:].clone()
                targets[mask[:, 1:] == 0] = -100
                targets[torch.isin(targets, special)] = -100
                ids, mask, targets = ids.to(self.device), mask.to(self.device), targets.to(self.device)
                with self._autocast():
                    logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1]
                loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum", ignore_index=-100)
                total += float(loss)
        return total

    def bits_per_byte(self, texts: Sequence[str], batch_size: int = 8) -> float:
        texts = [t for t in texts if t]
        nbytes = sum(len(t.encode("utf-8")) for t in texts)
        if nbytes == 0:
            raise ValueError("bits_per_byte: no text to score (all texts empty)")
        step = self.max_len - 1
        windows = [[self.bos_id] + ids[i : i + step] for ids in self.encode(texts) for i in range(0, len(ids), step)]
        return self.sum_nats(windows, batch_size) / (math.log(2) * nbytes)


def bits_per_byte(
    model_dir: str | Path, texts: Sequence[str], batch_size: int = 8, max_len: int | None = None, device: str | None = None
) -> float:
    """Bits per UTF-8 byte of `texts` under the model in `model_dir` (a HF folder or a version)."""
    return EvalModel.load(model_dir, device=device, max_len=max_len).bits_per_byte(texts, batch_size=batch_size)


# -- probes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    prompt: str
    expected: str


def read_probes(path: str | Path) -> list[Probe]:
    """JSONL, one {"prompt": ..., "expected": ...} per line; blank lines are skipped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"probe file {path} does not exist (eval.probes)")
    probes = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not isinstance(row.get("expected"), str) or not row["expected"]:
            raise ValueError(f'{path}:{n}: expected an object with string fields "prompt" and a non-empty "expected"')
        probes.append(Probe(row["prompt"], row["expected"]))
    if not probes:
        raise ValueError(f"probe file {path} holds no probes")
    return probes


def score_probes(model: EvalModel | str | Path, probes: Sequence[Probe], device: str | None = None) -> dict[str, Any]:
    """Exact-match rate of greedy continuations and mean log-probability (nats) of `expected`.

    The greedy continuation is as many tokens long as `expected` has; it matches when its text
    starts with `expected`. Per-probe details come back under "items"."""
    import torch

    em = model if isinstance(model, EvalModel) else EvalModel.load(model, device=device)
    items = []
    with torch.inference_mode():
        for probe in probes:
            prompt_ids, expected_ids = em.encode([probe.prompt, probe.expected])
            context = ([em.bos_id] + prompt_ids)[-(em.max_len - len(expected_ids)) :]
            ids = torch.tensor([context + expected_ids], dtype=torch.long, device=em.device)
            with em._autocast():
                logits = em.model(input_ids=ids).logits[0, len(context) - 1 : -1].float()
            logprob = float(torch.log_softmax(logits, -1).gather(1, ids[0, len(context) :, None]).sum())
            # Greedy decoding token by token (no sampling, no cache tricks): deterministic.
            generated: list[int] = []
            cur = list(context)
            for _ in range(len(expected_ids)):
                x = torch.tensor([cur[-em.max_len :]], dtype=torch.long, device=em.device)
                with em._autocast():
                    nxt = int(em.model(input_ids=x).logits[0, -1].float().argmax())
                generated.append(nxt)
                cur.append(nxt)
            text = em.tokenizer.decode(generated, skip_special_tokens=False)
            items.append({"prompt": probe.prompt, "expected": probe.expected, "greedy": text,
                          "exact_match": text.startswith(probe.expected), "logprob": logprob})
    n = len(items)
    return {
        "exact_match": sum(i["exact_match"] for i in items) / n,
        "logprob": sum(i["logprob"] for i in items) / n,
        "n": n,
        "items": items,
    }


# -- parent vs candidate ----------------------------------------------------------------------


@dataclass
class PairEvaluation:
    """Parent and candidate measured on the same data: {dataset: {metric: value}} for each."""

    parent: dict[str, dict[str, float]] = field(default_factory=dict)
    candidate: dict[str, dict[str, float]] = field(default_factory=dict)
    sizes: dict[str, dict[str, int]] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for dataset in self.candidate:
            for metric, cand in self.candidate[dataset].items():
                par = self.parent.get(dataset, {}).get(metric)
                rel = (cand - par) / abs(par) if par not in (None, 0) else None
                out.append({"dataset": dataset, "metric": metric, "parent": par, "candidate": cand,
                            "relative_change": rel, **self.sizes.get(dataset, {})})
        return out

    def to_markdown(self) -> str:
        lines = ["| dataset | metric | parent | candidate | change |", "|---|---|---|---|---|"]
        for r in self.rows():
            change = "" if r["relative_change"] is None else f"{r['relative_change']:+.2%}"
            par = "" if r["parent"] is None else f"{r['parent']:.4f}"
            lines.append(f"| {r['dataset']} | {r['metric']} | {par} | {r['candidate']:.4f} | {change} |")
        return "\n".join(lines)


def evaluate_pair(
    parent_dir: str | Path,
    candidate_dir: str | Path,
    datasets: dict[str, Sequence[str]],
    *,
    probes: Sequence[Probe] | None = None,
    batch_size: int = 8,
    max_len: int | None = None,
    device: str | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> PairEvaluation:
    """BPB of parent and candidate on each named text set (empty sets are skipped), plus probes.
    One model is in memory at a time. `on_progress(dataset, done, total)` is called as each
    set is scored (documents, parent and candidate counted)."""
    result = PairEvaluation()
    for name, texts in datasets.items():
        if texts:
            result.sizes[name] = {"docs": len(texts), "bytes": sum(len(t.encode("utf-8")) for t in texts)}
    for k, (side, model_dir) in enumerate((("parent", parent_dir), ("candidate", candidate_dir))):
        em = EvalModel.load(model_dir, device=device, max_len=max_len)
        metrics = getattr(result, side)
        for name, texts in datasets.items():
            if texts:
                metrics[name] = {"bpb": em.bits_per_byte(texts, batch_size=batch_size)}
                if on_progress is not None:
                    on_progress(name, (k + 1) * len(texts), 2 * len(texts))
        if probes:
            scored = score_probes(em, probes)
            metrics[PROBES] = {"exact_match": scored["exact_match"], "logprob": scored["logprob"]}
        del em
    return result


# -- the evaluation sets of one nightly run ----------------------------------------------------


def _parquet_texts(files: Iterable[Path], exclude_ids: set[str] | None = None) -> list[tuple[str, str]]:
    import pyarrow.parquet as pq

    out = []
    for f in sorted(files):
        table = pq.read_table(f)
        if "text" not in table.column_names:
            raise ValueError(f"{f}: no `text` column (columns: {', '.join(table.column_names)})")
        ids = table.column("id").to_pylist() if "id" in table.column_names else [f"{f.name}:{i}" for i in range(table.num_rows)]
        for doc_id, text in zip(ids, table.column("text").to_pylist()):
            if text and (exclude_ids is None or doc_id not in exclude_ids):
                out.append((str(doc_id), text))
    return out


def _cap(rows: list[tuple[str, str]], max_docs: int | None) -> list[str]:
    # Sorted by id before capping: the same documents whatever order the files were written in.
    rows = sorted(rows)
    return [t for _, t in (rows[:max_docs] if max_docs else rows)]


def run_eval_sets(workspace, corpus: str, run_dir=None, max_docs: int | None = None) -> dict[str, list[str]]:
    """The texts the gate compares on: old_val = `<ws>/corpora/<corpus>/val/*.parquet`;
    new_heldout = `<run>/heldout/*.parquet` (kept out of the manifest by the data stage);
    new_train = `<run>/curated/*.parquet` minus the held-out ids. Capped at `max_docs` each."""
    val_dir = workspace.corpus_val(corpus)
    val_files = list(val_dir.glob("*.parquet"))
    if not val_files:
        raise FileNotFoundError(f"no validation shards in {val_dir}: build the corpus first (workspace.corpus={corpus!r})")
    sets = {OLD_VAL: _cap(_parquet_texts(val_files), max_docs)}
    if run_dir is not None:
        heldout = _parquet_texts((run_dir.path / "heldout").glob("*.parquet"))
        sets[NEW_HELDOUT] = _cap(heldout, max_docs)
        sets[NEW_TRAIN] = _cap(_parquet_texts(run_dir.curated.glob("*.parquet"), {i for i, _ in heldout}), max_docs)
    return sets


def evaluate_candidate(workspace, cfg, candidate_dir, parent_dir, run_dir=None, device: str | None = None,
                       on_progress: Callable[[str, int, int], None] | None = None) -> PairEvaluation:
    """The nightly evaluation: parent and candidate on the run's sets (`run_eval_sets`), with
    `cfg.eval` (max_docs, batch_size, probes) and the corpus of `cfg.workspace.corpus`."""
    sets = run_eval_sets(workspace, cfg.workspace.corpus, run_dir, cfg.eval.max_docs)
    probes = read_probes(cfg.eval.probes) if cfg.eval.probes else None
    return evaluate_pair(parent_dir, candidate_dir, sets, probes=probes, batch_size=cfg.eval.batch_size, device=device,
                         on_progress=on_progress)
