"""Adopt the model a user already serves: their Hugging Face folder becomes v0 of a workspace.

- `inspect_model(dir)` checks a folder before anything is written, and refuses, naming the file
  and what to do: no config.json; weights only as pickle (`pytorch_model.bin`: loading it can
  run code); no weights; several safetensors files without an index; a config whose
  architecture is not a causal LM of transformers (`BertForMaskedLM`, a T5); custom modelling
  code (`auto_map`: this pipeline runs only architectures built into transformers); no
  tokenizer (neither tokenizer.json nor a sentencepiece tokenizer.model to convert); a
  vocabulary larger than the model's embedding.
- `original_lr(folder, given)`: the peak LR the model was last trained with, which every night
  scales by `training.lr_scale`. Given, or recorded in the folder's meta.json; never guessed.
- `write_v0`: `<ws>/checkpoints/v0/` in this project's one checkpoint layout: one
  `model.safetensors` (sharded weights are merged tensor by tensor, streaming, so a 15 GB model
  needs no 15 GB of memory), config.json, the model's own tokenizer files (a sentencepiece-only
  tokenizer is converted to tokenizer.json once), and meta.json: digest (sha256 of the
  weights), architecture, stored dtype, parameters, original_lr, the document separator, where it
  came from. The weights keep their dtype: a bf16 model stays bf16.
- `adopt(...)`: the whole `consolidate init` (and the bootstrap flow's `adopt` parameter):
  refusals first, then the replay corpus (lib/data/replay.py), v0, the lineage records (corpus, v0
  as champion and latest, actor "adopt"), the corpus tokenized into the token cache, and v0's
  bits per byte on old_val measured once (the eval cache: the first night and every
  cumulative-drift check read it).

Trade-off: copying the user's weights into the workspace doubles their disk use, in exchange
for a v0 that cannot change under the lineage when the user replaces their folder; the weights
are streamed and hashed in one pass.
"""

from __future__ import annotations

# transformers is imported inside functions: importing this module must not cost its ~2 s
import hashlib
import json
import logging
import os
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lib.checkpoints.checkpoint import TOKENIZER_FILES, write_meta
from lib.config import SourceConfig
from lib.data.replay import build_replay_corpus
from lib.data.selfreplay import generate_replay, parse_generate
from lib.data.token_cache import cache_key, cache_store, run_tokenize_tasks, tokenize_tasks
from lib.data.tokenizer import TokenizerError, load_tokenizer
from lib.evaluation.evaluate import measure_root
from lib.evaluation.sets import OLD_VAL
from lib.files import copy_hashed, publish_folder
from lib.registry.lineage import Lineage
from lib.registry.promotion import promote
from lib.registry.runs import new_run_id

log = logging.getLogger(__name__)

PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt", "tf_model.h5",
                  "flax_model.msgpack")
SAFETENSORS_INDEX = "model.safetensors.index.json"
LOAD_CHECK_BYTES = 4 << 30  # weights up to this size are loaded once to check them against the architecture
_FLOAT_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}

TYPICAL_LR = ("typical values: 3e-4 to 6e-4 for models pre-trained at ~0.1-1 B parameters, 1.5e-4 to 3e-4 at 7-8 B, "
              "1e-5 to 2e-5 for the last fine-tuning of an instruct or chat model (its model card or training config "
              "says which)")


class AdoptionError(ValueError):
    """A model folder or replay corpus that cannot be adopted; the message says what to do."""


@dataclass
class ModelFolder:
    """What `inspect_model` found in a user's model folder."""

    path: Path
    config: dict[str, Any]
    architecture: str
    model_type: str
    weights: list[Path]
    dtype: str
    parameters: int
    weight_bytes: int
    tokenizer_json: bool
    meta: dict[str, Any] = field(default_factory=dict)


def _header(path: Path) -> tuple[dict, int]:
    """(safetensors header, offset of the data section)."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise AdoptionError(f"{path} is not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise AdoptionError(f"{path} is not a safetensors file (header of {n:,} bytes)")
        try:
            header = json.loads(fh.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise AdoptionError(f"{path} is not a safetensors file (unreadable header: {exc})") from None
    return header, 8 + n


def _weight_files(folder: Path) -> list[Path]:
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as exc:
            raise AdoptionError(f"{index} is not a valid safetensors index ({exc}); re-save the model with save_pretrained") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise AdoptionError(f"{index} names {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not in "
                                f"{folder}: copy the whole model folder")
        return [folder / n for n in names]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    found = sorted(folder.glob("*.safetensors"))
    if len(found) == 1:
        return found
    if len(found) > 1:
        raise AdoptionError(f"{folder} holds {len(found)} .safetensors files but no {SAFETENSORS_INDEX} saying which "
                            f"tensor is where: re-save the model with save_pretrained")
    pickled = [n for n in PICKLE_WEIGHTS if (folder / n).is_file()] or [p.name for p in sorted(folder.glob("pytorch_model-*.bin"))]
    if pickled:
        raise AdoptionError(
            f"{folder / pickled[0]}: weights stored only as pickle are refused, because loading a pickle can run code; "
            f"convert them once, in an environment you trust, with `python -c \"from transformers import "
            f"AutoModelForCausalLM as M; M.from_pretrained('{folder}').save_pretrained('{folder}-safetensors')\"` "
            f"(and copy the tokenizer files), then adopt {folder}-safetensors")
    raise AdoptionError(f"{folder}: no model weights (model.safetensors, or shards with {SAFETENSORS_INDEX}); "
                        f"point --model at a folder written by save_pretrained")


def _causal_lm_classes() -> tuple[dict[str, Any], set[str]]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update(value if isinstance(value, (list, tuple)) else [value])
    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), names


def inspect_model(model_dir: str | Path) -> ModelFolder:
    """Everything adoption needs to know about a folder, or an AdoptionError that says what to do."""
    folder = Path(model_dir).expanduser()
    if not folder.is_dir():
        raise AdoptionError(f"--model {folder} is not a folder: give the folder save_pretrained wrote (config.json, "
                            f"model.safetensors, tokenizer files)")
    folder = folder.resolve()
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise AdoptionError(f"{cfg_path} is missing: --model must be a Hugging Face model folder written by save_pretrained")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AdoptionError(f"{cfg_path} is not valid JSON: {exc}") from None
    if config.get("auto_map"):
        raise AdoptionError(f"{cfg_path} asks for custom modelling code (auto_map): this pipeline runs only architectures "
                            f"built into transformers, never code shipped with a model")
    by_type, causal = _causal_lm_classes()
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if architectures:
        arch = next((a for a in architectures if a in causal), None)
        if arch is None:
            raise AdoptionError(f"{cfg_path}: architectures {architectures} is not a causal language model "
                                f"(*ForCausalLM, *LMHeadModel); nightly consolidation continues the pre-training of a decoder")
    elif model_type in by_type:
        value = by_type[model_type]
        arch = value[0] if isinstance(value, (list, tuple)) else value
    else:
        raise AdoptionError(f"{cfg_path}: model_type {model_type!r} is not a causal language model of transformers")
    weights = _weight_files(folder)
    dtype_bytes: dict[str, int] = {}
    parameters = 0
    for w in weights:
        header, _ = _header(w)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for d in info["shape"]:
                count *= int(d)
            parameters += count
            nbytes = int(info["data_offsets"][1]) - int(info["data_offsets"][0])
            if info["dtype"] in _FLOAT_DTYPES:
                dtype_bytes[info["dtype"]] = dtype_bytes.get(info["dtype"], 0) + nbytes
    if not dtype_bytes:
        raise AdoptionError(f"{weights[0]}: no floating-point tensors; is this a quantised checkpoint? Adopt the "
                            f"bf16/fp16/fp32 weights instead")
    dtype = _FLOAT_DTYPES[max(dtype_bytes, key=dtype_bytes.get)]
    tokenizer_json = (folder / "tokenizer.json").is_file()
    if not tokenizer_json and not (folder / "tokenizer.model").is_file():
        raise AdoptionError(f"{folder} has no tokenizer (tokenizer.json, or a sentencepiece tokenizer.model): copy the "
                            f"tokenizer files the model is served with into the folder (AutoTokenizer.save_pretrained)")
    meta = {}
    if (folder / "meta.json").is_file():
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AdoptionError(f"{folder / 'meta.json'} is not valid JSON: {exc}") from None
    return ModelFolder(folder, config, arch, str(model_type), weights, dtype, parameters,
                       sum(w.stat().st_size for w in weights), tokenizer_json, meta)


def original_lr(folder: ModelFolder, given: float | None) -> float:
    """`given`, else the folder's meta.json `original_lr`; else refuse: a guess would be recorded
    as a fact and inherited by every later night."""
    if given is not None:
        if not given > 0 or given >= 1:
            raise AdoptionError(f"--original-lr {given}: expected the peak learning rate, a positive number below 1 ({TYPICAL_LR})")
        return float(given)
    recorded = folder.meta.get("original_lr")
    if isinstance(recorded, (int, float)) and recorded > 0:
        return float(recorded)
    raise AdoptionError(
        f"--original-lr is required for {folder.path}: the peak learning rate the model was last trained with. Every night "
        f"trains at original LR × training.lr_scale (0.1 by default), so a wrong value either changes nothing or makes the "
        f"model forget; it is recorded in v0's meta.json and inherited by every later version. {TYPICAL_LR}. It may be "
        f"left out only when {folder.path / 'meta.json'} records original_lr.")


def merge_safetensors(files: list[Path], out: Path) -> str:
    """Write the tensors of several safetensors shards as one file, streaming tensor by tensor;
    returns its sha256. Tensor bytes are copied unchanged."""
    entries = []  # (name, dtype, shape, file, start, end)
    metadata: dict[str, str] = {"format": "pt"}
    for f in files:
        header, base = _header(f)
        metadata.update({k: str(v) for k, v in (header.pop("__metadata__", None) or {}).items()})
        for name, info in header.items():
            start, end = (int(x) for x in info["data_offsets"])
            entries.append((name, info["dtype"], info["shape"], f, base + start, base + end))
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise AdoptionError(f"the safetensors shards of {files[0].parent} repeat tensor names: re-save the model with save_pretrained")
    new_header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape, _, start, end in entries:
        new_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + (end - start)]}
        offset += end - start
    blob = json.dumps(new_header, separators=(",", ":")).encode("utf-8")
    blob += b" " * ((8 - len(blob) % 8) % 8)  # the data section starts 8-byte aligned
    h = hashlib.sha256()

    def write(fo, data: bytes) -> None:
        h.update(data)
        fo.write(data)

    with open(out, "wb") as fo:
        write(fo, struct.pack("<Q", len(blob)))
        write(fo, blob)
        handles: dict[Path, Any] = {}
        try:
            for _, _, _, f, start, end in entries:
                fi = handles.setdefault(f, open(f, "rb"))
                fi.seek(start)
                left = end - start
                while left:
                    block = fi.read(min(left, 1 << 24))
                    if not block:
                        raise AdoptionError(f"{f} is truncated: its header promises more bytes than the file holds")
                    write(fo, block)
                    left -= len(block)
        finally:
            for fi in handles.values():
                fi.close()
        fo.flush()
        os.fsync(fo.fileno())
    return h.hexdigest()


def _check_loads(folder: Path, weight_bytes: int) -> None:
    """Load the written v0 once (models up to LOAD_CHECK_BYTES) and refuse weights that do not
    fit the architecture: missing tensors would be initialised at random, silently."""
    if weight_bytes > LOAD_CHECK_BYTES:
        log.info("v0 weights are %.1f GB: not loaded at adoption; the first night loads them", weight_bytes / 1e9)
        return
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report is ours to word
    try:
        model, info = AutoModelForCausalLM.from_pretrained(folder, dtype="auto", output_loading_info=True)
    except Exception as exc:
        if "mismatched" in str(exc) or "size mismatch" in str(exc):
            raise AdoptionError("the weights do not match the architecture in config.json (tensor shapes differ from what "
                                "its sizes give): adopt the folder the model is served from, unmodified") from None
        raise AdoptionError(f"transformers cannot load the model in {folder}: {type(exc).__name__}: {exc}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(str(m[0]) if isinstance(m, (list, tuple)) else str(m) for m in info.get("mismatched_keys") or [])
    if missing or mismatched:
        what = (f"missing {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}" if missing else
                f"wrong shapes for {', '.join(mismatched[:5])}")
        raise AdoptionError(f"the weights do not match the architecture in config.json ({what}): they would be "
                            f"initialised at random; adopt the folder the model is served from, unmodified")
    del model


def write_v0(folder: ModelFolder, out_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """`out_dir` (a new version folder) from the user's folder, atomically; returns meta.json."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} already exists")
    with publish_folder(out_dir) as tmp:
        weights = tmp / "model.safetensors"
        if len(folder.weights) == 1:
            digest = copy_hashed(folder.weights[0], weights)
        else:
            digest = merge_safetensors(folder.weights, weights)
        config = dict(folder.config)
        config["dtype"] = folder.dtype  # what from_pretrained(dtype="auto") and our storage read
        config.pop("torch_dtype", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if (folder.path / "generation_config.json").is_file():
            shutil.copy2(folder.path / "generation_config.json", tmp / "generation_config.json")
        for name in TOKENIZER_FILES:
            if (folder.path / name).is_file():
                shutil.copy2(folder.path / name, tmp / name)
        if not folder.tokenizer_json:
            _convert_tokenizer(folder.path, tmp)
        full = {**meta, "digest": digest, "model_bytes": weights.stat().st_size, "storage_dtype": folder.dtype,
                "has_optimizer_state": False, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_meta(tmp / "meta.json", full)
        _check_loads(tmp, folder.weight_bytes)
    return full


def _convert_tokenizer(src: Path, dst: Path) -> None:
    """A sentencepiece-only tokenizer (tokenizer.model) converted once to tokenizer.json, which
    every stage reads; transformers does the conversion."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(src)
        if not getattr(tok, "is_fast", False):
            raise ValueError("transformers has no fast (tokenizer.json) version of it")
        tok.save_pretrained(dst)
    except Exception as exc:
        raise AdoptionError(f"{src / 'tokenizer.model'} could not be converted to tokenizer.json ({exc}); save the "
                            f"tokenizer with a fast tokenizer (AutoTokenizer.from_pretrained(..., use_fast=True)"
                            f".save_pretrained) into the model folder") from None
    if not (dst / "tokenizer.json").is_file():
        raise AdoptionError(f"{src}: converting the tokenizer wrote no tokenizer.json")


def check_tokenizer(version_dir: Path, config: dict[str, Any], separator: str) -> dict[str, Any]:
    """The adopted tokenizer loads the way every stage loads it, fits the embedding and has a
    document separator; returns what meta.json records about it."""
    try:
        tok = load_tokenizer(version_dir)
        sep_id, sep_token = tok.separator(separator)
    except TokenizerError as exc:
        raise AdoptionError(str(exc)) from None
    embedding = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if embedding is not None and tok.vocab_size > int(embedding):
        raise AdoptionError(f"{version_dir / 'tokenizer.json'} has {tok.vocab_size} ids but the model embeds only {embedding} "
                            f"(config.json vocab_size): the tokenizer is not this model's")
    return {"tokenizer_hash": tok.hash, "document_separator": sep_token, "separator_id": sep_id,
            "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id, "vocab_size": tok.vocab_size,
            "has_fim_tokens": tok.has_fim, "has_chat_template": bool(tok.chat_template)}


def adopt(
    workspace,
    cfg,
    model_dir: str | Path,
    replay: list[str | Path],
    *,
    replay_val: list[str | Path] | None = None,
    original_lr_value: float | None = None,
    text_column: str = "text",
    corpus: str = "replay",
    val_fraction: float = 0.05,
    warm: bool = True,
    say: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """`consolidate init`: the user's model becomes v0 (champion) with their replay corpus.
    Every refusal comes before anything is written. Returns what was done (for the CLI table)."""
    ws = workspace.ensure()
    lin = Lineage(ws.lineage_db)
    if lin.versions():
        champion = lin.alias("champion")
        raise AdoptionError(f"{ws.root} already has a lineage (champion {champion}): adopt a model into a new workspace "
                            f"(-w another folder); nights continue from the champion")

    generate = [n for n in (parse_generate(str(r)) for r in replay) if n is not None]
    if generate and len(replay) > 1:
        raise AdoptionError("--replay generate:N_TOKENS samples the whole replay corpus from the model itself: give it alone, "
                            "or give only files")
    if generate and replay_val:
        raise AdoptionError("--replay-val needs a replay corpus of files; a generated corpus holds out its own validation part")
    folder = inspect_model(model_dir)
    lr = original_lr(folder, original_lr_value)
    say(f"model {folder.path}: {folder.architecture}, {folder.parameters / 1e6:,.1f} M parameters, {folder.dtype}, "
        f"{len(folder.weights)} weight file(s)")

    t0 = time.perf_counter()
    run_id = new_run_id("adopt")
    version = "v0"
    vdir = ws.checkpoint(version)
    if vdir.exists():  # a v0 folder without lineage: an earlier init died before recording it
        shutil.rmtree(vdir)
    corpus_dir = ws.corpus(corpus)
    corpus_existed = corpus_dir.exists()
    lin.start_run(run_id, kind="adopt", config=cfg.to_dict())
    try:
        meta = {
            "version": version, "parent_checkpoint": None, "training_kind": "adopted", "run_id": run_id,
            "adopted_from": str(folder.path), "architecture": folder.architecture, "model_type": folder.model_type,
            "parameters": folder.parameters, "original_lr": lr, "original_lr_source": "given" if original_lr_value else "meta.json",
            "replay_corpus": corpus, "weights_files": [w.name for w in folder.weights],
        }
        # v0 first: the weights are checked against the architecture and the tokenizer against
        # the embedding before the corpus is read; anything refused removes what was written
        meta_written = write_v0(folder, vdir, meta)
        tok_info = check_tokenizer(vdir, folder.config, cfg.tokenizer.document_separator)
        if generate:  # no corpus of their own: v0's own samples, drawn once (lib/data/selfreplay.py)
            stats = generate_replay(ws, vdir, corpus, generate[0], max_len=cfg.training.seq_len, seed=cfg.sampling.seed,
                                    val_fraction=val_fraction, say=say)
            stats.setdefault("rejected", [])
            stats.setdefault("skipped", {})
        else:
            stats = build_replay_corpus(ws, corpus, list(replay), val_paths=list(replay_val or []), text_column=text_column,
                                        val_fraction=val_fraction)
        for r in stats["rejected"]:
            say(f"replay file rejected: {r['file']}: {r['reason']}")
        say(f"replay corpus {corpus!r}: {stats['train_docs']:,} train / {stats['val_docs']:,} validation documents, "
            f"{stats['bytes']:,} bytes")
        meta_written.update({"tokenizer_hash": tok_info["tokenizer_hash"], "document_separator": tok_info["document_separator"],
                             "replay_corpus_hash": stats["content_hash"]})
        write_meta(vdir / "meta.json", meta_written)
        say(f"{version}: {vdir} (sha256 {meta_written['digest'][:12]}…); documents separated by "
            f"{tok_info['document_separator']!r}; FIM tokens: {'yes' if tok_info['has_fim_tokens'] else 'no (FIM off)'}; "
            f"chat template: {'yes' if tok_info['has_chat_template'] else 'no'}")
        lin.record_corpus(corpus, "generated" if generate else "replay", stats)
        lin.record_version(version, vdir, parent=None, run_id=run_id, status="candidate", digest=meta_written["digest"],
                           storage="full", meta=meta_written)
        promote(lin, version, reason=f"adopted from {folder.path}", actor="adopt", content_hashes=[])
    except BaseException:
        lin.finish_run(run_id, "failed", None, {"adopt": round(time.perf_counter() - t0, 3)})
        if not lin.versions():  # refused or interrupted before the lineage took it: leave nothing behind
            shutil.rmtree(vdir, ignore_errors=True)
            if not corpus_existed:
                shutil.rmtree(corpus_dir, ignore_errors=True)
        raise
    out = {"version": version, "path": str(vdir), "run_id": run_id, "model": meta_written, "tokenizer": tok_info,
           "corpus": {k: stats[k] for k in ("name", "docs", "bytes", "train_docs", "val_docs", "rejected", "skipped")}}
    if warm:  # v0 is the champion already: warming is an optimisation a later night would redo
        out["warm"] = warm_caches(ws, cfg, vdir, corpus, say)
        # the root's old_val: what a cumulative-drift check compares every later version with
        lin.record_metrics(version, {"old_val": {"bpb": out["warm"]["old_val_bpb"]}}, run_id)
    lin.finish_run(run_id, "completed", version, {"adopt": round(time.perf_counter() - t0, 3)})
    return out


def warm_caches(ws, cfg, version_dir: Path, corpus: str, say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """What every night would otherwise do first: tokenize the replay corpus into the token cache
    (the same tasks a night builds, so it hits) and measure the version's bits per byte on old_val
    (the eval cache). Returns the seconds and the old_val figure."""
    t0 = time.perf_counter()
    tok = load_tokenizer(version_dir)
    source = SourceConfig(name=corpus, path=ws.corpus_train(corpus), weight=1.0, kind="corpus")  # (a weight draws nothing here)
    work = ws.runs / f".warm-{uuid.uuid4().hex[:8]}"
    cache = ws.token_cache
    try:
        tasks = tokenize_tasks([source], tok, work, cfg.sampling, cfg.training.seq_len)
        keys = [cache_key(t, tok.hash) for t in tasks]
        todo = [(t, k) for t, k in zip(tasks, keys) if not (cache / k / "result.json").is_file()]
        if todo:
            results = run_tokenize_tasks([t for t, _ in todo], version_dir, cfg.curation.workers)
            for (t, k), res in zip(todo, results):
                cache_store(cache, k, t, res)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tokenized = time.perf_counter() - t0
    say(f"replay corpus tokenized into {cache} ({len(tasks)} file(s), {tokenized:.1f} s)")
    root = measure_root(ws, cfg, version_dir, corpus)
    bpb = root[OLD_VAL]["bpb"]
    say(f"{version_dir.name} bits per byte on old_val: {bpb:.4f} ({root['docs']} documents, {root['seconds']:.1f} s)")
    return {"tokenize_s": round(tokenized, 3), "eval_s": root["seconds"], "old_val_bpb": bpb}
