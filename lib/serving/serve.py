"""The inference server: the champion behind an OpenAI-compatible HTTP API, capturing by day.

- `create_app(workspace, cfg)` builds a FastAPI app with `/v1/completions`,
  `/v1/chat/completions`, `/v1/models` (enough for the official `openai` client) and `/health`.
  The `model` field of a request is accepted and ignored: the champion answers, and the response's
  `model` and `system_fingerprint` name the version that did.
- `POST /update_weights_from_disk {"model_path": ...}` is SGLang's weight push (what
  `serve.rollout.kind=sglang` sends, so the push path is tested against a real server): the folder
  is loaded and served from the next request on, the champion alias no longer followed until a
  restart (`Champion.pin`); `GET /get_model_info` names the folder served.
- Every request passes (`Intake`, shared with the capture proxy, lib/serving/proxy.py), in order: bearer-token check (`serve.token`, constant-time compare, 401),
  body size (`serve.max_request_bytes`, refused from Content-Length before reading, or while
  streaming the body in, 413), JSON (400; also for JSON nested too deep to parse and for text
  with lone surrogates, `"\\ud800"`, which no tokenizer takes), schema (422), limits (`max_tokens` over
  `serve.max_new_tokens` or past the context, 400). Errors have OpenAI's shape:
  `{"error": {"message", "type", "param", "code"}}`.
- `"stream": true` answers with server-sent events in OpenAI's chunk format (text pieces as they
  are generated, a stop string never sent), the last chunk carrying `usage` and `capture_id`.
- The model call, the lineage check and the capture run in a worker thread (the event loop stays
  free for other connections); generation itself holds the model's lock (`lib.serving.generate`).
- After a successful generation the exchange goes through `lib.buffer.capture.Capture` into the memory
  buffer (write-ahead logged before the response is sent) unless the request opted out with
  `"capture": false` in the body (`extra_body` in the openai client) or a header `X-Capture: off`.
  The record id comes back in the `X-Capture-Id` response header; its `source` names the version
  that answered (`serve:chat:v3`, lib.buffer.capture.capture_source). The buffer is flushed every
  `serve.flush_interval_s` (the nightly run reads parquet files, not a live server's log) and
  on shutdown.
- The champion is re-read from lineage every `serve.reload_interval_s`; a promotion (or rollback)
  is served from the next request after the check, without a restart.
- A chat is prompted in the model's own format (`LoadedModel.chat_prompt`): its chat template
  with the generation prompt, contents cleaned of control tokens, stopped at the template's end
  of turn; a model without a template gets the plain "User:/Assistant:" transcript. The captured
  record is the same rendering with the answer (`capture.format`, lib/buffer/capture.py).

Trade-off: opening the DuckDB registry costs ~70 ms on the 2-core machine, too much per request;
the server stats the registry file every `serve.reload_interval_s` (2 s, ~20 µs) and reads the
alias only when the file changed, so a promotion reaches clients within 2 s at no steady cost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Iterator, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from lib.buffer.capture import CHAT_STOPS, Capture, capture_source, message_text, open_capture  # noqa: F401 (CHAT_STOPS: re-exported)
from lib.registry.lineage import Lineage
from lib.serving.generate import Champion, Completion, LoadedModel, NoChampionError

log = logging.getLogger(__name__)
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # what torch.manual_seed accepts


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    n: int = Field(1, ge=1)
    capture: bool = True


class CompletionRequest(_Request):
    prompt: str | list[str]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > 4:
        raise APIError(400, f"stop takes at most 4 sequences, got {len(stops)}", param="stop")
    return stops


def _check_unicode(data: Any) -> None:
    """JSON's `\\ud800` escapes decode to lone surrogates, which no tokenizer (and no UTF-8 file)
    can take: refuse them up front with the field that holds one (400, not a 500 later)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:  # iterative: the body's depth is bounded by the parser, not by our recursion
        where, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise APIError(400, f"{where or 'body'}: text holds a lone surrogate ({value[exc.start]!r} at character {exc.start}), "
                                    f"which is not valid Unicode; send the text as UTF-8", param=where or None, code="invalid_unicode") from None
        elif isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
            stack.extend(("key of " + (where or "body"), k) for k in value)
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))


def capture_flag(request_flag: bool, header: str | None) -> bool:
    """The per-request opt-out: `"capture": false` in the body or a header `X-Capture: off`."""
    if header is not None and header.strip().lower() in ("0", "off", "false", "no"):
        return False
    return request_flag


def check_max_tokens(requested: int | None, limit: int) -> None:
    if requested is not None and requested > limit:
        raise APIError(400, f"max_tokens {requested} exceeds this server's limit serve.max_new_tokens={limit}", param="max_tokens", code="max_tokens_too_large")


class Intake:
    """What every request passes before anything else looks at it, in `consolidate serve` and in
    the capture proxy alike: the bearer token (`serve.token`, constant-time compare, 401), the
    body size (`serve.max_request_bytes`, from Content-Length before reading and while reading,
    413), JSON (400, also when nested too deep to parse), lone surrogates (400)."""

    def __init__(self, serve_cfg: Any):
        token = serve_cfg.token
        self._token = token.get_secret_value().encode() if token is not None else None
        self.limit = serve_cfg.max_request_bytes

    def check_auth(self, header: str | None) -> None:
        if self._token is None:
            return
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
            raise APIError(401, "missing or wrong bearer token: send 'Authorization: Bearer <serve.token>'", type="authentication_error", code="invalid_api_key")

    async def read_body(self, request: Request) -> bytes:
        """The raw body, after the token and size checks."""
        self.check_auth(request.headers.get("authorization"))
        limit = self.limit
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise APIError(413, f"request body of {declared} bytes exceeds serve.max_request_bytes={limit}", code="request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():  # chunked bodies carry no length: count as they come
            size += len(chunk)
            if size > limit:
                raise APIError(413, f"request body exceeds serve.max_request_bytes={limit}", code="request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def parse(body: bytes) -> dict[str, Any]:
        """The body as a JSON object whose strings are all valid Unicode."""
        try:
            data = json.loads(body or b"null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise APIError(400, f"request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise APIError(400, "request body nests JSON too deeply to parse", code="json_too_deep") from None
        if not isinstance(data, dict):
            raise APIError(400, "request body must be a JSON object")
        _check_unicode(data)
        return data

    async def read_json(self, request: Request) -> dict[str, Any]:
        return self.parse(await self.read_body(request))


@dataclasses.dataclass
class Job:
    """One validated request, ready for the model: what to generate and what to capture."""

    kind: Literal["completion", "chat"]
    loaded: LoadedModel
    prompt: str
    ids: list[int]
    max_tokens: int
    stops: list[str]
    request: _Request
    capture_on: bool
    messages: list[dict[str, str]] = dataclasses.field(default_factory=list)
    stop_ids: list[int] | None = None  # end tokens; None: the model's defaults (EOS)

    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.request.temperature, "top_p": self.request.top_p, "seed": self.request.seed, "stop_ids": self.stop_ids}

    def envelope(self, chunk: bool = False) -> dict[str, Any]:
        prefix, obj = ("chatcmpl", "chat.completion") if self.kind == "chat" else ("cmpl", "text_completion")
        if chunk and self.kind == "chat":
            obj = "chat.completion.chunk"
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
            "model": self.loaded.version, "system_fingerprint": self.loaded.version,
        }


class Server:
    """State of one running app: the champion, the capture hook, the limits."""

    def __init__(self, workspace: Any, cfg: Any, champion: Champion | None = None, capture: Capture | None = None):
        self.workspace = workspace
        self.cfg = cfg
        if champion is None:
            lineage = Lineage(workspace.lineage_db)
            lineage.lock_timeout_s = 2.0  # a busy registry must not stall requests: keep serving the old champion
            champion = Champion(
                lineage, reload_interval_s=cfg.serve.reload_interval_s, device=cfg.serve.device, cpu_threads=cfg.serve.cpu_threads
            )
        self.champion = champion
        self._capture = capture
        self._policy_version: str | None = None
        self.intake = Intake(cfg.serve)

    # -- checks ------------------------------------------------------------------------------
    def check_auth(self, header: str | None) -> None:
        self.intake.check_auth(header)

    def max_tokens(self, requested: int | None, default: int, loaded: LoadedModel, prompt_len: int) -> int:
        limit = self.cfg.serve.max_new_tokens
        check_max_tokens(requested, limit)
        room = loaded.context_length - prompt_len
        if room < 1:
            raise APIError(400, f"prompt of {prompt_len} tokens fills the model's context of {loaded.context_length} tokens", param="messages", code="context_length_exceeded")
        if requested is None:
            return min(default, limit, room)
        if requested > room:
            raise APIError(
                400, f"prompt of {prompt_len} tokens + max_tokens {requested} exceeds the model's context of {loaded.context_length} tokens",
                param="max_tokens", code="context_length_exceeded",
            )
        return requested

    @staticmethod
    def check_common(req: _Request) -> None:
        if req.n != 1:
            raise APIError(400, f"n={req.n}: this server returns one choice per request", param="n")
        if req.seed is not None and not SEED_MIN <= req.seed <= SEED_MAX:
            # torch.manual_seed takes a 64-bit seed; a larger one would fail inside generation
            raise APIError(400, f"seed {req.seed} is outside the range a generator seed takes: use an integer "
                                f"from {SEED_MIN} to {SEED_MAX} (-2**63 to 2**64 - 1)", param="seed", code="invalid_value")

    # -- model and capture -------------------------------------------------------------------
    def loaded(self) -> LoadedModel:
        try:
            return self.champion.current()
        except NoChampionError as exc:
            raise APIError(503, str(exc), type="server_error", code="no_champion") from None

    def capture_hook(self, loaded: LoadedModel) -> Capture | None:
        if not self.cfg.serve.capture:
            return None
        if self._capture is None:
            self._capture = open_capture(self.workspace, self.cfg, loaded.special_tokens)
            self._policy_version = loaded.version
        elif self._policy_version != loaded.version:  # a new champion may bring a new tokenizer
            self._capture.policy = dataclasses.replace(self._capture.policy, special_tokens=tuple(loaded.special_tokens))
            self._policy_version = loaded.version
        return self._capture

    # -- endpoints (run in a worker thread) ---------------------------------------------------
    def prepare_completion(self, req: CompletionRequest, capture_on: bool) -> "Job":
        self.check_common(req)
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if len(prompts) != 1:
            raise APIError(400, f"prompt must be one string (got a list of {len(prompts)}): send one request per prompt", param="prompt")
        loaded = self.loaded()
        ids = loaded.encode(prompts[0])
        n = self.max_tokens(req.max_tokens, DEFAULT_COMPLETION_TOKENS, loaded, len(ids))
        return Job("completion", loaded, prompts[0], ids, n, _stops(req.stop), req, capture_on)

    def prepare_chat(self, req: ChatRequest, capture_on: bool) -> "Job":
        self.check_common(req)
        messages = [{"role": m.role, "content": message_text(m.content)} for m in req.messages]
        loaded = self.loaded()
        chat = loaded.chat_prompt(messages)
        n = self.max_tokens(req.max_completion_tokens or req.max_tokens, self.cfg.serve.max_new_tokens, loaded, len(chat.ids))
        return Job("chat", loaded, chat.text, chat.ids, n, chat.stops + _stops(req.stop), req, capture_on, messages, chat.stop_ids)

    def capture_job(self, job: "Job", text: str) -> str | None:
        hook = self.capture_hook(job.loaded)
        if hook is None:
            return None
        if job.kind == "chat":
            return hook.capture_conversation(
                job.messages + [{"role": "assistant", "content": text}],
                {"capture": job.capture_on, "source": capture_source("serve", "chat", job.loaded.version)},
                tokenizer=job.loaded.tokenizer,
            )
        return hook.capture(job.prompt, text, {"capture": job.capture_on, "source": capture_source("serve", "completions", job.loaded.version)})

    def run(self, job: "Job") -> tuple[dict, str | None]:
        out = job.loaded.complete(job.prompt, job.max_tokens, prompt_ids=job.ids, stop=job.stops, **job.sampling())
        text = out.text.strip() if job.kind == "chat" else out.text
        record = self.capture_job(job, text)
        body = job.envelope()
        if job.kind == "chat":
            body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": out.finish_reason}]
        else:
            body["choices"] = [{"text": text, "index": 0, "logprobs": None, "finish_reason": out.finish_reason}]
        body["usage"] = _usage(out)
        return body, record

    def stream(self, job: "Job") -> Iterator[str]:
        """Server-sent events in OpenAI's chunk format, then `data: [DONE]`. The exchange is
        captured once generation has finished; a client that disconnects mid-answer is not
        captured (it never received the whole answer)."""
        chunk = job.envelope(chunk=True)

        def event(choice: dict, **extra: Any) -> str:
            return "data: " + json.dumps({**chunk, "choices": [{"index": 0, "logprobs": None, **choice}], **extra}) + "\n\n"

        try:
            if job.kind == "chat":
                yield event({"delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            started = job.kind != "chat"
            for piece in job.loaded.stream(job.prompt, job.max_tokens, prompt_ids=job.ids, stop=job.stops, **job.sampling()):
                if isinstance(piece, Completion):
                    out = piece
                    break
                if not started:  # the chat reply is stripped of the space after "Assistant:", as when not streaming
                    piece = piece.lstrip()
                    started = bool(piece)
                if piece:
                    yield event({"delta": {"content": piece}, "finish_reason": None} if job.kind == "chat" else {"text": piece, "finish_reason": None})
            text = out.text.strip() if job.kind == "chat" else out.text
            record = self.capture_job(job, text)
            last = {"delta": {}, "finish_reason": out.finish_reason} if job.kind == "chat" else {"text": "", "finish_reason": out.finish_reason}
            yield event(last, usage=_usage(out), capture_id=record)
        except (APIError, ValueError) as exc:
            err = exc if isinstance(exc, APIError) else APIError(400, str(exc))
            yield "data: " + json.dumps(err.body()) + "\n\n"
        yield "data: [DONE]\n\n"

    def models(self) -> dict:
        loaded = self.loaded()
        card = {"object": "model", "created": int(loaded.folder.stat().st_mtime), "owned_by": "consolidation"}
        return {"object": "list", "data": [{"id": loaded.version, **card}, {"id": self.champion.alias, **card}]}

    def flush(self) -> Any:
        """Pending captured records to a parquet file now (None if there were none)."""
        return self._capture.flush() if self._capture is not None else None

    def close(self) -> None:
        if self._capture is not None:
            self._capture.close()
            log.info("capture closed: %d records captured, %d skipped", self._capture.captured, self._capture.skipped)


def validated(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    """`data` as `model`, or a 422 naming the first field that is wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise APIError(422, f"{param}: {err['msg']}", param=param, code="invalid_value") from None


def _usage(out: Any) -> dict[str, int]:
    return {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens, "total_tokens": out.prompt_tokens + out.completion_tokens}


def install_error_handlers(app: FastAPI, what: str) -> None:
    """Errors in OpenAI's shape (server and capture proxy); a bug is logged, never sent to the client."""
    @app.exception_handler(APIError)
    async def _api_error(request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc: StarletteHTTPException):
        return JSONResponse(APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}").body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal_error(request, exc: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(APIError(500, f"internal {what} error ({type(exc).__name__}); see the {what} log", type="server_error").body(), status_code=500)


def create_app(workspace: Any, cfg: Any, *, champion: Champion | None = None, capture: Capture | None = None, preload: bool = True):
    """The FastAPI app serving `workspace`'s champion with `cfg.serve`'s policy and limits."""
    server = Server(workspace, cfg, champion=champion, capture=capture)

    async def flush_every(interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                path = await run_in_threadpool(server.flush)
                if path is not None:
                    log.info("captured records flushed to %s", path)
            except Exception:  # a full disk must not stop the server; the records stay in the log
                log.exception("periodic flush of the buffer failed")

    @asynccontextmanager
    async def lifespan(app):
        if preload:  # fail at start, not at the first request, when there is no champion
            loaded = await run_in_threadpool(server.champion.current)
            chat = "its chat template" if loaded.chat_template else "plain User:/Assistant: transcripts (no chat template)"
            log.info("serving %s on %s; chats in %s", loaded.version, loaded.device, chat)
        interval = server.cfg.serve.flush_interval_s
        flusher = asyncio.create_task(flush_every(interval)) if interval and server.cfg.serve.capture else None
        try:
            yield
        finally:
            if flusher is not None:
                flusher.cancel()
            await run_in_threadpool(server.close)

    app = FastAPI(title="consolidation inference server", lifespan=lifespan)
    app.state.server = server

    install_error_handlers(app, "server")

    async def read_json(request: Request, model: type[BaseModel]) -> BaseModel:
        return validated(model, await server.intake.read_json(request))

    async def call(fn, *args) -> Any:
        try:
            return await run_in_threadpool(fn, *args)
        except ValueError as exc:  # lib-level refusals (e.g. a text over buffer.max_text_bytes)
            raise APIError(400, str(exc)) from None

    def respond(body: dict, record: str | None) -> JSONResponse:
        headers = {"X-Capture-Id": record} if record else {}
        return JSONResponse(body, headers=headers)

    async def answer(request: Request, model: type[_Request], prepare) -> Any:
        req = await read_json(request, model)
        job = await call(prepare, req, capture_flag(req.capture, request.headers.get("x-capture")))
        if req.stream:  # errors found before the first byte are ordinary 4xx responses
            return StreamingResponse(server.stream(job), media_type="text/event-stream")
        return respond(*await call(server.run, job))

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await answer(request, CompletionRequest, server.prepare_completion)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await answer(request, ChatRequest, server.prepare_chat)

    @app.get("/v1/models")
    async def models(request: Request):
        server.check_auth(request.headers.get("authorization"))
        return await call(server.models)

    @app.get("/health")
    async def health():
        return {"status": "ok", "version": server.champion.version}

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        """SGLang's weight push (what `serve.rollout.kind=sglang` calls): load the checkpoint
        folder `model_path` and serve it from the next request on."""
        data = await server.intake.read_json(request)
        if not server.cfg.serve.weight_updates:
            raise APIError(403, "weight updates are off on this server (serve.weight_updates=false)", type="permission_error")
        path = data.get("model_path")
        if not isinstance(path, str) or not path:
            raise APIError(400, "model_path: give the checkpoint folder to load, as a string", param="model_path")
        try:
            loaded = await run_in_threadpool(server.champion.pin, path)
        except (OSError, ValueError) as exc:  # no such folder, not a checkpoint, unreadable weights
            return JSONResponse({"success": False, "message": f"{path}: {exc}"}, status_code=400)
        return {"success": True, "message": f"serving {loaded.version} from {loaded.folder}", "num_paused_requests": 0}

    @app.get("/get_model_info")
    async def get_model_info(request: Request):
        """SGLang's description of what is served (the folder a push loaded, or the champion's)."""
        server.check_auth(request.headers.get("authorization"))
        loaded = await call(server.loaded)
        return {"model_path": str(loaded.folder), "tokenizer_path": str(loaded.folder), "is_generation": True, "version": loaded.version}

    return app


class BackgroundServer:
    """uvicorn serving an app from a thread (tests, benchmarks, notebooks): `with
    BackgroundServer(app) as srv: srv.base_url`. Binds before start, so the port is known."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.startup_failed = False

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except SystemExit:  # uvicorn exits when the lifespan start-up fails (no champion); its log says why
            self.startup_failed = True

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"inference server on {self.base_url} did not start (see the log above)")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()


def run(workspace: Any, cfg: Any, log_level: str = "info") -> None:
    """Serve in the foreground until interrupted (`consolidate serve`)."""
    # this module's own lines (which version serves, reloads, flushes) next to uvicorn's
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    app = create_app(workspace, cfg)
    uvicorn.run(app, host=cfg.serve.host, port=cfg.serve.port, log_level=log_level)
