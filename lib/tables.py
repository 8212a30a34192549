"""The tables the CLI prints and the flows publish, built in one place: the gate's rules, bits per
byte of a version against its parent, tokens per source of a manifest, and the labelled values of
a corpus, the demo buffer and an adopted model.

- Each builder returns a `Table` (title, columns, rows of strings). `.rich()` is what the CLI
  prints (rich is imported only then), `.markdown()` what a log line or a UI artifact shows.
- The builders take the lib objects or their JSON form alike (a `GateDecision` or its
  `to_dict()`, an `EvalTable`'s `rows()`), so a flow's result renders the same as a fresh decision.

Trade-off: cells are formatted to strings here, once; a caller that wants the numbers reads the
lib objects, never a table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Iterable, Mapping

from rich.table import Table as RichTable


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    left: tuple[str, ...] = ()  # columns aligned left in the terminal (the rest: right); empty: all left
    caption: str | None = None
    header: bool = True  # False: a label/value table, its column names not shown in the terminal

    def markdown(self) -> str:
        """`### title`, a blank line, then a pipe table."""
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def rich(self):
        out = RichTable(title=self.title, caption=self.caption, show_header=self.header)
        for col in self.columns:
            out.add_column(col, justify="left" if not self.left or col in self.left else "right")
        for row in self.rows:
            out.add_row(*row)
        return out


def _plain(item: Any) -> dict[str, Any]:
    return asdict(item) if is_dataclass(item) else dict(item)


def _rules(decision: Any) -> list[dict[str, Any]]:
    rules = decision.get("rules", []) if isinstance(decision, Mapping) else decision.rules
    return [_plain(r) for r in rules]


def gate_table(decision: Any, title: str, reasons: bool = True) -> Table:
    """One row per gate rule: measured change, limit, pass/FAIL (and the reason, unless the
    caller shows reasons on their own lines: `gate_reasons`)."""
    columns = ["rule", "measured", "limit", "result"] + (["reason"] if reasons else [])
    table = Table(title, columns)
    for r in _rules(decision):
        measured = "n/a" if r.get("measured") is None else f"{r['measured'] + 0.0:+.2%}"  # + 0.0: no "-0.00%"
        limit = f"{r['limit'] + 0.0:+.2%}"
        if r["name"] == "benchmarks":  # a drop in points (fractions of an accuracy × 100), not a relative change
            measured = "n/a" if r.get("measured") is None else f"{100 * r['measured'] + 0.0:+.1f} points"
            limit = f"{100 * r['limit'] + 0.0:+.1f} points"
        elif r["name"] == "fact_acquisition":  # a share of tonight's facts answered, not a change: "+10.42%" read as a gain
            measured = "n/a" if r.get("measured") is None else f"{r['measured']:.1%} answered"
            limit = f"at least {r['limit']:.1%}"
        elif r["name"] == "fact_retention":  # the worst night's fall in accuracy points, not a relative change
            measured = "n/a" if r.get("measured") is None else f"{-100 * r['measured'] + 0.0:+.1f} points"
            limit = f"{-100 * r['limit'] + 0.0:+.1f} points"
        row = [r["name"], measured, limit, "pass" if r["passed"] else "FAIL"]
        table.rows.append(row + ([r["reason"]] if reasons else []))
    return table


def gate_reasons(decision: Any) -> list[str]:
    """Each rule's full reason as its own markdown bullet (a reason column is cut off in a narrow pane)."""
    return [f"- **{r['name']}** ({'pass' if r['passed'] else 'FAIL'}): {r['reason']}" for r in _rules(decision)]


def bpb_table(rows: Iterable[Mapping[str, Any]], parent: str, candidate: str, title: str, *, metric_column: bool = True) -> Table:
    """Bits per byte (and probe scores) of `parent` and `candidate` per dataset, with the relative
    change; `metric_column=False` keeps the bpb rows only, under the headers before/after."""
    names = [parent, candidate] if metric_column else ["before", "after"]
    columns = ["dataset"] + (["metric"] if metric_column else []) + ["docs", *names, "change"]
    table = Table(title, columns)
    for r in rows:
        if not metric_column and r["metric"] != "bpb":
            continue
        change = "" if r["relative_change"] is None else f"{r['relative_change']:+.2%}"
        table.rows.append([r["dataset"]] + ([r["metric"]] if metric_column else [])
                          + [str(r.get("docs", "")), f"{r['parent']:.4f}", f"{r['candidate']:.4f}", change])
    return table


def benchmark_table(rows: Iterable[Mapping[str, Any]], parent: str, candidate: str, title: str) -> Table:
    """lm-evaluation-harness scores of `parent` and `candidate` in points, ± their standard errors
    (lib.evaluation.benchmarks.benchmark_table_rows)."""
    def pts(value, se) -> str:
        return "" if value is None else f"{value:.1f}" + ("" if se is None else f" ±{se:.1f}")

    table = Table(title, ["task", "metric", "examples", parent, candidate, "change"], left=("task", "metric"))
    for r in rows:
        change = "" if r["change_points"] is None else f"{r['change_points']:+.1f} points"
        table.rows.append([r["task"], r["metric"], str(r["examples"]), pts(r["parent"], r["parent_stderr"]),
                           pts(r["candidate"], r["candidate_stderr"]), change])
    return table


def sources_table(data: Mapping[str, Any], title: str) -> Table:
    """Tokens per source of a prepared manifest (lib.data.sampling.prepare_training_data's summary)."""
    table = Table(title, ["source", "kind", "docs", "held out", "tokens available", "tokens drawn", "share", "epochs", "exposures"],
                  left=("source", "kind"))
    for name, s in data["sources"].items():
        table.rows.append([name, s["kind"], f"{s['docs']:,}", f"{s['heldout_docs']:,}", f"{s['tokens_available']:,}",
                           f"{s['tokens_drawn']:,}", f"{s['share']:.1%}", f"{s['epochs']:.2f}", f"{s['exposures']['mean']:.1f}"])
    return table


# -- label/value tables -----------------------------------------------------------------------------
def fields_table(title: str, fields: Iterable[tuple[str, str]], *, values_left: bool = False) -> Table:
    """Labelled values, one a row, no header (values right-aligned unless `values_left`)."""
    return Table(title, ["field", "value"], [[k, v] for k, v in fields], left=("field", "value") if values_left else ("field",),
                 header=False)


def corpus_table(stats: Mapping[str, Any], title: str) -> Table:
    """A corpus's corpus.json (lib.data.corpus, lib.data.replay): documents, bytes, splits, shards."""
    fields = [
        ("documents", f"{stats['docs']:,}  ({', '.join(f'{v} {k}' for k, v in stats['kinds'].items())})"),
        ("text bytes", f"{stats['bytes']:,}"),
        ("train", f"{stats['train_docs']:,} docs, {stats['train_bytes']:,} bytes"),
        ("validation", f"{stats['val_docs']:,} docs, {stats['val_bytes']:,} bytes"),
        ("shards", f"{len(stats['shards'])}"),
    ]
    if stats.get("skipped"):
        fields.append(("skipped files", ", ".join(f"{v} {k}" for k, v in stats["skipped"].items())))
    fields.append(("python", stats["python"]))
    return fields_table(title, fields)


def demo_buffer_table(stats: Mapping[str, Any], title: str) -> Table:
    """Documents and bytes per package of the embedded demo buffer (lib.data.corpus.build_demo_buffer)."""
    table = Table(title, ["package", "version", "docs", "bytes"], left=("package", "version"))
    for package, info in stats["packages"].items():
        table.rows.append([package, info["version"] or info.get("note", "-"), f"{info['docs']}", f"{info['bytes']:,}"])
    table.rows.append(["[bold]total", "", f"[bold]{stats['records']}", f"[bold]{stats['bytes']:,}"])
    return table


def adoption_table(out: Mapping[str, Any], lr_scale: float) -> Table:
    """What `consolidate init` made of the user's model (lib.registry.adopt.adopt's result)."""
    meta, tok, c = out["model"], out["tokenizer"], out["corpus"]
    fields = [
        ("model", f"{meta['architecture']}, {meta['parameters'] / 1e6:,.1f} M parameters, {meta['storage_dtype']}"),
        ("weights", f"{out['path']}/model.safetensors (sha256 {meta['digest'][:16]}…)"),
        ("original LR", f"{meta['original_lr']:g} (nights: × training.lr_scale {lr_scale:g})"),
        ("documents", f"separated by {tok['document_separator']!r}; vocabulary {tok['vocab_size']:,} ids"),
        ("replay corpus", f"{c['name']}: {c['train_docs']:,} train, {c['val_docs']:,} old_val documents, {c['bytes']:,} bytes"),
    ]
    if c["rejected"]:
        fields.append(("rejected files", "\n".join(f"{r['file']}: {r['reason']}" for r in c["rejected"])))
    if "warm" in out:
        fields.append(("old_val", f"{out['warm']['old_val_bpb']:.4f} bits per byte"))
    return fields_table(f"adopted as {out['version']} (champion)", fields, values_left=True)
