"""What does a night's fact extraction read of a fact set? No model, no training: seconds.

For each night of a fact set (bench/fact_sets.py's, or `--fact-file` of your own), extracts the
fact items the way a night does (lib.knowledge.facts.extract_facts over the night's documents,
earlier nights' items as distractors) and counts, per attribute, the records whose answer some
item of the record's own document gives, and how many of them an item gives under the record's own
name (a question names it: an answer filed under another name is trained but not reached). A fact extraction does not read is never trained in a
question form, so this bounds what bench_facts.py's `facts` column can see and what injection adds
to the documents; `-v` prints every item and the answers nobody read.

    PYTHONPATH=. python bench/fact_coverage.py [--fact-set bio|other|rivers|islands] [--fact-file F] [--nights N] [-v]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from bench.fact_sets import FACT_SETS, coverage_line, extraction_coverage, load_records, records
    from lib.knowledge.facts import extract_facts

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fact-set", default="bio", choices=FACT_SETS)
    ap.add_argument("--fact-file", type=Path, default=None)
    ap.add_argument("--nights", type=int, default=None)
    ap.add_argument("--people", type=int, default=24)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.fact_file:
        try:
            by_night = load_records(args.fact_file, args.people)
        except (OSError, ValueError) as e:
            sys.exit(f"--fact-file: {e}")
        name = args.fact_file.stem
    else:
        by_night = {k: records(args.fact_set, k, args.people) for k in range(1, (args.nights or 4) + 1)}
        name = args.fact_set
    earlier, total = [], {}
    for k in sorted(by_night)[: args.nights or None]:
        recs = by_night[k]
        ids = [f"night{k}-doc{i}" for i in range(len(recs))]
        t0 = time.perf_counter()
        items = extract_facts([r.text for r in recs], ids, earlier=earlier)
        seconds = time.perf_counter() - t0
        cov, read, own = extraction_coverage(recs, items, dict(zip(ids, (r.text for r in recs))))
        for attr, cell in cov.items():
            total[attr] = tuple(x + y for x, y in zip(total.get(attr, (0, 0, 0)), cell))
        print(f"{name} night {k}: {len(items)} items in {seconds * 1000:.0f} ms; {coverage_line(cov)}")
        if args.verbose:
            for i, r in enumerate(recs):
                mine = [it for it in items if it.doc_id == ids[i]]
                print(f"  {r.text!r}")
                for it in mine:
                    print(f"    item: {it.subject} | {it.relation} | {it.answer} ({it.kind})")
                missed = [f"{attr}={a!r}" for attr, (_, a) in r.questions.items() if (r.subject, attr) not in read]
                elsewhere = [f"{attr}={a!r}" for attr, (_, a) in r.questions.items() if (r.subject, attr) in read - own]
                if missed:
                    print(f"    not read: {', '.join(missed)}")
                if elsewhere:
                    print(f"    read under another name than {r.subject!r}: {', '.join(elsewhere)}")
        earlier += items
    print(f"{name}, all nights: {coverage_line(total)}")


if __name__ == "__main__":
    main()
