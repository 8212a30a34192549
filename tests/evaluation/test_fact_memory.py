"""Facts in the night's evaluation and in the long-term memory (#24): tonight's fact probes and
every kept night's asked of parent and candidate on a real tiny model, recorded in a real lineage
file (metrics and per-document recall), cached by weights digest; an accepted night's fact set
kept beside its held-out set, picked like the retention sets, left by a rolled-back night;
replay weighted towards documents whose facts slip."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lib.config import load_config
from lib.knowledge.facts import FactItem, fact_id, write_facts
from lib.registry.lineage import Lineage

CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Lima", "Perth"]


def person_facts(names: list[str], doc_prefix: str) -> list[FactItem]:
    """Hand-written fact items: one birth city per person, a document per person, the other
    cities as distractors."""
    out = []
    for i, name in enumerate(names):
        city = CITIES[i % len(CITIES)]
        out.append(FactItem(fact_id(name, "was born in", city), f"{doc_prefix}-{i}", name, "was born in", city, "proper",
                            f"{name} was born in", f"Question: In which city was {name} born?\nAnswer:",
                            tuple(c for c in CITIES if c != city)[:3]))
    return out


def _version(src, dst, digest: str, scale: float | None = None):
    """A version folder: a copy of the tiny model (one layer scaled: a different model), with a
    meta.json digest, what the eval cache is keyed by."""
    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, dst)
    if scale is not None:
        model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32)
        with torch.no_grad():
            model.model.layers[0].mlp.down_proj.weight.mul_(scale)
        model.save_pretrained(dst)
    (dst / "meta.json").write_text(json.dumps({"digest": digest}))
    return dst


def _run(ws, run_id: str, texts: list[str], facts: list[FactItem] | None):
    run = ws.run(run_id).ensure()
    ids = [f"{run_id}-{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "text": texts}), run.curated / "part-00000.parquet")
    (run.path / "heldout").mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": ids[:1], "text": texts[:1]}), run.path / "heldout" / "new.parquet")
    (run.path / "data.json").write_text(json.dumps({"sources": {"new": {"docs": len(texts) - 1, "heldout_cut": "7"}}}))
    if facts is not None:
        write_facts(run.path / "knowledge" / "facts.jsonl", facts)
    return run


@pytest.fixture()
def lineage_with_a_kept_night(workspace, tiny_hf_model):
    """v0 (root) -> v1 (accepted, its facts in the memory) -> v2 (tonight's candidate)."""
    from conftest import stdlib_texts
    from lib.data.memory import remember

    ws = workspace
    texts = [t[:600] for t in stdlib_texts(8)]
    val = ws.corpus_val("stdlib")
    val.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a", "b"], "text": texts[:2]}), val / "shard-00000.parquet")
    lin = Lineage(ws.lineage_db)
    for v, parent, run_id, scale in (("v0", None, "boot", None), ("v1", "v0", "night-1", 2.0), ("v2", "v1", "night-2", 3.0)):
        _version(tiny_hf_model, ws.checkpoint(v), f"digest-{v}", scale)
        lin.start_run(run_id)
        lin.record_version(v, ws.checkpoint(v), parent=parent, run_id=run_id, status="accepted" if v != "v2" else "candidate")
    night1 = person_facts(["Mara Quillon", "Teo Varga", "Ines Sohl", "Olaf Brenn"], "night-1")
    run1 = _run(ws, "night-1", texts[2:5], night1)
    remember(ws, lin, "v1", run1)
    night2 = person_facts(["Ada Kestrel", "Bo Lindqvist", "Cyra Moss"], "night-2")
    run2 = _run(ws, "night-2", texts[5:8], night2)
    return ws, lin, run2, night1, night2


def test_the_night_asks_its_facts_and_every_kept_nights_and_records_them(lineage_with_a_kept_night, monkeypatch):
    import lib.evaluation.fact_recall as facts_mod  # where the night calls score_facts from
    from lib.evaluation.evaluate import EvalModel, evaluate_and_record
    from lib.evaluation.facts import score_facts

    ws, lin, run2, night1, night2 = lineage_with_a_kept_night
    assert (ws.memory / "v1" / "facts.jsonl").read_text() == (ws.run("night-1").path / "knowledge" / "facts.jsonl").read_text()
    calls = []
    monkeypatch.setattr(facts_mod, "score_facts", lambda em, items, **kw: calls.append(em.path.name) or score_facts(em, items, **kw))
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "eval.fact_max_items=3"])

    table = evaluate_and_record(ws, cfg, lin, "v2", "v1", "night-2", run2)
    assert sorted(calls) == ["v1", "v1", "v2", "v2"]  # each side: tonight's set and night 1's
    # the figures are score_facts' on the capped sample (3 of night 1's 4 probes)
    from lib.evaluation.fact_recall import sample_facts

    kept = sample_facts(night1, 3)
    assert len(kept) == 3 and set(kept) < set(night1)
    expected = score_facts(EvalModel.load(ws.checkpoint("v2"), max_len=cfg.training.seq_len), kept)
    got = lin.metrics("v2", "night-2")["facts:v1"]
    assert got == {"fact_accuracy": expected.accuracy, "fact_exact": expected.exact_match, "fact_mean_rank": expected.mean_rank,
                   "fact_chance": pytest.approx(0.25), "fact_n": 3}
    assert set(lin.metrics("v1", "night-2")) >= {"facts:new", "facts:v1", "old_val", "night:v1"}
    assert lin.metrics("v2", "night-2")["facts:new"]["fact_n"] == 3

    # per-document recall, under the night the facts came from (tonight's: the candidate's own)
    rows = lin.fact_recall(version="v2")
    assert {(r["night"], r["doc_id"]) for r in rows} == {("v2", f"night-2-{i}") for i in range(3)} | \
        {("v1", it.doc_id) for it in kept}
    assert all(r["items"] == 1 and r["run_id"] == "night-2" for r in rows)
    by_item = {it.doc_id: row["correct"] for it, row in zip(kept, expected.items)}
    assert {r["doc_id"]: bool(r["correct"]) for r in rows if r["night"] == "v1"} == by_item
    assert table.doc_recall["parent"]["facts:new"].keys() == {f"night-2-{i}" for i in range(3)}

    # the same weights on the same probes: from the eval cache, nothing asked again
    calls.clear()
    evaluate_and_record(ws, cfg, lin, "v2", "v1", "night-2", run2)
    assert calls == [] and lin.metrics("v2", "night-2")["facts:v1"]["fact_accuracy"] == expected.accuracy


def test_a_night_without_facts_records_zero_and_one_without_the_file_records_none(lineage_with_a_kept_night):
    from lib.evaluation.evaluate import night_fact_sets

    ws, lin, run2, _, _ = lineage_with_a_kept_night
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}"])
    (run2.path / "knowledge" / "facts.jsonl").write_text("")
    assert night_fact_sets(ws, cfg.eval, run2, None) == {"facts:new": []}
    (run2.path / "knowledge" / "facts.jsonl").unlink()
    assert night_fact_sets(ws, cfg.eval, run2, None) == {}
    assert list(night_fact_sets(ws, cfg.eval, run2, lin)) == ["facts:v1"]

    (run2.path / "knowledge" / "facts.jsonl").write_text("")
    from lib.evaluation.evaluate import evaluate_and_record

    evaluate_and_record(ws, cfg, lin, "v2", "v1", "night-2", run2)
    assert lin.metrics("v2", "night-2")["facts:new"] == {"fact_n": 0}
    assert lin.metrics("v1", "night-2")["facts:new"] == {"fact_n": 0}


def test_fact_sets_are_picked_like_retention_sets_and_leave_with_a_rollback(workspace):
    from conftest import stdlib_texts
    from lib.data.memory import forget, remember
    from lib.evaluation.sets import fact_sets
    from lib.evaluation.sets import retention_sets

    ws, lin = workspace, Lineage(workspace.lineage_db)
    texts = [t[:400] for t in stdlib_texts(4)]
    ws.checkpoint("v0").mkdir(parents=True)
    lin.start_run("boot")
    lin.record_version("v0", ws.checkpoint("v0"), run_id="boot", status="accepted")
    for k in range(1, 8):
        ws.checkpoint(f"v{k}").mkdir(parents=True)
        lin.start_run(f"night-{k}")
        lin.record_version(f"v{k}", ws.checkpoint(f"v{k}"), parent=f"v{k - 1}", run_id=f"night-{k}", status="accepted")
        # night 3 held no fact: an empty set is kept, never checked
        items = [] if k == 3 else person_facts([f"Person {k}{j}" for j in range(5)], f"night-{k}")
        out = remember(ws, lin, f"v{k}", _run(ws, f"night-{k}", texts, items))
        assert out["facts"] and (ws.memory / f"v{k}" / "facts.jsonl").is_file()
    every = fact_sets(ws, lin, max_sets=None, max_items=None)
    assert list(every) == [f"facts:v{k}" for k in (1, 2, 4, 5, 6, 7)] and len(every["facts:v1"]) == 5
    picked = fact_sets(ws, lin, max_sets=4, max_items=2)
    # the newest half and an even spread of the older ones, as retention_sets picks nights
    assert list(picked) == ["facts:v1", "facts:v5", "facts:v6", "facts:v7"]
    assert list(retention_sets(ws, lin, 4, None, None)) == ["night:v1", "night:v5", "night:v6", "night:v7"]
    assert all(len(v) == 2 for v in picked.values()) and picked["facts:v1"] == fact_sets(ws, lin, 4, 2)["facts:v1"]

    assert forget(lin, "v7") and not (ws.memory / "v7").exists()
    assert "facts:v7" not in fact_sets(ws, lin, max_sets=None, max_items=None)


def test_replay_favours_documents_whose_facts_slip(workspace):
    from lib.data.memory import fact_slips, replay_weights

    ws, lin = workspace, Lineage(workspace.lineage_db)
    for v, parent, run_id in (("v0", None, "boot"), ("v1", "v0", "night-1"), ("v2", "v1", "night-2")):
        lin.start_run(run_id)
        lin.record_version(v, ws.checkpoint(v), parent=parent, run_id=run_id, status="accepted")
    lin.record_memory_night("v1", "night-1", ws.memory / "v1", 3, 1, 7, {"d-steady": 2, "d-slipping": 2, "d-nofacts": 2})
    lin.record_memory_night("v2", "night-2", ws.memory / "v2", 1, 1, 7, {"e-new": 1})
    # night 1: v1 learnt 4 facts of each document; tonight's champion v2 still answers all of
    # d-steady's and one of d-slipping's (measured the night v2 was the candidate)
    lin.record_fact_recall("night-1", "v1", "v1", {"d-steady": (4, 4), "d-slipping": (4, 4)})
    lin.record_fact_recall("night-1", "v0", "v1", {"d-steady": (4, 0), "d-slipping": (4, 0)})  # the parent: not a reference
    lin.record_fact_recall("night-2", "v2", "v1", {"d-steady": (4, 4), "d-slipping": (4, 1)})
    lin.record_fact_recall("night-2", "v2", "v2", {"e-new": (2, 2)})
    assert fact_slips(lin, "v2") == {("v1", "d-steady"): 0.0, ("v1", "d-slipping"): 0.75}

    plain = replay_weights(lin, recency=0.5, exposure_power=1.0)
    boosted = replay_weights(lin, recency=0.5, exposure_power=1.0, fact_boost=4.0, champion="v2")
    assert plain["d-steady"] == plain["d-slipping"] == pytest.approx(0.5 / 3)
    assert boosted["d-slipping"] == pytest.approx(0.5 / 3 * (1 + 4 * 0.75))  # 4x its neighbour
    assert boosted["d-steady"] == boosted["d-nofacts"] == plain["d-steady"] and boosted["e-new"] == plain["e-new"]
    # a later measurement replaces the earlier one: relearnt, no boost
    lin.start_run("re-eval")
    lin.record_fact_recall("re-eval", "v2", "v1", {"d-slipping": (4, 4)})
    assert replay_weights(lin, 0.5, 1.0, 4.0, "v2")["d-slipping"] == pytest.approx(0.5 / 3)


def test_rehearsal_favours_the_forms_of_documents_whose_facts_slip(workspace, tmp_path):
    """The memory's question forms (the rehearsal source) are weighted by the slip of the document
    each rehearses, through the one function the night's data preparation calls."""
    from lib.config import SourceConfig
    from lib.data.memory import REHEARSAL_SOURCE, rehearsal_weights
    from lib.data.sampling import memory_weights

    ws, lin = workspace, Lineage(workspace.lineage_db)
    for v, parent, run_id in (("v0", None, "boot"), ("v1", "v0", "night-1"), ("v2", "v1", "night-2")):
        lin.start_run(run_id)
        lin.record_version(v, ws.checkpoint(v), parent=parent, run_id=run_id, status="accepted")
    lin.set_alias("champion", "v2", actor="test")
    lin.record_fact_recall("night-1", "v1", "v1", {"d-steady": (4, 4), "d-slipping": (4, 4)})
    lin.record_fact_recall("night-2", "v2", "v1", {"d-steady": (4, 4), "d-slipping": (4, 2)})
    forms = tmp_path / "rehearsal"
    forms.mkdir()
    pq.write_table(pa.table({"id": ["f1", "f2", "f3", "f4"], "text": ["q"] * 4,
                             "augments": ["d-steady", "d-slipping", "d-slipping", "d-other"], "form": ["qa"] * 4}),
                   forms / "forms.parquet")
    assert rehearsal_weights(lin, 4.0, "v2", forms) == {"f1": 1.0, "f2": 3.0, "f3": 3.0, "f4": 1.0}
    assert set(rehearsal_weights(lin, 0.0, "v2", forms).values()) == {1.0}

    sources = [SourceConfig(name="corpus", path=tmp_path, weight=0.6, kind="corpus"),
               SourceConfig(name=REHEARSAL_SOURCE, path=forms, weight=0.1, kind="curated")]
    cfg = load_config(overrides=[f"workspace.root={ws.root}"])
    assert memory_weights(ws, cfg, sources) == {REHEARSAL_SOURCE: {"f1": 1.0, "f2": 3.0, "f3": 3.0, "f4": 1.0}}
    off = load_config(overrides=[f"workspace.root={ws.root}", "sampling.memory_fact_boost=0"])
    assert memory_weights(ws, off, sources) is None
