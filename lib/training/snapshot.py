"""Resumable training snapshots: everything needed to continue a run bit-exactly.

- A snapshot is `<run>/train/snapshots/step-NNNNNNNN/`: `model.safetensors` (weights),
  `optimizer.pt` (AdamW state: plain tensors and numbers, loaded with `weights_only=True`),
  `state.json` (step, world size, parallelism, metrics so far), and per rank `rank-R.json`
  (loader state, python/numpy RNG) + `rank-R.rng.pt` (torch CPU/CUDA RNG byte tensors).
  With `training.parallelism=fsdp` the weights and AdamW state are instead one safetensors shard
  per rank (`shard-0000R-model-00001-of-00001.safetensors`, lib.training.distributed.save_sharded), the
  optimizer's plain numbers in state.json; the same marker covers them.
- Atomic: every rank writes into `.step-N.tmp/`, then rank 0 writes `COMPLETE` (sha256 of every
  file) and renames the folder into place. A crash at any point leaves either a temporary folder
  or a folder without/with a wrong marker; both are skipped on resume with a log line.
- `latest_complete(dir)` walks snapshots newest first and returns the first whose marker lists
  exactly the files present with matching checksums; `prune(dir, keep)` deletes all but the last k.
- The snapshot refuses a different world size (or parallelism) on load: the loader's per-rank
  positions would no longer describe the same data order. On several nodes the snapshot folder
  must be on a filesystem every node shares: each rank writes its files there, rank 0 checks them.

Trade-off: checksumming every file on resume reads the snapshot twice (~0.1 s for the tiny
preset's 10 MB, ~2 s per GB), which buys never resuming from a torn or bit-rotted file.
"""

from __future__ import annotations

# torch (and safetensors.torch, which loads it) is imported inside functions: importing this module must not cost its ~4 s
import json
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from lib.files import file_hash, swap_in, write_json

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
_NAME = re.compile(r"^step-(\d{8,})$")
_SHARD = re.compile(r"^shard-\d+-model-\d+-of-\d+\.safetensors$")  # torch.distributed.checkpoint's HF storage


class SnapshotError(ValueError):
    """A snapshot that cannot be used for this run (e.g. another world size)."""


def snapshot_name(step: int) -> str:
    return f"step-{step:08d}"


# -- RNG states ----------------------------------------------------------------------------------
def rng_state() -> tuple[dict[str, Any], dict[str, Any]]:
    """(JSON-able python/numpy state, torch tensors) of every generator the run may draw from."""
    import torch

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    plain = {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["torch_cuda"] = torch.cuda.get_rng_state()
    return plain, tensors


def set_rng_state(plain: dict[str, Any], tensors: dict[str, Any]) -> None:
    import torch

    version, internal, gauss = plain["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch_cpu"])
    if "torch_cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["torch_cuda"])


# -- writing -------------------------------------------------------------------------------------
def tmp_dir(snapshot_dir: Path, step: int) -> Path:
    return snapshot_dir / f".{snapshot_name(step)}.tmp"


def begin(snapshot_dir: str | Path, step: int) -> Path:
    """Rank 0: a clean temporary folder for the snapshot of `step` (call a barrier after it)."""
    tmp = tmp_dir(Path(snapshot_dir), step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def write_rank(tmp: Path, rank: int, loader_state: dict[str, Any]) -> None:
    """Every rank: its loader position and RNG states."""
    import torch

    plain, tensors = rng_state()
    (tmp / f"rank-{rank}.json").write_text(json.dumps({"loader": loader_state, "rng": plain}), encoding="utf-8")
    torch.save(tensors, tmp / f"rank-{rank}.rng.pt")


def write_shared(tmp: Path, model, optimizer_state: dict, state: dict[str, Any]) -> None:
    """Rank 0 (DDP): weights (safetensors, tied tensors handled), optimizer state and run state."""
    import torch
    from safetensors.torch import save_model

    save_model(model, str(tmp / "model.safetensors"))
    torch.save(optimizer_state, tmp / "optimizer.pt")
    write_state(tmp, state)


def write_state(tmp: Path, state: dict[str, Any]) -> None:
    """Rank 0: state.json (step, world size, parallelism, history; FSDP: the shards' JSON part)."""
    (tmp / "state.json").write_text(json.dumps(state), encoding="utf-8")


def commit(snapshot_dir: str | Path, step: int, keep: int) -> Path:
    """Rank 0, after every rank wrote its files: checksum marker, rename into place, prune."""
    snapshot_dir = Path(snapshot_dir)
    tmp = tmp_dir(snapshot_dir, step)
    files = {p.name: file_hash(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    write_json(tmp / MARKER, {"step": step, "files": files})
    final = snapshot_dir / snapshot_name(step)
    swap_in(tmp, final)
    prune(snapshot_dir, keep)
    return final


def prune(snapshot_dir: str | Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete snapshots (and stale temporary folders)."""
    snapshot_dir = Path(snapshot_dir)
    complete = [p for p in _candidates(snapshot_dir) if (p / MARKER).is_file()]
    removed = complete[keep:]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    for p in snapshot_dir.glob(".step-*.tmp"):
        shutil.rmtree(p, ignore_errors=True)
    return removed


# -- reading -------------------------------------------------------------------------------------
def _candidates(snapshot_dir: Path) -> list[Path]:
    """Snapshot folders, newest step first."""
    if not snapshot_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in snapshot_dir.iterdir() if p.is_dir() and (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def check(path: Path) -> str | None:
    """None if the snapshot is complete and intact, else the reason it is not."""
    marker = path / MARKER
    if not marker.is_file():
        return "no completion marker (partial write)"
    try:
        listed = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return f"unreadable completion marker ({exc})"
    present = {p.name for p in path.iterdir() if p.is_file() and p.name != MARKER}
    if present != set(listed):
        return f"files {sorted(present ^ set(listed))} differ from the marker's list"
    for name, digest in listed.items():
        if file_hash(path / name) != digest:
            return f"{name} fails its sha256 check (corrupt)"
    if "state.json" not in listed:
        return "state.json missing"
    if "model.safetensors" not in listed and not any(_SHARD.match(name) for name in listed):
        return "no weights (model.safetensors or shard-*.safetensors) listed"
    return None


def latest_complete(snapshot_dir: str | Path) -> Path | None:
    """Newest snapshot that passes `check`; skipped ones are logged with the reason."""
    for path in _candidates(Path(snapshot_dir)):
        reason = check(path)
        if reason is None:
            return path
        log.warning("skipping snapshot %s: %s", path, reason)
    return None


def load(path: str | Path, rank: int, world_size: int, parallelism: str = "ddp") -> dict[str, Any]:
    """State of one rank: {'step', 'state', 'loader', 'rng', 'rng_tensors', 'optimizer', 'model_file'}
    ('optimizer' and 'model_file' are None for a sharded snapshot: lib.training.distributed.load_sharded reads it)."""
    import torch

    path = Path(path)
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    saved_world = state.get("world_size")
    if saved_world != world_size:
        raise SnapshotError(
            f"snapshot {path} was written by a run with world size {saved_world}, this run has "
            f"{world_size}: resume with the same number of processes (nnodes × nproc_per_node = {saved_world}) "
            f"or start the run afresh without --resume"
        )
    saved_parallelism = state.get("parallelism", "ddp")
    if saved_parallelism != parallelism:
        raise SnapshotError(
            f"snapshot {path} was written with training.parallelism={saved_parallelism}, this run uses {parallelism}: "
            f"resume with training.parallelism={saved_parallelism}, or start the run afresh without --resume"
        )
    rank_file = path / f"rank-{rank}.json"
    if not rank_file.is_file():
        raise SnapshotError(f"snapshot {path} has no state for rank {rank}")
    per_rank = json.loads(rank_file.read_text(encoding="utf-8"))
    return {
        "step": int(state["step"]),
        "state": state,
        "loader": per_rank["loader"],
        "rng": per_rank["rng"],
        "rng_tensors": torch.load(path / f"rank-{rank}.rng.pt", map_location="cpu", weights_only=True),
        "optimizer": None if saved_parallelism == "fsdp" else torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True),
        "model_file": None if saved_parallelism == "fsdp" else path / "model.safetensors",
    }
