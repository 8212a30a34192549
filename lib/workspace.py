"""The one place that knows the workspace layout.

```
<root>/
  buffers/               buffer parquet files + wal/ (write-ahead log of unflushed records)
  quarantine/            buffer files (or rows) that failed validation, each with a .reason.json
  corpora/<name>/        original corpus shards (parquet, column `text`), validation split in val/
  index/                 curation state that grows night by night (exact hashes, MinHash bands),
                         the token cache (index/tokens) and measured bits per byte (index/eval)
  runs/<run-id>/         curated/, knowledge/ (facts.jsonl, augmented/), the prepared data (lib/data/prepared.py),
                         train/ (snapshots, logs), eval/
  memory/<version>/      what an accepted night taught: train/ (replayed later), heldout.parquet (retention set)
  checkpoints/<version>/ Hugging Face model folders + meta.json (+ master/: fp32 master weights)
  serving/champion, serving/latest   links to the full Hugging Face folders of those versions
  lineage.duckdb         the registry: what exists and in which state
  tokenizer/             BPE tokenizer trained by the bootstrap on the corpus
  cache/                 orchestrator's cached stage results (JSON), keyed on input content hashes
  locks/                 night.lock (one night at a time), training.lock (one training at a time)
  .prefect/              the CLI's Prefect home (ephemeral API database) unless PREFECT_HOME is set
```

What is stored about the workspace (lineage, meta.json, delta parents, cached task results)
names its folders relative to the root, so the whole folder can be copied or moved.

Every path a user hands in goes through `Workspace.resolve`, which refuses anything that lands
outside the root (`../../etc/passwd`, an absolute path elsewhere, a symlink pointing out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lib.data.prepared import PreparedData

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class WorkspaceError(ValueError):
    """A path or name that would leave the workspace, or is not a valid name."""


def check_name(name: str, what: str = "name") -> str:
    """Names of runs, versions and corpora become folder names: keep them plain."""
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
        raise WorkspaceError(f"{what} {name!r} is not valid: use letters, digits, '.', '_' and '-' (at most 128), not starting with '.' or '-'")
    return name


@dataclass(frozen=True)
class Workspace:
    root: Path

    def __init__(self, root: str | Path):
        object.__setattr__(self, "root", Path(root).expanduser().resolve())

    # -- top-level folders -------------------------------------------------------------------
    @property
    def buffers(self) -> Path:
        return self.root / "buffers"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def corpora(self) -> Path:
        return self.root / "corpora"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def serving(self) -> Path:
        """Stable paths for inference engines: `champion` and `latest` link to full HF folders."""
        return self.root / "serving"

    @property
    def lineage_db(self) -> Path:
        return self.root / "lineage.duckdb"

    @property
    def tokenizer(self) -> Path:
        """The tokenizer the bootstrap trains on the corpus (v0 and its descendants carry a copy)."""
        return self.root / "tokenizer"

    @property
    def task_cache(self) -> Path:
        """Persisted results and cache records of the orchestrator's data stages (Prefect)."""
        return self.root / "cache"

    @property
    def memory(self) -> Path:
        """The long-term memory: `<version>/train/` (an accepted night's documents, hard links to its
        curated files), `<version>/heldout.parquet` (its retention eval set), `<version>/night.json`."""
        return self.root / "memory"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def night_lock(self) -> Path:
        """Held by the night (or bootstrap, or curation) working on this workspace: one at a time."""
        return self.locks / "night.lock"

    @property
    def training_lock(self) -> Path:
        """Held while torchrun writes a version (default of `orchestration.train_lock`)."""
        return self.locks / "training.lock"

    @property
    def prefect_home(self) -> Path:
        """PREFECT_HOME of the CLI's flows on this workspace when the user set none: the ephemeral
        API's database and settings stay with the workspace, not shared machine-wide."""
        return self.root / ".prefect"

    @property
    def eval_cache(self) -> Path:
        """Bits per byte already measured, by weights digest and eval-set digest (JSON records):
        a champion's old_val is scored the night it is the candidate, not again as a parent."""
        return self.index / "eval"

    @property
    def benchmark_data(self) -> Path:
        """The datasets library's cache of local benchmark tasks (eval.benchmarks, Arrow files
        built from their JSON/CSV data): inside the workspace, not in ~/.cache."""
        return self.index / "benchmark-data"

    @property
    def token_cache(self) -> Path:
        """Token shards by content key (input file, tokenizer, hold-out and FIM rules), reused by
        every night's data preparation so the corpus is tokenized once."""
        return self.index / "tokens"

    # -- named children ----------------------------------------------------------------------
    def corpus(self, name: str) -> Path:
        return self.corpora / check_name(name, "corpus name")

    def corpus_train(self, name: str) -> Path:
        return self.corpus(name) / "train"

    def corpus_val(self, name: str) -> Path:
        return self.corpus(name) / "val"

    def run(self, run_id: str) -> "RunDir":
        return RunDir(self.runs / check_name(run_id, "run id"))

    def checkpoint(self, version: str) -> Path:
        return self.checkpoints / check_name(version, "version")

    # -- safety ------------------------------------------------------------------------------
    def resolve(self, path: str | Path) -> Path:
        """Resolve a user-supplied path (relative paths are relative to the root) and refuse it
        unless it stays inside the workspace after following symlinks."""
        p = Path(path).expanduser()
        p = (p if p.is_absolute() else self.root / p).resolve()
        if p != self.root and self.root not in p.parents:
            raise WorkspaceError(f"path {str(path)!r} resolves to {p}, outside the workspace {self.root}")
        return p

    def ensure(self) -> "Workspace":
        for d in (self.buffers, self.quarantine, self.corpora, self.index, self.runs, self.checkpoints):
            d.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class RunDir:
    """Folder of one nightly run: everything it produced, addressable by stage."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def curated(self) -> Path:
        return self.path / "curated"

    @property
    def prepared(self) -> PreparedData:
        """The data stage's output in this folder (data.json, manifest, shards, held-out, exposures)."""
        return PreparedData(self.path)

    @property
    def train(self) -> Path:
        return self.path / "train"

    @property
    def snapshots(self) -> Path:
        return self.train / "snapshots"

    @property
    def metrics(self) -> Path:
        return self.train / "metrics.jsonl"

    @property
    def eval(self) -> Path:
        return self.path / "eval"

    @property
    def knowledge(self) -> Path:
        """The knowledge stage's output (lib/knowledge/inject.py): facts.jsonl, augmented/, stats.json."""
        return self.path / "knowledge"

    @property
    def facts(self) -> Path:
        """The night's fact set: held-out question phrasings only, never trained on."""
        return self.knowledge / "facts.jsonl"

    def ensure(self) -> "RunDir":
        for d in (self.curated, self.prepared.shards, self.train, self.eval):
            d.mkdir(parents=True, exist_ok=True)
        return self
