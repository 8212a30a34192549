"""After the gate: the new champion pushed to the engine that serves it (`serve.rollout`).

- `rollout_champion`: one attempt of lib.serving.rollout.roll_out, recorded in lineage (live,
  failed with why, skipped); a failed push raises, and Prefect retries it `serve.rollout.retries`
  times, `serve.rollout.retry_delay_s` apart. Each attempt publishes the "rollout" markdown
  artifact: "live on <target>" or "promoted, NOT live: <why>".
- `roll_out_after_promotion`: what the flow calls. It runs the task with its retries and never
  lets a failed push fail the night: the promotion stands, the result says "promoted, not live",
  and `consolidate lineage ls` shows the same from lineage.

Trade-off: the push runs after the storage step, so the champion's folder is a plain Hugging Face
folder when the engine reads it; the night's version is live ~the engine's load time (SGLang:
seconds) after the night ends, not before the storage policy (a minute or less) has run.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from lib.config import ConsolidationConfig
from lib.workspace import Workspace
from tasks.reporting import own_time, publish_markdown, stage_logger
from lib.registry.lineage import Lineage
from lib.serving.rollout import RolloutError, roll_out


def _attempt_number() -> int:
    ctx = TaskRunContext.get()
    return max(1, ctx.task_run.run_count) if ctx is not None else 1


@task(name="rollout", cache_policy=NO_CACHE, retries=0)
def rollout_champion(cfg: ConsolidationConfig, version: str, run_id: str | None) -> dict[str, Any]:
    """Push `version` (the champion) to the serving engine once; a failure raises for the retry."""
    rollout = cfg.serve.rollout
    attempt = _attempt_number()
    lineage = Lineage(Workspace(cfg.workspace.root).lineage_db)
    try:
        with own_time():
            out = roll_out(lineage, version, rollout, run_id=run_id, attempt=attempt)
    except RolloutError as exc:
        publish_markdown("rollout", f"## {version}: promoted, NOT live\n\n{rollout.kind} push to `{rollout.url or rollout.command}`, "
                                    f"attempt {attempt} of {rollout.retries + 1}, failed:\n\n```\n{exc}\n```",
                         f"{version} is the champion, but the serving engine was not updated")
        stage_logger().error("rollout of %s, attempt %d of %d: %s", version, attempt, rollout.retries + 1, exc)
        raise
    publish_markdown("rollout", f"## {version}: {out['status']}\n\n{out['kind']} `{out['target'] or ''}`: {out['detail']}",
                     f"What the serving engine runs after the night: {version} {out['status']}")
    stage_logger().info("rollout of %s: %s (%s)", version, out["status"], out["detail"].splitlines()[0] if out["detail"] else "")
    return out


def roll_out_after_promotion(cfg: ConsolidationConfig, version: str, run_id: str | None) -> dict[str, Any]:
    """The rollout task with `serve.rollout`'s retries; a final failure is reported, not raised."""
    rollout = cfg.serve.rollout
    task_ = rollout_champion.with_options(retries=rollout.retries, retry_delay_seconds=rollout.retry_delay_s)
    state = task_(cfg, version, run_id, return_state=True)
    if state.is_completed():
        return state.result()
    try:
        state.result()  # the last attempt's error, for the message
        reason = state.message or "failed"
    except Exception as exc:
        reason = str(exc)
    stage_logger().warning("%s is promoted, not live: %s", version, reason)
    return {"version": version, "kind": rollout.kind, "status": "promoted, not live", "detail": reason, "attempts": rollout.retries + 1}
