"""Overhead of the capture proxy: the same load against the upstream direct and through the proxy.

- Builds a throw-away workspace with a random-initialised Llama of the `tiny` preset's shape,
  starts `consolidate serve` (capture off: the baseline is HTTP + generation only) and
  `consolidate proxy --upstream` in front of it (capture on, fsync'd write-ahead log), each its
  own process on 127.0.0.1, as a user would run them.
- N concurrent clients (default 8), in alternating rounds direct / proxied / direct / ... of
  --seconds each, so that a machine whose load drifts weighs on both sides alike.
- Checks the capture: after the proxy's SIGTERM, records in its buffer == proxied 200s.
- Prints p50/p99 latency and requests/s of both and the ratios proxied / direct; the goal is
  p50 ratio <= 1.05. Exits 1 if a capture is missing.

    .venv/bin/python bench/bench_proxy.py --clients 8 --rounds 4 --seconds 8 --max-tokens 16 [--stream] [--durability flush]
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
from lib.workspace import Workspace  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", *args, "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc), its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_of(base: str, clients: int, seconds: float, max_tokens: int, stream: bool) -> tuple[list[float], int]:
    """Latencies (s, to the last byte) of every 200 and the count of failures."""
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as http:
            i = 0
            while time.monotonic() < stop:
                body = {"prompt": f"# client {k}, request {i}\ndef ", "max_tokens": max_tokens, "temperature": 0.8, "stream": stream}
                t0 = time.perf_counter()
                with http.stream("POST", "/v1/completions", json=body) as r:
                    r.read()
                dt = time.perf_counter() - t0
                with lock:
                    if r.status_code == 200:
                        latencies.append(dt)
                    else:
                        failures[0] += 1
                i += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures[0]


def stats(latencies: list[float], seconds: float) -> dict[str, float]:
    q = statistics.quantiles(latencies, n=100)
    return {"p50_ms": 1000 * statistics.median(latencies), "p99_ms": 1000 * q[98], "rps": len(latencies) / seconds, "n": len(latencies)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--stream", action="store_true", help="streamed answers (server-sent events), latency to the last byte")
    ap.add_argument("--durability", choices=["fsync", "flush"], default="fsync", help="the proxy's buffer.durability")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    up_ws, px_ws = Workspace(tmp / "up").ensure(), Workspace(tmp / "px").ensure()
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={up_ws.root}"])
    build_random_champion(up_ws, cfg)
    common = ["--preset", "tiny", "--set", "serve.max_new_tokens=512"]
    up_port, px_port = free_port(), free_port()
    upstream = start(["serve", "-w", str(up_ws.root), "--no-capture", *common], up_port, tmp / "serve.log")
    # the proxy's workspace knows v0 as its champion: it stamps v0 and renders chats with v0's tokenizer
    from lib.registry.lineage import Lineage

    lin = Lineage(px_ws.lineage_db)
    lin.record_version("v0", up_ws.checkpoint("v0"), status="accepted", storage="full")
    lin.set_alias("champion", "v0", actor="bootstrap")
    proxy = start(["proxy", "--upstream", f"http://127.0.0.1:{up_port}", "-w", str(px_ws.root), *common,
                   "--set", f"buffer.durability={args.durability}"], px_port, tmp / "proxy.log")
    direct, proxied, failures = [], [], 0
    try:
        round_of(f"http://127.0.0.1:{px_port}", args.clients, 2.0, args.max_tokens, args.stream)  # warm-up (both paths)
        time.sleep(1.0)  # the warm-up's last captures run after their answers
        warm = httpx.get(f"http://127.0.0.1:{px_port}/health").json()["captured"]
        cpu0 = {name: cpu_seconds(p.pid) for name, p in (("proxy", proxy), ("upstream", upstream))}
        for r in range(args.rounds):
            for name, port, out in (("direct", up_port, direct), ("proxied", px_port, proxied)):
                lat, failed = round_of(f"http://127.0.0.1:{port}", args.clients, args.seconds, args.max_tokens, args.stream)
                out.extend(lat)
                failures += failed
                print(f"round {r + 1} {name:8s}: {len(lat)} requests, p50 {1000 * statistics.median(lat):.1f} ms", flush=True)
        time.sleep(1.0)
        cpu = {name: cpu_seconds(p.pid) - cpu0[name] for name, p in (("proxy", proxy), ("upstream", upstream))}
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(120)
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(120)
    captured = sum(pq.read_metadata(p).num_rows for p in px_ws.buffers.glob("buffer_*.parquet"))
    seconds = args.rounds * args.seconds
    d, p = stats(direct, seconds), stats(proxied, seconds)
    print(f"\n{args.clients} clients, {args.rounds} x {args.seconds:g} s per side, max_tokens {args.max_tokens}, "
          f"{'streamed' if args.stream else 'not streamed'}, proxy buffer.durability={args.durability}")
    print(f"{'':10s} {'p50 ms':>8s} {'p99 ms':>8s} {'req/s':>8s} {'n':>6s}")
    for name, s in (("direct", d), ("proxied", p)):
        print(f"{name:10s} {s['p50_ms']:8.1f} {s['p99_ms']:8.1f} {s['rps']:8.1f} {s['n']:6d}")
    print(f"ratio proxied/direct: p50 {p['p50_ms'] / d['p50_ms']:.3f}, p99 {p['p99_ms'] / d['p99_ms']:.3f}, "
          f"req/s {p['rps'] / d['rps']:.3f} (goal: p50 <= 1.05)")
    # CPU, not wall time: what the proxy costs whatever else the machine runs (the proxy idles in direct rounds)
    print(f"CPU per request: proxy {1000 * cpu['proxy'] / len(proxied):.2f} ms (capture included), "
          f"upstream {1000 * cpu['upstream'] / (len(direct) + len(proxied)):.2f} ms")
    ok = captured == warm + len(proxied) and failures == 0
    print(f"capture: {captured} records for {len(proxied)} proxied 200s + {warm} warm-up; failures {failures}: {'ok' if ok else 'MISSING'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
