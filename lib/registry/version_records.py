"""The queries of the `versions`, `aliases`, `alias_history`, `metrics` and `gate_decisions` tables,
and the history read from them.

A mixin of `Lineage` (lib/registry/lineage.py: the file, the schema, the connections).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from lib.registry.records import (
    VERSION_COLS, LineageError, portable_tree, decisions_of, flatten, metrics_of, now, run_inputs_of, run_row, to_json,
)


class VersionRecords:
    def get_version(self, version: str) -> dict[str, Any] | None:
        with self.reading() as con:
            row = con.execute(
                "SELECT version, parent, path, digest, status, run_id, storage, created_at, meta FROM versions WHERE version = ?",
                [version],
            ).fetchone()
        if row is None:
            return None
        keys = ("version", "parent", "path", "digest", "status", "run_id", "storage", "created_at", "meta")
        out = dict(zip(keys, row))
        out["path"] = self.full_path(out["path"])
        if isinstance(out["meta"], str):
            out["meta"] = json.loads(out["meta"])
        return out

    def resolve_version(self, name: str) -> str:
        """A version id or an alias (`champion`, `latest`) -> the version id; unknown: LineageError."""
        with self.reading() as con:
            row = con.execute("SELECT version FROM aliases WHERE alias = ?", [name]).fetchone()
            if row:
                return row[0]
            if con.execute("SELECT 1 FROM versions WHERE version = ?", [name]).fetchone():
                return name
        raise LineageError(f"unknown version or alias {name!r} in {self.db_path}: see `consolidate lineage ls`")

    def alias(self, alias: str) -> str | None:
        """The version an alias (`champion`, `latest`) points at, or None."""
        with self.reading() as con:
            row = con.execute("SELECT version FROM aliases WHERE alias = ?", [alias]).fetchone()
        return row[0] if row else None

    def set_alias(
        self, alias: str, version: str, actor: str, reason: str = "", con: duckdb.DuckDBPyConnection | None = None
    ) -> None:
        """Point `alias` at `version` and record the move in alias_history (one transaction;
        pass `con` to join a larger one)."""
        if con is None:
            with self.transaction() as own:
                return self.set_alias(alias, version, actor, reason, own)
        if not con.execute("SELECT 1 FROM versions WHERE version = ?", [version]).fetchone():
            raise LineageError(f"unknown version {version!r}")
        prev = con.execute("SELECT version FROM aliases WHERE alias = ?", [alias]).fetchone()
        t = now()
        con.execute("DELETE FROM aliases WHERE alias = ?", [alias])
        con.execute("INSERT INTO aliases VALUES (?, ?, ?)", [alias, version, t])
        con.execute(
            "INSERT INTO alias_history VALUES (?, ?, ?, ?, ?, ?)", [alias, version, prev[0] if prev else None, actor, reason, t]
        )

    def root_version(self) -> str | None:
        """The first version of the lineage (v0: adopted or pre-trained)."""
        with self.reading() as con:
            row = con.execute("SELECT version FROM versions WHERE parent IS NULL ORDER BY created_at LIMIT 1").fetchone()
        return row[0] if row else None

    def next_version(self, run_id: str | None = None) -> str:
        """`vN` after the highest recorded N (`v0` on an empty registry). With `run_id`, the
        version that run already recorded, if any: a re-run of a night reuses its version id."""
        with self.reading() as con:
            if run_id is not None:
                row = con.execute("SELECT version FROM versions WHERE run_id = ? ORDER BY created_at LIMIT 1", [run_id]).fetchone()
                if row:
                    return row[0]
            numbers = [int(v[1:]) for (v,) in con.execute("SELECT version FROM versions").fetchall() if v[:1] == "v" and v[1:].isdigit()]
        return f"v{max(numbers) + 1 if numbers else 0}"

    def record_version(
        self,
        version: str,
        path: str | Path,
        *,
        parent: str | None = None,
        run_id: str | None = None,
        status: str = "candidate",
        digest: str | None = None,
        storage: str | None = None,
        meta: dict[str, Any] | None = None,
        inputs: list[str] | None = None,
        manifest: dict[str, Any] | None = None,
        metrics: dict[str, dict[str, dict[str, float]]] | None = None,
    ) -> None:
        """Everything about a new version in ONE transaction: its row, the buffer files its run
        trained on, its manifest (`{"hash", "path", "stats"}`) and metrics
        (`{version: {dataset: {metric: value}}}`, e.g. parent and candidate). A crash leaves all
        of it or none. Re-recording the same version from the same run replaces it (idempotent);
        a version id taken by another run is refused."""
        if status not in ("candidate", "accepted", "rejected"):
            raise LineageError(f"version status {status!r}: expected candidate, accepted or rejected")
        with self.transaction() as con:
            row = con.execute("SELECT run_id, status FROM versions WHERE version = ?", [version]).fetchone()
            if row is not None and row[0] != run_id:
                raise LineageError(f"version {version!r} was already recorded by run {row[0]!r}; ask next_version() for a free id")
            if parent is not None and not con.execute("SELECT 1 FROM versions WHERE version = ?", [parent]).fetchone():
                raise LineageError(f"parent version {parent!r} of {version!r} is not recorded")
            if row is not None and row[1] != "candidate":
                status = row[1]  # a decided version keeps its decision when a night is replayed
            con.execute(
                """INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (version) DO UPDATE SET parent = excluded.parent, path = excluded.path,
                     digest = excluded.digest, status = excluded.status, storage = excluded.storage, meta = excluded.meta""",
                [version, parent, self.stored_path(path), digest, status, run_id, storage, now(), to_json(portable_tree(meta or {}, self.root))],
            )
            if run_id is not None:
                con.execute("UPDATE runs SET version = ? WHERE run_id = ?", [version, run_id])
                self.record_inputs(run_id, list(inputs or []), con)
            if manifest is not None:
                self.record_manifest(manifest["hash"], run_id, manifest.get("path"), manifest.get("stats"), con)
            for v, by_dataset in (metrics or {}).items():
                self.record_metrics(v, by_dataset, run_id, con)

    def set_status(self, version: str, status: str, con: duckdb.DuckDBPyConnection) -> None:
        con.execute("UPDATE versions SET status = ? WHERE version = ?", [status, version])

    def set_storage(self, version: str, storage: str) -> None:
        """full | delta, after `lib.checkpoints.checkpoint.store_version` compacted (or kept) the weights."""
        with self.transaction() as con:
            if not con.execute("SELECT 1 FROM versions WHERE version = ?", [version]).fetchone():
                raise LineageError(f"unknown version {version!r}")
            con.execute("UPDATE versions SET storage = ? WHERE version = ?", [storage, version])

    def versions(self) -> list[dict[str, Any]]:
        """All versions in creation order, each with the aliases that point at it."""
        with self.reading() as con:
            rows = con.execute(f"SELECT {VERSION_COLS} FROM versions ORDER BY created_at, version").fetchall()
            aliases = con.execute("SELECT alias, version FROM aliases ORDER BY alias").fetchall()
        out = [self._version_dict(r) for r in rows]
        for v in out:
            v["aliases"] = [a for a, target in aliases if target == v["version"]]
        return out

    def record_metrics(
        self, version: str, metrics: dict[str, dict[str, float]], run_id: str | None = None,
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        """Upsert {dataset: {metric: value}} for `version` as measured by `run_id`."""
        if con is None:
            with self.transaction() as own:
                return self.record_metrics(version, metrics, run_id, own)
        t = now()
        for dataset, values in metrics.items():
            for metric, value in values.items():
                con.execute(
                    """INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)
                       ON CONFLICT (run_id, version, dataset, metric) DO UPDATE SET value = excluded.value, recorded_at = excluded.recorded_at""",
                    [run_id or "", version, dataset, metric, None if value is None else float(value), t],
                )

    def metrics(self, version: str, run_id: str | None = None) -> dict[str, dict[str, float]]:
        """{dataset: {metric: value}} of `version`, measured by `run_id` (default: every run,
        the latest value of each metric winning)."""
        with self.reading() as con:
            return metrics_of(con, version, run_id)

    def record_gate_decision(
        self, version: str, decision: dict[str, Any], run_id: str | None = None, actor: str = "gate",
        reason: str | None = None, con: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        """The gate's decision replaces an earlier gate decision on the same version (a replayed
        night); a person's override is always added."""
        if con is None:
            with self.transaction() as own:
                return self.record_gate_decision(version, decision, run_id, actor, reason, own)
        if actor == "gate":
            con.execute("DELETE FROM gate_decisions WHERE version = ? AND actor = 'gate'", [version])
        con.execute(
            "INSERT INTO gate_decisions VALUES (?, ?, ?, ?, ?, ?, ?)",
            [version, run_id, bool(decision["passed"]), to_json(decision.get("rules", [])), actor, reason, now()],
        )

    def gate_decisions(self, version: str) -> list[dict[str, Any]]:
        with self.reading() as con:
            return decisions_of(con, version)

    def alias_history(self, alias: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT alias, version, previous, actor, reason, moved_at FROM alias_history"
        params: list[Any] = []
        if alias is not None:
            query += " WHERE alias = ?"
            params.append(alias)
        with self.reading() as con:
            rows = con.execute(query + " ORDER BY moved_at", params).fetchall()
        return [dict(zip(("alias", "version", "previous", "actor", "reason", "moved_at"), r)) for r in rows]

    def ancestry(self, version: str) -> list[dict[str, Any]]:
        """`version` and its ancestors back to the root (newest first). Each step carries its
        run, the buffer files it consumed, its metrics and the parent's on the same data, and
        its gate decisions."""
        steps = []
        with self.reading() as con:
            current: str | None = version
            seen = set()
            while current is not None:
                if current in seen:
                    raise LineageError(f"parent links of {version!r} form a cycle at {current!r}")
                seen.add(current)
                row = con.execute(f"SELECT {VERSION_COLS} FROM versions WHERE version = ?", [current]).fetchone()
                if row is None:
                    raise LineageError(f"unknown version {current!r}" + (f" (an ancestor of {version!r})" if current != version else ""))
                step = self._version_dict(row)
                run_id = step["run_id"]
                step["run"] = run_row(con, run_id) if run_id else None
                step["inputs"] = [self._absolute(b).__dict__ for b in run_inputs_of(con, run_id)] if run_id else []
                step["metrics"] = metrics_of(con, current, run_id or "")
                step["parent_metrics"] = metrics_of(con, step["parent"], run_id or "") if step["parent"] else {}
                step["gate_decisions"] = decisions_of(con, current)
                steps.append(step)
                current = step["parent"]
        return steps

    def diff(self, a: str, b: str) -> dict[str, Any]:
        """What differs between two versions: config keys (dotted), metrics on datasets both
        measured, and the buffer files each consumed."""
        with self.reading() as con:
            va, vb = (con.execute(f"SELECT {VERSION_COLS} FROM versions WHERE version = ?", [v]).fetchone() for v in (a, b))
            for v, row in ((a, va), (b, vb)):
                if row is None:
                    raise LineageError(f"unknown version {v!r}")
            va, vb = self._version_dict(va), self._version_dict(vb)
            configs = []
            for v in (va, vb):
                run = run_row(con, v["run_id"]) if v["run_id"] else None
                configs.append(flatten((run or {}).get("config") or v["meta"].get("consolidation_config") or {}))
            ma, mb = metrics_of(con, a, va["run_id"] or ""), metrics_of(con, b, vb["run_id"] or "")
            ia = {x.content_hash for x in run_inputs_of(con, va["run_id"])} if va["run_id"] else set()
            ib = {x.content_hash for x in run_inputs_of(con, vb["run_id"])} if vb["run_id"] else set()
        config_diff = {
            k: {"a": configs[0].get(k), "b": configs[1].get(k)}
            for k in sorted(set(configs[0]) | set(configs[1]))
            if configs[0].get(k) != configs[1].get(k)
        }
        metric_diff = {}
        for dataset in sorted(set(ma) & set(mb)):
            for metric in sorted(set(ma[dataset]) & set(mb[dataset])):
                x, y = ma[dataset][metric], mb[dataset][metric]
                rel = (y - x) / abs(x) if x else None
                metric_diff[f"{dataset}.{metric}"] = {"a": x, "b": y, "relative_change": rel}
        return {
            "a": a, "b": b,
            "parents": {"a": va["parent"], "b": vb["parent"]},
            "status": {"a": va["status"], "b": vb["status"]},
            "config": config_diff,
            "metrics": metric_diff,
            "inputs": {"only_a": sorted(ia - ib), "only_b": sorted(ib - ia), "both": len(ia & ib)},
        }

    # -- rollouts (what went live on the serving engine) -------------------------------------
    def record_rollout(self, version: str, kind: str, target: str | None, status: str, detail: str | None,
                       attempt: int, run_id: str | None, started_at: datetime) -> None:
        """One push of `version` to the serving engine: live, failed (with why) or skipped."""
        if status not in ("live", "failed", "skipped"):
            raise ValueError(f"rollout status must be live, failed or skipped, got {status!r}")
        with self.transaction() as con:
            con.execute("INSERT INTO rollouts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [version, kind, target, status, detail, attempt, run_id or "", started_at, now()])

    def rollouts(self, version: str | None = None) -> list[dict[str, Any]]:
        """Every push attempt, oldest first (of `version` only, if given)."""
        cols = ("version", "kind", "target", "status", "detail", "attempt", "run_id", "started_at", "finished_at")
        query = f"SELECT {', '.join(cols)} FROM rollouts"
        params: list[Any] = []
        if version is not None:
            query += " WHERE version = ?"
            params.append(version)
        with self.reading() as con:
            rows = con.execute(query + " ORDER BY finished_at, attempt", params).fetchall()
        return [dict(zip(cols, r)) for r in rows]
