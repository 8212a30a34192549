"""The long-term memory (#14): accepted nights replayed with recency and exposure weights, their
held-out sets kept out of training and checked every night, the retention and cumulative rules,
rollback, and self-generated replay cached per model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import stdlib_texts
from lib.config import load_config
from lib.registry.lineage import Lineage
from lib.workspace import Workspace


def _night(ws: Workspace, run_id: str, texts: list[str], heldout: list[int], exposures: dict[str, int], cut: int = 7) -> Path:
    """A finished night's run folder as the data stage leaves it: curated/, heldout/new.parquet,
    data.json (the new source's cut) and exposures.parquet."""
    run = ws.run(run_id).ensure()
    ids = [f"{run_id}-d{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "text": texts}), run.curated / "part-00000.parquet")
    (run.path / "heldout").mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": [ids[i] for i in heldout], "text": [texts[i] for i in heldout]}), run.path / "heldout" / "new.parquet")
    (run.path / "data.json").write_text(json.dumps({"sources": {"new": {"docs": len(texts) - len(heldout), "heldout_cut": str(cut)}}}))
    pq.write_table(pa.table({"source": ["new"] * len(exposures), "doc_id": list(exposures), "night": [""] * len(exposures),
                             "exposures": list(exposures.values())}), run.path / "exposures.parquet")
    return run.path


def _register(lin: Lineage, ws: Workspace, version: str, parent: str | None, run_id: str) -> None:
    ws.checkpoint(version).mkdir(parents=True, exist_ok=True)
    lin.start_run(run_id, kind="nightly")
    lin.record_version(version, ws.checkpoint(version), parent=parent, run_id=run_id, status="accepted")


def test_accepted_nights_join_the_memory_with_exposures_and_weights(workspace):
    from lib.data.memory import RETENTION_PREFIX, forget, remember, replay_weights
    from lib.evaluation.sets import retention_sets
    from lib.registry.promotion import rollback

    ws, lin = workspace, Lineage(workspace.lineage_db)
    _register(lin, ws, "v0", None, "adopt")
    texts = [t[:800] for t in stdlib_texts(12)]
    run1 = _night(ws, "night-1", texts[:6], heldout=[0], exposures={"night-1-d1": 3, "night-1-d2": 1, "night-1-d3": 0})
    _register(lin, ws, "v1", "v0", "night-1")
    out = remember(ws, lin, "v1", run1)
    assert out["heldout_docs"] == 1 and (ws.memory / "v1" / "train" / "part-00000.parquet").is_file()
    assert (ws.memory / "v1" / "train" / "part-00000.parquet").stat().st_ino == (run1 / "curated" / "part-00000.parquet").stat().st_ino
    assert json.loads((ws.memory / "v1" / "night.json").read_text())["heldout_cut"] == "7"
    assert remember(ws, lin, "v1", run1)["docs"] == 5  # idempotent: a replayed promotion adds nothing
    assert lin.memory_exposures() == {("v1", "night-1-d1"): 3, ("v1", "night-1-d2"): 1}

    # night 2 replayed two of night 1's documents and learnt its own
    run2 = _night(ws, "night-2", texts[6:12], heldout=[5], exposures={"night-2-d0": 2})
    replayed = pa.table({"source": ["memory", "memory"], "doc_id": ["night-1-d2", "night-1-d4"], "night": ["v1", "v1"],
                         "exposures": [2, 1]})
    pq.write_table(pa.concat_tables([pq.read_table(run2 / "exposures.parquet"), replayed]), run2 / "exposures.parquet")
    _register(lin, ws, "v2", "v1", "night-2")
    remember(ws, lin, "v2", run2)
    remember(ws, lin, "v2", run2)
    exposures = lin.memory_exposures()
    assert exposures[("v1", "night-1-d2")] == 3 and exposures[("v1", "night-1-d4")] == 1 and exposures[("v2", "night-2-d0")] == 2
    weights = replay_weights(lin, recency=0.5, exposure_power=1.0)
    assert weights["night-2-d0"] == pytest.approx(1 / 3)            # newest night, seen twice
    assert weights["night-1-d1"] == pytest.approx(0.5 / 4)          # one night older, seen three times
    assert weights["night-1-d4"] == pytest.approx(0.5 / 2)
    sets = retention_sets(ws, lin, max_sets=None, max_docs=None, max_bytes=None)
    assert list(sets) == [f"{RETENTION_PREFIX}v1", f"{RETENTION_PREFIX}v2"] and sets["night:v1"] == [texts[0]]

    # the newest half and an even spread of the older ones, once there are many
    for k in range(3, 8):
        _register(lin, ws, f"v{k}", f"v{k - 1}", f"night-{k}")
        remember(ws, lin, f"v{k}", _night(ws, f"night-{k}", texts[:4], heldout=[0], exposures={}))
    picked = list(retention_sets(ws, lin, max_sets=4, max_docs=None, max_bytes=None))
    assert picked == ["night:v1", "night:v5", "night:v6", "night:v7"]

    # rollback: the version's night leaves the memory (not replayed, not checked)
    lin.set_alias("champion", "v7", actor="gate")
    assert rollback(lin, "bad night")["left_memory"] is True
    assert "v7" not in [n["version"] for n in lin.memory_nights()] and not (ws.memory / "v7").exists()
    assert forget(lin, "v7") is False


def test_the_memory_source_replays_without_the_held_out_and_hits_the_token_cache(workspace, tmp_path):
    """A memory file is its night's curated file: tokenized with the night's cut it is the same
    token cache entry, its held-out documents never reach training, and heavier documents come first."""
    from lib.data.memory import remember
    from lib.data.sampling import default_sources, prepare_training_data
    from lib.data.token_cache import heldout_cut
    from lib.data.tokenizer import train_bpe

    ws, lin = workspace, Lineage(workspace.lineage_db)
    texts = [t[:1500] for t in stdlib_texts(40)]
    tok = train_bpe(texts, 400, tmp_path / "tok")
    ws.corpus_train("c").mkdir(parents=True)
    pq.write_table(pa.table({"id": [f"c{i}" for i in range(20)], "text": texts[:20]}), ws.corpus_train("c") / "s.parquet")
    cfg = load_config(overrides=[f"workspace.root={ws.root}", "workspace.corpus=c", "sampling.memory_ratio=0.2",
                                 "sampling.heldout_fraction=0.25", "sampling.fim_rate_code=0"])
    # night 1 as the flow runs it: new data tokenized into the cache, its held-out split written
    run1 = ws.run("night-1").ensure()
    ids = [f"n1-{i}" for i in range(16)]
    pq.write_table(pa.table({"id": ids, "text": texts[20:36]}), run1.curated / "part-00000.parquet")
    sources = default_sources(ws, cfg, run1.curated)
    assert [s.name for s in sources] == ["c", "new"]  # no memory yet
    d1 = prepare_training_data(sources, tok, run1.path, token_budget=4000, sampling=cfg.sampling, seq_len=64, workers=1,
                               cache_dir=ws.token_cache)
    held = set(pq.read_table(run1.path / "heldout" / "new.parquet").column("id").to_pylist())
    assert held and d1["sources"]["new"]["heldout_cut"] == str(heldout_cut(ids, 0.25, cfg.sampling.heldout_min_docs))
    _register(lin, ws, "v0", None, "adopt")
    _register(lin, ws, "v1", "v0", "night-1")
    remember(ws, lin, "v1", run1.path)
    # night 2: the memory comes in at memory_ratio, from the cache, without night 1's held-out
    run2 = ws.run("night-2").ensure()
    pq.write_table(pa.table({"id": [f"n2-{i}" for i in range(4)], "text": texts[36:40]}), run2.curated / "part-00000.parquet")
    sources = default_sources(ws, cfg, run2.curated)
    assert [(s.name, s.kind, round(s.weight, 3)) for s in sources] == [("c", "corpus", 0.7), ("new", "buffer", 0.1), ("memory", "memory", 0.2)]
    heavy = sorted(set(ids) - held)[:2]
    weights = {"memory": {d: (100.0 if d in heavy else 0.01) for d in ids}}
    d2 = prepare_training_data(sources, tok, run2.path, token_budget=2000, sampling=cfg.sampling, seq_len=64, workers=1,
                               cache_dir=ws.token_cache, doc_weights=weights)
    memory_files = d2["sources"]["memory"]["files"]
    assert all(f["cached"] for f in memory_files)  # tokenized once, by night 1
    manifest = pq.read_table(run2.path / "manifest.parquet").to_pylist()
    replayed = [r["doc_id"] for r in manifest if r["source"] == "memory"]
    assert replayed and not set(replayed) & held  # the retention set is never trained on
    assert set(replayed[:2]) <= set(heavy)         # the heaviest documents come first
    assert not (run2.path / "heldout" / "memory.parquet").exists()  # earlier held-out is not tonight's new_heldout
    exposures = pq.read_table(run2.path / "exposures.parquet").to_pylist()
    assert {r["night"] for r in exposures if r["source"] == "memory"} == {"v1"}
    assert sum(r["exposures"] for r in exposures if r["source"] == "memory") == len({(r["doc_id"], r["epoch"]) for r in manifest if r["source"] == "memory"})


def test_retention_and_cumulative_rules_name_the_night_and_the_figure():
    from lib.config import GateConfig
    from lib.evaluation.gate import RegressionGate

    gate = RegressionGate(GateConfig(max_memory_forgetting=0.02, max_cumulative_forgetting=0.03))
    parent = {"old_val": {"bpb": 2.0}, "new_heldout": {"bpb": 3.0}, "night:v1": {"bpb": 2.5}, "night:v2": {"bpb": 2.2}}
    good = {"old_val": {"bpb": 2.01}, "new_heldout": {"bpb": 2.9}, "night:v1": {"bpb": 2.52}, "night:v2": {"bpb": 2.2}}
    d = gate.decide(parent, good, root={"old_val": {"bpb": 1.99}})
    assert d.passed and [r.name for r in d.rules] == ["forgetting", "acquisition", "retention", "cumulative"]
    bad = {**good, "night:v1": {"bpb": 2.6}}
    d = gate.decide(parent, bad, root={"old_val": {"bpb": 1.99}})
    rule = next(r for r in d.rules if r.name == "retention")
    assert not d.passed and d.summary() == "rejected by retention"
    assert "the night of v1: 2.5000 -> 2.6000 (+4.00%)" in rule.reason and "mean change +2.00%" in rule.reason
    drift = gate.decide(parent, good, root={"old_val": {"bpb": 1.9}})
    rule = next(r for r in drift.rules if r.name == "cumulative")
    assert not drift.passed and rule.measured == pytest.approx(2.01 / 1.9 - 1) and "since the root version" in rule.reason
    # a night checked for only one side fails closed; without earlier nights the rule is absent
    assert not gate.decide(parent, {**good, "night:v3": {"bpb": 1.0}}).passed
    assert "retention" not in [r.name for r in gate.decide({"old_val": {"bpb": 2}}, {"old_val": {"bpb": 2}}).rules]


def test_self_generated_replay_is_cached_recorded_and_reused(tmp_path):
    from hf_models import build_tiny_model
    from lib.registry.adopt import adopt
    from lib.data.selfreplay import generate_replay, parse_generate

    assert parse_generate("generate:2M") == 2_000_000 and parse_generate("generate:1500") == 1500
    assert parse_generate("corpus/") is None
    with pytest.raises(ValueError, match="generate:N_TOKENS"):
        parse_generate("generate:lots")
    model = build_tiny_model("gpt2", tmp_path / "model")
    ws = Workspace(tmp_path / "ws")
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "training.seq_len=64", "eval.max_docs=4"])
    out = adopt(ws, cfg, model, ["generate:3000"], original_lr_value=3e-4, warm=False)
    lin = Lineage(ws.lineage_db)
    corpus = lin.corpus("replay")
    assert corpus["kind"] == "generated" and corpus["info"]["generation"]["model_digest"] == out["model"]["digest"]
    assert corpus["info"]["produced_tokens"] >= 3000 and corpus["info"]["val_docs"] > 0
    train = pq.read_table(ws.corpus_train("replay")).column("text").to_pylist()
    val = pq.read_table(ws.corpus_val("replay")).column("text").to_pylist()
    assert train and val and all(isinstance(t, str) and t.strip() for t in train + val)
    stamp = (ws.corpus("replay") / "corpus.json").stat().st_mtime_ns
    again = generate_replay(ws, ws.checkpoint("v0"), "replay", 3000, max_len=64, seed=cfg.sampling.seed)
    assert again["reused"] is True and (ws.corpus("replay") / "corpus.json").stat().st_mtime_ns == stamp
    other = generate_replay(ws, ws.checkpoint("v0"), "replay", 3000, max_len=64, seed=cfg.sampling.seed + 1)
    assert other["reused"] is False  # other parameters: sampled again
    # the nights replay it: the default mix's corpus is the one recorded with v0
    from lib.data.sampling import default_sources

    assert default_sources(ws, cfg, tmp_path)[0].path == ws.corpus_train("replay")
    shutil.rmtree(ws.root)
