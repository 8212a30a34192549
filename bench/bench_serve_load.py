"""Load test of the inference server on loopback: N concurrent clients for M seconds.

- Builds a throw-away workspace with one random-initialised Llama of the `tiny` preset's shape
  (or serves the champion of --workspace), starts `lib.serving.serve` with uvicorn on 127.0.0.1.
- Runs the same load twice in one process: capture off (the baseline: HTTP + generation only)
  and capture on (each answer written to the memory buffer, fsync'd write-ahead log).
- Checks the capture guarantee: after shutdown, records in the buffer == successful requests, each
  returned X-Capture-Id stored exactly once, no id duplicated. Exits 1 if not.
- Prints p50/p99 latency and requests/s of both runs and the ratio capture-on / capture-off.

    .venv/bin/python bench/bench_serve_load.py --clients 8 --seconds 10 --max-tokens 16
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from lib.config import load_config  # noqa: E402
from lib.registry.lineage import Lineage  # noqa: E402
from lib.registry.records import now, to_json
from lib.serving.serve import BackgroundServer, create_app  # noqa: E402
from lib.workspace import Workspace  # noqa: E402


def build_random_champion(ws: Workspace, cfg) -> None:
    """A random-init Llama of the preset's shape + a 1k BPE on stdlib text, registered as v0."""
    import sysconfig

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = ws.checkpoint("v0")
    texts = [p.read_text(errors="replace") for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:80]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=1024, special_tokens=["<|bos|>", "<|eos|>", "<|pad|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>")
    fast.save_pretrained(out)
    m = cfg.model
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=m.hidden_size, intermediate_size=m.intermediate_size or 4 * m.hidden_size,
        num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads, num_key_value_heads=m.num_kv_heads or m.num_heads,
        max_position_embeddings=m.max_position_embeddings, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id, tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    lineage = Lineage(ws.lineage_db)
    with lineage.transaction() as con:
        con.execute(
            "INSERT INTO versions (version, parent, path, status, storage, created_at, meta) VALUES ('v0', NULL, ?, 'accepted', 'full', ?, ?)",
            [str(out), now(), to_json({"bench": "random init"})],
        )
    lineage.set_alias("champion", "v0", actor="bootstrap", reason="bench_serve_load")


def buffer_ids(ws: Workspace) -> list[str]:
    ids: list[str] = []
    for path in sorted(ws.buffers.glob("buffer_*.parquet")):
        ids.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    return ids


def load(ws: Workspace, cfg, clients: int, seconds: float, max_tokens: int) -> dict:
    latencies: list[float] = []
    captured: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    before = set(buffer_ids(ws))
    with BackgroundServer(create_app(ws, cfg)) as srv:
        with httpx.Client(base_url=srv.base_url, timeout=120) as warm:  # first call pays lazy inits
            warm.post("/v1/completions", json={"prompt": "warm up", "max_tokens": 1, "capture": False})
        start = time.monotonic()
        deadline = start + seconds

        def client(k: int) -> None:
            with httpx.Client(base_url=srv.base_url, timeout=120) as http:
                i = 0
                while time.monotonic() < deadline:
                    t0 = time.perf_counter()
                    r = http.post("/v1/completions", json={"prompt": f"# client {k}, request {i}\ndef ", "max_tokens": max_tokens, "temperature": 0.8})
                    dt = time.perf_counter() - t0
                    with lock:
                        if r.status_code == 200:
                            latencies.append(dt)
                            if "x-capture-id" in r.headers:
                                captured.append(r.headers["x-capture-id"])
                        else:
                            errors.append(f"{r.status_code} {r.text[:200]}")
                    i += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
    stored = [i for i in buffer_ids(ws) if i not in before]
    lat = sorted(latencies)
    return {
        "ok": len(lat), "errors": errors, "rps": len(lat) / elapsed,
        "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan"),
        "captured": captured, "stored": stored,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--workspace", type=Path, help="serve this workspace's champion (default: a temporary random-init tiny model)")
    args = ap.parse_args()

    tmp = None
    if args.workspace is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench_serve_"))
        ws = Workspace(tmp / "ws").ensure()
    else:
        ws = Workspace(args.workspace)
    base = ["serve.reload_interval_s=2", f"workspace.root={ws.root}"]
    try:
        if tmp is not None:
            build_random_champion(ws, load_config(preset="tiny"))
        off = load(ws, load_config(preset="tiny", overrides=base + ["serve.capture=false"]), args.clients, args.seconds, args.max_tokens)
        on = load(ws, load_config(preset="tiny", overrides=base), args.clients, args.seconds, args.max_tokens)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    lost = set(on["captured"]) - set(on["stored"])
    dup = len(on["stored"]) - len(set(on["stored"]))
    ok = not on["errors"] and not off["errors"] and not lost and dup == 0 and len(on["stored"]) == on["ok"] == len(on["captured"])
    print(f"clients={args.clients} seconds={args.seconds} max_tokens={args.max_tokens}")
    for name, r in (("capture off (baseline)", off), ("capture on", on)):
        print(f"{name:24s} ok={r['ok']:5d} errors={len(r['errors'])} req/s={r['rps']:7.1f} p50={r['p50_ms']:7.1f} ms p99={r['p99_ms']:7.1f} ms")
    print(f"capture check: successful={on['ok']} stored={len(on['stored'])} lost={len(lost)} duplicated={dup} -> {'OK' if ok else 'FAILED'}")
    print(f"ratio p50 capture-on / capture-off: {on['p50_ms'] / off['p50_ms']:.2f}x; req/s ratio: {on['rps'] / off['rps']:.2f}x")
    for e in (on["errors"] + off["errors"])[:5]:
        print("error:", e)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
