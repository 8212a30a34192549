"""Capture: what an inference engine hands to the memory buffer after each answer.

- One served exchange becomes one buffer record (one document): a completion is `prompt +
  completion`, exactly the text the model saw and wrote; a chat is the whole conversation rendered
  as plain text, one turn per line group:

      System: You are terse.
      User: What is a qubit?
      Assistant: A two-level quantum system.

  (`render_conversation`; the role name, a colon, a space, the content; turns joined by "\\n").
  The server prompts the model with the same rendering plus "Assistant:", so what is captured is
  what the model will be trained on tomorrow, in the format it is asked in today.
- Policy (`CapturePolicy`, from config `serve.*`): `capture` on/off, `strip_system_prompt`
  (seed 000 open question 1: a system prompt repeated in every conversation would be learnt as
  the most frequent text of the night), `strip_special_tokens` (remove `<|bos|>`-style markers and
  the tokenizer's own special tokens, so a captured document is plain text like the corpus).
- Opt-out per request: `meta={"capture": False}` (the server maps a request field
  `"capture": false` or a header `X-Capture: off` onto it). Opted-out text never reaches the
  buffer, not even its write-ahead log.
- Durability is the buffer's: `MemoryBuffer.add` appends to its write-ahead log before it returns,
  so a record whose id was handed back survives a crash of the server; records are flushed to a
  parquet file every `buffer.flush_size` records and on shutdown.
- `Capture` serialises calls with a lock: one buffer, many server threads.

Trade-off: one document per exchange (not per turn) keeps a conversation's context together for
training, at the cost of storing a long chat's early turns once per request when a client resends
the history each turn (an n-turn chat sent turn by turn stores ~n²/2 turns); clients that want one
record per session opt out of all but the last request, as `consolidate chat` does.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

# Markers in the style this project's tokenizers use (`<|bos|>`, `<|fim_prefix|>`, `<|im_start|>`):
# removed even when the serving tokenizer does not know them, since a client may paste them.
_MARKER = re.compile(r"<\|[A-Za-z0-9_]{1,32}\|>")

ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool", "developer": "System"}


@dataclass(frozen=True)
class CapturePolicy:
    """What is written into the buffer; built from config `serve.*` by `CapturePolicy.from_config`."""

    enabled: bool = True
    strip_system_prompt: bool = False
    strip_special_tokens: bool = True
    special_tokens: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_config(cls, serve_cfg: Any, special_tokens: Iterable[str] = ()) -> "CapturePolicy":
        return cls(
            enabled=serve_cfg.capture,
            strip_system_prompt=serve_cfg.strip_system_prompt,
            strip_special_tokens=serve_cfg.strip_special_tokens,
            special_tokens=tuple(t for t in special_tokens if t),
        )

    def clean(self, text: str) -> str:
        if not self.strip_special_tokens:
            return text
        # longest first, so `<|fim_prefix|>` is not half-removed by a shorter token it contains
        for token in sorted(self.special_tokens, key=len, reverse=True):
            text = text.replace(token, "")
        return _MARKER.sub("", text)


def message_text(content: Any) -> str:
    """OpenAI messages carry a string or a list of parts ({"type": "text", "text": ...})."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text")
    raise ValueError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def render_conversation(messages: Iterable[Mapping[str, Any]], *, strip_system_prompt: bool = False) -> str:
    """Plain-text transcript: "Role: content" per turn, turns joined by a newline."""
    lines = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLE_NAMES:
            raise ValueError(f"messages[{i}].role must be one of {', '.join(sorted(ROLE_NAMES))}, got {role!r}")
        if strip_system_prompt and ROLE_NAMES[role] == "System":
            continue
        lines.append(f"{ROLE_NAMES[role]}: {message_text(message.get('content')).strip()}")
    return "\n".join(lines)


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

    def capture(self, prompt: str, completion: str, meta: Mapping[str, Any] | None = None) -> str | None:
        """A completion exchange: the document is prompt + completion, as the model saw it."""
        return self._add(prompt + completion, meta)

    def capture_conversation(self, messages: list[Mapping[str, Any]], meta: Mapping[str, Any] | None = None) -> str | None:
        """A chat exchange (the assistant's answer last): the whole conversation as one document."""
        text = render_conversation(messages, strip_system_prompt=self.policy.strip_system_prompt)
        return self._add(text, meta)

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
        source = (meta or {}).get("source")
        with self._lock:
            record_id = self.buffer.add(text, source=source)
            self.captured += 1
        return record_id


def open_capture(workspace: Any, cfg: Any, special_tokens: Iterable[str] = ()) -> Capture:
    """A Capture writing into the workspace's memory buffer with the config's policy and sizes."""
    from lib.buffer import MemoryBuffer

    buffer = MemoryBuffer.from_config(workspace.buffers, cfg)
    return Capture(buffer, CapturePolicy.from_config(cfg.serve, special_tokens))


_default: Capture | None = None


def set_default(hook: Capture | None) -> None:
    """Install the process-wide hook that the module-level `capture()` uses."""
    global _default
    _default = hook


def capture(prompt: str, completion: str, meta: Mapping[str, Any] | None = None) -> str | None:
    """Module-level convenience for engines that do not carry a `Capture` around: uses the hook
    installed with `set_default` (the server installs its own at start-up)."""
    if _default is None:
        raise RuntimeError("no capture hook installed: call lib.capture.set_default(open_capture(workspace, cfg)) first")
    return _default.capture(prompt, completion, meta)
