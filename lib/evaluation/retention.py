"""The retention matrix: is what the model learnt on Monday still known on Friday?

Rows are versions (the root first, then each accepted night of the lineage, and tonight's
candidate when asked), columns the sets that say what they know: `old_val` (the original
corpus) and `night:<vK>`, the held-out documents of each night in the long-term memory
(lib/data/memory.py). Every number comes from lineage; nothing is measured here.

- A cell is that version's bits per byte on that set, its most recent measurement (a night
  measures champion and candidate on every retention set, so a version is measured as the
  candidate one night and as the parent the next: the same weights on the same texts give the
  same number, from the eval cache). A set a version was never measured on is None, never
  filled in.
- The reference of `night:vK` is vK on its own held-out documents the night it was trained
  (`new_heldout` of vK in vK's run), and `before` is its parent's on the same documents in
  the same run. These are the documents of the retention set: `remember` links the run's
  `heldout/new.parquet` as `memory/vK/heldout.parquet`, and both sets are the same
  `_sample` (hash order, `eval.max_docs` / `eval.max_bytes`) of them. It differs when the
  night had other `buffer` sources in `sampling.sources` (their held-out documents are pooled
  into new_heldout; the reference then carries a `note`), or when the eval caps changed since.
  The cells of vK and its parent fall back to these two figures when no later night measured
  them on `night:vK`.
- change = (bpb − reference) / reference: a rise is forgetting. kept = (before − bpb) /
  (before − reference), the share of the night's held-out gain still there (1 right after the
  night, 0 back to where its parent was); None when the night gained nothing to keep.
- The reference of `old_val` is the root version's (v0's) old_val: the cumulative drift.
- Facts beside bits per byte: a night whose documents gave fact probes has a `facts:<vK>` column
  right after its `night:<vK>`: each version's closed-book accuracy on them (`fact_accuracy`),
  against vK's the night it learnt them (its `facts:new`), before = its parent's. change is in
  absolute points; kept = (accuracy − before) / (after − before). A bits-per-byte cell whose
  night's facts kept less than half their gain says "facts lost": bits per byte measures the
  shape of the text and can call a night 133% kept while its facts are back at chance (#24).

Trade-off: the matrix reads only what nights recorded, so a retention set a night skipped
(`eval.memory_sets` caps how many are checked) is a gap, not a fresh evaluation; filling it
would cost a forward pass per version and set on every read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lib.data.memory import FACTS_PREFIX, RETENTION_PREFIX
from lib.evaluation.sets import NEW_HELDOUT, OLD_VAL
from lib.evaluation.benchmarks import version_benchmarks

METRIC = "bpb"
FACT_METRIC = "fact_accuracy"
NEW_FACTS = f"{FACTS_PREFIX}new"
FACTS_LOST_BELOW = 0.5  # a night's facts keeping less than half their gain are "lost"


def is_fact_set(set_name: str) -> bool:
    return set_name.startswith(FACTS_PREFIX)


@dataclass(frozen=True)
class Reference:
    """What a column is compared with: the `learner`'s bits per byte on it (`after`), measured
    in `run_id`; for a night's set also its parent's on the same documents (`before`)."""

    set: str
    learner: str
    run_id: str | None
    after: float | None
    before: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Cell:
    version: str
    set: str
    bpb: float | None
    change: float | None = None   # relative to the reference: a rise is forgetting
    kept: float | None = None     # night sets: share of the night's held-out gain still there
    measured_as: str | None = None  # the dataset the figure was recorded under ("night:v1", "new_heldout", ...)
    accuracy: float | None = None   # fact sets: closed-book accuracy (bpb is None there); change is in points

    @property
    def value(self) -> float | None:
        return self.accuracy if self.accuracy is not None else self.bpb


@dataclass
class RetentionMatrix:
    versions: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    sets: list[str] = field(default_factory=list)
    references: dict[str, Reference] = field(default_factory=dict)
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    candidate: str | None = None
    # lm-evaluation-harness scores per version (bench:<task> columns, "61.5 ±3.4" points), read
    # from lineage like the rest: lib.evaluation.benchmarks.version_benchmarks
    benchmark_sets: list[str] = field(default_factory=list)
    benchmark_cells: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        """The bits-per-byte sets, then the benchmark column group."""
        return [*self.sets, *self.benchmark_sets]

    def cell(self, version: str, set_name: str) -> Cell:
        return self.cells.get((version, set_name)) or Cell(version, set_name, None)

    def role(self, version: str, set_name: str) -> str:
        """"reference" (the version the set is compared with), "before" (its parent, on a night's
        set), else ""."""
        ref = self.references.get(set_name)
        if ref is None:
            return ""
        if version == ref.learner:
            return "reference"
        if ref.before is not None and set_name != OLD_VAL and self.parent(ref.learner) == version:
            return "before"
        return ""

    def parent(self, version: str) -> str | None:
        i = self.versions.index(version) if version in self.versions else -1
        return self.versions[i - 1] if i > 0 else None

    def facts_lost(self, version: str, set_name: str) -> bool:
        """Whether `version` kept less than half the fact gain of the night of `set_name`
        (a night:vK or facts:vK column)."""
        night = set_name.removeprefix(RETENTION_PREFIX).removeprefix(FACTS_PREFIX)
        c = self.cell(version, f"{FACTS_PREFIX}{night}")
        return c.kept is not None and c.kept < FACTS_LOST_BELOW and not self.role(version, f"{FACTS_PREFIX}{night}")

    def text(self, version: str, set_name: str) -> str:
        """A cell for a table: `2.6206 (+2.18%, 55% kept)`, `2.5646 (learnt)`, `2.6903 (before)`;
        a fact cell `45% (-35.0 pts, 12% kept)`."""
        c = self.cell(version, set_name)
        if c.value is None:
            return ""
        facts = is_fact_set(set_name)
        shown = f"{c.accuracy:.0%}" if facts else f"{c.bpb:.4f}"
        role = self.role(version, set_name)
        if role:
            return f"{shown} ({'learnt' if set_name != OLD_VAL else 'reference'})" if role == "reference" else f"{shown} (before)"
        parts = [] if c.change is None else [f"{c.change * 100:+.1f} pts" if facts else f"{c.change:+.2%}"]
        if c.kept is not None:
            parts.append(f"{c.kept:.0%} kept")
        if not facts and set_name != OLD_VAL and self.facts_lost(version, set_name):
            parts.append("facts lost")
        return shown + (f" ({', '.join(parts)})" if parts else "")

    def table_rows(self) -> list[dict[str, Any]]:
        """One row per version, one text cell per set: what the Prefect table artifact shows."""
        return [{"version": v, "status": self.status.get(v, ""), **{s: self.text(v, s) for s in self.sets},
                 **{b: self.benchmark_cells.get((v, b), "") for b in self.benchmark_sets}} for v in self.versions]

    def legend(self) -> str:
        nights = [s for s in self.sets if s != OLD_VAL and not is_fact_set(s)]
        night = nights[0] if len(nights) == 1 else f"{RETENTION_PREFIX}vK"   # "v1 ... for night:v1" read wrong beside night:v2
        text = (f"Bits per byte (lower is better). Change: against the version that learnt the set, "
                f"{self.references[OLD_VAL].learner if OLD_VAL in self.references else 'the root'} for old_val, "
                f"{night.removeprefix(RETENTION_PREFIX)} on its own held-out documents the night it was trained for {night}; "
                f"a rise is forgetting. Kept: the share of that night's held-out gain (before -> learnt) still there.")
        if any(is_fact_set(s) for s in self.sets):
            text += (f" facts:vK: the share of night vK's fact probes answered closed-book (a phrasing it did not train on), "
                     f"change in points against vK's own the night it learnt them; 'facts lost' marks a bits-per-byte cell "
                     f"whose night kept less than {FACTS_LOST_BELOW:.0%} of its fact gain.")
        return text

    def to_markdown(self) -> str:
        if not self.versions:
            return "no versions in the lineage"
        head = ["version", "status", *self.columns]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(str(r[k]) for k in head) + " |" for r in self.table_rows()]
        lines += ["", self.legend()]
        lines += [f"- {r.set}: {r.note}" for r in self.references.values() if r.note]
        if self.benchmark_sets:
            lines.append("bench:<task>: the task's main metric in points ± its standard error (higher is better), as recorded "
                         "the last time the version was scored.")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "versions": [{"version": v, "status": self.status.get(v)} for v in self.versions],
            "sets": list(self.sets),
            "candidate": self.candidate,
            "references": {s: asdict(r) for s, r in self.references.items()},
            "cells": {v: {s: {k: getattr(self.cell(v, s), k)
                              for k in ("accuracy" if is_fact_set(s) else "bpb", "change", "kept", "measured_as")}
                          for s in self.sets} for v in self.versions},
            "benchmarks": {v: {b: self.benchmark_cells[(v, b)] for b in self.benchmark_sets if (v, b) in self.benchmark_cells}
                           for v in self.versions},
        }


def _bpb(metrics: dict[str, dict[str, float]], dataset: str) -> float | None:
    value = metrics.get(dataset, {}).get(METRIC)
    return None if value is None else float(value)


def _accuracy(metrics: dict[str, dict[str, float]], dataset: str) -> float | None:
    row = metrics.get(dataset, {})
    value = row.get(FACT_METRIC)
    return None if value is None or not row.get("fact_n") else float(value)


def _relative(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else (value - reference) / abs(reference)


def _kept(value: float | None, ref: Reference) -> float | None:
    if value is None or ref.before is None or ref.after is None or ref.before - ref.after <= 0:
        return None  # the night gained nothing on its held-out documents: no gain to keep
    return (ref.before - value) / (ref.before - ref.after)


def _reference_note(workspace, run_id: str | None) -> str:
    """Why a night's new_heldout is not exactly its retention set, read from its run's data.json."""
    if workspace is None or not run_id:
        return ""
    prepared = workspace.run(run_id).prepared
    if not prepared.exists():
        return ""
    sources = prepared.info.get("sources", {})
    others = {name: s.get("heldout_docs") for name, s in sources.items()
              if name != "new" and s.get("kind") == "buffer" and s.get("heldout_docs")}
    if not others:
        return ""
    listed = ", ".join(f"{name} ({n} docs)" for name, n in sorted(others.items()))
    return (f"the reference is new_heldout of run {run_id}, which also held out documents of {listed}; "
            f"the retention set keeps only the night's own (source new)")


def retention_matrix(lineage, candidate: str | None = None, workspace=None) -> RetentionMatrix:
    """The matrix of the champion's ancestry, root first; with `candidate`, of the candidate's
    ancestry instead (the champion's plus tonight's candidate, whatever the gate decided), and
    tonight's own held-out set as a column even before the night is remembered. `workspace`
    (optional) lets a reference say when its set is not exactly the retention set."""
    top = candidate or lineage.alias("champion")
    out = RetentionMatrix(candidate=candidate)
    if top is None:
        return out
    chain = list(reversed(lineage.ancestry(top)))  # ancestry is newest first
    remembered = {n["version"] for n in lineage.memory_nights()}
    out.versions = [s["version"] for s in chain]
    out.status = {s["version"]: s["status"] for s in chain}
    latest = {v: lineage.metrics(v) for v in out.versions}

    root = out.versions[0]
    out.sets = [OLD_VAL]
    out.references[OLD_VAL] = Reference(OLD_VAL, root, None, _bpb(latest[root], OLD_VAL))
    own: dict[str, dict[str, float | None]] = {}  # set -> {version: its figure on new_heldout in the learner's run}
    for step in chain[1:]:
        v = step["version"]
        if v not in remembered and not (v == candidate and _bpb(step["metrics"], NEW_HELDOUT) is not None):
            continue
        name = f"{RETENTION_PREFIX}{v}"
        after, before = _bpb(step["metrics"], NEW_HELDOUT), _bpb(step["parent_metrics"], NEW_HELDOUT)
        # a night that held no document out (fewer than sampling.heldout_min_docs) has no set to
        # measure: no column, rather than one left blank in every row
        if after is not None or any(_bpb(latest[x], name) is not None for x in out.versions):
            out.sets.append(name)
            out.references[name] = Reference(name, v, step["run_id"], after, before, _reference_note(workspace, step["run_id"]))
            own[name] = {v: after, step["parent"]: before}
        learnt, was = _accuracy(step["metrics"], NEW_FACTS), _accuracy(step["parent_metrics"], NEW_FACTS)
        if learnt is not None:  # the night's documents gave fact probes: their column beside
            facts = f"{FACTS_PREFIX}{v}"
            out.sets.append(facts)
            out.references[facts] = Reference(facts, v, step["run_id"], learnt, was)
            own[facts] = {v: learnt, step["parent"]: was}

    for v in out.versions:
        for s in out.sets:
            ref = out.references[s]
            if is_fact_set(s):
                value, measured_as = _accuracy(latest[v], s), s
                if value is None and own.get(s, {}).get(v) is not None:
                    value, measured_as = own[s][v], NEW_FACTS
                if value is not None:
                    out.cells[(v, s)] = Cell(v, s, None, value - ref.after, _fact_kept(value, ref), measured_as, value)
                continue
            value, measured_as = _bpb(latest[v], s), s
            if value is None and own.get(s, {}).get(v) is not None:
                value, measured_as = own[s][v], NEW_HELDOUT
            if value is None:
                continue
            out.cells[(v, s)] = Cell(v, s, value, _relative(value, ref.after), None if s == OLD_VAL else _kept(value, ref), measured_as)

    out.benchmark_sets, out.benchmark_cells = version_benchmarks(latest)
    return out


def _fact_kept(value: float, ref: Reference) -> float | None:
    if ref.before is None or ref.after is None or ref.after - ref.before <= 0:
        return None  # the night answered no more of its facts than its parent: no gain to keep
    return (value - ref.before) / (ref.after - ref.before)
