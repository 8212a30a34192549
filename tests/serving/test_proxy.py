"""The capture proxy and the rollout, with real processes on loopback: a real `consolidate serve`
(tiny Llama-3-style instruct models, real weights on disk) as the upstream, a real `consolidate
proxy` in front of it, real memory buffers and lineage files. One upstream and one proxy per
module; every process is bounded by a timeout and killed at the end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from fastapi import Request  # at module level: the stand-in engine's annotations are resolved here

from lib.registry.lineage import Lineage
from lib.workspace import Workspace
from tests.hf_models import build_tiny_model

pytest_plugins = ["prefect_fixtures"]
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def register(ws: Workspace, version: str, folder: Path, parent: str | None = None, champion: bool = False) -> None:
    lin = Lineage(ws.lineage_db)
    lin.record_version(version, folder, parent=parent, status="accepted" if champion else "candidate", storage="full",
                       meta={"version": version})
    if champion:
        lin.set_alias("champion", version, actor="bootstrap")


class Process:
    """`python -m cli.main ARGS` on a free loopback port, ready once /health answers."""

    def __init__(self, args: list[str], port: int, log: Path):
        self.port, self.log = port, log
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=ROOT, env=env,
                                     stdout=log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {self.proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{args[0]} did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def records(ws: Workspace) -> list[dict]:
    rows = []
    for path in sorted(ws.buffers.glob("buffer_*.parquet")):
        rows.extend(pq.read_table(path, columns=["id", "text", "source"]).to_pylist())
    return rows


def wait_records(ws: Workspace, n: int, timeout: float = 30) -> list[dict]:
    """The proxy captures after answering: give its background capture a moment."""
    deadline = time.monotonic() + timeout
    while True:
        rows = records(ws)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Models v0 and v1 (other weights); the upstream serves v0 from workspace `up` and never
    follows its alias (reload_interval_s=3600), so only a push changes what it serves; the
    proxy's workspace `px` has v0 as champion and v1 as a candidate."""
    tmp = tmp_path_factory.mktemp("proxy")
    models = {v: build_tiny_model("llama", tmp / "models" / v, seed=i) for i, v in enumerate(("v0", "v1"))}
    up, px = Workspace(tmp / "up").ensure(), Workspace(tmp / "px").ensure()
    register(up, "v0", models["v0"], champion=True)
    register(px, "v0", models["v0"], champion=True)
    register(px, "v1", models["v1"], parent="v0")
    common = ["--preset", "tiny", "--set", "buffer.flush_size=1", "--set", "serve.max_new_tokens=64", "--log-level", "warning"]
    procs: list[Process] = []
    try:
        port = free_port()
        procs.append(Process(["serve", "-w", str(up.root), "--port", str(port), *common, "--set", "serve.reload_interval_s=3600"],
                             port, tmp / "serve.log"))
        port = free_port()
        procs.append(Process(["proxy", "--upstream", f"{procs[0].url}/v1", "-w", str(px.root), "--port", str(port), *common,
                              "--set", "serve.reload_interval_s=0"], port, tmp / "proxy.log"))
        yield {"tmp": tmp, "up": up, "px": px, "upstream": procs[0], "proxy": procs[1], "models": models, "common": common}
    finally:
        for p in reversed(procs):
            p.stop()


CHAT = {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What does the zorbulator do?"}],
        "max_tokens": 12, "temperature": 0}
COMPLETION = {"prompt": "def add(a, b):", "max_tokens": 12, "temperature": 0}


def answer(base: str, path: str, body: dict, headers: dict | None = None) -> tuple[int, str, str | None]:
    """(status, the answer's text, the model that answered), streamed or not as `body` says."""
    url = f"{base}/v1/{path}"
    chat = path == "chat/completions"
    if not body.get("stream"):
        r = httpx.post(url, json=body, headers=headers, timeout=60)
        if r.status_code != 200:
            return r.status_code, r.text, None
        choice = r.json()["choices"][0]
        return 200, choice["message"]["content"] if chat else choice["text"], r.json()["model"]
    pieces, model = [], None
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as r:
        if r.status_code != 200:
            return r.status_code, r.read().decode(), None
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            model = chunk["model"]
            choice = chunk["choices"][0]
            piece = choice["delta"].get("content") if chat else choice["text"]
            pieces.append(piece or "")
    return 200, "".join(pieces), model


def test_proxy_answers_as_upstream_and_captures_each_200_once_with_the_serving_version(stack):
    from transformers import AutoTokenizer

    from lib.serving import chat_format

    up, px = stack["upstream"], stack["proxy"]
    assert httpx.get(f"{px.url}/v1/models").json()["data"] == httpx.get(f"{up.url}/v1/models").json()["data"]
    before_px, before_up = len(records(stack["px"])), len(records(stack["up"]))
    sent = []
    for path, body in (("chat/completions", CHAT), ("completions", COMPLETION)):
        for stream in (False, True):
            req = {**body, "stream": stream}
            direct = answer(up.url, path, req, {"X-Capture": "off"})  # the upstream's own capture stays out of the count
            proxied = answer(px.url, path, req)
            assert proxied == direct and proxied[0] == 200 and proxied[1], (path, stream)
            sent.append((path, proxied[1]))
    got = wait_records(stack["px"], before_px + len(sent))[before_px:]
    time.sleep(0.5)
    assert len(records(stack["px"])) - before_px == len(sent)  # exactly once each, nothing more came
    assert sorted(r["source"] for r in got) == sorted(
        f"proxy:{'chat' if p == 'chat/completions' else 'completions'}:v0:v0" for p, _ in sent)
    # the same document `consolidate serve` writes: the chat in the model's own template
    tok = AutoTokenizer.from_pretrained(stack["models"]["v0"])
    for path, text in sent:
        if path == "chat/completions":
            want = chat_format.document(tok, CHAT["messages"] + [{"role": "assistant", "content": text.strip()}])
            assert want.startswith("<|start_header_id|>system<|end_header_id|>")
        else:
            want = (COMPLETION["prompt"] + text).strip()
        assert want in [r["text"] for r in got]
    # and the upstream, capturing the same exchange itself, writes the same text
    status, text, _ = answer(px.url, "chat/completions", {**CHAT, "max_tokens": 5})
    ours = wait_records(stack["px"], before_px + len(sent) + 1)[-1]
    theirs = wait_records(stack["up"], before_up + 1)[-1]
    assert status == 200 and ours["text"] == theirs["text"] and theirs["source"] == "serve:chat:v0"


def test_opt_out_and_hostile_input_as_serve(stack):
    px = stack["proxy"]
    before = len(records(stack["px"]))
    health = httpx.get(f"{px.url}/health").json()
    assert answer(px.url, "completions", {**COMPLETION, "capture": False})[0] == 200
    assert answer(px.url, "chat/completions", CHAT, {"X-Capture": "off"})[0] == 200
    assert answer(px.url, "chat/completions", {**CHAT, "stream": True, "capture": False})[0] == 200
    # refused by the proxy itself, never forwarded: the same codes as `consolidate serve`
    url = f"{px.url}/v1/chat/completions"
    assert httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}).status_code == 400
    assert httpx.post(url, content=b'{"messages": [{"role": "user", "content": "\\ud800"}]}').json()["error"]["code"] == "invalid_unicode"
    assert httpx.post(url, content=b"[" * 100_000 + b"]" * 100_000).status_code in (400, 413)
    assert httpx.post(url, content=b"x" * 1_000_001).status_code == 413
    assert httpx.post(url, json={**CHAT, "max_tokens": 65}).json()["error"]["code"] == "max_tokens_too_large"
    after = httpx.get(f"{px.url}/health").json()
    assert after["forwarded"] - health["forwarded"] == 3
    time.sleep(1.0)
    assert len(records(stack["px"])) == before


def test_upstream_errors_pass_through_and_are_not_captured(stack):
    up, px = stack["upstream"], stack["proxy"]
    before = len(records(stack["px"]))
    too_long = {"prompt": "word " * 400, "max_tokens": 8}  # past the tiny model's context: the upstream's 400
    out_of_range = {**CHAT, "temperature": 5}               # the upstream's 422
    for path, body in (("completions", too_long), ("completions", {**too_long, "stream": True}), ("chat/completions", out_of_range)):
        direct = httpx.post(f"{up.url}/v1/{path}", json=body, timeout=60)
        proxied = httpx.post(f"{px.url}/v1/{path}", json=body, timeout=60)
        assert direct.status_code in (400, 422)
        assert (proxied.status_code, proxied.json()) == (direct.status_code, direct.json())
    # an upstream that is not there: a 502 in OpenAI's shape from the proxy
    from lib.config import load_config
    from lib.serving.serve import BackgroundServer
    from lib.serving.proxy import create_proxy_app

    dead = f"http://127.0.0.1:{free_port()}"
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={stack['px'].root}"])
    with BackgroundServer(create_proxy_app(stack["px"], cfg, dead)) as srv:
        r = httpx.post(f"{srv.base_url}/v1/completions", json=COMPLETION, timeout=60)
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unreachable"
    time.sleep(1.0)
    assert len(records(stack["px"])) == before


def test_a_buffer_that_refuses_the_record_never_costs_the_answer(stack, caplog):
    """The buffer cannot take the record (here: over buffer.max_text_bytes): the client has its
    answer all the same, and the failure is logged and counted."""
    from lib.config import load_config
    from lib.serving.serve import BackgroundServer
    from lib.serving.proxy import create_proxy_app

    ws = Workspace(stack["tmp"] / "px-refuse").ensure()
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "buffer.max_text_bytes=8", "buffer.flush_size=1"])
    with BackgroundServer(create_proxy_app(ws, cfg, stack["upstream"].url)) as srv:
        status, text, _ = answer(srv.base_url, "completions", COMPLETION)
        assert status == 200 and text
        deadline = time.monotonic() + 10
        while httpx.get(f"{srv.base_url}/health").json()["capture_failed"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{srv.base_url}/health").json()["capture_failed"] == 1
    assert "capture failed" in caplog.text and records(ws) == []


def test_sigterm_loses_nothing(stack):
    """Requests in flight when SIGTERM lands are answered and captured; the buffer is flushed to
    parquet on the way out (no write-ahead log left behind)."""
    tmp = stack["tmp"]
    ws = Workspace(tmp / "px-sigterm").ensure()
    register(ws, "v0", stack["models"]["v0"], champion=True)
    port = free_port()
    proc = Process(["proxy", "--upstream", stack["upstream"].url, "-w", str(ws.root), "--port", str(port), "--preset", "tiny",
                    "--set", "buffer.flush_size=1000", "--log-level", "warning"], port, tmp / "proxy-sigterm.log")
    done: list[tuple[int, str]] = []
    first = threading.Event()

    def client(i: int) -> None:
        body = {**(CHAT if i % 2 else COMPLETION), "max_tokens": 24, "temperature": 0.8, "seed": i, "stream": i % 4 < 2}
        try:
            status, text, _ = answer(proc.url, "chat/completions" if i % 2 else "completions", body)
        except httpx.HTTPError:
            return  # refused after the proxy stopped listening: never answered, nothing to capture
        done.append((status, text))
        first.set()

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        assert first.wait(60)
        proc.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        assert proc.proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    finally:
        proc.stop(signal.SIGKILL)
    answered = [d for d in done if d[0] == 200]
    assert answered
    assert len(records(ws)) == len(answered)
    assert not [p for p in (ws.buffers / "wal").glob("*.log")] if (ws.buffers / "wal").exists() else True


def test_promotion_is_pushed_to_the_upstream_by_sglang_rollout_then_rollback_names_its_answers(stack, prefect_harness):
    """v1 promoted in the proxy's workspace reaches the upstream through the rollout (the upstream
    never reads that lineage); answers from then on are stamped v1; a rollback says how many
    captured answers v1 wrote and pushes v0 back."""
    from typer.testing import CliRunner

    from cli.main import app
    from lib.config import load_config
    from lib.registry.promotion import promote
    from lib.serving.rollout import live_version

    up, px, ws = stack["upstream"], stack["proxy"], stack["px"]
    n = len(records(ws))
    before = answer(px.url, "completions", COMPLETION)
    assert before[2] == "v0"
    assert wait_records(ws, n + 1)[-1]["source"] == "proxy:completions:v0:v0"
    lin = Lineage(ws.lineage_db)
    promote(lin, "v1", "night accepted (test)")
    url = up.url + "/v1"
    sets = [f"serve.rollout.kind=sglang", f"serve.rollout.url={url}"]
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", *sets])
    from prefect import flow

    from tasks.serving import roll_out_after_promotion

    @flow(name="rollout-sglang-test")
    def night_end():  # what the night runs after its gate accepted v1
        return roll_out_after_promotion(cfg, "v1", "night-1")

    out = night_end()
    assert out["status"] == "live" and "serving v1" in out["detail"] and out["attempt"] == 1
    assert [m["id"] for m in httpx.get(f"{up.url}/v1/models").json()["data"]][0] == "v1"
    assert live_version(lin) == "v1"
    n += 1
    after = answer(px.url, "completions", COMPLETION)
    assert after[0] == 200 and after[2] == "v1" and after[1] != before[1]  # other weights, same greedy request
    assert wait_records(ws, n + 1)[-1]["source"] == "proxy:completions:v1:v1"

    runner = CliRunner()
    ls = runner.invoke(app, ["lineage", "ls", "-w", str(ws.root), "--preset", "tiny"], catch_exceptions=False)
    assert "live on" in ls.output and url in ls.output.replace("\n", "")
    rb = runner.invoke(app, ["rollback", "-w", str(ws.root), "--preset", "tiny", "-r", "test", *sum((["--set", s] for s in sets), [])],
                       catch_exceptions=False)
    assert rb.exit_code == 0, rb.output
    assert "captured answers written by v1: 1 records in 1 buffer files" in rb.output
    assert "rollout of v0: live" in rb.output
    assert [m["id"] for m in httpx.get(f"{up.url}/v1/models").json()["data"]][0] == "v0"


def test_a_failing_rollout_is_retried_recorded_and_leaves_the_promotion(stack, prefect_client):
    """The rollout task of the night, with its retries, in a flow: a command that fails is run
    1 + retries times, each attempt recorded; v1 stays champion, shown as promoted, not live."""
    from prefect import flow
    from typer.testing import CliRunner

    from cli.main import app
    from lib.config import load_config
    from lib.registry.promotion import promote
    from tasks.serving import roll_out_after_promotion

    ws = Workspace(stack["tmp"] / "px-fail").ensure()
    register(ws, "v0", stack["models"]["v0"], champion=True)
    register(ws, "v1", stack["models"]["v1"], parent="v0")
    lin = Lineage(ws.lineage_db)
    promote(lin, "v1", "night accepted (test)")
    marker = stack["tmp"] / "attempts.txt"
    command = f"sh -c 'echo {{version}} {{path}} >> {marker}; echo engine restart failed >&2; exit 3'"
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "serve.rollout.kind=command",
                                                f"serve.rollout.command={command}", "serve.rollout.retries=1",
                                                "serve.rollout.retry_delay_s=0"])

    @flow(name="rollout-test")
    def night_end(cfg):
        return roll_out_after_promotion(cfg, "v1", "night-2")

    # the default, kind none: nobody is told, recorded as such
    off = night_end(load_config(preset="tiny", overrides=[f"workspace.root={ws.root}"]))
    assert off["status"] == "skipped" and [r["status"] for r in lin.rollouts("v1")] == ["skipped"]
    with lin.transaction() as con:
        con.execute("DELETE FROM rollouts")

    state = night_end(cfg, return_state=True)
    assert state.is_completed()  # a failed push never fails the night
    result = state.result()
    assert result["status"] == "promoted, not live" and "exited with status 3" in result["detail"]
    assert lin.alias("champion") == "v1"
    rows = lin.rollouts("v1")
    assert [(r["status"], r["attempt"], r["run_id"]) for r in rows] == [("failed", 1, "night-2"), ("failed", 2, "night-2")]
    assert "engine restart failed" in rows[-1]["detail"]
    assert marker.read_text().split("\n")[0] == f"v1 {Path(stack['models']['v1']).resolve()}"
    ls = CliRunner().invoke(app, ["lineage", "ls", "-w", str(ws.root), "--preset", "tiny"], catch_exceptions=False)
    assert "promoted, not live" in ls.output
    artifacts = prefect_client.read_artifacts()
    assert any(a.key == "rollout" and "NOT live" in (a.data or "") for a in artifacts)
    # the engine fixed, a push by hand: recorded as live, the failed attempts stay in the history
    ok = CliRunner().invoke(app, ["rollout", "-w", str(ws.root), "--preset", "tiny", "--set", "serve.rollout.kind=command",
                                  "--set", f"serve.rollout.command=sh -c 'echo {{version}} >> {marker}'"], catch_exceptions=False)
    assert ok.exit_code == 0 and ok.output.startswith("v1: live"), ok.output
    assert [r["status"] for r in lin.rollouts("v1")] == ["failed", "failed", "live"]
    assert marker.read_text().splitlines()[-1] == "v1"
    listed = json.loads(CliRunner().invoke(app, ["lineage", "ls", "-w", str(ws.root), "--json"], catch_exceptions=False).output)
    assert {r["version"]: r["serving"] for r in listed}["v1"].startswith("live on sh -c")


def test_update_weights_from_disk_refuses_what_it_cannot_serve(stack, tmp_path):
    """SGLang's push on `consolidate serve`: a folder that is not a checkpoint is refused with
    SGLang's answer shape and the server keeps serving; pushes can be switched off."""
    from lib.config import load_config
    from lib.serving.serve import BackgroundServer, create_app

    up = stack["upstream"]
    served = httpx.get(f"{up.url}/get_model_info").json()["version"]
    r = httpx.post(f"{up.url}/update_weights_from_disk", json={"model_path": str(tmp_path)}, timeout=60)
    assert r.status_code == 400 and r.json()["success"] is False and str(tmp_path) in r.json()["message"]
    assert httpx.post(f"{up.url}/update_weights_from_disk", json={}).json()["error"]["param"] == "model_path"
    assert httpx.get(f"{up.url}/get_model_info").json()["version"] == served
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={stack['up'].root}", "serve.weight_updates=false"])
    with BackgroundServer(create_app(stack["up"], cfg, preload=False)) as srv:
        r = httpx.post(f"{srv.base_url}/update_weights_from_disk", json={"model_path": str(stack["models"]["v1"])})
        assert r.status_code == 403


def test_vllm_rollout_calls_sleep_reload_wake_in_order_and_never_leaves_it_asleep(tmp_path):
    """No vLLM runs here (it needs a GPU): a loopback stand-in records the calls vLLM's dev
    endpoints would get, so the order, the arguments and the wake-up after a failed reload are
    checked; whether a given vLLM release reloads correctly is not (docs/serving.md)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from lib.config import load_config
    from lib.serving.serve import BackgroundServer
    from lib.serving.rollout import RolloutError, roll_out

    calls: list[tuple] = []
    fail_reload = {"on": False}
    engine = FastAPI()

    @engine.post("/{name}")
    async def endpoint(name: str, request: Request):
        body = await request.body()
        calls.append((name, dict(request.query_params), json.loads(body) if body else None, request.headers.get("authorization")))
        if name == "collective_rpc" and fail_reload["on"]:
            return JSONResponse({"error": "reload_weights failed"}, status_code=500)
        return {"results": [None]} if name == "collective_rpc" else {}

    ws = Workspace(tmp_path / "ws").ensure()
    folder = tmp_path / "v1"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    register(ws, "v1", folder, champion=True)
    lin = Lineage(ws.lineage_db)
    with BackgroundServer(engine) as srv:
        cfg = load_config(overrides=[f"workspace.root={ws.root}", "serve.rollout.kind=vllm", f"serve.rollout.url={srv.base_url}/v1",
                                     "serve.rollout.token=s3cret"]).serve.rollout
        assert roll_out(lin, "v1", cfg)["status"] == "live"
        path = str(folder.resolve())
        assert calls == [("sleep", {"level": "2"}, None, "Bearer s3cret"), ("wake_up", {"tags": "weights"}, None, "Bearer s3cret"),
                         ("collective_rpc", {}, {"method": "reload_weights", "kwargs": {"weights_path": path}}, "Bearer s3cret"),
                         ("wake_up", {"tags": "kv_cache"}, None, "Bearer s3cret")]
        calls.clear()
        fail_reload["on"] = True
        with pytest.raises(RolloutError, match="collective_rpc answered 500"):
            roll_out(lin, "v1", cfg, attempt=2)
        assert [c[0] for c in calls] == ["sleep", "wake_up", "collective_rpc", "wake_up"]
    assert [(r["status"], r["attempt"]) for r in lin.rollouts("v1")] == [("live", 1), ("failed", 2)]


def test_exchange_answer_only_for_a_finished_answer():
    """The writer thread parses what the loop relayed: a whole body, or SSE events up to [DONE]."""
    from lib.serving.proxy import Exchange

    def sse(*events: bytes) -> bytes:
        return b"".join(b"data: " + e + b"\r\n\r\n" for e in events)

    whole = Exchange("chat", {}, None)
    whole.chunks = [b'{"model": "m", "choices": [{"message": {"content": "hi"}}]}']
    assert whole.answer() == ("hi", "m")
    pieces = [b'{"model": "m", "choices": [{"index": 0, "text": "a"}, {"index": 1, "text": "x"}]}', b'{"choices": [{"text": "b"}]}']
    streamed = Exchange("completions", {}, None)
    streamed.streamed, streamed.chunks = True, [sse(*pieces, b"[DONE]")[:7], sse(*pieces, b"[DONE]")[7:]]  # split mid-event
    assert streamed.answer() == ("ab", "m")
    for chunks in ([sse(*pieces)], [sse(pieces[0], b'{"error": {"message": "oom"}}', b"[DONE]")], [sse(b"not json", b"[DONE]")]):
        cut = Exchange("completions", {}, None)
        cut.streamed, cut.chunks = True, chunks
        assert cut.answer() is None  # cut before [DONE], an error event, garbage
    left = Exchange("completions", {}, None)
    left.streamed, left.relayed, left.chunks = True, False, [sse(*pieces, b"[DONE]")]
    assert left.answer() is None  # the client left mid-answer


def test_the_capture_backlog_is_bounded(tmp_path, monkeypatch):
    """Answers faster than the writer: past WRITER_BACKLOG queued exchanges the request's task
    waits (its client already has the answer); nothing queued is dropped."""
    import asyncio

    from lib.config import load_config
    from lib.serving import proxy as proxy_module

    monkeypatch.setattr(proxy_module, "WRITER_BACKLOG", 2)
    ws = Workspace(tmp_path / "ws").ensure()
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "serve.reload_interval_s=3600"])
    proxy = proxy_module.CaptureProxy(ws, cfg, "http://127.0.0.1:1")

    def exchange(i: int) -> proxy_module.Exchange:
        ex = proxy_module.Exchange("completions", {"prompt": f"p{i}"}, None)
        ex.chunks = [b'{"model": "m", "choices": [{"text": " t"}]}']
        return ex

    async def scenario() -> None:
        proxy._writer = object()  # a writer that is busy elsewhere: nothing drains the queue yet
        for i in range(2):
            await asyncio.wait_for(proxy.submit(exchange(i)), 1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(proxy.submit(exchange(2)), 0.1)  # the third waits (and is queued)
        proxy._writer = None
        proxy.start_writer()
        await asyncio.wait_for(proxy.submit(exchange(3)), 10)

    asyncio.run(scenario())
    proxy.close()  # drains the writer's queue
    assert proxy.counts["captured"] == 4


def test_a_keepalive_connection_the_upstream_dropped_is_sent_again(tmp_path):
    """An engine that closes a kept-alive connection as the proxy reuses it (here: every second
    request on a connection is dropped unanswered): the request goes out once more on a new
    connection, and the client never sees the 502."""
    import asyncio

    from lib.config import load_config
    from lib.serving.proxy import create_proxy_app
    from lib.serving.serve import BackgroundServer

    answer_body = b'{"model": "m", "choices": [{"index": 0, "text": " t", "finish_reason": "length"}]}'
    port, ready = free_port(), threading.Event()

    async def handle(reader, writer):
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            if _ == 1:
                break  # the second request on this connection: dropped unanswered
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(answer_body) + answer_body)
            await writer.drain()
        writer.close()

    def engine() -> None:
        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", port)
            ready.set()
            await server.serve_forever()
        asyncio.run(main())

    threading.Thread(target=engine, daemon=True).start()
    assert ready.wait(10)
    ws = Workspace(tmp_path / "ws").ensure()
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", "serve.capture=false"])
    with BackgroundServer(create_proxy_app(ws, cfg, f"http://127.0.0.1:{port}")) as srv:
        for _ in range(3):
            r = httpx.post(f"{srv.base_url}/v1/completions", json={"prompt": "p", "max_tokens": 2}, timeout=30)
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == " t"
        health = httpx.get(f"{srv.base_url}/health").json()
    assert health["resent"] >= 1 and health["upstream_errors"] == 0
