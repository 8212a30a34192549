"""One gate rule's outcome (`RuleResult`), shared by the gate (lib/evaluation/gate.py) and the rules
that live beside their measurement (lib/evaluation/benchmarks.py), so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

# A value exactly at a limit passes: 2.04 / 2.0 - 1 is 0.020000000000000018 in floating point.
_EPS = 1e-12


@dataclass(frozen=True)
class RuleResult:
    name: str
    measured: float | None  # the relative change (or the drop, for probes) that was compared
    limit: float
    passed: bool
    reason: str
