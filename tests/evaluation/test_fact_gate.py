"""The fact rules of the gate (#24): tonight's facts answered (fact_acquisition), every earlier
night's facts still answered against the version that learnt them (fact_retention), with their
messages; a night without facts; fail closed when a figure that should exist is missing; the
references read from a real lineage file by lib.registry.promotion.gate_version."""

from __future__ import annotations

import pytest

from lib.config import GateConfig
from lib.evaluation.gate import RegressionGate, rejected_for_forgetting
from lib.registry.lineage import Lineage
from lib.registry.promotion import fact_references, gate_version, promote

BPB_PARENT = {"old_val": {"bpb": 2.0}, "new_heldout": {"bpb": 3.0}}
BPB_CAND = {"old_val": {"bpb": 2.0}, "new_heldout": {"bpb": 2.5}}


def facts(acc: float | None, n: int = 20, chance: float = 0.25) -> dict[str, float]:
    if n == 0:
        return {"fact_n": 0}
    out = {"fact_n": n, "fact_chance": chance, "fact_exact": 0.0, "fact_mean_rank": 1.5}
    if acc is not None:
        out["fact_accuracy"] = acc
    return out


def rule(decision, name):
    return next(r for r in decision.rules if r.name == name)


def test_acquisition_of_tonights_facts_with_its_message():
    gate = RegressionGate(GateConfig(min_fact_recall=0.5))
    passed = gate.decide({**BPB_PARENT, "facts:new": facts(0.05)}, {**BPB_CAND, "facts:new": facts(0.85)})
    r = rule(passed, "fact_acquisition")
    assert passed.passed and r.passed and r.measured == pytest.approx(0.85)
    assert r.reason == ("tonight's facts: 17 of 20 answered closed-book (85.0%; 5.0% before the night, chance 25.0%); "
                        "required 50.0% (gate.min_fact_recall) met")

    failed = gate.decide({**BPB_PARENT, "facts:new": facts(0.05)}, {**BPB_CAND, "facts:new": facts(0.30)})
    r = rule(failed, "fact_acquisition")
    assert not failed.passed and not r.passed and failed.summary() == "rejected by fact_acquisition"
    assert "6 of 20 answered closed-book (30.0%" in r.reason and "required 50.0% (gate.min_fact_recall) not met" in r.reason
    assert rejected_for_forgetting(failed.to_dict()["rules"]) == []  # learning too little is not retried


def test_a_night_without_facts_passes_and_says_so_one_without_probes_has_no_rule():
    gate = RegressionGate(GateConfig(min_fact_recall=0.8))
    none = gate.decide({**BPB_PARENT, "facts:new": facts(None, n=0)}, {**BPB_CAND, "facts:new": facts(None, n=0)})
    r = rule(none, "fact_acquisition")
    assert none.passed and r.passed and r.measured is None
    assert r.reason.startswith("no facts were extracted from tonight's documents (facts:new holds 0 probes)")
    # no knowledge stage in the run: nothing recorded, no fact rule (like probes)
    assert [x.name for x in gate.decide(BPB_PARENT, BPB_CAND).rules] == ["forgetting", "acquisition"]


def test_fact_rules_fail_closed():
    gate = RegressionGate(GateConfig(min_fact_recall=0.0))
    one_side = gate.decide(BPB_PARENT, {**BPB_CAND, "facts:new": facts(0.9)})
    assert not one_side.passed and "not measured for both parent and candidate" in rule(one_side, "fact_acquisition").reason
    no_acc = gate.decide({**BPB_PARENT, "facts:new": facts(0.1)}, {**BPB_CAND, "facts:new": facts(None)})
    assert not no_acc.passed and rule(no_acc, "fact_acquisition").reason == \
        "facts:new fact_accuracy not measured for both parent and candidate"
    # an earlier night's set measured, but its reference (what it answered when learnt) missing
    missing = gate.decide(BPB_PARENT, {**BPB_CAND, "facts:v1": facts(0.7)}, fact_references={"facts:v1": None})
    r = rule(missing, "fact_retention")
    assert not missing.passed and r.reason == ("no reference for the facts of the night of v1: v1's own facts:new "
                                               "fact_accuracy is not in lineage")
    unmeasured = gate.decide(BPB_PARENT, {**BPB_CAND, "facts:v1": facts(None)}, fact_references={"facts:v1": 0.8})
    assert not unmeasured.passed and "(facts:v1) not measured for the candidate" in rule(unmeasured, "fact_retention").reason


def test_retention_of_earlier_nights_facts_names_the_night_and_its_figures():
    gate = RegressionGate(GateConfig(max_fact_forgetting=0.10))
    refs = {"facts:v1": 0.80, "facts:v2": 0.90, "facts:v10": 0.70}
    parent = {**BPB_PARENT, "facts:v1": facts(0.75), "facts:v2": facts(0.90), "facts:v10": facts(0.70)}
    kept = gate.decide(parent, {**BPB_CAND, "facts:v1": facts(0.75), "facts:v2": facts(0.85), "facts:v10": facts(0.65)},
                       fact_references=refs)
    r = rule(kept, "fact_retention")
    assert kept.passed and r.passed and r.measured == pytest.approx(0.05)
    assert "3 earlier night(s)' facts checked; the worst, the night of v1: 80.0% answered when learnt -> 75.0% now (15 of 20)" in r.reason
    assert "75.0% by the champion, -5.0 points; within the allowed fall of 10.0 points (gate.max_fact_forgetting)" in r.reason

    # night 1's facts are gone while its bits per byte look kept: rejected, a forgetting rule
    lost = gate.decide({**parent, "night:v1": {"bpb": 2.5}},
                       {**BPB_CAND, "night:v1": {"bpb": 2.4}, "facts:v1": facts(0.10), "facts:v2": facts(0.75),
                        "facts:v10": facts(0.70)}, fact_references=refs)
    r = rule(lost, "fact_retention")
    assert not lost.passed and rule(lost, "retention").passed and not r.passed
    assert r.reason == ("3 earlier night(s)' facts checked; the worst, the night of v1: 80.0% answered when learnt -> 10.0% now "
                        "(2 of 20), 75.0% by the champion, -70.0 points; over the allowed fall of 10.0 points "
                        "(gate.max_fact_forgetting); over it: v1, v2")
    assert rejected_for_forgetting(lost.to_dict()["rules"]) == ["fact_retention"]

    # a small set: one probe of 4 flipping is 25 points, and noise, not forgetting; two are not
    small = {"facts:v1": 1.0}
    one = gate.decide(parent, {**BPB_CAND, "facts:v1": facts(0.75, n=4)}, fact_references=small)
    assert rule(one, "fact_retention").passed and "-25.0 points; one probe only, rank noise: not counted against the allowed fall of 10.0 points" in \
        rule(one, "fact_retention").reason
    two = gate.decide(parent, {**BPB_CAND, "facts:v1": facts(0.50, n=4)}, fact_references=small)
    assert not rule(two, "fact_retention").passed

    # only what the night taught can be lost: 30% learnt from 20% before, 5% now counts 10 points
    noise = gate.decide(parent, {**BPB_CAND, "facts:v1": facts(0.05, n=40)}, fact_references={"facts:v1": (0.30, 0.20)})
    r = rule(noise, "fact_retention")
    assert r.passed and r.measured == pytest.approx(0.10)
    assert "30.0% answered when learnt (20.0% before that night) -> 5.0% now (2 of 40)" in r.reason
    lost = gate.decide(parent, {**BPB_CAND, "facts:v1": facts(0.05, n=40)}, fact_references={"facts:v1": (0.50, 0.20)})
    assert not rule(lost, "fact_retention").passed and rule(lost, "fact_retention").measured == pytest.approx(0.30)


def test_references_come_from_the_learners_own_night_in_lineage(workspace):
    """gate_version reads each earlier night's reference from lineage: vK's facts:new in vK's run,
    not the champion's figure; a version that fell below it is rejected with the night named."""
    lin = Lineage(workspace.lineage_db)
    lin.start_run("boot", kind="bootstrap")
    lin.record_version("v0", workspace.checkpoint("v0"), run_id="boot", metrics={"v0": {"old_val": {"bpb": 2.0}}})
    promote(lin, "v0", "pre-trained", actor="bootstrap")
    cfg = GateConfig(min_fact_recall=0.5, max_fact_forgetting=0.1)
    lin.start_run("night-1")
    lin.record_version("v1", workspace.checkpoint("v1"), parent="v0", run_id="night-1", metrics={
        "v0": {**BPB_PARENT, "facts:new": facts(0.05)}, "v1": {**BPB_CAND, "facts:new": facts(0.90)}})
    assert gate_version(lin, cfg, "v1")[1] == "accepted"
    lin.start_run("night-2")
    lin.record_version("v2", workspace.checkpoint("v2"), parent="v1", run_id="night-2", metrics={
        "v0": {"old_val": {"bpb": 2.0}},
        "v1": {**BPB_PARENT, "facts:new": facts(0.0), "facts:v1": facts(0.90)},
        "v2": {**BPB_CAND, "facts:new": facts(0.60), "facts:v1": facts(0.55)}})
    assert fact_references(lin, lin.metrics("v2", "night-2")) == {"facts:v1": (0.90, 0.05)}
    decision, status = gate_version(lin, cfg, "v2")
    assert status == "rejected" and decision.summary() == "rejected by fact_retention"
    assert "the night of v1: 90.0% answered when learnt (5.0% before that night) -> 55.0% now (11 of 20), 90.0% by the champion, " \
           "-35.0 points" in \
        rule(decision, "fact_retention").reason
    assert rule(decision, "fact_acquisition").passed


def test_the_eval_budget_note_names_the_caps():
    from lib.evaluation.evaluate import eval_budget_note

    assert eval_budget_note({"train": 400.0, "evaluate": 100.0}, 0.25) is None
    assert eval_budget_note({"evaluate": 100.0}, 0.25) is None  # nothing trained (a resumed night)
    note = eval_budget_note({"train": 400.0, "evaluate": 120.0}, 0.25)
    assert note == ("evaluation took 120 s, 30% of the night's training (400 s), over eval.max_share 25%: lower eval.max_bytes "
                    "(text per set), eval.memory_sets (earlier nights checked) or eval.fact_max_items (fact probes per set)")


def test_the_gate_table_shows_fact_rules_as_shares_and_points_not_as_relative_changes():
    """The UI's gate-decision table: a recall of 10.4% read "+10.42%" beside the rules that show
    a change, as if the night had gained 10 points (it answered as many facts as before)."""
    from lib.tables import gate_table

    gate = RegressionGate(GateConfig(min_fact_recall=0.0, max_fact_forgetting=0.1))
    decision = gate.decide({**BPB_PARENT, "facts:new": facts(0.104), "facts:v1": facts(0.6)},
                           {**BPB_CAND, "facts:new": facts(0.104), "facts:v1": facts(0.45)},
                           fact_references={"facts:v1": (0.8, 0.1)})
    rows = {row[0]: row[1:3] for row in gate_table(decision, "gate").rows}
    assert rows["fact_acquisition"] == ["10.4% answered", "at least 0.0%"]
    assert rows["fact_retention"] == ["-35.0 points", "-10.0 points"]
    assert rows["forgetting"] == ["+0.00%", "+2.00%"]
