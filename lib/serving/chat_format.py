"""Conversations in the model's own format: its chat template, its end of turn, its markers.

An instruct model was fine-tuned on conversations rendered by its chat template (ChatML's
`<|im_start|>user\\n...<|im_end|>`, Llama-3's `<|start_header_id|>...<|eot_id|>`, Gemma's
`<start_of_turn>...<end_of_turn>`). Serving it in another format, or consolidating it on
conversations in another format, teaches it a format it does not use. So:

- `has_template(tok)`: the tokenizer carries a chat template (tokenizer_config.json
  `chat_template`, or a `chat_template.jinja` file; transformers loads either).
- `render(tok, messages, add_generation_prompt)`: the template's text for a conversation, exactly
  what `tokenizer.apply_chat_template(..., tokenize=False)` writes (BOS included when the
  template writes it). `encode(tok, text)` tokenizes such a rendering the way
  `apply_chat_template(tokenize=True)` does: the markers in it become their control-token ids.
- `document(tok, messages)`: the conversation as a memory-buffer record: the rendering without a
  generation prompt, without a leading BOS (packing writes the document separator itself) and
  without surrounding whitespace.
- `end_of_turn_ids(tok)`: the token the template writes right after an assistant message
  (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, or EOS for Mistral-style templates), found by
  rendering a probe conversation. Generation for a chat stops there as well as at EOS: Llama-3's
  tokenizer EOS is `<|end_of_text|>`, and a model served without this stop runs on into a new turn.
- `control_tokens(tok)` and `clean_content(text, tokens)`: the safety rule. The template's own
  markers are the only control tokens that may appear in a rendered conversation, so message
  contents are cleaned, before rendering, of every control token (special tokens, added tokens
  the template text names, `tokenizer.chat_control_tokens`) and of every `<|...|>`-style marker,
  repeated until nothing changes (removing `<|x|>` from `<|im_<|x|>start|>` must not leave a
  forged `<|im_start|>`). A user cannot forge a turn, in the prompt or in a captured record.

Contract with tokenization (`template_markers(tokenizer_dir)`, called by lib/data/sampling.py): it
returns the control-token strings the template emits, found by rendering probe conversations
(system, user, assistant turns, with and without a generation prompt) and collecting the control
tokens in their tokenization, in id order; the tokenizer's BOS is left out (it only opens a
rendering, and buffer records are written without it). A captured record rendered here contains
these markers and no other control token, so tokenizing a new-data document with exactly these
strings read as control tokens, and every other special token read as text, gives the ids the
model saw when it was served. A tokenizer without a template has no markers (`[]`).

Trade-off: markers are found by rendering, not by parsing the Jinja source, so a marker that a
template writes only under a condition the probes do not meet (tool calls, documents) is not
listed; such a marker is still removed from message contents (`control_tokens`), it is only read
as text if a record ever holds it. Templates that mark turns with ordinary text instead of tokens
(Mistral v1's `[INST]` in a tokenizer where it is not an added token) cannot be protected by
token cleaning; their turns can be imitated in text, as in any plain transcript.
"""

from __future__ import annotations

# transformers is imported inside functions: importing this module must not cost its ~2 s
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from jinja2.exceptions import TemplateError

# Markers in the style `<|bos|>`, `<|im_start|>`, `<|eot_id|>`: removed from contents even when the
# tokenizer does not know them, since a client may paste another family's markers.
MARKER = re.compile(r"<\|[A-Za-z0-9_]{1,32}\|>")

_PROBE_REPLY = "Sure: 42."


class ChatTemplateError(ValueError):
    """The model's chat template refused a conversation (e.g. roles that do not alternate)."""


def has_template(tok: Any) -> bool:
    template = getattr(tok, "chat_template", None)
    if isinstance(template, dict):
        return "default" in template
    return bool(template)


def _template_text(tok: Any) -> str:
    template = tok.chat_template
    return template.get("default", "") if isinstance(template, dict) else (template or "")


def render(tok: Any, messages: list[Mapping[str, Any]], add_generation_prompt: bool) -> str:
    """The template's rendering of `messages` (contents as given: clean them first)."""
    if not has_template(tok):
        raise ChatTemplateError(f"tokenizer {getattr(tok, 'name_or_path', '')!r} has no chat template")
    try:
        return tok.apply_chat_template([dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt)
    except TemplateError as exc:  # the template's own refusal (raise_exception) or a broken template
        raise ChatTemplateError(f"the model's chat template refused this conversation: {exc}") from None


def encode(tok: Any, text: str) -> list[int]:
    """Token ids of a rendering: markers become control tokens, no BOS/EOS added around it."""
    return list(tok(text, add_special_tokens=False)["input_ids"])


def document(tok: Any, messages: list[Mapping[str, Any]]) -> str:
    """A finished conversation as one buffer record (no generation prompt, no leading BOS)."""
    text = render(tok, messages, add_generation_prompt=False)
    bos = getattr(tok, "bos_token", None)
    if bos and text.startswith(bos):
        text = text[len(bos):]
    return text.strip()


def control_tokens(tok: Any) -> list[str]:
    """Strings that tokenize to a control token: special tokens, added tokens the template's text
    names (Gemma's non-special `<start_of_turn>`), and `tokenizer.chat_control_tokens`."""
    out = {t for t in (getattr(tok, "all_special_tokens", None) or []) if t}
    template = _template_text(tok) if has_template(tok) else ""
    declared = set(getattr(tok, "chat_control_tokens", None) or [])
    for added in (getattr(tok, "added_tokens_decoder", None) or {}).values():
        content = added.content
        if content and (added.special or content in declared or (content in template and not content.isspace())):
            out.add(content)
    return sorted(out, key=lambda t: (-len(t), t))  # longest first, the order `clean_content` removes them in


def clean_content(text: str, tokens: Iterable[str]) -> str:
    """`text` without any of `tokens` nor `<|...|>` markers, repeated until stable, so pieces
    left on both sides of a removed token cannot join into a new one."""
    ordered = sorted({t for t in tokens if t}, key=len, reverse=True)
    while True:
        before = text
        for token in ordered:
            text = text.replace(token, "")
        text = MARKER.sub("", text)
        if text == before:
            return text


def clean_messages(messages: Iterable[Mapping[str, Any]], tokens: Iterable[str]) -> list[dict[str, Any]]:
    """`messages` with every content passed through `clean_content`, ready for `render`.
    OpenAI's "developer" role is the system role of every template."""
    tokens = list(tokens)
    return [
        {**m, "role": "system" if m.get("role") == "developer" else m.get("role"), "content": clean_content(m.get("content") or "", tokens)}
        for m in messages
    ]


def _probe_conversations() -> list[tuple[list[dict[str, str]], bool]]:
    system = {"role": "system", "content": "You are terse."}
    turns = [
        {"role": "user", "content": "What is six times seven?"},
        {"role": "assistant", "content": _PROBE_REPLY},
        {"role": "user", "content": "Thanks."},
    ]
    return [([system, *turns], True), ([system, *turns[:2]], False), (turns, True), (turns[:2], False)]


def _rendered_probes(tok: Any) -> list[tuple[list[dict[str, str]], str]]:
    """Probe renderings the template accepts (Gemma's refuses a system turn: skipped)."""
    out = []
    for messages, gen in _probe_conversations():
        try:
            out.append((messages, render(tok, messages, add_generation_prompt=gen)))
        except (ChatTemplateError, TypeError, ValueError):
            continue
    return out


def markers(tok: Any) -> list[str]:
    """Control-token strings the template emits (BOS left out), in id order; [] without a template."""
    if not has_template(tok):
        return []
    control = set(control_tokens(tok))
    found: dict[int, str] = {}
    for _, text in _rendered_probes(tok):
        ids = encode(tok, text)
        for i, piece in zip(ids, tok.convert_ids_to_tokens(ids)):
            if piece in control:
                found[i] = piece
    bos = getattr(tok, "bos_token", None)
    return [piece for i, piece in sorted(found.items()) if piece != bos]


def template_markers(tokenizer_dir: str | Path) -> list[str]:
    """`markers` of the tokenizer saved in `tokenizer_dir` (the contract in the module docstring)."""
    from transformers import AutoTokenizer

    return markers(AutoTokenizer.from_pretrained(str(tokenizer_dir)))


def end_of_turn_ids(tok: Any) -> list[int]:
    """The control token the template writes right after an assistant message ([] when it writes
    none, or has no template)."""
    if not has_template(tok):
        return []
    control = set(control_tokens(tok))
    for messages, text in _rendered_probes(tok):
        if messages[-1]["role"] != "assistant":
            continue
        at = text.rfind(_PROBE_REPLY)
        if at < 0:
            continue
        tail = encode(tok, text[at + len(_PROBE_REPLY):])
        for i, piece in zip(tail, tok.convert_ids_to_tokens(tail)):
            if piece in control:
                return [i]
            if tok.decode([i]).strip():  # text after the reply before any marker: no end token
                break
    return []
