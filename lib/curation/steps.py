"""Steps that don't know where they run (datatrove's manner), their counts, and the local executor.

- A `Step` is a small object with one method, `run(input, output, rank, world_size, section) ->
  Stats`: rank `rank` of `world_size` does its share of the work, reads `input` (the first step:
  what the caller hands in; the others: the `output` folder, where the steps before them wrote)
  and writes files under `output`. A step with `per_shard = False` is a reduce: it runs once, as
  rank 0, and reads the files of every rank.
- A step names what it reads (`reads`, a cache key's inputs) and what it writes (`writes`, the
  files a cached result brings along), so an orchestrator can cache it on content without
  knowing what it does. `cached = False` marks a step that must run every time (it writes
  outside `output`, e.g. a registry, or is cheaper than its key).
- `Stats` is what a step did: counts by dotted key (`stats.add("length.in", 12)`), a few values
  that are not summed (`stats.set("near.bands", 16)`), warnings, and one `dropped_<reason>`
  count per reason a document left. Ranks' stats add up with `+`; JSON both ways.
- `run_steps` is the local executor: each step in order, its ranks one after another in this
  process. The curation flow (flows/curation.py) maps the same list as Prefect tasks instead:
  a task per rank, cached on content; the survivors are the same (tests/curation/test_curation.py).

Trade-off: steps hand each other files, not documents in memory, so a rank can run in another
process or on another machine and a cached step is a folder of files; the cost is a parquet write
and reads between steps, kept small by writing the shard files plain (lib.curation.pipeline.SHARD_PARQUET):
`consolidate dedup` of 5.6 MB of stdlib sources with copies spends ~0.12-0.14 s of CPU per call
after the first against ~0.10 s for the in-memory dedup before the steps (cc26815), and a fresh
process's call took the same wall time as cc26815's, within the machine's noise
(docs/benchmarks.md, "#15 restructure: no regression").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

DROPPED = "dropped_"


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, dict):
            _merge(into.setdefault(k, {}), v)
        elif isinstance(v, list):
            into[k] = into.get(k, []) + v
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(into.get(k, 0), (int, float)):
            into[k] = into.get(k, 0) + v
        else:
            into.setdefault(k, v)


class Stats:
    """Counts of what a step (or a whole run) did, as a nested dict of numbers: `add` sums,
    `set` keeps the first value (a setting, a name), `warn` appends a sentence, `+` merges ranks.
    Every document that leaves is counted once under `dropped_<reason>` (`dropped()`)."""

    def __init__(self, counts: dict[str, Any] | None = None):
        self.counts: dict[str, Any] = json.loads(json.dumps(counts)) if counts else {}

    def _group(self, key: str) -> tuple[dict[str, Any], str]:
        *path, leaf = key.split(".")
        group = self.counts
        for part in path:
            group = group.setdefault(part, {})
        return group, leaf

    def add(self, key: str, n: int | float = 1) -> None:
        group, leaf = self._group(key)
        group[leaf] = group.get(leaf, 0) + n

    def set(self, key: str, value: Any) -> None:
        group, leaf = self._group(key)
        group[leaf] = value

    def drop(self, reason: str, n: int = 1) -> None:
        """`n` documents left for `reason` (also shown as 0 when `n` is 0)."""
        self.add(DROPPED + reason, n)

    def warn(self, message: str) -> None:
        self.counts.setdefault("warnings", []).append(message)

    def get(self, key: str, default: Any = 0) -> Any:
        value: Any = self.counts
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                return default
            value = value[part]
        return value

    def dropped(self) -> dict[str, int]:
        """{reason: documents} of every non-zero `dropped_<reason>` count."""
        return {k[len(DROPPED):]: v for k, v in sorted(self.counts.items()) if k.startswith(DROPPED) and v}

    def __add__(self, other: Stats) -> Stats:
        out = Stats(self.counts)
        _merge(out.counts, other.counts)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stats) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"Stats({self.counts!r})"

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.counts))

    @classmethod
    def total(cls, parts: Iterable[Stats]) -> Stats:
        out = cls()
        for p in parts:
            out = out + p
        return out


class Step:
    """One stage of a pipeline: `run` for rank `rank` of `world_size` (see the module docstring)."""

    name = "step"          # the task name when a flow maps it
    per_shard = True       # False: a reduce, run once as rank 0 over every rank's files
    cached = True          # an orchestrator may cache it on `reads` + its settings

    def reads(self, input: Any, output: Path, rank: int, world_size: int, section: Any) -> list[Path]:
        """Files rank `rank` reads (by content, a cache key's inputs)."""
        return []

    def writes(self, rank: int, world_size: int) -> list[str]:
        """Files rank `rank` writes, relative to `output` (what a cached result brings along)."""
        return []

    def run(self, input: Any, output: Path, rank: int, world_size: int, section: Any) -> Stats:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def ranks_of(step: Step, world_size: int) -> list[int]:
    return list(range(world_size)) if step.per_shard else [0]


def run_steps(steps: list[Step], input: Any, output: Path, world_size: int, section: Any) -> list[Stats]:
    """The local executor: every step in order, each rank in turn, in this process. The first
    step reads `input`, the others the `output` folder. Returns each step's stats (ranks summed)."""
    done = []
    for k, step in enumerate(steps):
        given = input if k == 0 else output
        done.append(Stats.total(step.run(given, output, r, world_size, section) for r in ranks_of(step, world_size)))
    return done
