"""The regression gate: may a candidate checkpoint replace its parent as champion?

- Inputs are the parent's and the candidate's metrics measured on the same data, as
  {dataset: {metric: value}} (what `lib.evaluation.evaluate.evaluate_pair` returns and lineage stores).
- forgetting: relative rise of bits per byte on the original validation split (`old_val`) must be
  at most `gate.max_forgetting` (a rise of more than 2% is taken as real forgetting, not noise).
- acquisition: relative drop of bits per byte on tonight's new data must be at least
  `gate.min_acquisition`; measured on `new_heldout` (documents never trained on, so learning that
  generalises) and, when no held-out slice exists, on `new_train`.
- retention: bits per byte on every earlier accepted night's held-out set (`night:<version>`,
  lib/data/memory.py) may rise by at most `gate.max_memory_forgetting` over the champion; the reason
  names the worst night and its figure, and reports the mean over all of them.
- cumulative: old_val bits per byte of the candidate may exceed the root version's (v0) by at most
  `gate.max_cumulative_forgetting`: a +0.3% a night passes the per-night rule and adds up unseen.
- probes: when both sides were probed, the exact-match rate may drop by at most
  `gate.probe_tolerance`.
- fact_acquisition: the candidate answers at least `gate.min_fact_recall` of tonight's fact
  probes closed-book (`facts:new` fact_accuracy: the answer ranked first among its distractors,
  asked in a phrasing the night did not train on). A night whose documents held no fact
  (`fact_n` 0) passes and says so; a night evaluated without fact probes at all (no
  `knowledge/facts.jsonl` in its run) has no such rule.
- fact_retention: on every earlier night's facts (`facts:<vK>`), the candidate's accuracy may
  fall at most `gate.max_fact_forgetting` (absolute points) below what vK answered the night it
  learnt them (vK's `facts:new` in vK's run, `fact_references`); bits per byte can call a night
  "kept" while its facts are gone (issue #24), so this is checked apart from `retention`. Only
  what the night taught can be lost: the fall counted is at most its gain (learnt − its parent's
  level that night), so noise around chance never rejects; nor does a fall of a single probe (a
  set of 5 probes would otherwise fail at 20 points).
- benchmarks: each lm-evaluation-harness task's main metric may fall at most
  `gate.max_benchmark_drop` points plus `gate.benchmark_stderr_factor` standard errors of the
  difference (lib/evaluation/benchmarks.py); the reason names the task, both scores and the limit.
- A rule whose inputs are missing fails (fail closed): a gate that cannot measure must not promote.

Trade-off: relative thresholds on one scalar per data set are coarse (BPB
misses forgetting of single facts), but they separate the cases that matter by a wide margin:
no replay at lr×0.3 forgets +32.6% on old data vs −0.7% with 10% new data (shared/NOTES.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lib.config import GateConfig
from lib.data.memory import FACTS_PREFIX, RETENTION_PREFIX
from lib.tables import gate_table
from lib.evaluation.benchmarks import benchmark_rule
from lib.evaluation.rules import _EPS, RuleResult

Metrics = dict[str, dict[str, float]]


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    rules: list[RuleResult] = field(default_factory=list)

    def summary(self) -> str:
        """One line: which rules passed, or which rejected the candidate."""
        failed = [r.name for r in self.rules if not r.passed]
        return "passed: " + ", ".join(r.name for r in self.rules) if self.passed else "rejected by " + ", ".join(failed)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "rules": [asdict(r) for r in self.rules]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GateDecision":
        return cls(bool(data["passed"]), [RuleResult(**r) for r in data.get("rules", [])])

    def to_markdown(self, title: str = "Regression gate") -> str:
        return gate_table(self, f"{title}: {'PASSED' if self.passed else 'REJECTED'}").markdown()


def _night_order(dataset: str) -> tuple[int, str]:
    """facts:v2 before facts:v10."""
    tail = dataset.rsplit(":", 1)[-1]
    return (int(tail[1:]), dataset) if tail[:1] == "v" and tail[1:].isdigit() else (1 << 62, dataset)


def _get(metrics: Metrics, dataset: str, metric: str) -> float | None:
    value = (metrics or {}).get(dataset, {}).get(metric)
    return None if value is None else float(value)


def relative_change(parent: float, candidate: float) -> float:
    return (candidate - parent) / abs(parent)


class RegressionGate:
    """`RegressionGate(cfg.gate).decide(parent_metrics, candidate_metrics) -> GateDecision`."""

    def __init__(self, config: GateConfig | None = None):
        self.config = config or GateConfig()

    def decide(self, parent: Metrics, candidate: Metrics, root: Metrics | None = None,
               fact_references: dict[str, Any] | None = None) -> GateDecision:
        """`root`: the root version's metrics (its old_val), for the cumulative rule; none (or a
        candidate whose parent is the root) skips it. `fact_references`: {"facts:<vK>": the
        fact accuracy vK reached on its own facts the night it learnt them, or (that, its
        parent's on them that night)}, for fact_retention (lib.registry.promotion.fact_references)."""
        rules = [self._forgetting(parent, candidate), self._acquisition(parent, candidate)]
        for optional in (self._retention(parent, candidate), self._cumulative(root, candidate), self._probes(parent, candidate),
                         self._fact_acquisition(parent, candidate), self._fact_retention(parent, candidate, fact_references or {})):
            if optional is not None:
                rules.append(optional)
        benchmarks = self._benchmarks(parent, candidate)
        if benchmarks is not None:
            rules.append(benchmarks)
        return GateDecision(all(r.passed for r in rules), rules)

    def _fact_acquisition(self, parent: Metrics, candidate: Metrics) -> RuleResult | None:
        need = self.config.min_fact_recall
        tonight = f"{FACTS_PREFIX}new"
        if tonight not in parent and tonight not in candidate:
            return None  # evaluated without fact probes (no knowledge stage in the run)
        name = "fact_acquisition"
        n = _get(candidate, tonight, "fact_n")
        if tonight not in parent or n is None:
            return RuleResult(name, None, need, False, "tonight's facts (facts:new) not measured for both parent and candidate")
        if n == 0:
            return RuleResult(name, None, need, True, "no facts were extracted from tonight's documents (facts:new holds 0 probes): "
                                                      f"nothing to require of gate.min_fact_recall ({need:.0%})")
        acc, before, chance = (_get(candidate, tonight, "fact_accuracy"), _get(parent, tonight, "fact_accuracy"),
                               _get(candidate, tonight, "fact_chance"))
        if acc is None or before is None:
            return RuleResult(name, None, need, False, "facts:new fact_accuracy not measured for both parent and candidate")
        ok = acc >= need - _EPS
        reason = (f"tonight's facts: {round(acc * n)} of {int(n)} answered closed-book ({acc:.1%}; {before:.1%} before the night"
                  + (f", chance {chance:.1%}" if chance is not None else "")
                  + f"); required {need:.1%} (gate.min_fact_recall) {'met' if ok else 'not met'}")
        return RuleResult(name, acc, need, ok, reason)

    def _fact_retention(self, parent: Metrics, candidate: Metrics, references: dict[str, Any]) -> RuleResult | None:
        limit = self.config.max_fact_forgetting
        name = "fact_retention"
        sets = sorted((d for d in candidate if d.startswith(FACTS_PREFIX) and d != f"{FACTS_PREFIX}new"), key=_night_order)
        if not sets:
            return None  # no earlier night's facts kept yet
        falls = {}
        for s in sets:
            ref = references.get(s)
            learnt, was = ref if isinstance(ref, tuple) else (ref, None)
            now = _get(candidate, s, "fact_accuracy")
            night = s.removeprefix(FACTS_PREFIX)
            if now is None:
                return RuleResult(name, None, limit, False, f"the facts of the night of {night} ({s}) not measured for the candidate")
            if learnt is None:
                return RuleResult(name, None, limit, False, f"no reference for the facts of the night of {night}: {night}'s own "
                                                            f"facts:new fact_accuracy is not in lineage")
            fall = learnt - now
            if was is not None:  # only what the night taught can be forgotten: a fall below its parent's level is noise
                fall = min(fall, max(0.0, learnt - was))
            falls[s] = (fall, learnt, now, _get(parent, s, "fact_accuracy"), _get(candidate, s, "fact_n"), was)
        worst = max(falls, key=lambda k: falls[k][0])
        fall, learnt, now, before, n, was = falls[worst]
        # one probe flipping is rank noise, not forgetting: a set of 5 would otherwise reject at 20 points
        over = [s.removeprefix(FACTS_PREFIX) for s, v in falls.items() if v[0] > limit + _EPS and (not v[4] or v[0] * v[4] > 1 + 1e-6)]
        ok = not over
        night = worst.removeprefix(FACTS_PREFIX)
        reason = (f"{len(falls)} earlier night(s)' facts checked; the worst, the night of {night}: {learnt:.1%} answered when "
                  f"learnt" + (f" ({was:.1%} before that night)" if was is not None else "") + f" -> {now:.1%} now"
                  + (f" ({round(now * n)} of {int(n)})" if n else "")
                  + (f", {before:.1%} by the champion" if before is not None else "")
                  + f", {-fall * 100:+.1f} points; "
                  + ("one probe only, rank noise: not counted against" if ok and fall > limit + _EPS else 'within' if ok else 'over')
                  + f" the allowed fall of {limit * 100:.1f} points (gate.max_fact_forgetting)"
                  + (f"; over it: {', '.join(over)}" if len(over) > 1 else ""))
        return RuleResult(name, fall, limit, ok, reason)

    def _retention(self, parent: Metrics, candidate: Metrics) -> RuleResult | None:
        limit = self.config.max_memory_forgetting
        nights = sorted(d for d in candidate if d.startswith(RETENTION_PREFIX))
        if not nights:
            return None  # no earlier night yet
        changes = {}
        for night in nights:
            p, c = _get(parent, night, "bpb"), _get(candidate, night, "bpb")
            if p is None or c is None:
                return RuleResult("retention", None, limit, False, f"{night} bpb not measured for both champion and candidate")
            changes[night] = (relative_change(p, c), p, c)
        worst = max(changes, key=lambda k: changes[k][0])
        rise, p, c = changes[worst]
        mean = sum(v[0] for v in changes.values()) / len(changes)
        ok = rise <= limit + _EPS
        label = worst.removeprefix(RETENTION_PREFIX)
        reason = (f"{len(changes)} earlier night(s) checked, mean change {mean:+.2%}; the worst, the night of {label}: "
                  f"{p:.4f} -> {c:.4f} ({rise:+.2%}), {'within' if ok else 'over'} the allowed rise of {limit:.2%} "
                  f"(gate.max_memory_forgetting)")
        return RuleResult("retention", rise, limit, ok, reason)

    def _cumulative(self, root: Metrics | None, candidate: Metrics) -> RuleResult | None:
        limit = self.config.max_cumulative_forgetting
        r, c = _get(root or {}, "old_val", "bpb"), _get(candidate, "old_val", "bpb")
        if root is None:
            return None
        if r is None or c is None:
            return RuleResult("cumulative", None, limit, False, "old_val bpb not measured for both the root version and the candidate")
        rise = relative_change(r, c)
        ok = rise <= limit + _EPS
        reason = (f"original-data bits per byte {'rose' if rise > 0 else 'fell'} {abs(rise):.2%} since the root version "
                  f"({r:.4f} -> {c:.4f}); {'within' if ok else 'over'} the allowed drift of {limit:.2%} (gate.max_cumulative_forgetting)")
        return RuleResult("cumulative", rise, limit, ok, reason)

    def _forgetting(self, parent: Metrics, candidate: Metrics) -> RuleResult:
        limit = self.config.max_forgetting
        p, c = _get(parent, "old_val", "bpb"), _get(candidate, "old_val", "bpb")
        if p is None or c is None:
            return RuleResult("forgetting", None, limit, False, "old_val bpb not measured for both parent and candidate")
        rise = relative_change(p, c)
        ok = rise <= limit + _EPS
        verb = "rose" if rise > 0 else "fell"
        reason = (f"original-data bits per byte {verb} {abs(rise):.2%} ({p:.4f} -> {c:.4f}); "
                  f"{'within' if ok else 'over'} the allowed rise of {limit:.2%} (gate.max_forgetting)")
        return RuleResult("forgetting", rise, limit, ok, reason)

    def _acquisition(self, parent: Metrics, candidate: Metrics) -> RuleResult:
        need = self.config.min_acquisition
        for dataset in ("new_heldout", "new_train"):
            p, c = _get(parent, dataset, "bpb"), _get(candidate, dataset, "bpb")
            if p is not None and c is not None:
                break
        else:
            return RuleResult("acquisition", None, -need, False, "no new-data bpb (new_heldout or new_train) measured for both")
        change = relative_change(p, c)
        ok = -change >= need - _EPS
        verb = "fell" if change < 0 else "rose"
        reason = (f"new-data ({dataset}) bits per byte {verb} {abs(change):.2%} ({p:.4f} -> {c:.4f}); "
                  f"required drop {need:.2%} (gate.min_acquisition) {'met' if ok else 'not met'}")
        return RuleResult("acquisition", change, -need, ok, reason)

    def _probes(self, parent: Metrics, candidate: Metrics) -> RuleResult | None:
        p, c = _get(parent, "probes", "exact_match"), _get(candidate, "probes", "exact_match")
        if p is None and c is None:
            return None  # probes are optional
        tol = self.config.probe_tolerance
        if p is None or c is None:
            return RuleResult("probes", None, tol, False, "probes scored for only one of parent and candidate")
        drop = p - c
        ok = drop <= tol + _EPS
        reason = (f"probe exact match {p:.1%} -> {c:.1%} (drop {max(drop, 0.0):.1%}); "
                  f"{'within' if ok else 'over'} the tolerance of {tol:.1%} (gate.probe_tolerance)")
        return RuleResult("probes", drop, tol, ok, reason)


    def _benchmarks(self, parent: Metrics, candidate: Metrics) -> RuleResult | None:
        """lm-evaluation-harness tasks (bench:<task>): lib.evaluation.benchmarks.benchmark_rule."""
        return benchmark_rule(parent, candidate, self.config.max_benchmark_drop, self.config.benchmark_stderr_factor)


# Rules whose failure means the candidate forgot something (what a safer retry can fix); a night
# rejected only for learning too little is not retried: gentler settings would learn less still.
FORGETTING_RULES = ("forgetting", "retention", "cumulative", "fact_retention")
RETRY_SUFFIX = "-retry1"


def rejected_for_forgetting(rules: list[dict[str, Any]]) -> list[str]:
    """The forgetting rules that failed, from a decision's `to_dict()["rules"]`."""
    return [r["name"] for r in rules if not r["passed"] and r["name"] in FORGETTING_RULES]


def safer_settings(cfg):
    """The retry's configuration: half the learning rate and half the new
    data, twice the memory replay (at most what leaves the corpus a share), the rest as it was."""
    s = cfg.sampling
    new = s.new_data_ratio / 2
    memory = min(s.memory_ratio * 2, max(0.0, 1.0 - new - 0.05)) if s.memory_ratio else 0.0
    return cfg.model_copy(update={
        "training": cfg.training.model_copy(update={"lr_scale": cfg.training.lr_scale / 2}),
        "sampling": s.model_copy(update={"new_data_ratio": new, "memory_ratio": memory}),
    }, deep=True)
