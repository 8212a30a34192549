"""Knowledge injection as a Prefect task: lib.knowledge.inject around the run folder, its counts
published as an artifact."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from lib.config import ConsolidationConfig
from lib.workspace import Workspace
from tasks.reporting import own_time, publish_table, stage_logger
from lib.knowledge.inject import earlier_facts, inject_knowledge


@task(name="inject-knowledge", cache_policy=NO_CACHE)
def inject_knowledge_task(cfg: ConsolidationConfig, run_dir: str, champion_dir: str | None = None) -> dict[str, Any]:
    """Tonight's fact set and augmented forms (lib.knowledge.inject.inject_knowledge)."""
    ws = Workspace(cfg.workspace.root)
    with own_time():
        stats = inject_knowledge(run_dir, cfg.knowledge, cfg.sampling, earlier_facts(ws.runs, exclude=run_dir), champion_dir,
                                 memory=ws.memory)
    stage_logger().info("knowledge: %d facts from %d documents (%d held out), %d augmented texts %s in %.2f s",
                        stats["facts"], stats["documents"], stats["heldout_documents"], stats["augmented"], stats["forms"],
                        stats["seconds"])
    publish_table("knowledge-injection", {k: v for k, v in stats.items() if not isinstance(v, dict)},
                  "Knowledge injection: fact items and augmented forms of tonight's documents")
    return stats
