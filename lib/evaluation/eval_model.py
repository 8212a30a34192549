"""The model under evaluation: a version loaded once for scoring (EvalModel), its dtype and device,
and bits per byte on texts; every scorer (bits per byte, probes, facts, the knowledge writer) uses it.
"""


from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import contextlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from lib.checkpoints.checkpoint import materialize, read_meta
from lib.data.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

LOGITS_BUDGET_BYTES = 1 << 30  # fp32 logits of one eval batch

Progress = Callable[[str, int, int], None]


def _materialize(model_dir: str | Path) -> Path:
    """A folder `from_pretrained` loads: delta-stored versions are rebuilt by the checkpoint module."""
    return Path(materialize(Path(model_dir)))


def _pick_device(device: str | None):
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def eval_dtype(folder: Path, device_type: str):
    """The dtype a version is evaluated in: fp32 on CPU (bf16 matmuls are slow or missing there);
    on CUDA bf16 for bf16- and fp16-stored weights (as lib.serving.generate serves them), fp32 weights
    kept as they are (under bf16 autocast)."""
    import torch

    if device_type == "cpu":
        return torch.float32
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        stored = config.get("dtype") or config.get("torch_dtype")
    except (OSError, ValueError, AttributeError):
        stored = None
    return torch.float32 if stored in ("float32", "fp32") else torch.bfloat16


def _is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower()


@dataclass
class EvalModel:
    """A causal LM and its tokenizer, loaded once and reused for several data sets."""

    model: Any
    tokenizer: Any          # lib.data.tokenizer.LoadedTokenizer: the encoding training used
    device: Any
    max_len: int
    separator_id: int
    special_ids: frozenset[int]
    path: Path
    digest: str | None = None  # sha256 of the weights (meta.json), the eval cache's key

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None, max_len: int | None = None,
             separator: str = "auto") -> "EvalModel":
        import torch
        from transformers import AutoModelForCausalLM

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file() and not (model_dir / "meta.json").is_file():
            raise FileNotFoundError(f"{model_dir} is not a model folder: no config.json (nor a version's meta.json) in it")
        folder = _materialize(model_dir)
        dev = _pick_device(device)
        tokenizer = load_tokenizer(folder)
        sep_id, _ = tokenizer.separator(separator)
        dtype = eval_dtype(folder, dev.type)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(dev)
        model.eval()
        positions = getattr(model.config, "max_position_embeddings", None) or 2048
        window = min(max_len, positions) if max_len else positions
        if window < 2:
            raise ValueError(f"max_len {max_len}: a window needs at least 2 positions (separator + one token)")
        return cls(model, tokenizer, dev, window, int(sep_id), frozenset(tokenizer.special_ids), model_dir,
                   read_meta(model_dir).get("digest"))

    @property
    def bos_id(self) -> int:  # the context token every window starts with (kept for older callers)
        return self.separator_id

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenizer.encode_batch(list(texts))

    def windows(self, texts: Sequence[str]) -> list[list[int]]:
        step = self.max_len - 1
        return [[self.separator_id] + ids[i : i + step] for ids in self.encode(texts) for i in range(0, len(ids), step)]

    def _autocast(self):
        import torch

        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)  # bf16 like serving, whatever the weights' dtype
        return contextlib.nullcontext()

    def _batch_rows(self, batch_size: int) -> int:
        vocab = int(getattr(self.model.config, "vocab_size", 0) or self.tokenizer.vocab_size)
        per_row = 2 * self.max_len * vocab * 4  # the logits and their fp32 copy
        fits = max(1, LOGITS_BUDGET_BYTES // max(1, per_row))
        return max(1, min(batch_size, fits))

    def _nats(self, chunk: list[list[int]]) -> float:
        import torch
        import torch.nn.functional as F

        width = max(len(w) for w in chunk)
        full = all(len(w) == width for w in chunk)
        ids = torch.full((len(chunk), width), self.separator_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, w in enumerate(chunk):
            ids[r, : len(w)] = torch.tensor(w, dtype=torch.long)
            mask[r, : len(w)] = 1
        targets = ids[:, 1:].clone()
        targets[mask[:, 1:] == 0] = -100
        if self.special_ids:
            targets[torch.isin(targets, torch.tensor(sorted(self.special_ids), dtype=torch.long))] = -100
        ids, targets = ids.to(self.device), targets.to(self.device)
        with self._autocast():
            # equal-length rows need no mask: the causal kernel's fast path
            out = self.model(input_ids=ids, attention_mask=None if full else mask.to(self.device))
        logits = out.logits[:, :-1]
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum", ignore_index=-100)
        return float(loss)

    def sum_nats(self, windows: list[list[int]], batch_size: int, on_progress: Progress | None = None, name: str = "") -> float:
        """Σ loss in nats over every non-separator, non-special token of `windows` (each starts
        with the separator)."""
        import torch

        order = sorted(range(len(windows)), key=lambda i: (len(windows[i]), windows[i]))
        rows = self._batch_rows(batch_size)
        if rows < batch_size:
            log.info("eval batch of %s capped at %d rows: %d-token windows over a %d-id vocabulary", self.path.name, rows,
                     self.max_len, int(getattr(self.model.config, "vocab_size", 0)))
        total, done = 0.0, 0
        with torch.inference_mode():
            while done < len(order):
                chunk = [windows[i] for i in order[done : done + rows]]
                oom = False
                try:
                    total += self._nats(chunk)
                except (RuntimeError, MemoryError) as exc:
                    if not _is_oom(exc) or rows == 1:
                        raise
                    oom = True  # handled below: the exception's traceback still holds the batch's tensors here
                if oom:
                    del chunk
                    torch.cuda.empty_cache()  # the failed batch's memory is free to give back now (a no-op without CUDA)
                    rows = max(1, rows // 2)
                    log.warning("eval of %s ran out of memory; batch halved to %d rows", self.path.name, rows)
                    continue
                done += len(chunk)
                if on_progress is not None:
                    on_progress(name, done, len(order))
        return total

    def bits_per_byte(self, texts: Sequence[str], batch_size: int = 8, on_progress: Progress | None = None, name: str = "") -> float:
        texts = [t for t in texts if t]
        nbytes = sum(len(t.encode("utf-8")) for t in texts)
        if nbytes == 0:
            raise ValueError("bits_per_byte: no text to score (all texts empty)")
        return self.sum_nats(self.windows(texts), batch_size, on_progress, name) / (math.log(2) * nbytes)


def bits_per_byte(
    model_dir: str | Path, texts: Sequence[str], batch_size: int = 8, max_len: int | None = None, device: str | None = None,
    separator: str = "auto",
) -> float:
    """Bits per UTF-8 byte of `texts` under the model in `model_dir` (a HF folder or a version)."""
    return EvalModel.load(model_dir, device=device, max_len=max_len, separator=separator).bits_per_byte(texts, batch_size=batch_size)


# -- probes -----------------------------------------------------------------------------------


