"""Cache keys of the data stages: what they read, by content, not by name or time.

- A stage's key hashes (1) the xxh3-128 content hashes of its input files, sorted, (2) the JSON of
  the config sections that change its output, (3) the source of the lib packages that compute it
  (every file under each, so a module moved inside a package still counts),
  and (4) the stage name. Same bytes in, same settings, same code: same key, and Prefect returns
  the persisted result instead of running the task.
- File paths and modification times are NOT in the key: a buffer file copied elsewhere, or the
  corpus rebuilt byte-identically, still hits the cache; one changed byte misses it.
- Results and cache records persist under `<workspace>/cache/` (`on_workspace`), so a re-run of an
  unchanged night on the same workspace skips curation and tokenization even in a new process.
- Records are plain JSON (`PlainJSONSerializer`: the tasks return paths and small dicts), read
  with no object hooks. Prefect reads a record with the serializer the RECORD names, so the
  storage itself (`WorkspaceCache`) refuses any record not written by ours: a record left by an
  older pickle-based version, or planted by anyone who can write the folder, is a cache miss
  (the stage runs again and overwrites it), never unpickled.

Trade-off: hashing reads every input byte (~2 GB/s with xxh3, i.e. ~10 ms for the tiny demo and
~1 s for a 2 GB night) on every run, in exchange for keys that never confuse two different inputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from prefect.cache_policies import CacheKeyFnPolicy
from prefect.filesystems import LocalFileSystem
from prefect.serializers import Serializer
from pydantic import Field

from lib.buffer.records import content_hash
from lib.workspace import Workspace


def files_digest(files: Iterable[str | Path], known: dict[str, str] | None = None) -> list[str]:
    """Content hashes of `files`, sorted: order and names do not matter, bytes do. `known`: hashes
    already taken tonight, by path (not read again). A file that is gone (a retried ingest whose
    first attempt quarantined it) counts as `missing:<name>`."""
    out = []
    known = known or {}
    for f in files:
        if str(f) in known:
            out.append(known[str(f)])
            continue
        try:
            out.append(content_hash(f))
        except FileNotFoundError:
            out.append(f"missing:{Path(f).name}")
    return sorted(out)


def code_digest(code: Iterable[str]) -> str:
    """sha256 over the source of `code`: packages (every .py file under the package, recursively,
    with its path inside it) or single modules. A package, not a hand-kept list of its modules, so
    a module moved or added inside it still changes the key. Missing names count as absent."""
    h = hashlib.sha256()
    for name in sorted(code):
        spec = importlib.util.find_spec(name)
        h.update(name.encode())
        if spec is None:
            continue
        if spec.submodule_search_locations:  # a package
            for folder in spec.submodule_search_locations:
                for f in sorted(Path(folder).rglob("*.py")):
                    if "__pycache__" not in f.parts:
                        h.update(f.relative_to(folder).as_posix().encode())
                        h.update(f.read_bytes())
        elif spec.origin and Path(spec.origin).is_file():
            h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()


def stage_key(stage: str, files: Iterable[str | Path], config: Any, code: Iterable[str] = (),
              known: dict[str, str] | None = None) -> str:
    payload = {
        "stage": stage,
        "inputs": files_digest(files, known),
        "config": config,
        "code": code_digest(code),
    }
    return f"{stage}-" + hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def content_cache(
    stage: str,
    files: Callable[[dict[str, Any]], Iterable[str | Path]],
    config: Callable[[dict[str, Any]], Any],
    code: Iterable[str] = (),
    known: Callable[[dict[str, Any]], dict[str, str]] | None = None,
) -> CacheKeyFnPolicy:
    """A Prefect cache policy keyed on `stage_key`. `files` and `config` receive the task's
    parameters and return its input files and the settings that shape its output; `known`, the
    content hashes of input files the parameters carry already (by path); `code`, the packages
    (or modules) whose source computes the output (`code_digest`)."""
    code = tuple(code)

    def key(_context, parameters: dict[str, Any]) -> str:
        return stage_key(stage, files(parameters), config(parameters), code, known(parameters) if known else None)

    return CacheKeyFnPolicy(cache_key_fn=key)


class PlainJSONSerializer(Serializer):
    """Task results as plain JSON (dicts, lists, strings, numbers; paths become strings). Read
    back with `json.loads` and nothing else: no class names, no imports, no pickle."""

    type: str = Field(default="consolidation-json", frozen=True)

    def dumps(self, obj: Any) -> bytes:
        def plain(value: Any) -> Any:
            if isinstance(value, Path):
                return str(value)
            raise TypeError(f"a cached task returned {type(value).__name__}; cached stages return paths and small records only")

        return json.dumps(obj, default=plain).encode()

    def loads(self, blob: bytes) -> Any:
        return json.loads(blob)


class WorkspaceCache(LocalFileSystem):
    """`<workspace>/cache/`: a LocalFileSystem that hands Prefect only records written by
    PlainJSONSerializer. Anything else raises, which Prefect takes as a cache miss."""

    _block_type_name = "Consolidation workspace cache"

    def _checked(self, path: str, content: bytes) -> bytes:
        try:
            kind = json.loads(content)["metadata"]["serializer"]["type"]
        except (ValueError, KeyError, TypeError):
            kind = None
        if kind != PlainJSONSerializer.model_fields["type"].default:
            raise ValueError(f"cache record {path} was not written as plain JSON (serializer {kind!r}): ignored, "
                             f"the stage runs again")
        return content

    # Results name folders of the workspace (a run's curated files, its data folder). They are
    # stored with the root replaced by this mark and read back against where the workspace is
    # now: a moved or copied workspace never gets the original's paths from its cache.
    _ROOT_MARK = b"${WORKSPACE}/"

    def _root(self) -> bytes:
        return str(Path(self.basepath).expanduser().resolve().parent).encode() + b"/"

    def _portable(self, content: bytes) -> bytes:
        return content.replace(self._root(), self._ROOT_MARK)

    async def aread_path(self, path: str) -> bytes:
        return self._checked(path, await super().aread_path(path)).replace(self._ROOT_MARK, self._root())

    def read_path(self, path: str, _sync: bool | None = None) -> bytes:
        return self._checked(path, LocalFileSystem.read_path(self, path, _sync=True)).replace(self._ROOT_MARK, self._root())

    async def awrite_path(self, path: str, content: bytes) -> str:
        return await super().awrite_path(path, self._portable(content))

    def write_path(self, path: str, content: bytes, _sync: bool | None = None) -> str:
        return LocalFileSystem.write_path(self, path, self._portable(content), _sync=True)


_saved_storage: dict[str, str] = {}


def workspace_storage(ws: Workspace) -> str:
    """Slug of a WorkspaceCache block at `<workspace>/cache/`, saved on the API once per process
    (Prefect resolves result storage by block on the server side)."""
    root = str(ws.task_cache)
    if root not in _saved_storage:
        ws.task_cache.mkdir(parents=True, exist_ok=True)
        name = "consolidation-cache-" + hashlib.sha256(root.encode()).hexdigest()[:12]
        WorkspaceCache(basepath=root).save(name, overwrite=True)
        _saved_storage[root] = f"{WorkspaceCache.get_block_type_slug()}/{name}"
    return _saved_storage[root]


def on_workspace(task, ws: Workspace):
    """The task with its results (and cache records) persisted under `<workspace>/cache/`, as
    plain JSON."""
    return task.with_options(persist_result=True, result_storage=workspace_storage(ws),
                             result_serializer=PlainJSONSerializer())
