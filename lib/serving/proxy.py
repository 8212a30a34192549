"""The capture proxy: an OpenAI-compatible pass-through in front of the engine a user already
runs (vLLM, SGLang, `consolidate serve`, any OpenAI-compatible server), capturing by day.

- `/v1/chat/completions`, `/v1/completions` and `/v1/models` are forwarded to `proxy.upstream`
  unchanged: the same body bytes (less our own `"capture"` field), the client's headers (less
  hop-by-hop ones and `X-Capture`), the upstream's status, headers and body back. A streamed
  answer (`"stream": true`) is relayed chunk by chunk as the upstream sends it.
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
- The capture runs after the response is sent (a background task on a worker thread), so the
  client never waits for the buffer's fsync. A capture that fails (disk full, record too large)
  is logged and counted (`/health`); the client already has its answer.
- SIGTERM: uvicorn stops accepting, lets the requests in flight finish, their captures included,
  then the buffer is flushed to parquet: nothing answered is lost. (A SIGKILL loses the captures
  of the answers sent in the last few milliseconds; what reached the write-ahead log survives.)

Trade-off: capturing after the answer (not before, as `consolidate serve` does) keeps the buffer's
~1 ms fsync off the response path, at the cost of the X-Capture-Id header (the record id is not
known when the answer leaves). Parsing the relayed SSE events to collect the answer costs ~10 µs
per chunk; bench/bench_proxy.py measures the whole overhead against the upstream direct.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
import dataclasses
import httpx
import uvicorn

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
    """What the proxy learns of one forwarded request: what to capture once it has finished."""

    def __init__(self, kind: str, request: Any, capture_on: bool):
        self.kind, self.request, self.capture_on = kind, request, capture_on
        self.pieces: list[str] = []
        self.model: str | None = None
        self.done = False      # the upstream finished the answer ([DONE], or a whole JSON body)
        self.relayed = True    # a stream: every chunk reached the client (False until the relay ends)
        self.failed = False    # an error event inside a 200 stream
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        """Collect the answer from relayed server-sent events (split at blank lines)."""
        self._pending += chunk
        if b"\n\n" not in self._pending and b"\r\n\r\n" not in self._pending:
            return
        events = self._pending.replace(b"\r\n", b"\n").split(b"\n\n")
        self._pending = events.pop()
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip())

    def _event(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = not self.failed
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self.failed = True
            return
        if not isinstance(chunk, dict) or "error" in chunk:
            self.failed = True
            return
        self.model = chunk.get("model") or self.model
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            piece = (choice.get("delta") or {}).get("content") if self.kind == "chat" else choice.get("text")
            if isinstance(piece, str):
                self.pieces.append(piece)

    def answer_of(self, body: Any) -> None:
        """Collect the answer from a whole (non-streamed) JSON response."""
        try:
            choice = body["choices"][0]
            text = choice["message"]["content"] if self.kind == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError):
            self.failed = True
            return
        if not isinstance(text, str):
            self.failed = True
            return
        self.model = body.get("model")
        self.pieces = [text]
        self.done = True


class CaptureProxy:
    """State of one running proxy: the upstream client, the capture hook, the counters."""

    def __init__(self, workspace: Any, cfg: Any, upstream: str | None = None, capture: Capture | None = None):
        upstream = upstream or cfg.proxy.upstream
        if not upstream:
            raise ValueError("no upstream: give --upstream URL (or proxy.upstream), the base URL of the OpenAI-compatible server to front")
        if not upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream {upstream!r}: give an http:// or https:// URL, e.g. http://127.0.0.1:8000")
        self.workspace, self.cfg = workspace, cfg
        self.upstream = upstream_base(upstream)
        self.intake = Intake(cfg.serve)
        self.serving = ServingVersion(workspace, cfg.serve.reload_interval_s, cfg.proxy.tokenizer)
        self._capture = capture
        self._capture_lock = threading.Lock()
        self._policy_tokenizer: Any = None
        self.counts = {"forwarded": 0, "upstream_errors": 0, "captured": 0, "not_captured": 0, "capture_failed": 0}
        self.client: Any = None

    # -- upstream ----------------------------------------------------------------------------
    def open_client(self) -> None:
        p = self.cfg.proxy
        limits = httpx.Limits(max_connections=p.max_connections, max_keepalive_connections=p.max_connections)
        self.client = httpx.AsyncClient(base_url=self.upstream, timeout=httpx.Timeout(p.timeout_s), limits=limits, trust_env=False)

    def headers_out(self, headers: Any) -> dict[str, str]:
        out = {k: v for k, v in headers.items() if k.lower() not in HOP}
        token = self.cfg.proxy.upstream_token
        if token is not None:
            out = {k: v for k, v in out.items() if k.lower() != "authorization"}
            out["authorization"] = f"Bearer {token.get_secret_value()}"
        out["accept-encoding"] = "identity"  # relayed byte for byte, and parsed on the way
        return out

    @staticmethod
    def headers_back(headers: Any) -> dict[str, str]:
        return {k: v for k, v in headers.items() if k.lower() not in HOP and k.lower() not in ("date", "server")}  # uvicorn sets its own

    def unreachable(self, exc: Exception) -> APIError:
        self.counts["upstream_errors"] += 1
        if isinstance(exc, httpx.TimeoutException):
            return APIError(504, f"upstream {self.upstream} did not answer within proxy.timeout_s={self.cfg.proxy.timeout_s:g} s ({type(exc).__name__})",
                            type="server_error", code="upstream_timeout")
        return APIError(502, f"upstream {self.upstream} unreachable: {type(exc).__name__}: {exc}", type="server_error", code="upstream_unreachable")

    # -- capture -----------------------------------------------------------------------------
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
        with self._capture_lock:  # worker threads capture concurrently
            self.counts[key] += 1

    def capture(self, exchange: Exchange) -> str | None:
        """Runs after the response was sent (a worker thread): the finished exchange into the
        buffer. Never raises: a failure is logged and counted."""
        if not exchange.done or exchange.failed or not exchange.relayed:
            self._count("not_captured")
            return None
        try:
            version, tokenizer = self.serving.current()
            hook = self.hook(tokenizer)
            if hook is None or not exchange.capture_on:
                self._count("not_captured")
                return None
            text = "".join(exchange.pieces)
            req = exchange.request
            meta = {"capture": exchange.capture_on, "source": capture_source("proxy", exchange.kind, version, exchange.model)}
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

    def exchange_of(self, path: str, data: dict[str, Any], capture_header: str | None) -> Exchange | None:
        """What to capture of this request, or None when it is not captured (the request is
        forwarded whatever this says: the upstream decides what it accepts)."""
        model = ChatRequest if path.endswith("chat/completions") else CompletionRequest
        for field in ("max_tokens", "max_completion_tokens"):
            requested = data.get(field)
            if isinstance(requested, int) and not isinstance(requested, bool):
                check_max_tokens(requested, self.cfg.serve.max_new_tokens)
        try:
            req = model.model_validate(data)
        except Exception:  # a shape we do not capture (tool calls, images, a list of prompts): forwarded as is
            return None
        if req.n != 1 or (isinstance(getattr(req, "prompt", None), list) and len(req.prompt) != 1):
            return None
        return Exchange("chat" if model is ChatRequest else "completions", req, capture_flag(req.capture, capture_header))

    def flush(self) -> Any:
        return self._capture.flush() if self._capture is not None else None

    def close(self) -> None:
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
        proxy.open_client()
        version, _ = await run_in_threadpool(proxy.serving.current)  # the tokenizer loads now, not at the first answer
        log.info("forwarding to %s; captured answers are stamped %s", proxy.upstream, version or "unknown (no lineage in the workspace)")
        interval = cfg.serve.flush_interval_s
        flusher = asyncio.create_task(flush_every(interval)) if interval and cfg.serve.capture else None
        try:
            yield
        finally:
            if flusher is not None:
                flusher.cancel()
            await proxy.client.aclose()
            await run_in_threadpool(proxy.close)

    app = FastAPI(title="consolidation capture proxy", lifespan=lifespan)
    app.state.proxy = proxy

    install_error_handlers(app, "proxy")

    async def forward(request: Request, path: str):
        body = await proxy.intake.read_body(request)
        data = proxy.intake.parse(body)
        exchange = proxy.exchange_of(path, data, request.headers.get("x-capture"))
        if "capture" in data:  # our field, not the engine's: strict servers refuse unknown fields
            data.pop("capture")
            body = json.dumps(data).encode()
        proxy.counts["forwarded"] += 1
        upstream_request = proxy.client.build_request("POST", path, content=body, headers=proxy.headers_out(request.headers))
        try:
            response = await proxy.client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            raise proxy.unreachable(exc) from None
        headers = proxy.headers_back(response.headers)
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if response.status_code != 200 or not streamed:
            try:
                content = await response.aread()
            except httpx.HTTPError as exc:
                raise proxy.unreachable(exc) from None
            finally:
                await response.aclose()
            if response.status_code != 200:
                proxy.counts["upstream_errors"] += 1
                return Response(content, status_code=response.status_code, headers=headers)
            if exchange is not None:
                try:
                    exchange.answer_of(json.loads(content))
                except ValueError:
                    exchange.failed = True
            task = BackgroundTask(proxy.capture, exchange) if exchange is not None else None
            return Response(content, status_code=200, headers=headers, background=task)

        if exchange is not None:
            exchange.relayed = False

        async def relay():
            try:
                async for chunk in response.aiter_raw():
                    if exchange is not None:
                        exchange.feed(chunk)
                    yield chunk
                if exchange is not None:  # not reached when the client left (the relay is cancelled)
                    exchange.relayed = True
            except httpx.HTTPError as exc:  # the upstream broke off: the client sees the cut, nothing is captured
                log.warning("upstream stream of %s broke off: %s", path, exc)
                proxy.counts["upstream_errors"] += 1
                if exchange is not None:
                    exchange.failed = True
            finally:
                await response.aclose()

        # captured only if the relay ran to its end: a client that left mid-answer cancels it first
        task = BackgroundTask(proxy.capture, exchange) if exchange is not None else None
        return StreamingResponse(relay(), status_code=200, headers=headers, background=task)

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
            response = await proxy.client.get("/v1/models", headers=proxy.headers_out(request.headers))
        except httpx.HTTPError as exc:
            raise proxy.unreachable(exc) from None
        return Response(response.content, status_code=response.status_code, headers=proxy.headers_back(response.headers))

    @app.get("/health")
    async def health():
        return {"status": "ok", "upstream": proxy.upstream, "version": proxy.serving.version, **proxy.counts}

    return app


def run(workspace: Any, cfg: Any, upstream: str | None = None, log_level: str = "info") -> None:
    """Proxy in the foreground until interrupted (`consolidate proxy`); SIGTERM drains and flushes."""
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    app = create_proxy_app(workspace, cfg, upstream)
    uvicorn.run(app, host=cfg.proxy.host, port=cfg.proxy.port, log_level=log_level, access_log=False)
