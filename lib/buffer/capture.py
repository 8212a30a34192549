"""Capture: what an inference engine hands to the buffer after each answer.

- One served exchange becomes one buffer record (one document): a completion is `prompt +
  completion`, exactly the text the model saw and wrote; a chat is the whole conversation, in the
  format the model was prompted in (`capture.format`):
  - `chat_template` (default) for a model whose tokenizer has a chat template: the conversation
    rendered by the model's own template (`lib.serving.chat_format.document`: no generation prompt, no
    leading BOS), e.g. for a ChatML model

        <|im_start|>user
        What is a qubit?<|im_end|>
        <|im_start|>assistant
        A two-level quantum system.<|im_end|>

    The server prompted the model with the same template, so the model is consolidated on the
    format it serves. Safety rule: the template's markers are the only control tokens a record
    may hold. Message contents are cleaned of every control token and `<|...|>` marker before
    rendering, whatever `strip_special_tokens` says, so a user cannot forge a turn.
  - `plain`, and any model without a template (one log line says so): a transcript, one turn per
    line group (`render_conversation`; the role name, a colon, a space, the content):

        System: You are terse.
        User: What is a qubit?
        Assistant: A two-level quantum system.

    A model without a template is prompted with the same rendering plus "Assistant:"
    (`chat_prompt`) and stopped at the next turn (`CHAT_STOPS`).
- Policy (`CapturePolicy`, from config `serve.*` and `capture.format`): `capture` on/off,
  `strip_system_prompt` (a system prompt repeated in every conversation
  would be learnt as the most frequent text of the night; a template's own default system prompt,
  as Qwen2's, is part of the format and stays), `strip_special_tokens` (remove `<|bos|>`-style
  markers and the tokenizer's control tokens from plain records, so a captured document is plain
  text like the corpus).
- Opt-out per request: `meta={"capture": False}` (the server maps a request field
  `"capture": false` or a header `X-Capture: off` onto it). Opted-out text never reaches the
  buffer, not even its write-ahead log.
- Durability is the buffer's: `Buffer.add` appends to its write-ahead log before it returns,
  so a record whose id was handed back survives a crash of the server; records are flushed to a
  parquet file every `buffer.flush_size` records and on shutdown.
- `Capture` serialises calls with a lock: one buffer, many server threads.
- A record's `source` names who captured it and which version answered (`capture_source`:
  `serve:chat:v3`, `proxy:completions:v3:<upstream model>`; `source_version` reads it back;
  `answers_by_version` counts a version's answers in buffer files, for a rollback).

Trade-off: one document per exchange (not per turn) keeps a conversation's context together for
training, at the cost of storing a long chat's early turns once per request when a client resends
the history each turn (an n-turn chat sent turn by turn stores ~n²/2 turns); clients that want one
record per session opt out of all but the last request, as `consolidate chat` does.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping
import pyarrow.parquet as pq

from lib.buffer.store import Buffer
from lib.serving import chat_format

log = logging.getLogger(__name__)

ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool", "developer": "System"}
CHAT_STOPS = ["\nUser:", "\nSystem:"]  # a model prompted with a transcript keeps writing it: end the turn here


@dataclass(frozen=True)
class CapturePolicy:
    """What is written into the buffer; built from config `serve.*` by `CapturePolicy.from_config`."""

    enabled: bool = True
    strip_system_prompt: bool = False
    strip_special_tokens: bool = True
    special_tokens: tuple[str, ...] = field(default_factory=tuple)
    format: Literal["chat_template", "plain"] = "chat_template"

    @classmethod
    def from_config(cls, serve_cfg: Any, special_tokens: Iterable[str] = (), format: str = "chat_template") -> "CapturePolicy":
        return cls(
            enabled=serve_cfg.capture,
            strip_system_prompt=serve_cfg.strip_system_prompt,
            strip_special_tokens=serve_cfg.strip_special_tokens,
            special_tokens=tuple(t for t in special_tokens if t),
            format=format,
        )

    def clean(self, text: str) -> str:
        if not self.strip_special_tokens:
            return text
        return chat_format.clean_content(text, self.special_tokens)


def message_text(content: Any) -> str:
    """OpenAI messages carry a string or a list of parts ({"type": "text", "text": ...})."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text")
    raise ValueError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def _check_roles(messages: list[Mapping[str, Any]]) -> None:
    for i, message in enumerate(messages):
        if message.get("role") not in ROLE_NAMES:
            raise ValueError(f"messages[{i}].role must be one of {', '.join(sorted(ROLE_NAMES))}, got {message.get('role')!r}")


def render_conversation(messages: Iterable[Mapping[str, Any]], *, strip_system_prompt: bool = False) -> str:
    """Plain-text transcript: "Role: content" per turn, turns joined by a newline."""
    messages = list(messages)
    _check_roles(messages)
    return "\n".join(
        f"{ROLE_NAMES[m['role']]}: {message_text(m.get('content')).strip()}"
        for m in messages
        if not (strip_system_prompt and ROLE_NAMES[m["role"]] == "System")
    )


def chat_prompt(messages: Iterable[Mapping[str, Any]]) -> str:
    """The text the model continues for a chat request: the transcript and an open assistant turn."""
    transcript = render_conversation(messages)
    return f"{transcript}\nAssistant:" if transcript else "Assistant:"


def opted_out(meta: Mapping[str, Any] | None) -> bool:
    if not meta:
        return False
    flag = meta.get("capture", True)
    if isinstance(flag, str):
        return flag.strip().lower() in ("0", "off", "false", "no")
    return flag is False


class Capture:
    """The hook an inference engine calls after each answer; returns the buffer record id, or
    None when nothing was captured (policy off, request opted out, nothing left after cleaning)."""

    def __init__(self, buffer: Any, policy: CapturePolicy | None = None):
        self.buffer = buffer
        self.policy = policy or CapturePolicy()
        self._lock = threading.Lock()
        self.captured = 0
        self.skipped = 0
        self._noted: set[str] = set()

    def capture(self, prompt: str, completion: str, meta: Mapping[str, Any] | None = None) -> str | None:
        """A completion exchange: the document is prompt + completion, as the model saw it."""
        return self._add(prompt + completion, meta)

    def capture_conversation(self, messages: list[Mapping[str, Any]], meta: Mapping[str, Any] | None = None, tokenizer: Any = None) -> str | None:
        """A chat exchange (the assistant's answer last): the whole conversation as one document,
        rendered with `tokenizer`'s chat template under `format: chat_template` (the module
        docstring), else as a plain transcript."""
        if self.policy.format == "chat_template" and tokenizer is not None and chat_format.has_template(tokenizer):
            return self._add_rendered(messages, meta, tokenizer)
        if self.policy.format == "chat_template":
            self._note_plain(tokenizer)
        text = render_conversation(messages, strip_system_prompt=self.policy.strip_system_prompt)
        return self._add(text, meta)

    def _add_rendered(self, messages: list[Mapping[str, Any]], meta: Mapping[str, Any] | None, tokenizer: Any) -> str | None:
        if not self.policy.enabled or opted_out(meta):
            self.skipped += 1
            return None
        _check_roles(messages)
        kept = [m for m in messages if not (self.policy.strip_system_prompt and ROLE_NAMES[m["role"]] == "System")]
        # the safety rule: contents never carry a control token, whatever strip_special_tokens says
        tokens = set(self.policy.special_tokens) | set(chat_format.control_tokens(tokenizer))
        cleaned = chat_format.clean_messages(
            [{"role": m["role"], "content": message_text(m.get("content"))} for m in kept], tokens
        )
        if not any(m["content"].strip() for m in cleaned):
            self.skipped += 1
            return None
        return self._store(chat_format.document(tokenizer, cleaned), meta)

    def _note_plain(self, tokenizer: Any) -> None:
        name = "" if tokenizer is None else (getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__)
        if name not in self._noted:
            self._noted.add(name)
            why = "no tokenizer was given" if tokenizer is None else f"the model's tokenizer {name} has no chat template"
            log.info("capture.format=chat_template, but %s: conversations are captured as plain 'User:/Assistant:' transcripts", why)

    def flush(self) -> Path | None:
        with self._lock:
            return self.buffer.flush()

    def close(self) -> None:
        """Flush and release the buffer's write-ahead log (server shutdown, end of a chat)."""
        with self._lock:
            self.buffer.close(flush=True)

    def _add(self, text: str, meta: Mapping[str, Any] | None) -> str | None:
        if not self.policy.enabled or opted_out(meta):
            self.skipped += 1
            return None
        text = self.policy.clean(text).strip()
        if not text:
            self.skipped += 1
            return None
        return self._store(text, meta)

    def _store(self, text: str, meta: Mapping[str, Any] | None) -> str:
        source = (meta or {}).get("source")
        with self._lock:
            record_id = self.buffer.add(text, source=source)
            self.captured += 1
        return record_id


def capture_source(origin: str, kind: str, version: str | None, model: str | None = None) -> str:
    """The `source` of a captured record: who captured it, which endpoint, which version answered
    and, behind the proxy, the upstream's model name: `serve:chat:v3`, `proxy:completions:v3:Qwen/Qwen2-0.5B`.
    The version is what lets a night, or a rollback, tell which model wrote each answer."""
    parts = [origin, kind, version or "unknown"]
    if model:
        parts.append(model[:256])
    return ":".join(parts)


def source_version(source: str | None) -> str | None:
    """The serving version a record's `source` names (`capture_source`; `chat:v3` from
    `consolidate chat`), None for text that no served model wrote (`consolidate buffer add`)."""
    if not source:
        return None
    parts = source.split(":", 3)
    if parts[0] in ("serve", "proxy") and len(parts) >= 3:
        return None if parts[2] == "unknown" else parts[2]
    if parts[0] == "chat" and len(parts) == 2:
        return parts[1]
    return None


def answers_by_version(paths: Iterable[str | Path], version: str) -> dict[str, int]:
    """How many records of each buffer file in `paths` were answered by `version` (files with
    none are left out): reads only the `source` column."""
    out: dict[str, int] = {}
    for path in paths:
        try:
            sources = pq.read_table(path, columns=["source"]).column("source").to_pylist()
        except (OSError, KeyError, ValueError) as exc:  # a moved or quarantined file: say so, count the rest
            log.warning("cannot read the sources of %s: %s", path, exc)
            continue
        n = sum(1 for s in sources if source_version(s) == version)
        if n:
            out[str(path)] = n
    return out


def open_capture(workspace: Any, cfg: Any, special_tokens: Iterable[str] = ()) -> Capture:
    """A Capture writing into the workspace's buffer with the config's policy and sizes."""
    buffer = Buffer.from_config(workspace.buffers, cfg)
    return Capture(buffer, CapturePolicy.from_config(cfg.serve, special_tokens, cfg.capture.format))


_default: Capture | None = None


def set_default(hook: Capture | None) -> None:
    """Install the process-wide hook that the module-level `capture()` uses."""
    global _default
    _default = hook


def capture(prompt: str, completion: str, meta: Mapping[str, Any] | None = None) -> str | None:
    """Module-level convenience for engines that do not carry a `Capture` around: uses the hook
    installed with `set_default` (the server installs its own at start-up)."""
    if _default is None:
        raise RuntimeError("no capture hook installed: call lib.buffer.capture.set_default(open_capture(workspace, cfg)) first")
    return _default.capture(prompt, completion, meta)
