"""The capture proxy: an OpenAI-compatible pass-through in front of the engine a user already
runs (vLLM, SGLang, `consolidate serve`, any OpenAI-compatible server), capturing by day.

- `/v1/chat/completions`, `/v1/completions` and `/v1/models` are forwarded to `proxy.upstream`
  unchanged: the same body bytes (less our own `"capture"` field), the client's headers (less
  hop-by-hop ones and `X-Capture`), the upstream's status, headers and body back. A streamed
  answer (`"stream": true`) is relayed chunk by chunk as the upstream sends it. One keep-alive
  pool to the upstream; a request whose reused connection the upstream closed before answering
  is sent once more (`resent` in /health).
- Before forwarding, a request passes the same intake as `consolidate serve` (`lib.serving.serve.Intake`:
  bearer token, body size, JSON, lone surrogates; then `max_tokens` against
  `serve.max_new_tokens`), so a hostile body never reaches the engine.
- After a 200 whose answer finished (non-streamed, or a stream that reached `data: [DONE]` and was
  fully sent), the exchange is captured through `lib.buffer.capture.Capture`, exactly as `consolidate
  serve` captures it: a chat rendered with the served model's chat template (the tokenizer of the
  version lineage says is live, `lib.serving.rollout.live_version`), a completion as prompt +
  completion; `source` names the proxy, the endpoint, the serving version and the upstream's
  model name (`proxy:chat:v3:Qwen/Qwen2-0.5B`). The same opt-outs (`"capture": false`,
  `X-Capture: off`, `serve.capture=false`). Upstream errors (status >= 400, a stream's error
  event, a cut stream) are passed through and never captured; a request with `n` > 1 is
  forwarded and not captured (one record per exchange).
- The event loop only relays bytes: the request body is parsed once (the intake must), the
  answer is kept as the raw bytes relayed, and a finished exchange is queued to one capture
  writer thread, which validates the request, parses the answer (JSON or SSE events), renders
  the chat template and writes the buffer. A capture that fails (disk full, record too large) is
  logged and counted (`/health`); the client already has its answer.
- SIGTERM: uvicorn stops accepting and lets the requests in flight finish; then the writer drains
  its queue and the buffer is flushed to parquet: nothing answered is lost. (A SIGKILL loses the
  captures still queued, those of the last few milliseconds' answers; what reached the
  write-ahead log survives.)

Trade-off: capturing after the answer (not before, as `consolidate serve` does) keeps the buffer's
~1 ms fsync and the template off the response path, at the cost of the X-Capture-Id header (the
record id is not known when the answer leaves). One writer fsyncs one record at a time, so
captures keep up with ~350 answers/s (buffer.durability=fsync); past that the queue grows to
`WRITER_BACKLOG` exchanges, then requests' tasks wait for the writer (backpressure, not loss).
The proxy's own CPU, capture included, is ~0.8-1.1 ms a request against an upstream that costs
nothing (2.55 ms with httpx and uvicorn's h11 before aiohttp, uvloop and httptools), 2.4-3.7 ms
on the loaded 2-core machine beside a CPU-bound upstream; bench/bench_proxy.py measures it and
the latency against the upstream direct.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import queue
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from yarl import URL  # aiohttp's own URL type: parsed once per path, not per request

from lib.buffer.capture import Capture, capture_source, message_text, open_capture
from lib.serving.serve import (
    APIError, ChatRequest, CompletionRequest, Intake, capture_flag, check_max_tokens, install_error_handlers,
)
from lib.registry.lineage import Lineage
from lib.serving import chat_format
from lib.serving.generate import registry_signature
from lib.serving.rollout import live_version

log = logging.getLogger(__name__)

# hop-by-hop headers (RFC 9110 7.6.1) and those the proxy sets itself: never forwarded either way
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length", "content-encoding", "accept-encoding", "x-capture"}


# finished exchanges queued to the capture writer before a request's task waits for it (~3 s of fsyncs)
WRITER_BACKLOG = 1024
# seconds an idle upstream connection is kept for reuse: under uvicorn's 5 s keep-alive
KEEPALIVE_S = 4.0


def upstream_base(url: str) -> str:
    """`http://host:port` from `http://host:port/v1/` or the like: the paths forwarded keep their /v1."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class ServingVersion:
    """Which version the upstream serves (lineage's live version) and its tokenizer, re-read only
    when the registry file changed, at most every `interval_s` (a stat, ~20 µs, per check)."""

    def __init__(self, workspace: Any, interval_s: float, tokenizer_dir: Path | None = None):
        self.db = workspace.lineage_db
        self.interval_s = interval_s
        self.tokenizer_dir = tokenizer_dir
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._seen: tuple | None = None
        self.version: str | None = None
        self.tokenizer: Any = None
        self._tokenizer_from: Path | None = None
        self._lineage: Any = None

    def current(self) -> tuple[str | None, Any]:
        with self._lock:
            if time.monotonic() - self._checked < self.interval_s:
                return self.version, self.tokenizer
            self._checked = time.monotonic()
            signature = registry_signature(self.db) if self.db.exists() else None
            if signature is not None and signature != self._seen:
                try:
                    self._read()
                    self._seen = signature
                except Exception as exc:  # a night holds the registry: keep the last answer
                    log.warning("serving version not re-read from %s, keeping %s: %s", self.db, self.version, exc)
            if self.tokenizer is None and self.tokenizer_dir is not None:
                self._load_tokenizer(self.tokenizer_dir)
            return self.version, self.tokenizer

    def _read(self) -> None:
        if self._lineage is None:  # opened once: opening checks (and may write) the schema
            self._lineage = Lineage(self.db, lock_timeout_s=2.0)
        lineage = self._lineage
        version = live_version(lineage)
        if version != self.version:
            log.info("upstream serves %s (lineage)", version)
        self.version = version
        row = lineage.get_version(version) if version else None
        folder = self.tokenizer_dir or (Path(row["path"]) if row else None)
        if folder is not None and folder != self._tokenizer_from:
            self._load_tokenizer(folder)

    def _load_tokenizer(self, folder: Path) -> None:
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
        except Exception as exc:  # no tokenizer there: plain transcripts (Capture logs it once)
            log.warning("no tokenizer loaded from %s (%s): chats are captured as plain transcripts", folder, exc)
            self.tokenizer = None
        self._tokenizer_from = folder


class Exchange:
    """What the proxy keeps of one forwarded request: the parsed request body and the answer's raw
    bytes. Nothing here is parsed on the event loop: `answer()` runs in the capture writer thread."""

    def __init__(self, kind: str, data: dict[str, Any], capture_header: str | None):
        self.kind, self.data, self.capture_header = kind, data, capture_header
        self.chunks: list[bytes] = []  # the whole JSON body, or the relayed server-sent events
        self.streamed = False
        self.relayed = True    # a stream: every chunk reached the client (False until the relay ends)
        self.failed = False    # the upstream broke off, or its body was not an answer

    def answer(self) -> tuple[str, str | None] | None:
        """(the answer's text, the upstream's model name), or None when the answer did not finish
        (a stream without `data: [DONE]`, an error event, a body that is not a completion)."""
        if self.failed or not self.relayed:
            return None
        body = b"".join(self.chunks)
        if not self.streamed:
            return self._whole(body)
        pieces: list[str] = []
        model = None
        for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return "".join(pieces), model
                try:
                    chunk = json.loads(data)
                except ValueError:
                    return None
                if not isinstance(chunk, dict) or "error" in chunk:
                    return None
                model = chunk.get("model") or model
                for choice in chunk.get("choices") or []:
                    if choice.get("index", 0) != 0:
                        continue
                    piece = (choice.get("delta") or {}).get("content") if self.kind == "chat" else choice.get("text")
                    if isinstance(piece, str):
                        pieces.append(piece)
        return None  # no [DONE]: the stream was cut

    def _whole(self, body: bytes) -> tuple[str, str | None] | None:
        try:
            data = json.loads(body)
            choice = data["choices"][0]
            text = choice["message"]["content"] if self.kind == "chat" else choice["text"]
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        return (text, data.get("model")) if isinstance(text, str) else None


class CaptureProxy:
    """State of one running proxy: the upstream session, the capture writer, the counters."""

    def __init__(self, workspace: Any, cfg: Any, upstream: str | None = None, capture: Capture | None = None):
        upstream = upstream or cfg.proxy.upstream
        if not upstream:
            raise ValueError("no upstream: give --upstream URL (or proxy.upstream), the base URL of the OpenAI-compatible server to front")
        if not upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream {upstream!r}: give an http:// or https:// URL, e.g. http://127.0.0.1:8000")
        self.workspace, self.cfg = workspace, cfg
        self.upstream = upstream_base(upstream)
        self.urls = {path: URL(self.upstream + path) for path in ("/v1/chat/completions", "/v1/completions", "/v1/models")}
        self.intake = Intake(cfg.serve)
        self.serving = ServingVersion(workspace, cfg.serve.reload_interval_s, cfg.proxy.tokenizer)
        self._capture = capture
        self._capture_lock = threading.Lock()
        self._policy_tokenizer: Any = None
        self.counts = {"forwarded": 0, "resent": 0, "upstream_errors": 0, "captured": 0, "not_captured": 0, "capture_failed": 0}
        self.session: Any = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    # -- upstream ----------------------------------------------------------------------------
    def open_session(self) -> None:
        """One keep-alive session for every request (called on the running loop)."""
        p = self.cfg.proxy
        # timeout_s bounds the connection (pool wait included) and each gap between two bytes, not the whole answer
        timeout = aiohttp.ClientTimeout(total=None, connect=p.timeout_s, sock_read=p.timeout_s)
        # idle connections closed before the engine's uvicorn closes them (its 5 s default, which vLLM and SGLang keep)
        connector = aiohttp.TCPConnector(limit=p.max_connections, limit_per_host=p.max_connections, keepalive_timeout=KEEPALIVE_S)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False, trust_env=False,
                                             skip_auto_headers=("User-Agent", "Content-Type"))

    def headers_out(self, headers: Any) -> dict[str, str]:
        out = {k: v for k, v in headers.items() if k.lower() not in HOP}
        token = self.cfg.proxy.upstream_token
        if token is not None:
            out = {k: v for k, v in out.items() if k.lower() != "authorization"}
            out["authorization"] = f"Bearer {token.get_secret_value()}"
        out["accept-encoding"] = "identity"  # relayed byte for byte, and parsed for the capture
        return out

    @staticmethod
    def headers_back(headers: Any) -> dict[str, str]:
        return {k: v for k, v in headers.items() if k.lower() not in HOP and k.lower() not in ("date", "server")}  # uvicorn sets its own

    def unreachable(self, exc: Exception) -> APIError:
        self.counts["upstream_errors"] += 1
        if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts are TimeoutErrors
            return APIError(504, f"upstream {self.upstream} did not answer within proxy.timeout_s={self.cfg.proxy.timeout_s:g} s ({type(exc).__name__})",
                            type="server_error", code="upstream_timeout")
        return APIError(502, f"upstream {self.upstream} unreachable: {type(exc).__name__}: {exc}", type="server_error", code="upstream_unreachable")

    # -- capture -----------------------------------------------------------------------------
    def start_writer(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="capture-writer", daemon=True)
        self._writer.start()

    async def submit(self, exchange: Exchange) -> None:
        """Hand a finished exchange to the writer thread (on the loop: a queue put, ~1 µs). Past
        `WRITER_BACKLOG` queued exchanges, the request's task waits for the writer to catch up
        (its client was answered; a keep-alive client's next request waits): the backlog, and
        the memory it holds, stay bounded when answers come faster than the buffer's fsync."""
        self._queue.put(exchange)
        while self._queue.qsize() > WRITER_BACKLOG and self._writer is not None:
            await asyncio.sleep(0.005)

    def stop_writer(self) -> None:
        """Blocks until every exchange submitted so far is captured."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
            self._writer = None

    def _write_loop(self) -> None:
        while (exchange := self._queue.get()) is not None:
            self.capture(exchange)

    def hook(self, tokenizer: Any) -> Capture | None:
        if not self.cfg.serve.capture:
            return None

        with self._capture_lock:
            if self._capture is None or tokenizer is not self._policy_tokenizer:  # a new version may bring a new tokenizer
                tokens = chat_format.control_tokens(tokenizer) if tokenizer is not None else []
                if self._capture is None:
                    self._capture = open_capture(self.workspace, self.cfg, tokens)
                else:
                    self._capture.policy = dataclasses.replace(self._capture.policy, special_tokens=tuple(tokens))
                self._policy_tokenizer = tokenizer
            return self._capture

    def _count(self, key: str) -> None:
        with self._capture_lock:
            self.counts[key] += 1

    def capture(self, exchange: Exchange) -> str | None:
        """Runs after the response was sent, in the writer thread: the request validated, the
        answer parsed, the exchange rendered and written into the buffer. Never raises: a failure
        is logged and counted."""
        if not self.cfg.serve.capture:
            self._count("not_captured")
            return None
        req = self.request_of(exchange)
        answer = exchange.answer() if req is not None else None
        if answer is None:
            self._count("not_captured")
            return None
        text, model = answer
        capture_on = capture_flag(req.capture, exchange.capture_header)
        try:
            version, tokenizer = self.serving.current()
            hook = self.hook(tokenizer)
            if hook is None or not capture_on:
                self._count("not_captured")
                return None
            meta = {"capture": capture_on, "source": capture_source("proxy", exchange.kind, version, model)}
            if exchange.kind == "chat":
                messages = [{"role": m.role, "content": message_text(m.content)} for m in req.messages]
                record = hook.capture_conversation(messages + [{"role": "assistant", "content": text.strip()}], meta, tokenizer=tokenizer)
            else:
                record = hook.capture(req.prompt if isinstance(req.prompt, str) else req.prompt[0], text, meta)
        except Exception:  # disk full, a record over buffer.max_text_bytes, a template that refuses the roles
            self._count("capture_failed")
            log.exception("capture failed (the client was answered; %d failures so far)", self.counts["capture_failed"])
            return None
        self._count("captured" if record else "not_captured")
        return record

    @staticmethod
    def request_of(exchange: Exchange) -> Any:
        """The request as `consolidate serve` reads it, or None for a shape not captured (tool
        calls, images, a list of prompts, n > 1): those were forwarded all the same."""
        model = ChatRequest if exchange.kind == "chat" else CompletionRequest
        try:
            req = model.model_validate(exchange.data)
        except Exception:
            return None
        if req.n != 1 or (isinstance(getattr(req, "prompt", None), list) and len(req.prompt) != 1):
            return None
        return req

    def exchange_of(self, path: str, data: dict[str, Any], capture_header: str | None) -> Exchange:
        """What to keep of this request for the capture. Checks here only what must stop a request
        before the engine (max_tokens); validating the request's shape is the writer's."""
        for field in ("max_tokens", "max_completion_tokens"):
            requested = data.get(field)
            if isinstance(requested, int) and not isinstance(requested, bool):
                check_max_tokens(requested, self.cfg.serve.max_new_tokens)
        return Exchange("chat" if path.endswith("chat/completions") else "completions", data, capture_header)

    def flush(self) -> Any:
        return self._capture.flush() if self._capture is not None else None

    def close(self) -> None:
        self.stop_writer()
        if self._capture is not None:
            self._capture.close()
        log.info("proxy closed: %s", ", ".join(f"{k} {v}" for k, v in self.counts.items()))


def create_proxy_app(workspace: Any, cfg: Any, upstream: str | None = None, *, capture: Capture | None = None):
    """The FastAPI app forwarding to `upstream` (default `cfg.proxy.upstream`) and capturing."""
    proxy = CaptureProxy(workspace, cfg, upstream, capture)

    async def flush_every(interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                path = await run_in_threadpool(proxy.flush)
                if path is not None:
                    log.info("captured records flushed to %s", path)
            except Exception:  # the records stay in the write-ahead log
                log.exception("periodic flush of the memory buffer failed")

    @asynccontextmanager
    async def lifespan(app):
        proxy.open_session()
        proxy.start_writer()
        version, _ = await run_in_threadpool(proxy.serving.current)  # the tokenizer loads now, not at the first answer
        log.info("forwarding to %s; captured answers are stamped %s", proxy.upstream, version or "unknown (no lineage in the workspace)")
        interval = cfg.serve.flush_interval_s
        flusher = asyncio.create_task(flush_every(interval)) if interval and cfg.serve.capture else None
        try:
            yield
        finally:
            if flusher is not None:
                flusher.cancel()
            await proxy.session.close()
            await run_in_threadpool(proxy.close)  # the writer drains its queue first

    app = FastAPI(title="consolidation capture proxy", lifespan=lifespan)
    app.state.proxy = proxy

    install_error_handlers(app, "proxy")

    async def forward(request: Request, path: str):
        body = await proxy.intake.read_body(request)
        data = proxy.intake.parse(body)  # before the engine: the same 400s as `consolidate serve`
        exchange = proxy.exchange_of(path, data, request.headers.get("x-capture"))
        if "capture" in data:  # our field, not the engine's: strict servers refuse unknown fields
            body = json.dumps({k: v for k, v in data.items() if k != "capture"}).encode()
        proxy.counts["forwarded"] += 1
        headers_out = proxy.headers_out(request.headers)
        for attempt in (1, 2):
            try:
                response = await proxy.session.post(proxy.urls[path], data=body, headers=headers_out)
                break
            except aiohttp.ServerDisconnectedError as exc:
                # closed before any answer: a keep-alive connection the engine dropped as it was reused
                # (a loaded loop sees its FIN late); sent once more, on another connection
                if attempt == 2:
                    raise proxy.unreachable(exc) from None
                proxy.counts["resent"] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise proxy.unreachable(exc) from None
        headers = proxy.headers_back(response.headers)
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if response.status != 200 or not streamed:
            try:
                content = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise proxy.unreachable(exc) from None
            finally:
                response.release()
            if response.status != 200:
                proxy.counts["upstream_errors"] += 1
                return Response(content, status_code=response.status, headers=headers)
            exchange.chunks.append(content)
            return Response(content, status_code=200, headers=headers, background=BackgroundTask(proxy.submit, exchange))

        exchange.streamed, exchange.relayed = True, False

        async def relay():
            finished = False
            try:
                async for chunk in response.content.iter_any():
                    exchange.chunks.append(chunk)
                    yield chunk
                finished = exchange.relayed = True  # not reached when the client left (the relay is cancelled)
            except (aiohttp.ClientError, TimeoutError) as exc:  # the upstream broke off: the client sees the cut, nothing is captured
                log.warning("upstream stream of %s broke off: %s", path, exc)
                proxy.counts["upstream_errors"] += 1
                exchange.failed = True
            finally:
                if finished:
                    response.release()
                else:  # an unfinished answer: drop the connection, so the engine stops generating
                    response.close()

        # captured only if the relay ran to its end: a client that left mid-answer cancels it first
        return StreamingResponse(relay(), status_code=200, headers=headers, background=BackgroundTask(proxy.submit, exchange))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await forward(request, "/v1/chat/completions")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await forward(request, "/v1/completions")

    @app.get("/v1/models")
    async def models(request: Request):
        proxy.intake.check_auth(request.headers.get("authorization"))
        try:
            async with proxy.session.get(proxy.urls["/v1/models"], headers=proxy.headers_out(request.headers)) as response:
                content = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise proxy.unreachable(exc) from None
        return Response(content, status_code=response.status, headers=proxy.headers_back(response.headers))

    @app.get("/health")
    async def health():
        return {"status": "ok", "upstream": proxy.upstream, "version": proxy.serving.version, **proxy.counts}

    return app


def run(workspace: Any, cfg: Any, upstream: str | None = None, log_level: str = "info") -> None:
    """Proxy in the foreground until interrupted (`consolidate proxy`); SIGTERM drains and flushes.
    uvloop and httptools (dependencies) are uvicorn's choice when installed: a third of the
    proxy's CPU per request is the server's HTTP parsing and event loop."""
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    app = create_proxy_app(workspace, cfg, upstream)
    uvicorn.run(app, host=cfg.proxy.host, port=cfg.proxy.port, log_level=log_level, access_log=False)
