"""The tables the CLI prints and the flows publish, built in one place: the gate's rules, bits per
byte of a version against its parent, tokens per source of a manifest.

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


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    left: tuple[str, ...] = ()  # columns aligned left in the terminal (the rest: right); empty: all left
    caption: str | None = None

    def markdown(self) -> str:
        """`### title`, a blank line, then a pipe table."""
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def rich(self):
        from rich.table import Table as RichTable

        out = RichTable(title=self.title, caption=self.caption)
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
        row = [r["name"], measured, f"{r['limit'] + 0.0:+.2%}", "pass" if r["passed"] else "FAIL"]
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


def sources_table(data: Mapping[str, Any], title: str) -> Table:
    """Tokens per source of a prepared manifest (lib.sampling.prepare_training_data's summary)."""
    table = Table(title, ["source", "kind", "docs", "held out", "tokens available", "tokens drawn", "share", "epochs", "exposures"],
                  left=("source", "kind"))
    for name, s in data["sources"].items():
        table.rows.append([name, s["kind"], f"{s['docs']:,}", f"{s['heldout_docs']:,}", f"{s['tokens_available']:,}",
                           f"{s['tokens_drawn']:,}", f"{s['share']:.1%}", f"{s['epochs']:.2f}", f"{s['exposures']['mean']:.1f}"])
    return table
