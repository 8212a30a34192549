"""Curation: public dedup API, ingest of bad input, incremental dedup against earlier nights,
determinism, length filter, real fastText language ID and a locally trained quality model."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import stdlib_texts, settled_task_states

pytest_plugins = ["prefect_fixtures"]
from lib.buffer.store import Buffer
from lib.config import load_config
from lib.curation.pipeline import commit_index, curate
from lib.curation.dedup import exact_duplicate_clusters, near_duplicate_clusters
from lib.curation.fasttext_filters import identify_languages, quality_scores, train_quality_model
from lib.registry.lineage import Lineage
from lib.curation.textfilters import Doc, length_filter

PROSE = [
    f"Note {i}: the consolidation pipeline met a new fact today. The {w} reactor in building {i} runs "
    f"on a closed loop of {w} coolant, and its operators log every change in a shared notebook."
    for i, w in enumerate(["helium", "argon", "neon", "xenon", "krypton", "radon", "oxygen", "nitrogen"])
]


def _cfg(ws, *extra):
    return load_config(preset="tiny", overrides=[f"workspace.root={ws.root}", *extra])


def _add(ws, texts):
    buf = Buffer(ws.buffers)
    for t in texts:
        buf.add(t)
    buf.close()


def _kept(run):
    return [row for part in sorted(run.curated.glob("part-*.parquet")) for row in pq.read_table(part).to_pylist()]


def test_exact_api_points_at_the_earliest_copy():
    texts = ["Alpha  beta", "gamma", "alpha BETA", "Gamma", "delta"]
    assert exact_duplicate_clusters(texts).tolist() == [0, 1, 0, 1, 4]


def test_near_api_finds_edited_copies_and_is_deterministic():
    docs = stdlib_texts(40, min_chars=2000)
    edited = [d.replace("return", "return ", 1) + "\n# one extra comment line" for d in docs[:8]]
    texts = docs + edited
    rep = near_duplicate_clusters(texts, workers=1)
    n = len(docs)
    assert all(rep[n + k] == k for k in range(8))  # each edited copy points at its original
    assert all(rep[k] == k for k in range(n))  # originals are kept
    assert (near_duplicate_clusters(texts, workers=2) == rep).all()  # processes change nothing


def test_ingest_quarantines_bad_files_and_rows(workspace):
    ws = workspace
    _add(ws, PROSE[:3])
    (ws.buffers / "buffer_corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    pq.write_table(pa.table({"content": ["no text column"]}), ws.buffers / "buffer_noschema.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3]}), ws.buffers / "buffer_ints.parquet")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), ws.buffers / "buffer_empty.parquet")
    pq.write_table(pa.table({"text": [PROSE[4], None, "   ", PROSE[5]]}), ws.buffers / "buffer_nulls.parquet")
    stats = curate(ws, _cfg(ws), ws.run("n1").ensure())
    assert stats["ingest"]["files_quarantined"] == 4
    assert stats["ingest"]["rows_quarantined"] == 2
    for name in ("corrupt", "noschema", "ints", "empty"):
        assert not (ws.buffers / f"buffer_{name}.parquet").exists()
        reason = json.loads((ws.quarantine / f"buffer_{name}.parquet.reason.json").read_text())
        assert reason["reason"]
    assert "no `text` column" in json.loads((ws.quarantine / "buffer_noschema.parquet.reason.json").read_text())["reason"]
    assert "expected string" in json.loads((ws.quarantine / "buffer_ints.parquet.reason.json").read_text())["reason"]
    [bad_rows] = ws.quarantine.glob("buffer_nulls.*.bad-rows.parquet")  # named by content: written once
    assert pq.read_table(bad_rows).num_rows == 2
    texts = {r["text"] for r in _kept(ws.run("n1"))}
    assert texts == set(PROSE[:3]) | {PROSE[4], PROSE[5]}
    statuses = sorted(b.status for b in Lineage(ws.lineage_db).buffer_files())
    assert statuses == ["pending", "pending"] + ["quarantined"] * 4


def test_same_content_is_never_ingested_twice_and_pending_is_reused(workspace):
    ws = workspace
    _add(ws, PROSE[:4])
    first = curate(ws, _cfg(ws), ws.run("n1").ensure())
    # the night was not promoted: the file stays pending and is used again
    again = curate(ws, _cfg(ws), ws.run("n2").ensure())
    assert again["buffer_hashes"] == first["buffer_hashes"] and again["docs_out"] == first["docs_out"] == 4
    Lineage(ws.lineage_db).mark_consumed(first["buffer_hashes"], "v1")
    # a copy of the consumed file under another name is skipped by its content hash
    src = next(ws.buffers.glob("*.parquet"))
    (ws.buffers / "buffer_copy.parquet").write_bytes(src.read_bytes())
    third = curate(ws, _cfg(ws), ws.run("n3").ensure())
    assert third["ingest"]["files_already_consumed"] == 2 and third["docs_out"] == 0


def test_incremental_dedup_against_an_earlier_promoted_night(workspace):
    ws = workspace
    _add(ws, PROSE[:4])
    night1 = ws.run("n1").ensure()
    s1 = curate(ws, _cfg(ws), night1)
    Lineage(ws.lineage_db).mark_consumed(s1["buffer_hashes"], "v1")
    assert commit_index(ws, night1) is True and commit_index(ws, night1) is False
    near_copy = PROSE[1] + " Logged."
    _add(ws, [PROSE[0].upper(), near_copy, PROSE[6]])
    s2 = curate(ws, _cfg(ws), ws.run("n2").ensure())
    assert s2["exact"]["dropped_against_history"] == 1
    assert s2["near"]["dropped_against_history"] == 1
    assert [r["text"] for r in _kept(ws.run("n2"))] == [PROSE[6]]


def test_uncommitted_night_does_not_poison_the_next(workspace):
    ws = workspace
    _add(ws, PROSE[:2])
    s1 = curate(ws, _cfg(ws), ws.run("n1").ensure())  # rejected night: no commit_index
    Lineage(ws.lineage_db).mark_consumed(s1["buffer_hashes"], "v-test")
    _add(ws, [PROSE[0]])
    assert curate(ws, _cfg(ws), ws.run("n2").ensure())["docs_out"] == 1


def test_determinism_same_input_same_survivors(tmp_path):
    from lib.workspace import Workspace

    outs = []
    for k in range(2):
        ws = Workspace(tmp_path / f"ws{k}").ensure()
        pq.write_table(pa.table({"id": [f"d{i}" for i in range(12)], "text": PROSE + PROSE[:4]}), ws.buffers / "buffer_x.parquet")
        curate(ws, _cfg(ws), ws.run("n").ensure())
        outs.append([(r["id"], r["text"]) for r in _kept(ws.run("n"))])
    assert outs[0] == outs[1]
    assert [i for i, _ in outs[0]] == [f"d{i}" for i in range(8)]  # the earliest copy survives


def test_survivors_do_not_depend_on_the_number_of_shards(tmp_path):
    """Five buffer files with exact and near copies across files and one corrupt file: curated in
    1, 2 and 4 shards, the same documents survive, the same duplicates point at the same
    (earliest) originals, and the registry ends up the same."""
    from lib.workspace import Workspace

    near = [t.replace("shared notebook", "shared paper notebook") for t in PROSE]
    files = [PROSE[:3], [PROSE[1], near[2], PROSE[3], PROSE[6]], [near[0], PROSE[4], PROSE[6]], [PROSE[5], PROSE[3].upper(), near[4]]]
    outcomes = []
    for shards in (1, 2, 4):
        ws = Workspace(tmp_path / f"ws{shards}").ensure()
        for k, texts in enumerate(files):
            ids = [f"f{k}r{i}" for i in range(len(texts))]
            pq.write_table(pa.table({"id": ids, "text": texts}), ws.buffers / f"buffer_{k}.parquet")
        (ws.buffers / "buffer_9.parquet").write_bytes(b"PAR1 torn")
        run = ws.run("n").ensure()
        stats = curate(ws, _cfg(ws, "curation.concatenate_short=false", "curation.min_chars=10"), run, shards=shards)
        assert stats["shards"] == shards and len(list(run.curated.glob("part-*.parquet"))) == shards
        dups = pq.read_table(run.path / "curation" / "duplicates.parquet").to_pylist()
        registry = sorted((b.content_hash, b.status) for b in Lineage(ws.lineage_db).buffer_files())
        outcomes.append((sorted(r["id"] for r in _kept(run)),
                         sorted((d["id"], d["duplicate_of"], d["kind"]) for d in dups),
                         registry, stats["docs_in"], stats["docs_out"], stats["ingest"]["files_quarantined"]))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    kept, dups, registry, docs_in, docs_out, quarantined = outcomes[0]
    assert kept == ["f0r0", "f0r1", "f0r2", "f1r2", "f1r3", "f2r1", "f3r0"]
    assert {(d, o) for d, o, kind in dups if kind == "exact"} == {("f1r0", "f0r1"), ("f3r1", "f1r2"), ("f2r2", "f1r3")}
    assert {(d, o) for d, o, kind in dups if kind == "near"} == {("f1r1", "f0r2"), ("f2r0", "f0r0"), ("f3r2", "f2r1")}
    assert [s for _, s in registry].count("quarantined") == 1 and [s for _, s in registry].count("pending") == 4
    assert (docs_in, docs_out, quarantined) == (13, 7, 1)


def test_a_50_mb_document_is_split_not_fatal(workspace):
    ws = workspace
    line = "The archive keeps a very long ledger of every shipment that ever left the northern harbour.\n"
    big = line * (50_000_000 // len(line))
    pq.write_table(pa.table({"text": [big, PROSE[2]]}), ws.buffers / "buffer_big.parquet")
    # within buffer.max_text_bytes (over it, the row is set aside: tests/test_buffer_rule.py)
    stats = curate(ws, _cfg(ws, "curation.max_chars=100000", "buffer.max_text_bytes=60000000"), ws.run("n").ensure())
    assert stats["length"]["split_long"] == 1
    assert stats["docs_out"] >= 2


def test_length_filter_concatenates_short_documents():
    docs = [Doc(f"s{i}", "x" * 20, [f"s{i}"]) for i in range(5)] + [Doc("long", "y\n" * 300, ["long"]), Doc("ok", "z" * 100, ["ok"])]
    out, counts = length_filter(docs, min_chars=48, max_chars=200, long_docs="split")
    assert counts["concatenated_groups"] >= 1 and counts["split_long"] == 1
    concat = [d for d in out if d.id.startswith("concat:")]
    assert concat[0].source_ids == ["s0", "s1", "s2"]
    assert all(48 <= len(d.text) <= 200 for d in out)
    dropped, c2 = length_filter(docs, 48, 200, long_docs="drop", concatenate_short=False)
    assert c2["dropped_too_short"] == 5 and c2["dropped_too_long"] == 1 and [d.id for d in dropped] == ["ok"]
    with pytest.raises(ValueError, match="min_chars"):
        length_filter(docs, 500, 200)


def test_real_language_id_and_filter(workspace):
    langs, scores = identify_languages([PROSE[0], "Der Speicher des Modells wird jede Nacht in die Gewichte geschrieben und geprüft."])
    assert langs == ["en", "de"] and min(scores) > 0.65
    ws = workspace
    _add(ws, [PROSE[0], "Der Speicher des Modells wird jede Nacht in die Gewichte geschrieben und danach geprüft."])
    stats = curate(ws, _cfg(ws), ws.run("n").ensure())
    kept = _kept(ws.run("n"))
    assert [r["lang"] for r in kept] == ["en"] and stats["language"]["dropped"] == 1
    assert kept[0]["lang_score"] > 0.65 and kept[0]["quality_score"] is None


def test_code_is_kept_and_other_languages_dropped_with_reasons(workspace, caplog):
    """A night of English prose, real Python sources (lid.176 calls them anything but en), German
    prose and a buffer file whose `kind` column declares German-commented code: code keeps the
    code rule, German prose still goes, every drop has its reason in stats.json and in the
    shard's dropped list, and the language filter's share above max_drop_share is a warning.
    The same night with the rules of before (no kinds, language ID on whole texts) loses code."""
    from lib.curation.textfilters import detect_kinds, line_features

    ws = workspace
    sources = stdlib_texts(8, min_chars=2000)
    code = [t for t, k in zip(sources, detect_kinds(line_features(sources))) if k == "code"][:3]
    german = ["Der Speicher des Modells wird jede Nacht in die Gewichte geschrieben und danach gründlich geprüft. " * 3,
              "Am nächsten Morgen beantwortet der Server die Fragen der Nutzer mit der neuen Version des Modells. " * 3]
    _add(ws, PROSE[:2] + code + german)
    declared = "# Die Gewichte werden jede Nacht geprüft und gespeichert\nfor step in range(10):\n    weights = load(step)\n"
    pq.write_table(pa.table({"id": ["decl"], "text": [declared], "kind": ["code"]}), ws.buffers / "buffer_z_declared.parquet")
    with caplog.at_level("WARNING", logger="lib.curation.pipeline"):
        stats = curate(ws, _cfg(ws, "curation.max_drop_share=0.2", "curation.max_chars=100000"), ws.run("n").ensure())
    kept = _kept(ws.run("n"))
    by_kind = {k: [r for r in kept if r["kind"] == k] for k in ("code", "prose")}
    assert len(by_kind["code"]) == 4 and all(r["lang"] is None for r in by_kind["code"])  # 3 sources + the declared one
    assert [r["lang"] for r in by_kind["prose"]] == ["en", "en"]
    assert "decl" in {s for r in by_kind["code"] for s in r["source_ids"]}
    assert stats["dropped_by_reason"] == {"language": 2} and stats["kinds"] == {"prose": 4, "code": 4, "declared": 1}
    dropped = pq.read_table(ws.run("n").path / "curation" / "shards" / "dropped-00000.parquet").to_pylist()
    assert sorted(r["reason"] for r in dropped) == ["language", "language"] and {r["kind"] for r in dropped} == {"prose"}
    assert len(stats["warnings"]) == 1 and stats["warnings"][0].startswith("the language filter dropped 2 of the 4")
    assert "language filter dropped" in caplog.text
    before = curate(ws, _cfg(ws, "curation.detect_kinds=false", "curation.language_min_prose_chars=1000000000",
                             "curation.max_chars=100000"), ws.run("before").ensure())
    assert before["dropped_by_reason"]["language"] > 2  # Python sources go with the German prose


def test_quality_classifier_round_trip(tmp_path):
    good = [p + " It is documented carefully." for p in PROSE] * 3
    bad = [f"buy cheap pills {i} click here now free free free win money casino" for i in range(24)]
    model = train_quality_model(good, bad, tmp_path / "quality.bin")
    scores = quality_scores([PROSE[3], "free casino pills click here win money now"], model)
    assert scores[0] > 0.5 > scores[1]
    with pytest.raises(FileNotFoundError, match="consolidate quality train"):
        quality_scores(["x"], tmp_path / "missing.bin")


def test_cli_dedup_curate_and_quality(tmp_path, workspace):
    from typer.testing import CliRunner

    from cli.main import app

    runner = CliRunner()
    src = tmp_path / "docs.jsonl"
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(PROSE)] + [{"id": "copy", "text": PROSE[2].upper()},
                                                                        {"id": "near", "text": PROSE[3] + " Logged."}]
    src.write_text("\n".join(json.dumps(r) for r in rows))
    res = runner.invoke(app, ["dedup", str(src), "--out", str(tmp_path / "out"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    dups = {r["id"]: r for r in pq.read_table(tmp_path / "out" / "duplicates.parquet").to_pylist()}
    assert dups["copy"]["duplicate_of"] == "d2" and dups["copy"]["kind"] == "exact"
    assert dups["near"]["duplicate_of"] == "d3" and dups["near"]["kind"] == "near" and dups["near"]["jaccard"] >= 0.8
    assert pq.read_table(tmp_path / "out" / "kept.parquet").num_rows == len(PROSE)
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["near_duplicates"] == 1
    bad = runner.invoke(app, ["dedup", str(src), "--out", str(tmp_path / "o2"), "--threshold", "1.5"])
    assert bad.exit_code != 0

    _add(workspace, PROSE[:3])
    res = runner.invoke(app, ["curate", "-w", str(workspace.root), "--preset", "tiny", "--run-id", "adhoc", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["docs_out"] == 3 and (workspace.run("adhoc").curated / "part-00000.parquet").exists()

    (tmp_path / "good.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in PROSE * 3))  # an example per line
    (tmp_path / "bad.jsonl").write_text("\n".join(json.dumps({"text": f"free casino pills click {i} win money"}) for i in range(24)))
    res = runner.invoke(app, ["quality", "train", "--positive", str(tmp_path / "good.jsonl"), "--negative",
                              str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "q.bin")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "q.bin").is_file()


# -- the step interface: one list, run here or as mapped tasks -------------------------------------
def _night_files(ws):
    """Four buffer files with exact and near copies across files, one German document, one torn file."""
    near = [t.replace("shared notebook", "shared paper notebook") for t in PROSE]
    german = "Der Speicher des Modells wird jede Nacht in die Gewichte geschrieben und danach gründlich geprüft."
    files = [PROSE[:3], [PROSE[1], near[2], PROSE[3], german], [near[0], PROSE[4], PROSE[6]], [PROSE[5], PROSE[3].upper()]]
    for k, texts in enumerate(files):
        pq.write_table(pa.table({"id": [f"f{k}r{i}" for i in range(len(texts))], "text": texts}), ws.buffers / f"buffer_{k}.parquet")
    (ws.buffers / "buffer_9.parquet").write_bytes(b"PAR1 torn")


def test_a_filter_drop_is_counted_as_dropped_reason(workspace):
    """Each step returns its Stats; a document a filter drops is counted as `dropped_<reason>`
    by the step that dropped it, and the night's stats.json lists it by reason."""
    from lib.curation.filters import LanguageFilter
    from lib.curation.pipeline import curation_steps, shard_count
    from lib.buffer.ingest import pending_buffer_files
    from lib.curation.steps import Stats, run_steps
    from lib.curation.textfilters import line_features

    cfg = _cfg(workspace, "curation.concatenate_short=false", "curation.min_chars=10")
    doc = Doc("g", "Der Speicher des Modells wird jede Nacht in die Gewichte geschrieben und danach geprüft.")
    doc.features = line_features([doc.text]).row(0, named=True)
    stats = Stats()
    assert LanguageFilter(stats, cfg.curation).reject(doc) == "language" and doc.lang == "de"
    assert stats.get("language.by_language.de") == 1

    _night_files(workspace)
    files, counts = pending_buffer_files(workspace, Lineage(workspace.lineage_db))
    assert counts["pending"] == 5 and all(f["content_hash"] for f in files)
    run = workspace.run("n").ensure()
    ingest, registry, dedup, filtered, report = run_steps(
        curation_steps(workspace), {"files": files, "already": {}}, run.path, shard_count(cfg, len(files)), cfg.curation)
    assert ingest.dropped() == {} and ingest.get("ingest.files_quarantined") == 1 and registry.get("registry.events") == 5
    assert dedup.dropped() == {"exact_duplicate": 2, "near_duplicate": 2}
    assert filtered.dropped() == {"language": 1} and filtered.get("language.dropped") == 1
    on_disk = json.loads((run.curated / "stats.json").read_text())
    assert on_disk["dropped_by_reason"] == {"exact_duplicate": 2, "near_duplicate": 2, "language": 1} == report.get("dropped_by_reason")
    assert not [k for k in on_disk if k.startswith("dropped_") and k != "dropped_by_reason"]


def test_the_same_steps_run_here_and_as_mapped_tasks_keep_the_same_survivors(tmp_path, prefect_client):
    """lib.curation.pipeline.curate (the local executor) and the curation flow (the same step list as
    mapped Prefect tasks) on the same buffer files, in 2 shards: the same survivors, duplicates,
    drops by reason and registry; the flow's second run is served from the cache."""
    from flows.curation import curate as curate_flow
    from lib.workspace import Workspace

    outcomes = []
    for how in ("local", "flow"):
        ws = Workspace(tmp_path / how).ensure()
        _night_files(ws)
        cfg = _cfg(ws, "curation.concatenate_short=false", "curation.min_chars=10", "curation.shards=2", "curation.workers=2")
        if how == "local":
            run = ws.run("n").ensure()
            stats = curate(ws, cfg, run)
        else:
            out = curate_flow(cfg)
            run, stats = ws.run(out["run_id"]), out["stats"]
        dups = pq.read_table(run.path / "curation" / "duplicates.parquet").to_pylist()
        outcomes.append((sorted(r["id"] for r in _kept(run)), sorted((d["id"], d["duplicate_of"], d["kind"]) for d in dups),
                         sorted(b.status for b in Lineage(ws.lineage_db).buffer_files()),
                         stats["shards"], stats["docs_in"], stats["docs_out"], stats["dropped_by_reason"]))
    assert outcomes[0] == outcomes[1]
    kept, _, registry, shards, docs_in, docs_out, dropped = outcomes[0]
    assert kept == ["f0r0", "f0r1", "f0r2", "f1r2", "f2r1", "f2r2", "f3r0"] and shards == 2
    assert registry == ["pending"] * 4 + ["quarantined"] and (docs_in, docs_out) == (12, 7)
    assert dropped == {"exact_duplicate": 2, "near_duplicate": 2, "language": 1}
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    state = curate_flow(cfg, return_state=True)
    again = state.result()
    assert again["stats"]["docs_out"] == 7 and sorted(r["id"] for r in _kept(ws.run(again["run_id"]))) == kept

    def read() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for tr in prefect_client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))):
            out.setdefault(tr.name.rsplit("-", 1)[0], []).append(tr.state.name if tr.state else "Pending")  # no state yet
        return out

    states = settled_task_states(read)
    # the torn file went to quarantine/ on the first run: the shard that held it reads other files
    # now and runs again; its documents are the same bytes, so every step after it is Cached
    assert sorted(states["ingest-shard"]) == ["Cached", "Completed"], states
    assert states["filter-shard"] == ["Cached"] * 2 and states["dedup-shards"] == ["Cached"], states
    assert states["record-ingest"] == states["curation-report"] == ["Completed"], states
