"""Checkpoint versions: Hugging Face folders with meta.json, stored full or as a lossless delta.

- A version is `<ws>/checkpoints/<version>/`: config.json, model.safetensors, tokenizer files and
  meta.json (version, parent_checkpoint, consolidation_config, memory_buffer_stats, manifest_hash,
  original_lr, optimizer_state, final_metrics, digest = sha256 of model.safetensors). v0 and every
  consolidation use the same layout, so `AutoModelForCausalLM.from_pretrained` loads any of them.
  `optimizer.pt` (AdamW state, plain tensors; `torch.load(weights_only=True)`) sits beside the
  weights when the pipeline inherits optimizer state.
- Stored narrower than the fp32 training weights (a bf16 model stays bf16), a version also keeps
  `master/`: the fp32 master weights as an HF folder of their own, which the next night starts
  from, so an update smaller than half a bf16 step is carried over instead of rounded away. The
  served weights are rounded stochastically by default (`stochastic_round`: unbiased, seeded by
  the run's seed and the version name), so they carry the night's update in expectation too;
  `UpdateSurvival` measures how much of it they carry and meta.json records it (`update_kept`).
  The cast is in place, tensor by tensor: no second copy of the model (the arithmetic is in
  lib/checkpoints/precision.py).
- Writes are atomic: the folder is assembled under a temporary name and renamed into place.
- Delta storage: `compact(version, parent)` replaces model.safetensors by
  model.delta.zst, the lossless delta codec of lib/checkpoints/delta.py against the parent's weights (formats
  and bytes described there), and records delta.json (format, parent, digests, sizes). The
  restore is checked against the recorded sha256. Both directions stream one tensor at a time
  over memory-mapped files (memory ~ the largest tensor).
- `materialize(version)` returns a folder `from_pretrained` loads: the version itself when full,
  else `<version>/.full/` rebuilt from the parent chain (recursively), cached and verified.
  `store_version` (for versions nobody serves: lib.registry.promotion decides) keeps every
  `full_every`-th version of a chain full to bound restore time.

Trade-off: a lossless delta cannot shrink bits that really changed. AdamW moves every weight by
about the LR per step, so after 200 steps at lr_scale 0.1 a weight has moved by ~1-5% of its
value: a few ulps of bf16 (a delta of about a third of the checkpoint), but ~2^17 ulps of fp32,
whose low two mantissa bytes are then noise (about 70%). Measured in bench/bench_delta.py.
"""

from __future__ import annotations

# torch and transformers are imported inside functions: importing this module must not cost their ~6 s
import contextlib
import hashlib
import json
import mmap
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from lib.checkpoints.delta import DELTA_FORMAT, DELTA_FORMATS, CheckpointError, decode_delta_to, encode_delta_to
from lib.checkpoints.precision import ROUNDINGS, STORAGE_DTYPES, UpdateSurvival, cast_for_storage
from lib.files import atomic_path, file_hash, publish_folder, temp_folder, temp_sibling, write_json
from lib.faults import fault_point

MODEL_FILE = "model.safetensors"
DELTA_FILE = "model.delta.zst"
DELTA_META = "delta.json"
META_FILE = "meta.json"
OPTIMIZER_FILE = "optimizer.pt"
MATERIALIZED = ".full"
MASTER_DIR = "master"  # fp32 master weights beside a narrower serving folder: an HF folder of its own

# Files of a Hugging Face tokenizer folder that travel with every version.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
)


# -- digests and meta -----------------------------------------------------------------------------
def read_meta(version_dir: str | Path) -> dict[str, Any]:
    """meta.json of a version; an empty dict for a plain Hugging Face folder (e.g. a user's model)."""
    path = Path(version_dir) / META_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from None


def write_meta(path: str | Path, data: dict[str, Any]) -> None:
    """meta.json (or delta.json) in the versions' format: indented, sorted keys, atomic."""
    write_json(path, data, indent=2, sort_keys=True, default=str, newline=True)


def is_full(version_dir: str | Path) -> bool:
    return (Path(version_dir) / MODEL_FILE).is_file()


def is_delta(version_dir: str | Path) -> bool:
    d = Path(version_dir)
    return not is_full(d) and (d / DELTA_FILE).is_file() and (d / DELTA_META).is_file()


# -- writing a version ----------------------------------------------------------------------------
def copy_tokenizer_files(src: str | Path, dst: str | Path) -> list[str]:
    """Copy the tokenizer files found in `src` (a tokenizer or model folder) into `dst`."""
    src, dst = Path(src), Path(dst)
    copied = [name for name in TOKENIZER_FILES if (src / name).is_file()]
    if "tokenizer.json" not in copied and "tokenizer.model" not in copied:
        raise FileNotFoundError(f"no tokenizer.json in {src}: a version must carry its tokenizer")
    for name in copied:
        shutil.copy2(src / name, dst / name)
    return copied


def storage_dtype(setting: str, parent_dir: str | Path | None) -> str:
    """The dtype a version's weights are stored in: `setting`, or for "auto" the parent's
    (config.json `dtype`, or `torch_dtype` in older files), float32 without a parent."""
    if setting != "auto":
        if setting not in STORAGE_DTYPES:
            raise ValueError(f"checkpoints.dtype must be auto or one of {STORAGE_DTYPES}, got {setting!r}")
        return setting
    if parent_dir is None:
        return "float32"
    config = json.loads((materialize(Path(parent_dir)) / "config.json").read_text())
    found = config.get("dtype") or config.get("torch_dtype") or "float32"
    return found if found in STORAGE_DTYPES else "float32"


def write_version(
    out_dir: str | Path,
    model,
    *,
    tokenizer_dir: str | Path,
    meta: dict[str, Any],
    optimizer_state: dict | None = None,
    overwrite: bool = False,
    dtype: str | None = None,
    rounding: str = "nearest",
    seed: int = 0,
    master: bool = False,
    survival: UpdateSurvival | None = None,
) -> Path:
    """Write a full version folder atomically: HF weights + config, tokenizer files, meta.json
    with the sha256 digest of model.safetensors, and optionally optimizer.pt.

    With `dtype` (float32, bfloat16, float16) the weights are stored in it, rounded to nearest or
    stochastically (`rounding`, seeded by `seed`). The model is cast IN PLACE, tensor by tensor
    (no second copy of the model), so call this last (the trainer does, after its final step).
    With `master` and a dtype narrower than the model's fp32 weights, the fp32 weights are first
    written to `<version>/master/` (an HF folder), which the next night starts from. `survival`
    sees every tensor before and after the cast and its summary goes to meta.json."""
    import torch
    from transformers.utils import logging as hf_logging

    if dtype is not None and dtype not in STORAGE_DTYPES:
        raise ValueError(f"dtype must be one of {STORAGE_DTYPES}, got {dtype!r}")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    hf_logging.disable_progress_bar()  # a bar per file in a nightly log is noise
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"version folder {out_dir} already exists; pick a new --out or remove it")
    with publish_folder(out_dir) as tmp:
        fault_point("version-write", tmp / MODEL_FILE)
        before = next(model.parameters()).dtype
        target = getattr(torch, dtype) if dtype is not None else before
        narrower = target.itemsize < before.itemsize
        wrote_master = False
        if master and narrower:
            _save_hf(model, tmp / MASTER_DIR)
            write_meta(tmp / MASTER_DIR / META_FILE, {
                "version": f"{out_dir.name}/{MASTER_DIR}", "kind": "fp32 master weights",
                "digest": file_hash(tmp / MASTER_DIR / MODEL_FILE), "storage_dtype": str(before).removeprefix("torch.")})
            wrote_master = True
        if dtype is not None:
            cast_for_storage(model, target, rounding=rounding, seed=seed, survival=survival)
        _save_hf(model, tmp)
        copy_tokenizer_files(tokenizer_dir, tmp)
        if optimizer_state is not None:
            torch.save(optimizer_state, tmp / OPTIMIZER_FILE)
        full = dict(meta)
        full.setdefault("version", out_dir.name)
        full["digest"] = file_hash(tmp / MODEL_FILE)
        full["model_bytes"] = (tmp / MODEL_FILE).stat().st_size
        full["storage_dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
        full["has_optimizer_state"] = optimizer_state is not None
        full["master_weights"] = MASTER_DIR if wrote_master else None
        if narrower:
            full["storage_rounding"] = rounding
        if survival is not None:
            full["update_kept"] = survival.result(master_kept=wrote_master)
        full.setdefault("created_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        write_meta(tmp / META_FILE, full)
    return out_dir


def _save_hf(model, folder: Path) -> None:
    """save_pretrained as one safetensors file, config.json's dtype saying what is stored."""
    # one shard: delta storage and the digest address one file
    try:
        model.save_pretrained(folder, safe_serialization=True, max_shard_size="1000GB")
    except OSError:
        raise
    except Exception as exc:
        # safetensors' writer reports a full or read-only volume as "I/O error: ... (os error 28)",
        # naming no file: raise it as the OS error it is, with the file
        code = re.search(r"os error (\d+)", str(exc))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(folder / MODEL_FILE)) from exc
    if not (folder / MODEL_FILE).is_file():
        raise CheckpointError(f"save_pretrained did not write {MODEL_FILE} in {folder}")
    stored = str(next(model.parameters()).dtype).removeprefix("torch.")
    config = json.loads((folder / "config.json").read_text())
    if config.get("dtype") != stored:  # what from_pretrained(dtype="auto") and users read
        config["dtype"] = stored
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def load_optimizer_state(version_dir: str | Path) -> dict | None:
    """The AdamW state saved beside a version (plain tensors, loaded with weights_only=True)."""
    import torch

    path = Path(version_dir) / OPTIMIZER_FILE
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def drop_optimizer_state(version_dir: str | Path) -> int:
    """Delete a version's optimizer.pt; returns the bytes freed (0 if it had none). The weights
    and meta.json stay; a consolidation that inherits from this version then starts AdamW fresh
    and records that it did."""
    path = Path(version_dir) / OPTIMIZER_FILE
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


def verify(version_dir: str | Path) -> str:
    """Check the (materialised) weights against meta.json's digest; returns the digest."""
    folder = materialize(version_dir)
    expected = read_meta(version_dir).get("digest")
    actual = file_hash(folder / MODEL_FILE)
    if expected and actual != expected:
        raise CheckpointError(f"{folder / MODEL_FILE}: sha256 {actual} does not match meta.json digest {expected}")
    return actual


@contextlib.contextmanager
def _mapped(path: Path):
    """The file's bytes, memory-mapped read-only. Unmapped on exit, or by the garbage collector
    when views of it are still alive (an exception's traceback holds them)."""
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield m
    finally:
        try:
            m.close()
        except BufferError:
            pass


class _Sha256Sink:
    """A `write` target that only hashes and counts what it is given."""

    def __init__(self) -> None:
        self.hash, self.size = hashlib.sha256(), 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        return len(data)


class _HashingFile(_Sha256Sink):
    """A binary file being written that hashes what goes into it (fsynced on close)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.file = open(path, "wb")

    def write(self, data) -> int:
        super().write(data)
        return self.file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def chain_depth(version_dir: str | Path) -> int:
    """Delta hops from this version down to a full one (0 for a full folder)."""
    d, depth = Path(version_dir), 0
    while is_delta(d):
        depth += 1
        d = _parent_of_delta(d)
        if depth > 10_000:
            raise CheckpointError(f"delta chain of {version_dir} does not end in a full version")
    return depth


def storage_info(version_dir: str | Path) -> dict[str, Any]:
    """How a version's weights are stored: {"storage": "full" | "delta", "chain_depth"}, and for a
    delta its format, delta_bytes, full_bytes and ratio (delta / full)."""
    version_dir = Path(version_dir)
    out: dict[str, Any] = {"storage": "delta" if is_delta(version_dir) else "full", "chain_depth": chain_depth(version_dir)}
    if out["storage"] == "delta":
        info = json.loads((version_dir / DELTA_META).read_text(encoding="utf-8"))
        out.update({k: info.get(k) for k in ("format", "delta_bytes", "full_bytes", "ratio")})
    return out


def _parent_of_delta(version_dir: Path) -> Path:
    info = json.loads((version_dir / DELTA_META).read_text(encoding="utf-8"))
    # The parent is found relative to this folder only: an absolute `parent_path` (written by
    # older versions) would, in a copied workspace, point into the original, whose parent
    # folder a materialization would then write `.full/` into.
    candidates = []
    if info.get("parent_relative"):  # a master folder's parent is its own version: "..", wherever it moved
        candidates.append(version_dir / info["parent_relative"])
    if info.get("parent_version"):
        # the version folders may have moved together (a copied workspace): try the sibling
        candidates.append(version_dir.parent / info["parent_version"])
    for c in candidates:
        if is_full(c) or is_delta(c):
            return c
    raise CheckpointError(
        f"{version_dir} is stored as a delta against {info.get('parent_version')!r} "
        f"(expected at {version_dir / info.get('parent_relative', '..')}), which is missing: restore that version first"
    )


def compact(version_dir: str | Path, parent_dir: str | Path, *, level: int = 3) -> dict[str, Any]:
    """Turn a full version folder into a delta against `parent_dir` (full or delta itself).
    The restore is verified before model.safetensors is removed."""
    version_dir, parent_dir = Path(version_dir), Path(parent_dir)
    if is_delta(version_dir):
        raise CheckpointError(f"{version_dir} is already stored as a delta")
    if not is_full(version_dir):
        raise CheckpointError(f"{version_dir} has no {MODEL_FILE} to compact")
    if version_dir.resolve() == parent_dir.resolve():
        raise CheckpointError(f"{version_dir} cannot be a delta against itself")
    target_path = version_dir / MODEL_FILE
    digest = file_hash(target_path)
    recorded = read_meta(version_dir).get("digest")
    if recorded and recorded != digest:
        raise CheckpointError(f"{target_path}: sha256 does not match meta.json digest; refusing to compact a corrupt file")
    parent_file = materialize(parent_dir) / MODEL_FILE
    tmp = temp_sibling(version_dir / DELTA_FILE)
    try:
        with _mapped(target_path) as target, _mapped(parent_file) as parent:
            with open(tmp, "wb") as out:
                stats = encode_delta_to(target, parent, out, level=level)
                out.flush()
                os.fsync(out.fileno())
            full_bytes, parent_digest = len(target), hashlib.sha256(parent).hexdigest()
            restored = _Sha256Sink()  # never drop the only full copy without proof
            with open(tmp, "rb") as payload:
                decode_delta_to(payload, parent, restored)
        if restored.hash.hexdigest() != digest or restored.size != full_bytes:
            raise CheckpointError(f"delta of {version_dir} against {parent_dir} did not round-trip; left full")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    delta_bytes = tmp.stat().st_size
    parent_meta = read_meta(parent_dir)
    info = {
        "format": DELTA_FORMAT,
        "parent_version": parent_meta.get("version", parent_dir.name),
        "parent_relative": os.path.relpath(parent_dir.resolve(), version_dir.resolve()),
        "parent_digest": parent_digest,
        "digest": digest,
        "full_bytes": full_bytes,
        "delta_bytes": delta_bytes,
        "ratio": delta_bytes / full_bytes,
        **stats,
    }
    os.replace(tmp, version_dir / DELTA_FILE)
    write_meta(version_dir / DELTA_META, info)
    target_path.unlink()
    shutil.rmtree(version_dir / MATERIALIZED, ignore_errors=True)
    return info


def restore(version_dir: str | Path) -> Path:
    """Make a delta-stored version full again, in place (the reverse of `compact`)."""
    version_dir = Path(version_dir)
    if is_full(version_dir):
        return version_dir
    folder = materialize(version_dir)
    with atomic_path(version_dir / MODEL_FILE) as tmp:
        shutil.copyfile(folder / MODEL_FILE, tmp)
    (version_dir / DELTA_FILE).unlink()
    (version_dir / DELTA_META).unlink()
    shutil.rmtree(folder, ignore_errors=True)
    return version_dir


def materialize(version_dir: str | Path) -> Path:
    """A folder `AutoModelForCausalLM.from_pretrained` loads: the version itself if full, else
    `<version>/.full/` rebuilt bit-exactly from the parent chain (cached, digest-checked)."""
    version_dir = Path(version_dir)
    if is_full(version_dir):
        return version_dir
    if not is_delta(version_dir):
        if not version_dir.exists():
            raise FileNotFoundError(f"checkpoint version folder {version_dir} does not exist")
        if any(version_dir.glob("*.safetensors")) or (version_dir / "model.safetensors.index.json").is_file():
            return version_dir  # a sharded HF folder: loadable as it is
        raise CheckpointError(f"{version_dir} holds neither {MODEL_FILE} nor a delta ({DELTA_FILE} + {DELTA_META})")
    info = json.loads((version_dir / DELTA_META).read_text(encoding="utf-8"))
    if info.get("format") not in DELTA_FORMATS:
        raise CheckpointError(f"{version_dir / DELTA_META}: unknown delta format {info.get('format')!r}")
    cache = version_dir / MATERIALIZED
    cached = cache / MODEL_FILE
    if cached.is_file() and cached.stat().st_size == info["full_bytes"] and file_hash(cached) == info["digest"]:
        return cache
    parent_dir = _parent_of_delta(version_dir)
    parent_file = materialize(parent_dir) / MODEL_FILE
    if file_hash(parent_file) != info["parent_digest"]:
        raise CheckpointError(
            f"{version_dir} was stored against parent weights with sha256 {info['parent_digest']}, "
            f"but {parent_dir} now holds different weights; the delta cannot be restored"
        )
    tmp = temp_folder(cache)
    tmp.mkdir()
    try:
        written = _HashingFile(tmp / MODEL_FILE)
        with _mapped(parent_file) as parent, open(version_dir / DELTA_FILE, "rb") as payload, written:
            try:
                method, widen = DELTA_FORMATS[info["format"]]
                decode_delta_to(payload, parent, written, method, widen)
            except CheckpointError:
                raise
            except Exception as e:  # zstd or header errors from a damaged file
                raise CheckpointError(f"{version_dir / DELTA_FILE} is corrupt: {e}") from e
        if written.hash.hexdigest() != info["digest"]:
            raise CheckpointError(f"{version_dir / DELTA_FILE} is corrupt: restored weights fail the sha256 check")
        for item in version_dir.iterdir():
            if item.is_file() and item.name not in (DELTA_FILE, DELTA_META, OPTIMIZER_FILE):
                shutil.copy2(item, tmp / item.name)
        shutil.rmtree(cache, ignore_errors=True)
        try:
            os.replace(tmp, cache)
        except OSError:
            # another process materialised the same version meanwhile: use its copy if it is good
            if cached.is_file() and file_hash(cached) == info["digest"]:
                shutil.rmtree(tmp, ignore_errors=True)
                return cache
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return cache


def store_version(version_dir: str | Path, parent_dir: str | Path | None, *, delta: bool = True, full_every: int = 5) -> dict[str, Any]:
    """Storage of a version nobody serves (neither champion nor latest; lib.registry.promotion decides):
    a delta against its parent unless the chain would reach `full_every` hops (then it stays
    full, bounding a restore to full_every - 1 decodes). Its master/ folder, if any, becomes a
    delta against the version's own weights (about the size of a bf16 copy: the fp32 bits below bf16)."""
    version_dir = Path(version_dir)
    out = _store_weights(version_dir, parent_dir, delta, full_every)
    master = master_dir(version_dir)
    if master is not None:
        if delta and is_full(master):
            info = compact(master, version_dir)
            out["master"] = {"stored": "delta", "ratio": info["ratio"]}
        else:
            out["master"] = {"stored": "delta" if is_delta(master) else "full"}
    return out


def _store_weights(version_dir: Path, parent_dir, delta: bool, full_every: int) -> dict[str, Any]:
    if is_delta(version_dir):  # a replayed night: compacted the first time
        return {"stored": "delta", **storage_info(version_dir)}
    if not delta or parent_dir is None or not (is_full(parent_dir) or is_delta(parent_dir)):
        return {"stored": "full", "reason": "delta storage off or no parent version"}
    depth = chain_depth(parent_dir) + 1
    if depth >= full_every:
        return {"stored": "full", "reason": f"chain depth {depth} reaches checkpoints.full_every={full_every}"}
    info = compact(version_dir, parent_dir)
    return {"stored": "delta", "chain_depth": depth, **info}


# -- fp32 master weights --------------------------------------------------------------------------
def master_dir(version_dir: str | Path) -> Path | None:
    """`<version>/master/` when the version keeps fp32 master weights (full or delta), else None."""
    d = Path(version_dir) / MASTER_DIR
    return d if (is_full(d) or is_delta(d)) else None


def drop_master_weights(version_dir: str | Path) -> int:
    """Delete a version's master/ folder; returns the bytes freed (0 if it had none). A night
    from this version then starts from its stored weights and records that it did."""
    d = Path(version_dir) / MASTER_DIR
    if not d.is_dir():
        return 0
    size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    shutil.rmtree(d)
    return size
