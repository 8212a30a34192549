"""Evaluation of a checkpoint: bits per byte on text, and probes scored before and after.

- Bits per byte (BPB) = Σ next-token loss in nats / (ln 2 · Σ UTF-8 bytes of the scored text).
  Dividing by bytes instead of tokens makes the number comparable across tokenizers, so a parent
  and a candidate (or two model families) are measured on the same footing.
- Texts are tokenized exactly as training tokenizes them (lib/tokenizer.py: the model's own
  tokenizer, special-token strings read as text), cut into non-overlapping windows of at most
  `max_len - 1` tokens, and every window starts with the document separator training packs with
  (BOS for Llama-style models, `<|endoftext|>` for GPT-2/Qwen2): the separator is context, never
  scored; every text token is scored exactly once; special-token targets carry no loss.
- `max_len` defaults to the training length (`eval.max_len`, else `training.seq_len`), never more
  than the model's positions: a model with 8,192 positions is not evaluated on 8,192-token
  windows it was never consolidated on, at 32× the attention memory.
- Windows are sorted by length and batched: full windows without a mask (the fast causal kernel),
  the shorter tails right-padded and masked, so the result does not depend on the order of
  `texts`. The batch is capped so its fp32 logits stay under `LOGITS_BUDGET_BYTES` (a 150k
  vocabulary at 2,048 positions is 1.2 GB of logits per row) and halved on a CUDA out-of-memory.
  fp32 on CPU; on CUDA the model runs in its stored dtype (bf16) with the loss in fp32.
- `evaluate_pair` measures parent and candidate on the same sets (old_val: forgetting,
  new_heldout: generalisation, new_train: acquisition) and reports the relative change. With
  `cache_dir`, a result is kept per (weights digest, text digest, window, separator): the parent's
  old_val was measured the night it was the candidate, so each night scores old_val once.
  `on_progress(dataset, done, total)` is called after every batch (dataset "parent/old_val").
- `score_probes` runs {prompt, expected} pairs: exact match of the greedy continuation and the
  log-probability of `expected` given `prompt`.

Trade-off: non-overlapping windows re-start from a bare separator every `max_len - 1` tokens,
which costs the first tokens of a window their context; on the tiny preset (256 positions) that
is under 1 window in 3 for stdlib-sized documents and raises BPB by a few percent for parent and
candidate alike, while a sliding window with half overlap would double the compute.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from lib.files import JsonLineError, json_lines, write_json

log = logging.getLogger(__name__)

# Metric names as the gate and the lineage registry read them.
OLD_VAL, NEW_HELDOUT, NEW_TRAIN, PROBES = "old_val", "new_heldout", "new_train", "probes"
LOGITS_BUDGET_BYTES = 1 << 30  # fp32 logits of one eval batch
CACHE_VERSION = 1              # bump when the numbers for the same inputs would change

Progress = Callable[[str, int, int], None]


def _materialize(model_dir: str | Path) -> Path:
    """A folder `from_pretrained` loads: delta-stored versions are rebuilt by the checkpoint module."""
    from lib.checkpoint import materialize

    return Path(materialize(Path(model_dir)))


def _pick_device(device: str | None):
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower()


@dataclass
class EvalModel:
    """A causal LM and its tokenizer, loaded once and reused for several data sets."""

    model: Any
    tokenizer: Any          # lib.tokenizer.LoadedTokenizer: the encoding training used
    device: Any
    max_len: int
    separator_id: int
    special_ids: frozenset[int]
    path: Path
    digest: str | None = None  # sha256 of the weights (meta.json), the eval cache's key

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None, max_len: int | None = None,
             separator: str = "auto") -> "EvalModel":
        import torch
        from transformers import AutoModelForCausalLM

        from lib.checkpoint import read_meta
        from lib.tokenizer import load_tokenizer

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file() and not (model_dir / "meta.json").is_file():
            raise FileNotFoundError(f"{model_dir} is not a model folder: no config.json (nor a version's meta.json) in it")
        folder = _materialize(model_dir)
        dev = _pick_device(device)
        tokenizer = load_tokenizer(folder)
        sep_id, _ = tokenizer.separator(separator)
        # CPU: fp32 (bf16 matmuls are slow or missing there); CUDA: the stored dtype, no fp32 copy
        dtype = torch.float32 if dev.type == "cpu" else "auto"
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(dev)
        model.eval()
        positions = getattr(model.config, "max_position_embeddings", None) or 2048
        window = min(max_len, positions) if max_len else positions
        if window < 2:
            raise ValueError(f"max_len {max_len}: a window needs at least 2 positions (separator + one token)")
        return cls(model, tokenizer, dev, window, int(sep_id), frozenset(tokenizer.special_ids), model_dir,
                   read_meta(model_dir).get("digest"))

    @property
    def bos_id(self) -> int:  # the context token every window starts with (kept for older callers)
        return self.separator_id

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenizer.encode_batch(list(texts))

    def windows(self, texts: Sequence[str]) -> list[list[int]]:
        step = self.max_len - 1
        return [[self.separator_id] + ids[i : i + step] for ids in self.encode(texts) for i in range(0, len(ids), step)]

    def _autocast(self):
        import contextlib

        import torch

        if self.device.type == "cuda" and next(self.model.parameters()).dtype == torch.float32:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _batch_rows(self, batch_size: int) -> int:
        vocab = int(getattr(self.model.config, "vocab_size", 0) or self.tokenizer.vocab_size)
        per_row = 2 * self.max_len * vocab * 4  # the logits and their fp32 copy
        fits = max(1, LOGITS_BUDGET_BYTES // max(1, per_row))
        return max(1, min(batch_size, fits))

    def _nats(self, chunk: list[list[int]]) -> float:
        import torch
        import torch.nn.functional as F

        width = max(len(w) for w in chunk)
        full = all(len(w) == width for w in chunk)
        ids = torch.full((len(chunk), width), self.separator_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, w in enumerate(chunk):
            ids[r, : len(w)] = torch.tensor(w, dtype=torch.long)
            mask[r, : len(w)] = 1
        targets = ids[:, 1:].clone()
        targets[mask[:, 1:] == 0] = -100
        if self.special_ids:
            targets[torch.isin(targets, torch.tensor(sorted(self.special_ids), dtype=torch.long))] = -100
        ids, targets = ids.to(self.device), targets.to(self.device)
        with self._autocast():
            # equal-length rows need no mask: the causal kernel's fast path
            out = self.model(input_ids=ids, attention_mask=None if full else mask.to(self.device))
        logits = out.logits[:, :-1]
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum", ignore_index=-100)
        return float(loss)

    def sum_nats(self, windows: list[list[int]], batch_size: int, on_progress: Progress | None = None, name: str = "") -> float:
        """Σ loss in nats over every non-separator, non-special token of `windows` (each starts
        with the separator)."""
        import torch

        order = sorted(range(len(windows)), key=lambda i: (len(windows[i]), windows[i]))
        rows = self._batch_rows(batch_size)
        if rows < batch_size:
            log.info("eval batch of %s capped at %d rows: %d-token windows over a %d-id vocabulary", self.path.name, rows,
                     self.max_len, int(getattr(self.model.config, "vocab_size", 0)))
        total, done = 0.0, 0
        with torch.inference_mode():
            while done < len(order):
                chunk = [windows[i] for i in order[done : done + rows]]
                try:
                    total += self._nats(chunk)
                except (RuntimeError, MemoryError) as exc:
                    if not _is_oom(exc) or rows == 1:
                        raise
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                    rows = max(1, rows // 2)
                    log.warning("eval of %s ran out of memory; batch halved to %d rows", self.path.name, rows)
                    continue
                done += len(chunk)
                if on_progress is not None:
                    on_progress(name, done, len(order))
        return total

    def bits_per_byte(self, texts: Sequence[str], batch_size: int = 8, on_progress: Progress | None = None, name: str = "") -> float:
        texts = [t for t in texts if t]
        nbytes = sum(len(t.encode("utf-8")) for t in texts)
        if nbytes == 0:
            raise ValueError("bits_per_byte: no text to score (all texts empty)")
        return self.sum_nats(self.windows(texts), batch_size, on_progress, name) / (math.log(2) * nbytes)


def bits_per_byte(
    model_dir: str | Path, texts: Sequence[str], batch_size: int = 8, max_len: int | None = None, device: str | None = None,
    separator: str = "auto",
) -> float:
    """Bits per UTF-8 byte of `texts` under the model in `model_dir` (a HF folder or a version)."""
    return EvalModel.load(model_dir, device=device, max_len=max_len, separator=separator).bits_per_byte(texts, batch_size=batch_size)


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
    try:
        with open(path, "rb") as fh:
            for n, row in json_lines(fh):
                if not isinstance(row.get("prompt"), str) or not isinstance(row.get("expected"), str) or not row["expected"]:
                    raise ValueError(f'{path}:{n}: expected an object with string fields "prompt" and a non-empty "expected"')
                probes.append(Probe(row["prompt"], row["expected"]))
    except JsonLineError as exc:
        raise ValueError(f"{path}:{exc.line}: {exc.problem}") from None
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
            context = ([em.separator_id] + prompt_ids)[-(em.max_len - len(expected_ids)) :]
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
    root: dict[str, dict[str, float]] = field(default_factory=dict)  # the root version's old_val (cumulative drift)
    root_version: str | None = None
    benchmarks: Any = None  # lib.evaluation.benchmarks.BenchmarkPair when eval.benchmarks names tasks

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for dataset in self.candidate:
            if dataset.startswith("bench:"):
                continue  # benchmark scores: benchmark_rows()
            for metric, cand in self.candidate[dataset].items():
                par = self.parent.get(dataset, {}).get(metric)
                rel = (cand - par) / abs(par) if par not in (None, 0) else None
                out.append({"dataset": dataset, "metric": metric, "parent": par, "candidate": cand,
                            "relative_change": rel, **self.sizes.get(dataset, {})})
        return out

    def benchmark_rows(self) -> list[dict[str, Any]]:
        """One row per benchmark task (lib/evaluation/benchmarks.py), in points; empty without."""
        if self.benchmarks is None:
            return []
        from lib.evaluation.benchmarks import benchmark_table_rows

        return benchmark_table_rows(self.benchmarks.parent, self.benchmarks.candidate)

    def to_markdown(self) -> str:
        lines = ["| dataset | metric | parent | candidate | change |", "|---|---|---|---|---|"]
        for r in self.rows():
            change = "" if r["relative_change"] is None else f"{r['relative_change']:+.2%}"
            par = "" if r["parent"] is None else f"{r['parent']:.4f}"
            lines.append(f"| {r['dataset']} | {r['metric']} | {par} | {r['candidate']:.4f} | {change} |")
        for b in self.benchmark_rows():
            par = "" if b["parent"] is None else f"{b['parent']:.1f}"
            change = "" if b["change_points"] is None else f"{b['change_points']:+.1f} points"
            lines.append(f"| bench:{b['task']} | {b['metric']} | {par} | {b['candidate']:.1f} | {change} |")
        return "\n".join(lines)


def _set_digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()


def cached_bits_per_byte(em: EvalModel, texts: Sequence[str], batch_size: int, cache_dir: Path | None,
                on_progress: Progress | None, name: str) -> float:
    """BPB of `texts` under `em`, from `cache_dir` when the same weights scored the same texts
    with the same window and separator before (a JSON record, never pickle)."""
    path = None
    if cache_dir is not None and em.digest:
        key = json.dumps({"v": CACHE_VERSION, "texts": _set_digest(texts), "window": em.max_len, "sep": em.separator_id,
                          "tok": em.tokenizer.hash, "dtype": str(next(em.model.parameters()).dtype), "device": em.device.type},
                         sort_keys=True)
        path = Path(cache_dir) / em.digest[:32] / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
        if path.is_file():
            try:
                value = float(json.loads(path.read_text(encoding="utf-8"))["bpb"])
                if on_progress is not None:
                    on_progress(name, 1, 1)
                return value
            except (ValueError, KeyError, json.JSONDecodeError):
                pass  # a damaged record is measured again
    value = em.bits_per_byte(texts, batch_size=batch_size, on_progress=on_progress, name=name)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"bpb": value, "docs": len(texts), "model": str(em.path)})
    return value


def evaluate_pair(
    parent_dir: str | Path,
    candidate_dir: str | Path,
    datasets: dict[str, Sequence[str]],
    *,
    probes: Sequence[Probe] | None = None,
    batch_size: int = 8,
    max_len: int | None = None,
    device: str | None = None,
    separator: str = "auto",
    on_progress: Progress | None = None,
    cache_dir: str | Path | None = None,
) -> PairEvaluation:
    """BPB of parent and candidate on each named text set (empty sets are skipped), plus probes.
    One model is in memory at a time. The separator is resolved once, from the candidate (a
    version records the convention its lineage trains with), and used for both sides."""
    from lib.tokenizer import load_tokenizer

    result = PairEvaluation()
    for name, texts in datasets.items():
        if texts:
            result.sizes[name] = {"docs": len(texts), "bytes": sum(len(t.encode("utf-8")) for t in texts)}
    _, token = load_tokenizer(_materialize(Path(candidate_dir))).separator(separator)
    cache = Path(cache_dir) if cache_dir is not None else None
    for side, model_dir in (("parent", parent_dir), ("candidate", candidate_dir)):
        em = EvalModel.load(model_dir, device=device, max_len=max_len, separator=token)
        metrics = getattr(result, side)
        for name, texts in datasets.items():
            if texts:
                metrics[name] = {"bpb": cached_bits_per_byte(em, texts, batch_size, cache, on_progress, f"{side}/{name}")}
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


def _sample(rows: list[tuple[str, str]], max_docs: int | None, max_bytes: int | None = None) -> list[str]:
    """A fixed sample: documents in the order of a hash of their id (not the alphabet, which
    would favour one corner of a corpus), up to `max_docs` and `max_bytes`; whatever order the
    files were written in, the same documents come out."""
    import xxhash

    rows = sorted(rows, key=lambda r: (xxhash.xxh64_intdigest(r[0].encode("utf-8"), seed=0x65766C), r[0]))
    out, size = [], 0
    for _, text in rows:
        if max_docs is not None and len(out) >= max_docs:
            break
        n = len(text.encode("utf-8"))
        if max_bytes is not None and out and size + n > max_bytes:
            break
        out.append(text)
        size += n
    return out


def run_eval_sets(workspace, corpus: str, run_dir=None, max_docs: int | None = None,
                  max_bytes: int | None = None) -> dict[str, list[str]]:
    """The texts the gate compares on: old_val = `<ws>/corpora/<corpus>/val/*.parquet`;
    new_heldout = the run's held-out documents (`run_dir.prepared`, lib/prepared.py: kept out of
    the manifest by the data stage);
    new_train = `<run>/curated/*.parquet` minus the held-out ids. Each a fixed sample capped at
    `max_docs` documents and `max_bytes` bytes."""
    val_dir = workspace.corpus_val(corpus)
    val_files = list(val_dir.glob("*.parquet"))
    if not val_files:
        raise FileNotFoundError(f"no validation shards in {val_dir}: build the corpus first (workspace.corpus={corpus!r})")
    sets = {OLD_VAL: _sample(_parquet_texts(val_files), max_docs, max_bytes)}
    if run_dir is not None:
        heldout = _parquet_texts(run_dir.prepared.heldout_files())
        sets[NEW_HELDOUT] = _sample(heldout, max_docs, max_bytes)
        sets[NEW_TRAIN] = _sample(_parquet_texts(run_dir.curated.glob("*.parquet"), {i for i, _ in heldout}), max_docs, max_bytes)
    return sets


def eval_window(cfg) -> int:
    """`eval.max_len`, else the training length: what the model is consolidated on."""
    return cfg.eval.max_len or cfg.training.seq_len


@dataclass
class Comparison:
    """What an evaluation compares: `version` against `parent` on the data of run `run_id`
    (`run_dir`: its folder, None when the run left none)."""

    lineage: Any
    version: str
    parent: str
    recorded_parent: str | None
    run_id: str | None
    run_dir: Any


def comparison(workspace, version: str, parent: str | None = None, run: str | None = None) -> Comparison:
    """`version` (id or alias) against `parent` (default: its recorded parent) on the data of
    `run` (default: the version's own run): what `consolidate eval` and the evaluate flow measure."""
    from lib.lineage import Lineage

    if not workspace.lineage_db.exists():
        raise FileNotFoundError(f"no lineage registry at {workspace.lineage_db}: run the bootstrap first, or point at the "
                                f"workspace that has one (--workspace, workspace.root)")
    lin = Lineage(workspace.lineage_db)
    row = lin.get_version(lin.resolve_version(version))
    parent_id = lin.resolve_version(parent) if parent else row["parent"]
    if parent_id is None:
        raise ValueError(f"version {row['version']} has no parent (it was pre-trained): give the version to compare with (--parent, parent)")
    run_id = run or row["run_id"]
    run_dir = workspace.run(run_id) if run_id and workspace.run(run_id).path.exists() else None
    return Comparison(lin, row["version"], parent_id, row["parent"], run_id, run_dir)


def evaluate_and_record(workspace, cfg, lineage, version: str, parent: str, run_id: str | None, run_dir=None,
                        device: str | None = None, on_progress: Progress | None = None) -> PairEvaluation:
    """`evaluate_candidate` of `version` against `parent` on the data of `run_dir`, and every
    figure (parent, candidate, the root's old_val) recorded in lineage under `run_id` in one
    transaction: what the gate then reads. The nightly task and `consolidate eval` both call it."""
    cand = lineage.get_version(version)
    par = lineage.get_version(parent)
    table = evaluate_candidate(workspace, cfg, cand["path"], par["path"], run_dir, device=device, on_progress=on_progress,
                               lineage=lineage)
    with lineage.transaction() as con:
        lineage.record_metrics(parent, table.parent, run_id, con)
        lineage.record_metrics(version, table.candidate, run_id, con)
        if table.root_version:
            lineage.record_metrics(table.root_version, table.root, run_id, con)
    return table


def measure_root(workspace, cfg, version_dir, corpus: str) -> dict[str, Any]:
    """A root version's (v0's) bits per byte on old_val, into the eval cache: the first night reads
    it instead of scoring its parent again, and later checks of cumulative drift compare with it."""
    import time

    t0 = time.perf_counter()
    sets = run_eval_sets(workspace, corpus, None, cfg.eval.max_docs, cfg.eval.max_bytes)
    em = EvalModel.load(version_dir, max_len=eval_window(cfg), separator=cfg.tokenizer.document_separator)
    bpb = cached_bits_per_byte(em, sets[OLD_VAL], cfg.eval.batch_size, workspace.eval_cache, None, OLD_VAL)
    return {OLD_VAL: {"bpb": bpb}, "docs": len(sets[OLD_VAL]), "seconds": round(time.perf_counter() - t0, 3)}


def evaluate_candidate(workspace, cfg, candidate_dir, parent_dir, run_dir=None, device: str | None = None,
                       on_progress: Progress | None = None, corpus: str | None = None, lineage=None) -> PairEvaluation:
    """The nightly evaluation: parent and candidate on the run's sets (`run_eval_sets`) and, with
    `lineage`, on every earlier night's retention set (lib.memory.retention_sets), plus the root
    version's old_val for the cumulative rule (from the eval cache when it was measured before);
    with `cfg.eval` (max_docs, max_bytes, max_len, batch_size, memory_sets, probes), the replay
    corpus `corpus` (default `cfg.workspace.corpus`) and the workspace's eval cache."""
    from lib.corpus import replay_corpus_name

    corpus = corpus or replay_corpus_name(workspace, cfg)
    sets = run_eval_sets(workspace, corpus, run_dir, cfg.eval.max_docs, cfg.eval.max_bytes)
    if lineage is not None:
        from lib.memory import retention_sets

        sets.update(retention_sets(workspace, lineage, cfg.eval.memory_sets, cfg.eval.max_docs, cfg.eval.max_bytes))
    probes = read_probes(cfg.eval.probes) if cfg.eval.probes else None
    result = evaluate_pair(parent_dir, candidate_dir, sets, probes=probes, batch_size=cfg.eval.batch_size,
                           max_len=eval_window(cfg), device=device, separator=cfg.tokenizer.document_separator,
                           on_progress=on_progress, cache_dir=workspace.eval_cache)
    if cfg.eval.benchmarks:  # lm-evaluation-harness tasks: recorded as bench:<task>, judged by the benchmarks rule
        from lib.evaluation.benchmarks import as_metrics, benchmark_pair

        result.benchmarks = benchmark_pair(parent_dir, candidate_dir, cfg.eval, workspace.root, device, workspace.eval_cache,
                                           workspace.benchmark_data)
        result.parent.update(as_metrics(result.benchmarks.parent))
        result.candidate.update(as_metrics(result.benchmarks.candidate))
    root = lineage.root_version() if lineage is not None else None
    if root is not None:
        root_dir = Path(lineage.get_version(root)["path"])
        if root_dir.resolve() not in (Path(parent_dir).resolve(), Path(candidate_dir).resolve()):
            from lib.tokenizer import load_tokenizer

            _, token = load_tokenizer(_materialize(Path(candidate_dir))).separator(cfg.tokenizer.document_separator)
            em = EvalModel.load(root_dir, device=device, max_len=eval_window(cfg), separator=token)
            result.root = {OLD_VAL: {"bpb": cached_bits_per_byte(em, sets[OLD_VAL], cfg.eval.batch_size, workspace.eval_cache,
                                                                 on_progress, f"root/{OLD_VAL}")}}
            result.root_version = root
    return result
