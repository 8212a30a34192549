"""Long-term memory (issue #14): does what night 1 taught survive three more nights, per replay policy?

The real pipeline end to end: `flows.bootstrap.bootstrap` pre-trains v0 on the tiny preset, then
`flows.consolidate.nightly_consolidation` runs 4 nights per configuration (curate, replay-mix,
torchrun, evaluate, gate, remember, store), each configuration from the same v0:

  corpus     today's replay: the stdlib corpus only (sampling.memory_ratio=0)
  memory     memory replay, the defaults (memory_ratio 0.1, memory_recency 0.7, exposure power 1)
  none       no replay at all: tonight's documents only (new_data_ratio=1, memory_ratio=0)
  generated  no original corpus: a workspace adopted from a copy of v0's folder with
             `consolidate init --replay generate:N` (v0's own samples are the replay corpus;
             memory replay off, so it compares with `corpus` and `none`)

Each night's buffer is a different installed package's .py sources (the same parquet file, with
the same record ids, copied into every workspace, so every configuration trains and holds out the
same documents); a fifth package is never trained: its text measures general drift. The gate is
made permissive (every threshold 1000%) so that every night is accepted and forgetting can be
measured, as in the issue's measurement. One seed.

At the end every version of every configuration is scored with lib.evaluation.evaluate (bits per byte, the
nights' eval cache reused where the nightly evaluation scored the same text with the same weights)
on the same fixed sets: old_val (the stdlib corpus's held-out split, all of it), night 1's
trained-on documents, each night's held-out documents, the control package. Printed per
configuration: the retention matrix, night 1's held-out gain kept after night 4 (as a share of
the gain night 1 made), old_val's change v0 -> v4, and the issue's goals with PASS/FAIL:

  memory replay keeps >= 80% of night 1's held-out gain, and old_val rises <= 1% (v0 -> v4)
  self-generated replay removes >= half of the no-replay rise of old_val (v0 -> v4)

    .venv/bin/python bench/bench_memory.py [--workdir DIR] [--jobs 2] [--configs corpus,memory,none,generated]
        [--variant NAME=section.key=value,...] [--pretrain-steps 150] [--night-steps 40]

`--workdir` keeps the workspaces and is picked up where it stopped: a v0 found there is reused,
accepted nights are not trained again, and the scores come from the eval cache (so a knob trial
costs only its own nights). `--variant mem20=sampling.memory_ratio=0.2` adds a configuration
from the same v0. `--jobs N` runs N configurations at once, each in its own process with its own
ephemeral Prefect API (log in <workdir>/<name>.log), after v0.

Cost (2-core machine, 1 torch thread a process): v0 in 203 s, a night in 45-135 s (the nightly
evaluation of old_val, 478 kB, is most of it), the whole run in 24 min with --jobs 2 at load 3-4.
With torch's default of 2 threads a process on the loaded machine, the same nights took 265-750 s.
The buffer records get new ids each run (Buffer's UUIDs), so another workdir holds out
other files of each package: a second sample of the split, v0 being the same bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NIGHT_PACKAGES = ["griffe", "websockets", "anyio", "starlette"]
CONTROL_PACKAGE = "packaging"
# the permissive gate: every night accepted, so forgetting shows instead of being refused
PERMISSIVE = ["gate.max_forgetting=10", "gate.max_memory_forgetting=10", "gate.max_cumulative_forgetting=10",
              "gate.min_acquisition=-10"]
CONFIGS = {
    "corpus": ["sampling.memory_ratio=0"],
    "memory": [],
    "none": ["sampling.new_data_ratio=1", "sampling.memory_ratio=0"],
    "generated": ["sampling.memory_ratio=0"],
}


def site_packages() -> Path:
    import pyarrow

    return Path(pyarrow.__file__).resolve().parents[1]


def package_texts(name: str, max_bytes: int, max_chars: int = 4000, min_chars: int = 1500) -> list[str]:
    """The package's .py files of at least `min_chars`, each cut at `max_chars`, in path order, up
    to `max_bytes` of text."""
    out, size = [], 0
    for p in sorted((site_packages() / name).rglob("*.py")):
        if "__pycache__" in p.parts or "tests" in p.parts:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) < min_chars:
            continue
        text = text[:max_chars]
        out.append(text)
        size += len(text.encode("utf-8"))
        if size >= max_bytes:
            break
    return out


def night_buffers(folder: Path, night_bytes: int) -> list[Path]:
    """One buffer parquet file per night (through Buffer: the ids are fixed from here on)."""
    from lib.buffer.store import Buffer

    files = []
    for k, pkg in enumerate(NIGHT_PACKAGES, start=1):
        sub = folder / f"night{k}"
        if not any(sub.glob("*.parquet")):
            shutil.rmtree(sub, ignore_errors=True)
            buf = Buffer(sub)
            buf.add_many(package_texts(pkg, night_bytes), source=f"bench:{pkg}")
            buf.close(flush=True)
        (file,) = sorted(sub.glob("*.parquet"))
        files.append(file)
    return files


def config(ws_root: Path, args, *extra: str):
    from lib.config import load_config

    return load_config(preset="tiny", overrides=[
        f"workspace.root={ws_root}", f"model.pretrain_iterations={args.pretrain_steps}",
        f"training.num_iterations={args.night_steps}", f"training.lr_scale={args.lr_scale}",
        f"sampling.heldout_fraction={args.heldout_fraction}", *PERMISSIVE, *extra])


def bootstrap_v0(base: Path, args) -> float:
    """v0 pre-trained by the bootstrap flow (the embedded stdlib corpus); a placeholder buffer
    record keeps the demo buffer out, and is removed afterwards."""
    from flows.bootstrap import bootstrap
    from lib.buffer.store import Buffer
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    ws = Workspace(base)
    if (ws.lineage_db).is_file() and Lineage(ws.lineage_db).alias("champion") == "v0":
        print(f"v0: reused from {base}")
        return 0.0
    shutil.rmtree(base, ignore_errors=True)
    ws.ensure()
    buf = Buffer(ws.buffers)
    buf.add("placeholder, so that the bootstrap builds no demo buffer", source="bench:placeholder")
    buf.close(flush=True)
    t0 = time.perf_counter()
    out = bootstrap(config(base, args))
    for f in ws.buffers.glob("*.parquet"):
        f.unlink()
    seconds = time.perf_counter() - t0
    print(f"v0: {out['status']} in {seconds:.0f} s")
    return seconds


def clone(src: Path, dst: Path):
    """A copy of a workspace whose lineage points at the copy's own version folders."""
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, symlinks=True)
    with Lineage(dst / "lineage.duckdb").transaction() as con:
        con.execute("UPDATE versions SET path = replace(path, ?, ?)", [str(src), str(dst)])
    return Workspace(dst)


def adopt_generated(base: Path, dst: Path, args, extra: list[str]) -> None:
    """`consolidate init --model <copy of v0> --replay generate:N --original-lr <v0's>`."""
    from lib.checkpoints.checkpoint import read_meta

    shutil.rmtree(dst, ignore_errors=True)
    incoming = dst / "incoming" / "v0"
    shutil.copytree(base / "checkpoints" / "v0", incoming)
    lr = read_meta(base / "checkpoints" / "v0").get("original_lr") or config(base, args).model.pretrain_lr
    sets = [s for o in [f"model.pretrain_iterations={args.pretrain_steps}", f"training.num_iterations={args.night_steps}",
                         f"training.lr_scale={args.lr_scale}", f"sampling.heldout_fraction={args.heldout_fraction}",
                         *PERMISSIVE, *extra] for s in ("--set", o)]
    cmd = [str(ROOT / ".venv" / "bin" / "consolidate"), "init", "--model", str(incoming),
           "--replay", f"generate:{args.generate_tokens}", "--original-lr", repr(lr), "-w", str(dst), "--preset", "tiny", *sets]
    print("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    print(proc.stdout[-3000:])
    if proc.returncode:
        sys.exit(f"consolidate init failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def run_children(work: Path, configs: dict[str, list[str]], args) -> float:
    """Each configuration's nights (and its scoring) in a process of its own, `args.jobs` at a
    time; output in <workdir>/<name>.log. Returns the wall seconds."""
    t0 = time.perf_counter()
    todo, running = list(configs), {}
    passthrough = [a for a in sys.argv[1:]]
    while todo or running:
        while todo and len(running) < args.jobs:
            name = todo.pop(0)
            cmd = [sys.executable, str(Path(__file__).resolve()), *passthrough, "--workdir", str(work), "--only", name]
            running[name] = subprocess.Popen(cmd, stdout=open(work / f"{name}.log", "w"), stderr=subprocess.STDOUT, cwd=ROOT)
            print(f"[{name}] started (log {work / f'{name}.log'})", flush=True)
        time.sleep(5)
        for name, proc in list(running.items()):
            if proc.poll() is not None:
                del running[name]
                tail = [l for l in (work / f"{name}.log").read_text().splitlines() if l.startswith(f"[{name}]")]
                print("\n".join(tail), flush=True)
                if proc.returncode:
                    sys.exit(f"[{name}] failed ({proc.returncode}); see {work / f'{name}.log'}")
    return time.perf_counter() - t0


def run_nights(name: str, ws_root: Path, files: list[Path], args, extra: list[str]) -> list[dict]:
    from flows.consolidate import nightly_consolidation
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    ws = Workspace(ws_root)
    cfg = config(ws_root, args, *extra)
    lin = Lineage(ws.lineage_db)
    nights = []
    for k, f in enumerate(files, start=1):
        version = f"v{k}"
        done = lin.get_version(version)
        if done is not None and done["status"] == "accepted":
            print(f"[{name}] night {k}: {version} already accepted, reused")
            nights.append({"version": version, "status": "accepted", "reused": True})
            continue
        shutil.copy2(f, ws.buffers / f.name)
        t0 = time.perf_counter()
        out = nightly_consolidation(cfg)
        seconds = time.perf_counter() - t0
        rules = {r["name"]: r["measured"] for r in out["gate"]["rules"]} if out.get("gate") else {}
        print(f"[{name}] night {k} ({NIGHT_PACKAGES[k - 1]}): {out['version']} {out['status']} in {seconds:.0f} s; "
              f"gate measured " + ", ".join(f"{n} {v:+.2%}" for n, v in rules.items() if isinstance(v, (int, float))), flush=True)
        if out["status"] != "accepted" or out["version"] != version:
            sys.exit(f"[{name}] night {k} was not accepted as {version}: {json.dumps(out, default=str)[:2000]}")
        nights.append({"version": out["version"], "status": out["status"], "seconds": seconds, "timings": out.get("timings")})
    return nights


def eval_sets(base: Path, ws_root: Path, args) -> dict[str, list[str]]:
    """The fixed sets, built the way the nightly evaluation builds them (lib.evaluation.evaluate's sample:
    the same texts, so the eval cache hits): old_val of the stdlib corpus (in the v0 workspace
    `base`), night 1's trained-on documents and each night's held-out documents (of `ws_root`: the
    same in every workspace, main() checks), the control package."""
    from lib.evaluation.sets import OLD_VAL, parquet_texts, fixed_sample, run_eval_sets
    from lib.workspace import Workspace

    cfg = config(ws_root, args)
    mx, mb = cfg.eval.max_docs, cfg.eval.max_bytes
    ws = Workspace(ws_root)
    sets = {"old_val": run_eval_sets(Workspace(base), "stdlib", None, mx, mb)[OLD_VAL]}
    for k in range(1, len(NIGHT_PACKAGES) + 1):
        heldout = parquet_texts([ws.memory / f"v{k}" / "heldout.parquet"])
        if k == 1:
            sets["n1_train"] = fixed_sample(parquet_texts((ws.memory / "v1" / "train").glob("*.parquet"), {i for i, _ in heldout}), mx, mb)
        sets[f"n{k}_heldout"] = fixed_sample(heldout, mx, mb)
    sets["control"] = package_texts(CONTROL_PACKAGE, args.night_kb * 1000)
    return sets


def evaluate_all(name: str, ws_root: Path, sets: dict[str, list[str]], args) -> dict[str, dict[str, float]]:
    """{version: {set: bpb}} for v0..v4, lib.evaluation.evaluate with the workspace's eval cache."""
    from lib.evaluation.evaluate import EvalModel, cached_bits_per_byte, eval_window
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    ws = Workspace(ws_root)
    cfg = config(ws_root, args)
    lin = Lineage(ws.lineage_db)
    out = {}
    for k in range(len(NIGHT_PACKAGES) + 1):
        version = f"v{k}"
        em = EvalModel.load(lin.get_version(version)["path"], max_len=eval_window(cfg), separator=cfg.tokenizer.document_separator)
        out[version] = {s: cached_bits_per_byte(em, texts, cfg.eval.batch_size, ws.eval_cache, None, s) for s, texts in sets.items()}
        del em
    return out


def summarize(name: str, m: dict[str, dict[str, float]]) -> dict[str, float]:
    """Night 1's held-out gain kept after the last night, as is and net of the general drift the
    never-trained control package shows (each a relative change against v0, the control's
    subtracted, the last night's over night 1's), old_val and control v0 -> last, and the mean
    change each night made on its own held-out set."""
    last = f"v{len(NIGHT_PACKAGES)}"

    def rel(v: str, st: str) -> float:
        return m[v][st] / m["v0"][st] - 1

    gain1 = m["v0"]["n1_heldout"] - m["v1"]["n1_heldout"]
    kept = (m["v0"]["n1_heldout"] - m[last]["n1_heldout"]) / gain1 if gain1 > 0 else float("nan")
    gain1_train = m["v0"]["n1_train"] - m["v1"]["n1_train"]
    kept_train = (m["v0"]["n1_train"] - m[last]["n1_train"]) / gain1_train if gain1_train > 0 else float("nan")
    net1 = rel("v1", "n1_heldout") - rel("v1", "control")
    kept_net = (rel(last, "n1_heldout") - rel(last, "control")) / net1 if net1 < 0 else float("nan")
    learned = [m[f"v{k}"][f"n{k}_heldout"] / m[f"v{k - 1}"][f"n{k}_heldout"] - 1 for k in range(1, len(NIGHT_PACKAGES) + 1)]
    return {
        "n1_gain": gain1, "n1_kept": kept, "n1_kept_net": kept_net, "n1_train_kept": kept_train,
        "old_val_change": rel(last, "old_val"),
        "old_val_rise_bpb": m[last]["old_val"] - m["v0"]["old_val"],
        "control_change": rel(last, "control"),
        "mean_night_learning": sum(learned) / len(learned),
    }


def print_matrix(name: str, m: dict[str, dict[str, float]], s: dict[str, float]) -> str:
    sets = list(next(iter(m.values())))
    head = "| after | " + " | ".join(sets) + " |"
    lines = [f"**{name}**", "", head, "|" + "---|" * (len(sets) + 1)]
    for k, (version, row) in enumerate(m.items()):
        cells = []
        for st in sets:
            cell = f"{row[st]:.4f}"
            if version != "v0":
                cell += f" ({row[st] / m['v0'][st] - 1:+.1%})"
            cells.append(cell)
        lines.append(f"| {'v0' if k == 0 else f'night {k}'} | " + " | ".join(cells) + " |")
    lines += ["", f"night 1 held-out gain {s['n1_gain']:.4f} bpb, kept after night 4: {s['n1_kept']:.0%} "
                  f"(net of the control's drift: {s['n1_kept_net']:.0%}; trained-on: {s['n1_train_kept']:.0%}); old_val v0->v4 {s['old_val_change']:+.2%}; "
                  f"control {s['control_change']:+.2%}; each night's own held-out set, mean change {s['mean_night_learning']:+.1%}"]
    text = "\n".join(lines)
    print(text + "\n")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=None, help="keep workspaces here (a v0 found there is reused)")
    ap.add_argument("--configs", default="corpus,memory,none,generated")
    ap.add_argument("--variant", action="append", default=[], help="NAME=section.key=value,... (from the memory defaults)")
    ap.add_argument("--pretrain-steps", type=int, default=150)
    ap.add_argument("--night-steps", type=int, default=40)
    ap.add_argument("--lr-scale", type=float, default=0.1)
    ap.add_argument("--heldout-fraction", type=float, default=0.2)
    ap.add_argument("--night-kb", type=int, default=80, help="text per night's buffer (and of the control), kB")
    ap.add_argument("--generate-tokens", type=int, default=300_000)
    ap.add_argument("--threads", type=int, default=1, help="torch (OpenMP) threads of every process of the bench")
    ap.add_argument("--jobs", type=int, default=1, help="configurations run as this many processes at once (after v0)")
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)  # a child process: nights of one configuration
    args = ap.parse_args()

    t_start = time.perf_counter()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    configs = {c: CONFIGS[c] for c in args.configs.split(",") if c}
    for v in args.variant:
        vname, _, sets = v.partition("=")
        configs[vname] = [s for s in sets.split(",") if s]
    if args.only:
        configs = {args.only: configs[args.only]}
    # torch threads per process, inherited by torchrun and the CLI: on this 2-core machine under
    # load, 2 threads cost 14x the CPU of 1 for the same generation steps (OpenMP threads spinning)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    home = work / f"prefect-home-{args.only or 'main'}"  # one per process: an ephemeral API each
    home.mkdir(exist_ok=True)
    os.environ["PREFECT_HOME"] = str(home)  # never the shared ~/.prefect
    os.environ.pop("PREFECT_API_URL", None)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

    files = night_buffers(work / "buffers", args.night_kb * 1000)
    print(f"workdir {work}; nights: " + ", ".join(f"{p} ({f.stat().st_size:,} B parquet)" for p, f in zip(NIGHT_PACKAGES, files))
          + f"; control {CONTROL_PACKAGE}; load {os.getloadavg()[0]:.1f}", flush=True)

    timings = {} if args.only else {"bootstrap": bootstrap_v0(work / "v0", args)}
    if args.jobs > 1 and not args.only and len(configs) > 1:
        timings["configurations in parallel"] = run_children(work, configs, args)
    roots = {}
    for name, extra in configs.items():
        root = work / name
        t0 = time.perf_counter()
        if name == "generated":
            if not (root / "lineage.duckdb").is_file():
                adopt_generated(work / "v0", root, args, extra)
        elif not (root / "lineage.duckdb").is_file():
            clone(work / "v0", root)
        run_nights(name, root, files, args, extra)
        roots[name] = root
        # scored here too: in a child process, the parent then reads every figure from the eval cache
        evaluate_all(name, root, eval_sets(work / "v0", root, args), args)
        timings[name] = time.perf_counter() - t0
        print(f"[{name}] nights and evaluation: {timings[name]:.0f} s", flush=True)
    if args.only:
        return

    t0 = time.perf_counter()
    ref = next(iter(roots))
    sets = eval_sets(work / "v0", roots[ref], args)
    for name, root in roots.items():  # every configuration trained and held out the same documents
        if eval_sets(work / "v0", root, args) != sets:
            sys.exit(f"{name} held out other documents than {ref}: the sets would not be the same")
    print("eval sets: " + ", ".join(f"{k} {len(v)} docs {sum(len(t.encode()) for t in v):,} B" for k, v in sets.items()))
    results, summaries = {}, {}
    for name, root in roots.items():
        results[name] = evaluate_all(name, root, sets, args)
        summaries[name] = summarize(name, results[name])
    timings["final_eval"] = time.perf_counter() - t0

    print("\nbits per byte (change against v0), one seed\n")
    for name in roots:
        print_matrix(name, results[name], summaries[name])
    print("| configuration | night 1 held-out gain kept after night 4 | the same, net of the control's drift | night 1 trained-on kept | old_val v0 -> v4 | control v0 -> v4 | each night on its own held-out set (mean) |")
    print("|---|---|---|---|---|---|---|")
    for name, s in summaries.items():
        print(f"| {name} | {s['n1_kept']:.0%} | {s['n1_kept_net']:.0%} | {s['n1_train_kept']:.0%} | {s['old_val_change']:+.2%} | "
              f"{s['control_change']:+.2%} | {s['mean_night_learning']:+.1%} |")

    print("\ngoals (issue #14)")
    if "memory" in summaries:
        s = summaries["memory"]
        print(f"  memory replay keeps >= 80% of night 1's held-out gain: {s['n1_kept']:.0%} -> {'PASS' if s['n1_kept'] >= 0.8 else 'FAIL'}")
        print(f"  memory replay: old_val rises <= 1% (v0 -> v4): {s['old_val_change']:+.2%} -> {'PASS' if s['old_val_change'] <= 0.01 else 'FAIL'}")
    if "none" in summaries and "generated" in summaries:
        rise_none, rise_gen = summaries["none"]["old_val_rise_bpb"], summaries["generated"]["old_val_rise_bpb"]
        if rise_none <= 0:
            print(f"  self-generated replay halves the no-replay forgetting: n/a (no replay did not raise old_val: {rise_none:+.4f})")
        else:
            removed = 1 - rise_gen / rise_none
            print(f"  self-generated replay removes >= half of the no-replay rise of old_val: no replay {rise_none:+.4f} bpb, "
                  f"generated {rise_gen:+.4f} bpb, removed {removed:.0%} -> {'PASS' if removed >= 0.5 else 'FAIL'}")
        if "corpus" in summaries:
            rise_c = summaries["corpus"]["old_val_rise_bpb"]
            print(f"  (real-corpus replay: {rise_c:+.4f} bpb, removed {1 - rise_c / rise_none:.0%} of it)" if rise_none > 0 else "")
    timings["total"] = time.perf_counter() - t_start
    print("\nwall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()) + f"; load {os.getloadavg()[0]:.1f}")
    (work / "results.json").write_text(json.dumps({"matrices": results, "summaries": summaries, "timings": timings}, indent=2))


if __name__ == "__main__":
    main()
