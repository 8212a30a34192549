"""No-regression check of a restructure: the same benchmarks on a base commit and on this tree.

What it compares: the code of `--base` (default cc26815, the tree before issue #15's restructure)
against the working tree (or `--head COMMIT`). The base is checked out as a throw-away `git
worktree` under a temporary folder and runs on this checkout's Python environment (the same
interpreter and packages; `PYTHONPATH` and the working directory put that tree's lib/ cli/ flows/
tasks/ first, which the harness checks before measuring). Nothing is installed.

Each side runs its OWN copy of each benchmark script (the table says whether the two copies are
the same file), with small arguments so that the whole comparison takes ~11 minutes on 2 cores
(load 4; 15 when a flagged benchmark is measured again):

  orchestration   bench_orchestration.py: nightly flow wall / the stages' own time, its overhead
                  in seconds, and the curation flow's first and cached re-run time (~2 min a run:
                  one round unless --orchestration-rounds)
  dedup           bench_dedup.py: exact + near dedup of 100k synthetic documents, 2 threads
  tokenize        bench_tokenize.py: tokenize-to-shards, 1 and 2 processes, and against raw
                  `encode_batch` (2 MB)
  loader          bench_loader.py: `next_batch` time against the tiny model's step
  train overhead  bench_train_overhead.py: lib.training.train against a bare PyTorch loop, CPU time per
                  step, on a small Llama (2 × 256, vocab 4096, 128 tokens)
  consolidate dedup  the CLI (`consolidate dedup`, fresh process) on 5.6 MB of stdlib sources
                  with exact and near copies: its reported seconds; outputs compared byte for byte

The benchmarks print text; the harness reads their headline lines with tolerant regular
expressions (a line that no longer matches makes the figure "n/a", and the end of the output is
printed).
Rounds alternate: every benchmark runs base, then head, round after round, so both sides see the
same load. Per figure: the best round of each side (least time, or most throughput), head/base,
and a verdict. Tolerance: the larger of the floor (`--floor`, 10%) and the round-to-round spread
measured in this run (max/min − 1 over a side's rounds, the larger side's): a head that is worse
than that is flagged, then that benchmark is measured again (`--confirm` extra rounds) and the
verdict is taken over all rounds, so a change is never called a regression on one measurement.
The load average is printed before and after, and per benchmark.

Run (from the repository root; the interpreter must be that of an environment whose site-packages
hold the packages, which bench_loader and bench_orchestration read as new data: in a worktree
with a light venv, pass the main environment's with --python):

    .venv/bin/python bench/bench_regression.py [--base cc26815] [--head COMMIT] [--rounds 2]
        [--only dedup,tokenize,...] [--python PATH] [--json results.json] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def load() -> str:
    return "%.1f/%.1f/%.1f" % os.getloadavg()


# -- the figures ---------------------------------------------------------------------------------
@dataclass
class Figure:
    name: str
    unit: str
    lower_is_better: bool = True


@dataclass
class Bench:
    name: str
    script: str | None                 # bench/<script>, or None: a command of its own
    args: list[str]
    figures: list[Figure]
    parse: Callable[[str], dict[str, float]]
    command: Callable[["Side", Path], list[str]] | None = None
    repeat: int = 1                    # fresh runs per round (the best one counts)
    timeout: int = 600


def _num(pattern: str, text: str, group: int = 1) -> float | None:
    m = re.search(pattern, text, re.S)
    return float(m.group(group).replace(",", "")) if m else None


def parse_orchestration(out: str) -> dict[str, float]:
    m = re.search(r"flow wall\s+([\d.]+)\s*s\s*/\s*sum of own\s+([\d.]+)\s*s\s*=\s*([\d.]+)x", out)
    c = re.search(r"curation: re-run\s+([\d.]+)\s*s\s*/\s*first\s+([\d.]+)\s*s", out)
    got = {}
    if m:
        wall, own = float(m.group(1)), float(m.group(2))
        got.update({"flow wall / stages' own time": wall / own, "overhead (wall - own)": wall - own})
    if c:
        got.update({"curation, first run": float(c.group(2)), "curation, cached re-run": float(c.group(1))})
    return got


def parse_dedup(out: str) -> dict[str, float]:
    rows = re.findall(r"([\d,]+) docs:\s+([\d.]+) s\s+\(([\d.]+) us/doc.*?peak RSS ([\d.]+) GB", out)
    if not rows:
        return {}
    n, s, us, rss = rows[-1]
    return {"µs per document": float(us), "peak RSS": float(rss)}  # its seconds are printed to 0.1 s only


def parse_tokenize(out: str) -> dict[str, float]:
    got = {}
    one = _num(r"tokenize-to-shards, 1 process\s+([\d.]+) s", out)
    two = _num(r"tokenize-to-shards, 2 processes\s+([\d.]+) s", out)
    ratio = _num(r"ratio pipeline\(1 proc\) / raw encode_batch = ([\d.]+)x wall", out)
    cpu = _num(r"ratio pipeline\(1 proc\) / raw encode_batch = [\d.]+x wall, ([\d.]+)x CPU", out)
    for k, v in (("1 process", one), ("2 processes", two), ("pipeline / raw encode, wall", ratio),
                 ("pipeline / raw encode, CPU", cpu)):
        if v is not None:
            got[k] = v
    return got


def parse_loader(out: str) -> dict[str, float]:
    got = {}
    b = _num(r"loader next_batch\s+([\d.]+) ms/batch", out)
    o = _num(r"loader open \+ validate:\s*([\d.]+) ms", out)
    r = _num(r"ratio loader / model = ([\d.]+)x", out)
    if b is not None:
        got["next_batch"] = b
    if o is not None:
        got["open + validate"] = o
    if r is not None:
        got["model step / next_batch"] = r
    return got


def parse_train(out: str) -> dict[str, float]:
    got = {}
    trainer = re.findall(r"lib\.train\s+([\d.]+)\s+runs", out)  # wall, then CPU
    bare_cpu = _num(r"CPU seconds per step\s+bare\s+([\d.]+)", out)
    if len(trainer) >= 2:
        got["lib.training.train CPU s/step"] = float(trainer[1])
        if bare_cpu:
            got["lib.training.train / bare loop, CPU"] = float(trainer[1]) / bare_cpu
    peak = _num(r"lib\.train ([\d.]+) GiB", out)
    if peak is not None:
        got["lib.training.train peak RSS"] = peak
    return got


def parse_cli_dedup(out: str) -> dict[str, float]:
    for line in reversed(out.splitlines()):
        if line.startswith("{") and '"seconds"' in line:
            return {"seconds": float(json.loads(line)["seconds"])}
    return {}


def dedup_sample(path: Path) -> dict:
    """The stdlib's .py files (sorted, ≥ 300 characters) up to 4.5 MB, plus an exact copy of every
    10th and a near copy (one line changed) of every 8th: ~5.6 MB, one parquet file."""
    import sysconfig

    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(sysconfig.get_paths()["stdlib"])
    docs, total = [], 0
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if len(text) < 300:
            continue
        docs.append((str(p.relative_to(root)), text))
        total += len(text.encode())
        if total >= 4.5e6:
            break
    n = len(docs)
    docs += [(docs[k][0] + "#copy", docs[k][1]) for k in range(0, n, 10)]
    for k in range(3, n, 8):
        lines = docs[k][1].split("\n")
        lines[len(lines) // 2] = "# edited"
        docs.append((docs[k][0] + "#near", "\n".join(lines)))
    pq.write_table(pa.table({"id": [d[0] for d in docs], "text": [d[1] for d in docs]}), path)
    return {"documents": len(docs), "bytes": sum(len(d[1].encode()) for d in docs)}


BENCHES = [
    Bench("orchestration", "bench_orchestration.py",
          ["--pretrain-steps", "2", "--steps", "5", "--corpus-mb", "0.3", "--buffer-kb", "30", "--eval-docs", "10",
           "--curate-mb", "5"],
          [Figure("flow wall / stages' own time", "x"), Figure("overhead (wall - own)", "s"),
           Figure("curation, first run", "s"), Figure("curation, cached re-run", "s")], parse_orchestration),
    Bench("dedup", "bench_dedup.py", ["--sizes", "100000", "--workers", "2"],
          [Figure("µs per document", "µs"), Figure("peak RSS", "GB")], parse_dedup),
    Bench("tokenize", "bench_tokenize.py", ["--mb", "2", "--files", "4", "--rounds", "1"],
          [Figure("1 process", "s"), Figure("2 processes", "s"), Figure("pipeline / raw encode, wall", "x", False),
           Figure("pipeline / raw encode, CPU", "x", False)], parse_tokenize),
    Bench("loader", "bench_loader.py", ["--steps", "2"],
          [Figure("next_batch", "ms"), Figure("open + validate", "ms")], parse_loader),
    Bench("train overhead", "bench_train_overhead.py",
          ["--width", "256", "--layers", "2", "--heads", "4", "--mlp", "512", "--vocab", "4096", "--seq", "128",
           "--steps", "4", "--repeats", "1"],
          [Figure("lib.training.train / bare loop, CPU", "x"), Figure("lib.training.train CPU s/step", "s"), Figure("lib.training.train peak RSS", "GiB")],
          parse_train),
    Bench("consolidate dedup", None, [], [Figure("seconds", "s")], parse_cli_dedup,
          command=lambda side, out: [PY, "-c", "import sys; from cli.main import main; sys.exit(main())", "dedup",
                                     str(side.sample), "--out", str(out)], repeat=3),
]


# -- the two sides -------------------------------------------------------------------------------
@dataclass
class Side:
    name: str
    tree: Path
    label: str
    tmp: Path
    sample: Path | None = None
    results: dict[str, list[dict]] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(self.tree), "PREFECT_HOME": str(self.tmp / f"prefect-{self.name}")}
        env.pop("PYTHONSTARTUP", None)
        return env

    def run(self, cmd: list[str], timeout: int) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=self.tree, env=self.env(), capture_output=True, text=True, timeout=timeout)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_side(name: str, rev: str | None, tmp: Path) -> Side:
    if rev is None:
        dirty = " (uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
        return Side(name, ROOT, f"working tree at {git('rev-parse', '--short', 'HEAD')}{dirty}", tmp)
    tree = tmp / name
    git("worktree", "add", "--detach", str(tree), rev)
    return Side(name, tree, f"{git('rev-parse', '--short', rev)} ({git('log', '-1', '--format=%s', rev)[:60]})", tmp)


def check_side(side: Side) -> None:
    """The side imports its own tree's code, and its numba kernels are loaded (compiled on a fresh
    worktree: not timed)."""
    probe = side.run([PY, "-c", "import lib.curation.dedup, cli.main, flows; print(lib.curation.dedup.__file__); print(flows.__file__)"], 120)
    paths = probe.stdout.split()
    if probe.returncode or not paths or not all(Path(p).resolve().is_relative_to(side.tree.resolve()) for p in paths):
        raise SystemExit(f"{side.name}: imports do not come from {side.tree}: {probe.stdout}{probe.stderr[-2000:]}")
    probe = side.run([PY, "-c", "import glob, sysconfig; print(len(glob.glob(sysconfig.get_paths()['purelib'] + '/*/*.py')))"], 60)
    if not probe.stdout.strip().isdigit() or int(probe.stdout) == 0:
        raise SystemExit(f"{PY}: its site-packages hold no package sources, which bench_loader and bench_orchestration read "
                         f"as new data (a light venv whose packages live elsewhere?): pass --python with the interpreter of "
                         f"the environment that holds them (e.g. /work/main/.venv/bin/python)")
    t = time.perf_counter()
    warm = side.run([PY, "-m", "lib.curation.precompile"], 600)
    if warm.returncode:
        raise SystemExit(f"{side.name}: python -m lib.curation.precompile failed:\n{warm.stderr[-2000:]}")
    print(f"  {side.name}: {side.label}; numba kernels ready in {time.perf_counter() - t:.1f} s")


def run_once(bench: Bench, side: Side, work: Path, rnd: int) -> dict:
    runs = []
    for k in range(bench.repeat):
        out = work / f"{bench.name.replace(' ', '-')}-{side.name}-{rnd}-{k}"
        cmd = bench.command(side, out) if bench.command else [PY, str(side.tree / "bench" / bench.script), *bench.args]
        before, t = os.getloadavg()[0], time.perf_counter()
        try:
            res = side.run(cmd, bench.timeout)
            text, rc = res.stdout + res.stderr, res.returncode
        except subprocess.TimeoutExpired as exc:
            text, rc = f"timeout after {bench.timeout} s\n{exc.stdout or ''}", -1
        wall = time.perf_counter() - t
        figs = bench.parse(res.stdout) if rc == 0 else {}
        runs.append({"figures": figs, "wall": wall, "load": before, "rc": rc, "out": out, "text": text})
    ok = [r for r in runs if r["figures"]]
    best: dict[str, float] = {}
    for f in bench.figures:
        vals = [r["figures"][f.name] for r in ok if f.name in r["figures"]]
        if vals:
            best[f.name] = min(vals) if f.lower_is_better else max(vals)
    got = {"round": rnd, "figures": best, "wall": sum(r["wall"] for r in runs), "load": runs[0]["load"],
           "rc": max((r["rc"] for r in runs), key=abs)}
    if not best or len(best) < len(bench.figures):
        log = work / f"{bench.name.replace(' ', '-')}-{side.name}-{rnd}.log"
        log.write_text("\n\n".join(r["text"] for r in runs))
        got["log"] = str(log)
    side.results.setdefault(bench.name, []).append(got)
    return got


def run_round(bench: Bench, sides: list[Side], work: Path, rnd: int) -> None:
    for side in sides:
        got = run_once(bench, side, work, rnd)
        figs = ", ".join(f"{k} {v:.4g}" for k, v in got["figures"].items()) or f"no figures (rc {got['rc']})"
        print(f"  round {rnd} {bench.name:<18} {side.name:<4} {got['wall']:6.1f} s  load {got['load']:4.1f}  {figs}", flush=True)
        if "log" in got:
            tail = Path(got["log"]).read_text()[-1500:]
            print(f"    figures missing; the end of its output (all of it: {got['log']}, kept with --keep):\n    "
                  + tail.replace("\n", "\n    "), flush=True)


def verdicts(bench: Bench, base: Side, head: Side, floor: float) -> list[dict]:
    rows = []
    for f in bench.figures:
        b = [r["figures"][f.name] for r in base.results.get(bench.name, []) if f.name in r["figures"]]
        h = [r["figures"][f.name] for r in head.results.get(bench.name, []) if f.name in r["figures"]]
        if not b or not h:
            rows.append({"bench": bench.name, "figure": f.name, "unit": f.unit, "verdict": "n/a (not parsed; see the log)"})
            continue
        pick = min if f.lower_is_better else max
        bb, hb = pick(b), pick(h)

        def spread(v):
            return max(v) / min(v) - 1 if len(v) > 1 and min(v) > 0 else 0.0

        tol = max(floor, spread(b), spread(h))
        worse = (hb / bb - 1) if f.lower_is_better else (bb / hb - 1) if hb else float("inf")
        verdict = "regression" if worse > tol else "faster" if worse < -tol else "same within noise"
        rows.append({"bench": bench.name, "figure": f.name, "unit": f.unit, "base": bb, "head": hb, "ratio": hb / bb if bb else None,
                     "tolerance": tol, "spread_base": spread(b), "spread_head": spread(h), "rounds": (len(b), len(h)),
                     "lower_is_better": f.lower_is_better, "verdict": verdict})
    return rows


def same_script(bench: Bench, base: Side, head: Side) -> str:
    if not bench.script:
        return "cli"
    a, b = base.tree / "bench" / bench.script, head.tree / "bench" / bench.script
    if not a.exists():
        return "missing at base"
    return "same script" if a.read_bytes() == b.read_bytes() else "script differs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="cc26815", help="base commit (default: cc26815, before #15)")
    ap.add_argument("--head", default=None, help="head commit (default: this working tree)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating base/head rounds per benchmark")
    ap.add_argument("--orchestration-rounds", type=int, default=1,
                    help="rounds of bench_orchestration (~70 s a run on a quiet machine, 150 s under load)")
    ap.add_argument("--confirm", type=int, default=2, help="extra rounds of a benchmark with a figure flagged as a regression "
                    "(orchestration: at most --orchestration-rounds)")
    ap.add_argument("--floor", type=float, default=0.10, help="least tolerance (relative) of a verdict")
    ap.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--python", default=sys.executable, help="interpreter of both sides (default: this one)")
    ap.add_argument("--json", type=Path, help="write every round and the verdicts here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (outputs, logs)")
    args = ap.parse_args()
    global PY
    PY = args.python

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {b.name for b in BENCHES}
    if unknown:
        raise SystemExit(f"--only: unknown benchmark(s) {sorted(unknown)}; choose from {[b.name for b in BENCHES]}")
    benches = [b for b in BENCHES if not only or b.name in only]
    started, load_before = time.perf_counter(), load()
    print(f"bench_regression: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {os.cpu_count()} cores, load before {load_before}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-regression-"))
    sides: list[Side] = []
    try:
        sides.append(make_side("base", args.base, tmp))
        sides.append(make_side("head", args.head, tmp))
        base, head = sides
        for s in sides:
            check_side(s)
        if any(b.name == "consolidate dedup" for b in benches):
            info = dedup_sample(tmp / "dedup-sample.parquet")
            base.sample = head.sample = tmp / "dedup-sample.parquet"
            print(f"  consolidate dedup sample: {info['documents']} documents, {info['bytes'] / 1e6:.1f} MB")
        for bench in benches:
            if bench.script and not (base.tree / "bench" / bench.script).exists():
                print(f"  {bench.name}: bench/{bench.script} does not exist at the base commit: head only")
        work = tmp / "runs"
        work.mkdir()
        for rnd in range(1, max(args.rounds, args.orchestration_rounds) + 1):
            for bench in benches:
                if rnd > (args.orchestration_rounds if bench.name == "orchestration" else args.rounds):
                    continue
                run_round(bench, [s for s in sides if not bench.script or (s.tree / "bench" / bench.script).exists()], work, rnd)
        rows = []
        for bench in benches:
            got = verdicts(bench, base, head, args.floor)
            more = min(args.confirm, args.orchestration_rounds) if bench.name == "orchestration" else args.confirm
            if more and any(r["verdict"] == "regression" for r in got):
                print(f"  {bench.name}: flagged ({', '.join(r['figure'] for r in got if r['verdict'] == 'regression')}); "
                      f"measuring again, {more} more round(s)")
                done = len(head.results.get(bench.name, []))
                for k in range(more):
                    run_round(bench, sides, work, done + 1 + k)
                flagged = {r["figure"] for r in got if r["verdict"] == "regression"}
                got = verdicts(bench, base, head, args.floor)
                for r in got:
                    if r["verdict"] == "regression":
                        r["verdict"] = "REGRESSION (confirmed by re-measuring)"
                    elif r["figure"] in flagged:
                        r["verdict"] += " (flagged, not confirmed by re-measuring)"
            rows += got
        if any(b.name == "consolidate dedup" for b in benches):
            outs = lambda s: sorted(p for p in work.glob(f"consolidate-dedup-{s}-*") if p.is_dir())  # noqa: E731
            pairs = [(a, b) for a, b in zip(outs("base"), outs("head"))]
            same = all((a / f).read_bytes() == (b / f).read_bytes() for a, b in pairs for f in ("kept.parquet", "duplicates.parquet"))
            print(f"  consolidate dedup: kept.parquet and duplicates.parquet of base and head byte-identical: {same} "
                  f"({len(pairs)} pairs)")

        print(f"\nbase: {base.label}\nhead: {head.label}")
        print(f"rounds: {args.rounds} alternating (base, head) per benchmark, best round of each side; tolerance = "
              f"max({args.floor:.0%}, the round-to-round spread max/min-1 of either side)\n")
        hdr = "| benchmark | figure | base | head | head/base | tolerance | verdict | script | load during |"
        print(hdr)
        print("|" + "---|" * 9)
        for r in rows:
            bench = next(b for b in benches if b.name == r["bench"])
            loads = [x["load"] for s in sides for x in s.results.get(r["bench"], [])]
            lr = f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""
            if "base" not in r:
                print(f"| {r['bench']} | {r['figure']} | | | | | {r['verdict']} | {same_script(bench, base, head)} | {lr} |")
                continue
            better = "lower" if r["lower_is_better"] else "higher"
            print(f"| {r['bench']} | {r['figure']} ({r['unit']}, {better} is better) | {r['base']:.4g} | {r['head']:.4g} | "
                  f"{r['ratio']:.2f} | {r['tolerance']:.0%} | {r['verdict']} | {same_script(bench, base, head)} | {lr} |")
        print(f"\nload before {load_before}, after {load()}; wall {time.perf_counter() - started:.0f} s")
        if args.json:
            args.json.write_text(json.dumps({
                "base": base.label, "head": head.label, "load_before": load_before, "load_after": load(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "wall_s": time.perf_counter() - started,
                "rounds": {s.name: s.results for s in sides}, "verdicts": rows}, indent=1, default=str))
    finally:
        for s in sides:
            if s.tree != ROOT:
                subprocess.run(["git", "worktree", "remove", "--force", str(s.tree)], cwd=ROOT, capture_output=True)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
