"""Generation with the champion: load a version, continue a prompt, follow the `champion` alias.

- `load_version(path, version)` materialises the version folder (a delta checkpoint becomes a full
  Hugging Face folder, `lib.checkpoints.checkpoint.materialize`) and loads model + tokenizer onto the device
  (CUDA when available and `serve.device=auto`, else CPU), in eval mode.
- `LoadedModel.complete(prompt, ...)` tokenizes a plain prompt after `prompt_prefix_ids` (the
  document separator training packs every document with: a prompt without it is out of
  distribution), generates greedily at temperature 0 or samples (temperature, top_p,
  optional seed), stops at an end token (EOS, the ends generation_config.json lists, and for a
  chat the template's end of turn) or at a stop string, and returns the text without the stop
  string plus token counts and the OpenAI finish reason.
- `LoadedModel.chat_prompt(messages)` is the one place that turns a conversation into a prompt,
  for the server and `consolidate chat` alike: the model's own chat template with the generation
  prompt added, message contents cleaned of control tokens (`lib.serving.chat_format`), stopping at the
  template's end of turn; a model without a template gets the plain "User:/Assistant:" transcript
  (`lib.buffer.capture.chat_prompt`), stopping at the next "\nUser:".
- Models without a pad token (Llama-3, GPT-2) generate with an end token as padding; vocabularies
  over 65,535 need nothing special here (ids are int64 tensors).
- `Champion` follows the lineage alias: it re-reads `champion` at most every `reload_interval_s`
  seconds (0: every call), and only when the registry file changed since the last read; loads a moved alias's version beside the serving one, then swaps the
  reference; a generation in flight finishes on the model it started with. While one thread
  checks or loads, the others keep answering with the current model; a version that fails to
  load is logged and the current one stays.
- Generation runs under one lock per process: a torch model is not re-entrant across threads and
  two CPU generations at once only split the same cores.

Trade-off: one model call at a time caps throughput at one request at a time (16 tokens of the
tiny preset's model: ~0.13 s on the busy 2-core machine; far more for a real model); batching concurrent requests would raise it, at the
cost of a scheduler this project does not need for a nightly-consolidation demo.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from lib.buffer.capture import CHAT_STOPS, chat_prompt
from lib.checkpoints.checkpoint import materialize
from lib.data.tokenizer import load_tokenizer
from lib.serving import chat_format

log = logging.getLogger(__name__)


def prompt_prefix_ids(folder: str | Path) -> list[int]:
    """The ids that open a plain prompt: the document separator the model was trained with, as
    training packs every document (lib/data/tokenizer.py: the one a version records, else BOS when the
    tokenizer adds it, else `<|endoftext|>`: Llama's `<|begin_of_text|>`, GPT-2's and Qwen2's
    `<|endoftext|>`)."""
    return [load_tokenizer(folder).separator()[0]]


class NoChampionError(RuntimeError):
    """The lineage has no `champion` alias (or it points at a version without a folder)."""


def pick_device(choice: str = "auto") -> str:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("serve.device=cuda but torch sees no CUDA device; use serve.device=auto or cpu")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


@dataclass
class ChatPrompt:
    """A conversation made ready for generation (`LoadedModel.chat_prompt`)."""

    text: str  # the rendering the model continues
    ids: list[int]
    stops: list[str]  # stop strings (the plain transcript's next turn)
    stop_ids: list[int]  # end tokens: EOS, generation_config's ends, the template's end of turn


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (EOS or stop string) | "length"


class LoadedModel:
    """One version in memory: model, tokenizer, device, and the lock its generations share."""

    def __init__(self, version: str, folder: Path, model: Any, tokenizer: Any, device: str):
        self.version = version
        self.folder = folder
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.context_length = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        self.lock = threading.Lock()
        self.chat_template = chat_format.has_template(tokenizer)
        self.control_tokens = chat_format.control_tokens(tokenizer)
        self.end_ids = _end_ids(tokenizer, model)
        self.end_of_turn_ids = chat_format.end_of_turn_ids(tokenizer) if self.chat_template else []
        self.prefix_ids = prompt_prefix_ids(folder)

    @property
    def special_tokens(self) -> list[str]:
        """Every string that tokenizes to a control token (what capture cleaning removes)."""
        return list(self.control_tokens)

    def encode(self, prompt: str) -> list[int]:
        # split_special_tokens: a prompt that literally contains "<|eos|>" stays characters, as in
        # training (lib.data.tokenizer encodes with special-token matching off): no control-token injection
        ids = self.tokenizer(prompt, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        prefix = self.prefix_ids
        if prefix and ids[: len(prefix)] != prefix:
            ids = prefix + ids
        return ids

    def chat_prompt(self, messages: list[dict[str, str]]) -> ChatPrompt:
        """The prompt for a conversation whose last turn awaits the assistant's answer."""
        if self.chat_template:
            cleaned = chat_format.clean_messages(messages, self.control_tokens)
            text = chat_format.render(self.tokenizer, cleaned, add_generation_prompt=True)
            stop_ids = self.end_ids + [i for i in self.end_of_turn_ids if i not in self.end_ids]
            return ChatPrompt(text, chat_format.encode(self.tokenizer, text), [], stop_ids)
        text = chat_prompt(messages)
        return ChatPrompt(text, self.encode(text), list(CHAT_STOPS), list(self.end_ids))

    def _prepare(self, prompt: str, max_new_tokens: int, temperature: float, top_p: float, stop: list[str] | None, prompt_ids: list[int] | None, stop_ids: list[int] | None):
        import torch

        ids = prompt_ids if prompt_ids is not None else self.encode(prompt)
        if len(ids) + max_new_tokens > self.context_length:
            raise ValueError(
                f"prompt of {len(ids)} tokens + max_tokens {max_new_tokens} exceeds the model's context of {self.context_length} tokens"
            )
        stop = [s for s in (stop or []) if s]
        ends = list(stop_ids) if stop_ids else list(self.end_ids)
        pad = self.tokenizer.pad_token_id
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            # no pad token (Llama-3, GPT-2): one sequence needs no padding, an end token stands in
            "pad_token_id": pad if pad is not None else (ends[0] if ends else 0),
            "eos_token_id": ends or None,
        }
        if temperature and temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=0)
        else:
            kwargs.update(do_sample=False)
        if stop:
            kwargs.update(stop_strings=stop, tokenizer=self.tokenizer)
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        kwargs["attention_mask"] = torch.ones_like(input_ids)
        return ids, input_ids, stop, kwargs

    def _generate(self, input_ids: Any, seed: int | None, kwargs: dict[str, Any]) -> Any:
        import torch

        with self.lock, torch.inference_mode():
            if seed is not None:
                torch.manual_seed(int(seed))
            return self.model.generate(input_ids, **kwargs)

    def _finish(self, ids: list[int], out: Any, stop: list[str], ends: list[int]) -> Completion:
        new_ids = out[0, len(ids):].tolist()
        at = next((k for k, t in enumerate(new_ids) if t in ends), None)
        if at is not None:
            new_ids = new_ids[:at]
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        finish = "stop" if at is not None else "length"
        cut = _first_stop(text, stop)
        if cut >= 0:
            text, finish = text[:cut], "stop"
        return Completion(text=text, prompt_tokens=len(ids), completion_tokens=len(new_ids), finish_reason=finish)

    def complete(
        self,
        prompt: str,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        prompt_ids: list[int] | None = None,
        stop_ids: list[int] | None = None,
    ) -> Completion:
        """Continue `prompt` (or `prompt_ids`); `stop_ids` replaces the default end tokens."""
        ids, input_ids, stop, kwargs = self._prepare(prompt, max_new_tokens, temperature, top_p, stop, prompt_ids, stop_ids)
        return self._finish(ids, self._generate(input_ids, seed, kwargs), stop, kwargs["eos_token_id"] or [])

    def stream(
        self,
        prompt: str,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        prompt_ids: list[int] | None = None,
        stop_ids: list[int] | None = None,
    ) -> Iterator[str | Completion]:
        """Yield text pieces as they are generated, then the final `Completion` (whose text is
        the pieces joined). Text that could be the start of a stop string is held back until it
        is known not to be one, so a stop string never reaches the client."""
        from transformers import TextIteratorStreamer

        ids, input_ids, stop, kwargs = self._prepare(prompt, max_new_tokens, temperature, top_p, stop, prompt_ids, stop_ids)
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=600)
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["out"] = self._generate(input_ids, seed, {**kwargs, "streamer": streamer})
            except BaseException as exc:  # re-raised in the consumer below
                result["error"] = exc
                streamer.end()

        worker = threading.Thread(target=run, name=f"generate-{self.version}", daemon=True)
        worker.start()
        keep = max((len(s) for s in stop), default=1) - 1
        held, sent = "", []
        for piece in streamer:
            held += piece
            cut = _first_stop(held, stop)
            if cut >= 0:  # generation ends by itself at the same stop string (stop_strings above)
                held = held[:cut]
                break
            if len(held) > keep:
                sent.append(held[: len(held) - keep])
                held = held[len(held) - keep:]
                yield sent[-1]
        worker.join()
        if "error" in result:
            raise result["error"]
        done = self._finish(ids, result["out"], stop, kwargs["eos_token_id"] or [])
        if held:
            sent.append(held)
            yield held
        # the final text is what the client was sent (incremental decoding may differ from a
        # whole decode at a stop cut by a character or two of whitespace)
        yield Completion(text="".join(sent), prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens, finish_reason=done.finish_reason)


def _end_ids(tokenizer: Any, model: Any) -> list[int]:
    """EOS, then the other ends generation_config.json lists (Llama-3-Instruct: `<|eot_id|>`)."""
    ends: list[int] = []
    listed = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for i in [tokenizer.eos_token_id, *(listed if isinstance(listed, (list, tuple)) else [listed])]:
        if i is not None and int(i) not in ends:
            ends.append(int(i))
    return ends


def _first_stop(text: str, stop: list[str]) -> int:
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(hits) if hits else -1


def load_version(path: str | Path, version: str, device: str = "auto", cpu_threads: int | None = None) -> LoadedModel:
    """Model + tokenizer of one version on `device`. `cpu_threads` sets torch's (process-wide)
    intra-op threads when serving on CPU: a small model's matrices are too small to split, and
    on a busy machine the threads' barriers cost 10x (0.13 s vs 1.2 s for 16 tiny-model tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    if not (folder / "config.json").is_file() and not (folder / "meta.json").is_file():
        raise FileNotFoundError(f"version {version}: {folder} holds no config.json or meta.json (not a checkpoint folder)")
    folder = materialize(folder)  # a delta version is rebuilt (and cached) from its parent chain
    device = pick_device(device)
    if device == "cpu" and cpu_threads is not None:
        torch.set_num_threads(cpu_threads)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return LoadedModel(version, folder, model, tokenizer, device)


def registry_signature(db: str | Path) -> tuple:
    """mtime and size of the registry file and its WAL: any committed write changes them,
    a read does not. A stat costs ~20 µs, a DuckDB connection ~70 ms on the 2-core machine."""
    out = []
    for path in (Path(db), Path(f"{db}.wal")):
        try:
            st = path.stat()
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


class Champion:
    """Serves whatever `champion` points at; `current()` reloads when the alias has moved."""

    def __init__(self, lineage: Any, *, alias: str = "champion", reload_interval_s: float = 2.0, device: str = "auto", cpu_threads: int | None = None):
        self.lineage = lineage
        self.alias = alias
        self.reload_interval_s = reload_interval_s
        self.device = device
        self.cpu_threads = cpu_threads
        self._loaded: LoadedModel | None = None
        self._checked_at = float("-inf")
        self._reload_lock = threading.Lock()
        self.reloads = 0
        self.failed_loads = 0
        self._seen: tuple | None = None
        self.pinned_from: Path | None = None  # set by `pin`: a pushed folder, served whatever the alias says

    def pin(self, path: str | Path, version: str | None = None) -> LoadedModel:
        """Load the checkpoint folder `path` and serve it from the next request on, no longer
        following the alias (SGLang's /update_weights_from_disk). `version` defaults to the
        folder's meta.json version, else its name. The old model answers until the new one is loaded."""
        folder = Path(path)
        if version is None:
            meta = folder / "meta.json"
            version = (json.loads(meta.read_text(encoding="utf-8")).get("version") if meta.is_file() else None) or folder.name
        loaded = load_version(folder, version, self.device, self.cpu_threads)
        with self._reload_lock:
            self.reloads += self._loaded is not None
            self._loaded, self.pinned_from = loaded, folder
        log.info("serving %s from %s (pushed; the %r alias is no longer followed until a restart)", version, folder, self.alias)
        return loaded

    def _signature(self) -> tuple | None:
        db = getattr(self.lineage, "db_path", None)
        return None if db is None else registry_signature(db)

    def _target(self) -> tuple[str, Path]:
        version = self.lineage.alias(self.alias)
        if version is None:
            raise NoChampionError(f"lineage {self.lineage.db_path} has no {self.alias!r} alias: bootstrap or promote a version first")
        record = self.lineage.get_version(version)
        if record is None:
            raise NoChampionError(f"alias {self.alias!r} points at {version!r}, which lineage does not know")
        return version, Path(record["path"])

    def current(self) -> LoadedModel:
        loaded = self._loaded
        if loaded is not None and (self.pinned_from is not None or time.monotonic() - self._checked_at < self.reload_interval_s):
            return loaded
        # Only one thread checks (and loads); the others keep answering with the current model
        # instead of queueing behind a lineage lock or a multi-second model load.
        if not self._reload_lock.acquire(blocking=loaded is None):
            return loaded
        try:
            loaded = self._loaded
            if loaded is not None and (self.pinned_from is not None or time.monotonic() - self._checked_at < self.reload_interval_s):
                return loaded
            signature = self._signature()
            if loaded is not None and signature is not None and signature == self._seen:
                self._checked_at = time.monotonic()  # registry file untouched: the alias cannot have moved
                return loaded
            try:
                version, path = self._target()
            except Exception as exc:  # lineage busy (a nightly run holds the lock) or broken
                if loaded is None:
                    raise
                log.warning("champion check failed, serving %s: %s", loaded.version, exc)
                self._checked_at = time.monotonic()
                return loaded
            if loaded is None or loaded.version != version:
                log.info("loading champion %s from %s", version, path)
                try:
                    self._loaded = load_version(path, version, self.device, self.cpu_threads)
                except Exception as exc:  # a broken promotion must not take the service down
                    if loaded is None:
                        raise
                    log.error("champion %s failed to load, still serving %s: %s", version, loaded.version, exc)
                    self.failed_loads += 1
                    self._checked_at = time.monotonic()
                    return loaded
                self.reloads += loaded is not None
            self._seen = signature  # taken before the read: a move during the read is seen next time
            self._checked_at = time.monotonic()
            return self._loaded
        finally:
            self._reload_lock.release()

    @property
    def version(self) -> str | None:
        """The version being served now (None before the first load)."""
        return self._loaded.version if self._loaded is not None else None
