"""RegressionGate rules: each one can pass and fail, and says what it measured."""

from __future__ import annotations

import pytest

from lib.config import GateConfig, load_config
from lib.evaluation.gate import GateDecision, RegressionGate


def metrics(old, new=None, heldout=None, em=None):
    m = {"old_val": {"bpb": old}}
    if new is not None:
        m["new_train"] = {"bpb": new}
    if heldout is not None:
        m["new_heldout"] = {"bpb": heldout}
    if em is not None:
        m["probes"] = {"exact_match": em}
    return m


PARENT = metrics(2.0, new=3.0, heldout=3.0)


def test_sensible_consolidation_passes():
    d = RegressionGate().decide(PARENT, metrics(1.99, new=2.0, heldout=2.5))
    assert d.passed
    assert [r.name for r in d.rules] == ["forgetting", "acquisition"]
    assert d.rules[0].measured == pytest.approx(-0.005)
    assert "fell 0.50%" in d.rules[0].reason


def test_forgetting_over_two_percent_is_rejected():
    d = RegressionGate().decide(PARENT, metrics(2.06, new=1.5, heldout=2.0))
    assert not d.passed
    rule = d.rules[0]
    assert (rule.name, rule.passed, rule.limit) == ("forgetting", False, 0.02)
    assert rule.measured == pytest.approx(0.03)
    assert "rose 3.00%" in rule.reason and "gate.max_forgetting" in rule.reason
    assert d.summary() == "rejected by forgetting"


def test_forgetting_exactly_at_limit_passes_and_limit_is_configurable():
    assert RegressionGate().decide(PARENT, metrics(2.04, heldout=2.9)).passed
    assert not RegressionGate(GateConfig(max_forgetting=0.01)).decide(PARENT, metrics(2.03, heldout=2.9)).passed


def test_acquisition_prefers_heldout_and_enforces_min_drop():
    gate = RegressionGate(GateConfig(min_acquisition=0.1))
    # Training data learned (-50%) but held-out only -5%: not enough generalisation.
    d = gate.decide(PARENT, metrics(2.0, new=1.5, heldout=2.85))
    assert not d.passed
    assert d.rules[1].measured == pytest.approx(-0.05)
    assert "new_heldout" in d.rules[1].reason and "not met" in d.rules[1].reason
    assert gate.decide(PARENT, metrics(2.0, new=1.5, heldout=2.6)).passed
    # No held-out slice: falls back to the trained new documents.
    p = metrics(2.0, new=3.0)
    assert gate.decide(p, metrics(2.0, new=2.0)).rules[1].reason.startswith("new-data (new_train)")
    # Default min_acquisition 0: new data must not get worse.
    assert not RegressionGate().decide(PARENT, metrics(2.0, heldout=3.01)).passed


def test_missing_measurements_fail_closed():
    d = RegressionGate().decide({}, metrics(2.0, heldout=1.0))
    assert not d.passed
    assert d.rules[0].measured is None and "not measured" in d.rules[0].reason
    d = RegressionGate().decide(metrics(2.0), metrics(2.0))
    assert not d.passed and d.rules[1].name == "acquisition" and not d.rules[1].passed


def test_probe_rule_only_when_probed():
    gate = RegressionGate(GateConfig(probe_tolerance=0.1))
    p = metrics(2.0, heldout=3.0, em=0.8)
    assert gate.decide(p, metrics(2.0, heldout=2.0, em=0.75)).passed
    d = gate.decide(p, metrics(2.0, heldout=2.0, em=0.6))
    assert not d.passed and d.rules[2].name == "probes"
    assert d.rules[2].measured == pytest.approx(0.2)
    assert not gate.decide(p, metrics(2.0, heldout=2.0)).passed  # probed before, not after


def test_decision_round_trips_and_renders_markdown():
    d = RegressionGate(load_config(preset="tiny").gate).decide(PARENT, metrics(2.5, heldout=2.0))
    assert GateDecision.from_dict(d.to_dict()) == d
    md = d.to_markdown()
    assert "REJECTED" in md and "| forgetting | +25.00% | +2.00% | FAIL |" in md
    assert "| acquisition | -33.33% |" in md
    # min_acquisition 0 is stored as the limit -0.0: shown as +0.00%, never "-0.00%" (seen in the UI)
    cfg = load_config(preset="tiny", overrides=["gate.min_acquisition=0"]).gate
    md = RegressionGate(cfg).decide(PARENT, metrics(2.0, heldout=2.0)).to_markdown()
    assert "-0.00%" not in md and "+0.00%" in md


def test_the_gate_artifact_keeps_every_reason_whole():
    """tasks.reporting.gate_markdown (the "gate-decision" artifact): the table holds only the
    numbers; each rule's full reason, however long, is its own line, verbatim."""
    from lib.evaluation.gate import RuleResult
    from tasks.reporting import gate_markdown

    parent = {**metrics(2.0, heldout=3.0, em=0.8), **{f"night:2026-11-{d:02d}": {"bpb": 2.5} for d in range(1, 21)}}
    candidate = {**metrics(2.1, heldout=2.9, em=0.5), **{f"night:2026-11-{d:02d}": {"bpb": 2.5 + d / 100} for d in range(1, 21)}}
    decision = RegressionGate(load_config(preset="tiny").gate).decide(parent, candidate, root=metrics(1.9))
    long = RuleResult("custom", 0.5, 0.1, False, "a reason of many clauses | with a pipe, " * 20 + "and its end")
    decision = GateDecision(False, [*decision.rules, long])
    assert {r.name for r in decision.rules} == {"forgetting", "acquisition", "retention", "cumulative", "probes", "custom"}
    md = gate_markdown(decision, "Regression gate on v3: rejected")
    lines = md.splitlines()
    assert lines[0] == "### Regression gate on v3: rejected"
    for r in decision.rules:
        assert f"- **{r.name}** ({'pass' if r.passed else 'FAIL'}): {r.reason}" in lines, r.name
        [row] = [line for line in lines if line.startswith(f"| {r.name} |")]
        assert row.count("|") == 5 and r.reason not in row  # four columns of numbers, no reason
    assert len(long.reason) > 800
