"""Orchestration overhead of the nightly flow, and what the content cache saves on a re-run.

Part 1, overhead. Baseline "own": the work inside each stage of
`flows.consolidate.nightly_consolidation`, i.e. the lib calls its tasks wrap in
`tasks.reporting.own_time` (ingest: flush, hash, registry; curate: the lib.curation.pipeline steps;
prepare: tokenize + manifest; train: the torchrun process; record; evaluate; gate: decision, delta
store, dedup index), added up per stage by `StageClock.own`. Measured "flow": the flow's wall time
from outside, call to return, on the Prefect ephemeral API that `consolidate run` uses (already
started by the bootstrap before it). Target: flow wall <= 1.15 x sum of own.
Also printed: each stage's flow-side time (StageClock.seconds: own + Prefect's task overhead), and
from how much stage work on the night's fixed overhead (~3-5 s here) is within the target.

Part 2, cached re-run. `flows.curation.curate` twice on the same new buffer files (this venv's
site-packages sources, added after the night; nothing promoted in between): the second run hashes
the files and finds every curation step in the content cache. Target: the re-run's curation time
<= 10% of the first run's (each: its ingest + curate stages, what curation costs inside a night);
the ratio of the two flows' wall times is printed too. A cached re-run costs ~2 s of Prefect task
runs and API calls whatever the size, plus hashing (~5 ms/MB), so the ratio depends on the night's
size: the last line says from which size on the target holds at this run's curation speed.

Setup (timed, not compared): a temporary workspace with a small stdlib corpus and the demo
buffer; v0 bootstrapped with the tiny preset trimmed to --pretrain-steps. Prefect's home is a
temporary folder; its console shows warnings only (logs still go to the API as in production).
~3 minutes on 2 CPU cores (5 when other work shares them).

Run: .venv/bin/python bench/bench_orchestration.py [--steps 30 --eval-docs 100 --curate-mb 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OVERHEAD_TARGET = 1.15
RERUN_TARGET = 0.10


def isolate_prefect(home: Path) -> None:
    """A fresh Prefect home (before prefect is imported) and the CLI's defaults."""
    os.environ["PREFECT_HOME"] = str(home)
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    from cli.run import prefect_environment

    prefect_environment()


def add_package_buffer(ws, cfg, max_bytes: int) -> dict:
    """New buffer records: the .py/.txt/.rst files of this venv's site-packages (sorted, so the
    same on every run of one installation), up to `max_bytes`, in files of 1000 records (the
    default preset's buffer.flush_size)."""
    import sysconfig

    from lib.buffer.store import Buffer
    from lib.data.corpus import iter_stdlib_documents

    texts, size = [], 0
    for doc in iter_stdlib_documents(Path(sysconfig.get_paths()["purelib"])):
        if len(doc.text) < cfg.curation.min_chars:
            continue
        texts.append(doc.text)
        size += len(doc.text.encode("utf-8"))
        if size >= max_bytes:
            break
    with Buffer(ws.buffers, flush_size=1000) as buf:
        buf.add_many(texts, "bench:site-packages")
    return {"records": len(texts), "bytes": size}


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pretrain-steps", type=int, default=5, help="v0 pre-training steps (setup)")
    ap.add_argument("--steps", type=int, default=30, help="the night's training steps")
    ap.add_argument("--corpus-mb", type=float, default=1.0, help="stdlib corpus size (tokenizer, replay, forgetting set)")
    ap.add_argument("--buffer-kb", type=float, default=120, help="demo buffer of the night")
    ap.add_argument("--eval-docs", type=int, default=100, help="eval.max_docs")
    ap.add_argument("--curate-mb", type=float, default=200.0, help="new buffer text curated twice in part 2 (MB)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary workspace and Prefect home")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-orch-"))
    isolate_prefect(tmp / "prefect-home")
    from lib.config import load_config
    from lib.data.corpus import build_demo_buffer, build_stdlib_corpus
    from lib.workspace import Workspace

    cfg = load_config(None, preset="tiny", overrides=[
        f"workspace.root={tmp / 'ws'}", "workspace.corpus=bench",
        f"model.pretrain_iterations={args.pretrain_steps}", f"training.num_iterations={args.steps}",
        f"eval.max_docs={args.eval_docs}"])
    ws = Workspace(cfg.workspace.root).ensure()
    try:
        t0 = time.perf_counter()
        build_stdlib_corpus(ws, "bench", max_mb=args.corpus_mb)
        demo = build_demo_buffer(ws, max_bytes=int(args.buffer_kb * 1000))
        from flows.bootstrap import bootstrap
        from flows.consolidate import nightly_consolidation
        from flows.curation import curate

        boot, boot_wall = timed(bootstrap, cfg)  # also starts the ephemeral API
        print(f"setup: corpus {args.corpus_mb} MB, demo buffer {demo['records']} docs / {demo['bytes']:,} B, "
              f"v0 {boot['status']} ({args.pretrain_steps} steps) in {boot_wall:.1f} s; "
              f"{time.perf_counter() - t0:.1f} s with the API start")

        # -- part 1: the night's wall time against its stages' own time
        night, wall = timed(nightly_consolidation, cfg)
        own, flow_side = night["own_timings"], night["timings"]
        print(f"\nnightly flow ({night['status']}, {night.get('curated_docs')} curated docs, {args.steps} steps):")
        print(f"  {'stage':<10} {'own s':>8} {'flow-side s':>12} {'task overhead s':>16}")
        for stage in flow_side:
            print(f"  {stage:<10} {own.get(stage, 0.0):8.3f} {flow_side[stage]:12.3f} {flow_side[stage] - own.get(stage, 0.0):16.3f}")
        total_own, total_side = sum(own.values()), sum(flow_side.values())
        print(f"  {'sum':<10} {total_own:8.3f} {total_side:12.3f} {total_side - total_own:16.3f}")
        ratio = wall / total_own
        print(f"flow wall {wall:.3f} s / sum of own {total_own:.3f} s = {ratio:.3f}x "
              f"(target <= {OVERHEAD_TARGET}x: {'PASS' if ratio <= OVERHEAD_TARGET else 'FAIL'}); "
              f"overhead {wall - total_own:.2f} s, of which outside the stages {wall - total_side:.2f} s")
        print(f"an overhead of {wall - total_own:.1f} s is within {OVERHEAD_TARGET}x from "
              f"{(wall - total_own) / (OVERHEAD_TARGET - 1):.0f} s of stage work on")

        # -- part 2: curation twice on the same new buffer files
        added = add_package_buffer(ws, cfg, int(args.curate_mb * 1e6))
        from tasks.cache_keys import code_digest
        from tasks.data import CURATION_PACKAGES

        code = code_digest(CURATION_PACKAGES)  # the cache keys hash the lib code too
        first, first_wall = timed(curate, cfg)
        again, again_wall = timed(curate, cfg)
        if code_digest(CURATION_PACKAGES) != code:
            print("\nWARNING: lib curation code changed on disk between the two runs (an edit while the bench "
                  "ran): the re-run rightly missed the cache; run the bench again")
        print(f"\ncuration flow on {first['pending_files']} new buffer files ({added['records']} docs, {added['bytes']:,} B):")
        print(f"  {'run':<8} {'wall s':>8} {'ingest s':>9} {'curate s':>9} {'own s':>8} {'docs out':>9}")
        for name, res, w in (("first", first, first_wall), ("re-run", again, again_wall)):
            t, o = res["timings"], res["own_timings"]
            print(f"  {name:<8} {w:8.3f} {t.get('ingest', 0):9.3f} {t.get('curate', 0):9.3f} {sum(o.values()):8.3f} "
                  f"{res['stats']['docs_out']:9d}")
        same = first["stats"]["docs_out"] == again["stats"]["docs_out"]

        def curation(res):  # as inside a night: the ingest and curate stages
            return res["timings"]["ingest"] + res["timings"]["curate"]

        rerun = curation(again) / curation(first)
        print(f"curation: re-run {curation(again):.3f} s / first {curation(first):.3f} s = {rerun:.1%} "
              f"(target <= {RERUN_TARGET:.0%}: {'PASS' if rerun <= RERUN_TARGET and same else 'FAIL'}"
              f"{'' if same else ', different output'})")
        print(f"flow wall: re-run {again_wall:.3f} s / first {first_wall:.3f} s = {again_wall / first_wall:.1%} "
              f"(the curate flow's own start and end included)")
        mb_per_s = added["bytes"] / 1e6 / curation(first)
        print(f"at {mb_per_s:.1f} MB/s of curation, a re-run of {curation(again):.1f} s is within {RERUN_TARGET:.0%} "
              f"from {curation(again) / RERUN_TARGET * mb_per_s:.0f} MB of buffer per night on")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
