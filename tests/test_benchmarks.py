"""lm-evaluation-harness tasks in the gate (lib/evaluation/benchmarks.py), with a real lm-eval
install and local tasks written here: a multiple-choice task and a generation task (exact
match), scored on tiny random models of two architectures; a deliberately damaged candidate the
gate rejects with the task named; a task whose data is missing, refused in pre-flight."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from hf_models import build_tiny_model

import lm_eval  # noqa: E402,F401  (the benchmarks extra, which `make test` installs: fails loudly, never skips)

WORDS = ["apple", "river", "stone", "cloud", "ember", "maple", "orbit", "quartz", "salt", "tiger", "violet", "willow"]


def write_mc_task(folder: Path, n: int = 24, labels: list[int] | None = None, name: str = "tiny_mc") -> Path:
    """A 4-way multiple-choice task (dataset_path: json, data file beside the YAML, relative)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        choices = [WORDS[(i + k) % len(WORDS)] + f" {k}" for k in range(4)]
        rows.append({"question": f"Which word comes after {WORDS[i % len(WORDS)]} number {i}?", "choices": choices,
                     "label": 0 if labels is None else labels[i]})
    (folder / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    (folder / f"{name}.yaml").write_text(f"""task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {name}.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
""", encoding="utf-8")
    return folder / f"{name}.yaml"


def write_gen_task(folder: Path, answers: list[str] | None = None, n: int = 8, name: str = "tiny_gen") -> Path:
    """A generation task scored by exact match of the greedy continuation (until a newline)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"The secret word of {WORDS[i % len(WORDS)]} is", "answer": "x" if answers is None else answers[i]}
            for i in range(n)]
    (folder / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    (folder / f"{name}.yaml").write_text(f"""task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {name}.jsonl
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n", "."]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
""", encoding="utf-8")
    return folder / f"{name}.yaml"


def _eval_cfg(benchmarks, limit=None):
    from lib.config import EvalConfig

    return EvalConfig(benchmarks=[str(b) for b in benchmarks], benchmark_limit=limit, batch_size=8)


def _own_choices(model: Path, task_yaml: Path) -> list[int]:
    """The choice `model` scores highest on each question: labels that make it right everywhere."""
    from lib.evaluation.benchmarks import resolve_benchmarks, score_benchmarks

    samples: dict = {}
    score_benchmarks(model, resolve_benchmarks([str(task_yaml)]), samples=samples)
    by_doc = sorted(samples[resolve_benchmarks([str(task_yaml)])[0].name], key=lambda s: s["doc_id"])
    return [max(range(len(s["filtered_resps"])), key=lambda k: s["filtered_resps"][k][0]) for s in by_doc]


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """Calls without `data_cache` would let the datasets library write into ~/.cache: keep them in tmp."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bench-models")
    return {kind: build_tiny_model(kind, root / kind) for kind in ("llama", "gpt2")}


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_multiple_choice_and_generation_tasks_are_scored(tmp_path, models, kind):
    from lib.evaluation.benchmarks import as_metrics, read_metrics, resolve_benchmarks, score_benchmarks

    model = models[kind]
    mc, gen = write_mc_task(tmp_path / "tasks"), write_gen_task(tmp_path / "tasks")
    tasks = resolve_benchmarks([str(tmp_path / "tasks")])  # a folder: both of its task YAMLs
    assert [t.name for t in tasks] == ["tiny_gen", "tiny_mc"] and all(t.local for t in tasks)
    samples: dict = {}
    first = score_benchmarks(model, tasks, samples=samples)
    assert first["tiny_mc"].metric == "acc" and first["tiny_mc"].examples == 24
    assert first["tiny_gen"].metric == "exact_match" and first["tiny_gen"].examples == 8
    assert 0.0 <= first["tiny_mc"].value <= 1.0 and first["tiny_mc"].stderr is not None
    assert first["tiny_gen"].value == 0.0  # a random model does not write "x"

    # Gold answers = what this model itself prefers (its top choice, its greedy continuation):
    # rescored, both tasks must be 100% right. A scorer that did not really run the model could not.
    mc_docs = sorted(samples["tiny_mc"], key=lambda s: s["doc_id"])
    own = [max(range(4), key=lambda k: s["filtered_resps"][k][0]) for s in mc_docs]
    greedy = [s["filtered_resps"][0] for s in sorted(samples["tiny_gen"], key=lambda s: s["doc_id"])]
    assert any(g.strip() for g in greedy)
    write_mc_task(tmp_path / "tasks", labels=own)
    write_gen_task(tmp_path / "tasks", answers=greedy)
    second = score_benchmarks(model, resolve_benchmarks([str(mc), str(gen)]))
    assert second["tiny_mc"].value == 1.0 and second["tiny_gen"].value == 1.0
    # and shifted by one choice, it is right nowhere
    write_mc_task(tmp_path / "tasks", labels=[(k + 1) % 4 for k in own])
    assert score_benchmarks(model, resolve_benchmarks([str(mc)]))["tiny_mc"].value == 0.0

    # lineage's form and back
    metrics = as_metrics(second)
    assert metrics["bench:tiny_mc"]["acc"] == 1.0 and metrics["bench:tiny_mc"]["examples"] == 24.0
    assert read_metrics(metrics)["tiny_gen"].value == 1.0


def test_limit_and_cache_by_weights_digest(tmp_path, models):
    """The parent's scores come from the eval cache when its weights scored the task before."""
    from lib.evaluation.benchmarks import resolve_benchmarks, score_benchmarks

    model = tmp_path / "v1"
    shutil.copytree(models["llama"], model)
    (model / "meta.json").write_text(json.dumps({"digest": "ab" * 32}))
    tasks = resolve_benchmarks([str(write_mc_task(tmp_path / "tasks"))])
    a = score_benchmarks(model, tasks, limit=10, cache_dir=tmp_path / "cache", data_cache=tmp_path / "data")
    assert a["tiny_mc"].examples == 10 and not a["tiny_mc"].cached
    assert list((tmp_path / "data").rglob("*.arrow"))  # the datasets library's files: where it was told, not ~/.cache
    b = score_benchmarks(model, tasks, limit=10, cache_dir=tmp_path / "cache")
    assert b["tiny_mc"].cached and b["tiny_mc"].value == a["tiny_mc"].value and b["tiny_mc"].stderr == a["tiny_mc"].stderr
    assert not score_benchmarks(model, tasks, limit=12, cache_dir=tmp_path / "cache")["tiny_mc"].cached  # other settings
    # the task's data changed: scored again
    write_mc_task(tmp_path / "tasks", labels=[1] * 24)
    assert not score_benchmarks(model, tasks, limit=10, cache_dir=tmp_path / "cache")["tiny_mc"].cached


def test_damaged_candidate_is_rejected_with_the_task_named(tmp_path, models):
    import torch
    from transformers import AutoModelForCausalLM

    from lib.config import GateConfig
    from lib.evaluation.benchmarks import as_metrics, benchmark_pair
    from lib.evaluation.gate import RegressionGate
    from lib.tables import gate_table

    parent = models["llama"]
    task = write_mc_task(tmp_path / "tasks", n=30)
    write_mc_task(tmp_path / "tasks", n=30, labels=_own_choices(parent, task))  # the parent is right on every question

    damaged = tmp_path / "damaged"
    shutil.copytree(parent, damaged)
    model = AutoModelForCausalLM.from_pretrained(damaged)
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * p.std().clamp_min(0.02) * 3)
    model.save_pretrained(damaged)

    pair = benchmark_pair(parent, damaged, _eval_cfg([task]))
    # 30 examples: the parent 100% (standard error 0), the damaged one far enough below to be past its noise
    assert pair.parent["tiny_mc"].value == 1.0 and pair.candidate["tiny_mc"].value <= 0.8
    bpb = {"old_val": {"bpb": 2.0}, "new_heldout": {"bpb": 3.0}}
    gate = RegressionGate(GateConfig())
    decision = gate.decide({**bpb, **as_metrics(pair.parent)}, {**bpb, **as_metrics(pair.candidate)})
    rule = next(r for r in decision.rules if r.name == "benchmarks")
    assert not decision.passed and not rule.passed and decision.summary() == "rejected by benchmarks"
    assert "tiny_mc acc 100.0 -> " in rule.reason and "gate.max_benchmark_drop" in rule.reason
    assert f"{100 * pair.candidate['tiny_mc'].value:.1f} points on 30 examples" in rule.reason
    assert rule.measured == pytest.approx(1.0 - pair.candidate["tiny_mc"].value)
    assert "benchmarks" in gate_table(decision, "gate").markdown()

    # the same weights pass: no drop
    same = benchmark_pair(parent, parent, _eval_cfg([task]))
    ok = gate.decide({**bpb, **as_metrics(same.parent)}, {**bpb, **as_metrics(same.candidate)})
    assert ok.passed and next(r for r in ok.rules if r.name == "benchmarks").measured == 0.0


def test_rule_takes_the_standard_error_into_account():
    from lib.config import GateConfig
    from lib.evaluation.benchmarks import BenchmarkScore, as_metrics
    from lib.evaluation.gate import RegressionGate

    bpb = {"old_val": {"bpb": 2.0}, "new_heldout": {"bpb": 3.0}}

    def decide(p, c, se, **gate):
        par = as_metrics({"t": BenchmarkScore("t", "acc", p, se, 200)})
        cand = as_metrics({"t": BenchmarkScore("t", "acc", c, se, 200)})
        rules = RegressionGate(GateConfig(**gate)).decide({**bpb, **par}, {**bpb, **cand}).rules
        return next(r for r in rules if r.name == "benchmarks")

    # 50% on 200 examples: se 3.5 points each, 5.0 for the difference: allowed 2 + 2 × 5.0 = 12 points
    assert decide(0.50, 0.39, 0.0354).passed
    assert not decide(0.50, 0.37, 0.0354).passed
    assert not decide(0.50, 0.39, 0.0354, benchmark_stderr_factor=0).passed  # the bare drop: 11 > 2
    assert decide(0.50, 0.485, 0.0, max_benchmark_drop=2.0).passed and not decide(0.50, 0.475, 0.0).passed
    # a lower-is-better metric: a rise is the drop
    par = as_metrics({"p": BenchmarkScore("p", "word_perplexity", 10.0, 0.0, 50, higher_is_better=False)})
    cand = as_metrics({"p": BenchmarkScore("p", "word_perplexity", 10.5, 0.0, 50, higher_is_better=False)})
    rule = next(r for r in RegressionGate(GateConfig(max_benchmark_drop=10)).decide({**bpb, **par}, {**bpb, **cand}).rules
                if r.name == "benchmarks")
    assert not rule.passed and "drop +50.0" in rule.reason
    # scored for one side only: fails closed
    one = next(r for r in RegressionGate(GateConfig()).decide(bpb, {**bpb, **cand}).rules if r.name == "benchmarks")
    assert not one.passed and "only one of parent and candidate" in one.reason


def test_missing_data_is_refused_in_preflight(tmp_path, models, monkeypatch):
    from lib.config import load_config
    from lib.training.preflight import PreflightError, ensure_ready, preflight

    ws = tmp_path / "ws"
    task = write_mc_task(ws / "benchmarks")
    (ws / "benchmarks" / "tiny_mc.jsonl").unlink()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-datasets"))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws}", "eval.benchmarks=benchmarks/tiny_mc.yaml,arc_easy",
                                                "training.memory_check=false"])
    assert cfg.eval.benchmarks == ["benchmarks/tiny_mc.yaml", "arc_easy"]
    t0 = time.perf_counter()
    problems = preflight(cfg, models["llama"])
    assert time.perf_counter() - t0 < 30  # YAML files read, no data, no model (~0.5 s idle; 5.06 s once under a loaded first import)
    (problem,) = problems
    assert f"benchmark tiny_mc ({task})" in problem and "data file(s) missing" in problem and "tiny_mc.jsonl" in problem
    assert "benchmark arc_easy: its dataset allenai/ai2_arc/ARC-Easy is not in the Hugging Face cache" in problem
    with pytest.raises(PreflightError, match="tiny_mc"):
        ensure_ready(cfg, models["llama"])

    # a name lm-eval does not know, a path that does not exist
    cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"benchmarks": ["no_such_task_xyz"]})})
    assert "'no_such_task_xyz' is not a task of lm-eval" in preflight(cfg, models["llama"])[0]
    cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"benchmarks": ["benchmarks/none.yaml"]})})
    assert "no task file or folder at" in preflight(cfg, models["llama"])[0]
    # restored, it passes
    write_mc_task(ws / "benchmarks")
    cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"benchmarks": ["benchmarks"]})})
    assert preflight(cfg, models["llama"]) == []
