"""The prepared data of one run: the folder the data stage writes and the trainer, the loader,
the evaluation and the memory read. The one place that knows what is inside it.

```
<data folder>/              a run folder (lib/workspace.py says where), or any --data folder
  data.json                 what was prepared: tokenizer, seq_len, separator, per-source stats,
                            the manifest's sha256 (lib/data/sampling.py writes it last)
  manifest.parquet          training order: pieces of documents (lib/data/manifest.py)
  shards/<source>/shard-NNNNN.{bin,idx,json}   token shards, one per input file (lib/data/shards.py)
  heldout/<source>.parquet  new documents kept out of training (`id`, `text`): new_heldout
  exposures.parquet         times each new and memory document was drawn (`source`, `doc_id`,
                            `night`, `exposures`): the memory's replay weights
```

`PreparedData(folder)` names the files (for writing); `PreparedData.open(folder)` also checks
that data.json and the manifest are there and readable, and errors name the folder, the file and
what to do (prepare the data again). Deeper checks (every shard against the manifest and the
model's tokenizer) are the loader's `validate`, which needs the shards memory-mapped anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lib.files import write_json

DATA_JSON = "data.json"
MANIFEST = "manifest.parquet"
SHARDS = "shards"
HELDOUT = "heldout"
EXPOSURES = "exposures.parquet"
FORMAT = "training-data"
PREPARE_AGAIN = "prepare the data again (`consolidate tokenize`, or re-run the night)"


class DataError(ValueError):
    """Prepared training data that cannot be trained on (missing, inconsistent, wrong tokenizer)."""


@dataclass(frozen=True)
class PreparedData:
    """The prepared-data folder at `path` (see the module docstring)."""

    path: Path

    # what a cached data stage produced, relative to the folder (adopted into another run whole)
    OUTPUTS = (MANIFEST, DATA_JSON, SHARDS, HELDOUT, EXPOSURES)

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def open(cls, folder: str | Path | PreparedData) -> PreparedData:
        """The prepared data in `folder`, checked: data.json readable, the manifest present."""
        data = folder if isinstance(folder, PreparedData) else cls(Path(folder))
        data.check()
        return data

    # -- the files -----------------------------------------------------------------------------
    @property
    def data_json(self) -> Path:
        return self.path / DATA_JSON

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def shards(self) -> Path:
        return self.path / SHARDS

    @property
    def heldout(self) -> Path:
        return self.path / HELDOUT

    @property
    def exposures(self) -> Path:
        return self.path / EXPOSURES

    def shard_stem(self, source: str, index: int) -> Path:
        """Token shard of input file `index` of `source` (lib/data/shards.py adds .bin/.idx/.json)."""
        return self.shards / source / f"shard-{index:05d}"

    def heldout_file(self, source: str) -> Path:
        return self.heldout / f"{source}.parquet"

    def heldout_files(self) -> list[Path]:
        """Held-out documents of every source, in name order."""
        return sorted(self.heldout.glob("*.parquet"))

    def exists(self) -> bool:
        return self.data_json.is_file()

    # -- reading -------------------------------------------------------------------------------
    def check(self) -> None:
        """data.json is there and readable, the manifest it names is there: or a DataError that
        says which file and what to do."""
        if not self.path.is_dir():
            raise DataError(f"{self.path} does not exist: no prepared data there; {PREPARE_AGAIN}")
        info = self.info
        if not self.manifest_file(info).is_file():
            raise DataError(f"{self.manifest_file(info)} does not exist, though {self.data_json} names it: the "
                            f"prepared data in {self.path} is incomplete; {PREPARE_AGAIN}")

    @cached_property
    def info(self) -> dict[str, Any]:
        """data.json's content."""
        path = self.data_json
        if not path.is_file():
            raise DataError(f"{path} does not exist: {self.path} is not a prepared data folder; {PREPARE_AGAIN}")
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{path} is not valid JSON ({exc}): a write was cut short or the file was edited; "
                            f"{PREPARE_AGAIN}") from exc
        if not isinstance(info, dict):
            raise DataError(f"{path} holds a {type(info).__name__}, not the data stage's summary; {PREPARE_AGAIN}")
        return info

    def manifest_file(self, info: dict[str, Any] | None = None) -> Path:
        """The manifest data.json names (manifest.parquet unless it says otherwise)."""
        return self.path / (info if info is not None else self.info).get("manifest", MANIFEST)

    def read_exposures(self) -> list[dict[str, Any]]:
        """exposures.parquet's rows, [] when the folder has none (data prepared before it existed)."""
        return pq.read_table(self.exposures).to_pylist() if self.exposures.is_file() else []

    # -- writing (lib/data/sampling.py's prepare_training_data) ---------------------------------------
    def write_heldout(self, source: str, ids: list[str], texts: list[str]) -> Path:
        path = self.heldout_file(source)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string())}), path,
                       compression="zstd")
        return path

    def write_exposures(self, rows: dict[str, Any]) -> Path:
        """`rows`: columns source, doc_id, night (str) and exposures (int64)."""
        pq.write_table(pa.table({
            "source": pa.array(rows["source"], pa.string()),
            "doc_id": pa.array(rows["doc_id"], pa.string()),
            "night": pa.array(rows["night"], pa.string()),
            "exposures": pa.array(rows["exposures"], pa.int64()),
        }), self.exposures, compression="zstd")
        return self.exposures

    def write_info(self, info: dict[str, Any]) -> None:
        """data.json, written last: its presence says the folder is complete."""
        write_json(self.data_json, info, indent=1, sort_keys=True, default=str, newline=True)
        self.__dict__.pop("info", None)  # read back as written on next use
