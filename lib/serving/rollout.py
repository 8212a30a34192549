"""Rollout: after a promotion, the new champion is pushed to the engine that serves it, and
lineage records what went live where and when, or why not.

- `serve.rollout.kind` picks how (`RolloutConfig`):
  - `none`: nobody is told; recorded as skipped. `consolidate serve` needs nothing: it follows
    the champion alias on its own.
  - `command`: the user's command line (a restart, a `kubectl rollout`, a copy to a model store)
    with `{path}` / `{version}` replaced by the champion's folder and id (the folder appended when
    neither is written), run without a shell; exit status 0 means live.
  - `sglang`: `POST <url>/update_weights_from_disk {"model_path": <folder>}`; SGLang (and
    `consolidate serve`) answer `{"success": true, ...}` once the weights are loaded.
  - `vllm`: `POST /sleep?level=2` (weights and KV cache dropped), `POST /wake_up?tags=weights`,
    `POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": <folder>}}`,
    `POST /wake_up?tags=kv_cache`. Needs `vllm serve --enable-sleep-mode` with
    `VLLM_SERVER_DEV_MODE=1`. Reload from disk has open bugs (stale weights after wake-up,
    `reload_weights` arguments that differ between releases): a restart `command` is the safe choice.
- `roll_out(lineage, version, cfg)` makes one attempt and records it (`Lineage.record_rollout`:
  live | failed | skipped, the engine's answer or the error); a failure raises `RolloutError`
  after it is recorded, so the caller (the Prefect task) retries it. Nothing here touches the
  aliases: a failed push never undoes the promotion, it leaves the champion "promoted, not live".
- `live_status(lineage)`: per version, where it is live or why not, for `lineage ls` and the UI;
  `live_version(lineage)`: the version the engine serves now, as far as lineage knows (the last
  successful push; the champion when pushes are off), which the capture proxy stamps on records.

Trade-off: the push is synchronous and the engine's own answer is the proof (no test request is
sent after it): an SGLang reload of a 7B model takes ~10-30 s, well inside `timeout_s`, and a
second request would only show that some model answers, not which weights.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any
import httpx

from lib.registry.lineage import Lineage
from lib.registry.records import now

log = logging.getLogger(__name__)

OUTPUT_TAIL = 2000  # characters of a command's output or an engine's answer kept in lineage


class RolloutError(RuntimeError):
    """A push failed (recorded in lineage before this is raised); the promotion stands."""


def target_of(cfg: Any) -> str | None:
    """Where a push goes, as lineage records it: the engine URL, or the command line."""
    return cfg.command if cfg.kind == "command" else (cfg.url if cfg.kind in ("sglang", "vllm") else None)


def command_line(template: str, path: str, version: str) -> list[str]:
    """The user's command with {path} and {version} replaced (the path appended when neither is used)."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise RolloutError(f"serve.rollout.command cannot be split into arguments ({exc}): {template!r}") from None
    if not argv:
        raise RolloutError("serve.rollout.command is empty: set the command that restarts your engine with the new champion")
    if "{path}" not in template and "{version}" not in template:
        argv.append(path)
    return [a.replace("{path}", path).replace("{version}", version) for a in argv]


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL else "..." + text[-OUTPUT_TAIL:]


def run_command(cfg: Any, path: str, version: str) -> str:
    argv = command_line(cfg.command or "", path, version)
    env = {**os.environ, "CONSOLIDATE_CHAMPION_PATH": path, "CONSOLIDATE_CHAMPION_VERSION": version}
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=cfg.timeout_s, errors="replace")
    except FileNotFoundError:
        raise RolloutError(f"serve.rollout.command: {argv[0]!r} not found; give the full path of the program") from None
    except subprocess.TimeoutExpired:
        raise RolloutError(f"serve.rollout.command ran longer than serve.rollout.timeout_s={cfg.timeout_s:g} s and was killed: {shlex.join(argv)}") from None
    output = _tail((out.stdout or "") + (out.stderr or ""))
    if out.returncode != 0:
        raise RolloutError(f"command exited with status {out.returncode}: {shlex.join(argv)}" + (f"\n{output}" if output else ""))
    return f"command exited 0: {shlex.join(argv)}" + (f"\n{output}" if output else "")


def _post(client: Any, url: str, **kwargs: Any) -> Any:
    try:
        response = client.post(url, **kwargs)
    except httpx.HTTPError as exc:
        raise RolloutError(f"POST {url} failed: {type(exc).__name__}: {exc}; is the engine running at serve.rollout.url?") from None
    if response.status_code >= 400:
        raise RolloutError(f"POST {url} answered {response.status_code}: {_tail(response.text)}")
    return response


def _client(cfg: Any) -> Any:
    headers = {"Authorization": f"Bearer {cfg.token.get_secret_value()}"} if cfg.token is not None else {}
    return httpx.Client(headers=headers, timeout=cfg.timeout_s, trust_env=False)


def _base(cfg: Any) -> str:
    if not cfg.url:
        raise RolloutError(f"serve.rollout.kind={cfg.kind} needs serve.rollout.url, the engine's base URL (e.g. http://127.0.0.1:30000)")
    url = cfg.url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def push_sglang(cfg: Any, path: str) -> str:
    with _client(cfg) as client:
        response = _post(client, f"{_base(cfg)}/update_weights_from_disk", json={"model_path": path})
    try:
        body = response.json()
    except ValueError:
        raise RolloutError(f"update_weights_from_disk answered {response.status_code} with no JSON: {_tail(response.text)}") from None
    if not body.get("success", False):
        raise RolloutError(f"update_weights_from_disk refused {path}: {body.get('message') or body}")
    return str(body.get("message") or "weights updated")


def push_vllm(cfg: Any, path: str) -> str:
    base = _base(cfg)
    with _client(cfg) as client:
        _post(client, f"{base}/sleep", params={"level": 2})
        try:
            _post(client, f"{base}/wake_up", params={"tags": "weights"})
            response = _post(client, f"{base}/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": path}})
        finally:  # never leave the engine asleep, whatever the reload did
            _post(client, f"{base}/wake_up", params={"tags": "kv_cache"})
    return f"vllm reload_weights from {path}: {_tail(response.text)}"


def push(cfg: Any, path: str, version: str) -> str:
    """One push of the folder `path` (version `version`) by `cfg.kind`; returns what the engine said."""
    if cfg.kind == "command":
        return run_command(cfg, path, version)
    if cfg.kind == "sglang":
        return push_sglang(cfg, path)
    if cfg.kind == "vllm":
        return push_vllm(cfg, path)
    raise ValueError(f"serve.rollout.kind={cfg.kind!r}: nothing to push")


def roll_out(lineage: Lineage, version: str, cfg: Any, run_id: str | None = None, attempt: int = 1) -> dict[str, Any]:
    """Push `version` (which must still be the champion) to the serving engine and record the
    attempt in lineage. Returns {version, kind, target, status, detail}; a failure is recorded,
    then raised as RolloutError (retry it; the promotion stands)."""
    started = now()
    target = target_of(cfg)
    champion = lineage.alias("champion")

    def record(status: str, detail: str) -> dict[str, Any]:
        lineage.record_rollout(version, cfg.kind, target, status, detail, attempt, run_id, started)
        return {"version": version, "kind": cfg.kind, "target": target, "status": status, "detail": detail, "attempt": attempt}

    if cfg.kind == "none":
        return record("skipped", "serve.rollout.kind=none (the engine is not told)")
    if champion != version:
        return record("skipped", f"{version} is no longer the champion ({champion} is): not pushed")
    row = lineage.get_version(version)
    path = str(Path(row["path"]).resolve())
    try:
        detail = push(cfg, path, version)
    except Exception as exc:  # recorded whatever it was, then raised for the retry
        record("failed", f"{type(exc).__name__}: {exc}" if not isinstance(exc, RolloutError) else str(exc))
        log.error("rollout of %s to %s (%s) failed, attempt %d: %s", version, target, cfg.kind, attempt, exc)
        if isinstance(exc, RolloutError):
            raise
        raise RolloutError(f"{type(exc).__name__}: {exc}") from exc
    log.info("rollout: %s is live on %s (%s)", version, target, cfg.kind)
    return record("live", detail)


def live_version(lineage: Lineage) -> str | None:
    """The version the serving engine runs now, as lineage knows it: the version of the last
    successful push; the champion when the last record is a skip (pushes off) or none exists."""
    rows = lineage.rollouts()
    if rows and rows[-1]["status"] != "skipped":
        live = [r for r in rows if r["status"] == "live"]
        if live:
            return live[-1]["version"]
    return lineage.alias("champion")


def live_status(lineage: Lineage) -> dict[str, str]:
    """Per version with a rollout record: 'live on <target> since <time>', 'promoted, not live:
    <why>' or 'not pushed: <why>', from its last attempt."""
    last: dict[str, dict[str, Any]] = {}
    for row in lineage.rollouts():
        last[row["version"]] = row
    out = {}
    for version, row in last.items():
        when = str(row["finished_at"])[:19]
        where = row["target"] or row["kind"]
        if row["status"] == "live":
            out[version] = f"live on {where} since {when}"
        elif row["status"] == "failed":
            reason = (row["detail"] or "").splitlines()[0] if row["detail"] else "unknown"
            out[version] = f"promoted, not live: {reason} (attempt {row['attempt']}, {when})"
        else:
            out[version] = f"not pushed: {row['detail']}"
    return out
