"""The regression gate: may a candidate checkpoint replace its parent as champion?

- Inputs are the parent's and the candidate's metrics measured on the same data, as
  {dataset: {metric: value}} (what `lib.evaluate.evaluate_pair` returns and lineage stores).
- forgetting: relative rise of bits per byte on the original validation split (`old_val`) must be
  at most `gate.max_forgetting` (seed 000 section 6: a rise over 2% is significant forgetting).
- acquisition: relative drop of bits per byte on tonight's new data must be at least
  `gate.min_acquisition`; measured on `new_heldout` (documents never trained on, so learning that
  generalises) and, when no held-out slice exists, on `new_train`.
- retention: bits per byte on every earlier accepted night's held-out set (`night:<version>`,
  lib/memory.py) may rise by at most `gate.max_memory_forgetting` over the champion; the reason
  names the worst night and its figure, and reports the mean over all of them.
- cumulative: old_val bits per byte of the candidate may exceed the root version's (v0) by at most
  `gate.max_cumulative_forgetting`: a +0.3% a night passes the per-night rule and adds up unseen.
- probes: when both sides were probed, the exact-match rate may drop by at most
  `gate.probe_tolerance`.
- benchmarks: each lm-evaluation-harness task's main metric may fall at most
  `gate.max_benchmark_drop` points plus `gate.benchmark_stderr_factor` standard errors of the
  difference (lib/evaluation/benchmarks.py); the reason names the task, both scores and the limit.
- A rule whose inputs are missing fails (fail closed): a gate that cannot measure must not promote.

Trade-off: relative thresholds on one scalar per data set are coarse (seed 000 section 8: BPB
misses forgetting of single facts), but they separate the cases that matter by a wide margin:
no replay at lr×0.3 forgets +32.6% on old data vs −0.7% with 10% new data (shared/NOTES.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lib.config import GateConfig

Metrics = dict[str, dict[str, float]]
# A value exactly at a limit passes: 2.04 / 2.0 - 1 is 0.020000000000000018 in floating point.
_EPS = 1e-12


@dataclass(frozen=True)
class RuleResult:
    name: str
    measured: float | None  # the relative change (or the drop, for probes) that was compared
    limit: float
    passed: bool
    reason: str


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
        from lib.tables import gate_table

        return gate_table(self, f"{title}: {'PASSED' if self.passed else 'REJECTED'}").markdown()


def _get(metrics: Metrics, dataset: str, metric: str) -> float | None:
    value = (metrics or {}).get(dataset, {}).get(metric)
    return None if value is None else float(value)


def relative_change(parent: float, candidate: float) -> float:
    return (candidate - parent) / abs(parent)


class RegressionGate:
    """`RegressionGate(cfg.gate).decide(parent_metrics, candidate_metrics) -> GateDecision`."""

    def __init__(self, config: GateConfig | None = None):
        self.config = config or GateConfig()

    def decide(self, parent: Metrics, candidate: Metrics, root: Metrics | None = None) -> GateDecision:
        """`root`: the root version's metrics (its old_val), for the cumulative rule; none (or a
        candidate whose parent is the root) skips it."""
        rules = [self._forgetting(parent, candidate), self._acquisition(parent, candidate)]
        for optional in (self._retention(parent, candidate), self._cumulative(root, candidate), self._probes(parent, candidate)):
            if optional is not None:
                rules.append(optional)
        benchmarks = self._benchmarks(parent, candidate)
        if benchmarks is not None:
            rules.append(benchmarks)
        return GateDecision(all(r.passed for r in rules), rules)

    def _retention(self, parent: Metrics, candidate: Metrics) -> RuleResult | None:
        from lib.memory import RETENTION_PREFIX

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
        from lib.evaluation.benchmarks import benchmark_rule

        return benchmark_rule(parent, candidate, self.config.max_benchmark_drop, self.config.benchmark_stderr_factor)


# Rules whose failure means the candidate forgot something (what a safer retry can fix); a night
# rejected only for learning too little is not retried: gentler settings would learn less still.
FORGETTING_RULES = ("forgetting", "retention", "cumulative")
RETRY_SUFFIX = "-retry1"


def rejected_for_forgetting(rules: list[dict[str, Any]]) -> list[str]:
    """The forgetting rules that failed, from a decision's `to_dict()["rules"]`."""
    return [r["name"] for r in rules if not r["passed"] and r["name"] in FORGETTING_RULES]


def safer_settings(cfg):
    """The retry's configuration (seed 000 section 6): half the learning rate and half the new
    data, twice the memory replay (at most what leaves the corpus a share), the rest as it was."""
    s = cfg.sampling
    new = s.new_data_ratio / 2
    memory = min(s.memory_ratio * 2, max(0.0, 1.0 - new - 0.05)) if s.memory_ratio else 0.0
    return cfg.model_copy(update={
        "training": cfg.training.model_copy(update={"lr_scale": cfg.training.lr_scale / 2}),
        "sampling": s.model_copy(update={"new_data_ratio": new, "memory_ratio": memory}),
    }, deep=True)
