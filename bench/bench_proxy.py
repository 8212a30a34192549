"""Overhead of the capture proxy: the same load against the upstream direct and through the proxy.

- Builds a throw-away workspace with a random-initialised Llama of the `tiny` preset's shape,
  starts `consolidate serve` (capture off: the baseline is HTTP + generation only) and
  `consolidate proxy --upstream` in front of it (capture on, fsync'd write-ahead log), each its
  own process on 127.0.0.1, as a user would run them.
- N concurrent clients (default 8), in alternating rounds direct / proxied / direct / ... of
  --seconds each, so that a machine whose load drifts weighs on both sides alike.
- Two placements (--placement, default both, each with its own pair of processes):
  `shared`: no pinning, the upstream, the proxy and the clients share every core (on a 2-core
  machine the proxy's CPU is taken from the CPU-bound upstream's generation); `split`: the
  upstream pinned to core 0, the proxy and the clients to the other cores, the deployment where
  the engine generates on a GPU and the proxy's CPU runs beside it.
- Reports the proxy's own CPU per proxied request (user + system, its capture writer included,
  measured once every capture has been written), and checks the capture: after the proxy's
  SIGTERM, records in its buffer == proxied 200s.
- Prints p50/p99 latency and requests/s of both and the ratios proxied / direct; the goal is
  p50 ratio <= 1.05. Exits 1 if a capture is missing.

    .venv/bin/python bench/bench_proxy.py --clients 8 --rounds 4 --seconds 8 --max-tokens 16 [--stream] [--placement shared|split|both]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.bench_serve_load import build_random_champion  # noqa: E402
from lib.config import load_config  # noqa: E402
from lib.registry.lineage import Lineage  # noqa: E402
from lib.workspace import Workspace  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], port: int, log: Path, cores: set[int] | None = None) -> subprocess.Popen:
    """`python -m cli.main ARGS` ready once /health answers; pinned to `cores` from its first
    instruction (so torch sizes its thread pool to them)."""
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # keep a --target install's
    env = {**os.environ, "PYTHONPATH": pythonpath, "TOKENIZERS_PARALLELISM": "false"}
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", *args, "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, preexec_fn=pin)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{args[0]} exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{args[0]} did not start:\n{log.read_text()[-2000:]}")


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of a process (Linux /proc), its threads included, or of one thread."""
    stat = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proxy_cpu(pid: int) -> dict[str, float]:
    """The proxy's CPU seconds: its event loop (the main thread) and everything else (the capture
    writer, parquet flushes, the tokenizer load)."""
    total, loop = cpu_seconds(pid), cpu_seconds(pid, pid)
    return {"loop": loop, "other": total - loop}


def round_of(base: str, clients: int, seconds: float, max_tokens: int, stream: bool) -> tuple[list[float], list[str]]:
    """Latencies (s, to the last byte) of every 200, and what each failure was."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as http:
            i = 0
            while time.monotonic() < stop:
                body = {"prompt": f"# client {k}, request {i}\ndef ", "max_tokens": max_tokens, "temperature": 0.8, "stream": stream}
                i += 1
                t0 = time.perf_counter()
                try:
                    with http.stream("POST", "/v1/completions", json=body) as r:
                        r.read()
                except httpx.HTTPError as exc:
                    with lock:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    continue
                dt = time.perf_counter() - t0
                with lock:
                    if r.status_code == 200:
                        latencies.append(dt)
                    else:
                        failures.append(f"{r.status_code} {r.text[:300]}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures


def stats(latencies: list[float], seconds: float) -> dict[str, float]:
    q = statistics.quantiles(latencies, n=100)
    return {"p50_ms": 1000 * statistics.median(latencies), "p99_ms": 1000 * q[98], "rps": len(latencies) / seconds, "n": len(latencies)}


def drained(base: str, timeout: float = 60) -> dict:
    """The proxy's /health once every forwarded request has been captured (or counted as not):
    its writer thread works behind the answers."""
    deadline = time.monotonic() + timeout
    while True:
        h = httpx.get(f"{base}/health").json()
        if h["captured"] + h["not_captured"] + h["capture_failed"] >= h["forwarded"] or time.monotonic() > deadline:
            return h
        time.sleep(0.05)


def measure(placement: str, args: argparse.Namespace, tmp: Path) -> dict:
    """One placement: its own upstream and proxy, warm-up, then alternating rounds."""
    ncores = os.cpu_count() or 1
    if placement == "split" and ncores < 2:
        raise SystemExit("--placement split needs 2 cores or more")
    up_cores, px_cores = ({0}, set(range(1, ncores))) if placement == "split" else (None, None)
    all_cores = os.sched_getaffinity(0)
    if px_cores:
        os.sched_setaffinity(0, px_cores)  # the clients (this process) run beside the proxy, not the upstream
    tmp = tmp / placement
    up_ws, px_ws = Workspace(tmp / "up").ensure(), Workspace(tmp / "px").ensure()
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={up_ws.root}"])
    build_random_champion(up_ws, cfg)
    common = ["--preset", "tiny", "--set", "serve.max_new_tokens=512"]
    up_port, px_port = free_port(), free_port()
    upstream = start(["serve", "-w", str(up_ws.root), "--no-capture", *common], up_port, tmp / "serve.log", up_cores)
    # the proxy's workspace knows v0 as its champion: it stamps v0 and renders chats with v0's tokenizer
    lin = Lineage(px_ws.lineage_db)
    lin.record_version("v0", up_ws.checkpoint("v0"), status="accepted", storage="full")
    lin.set_alias("champion", "v0", actor="bootstrap")
    proxy = start(["proxy", "--upstream", f"http://127.0.0.1:{up_port}", "-w", str(px_ws.root), *common,
                   "--set", f"buffer.durability={args.durability}"], px_port, tmp / "proxy.log", px_cores)
    px_base = f"http://127.0.0.1:{px_port}"
    direct, proxied, pairs, failures = [], [], [], []
    load = [os.getloadavg()[0]]
    try:
        round_of(px_base, args.clients, 2.0, args.max_tokens, args.stream)  # warm-up (both paths)
        warm = drained(px_base)["captured"]
        up0, px0 = cpu_seconds(upstream.pid), proxy_cpu(proxy.pid)
        for r in range(args.rounds):
            p50 = {}
            for name, port, out in (("direct", up_port, direct), ("proxied", px_port, proxied)):
                lat, failed = round_of(f"http://127.0.0.1:{port}", args.clients, args.seconds, args.max_tokens, args.stream)
                out.extend(lat)
                failures += [f"{name}: {f}" for f in failed]
                p50[name] = statistics.median(lat)
            pairs.append(p50["proxied"] / p50["direct"])
            print(f"{placement} round {r + 1}: p50 direct {1000 * p50['direct']:.1f} ms, proxied {1000 * p50['proxied']:.1f} ms "
                  f"({pairs[-1]:.3f}); load average {os.getloadavg()[0]:.1f}", flush=True)
        drained(px_base)
        px1 = proxy_cpu(proxy.pid)
        cpu = {"upstream": cpu_seconds(upstream.pid) - up0, **{k: px1[k] - px0[k] for k in px1}}
        load.append(os.getloadavg()[0])
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(120)
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(120)
        os.sched_setaffinity(0, all_cores)
    captured = sum(pq.read_metadata(p).num_rows for p in px_ws.buffers.glob("buffer_*.parquet"))
    seconds = args.rounds * args.seconds
    return {"placement": placement, "direct": stats(direct, seconds), "proxied": stats(proxied, seconds),
            # CPU, not wall time: what the proxy costs whatever else the machine runs (it idles in direct rounds)
            "proxy_cpu_ms": {k: 1000 * cpu[k] / len(proxied) for k in ("loop", "other")},
            "upstream_cpu_ms": 1000 * cpu["upstream"] / (len(direct) + len(proxied)), "pairs": pairs,
            "ok": captured == warm + len(proxied) and not failures, "captured": captured, "expected": warm + len(proxied),
            "failures": failures, "load": load}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--stream", action="store_true", help="streamed answers (server-sent events), latency to the last byte")
    ap.add_argument("--durability", choices=["fsync", "flush"], default="fsync", help="the proxy's buffer.durability")
    ap.add_argument("--placement", choices=["shared", "split", "both"], default="both",
                    help="shared: every process on every core; split: the upstream on core 0, the proxy and the clients on the others")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    results = [measure(p, args, tmp) for p in (("shared", "split") if args.placement == "both" else (args.placement,))]
    print(f"\n{args.clients} clients, {args.rounds} x {args.seconds:g} s per side, max_tokens {args.max_tokens}, "
          f"{'streamed' if args.stream else 'not streamed'}, proxy buffer.durability={args.durability}, {os.cpu_count()} cores")
    print(f"{'placement':9s} {'':8s} {'p50 ms':>8s} {'p99 ms':>8s} {'req/s':>8s} {'n':>6s}")
    for res in results:
        for name in ("direct", "proxied"):
            s = res[name]
            print(f"{res['placement']:9s} {name:8s} {s['p50_ms']:8.1f} {s['p99_ms']:8.1f} {s['rps']:8.1f} {s['n']:6d}")
    for res in results:
        d, p = res["direct"], res["proxied"]
        ratio = p["p50_ms"] / d["p50_ms"]
        cpu = res["proxy_cpu_ms"]
        print(f"{res['placement']}: ratio proxied/direct p50 {ratio:.3f} ({'met' if ratio <= 1.05 else 'NOT met'}: goal <= 1.05; "
              f"median of the rounds' ratios {statistics.median(res['pairs']):.3f}), p99 {p['p99_ms'] / d['p99_ms']:.3f}, "
              f"req/s {p['rps'] / d['rps']:.3f}; load average {res['load'][0]:.1f} -> {res['load'][-1]:.1f}")
        print(f"{res['placement']}: CPU per request: proxy {cpu['loop'] + cpu['other']:.2f} ms (event loop {cpu['loop']:.2f}, "
              f"capture writer and flushes {cpu['other']:.2f}), upstream {res['upstream_cpu_ms']:.2f} ms")
        print(f"{res['placement']}: capture {res['captured']} records for {res['expected']} proxied 200s (warm-up included); "
              f"failures {len(res['failures'])}: {'ok' if res['ok'] else 'MISSING' if res['captured'] != res['expected'] else 'FAILED'}")
        for failure in res["failures"][:5]:
            print(f"  {failure}")
    return 0 if all(res["ok"] for res in results) else 1


if __name__ == "__main__":
    sys.exit(main())
