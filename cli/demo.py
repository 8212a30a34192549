"""`consolidate demo`: the whole story on the embedded default (CPU, no downloads, no server).

Stage 1: make sure the stdlib corpus and the demo buffer exist and print their
statistics (`lib.data.corpus.ensure_embedded_default`, `show_embedded`). Stage 2: the story itself,
`flows.demo.demo_story` on the Prefect ephemeral API: bootstrap v0 if there is no champion, one
night → v1, evaluation before/after, gate, lineage, and `<workspace>/demo.png`; then the retention
matrix (lib/evaluation/retention.py) as a table and as a heat map, `<workspace>/retention.png`; then the
facts no model can know (the demo buffer's fictional towns, lib/data/fiction.py): how many of their
closed-book questions v0 and v1 answer, against chance, and the night's own fact probes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.common import ConfigOpt, JsonOpt, SetOpt, WorkspaceOpt, resolve_config


def show_embedded(console, stats: dict) -> None:
    """Readable tables of what `ensure_embedded_default` found or built."""
    from lib.tables import corpus_table, demo_buffer_table, fields_table

    corpus = stats["corpus"]
    verb = "built" if stats["corpus_built"] else "already there"
    console.print(corpus_table(corpus, f"original corpus '{corpus['name']}' ({verb})").rich())
    if stats["demo_buffer"] is not None:
        console.print(demo_buffer_table(stats["demo_buffer"], "demo buffer (built)").rich())
    buf = stats["buffer"]
    console.print(fields_table("buffer", [
        ("parquet files", f"{buf['files']:,}"), ("records", f"{buf['records']:,}"), ("bytes on disk", f"{buf['bytes']:,}"),
        ("pending in write-ahead logs", f"{buf['pending_log']:,}")]).rich())


def _stored(path: str | None) -> str:
    """The lineage table's `stored` cell: full, "delta, 41% of full", missing (folder gone) or
    unreadable (a damaged delta.json)."""
    from lib.checkpoints.checkpoint import storage_info

    if not path or not Path(path).exists():
        return "missing"
    try:
        info = storage_info(path)
    except (OSError, ValueError, KeyError):  # CheckpointError is a ValueError
        return "unreadable"
    return f"delta, {info['ratio']:.0%} of full" if info["storage"] == "delta" else "full"


def show_story(console, ws, story: dict, retention=None) -> None:
    """The night in three tables (before/after, gate, lineage), the retention matrix (a
    lib.evaluation.retention.RetentionMatrix) when given, and where to look."""
    from rich.table import Table

    from lib.registry.lineage import Lineage
    from lib.tables import bpb_table, gate_table

    night = story["night"]
    console.print(f"[bold]bootstrap[/bold]: {story['bootstrap']['status']} (champion {story['bootstrap'].get('version')})")
    console.print(f"[bold]night {night['run_id']}[/bold]: {night.get('status')}")
    if night.get("eval"):
        console.print(bpb_table(night["eval"], night["parent"], night["version"],
                                f"bits per byte, {night['parent']} (before) -> {night['version']} (after)", metric_column=False).rich())
    if night.get("gate"):
        gate = night["gate"]
        console.print(gate_table(gate, f"gate on {gate['version']}: {gate['status']}").rich())
    lin = Lineage(ws.lineage_db)
    t = Table(title="lineage")
    for col in ("version", "parent", "status", "aliases", "stored", "run"):
        t.add_column(col)
    for v in lin.versions():
        t.add_row(v["version"], str(v["parent"]), v["status"], ",".join(v.get("aliases", [])), _stored(v.get("path")),
                  str(v.get("run_id")))
    console.print(t)
    timings = night.get("timings", {})
    # two decimals: most data stages of the demo take well under a second (whole seconds printed 0)
    console.print("stage seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
    if retention is not None:
        from cli.lineage import retention_table

        console.print(retention_table(retention, "retention: each version on old_val, each night's held-out set and its facts"))
    retention_png = (story.get("retention") or {}).get("png")
    console.print(f"\n[bold]where to look[/bold]\n  plot:       {story['figures'].get('png', '(no new version)')}"
                  + (f"\n  retention:  {retention_png} (consolidate lineage retention --workspace {ws.root})" if retention_png else "")
                  + f"\n  workspace:  {ws.root}\n  lineage:    consolidate lineage ls --workspace {ws.root}"
                  f"\n  run folder: {ws.run(night['run_id']).path}")


def demo_retention(ws, night: dict):
    """The retention matrix up to the night's candidate (lib/evaluation/retention.py), drawn as a heat map
    into `<workspace>/retention.png`: old_val and each remembered night's held-out set, every
    version against the one that learnt it."""
    from lib.evaluation.demo_plot import plot_retention
    from lib.registry.lineage import Lineage
    from lib.evaluation.retention import retention_matrix

    matrix = retention_matrix(Lineage(ws.lineage_db), candidate=night.get("version"), workspace=ws)
    png = plot_retention(matrix, ws.root / "retention.png")
    return matrix, png


def demo_facts(ws, cfg, night: dict) -> dict | None:
    """The fictional towns' questions (`<ws>/demo/facts.jsonl`) asked of the night's parent and
    its new version, and the night's own fact probes (facts:new) from lineage; None when the
    workspace has no such questions (its buffer was not built by the demo) or no new version."""
    from lib.data.corpus import demo_facts_file
    from lib.evaluation.evaluate import eval_window
    from lib.evaluation.fact_recall import ask_versions
    from lib.knowledge.facts import read_facts
    from lib.registry.lineage import Lineage

    path, parent, version = demo_facts_file(ws), night.get("parent"), night.get("version")
    if not path.is_file() or not parent or not version:
        return None
    items = read_facts(path)
    lin = Lineage(ws.lineage_db)
    scores = ask_versions(lin, [parent, version], items, window=eval_window(cfg), separator=cfg.tokenizer.document_separator,
                          batch_size=cfg.eval.fact_batch_size, cache_dir=ws.eval_cache)
    out = {"file": str(path), "n": len(items), "chance": scores[version]["chance"],
           "versions": {v: {"answered": sum(r["correct"] for r in s["items"]), "accuracy": s["accuracy"],
                            "exact_match": s["exact_match"], "mean_rank": s["mean_rank"]} for v, s in scores.items()}}
    tonight = {v: lin.metrics(v, night["run_id"]).get("facts:new") for v in (parent, version)}
    if all(tonight.values()):
        out["night"] = tonight
    return out


def show_facts(console, facts: dict, parent: str, version: str) -> None:
    """What the demo says about facts: honest whether the night taught them or not."""
    n, chance = facts["n"], facts["chance"]
    before, after = facts["versions"][parent], facts["versions"][version]
    console.print(f"\n[bold]facts no model can know[/bold]: {n} closed-book questions about the buffer's fictional towns, "
                  f"in a phrasing the night did not train on ({facts['file']})")
    for label, v, s in (("before", parent, before), ("after", version, after)):
        console.print(f"  {v} ({label}): {s['answered']} of {n} answered ({s['accuracy']:.1%}), mean rank {s['mean_rank']:.1f}, "
                      f"greedy exact {s['exact_match']:.1%}")
    console.print(f"  chance: {chance:.1%} (the answer among {round(1 / chance) if chance else '?'} options)")
    gained = after["answered"] - before["answered"]
    if after["accuracy"] <= chance + 1.5 / n or gained <= 1:
        console.print(f"  {version} does not answer them better than chance yet: the night lowered bits per byte on the new "
                      f"text without making these facts retrievable from a question.")
    else:
        console.print(f"  {version} answers {gained} more of them than {parent}, {after['accuracy'] / chance:.1f}x chance.")
    night = facts.get("night")
    if night and night[version].get("fact_n"):
        p, c = night[parent], night[version]
        console.print(f"  the night's own fact probes (extracted from all its documents, {int(c['fact_n'])} asked): "
                      f"{p['fact_accuracy']:.1%} -> {c['fact_accuracy']:.1%}, chance {c['fact_chance']:.1%}")
    elif night:
        console.print("  the night's documents gave no fact probes (facts:new holds none)")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        config: ConfigOpt = None,
        preset: Annotated[str, typer.Option("--preset", help="Base preset (tiny: sized for a 2-core CPU).")] = "tiny",
        set_: SetOpt = None,
        workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Run the story on the embedded default: corpus and demo buffer (built once), then stats."""
        from rich.console import Console

        from lib.data.corpus import ensure_embedded_default

        from cli.run import flow_session, prefect_environment

        prefect_environment(resolve_config(config, preset, set_, workspace)[1])  # before prefect is imported
        from flows.demo import DEMO_SETTINGS

        # the demo's trimmed pre-training first, so a user's --set wins
        cfg, ws = resolve_config(config, preset, DEMO_SETTINGS + list(set_ or []), workspace)
        console = Console()
        if not json_:
            console.print(f"[bold]workspace[/bold] {ws.root}")
        stats = ensure_embedded_default(ws, cfg)
        if not json_:
            show_embedded(console, stats)
        with flow_session(ws):
            from flows.demo import demo_story

            story = demo_story(cfg)
        matrix, png = demo_retention(ws, story["night"])
        story["retention"] = {**matrix.to_dict(), "png": str(png)}
        story["facts"] = demo_facts(ws, cfg, story["night"])
        if json_:
            typer.echo(json.dumps({"embedded": stats, **story}, indent=2, default=str))
        else:
            show_story(console, ws, story, matrix)
            if story["facts"]:
                show_facts(console, story["facts"], story["night"]["parent"], story["night"]["version"])
