"""The retention matrix shows facts (#24): a night whose bits per byte say "kept" while its facts
are forgotten. The figures follow the issue's measurement on the tiny preset: night 1's held-out
bits per byte 4.45 -> 1.93 -> 1.10 ("133% kept") while its facts went back to chance."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from lib.config import load_config
from lib.registry.lineage import Lineage
from lib.registry.promotion import gate_version, promote

runner = CliRunner()


def facts(acc: float, n: int = 24) -> dict[str, float]:
    return {"fact_accuracy": acc, "fact_n": n, "fact_chance": 1 / 24, "fact_exact": 0.0, "fact_mean_rank": 5.0}


@pytest.fixture()
def forgotten(workspace):
    """v0 -> v1 (learns night 1: 83% of its facts) -> v2 -> v3; by v3 night 1's facts are at
    chance. The gate here does not check facts (max_fact_forgetting 1.0), as before #24."""
    gate = load_config(preset="tiny", overrides=["gate.max_fact_forgetting=1.0", "gate.max_memory_forgetting=0.5"]).gate
    lin = Lineage(workspace.lineage_db)
    lin.start_run("boot", kind="bootstrap")
    lin.record_version("v0", workspace.checkpoint("v0"), run_id="boot", metrics={"v0": {"old_val": {"bpb": 2.30}}})
    promote(lin, "v0", "pre-trained", actor="bootstrap")
    nights = [
        ("v1", "v0", {"old_val": {"bpb": 2.30}, "new_heldout": {"bpb": 4.45}, "facts:new": facts(0.04)},
         {"old_val": {"bpb": 2.29}, "new_heldout": {"bpb": 1.93}, "facts:new": facts(0.83)}),
        ("v2", "v1", {"old_val": {"bpb": 2.29}, "new_heldout": {"bpb": 4.40}, "night:v1": {"bpb": 1.93}, "facts:new": facts(0.05),
                      "facts:v1": facts(0.83)},
         {"old_val": {"bpb": 2.28}, "new_heldout": {"bpb": 1.90}, "night:v1": {"bpb": 1.50}, "facts:new": facts(0.80),
          "facts:v1": facts(0.42)}),
        ("v3", "v2", {"old_val": {"bpb": 2.28}, "new_heldout": {"bpb": 4.30}, "night:v1": {"bpb": 1.50}, "night:v2": {"bpb": 1.90},
                      "facts:new": facts(0.04), "facts:v1": facts(0.42), "facts:v2": facts(0.80)},
         {"old_val": {"bpb": 2.28}, "new_heldout": {"bpb": 1.95}, "night:v1": {"bpb": 1.10}, "night:v2": {"bpb": 1.70},
          "facts:new": facts(0.79), "facts:v1": facts(0.08), "facts:v2": facts(0.75)}),
    ]
    for k, (version, parent, before, after) in enumerate(nights, 1):
        run_id = f"night-{k}"
        lin.start_run(run_id, parent=parent)
        metrics = {parent: before, version: after}
        if parent != "v0":
            metrics["v0"] = {"old_val": {"bpb": 2.30}}
        lin.record_version(version, workspace.checkpoint(version), parent=parent, run_id=run_id, metrics=metrics)
        assert gate_version(lin, gate, version)[1] == "accepted"
        lin.record_memory_night(version, run_id, workspace.memory / version, 40, 5, 7, {})
    return lin


def test_the_matrix_shows_a_forgotten_fact_set_beside_kept_bits_per_byte(workspace, forgotten):
    from lib.evaluation.retention import retention_matrix

    m = retention_matrix(forgotten)
    assert m.sets == ["old_val", "night:v1", "facts:v1", "night:v2", "facts:v2", "night:v3", "facts:v3"]
    ref = m.references["facts:v1"]
    assert (ref.learner, ref.run_id, ref.before, ref.after) == ("v1", "night-1", 0.04, 0.83)

    bpb, fact = m.cell("v3", "night:v1"), m.cell("v3", "facts:v1")
    assert bpb.kept == pytest.approx((4.45 - 1.10) / (4.45 - 1.93))  # 133%: bits per byte call it kept
    assert fact.accuracy == 0.08 and fact.change == pytest.approx(0.08 - 0.83)
    assert fact.kept == pytest.approx((0.08 - 0.04) / (0.83 - 0.04))  # 5%: the facts are gone
    assert m.facts_lost("v3", "night:v1") and not m.facts_lost("v2", "night:v2")

    row = m.table_rows()[-1]
    assert row["night:v1"] == "1.1000 (-43.01%, 133% kept, facts lost)"
    assert row["facts:v1"] == "8% (-75.0 pts, 5% kept)"
    assert row["facts:v2"] == "75% (-5.0 pts, 93% kept)" and row["night:v2"] == "1.7000 (-10.53%, 108% kept)"
    assert row["facts:v3"] == "79% (learnt)" and m.table_rows()[2]["facts:v3"] == "4% (before)"
    # the learner and its parent fall back to the learner's own run
    assert m.cell("v0", "facts:v1").measured_as == "facts:new" and m.text("v0", "facts:v1") == "4% (before)"
    assert m.cell("v0", "facts:v2").value is None  # never asked: a gap, not a guess
    assert "facts:vK: the share of night vK's fact probes answered closed-book" in m.legend()
    cells = m.to_dict()["cells"]["v3"]
    assert cells["facts:v1"] == {"accuracy": 0.08, "change": pytest.approx(-0.75), "kept": pytest.approx(0.0506, abs=1e-4),
                                 "measured_as": "facts:v1"}
    assert set(cells["night:v1"]) == {"bpb", "change", "kept", "measured_as"}


def test_the_gate_now_rejects_what_the_matrix_shows(workspace, forgotten):
    """The same figures under the default fact rule: night 3 is rejected, naming night 1."""
    gate = load_config(preset="tiny", overrides=["gate.max_memory_forgetting=0.5"]).gate
    decision, _ = gate_version(forgotten, gate, "v3", apply=False)
    rule = next(r for r in decision.rules if r.name == "fact_retention")
    assert not rule.passed and "the night of v1: 83.0% answered when learnt (4.0% before that night) -> 8.0% now (2 of 24)" in rule.reason


def test_cli_and_heat_map_show_the_facts(workspace, forgotten):
    import matplotlib.image

    result = runner.invoke(app, ["lineage", "retention", "--workspace", str(workspace.root), "--png", "retention.png"])
    assert result.exit_code == 0, result.output
    assert "facts:v1" in result.stdout and "8% (-75.0 pts, 5% kept)" in result.stdout and "facts lost" in result.stdout
    out = json.loads(runner.invoke(app, ["lineage", "retention", "--workspace", str(workspace.root), "--json"]).stdout)
    assert out["cells"]["v3"]["facts:v1"]["accuracy"] == 0.08
    image = matplotlib.image.imread(workspace.root / "retention.png")
    assert image.shape[1] > 1.5 * image.shape[0]  # two panels side by side
