"""Evaluation of a checkpoint: bits per byte on text, and probes scored before and after.

- Bits per byte (BPB) = Σ next-token loss in nats / (ln 2 · Σ UTF-8 bytes of the scored text).
  Dividing by bytes instead of tokens makes the number comparable across tokenizers, so a parent
  and a candidate (or two model families) are measured on the same footing.
- Texts are tokenized exactly as training tokenizes them (lib/data/tokenizer.py: the model's own
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
  fp32 on CPU; on CUDA in bf16 like serving (lib.serving.generate): bf16 and fp16-stored versions are
  loaded as bf16 (pure fp16 overflows where bf16 does not, and serving never runs fp16), fp32
  ones keep fp32 weights under bf16 autocast; the loss in fp32. Out of memory: the failed batch
  is released before the cache is emptied and the batch halved.
- `evaluate_pair` measures parent and candidate on the same sets (old_val: forgetting,
  new_heldout: generalisation, new_train: acquisition) and reports the relative change. With
  `cache_dir`, a result is kept per (weights digest, text digest, window, separator): the parent's
  old_val was measured the night it was the candidate, so each night scores old_val once.
  `on_progress(dataset, done, total)` is called after every batch (dataset "parent/old_val").
- Fact probes (lib/evaluation/fact_recall.py): with `fact_sets`, both sides answer tonight's
  (`facts:new`) and every kept night's (`facts:<vK>`) closed-book, cached like bits per byte; the
  per-document recall comes back in `PairEvaluation.doc_recall`.
- `score_probes` runs {prompt, expected} pairs: exact match of the greedy continuation and the
  log-probability of `expected` given `prompt`.

Trade-off: non-overlapping windows re-start from a bare separator every `max_len - 1` tokens,
which costs the first tokens of a window their context; on the tiny preset (256 positions) that
is under 1 window in 3 for stdlib-sized documents and raises BPB by a few percent for parent and
candidate alike, while a sliding window with half overlap would double the compute.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from lib.checkpoints.checkpoint import materialize, read_meta
from lib.data.corpus import replay_corpus_name
from lib.data.tokenizer import load_tokenizer
from lib.evaluation.eval_model import (  # noqa: F401 (bits_per_byte, eval_dtype: re-exported)
    LOGITS_BUDGET_BYTES, EvalModel, Progress, _is_oom, _materialize, _pick_device, bits_per_byte, eval_dtype,
)
from lib.evaluation.sets import OLD_VAL, PROBES, fact_sets, retention_sets, run_eval_sets
from lib.files import JsonLineError, json_lines, write_json
from lib.registry.lineage import Lineage
from lib.data.memory import FACTS_PREFIX
from lib.evaluation.fact_recall import cached_fact_scores, fact_metrics, night_facts, recall_by_document
from lib.evaluation.benchmarks import as_metrics, benchmark_pair, benchmark_table_rows

log = logging.getLogger(__name__)

CACHE_VERSION = 1              # bump when the numbers for the same inputs would change


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
    # side ("parent"/"candidate") -> fact set ("facts:new", "facts:v1") -> {doc_id: (probes, answered)}
    doc_recall: dict[str, dict[str, dict[str, tuple[int, int]]]] = field(default_factory=dict)
    fact_seconds: float = 0.0  # wall seconds spent asking fact probes (both sides, cache hits included)
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

        return benchmark_table_rows(self.benchmarks.parent, self.benchmarks.candidate)

    def to_markdown(self) -> str:
        lines = ["| dataset | metric | parent | candidate | change |", "|---|---|---|---|---|"]
        for r in self.rows():
            par = "" if r["parent"] is None else f"{r['parent']:.4f}"
            if r["dataset"].startswith(FACTS_PREFIX):   # shares of probes answered: a change in points, counts as they are
                share = r["metric"] in ("fact_accuracy", "fact_exact")
                fmt = (lambda v: f"{v:.1%}") if r["metric"] != "fact_n" else (lambda v: f"{v:.0f}")   # noqa: E731
                par = "" if r["parent"] is None else fmt(r["parent"])
                change = f"{(r['candidate'] - r['parent']) * 100:+.1f} points" if share and r["parent"] is not None else ""
                lines.append(f"| {r['dataset']} | {r['metric']} | {par} | {fmt(r['candidate'])} | {change} |")
                continue
            change = "" if r["relative_change"] is None else f"{r['relative_change']:+.2%}"
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
    fact_sets: dict[str, Sequence[Any]] | None = None,
    fact_max_new_tokens: int | None = None,
    fact_batch_size: int = 64,
) -> PairEvaluation:
    """BPB of parent and candidate on each named text set (empty sets are skipped), plus probes,
    plus fact recall on each named fact set (`fact_sets`: {"facts:new": [FactItem, ...], ...};
    an empty set is recorded as `fact_n` 0). One model is in memory at a time. The separator is
    resolved once, from the candidate (a version records the convention its lineage trains
    with), and used for both sides."""
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
        for name, items in (fact_sets or {}).items():
            t0 = time.perf_counter()
            scores = cached_fact_scores(em, items, cache, batch_size=fact_batch_size, max_new_tokens=fact_max_new_tokens,
                                        on_progress=on_progress, name=f"{side}/{name}") if items else None
            metrics[name] = fact_metrics(scores)
            result.sizes[name] = {"docs": len({it.doc_id for it in items})}
            if scores:
                result.doc_recall.setdefault(side, {})[name] = recall_by_document(items, scores)
            result.fact_seconds += time.perf_counter() - t0
        del em
    return result


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
        for side, asked in (("parent", parent), ("candidate", version)):
            for name, by_doc in table.doc_recall.get(side, {}).items():
                # tonight's facts belong to the night of `version` (the learner, if it is accepted)
                night = version if name == f"{FACTS_PREFIX}new" else name.removeprefix(FACTS_PREFIX)
                lineage.record_fact_recall(run_id, asked, night, by_doc, con)
    return table


def measure_root(workspace, cfg, version_dir, corpus: str) -> dict[str, Any]:
    """A root version's (v0's) bits per byte on old_val, into the eval cache: the first night reads
    it instead of scoring its parent again, and later checks of cumulative drift compare with it."""
    t0 = time.perf_counter()
    sets = run_eval_sets(workspace, corpus, None, cfg.eval.max_docs, cfg.eval.max_bytes)
    em = EvalModel.load(version_dir, max_len=eval_window(cfg), separator=cfg.tokenizer.document_separator)
    bpb = cached_bits_per_byte(em, sets[OLD_VAL], cfg.eval.batch_size, workspace.eval_cache, None, OLD_VAL)
    return {OLD_VAL: {"bpb": bpb}, "docs": len(sets[OLD_VAL]), "seconds": round(time.perf_counter() - t0, 3)}


def eval_budget_note(seconds: dict[str, float], max_share: float) -> str | None:
    """A sentence when the night's evaluation took more than `max_share` of its training time
    (`seconds`: stage -> wall seconds, with "train" and "evaluate"), naming what to lower."""
    train, evaluate = seconds.get("train"), seconds.get("evaluate")
    if not train or train < 1.0 or evaluate is None or evaluate <= max_share * train:
        return None
    return (f"evaluation took {evaluate:.0f} s, {evaluate / train:.0%} of the night's training ({train:.0f} s), over "
            f"eval.max_share {max_share:.0%}: lower eval.max_bytes (text per set), eval.memory_sets (earlier nights checked) "
            f"or eval.fact_max_items (fact probes per set)")


def night_fact_sets(workspace, eval_cfg, run_dir=None, lineage=None) -> dict[str, list]:
    """The fact sets a night asks: tonight's (`facts:new`, from `<run>/knowledge/facts.jsonl`;
    empty when the night's documents held no fact, absent when the run has no such file) and, with
    `lineage`, every kept night's (`facts:<vK>`, lib.data.memory.fact_sets); each capped at
    `eval.fact_max_items`, the kept nights at `eval.memory_sets` like the retention sets."""
    out: dict[str, list] = {}
    if run_dir is not None:
        tonight = night_facts(run_dir, eval_cfg.fact_max_items)
        if tonight is not None:
            out[f"{FACTS_PREFIX}new"] = tonight
    if lineage is not None:
        out.update(fact_sets(workspace, lineage, eval_cfg.memory_sets, eval_cfg.fact_max_items))
    return out


def evaluate_candidate(workspace, cfg, candidate_dir, parent_dir, run_dir=None, device: str | None = None,
                       on_progress: Progress | None = None, corpus: str | None = None, lineage=None) -> PairEvaluation:
    """The nightly evaluation: parent and candidate on the run's sets (`run_eval_sets`) and, with
    `lineage`, on every earlier night's retention set (lib.evaluation.sets.retention_sets), plus the root
    version's old_val for the cumulative rule (from the eval cache when it was measured before);
    with `cfg.eval` (max_docs, max_bytes, max_len, batch_size, memory_sets, probes), the replay
    corpus `corpus` (default `cfg.workspace.corpus`) and the workspace's eval cache."""
    corpus = corpus or replay_corpus_name(workspace, cfg)
    sets = run_eval_sets(workspace, corpus, run_dir, cfg.eval.max_docs, cfg.eval.max_bytes)
    if lineage is not None:
        sets.update(retention_sets(workspace, lineage, cfg.eval.memory_sets, cfg.eval.max_docs, cfg.eval.max_bytes))
    probes = read_probes(cfg.eval.probes) if cfg.eval.probes else None
    facts = night_fact_sets(workspace, cfg.eval, run_dir, lineage)
    result = evaluate_pair(parent_dir, candidate_dir, sets, probes=probes, batch_size=cfg.eval.batch_size,
                           max_len=eval_window(cfg), device=device, separator=cfg.tokenizer.document_separator,
                           on_progress=on_progress, cache_dir=workspace.eval_cache, fact_sets=facts,
                           fact_max_new_tokens=cfg.eval.fact_max_new_tokens, fact_batch_size=cfg.eval.fact_batch_size)
    if cfg.eval.benchmarks:  # lm-evaluation-harness tasks: recorded as bench:<task>, judged by the benchmarks rule

        result.benchmarks = benchmark_pair(parent_dir, candidate_dir, cfg.eval, workspace.root, device, workspace.eval_cache,
                                           workspace.benchmark_data)
        result.parent.update(as_metrics(result.benchmarks.parent))
        result.candidate.update(as_metrics(result.benchmarks.candidate))
    root = lineage.root_version() if lineage is not None else None
    if root is not None:
        root_dir = Path(lineage.get_version(root)["path"])
        if root_dir.resolve() not in (Path(parent_dir).resolve(), Path(candidate_dir).resolve()):
            _, token = load_tokenizer(_materialize(Path(candidate_dir))).separator(cfg.tokenizer.document_separator)
            em = EvalModel.load(root_dir, device=device, max_len=eval_window(cfg), separator=token)
            result.root = {OLD_VAL: {"bpb": cached_bits_per_byte(em, sets[OLD_VAL], cfg.eval.batch_size, workspace.eval_cache,
                                                                 on_progress, f"root/{OLD_VAL}")}}
            result.root_version = root
    return result
