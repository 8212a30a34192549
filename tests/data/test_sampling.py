"""Sampling: token-exact mixing, byte-identical manifests, epochs, held-out split, temperature,
exposure warnings, FIM placement, bad input."""

from __future__ import annotations

import itertools
import json
import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from data_fixtures import package_texts, train_tokenizer, two_sources, write_parquet, write_sources
from lib.config import SamplingConfig, SourceConfig, load_config
from lib.data.manifest import source_probabilities, temperature_at
from lib.data.sampling import NEW_SOURCE, default_sources, prepare_training_data
from lib.data.shards import read_shard
from lib.data.tokenizer import load_tokenizer

SEQ = 128


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sampling")
    tok = train_tokenizer(root / "tok", 512)
    corpus, new = write_sources(root)
    return {"root": root, "tok": tok, "corpus": corpus, "new": new}


def _prepare(env, out, *, budget=80_000, workers=1, sources=None, cache_dir=None, **sampling):
    cfg = SamplingConfig(**{"heldout_fraction": 0.2, "fim_rate_code": 0.0, **sampling})
    srcs = sources or two_sources(env["corpus"], env["new"], 0.25)
    return prepare_training_data(srcs, env["tok"], env["root"] / out, token_budget=budget,
                                 sampling=cfg, seq_len=SEQ, workers=workers, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def base(env):
    data = _prepare(env, "base")
    return data, pq.read_table(env["root"] / "base" / "manifest.parquet").to_pylist()


def test_manifest_mixes_sources_at_the_token_ratio(env, base):
    data, rows = base
    assert [r["source"] for r in rows[:2]] == ["stdlib", "new"]
    assert data["manifest_rows"] == len(rows)
    tokens = {"stdlib": 0, "new": 0}
    for r in rows:
        tokens[r["source"]] += r["length"] + 1  # + the BOS each piece gets when packed
        assert 1 <= r["length"] <= SEQ  # a piece fills at most one row
    total = sum(tokens.values())
    # covers the budget in rows of SEQ + 1 tokens, plus slack for cropping
    assert total >= 80_000 * (SEQ + 1) / SEQ * 1.05
    assert abs(tokens["new"] - 0.25 * total) <= SEQ + 1  # exact to within one piece
    assert data["tokens_per_source"] == tokens
    assert abs(data["sources"]["new"]["share"] - 0.25) < 0.01


def test_same_inputs_give_a_byte_identical_manifest(env, base, monkeypatch):
    monkeypatch.setattr("lib.data.token_cache.MIN_PARALLEL_BYTES", 0)  # really start 2 processes on small inputs
    again = _prepare(env, "again", workers=2)  # two processes must not change anything either
    first = (env["root"] / "base" / "manifest.parquet").read_bytes()
    assert (env["root"] / "again" / "manifest.parquet").read_bytes() == first
    assert again["manifest_hash"] == base[0]["manifest_hash"]
    # from a thread (as under a Prefect task runner) the workers are spawned, not forked
    import threading

    from lib.data.token_cache import pool_context

    seen = {}

    def in_thread():
        seen["method"] = pool_context().get_start_method()
        seen["data"] = _prepare(env, "again_spawned", workers=2)

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    assert seen["method"] == "spawn" and seen["data"]["manifest_hash"] == base[0]["manifest_hash"]
    other = _prepare(env, "seed1", seed=1)
    assert other["manifest_hash"] != base[0]["manifest_hash"]


def test_no_document_twice_in_an_epoch_until_exhausted(env, base):
    data, rows = base
    new_stats = data["sources"]["new"]
    assert new_stats["epochs"] > 2  # the small new source is exhausted and re-drawn several times
    draws: dict[tuple, int] = {}
    for r in rows:
        if r["offset"] == 0 and r["doc_index"] is not None:
            key = (r["source"], r["epoch"], r["doc_id"], r["shard"], r["doc_index"])
            draws[key] = draws.get(key, 0) + 1
    assert max(draws.values()) == 1
    # each full epoch of the new source draws every one of its documents exactly once
    per_epoch = {}
    for (src, epoch, doc, *_rest) in draws:
        if src == "new":
            per_epoch.setdefault(epoch, set()).add(doc)
    full = [e for e in per_epoch if e < max(per_epoch)]
    assert full and all(len(per_epoch[e]) == new_stats["docs"] for e in full)
    # different epochs use different orders
    order = {}
    for r in rows:
        if r["source"] == "new" and r["offset"] == 0:
            order.setdefault(r["epoch"], []).append(r["doc_id"])
    assert order[0] != order[1]


def test_manifest_points_at_real_token_pieces(env, base):
    _, rows = base
    tok = load_tokenizer(env["tok"])
    texts = {r["id"]: r["text"] for r in pq.read_table(env["new"]).to_pylist()}
    r = next(r for r in rows if r["source"] == "new" and r["offset"] == 0)
    tokens, ends = read_shard(env["root"] / "base" / r["shard"], tokenizer_hash=tok.hash)
    start = 0 if r["doc_index"] == 0 else int(ends[r["doc_index"] - 1])
    piece = tokens[start + r["offset"]:start + r["offset"] + r["length"]]
    assert piece.tolist() == tok.encode(texts[r["doc_id"]])[:r["length"]]


def test_heldout_split_is_deterministic_and_excluded(env, base):
    data, rows = base
    held = pq.read_table(env["root"] / "base" / "heldout" / f"{NEW_SOURCE}.parquet")
    assert held.column_names == ["id", "text"]
    held_ids = set(held.column("id").to_pylist())
    n_new = pq.read_table(env["new"]).num_rows
    assert 0 < len(held_ids) < n_new and data["sources"]["new"]["heldout_docs"] == len(held_ids)
    assert not held_ids & {r["doc_id"] for r in rows if r["source"] == "new"}
    assert not (env["root"] / "base" / "heldout" / "stdlib.parquet").exists()  # corpus: no hold-out
    other = pq.read_table(env["root"] / "seed1" / "heldout" / "new.parquet") if (env["root"] / "seed1").exists() else None
    if other is not None:  # the split depends on the id only, not on the draw seed
        assert set(other.column("id").to_pylist()) == held_ids


def test_temperature_and_annealing():
    p = source_probabilities([0.9, 0.1], 1.0)
    assert np.allclose(p, [0.9, 0.1])
    hot = source_probabilities([0.9, 0.1], 2.0)
    assert np.allclose(hot, np.array([0.9, 0.1]) ** 0.5 / (0.9 ** 0.5 + 0.1 ** 0.5))
    assert np.allclose(source_probabilities([0.9, 0.1], 1e-3), [1, 0])
    lin = SamplingConfig(temperature=2.0, final_temperature=0.8, temperature_schedule="linear")
    cos = SamplingConfig(temperature=2.0, final_temperature=0.8, temperature_schedule="cosine")
    assert temperature_at(lin, 0) == 2.0 and math.isclose(temperature_at(lin, 1), 0.8)
    assert math.isclose(temperature_at(lin, 0.5), 1.4) and math.isclose(temperature_at(cos, 0.5), 1.4)
    assert temperature_at(cos, 0.1) > temperature_at(lin, 0.1)  # cosine stays hot longer
    assert temperature_at(SamplingConfig(temperature=1.5, final_temperature=0.8), 0.7) == 1.5  # constant


def test_annealed_manifest_shifts_the_mix_over_training(env):
    data = _prepare(env, "anneal", temperature=4.0, final_temperature=0.5, temperature_schedule="linear")
    rows = pq.read_table(env["root"] / "anneal" / "manifest.parquet").to_pylist()

    def new_share(part):
        tok = sum(r["length"] + 1 for r in part)
        return sum(r["length"] + 1 for r in part if r["source"] == "new") / tok

    cfg = SamplingConfig(temperature=4.0, final_temperature=0.5, temperature_schedule="linear")

    def expected(a, b):  # mean of p_new(T(progress)) over a stretch of training
        return float(np.mean([source_probabilities([0.75, 0.25], temperature_at(cfg, x))[1] for x in np.linspace(a, b, 50)]))

    quarter = len(rows) // 4
    early, late = new_share(rows[:quarter]), new_share(rows[-quarter:])
    assert abs(early - expected(0, 0.25)) < 0.03 and abs(late - expected(0.75, 1.0)) < 0.03
    assert early > late + 0.15  # flat early (T=4), sharp late (T→0.5)
    assert data["sampling"]["temperature_schedule"] == "linear"


def test_exposure_warning_outside_rule_of_thumb(env, base, caplog):
    data, _ = base
    e = data["sources"]["new"]["exposures"]
    assert e["min"] >= 1 and sum(e["histogram"].values()) == data["sources"]["new"]["docs"]
    per_doc = pq.read_table(env["root"] / "base" / "exposures.parquet").to_pylist()
    assert {r["source"] for r in per_doc} == {"new"} and len(per_doc) == data["sources"]["new"]["docs"]
    assert math.isclose(sum(r["exposures"] for r in per_doc) / len(per_doc), e["mean"])
    few = _prepare(env, "few", budget=4_000)
    assert few["sources"]["new"]["exposures"]["mean"] < 3
    assert any("rule of thumb" in w and "'new'" in w for w in few["warnings"])
    json.loads((env["root"] / "few" / "data.json").read_text())  # data.json is plain JSON


def test_fim_for_code_documents_only(env):
    data = _prepare(env, "fim", budget=8_000, fim_rate_code=1.0)
    tok = load_tokenizer(env["tok"])
    assert data["sources"]["stdlib"]["fim_units"] > 0 and data["sources"]["new"]["fim_units"] == 0
    rows = pq.read_table(env["root"] / "fim" / "manifest.parquet").to_pylist()
    fim_rows = [r for r in rows if r["fim"]]
    assert fim_rows and all(r["source"] == "stdlib" for r in fim_rows)
    r = fim_rows[0]
    tokens, ends = read_shard(env["root"] / "fim" / r["shard"])
    start = 0 if r["doc_index"] == 0 else int(ends[r["doc_index"] - 1])
    unit = tokens[start:int(ends[r["doc_index"]])].tolist()
    assert unit[0] in (tok.fim_prefix_id, tok.fim_suffix_id) and tok.fim_middle_id in unit
    assert len(unit) <= SEQ  # a FIM piece fits in one row with its sentinels
    # every FIM unit rebuilds a contiguous stretch of its document's text
    texts = {r["id"]: r["text"] for r in pq.read_table(env["corpus"]).to_pylist()}
    for r in fim_rows[:20]:
        tokens, ends = read_shard(env["root"] / "fim" / r["shard"])
        start = 0 if r["doc_index"] == 0 else int(ends[r["doc_index"] - 1])
        unit = tokens[start:int(ends[r["doc_index"]])].tolist()
        i_pre, i_suf, i_mid = (unit.index(t) for t in (tok.fim_prefix_id, tok.fim_suffix_id, tok.fim_middle_id))
        if unit[0] == tok.fim_prefix_id:
            prefix, suffix = unit[i_pre + 1:i_suf], unit[i_suf + 1:i_mid]
        else:
            suffix, prefix = unit[i_suf + 1:i_pre], unit[i_pre + 1:i_mid]
        assert unit[-1] == tok.eos_id
        piece = tok.decode(prefix) + tok.decode(unit[i_mid + 1:-1]) + tok.decode(suffix)
        assert piece and piece in texts[r["doc_id"]]
    # a source's own fim_rate overrides the code rule: prose source with fim_rate 1
    srcs = [SourceConfig(name="stdlib", path=env["corpus"], weight=0.75, kind="corpus", fim_rate=0.0),
            SourceConfig(name="new", path=env["new"], weight=0.25, kind="buffer", fim_rate=1.0)]
    over = _prepare(env, "fim_over", budget=8_000, fim_rate_code=1.0, sources=srcs)
    assert over["sources"]["stdlib"]["fim_units"] == 0 and over["sources"]["new"]["fim_units"] > 0


def test_default_sources_two_source_case(tmp_path):
    from lib.workspace import Workspace

    ws = Workspace(tmp_path / "ws").ensure()
    cfg = load_config(preset="tiny")
    srcs = default_sources(ws, cfg, ws.run("r1").curated)
    assert [(s.name, s.kind) for s in srcs] == [("stdlib", "corpus"), ("new", "buffer")]
    assert srcs[0].path == ws.corpus_train("stdlib") and srcs[1].path == ws.run("r1").curated
    assert math.isclose(srcs[0].weight, 0.75) and math.isclose(srcs[1].weight, 0.25)
    extra = load_config(preset="tiny", overrides=["sampling.sources=[{name: old_nights, path: corpora/old, weight: 0.1}]"])
    srcs = default_sources(ws, extra, ws.run("r1").curated)
    assert srcs[2].name == "old_nights" and srcs[2].path == ws.root / "corpora" / "old"
    # new + memory = 1: the corpus is left out (no replay); more than 1 is refused, naming both knobs
    none = load_config(preset="tiny", overrides=["sampling.new_data_ratio=1", "sampling.memory_ratio=0"])
    assert [(s.name, s.weight) for s in default_sources(ws, none, ws.run("r1").curated)] == [("new", 1.0)]
    over = load_config(preset="tiny", overrides=["sampling.new_data_ratio=0.95", "sampling.memory_ratio=0.1"])
    (ws.memory / "v1").mkdir(parents=True)
    (ws.memory / "v1" / "night.json").write_text("{}")  # a memory exists: memory_ratio counts
    with pytest.raises(ValueError, match="new_data_ratio 0.95 \\+ sampling.memory_ratio 0.1 add up to more than 1"):
        default_sources(ws, over, ws.run("r1").curated)


def test_bad_inputs_name_the_file(env, tmp_path):
    bad = write_parquet(tmp_path / "bad" / "part-00000.parquet", [("a", "text")])
    import pyarrow as pa

    pq.write_table(pa.table({"text": ["no id column"]}), bad)
    srcs = [SourceConfig(name="x", path=tmp_path / "bad", weight=1.0)]
    with pytest.raises(ValueError, match=r"part-00000\.parquet lacks column\(s\) \['id'\]"):
        prepare_training_data(srcs, env["tok"], tmp_path / "o", token_budget=100, sampling=SamplingConfig(), seq_len=SEQ, workers=1)
    missing = [SourceConfig(name="x", path=tmp_path / "nowhere", weight=1.0)]
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        prepare_training_data(missing, env["tok"], tmp_path / "o", token_budget=100, sampling=SamplingConfig(), seq_len=SEQ)
    escape = [SourceConfig(name="../escape", path=env["new"], weight=1.0)]
    with pytest.raises(ValueError, match="source name '../escape' is not valid"):
        prepare_training_data(escape, env["tok"], tmp_path / "o", token_budget=100, sampling=SamplingConfig(), seq_len=SEQ)
    dup = two_sources(env["corpus"], env["new"]) + [SourceConfig(name="new", path=env["new"], weight=1.0)]
    with pytest.raises(ValueError, match="unique"):
        prepare_training_data(dup, env["tok"], tmp_path / "o", token_budget=100, sampling=SamplingConfig(), seq_len=SEQ)


def test_heldout_split_is_independent_of_other_id_hash_splits():
    import xxhash

    from lib.data.token_cache import is_heldout

    # ids that an unsalted xxh64 split (the corpus's 5% validation split) puts below 5%
    low = [f"doc-{i}" for i in range(20_000) if xxhash.xxh64_intdigest(f"doc-{i}".encode()) < 0.05 * 2**64]
    share = sum(is_heldout(i, 0.1) for i in low) / len(low)
    assert 0.05 < share < 0.15, share


def test_cli_tokenize_runs_the_data_step(env, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app
    from lib.workspace import Workspace

    ws = Workspace(tmp_path / "ws").ensure()
    shutil.copytree(env["corpus"], ws.corpus_train("stdlib"))
    shutil.copytree(env["tok"], ws.tokenizer)
    run = ws.run("night-1").ensure()
    shutil.copy(env["new"] / "part-00000.parquet", run.curated / "part-00000.parquet")
    sets = ["--set", "training.num_iterations=20", "--set", "training.total_batch_size=1024", "--set", "training.seq_len=128"]
    result = CliRunner().invoke(app, ["tokenize", "--preset", "tiny", "-w", str(ws.root), "--run", "night-1", "--workers", "1", "--json", *sets])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["token_budget"] == 20 * 1024 and run.prepared.manifest.is_file()
    assert set(data["sources"]) == {"stdlib", "new"} and (run.path / "heldout" / "new.parquet").is_file()
    check = CliRunner().invoke(app, ["tokenize", "-w", str(ws.root), "--check", str(run.path)])
    assert check.exit_code == 0 and "ok" in check.output


def test_token_cache_reuses_shards_and_keeps_the_manifest(env, base, tmp_path):
    cache = tmp_path / "cache"
    first = _prepare(env, "cached1", cache_dir=cache)
    assert not any(f["cached"] for s in first["sources"].values() for f in s["files"])
    second = _prepare(env, "cached2", cache_dir=cache)
    assert all(f["cached"] for s in second["sources"].values() for f in s["files"])
    for name in ("cached1", "cached2"):  # same manifest as without a cache, byte for byte
        assert (env["root"] / name / "manifest.parquet").read_bytes() == (env["root"] / "base" / "manifest.parquet").read_bytes()
    a = env["root"] / "base" / "shards" / "new" / "shard-00000.bin"
    assert (env["root"] / "cached2" / "shards" / "new" / "shard-00000.bin").read_bytes() == a.read_bytes()
    assert set(pq.read_table(env["root"] / "cached2" / "heldout" / "new.parquet").column("id").to_pylist()) == \
        set(pq.read_table(env["root"] / "base" / "heldout" / "new.parquet").column("id").to_pylist())
    # another hold-out rule changes the new source's shard but not the corpus's
    third = _prepare(env, "cached3", cache_dir=cache, heldout_fraction=0.3)
    assert all(f["cached"] for f in third["sources"]["stdlib"]["files"])
    assert not any(f["cached"] for f in third["sources"]["new"]["files"])


def test_files_tokenized_one_by_one_into_the_cache_give_the_same_manifest(env, base, tmp_path):
    """The flow's mapped step: tokenize_to_cache per file (threads, as a task runner would), then
    prepare_training_data only links shards, and the manifest is byte-identical."""
    from concurrent.futures import ThreadPoolExecutor

    from lib.data.token_cache import tokenize_tasks, tokenize_to_cache
    from lib.data.tokenizer import load_tokenizer

    cache = tmp_path / "cache"
    cfg = SamplingConfig(heldout_fraction=0.2, fim_rate_code=0.0)
    srcs = two_sources(env["corpus"], env["new"], 0.25)
    tasks = tokenize_tasks(srcs, load_tokenizer(env["tok"]), tmp_path / "unused", cfg, SEQ)
    assert len(tasks) >= 2
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda t: tokenize_to_cache(t, env["tok"], cache), tasks))
    assert not any(d["cached"] for d in done) and all(d["tokens"] > 0 for d in done)
    assert all(d["cached"] for d in (tokenize_to_cache(t, env["tok"], cache) for t in tasks))
    assert not list(cache.glob(".work-*"))  # scratch folders are gone
    data = _prepare(env, "mapped", cache_dir=cache)
    assert all(f["cached"] for s in data["sources"].values() for f in s["files"])
    assert (env["root"] / "mapped" / "manifest.parquet").read_bytes() == (env["root"] / "base" / "manifest.parquet").read_bytes()


def _ids_with_hashes(n: int, *, at_least: float) -> list[str]:
    """n ids whose salted held-out hash is at or above `at_least` of the range: the fraction
    below it holds none of them out."""
    from lib.data.token_cache import _heldout_hash

    return list(itertools.islice((i for i in (f"night/{k}" for k in itertools.count())
                                  if _heldout_hash(i) >= at_least * 2**64), n))


def test_heldout_cut_keeps_a_minimum_when_the_night_has_twice_as_many():
    from lib.data.token_cache import _heldout_hash, heldout_cut

    def held(ids, cut):
        return sorted({i for i in ids if _heldout_hash(i) < cut})

    ten = _ids_with_hashes(10, at_least=0.1)
    assert held(ten, int(0.1 * 2**64)) == []  # the fraction alone would hold out nothing
    lowest4 = sorted(ten, key=_heldout_hash)[:4]
    assert held(ten, heldout_cut(ten, 0.1, 4)) == sorted(lowest4)  # 10 >= 2 × 4: the 4 lowest hashes
    assert held(ten + ten[:3], heldout_cut(ten + ten[:3], 0.1, 4)) == sorted(lowest4)  # repeated ids count once
    assert held(ten, heldout_cut(ten, 0.0, 4)) == sorted(lowest4)  # fraction 0 alone does not turn it off
    assert heldout_cut(ten, 0.0, 0) == 0  # both 0: nothing held out
    assert heldout_cut(ten, 0.1, 0) == int(0.1 * 2**64)
    # fewer than 2 × min_docs: the fraction alone decides, however few that leaves
    seven = ten[:7]
    assert heldout_cut(seven, 0.1, 4) == int(0.1 * 2**64) and held(seven, heldout_cut(seven, 0.1, 4)) == []
    # the fraction already gives enough: the cut is the fraction's
    many = [f"night/{k}" for k in range(200)]
    assert len(held(many, int(0.1 * 2**64))) >= 4 and heldout_cut(many, 0.1, 4) == int(0.1 * 2**64)


def test_a_small_night_holds_out_the_minimum_or_warns_that_the_gate_measures_new_train(env, tmp_path):
    texts = [f"# {name}\n{t}" for name, t in package_texts(10, 800)]  # licence headers alike: made distinct
    ids = _ids_with_hashes(10, at_least=0.2)  # _prepare's heldout_fraction: none below it
    ten = write_parquet(tmp_path / "ten" / "part-00000.parquet", list(zip(ids, texts)))
    data = _prepare(env, "night10", budget=4_000, sources=two_sources(env["corpus"], ten.parent, 0.25))
    held = pq.read_table(env["root"] / "night10" / "heldout" / "new.parquet").column("id").to_pylist()
    assert len(held) == 4 and data["sources"]["new"]["heldout_docs"] == 4 and data["sources"]["new"]["docs"] == 6
    assert not any("no document held out" in w for w in data["warnings"])
    manifest_ids = set(pq.read_table(env["root"] / "night10" / "manifest.parquet").column("doc_id").to_pylist())
    assert not manifest_ids & set(held)  # never trained on

    seven = write_parquet(tmp_path / "seven" / "part-00000.parquet", list(zip(ids[:7], texts[:7])))
    data = _prepare(env, "night7", budget=4_000, sources=two_sources(env["corpus"], seven.parent, 0.25))
    assert pq.read_table(env["root"] / "night7" / "heldout" / "new.parquet").num_rows == 0
    assert data["sources"]["new"]["heldout_docs"] == 0 and data["sources"]["new"]["docs"] == 7
    # an empty new_heldout is skipped by the evaluation, so the gate's acquisition rule reads
    # new_train (tests/evaluation/test_gate.py checks that fallback); data.json says so
    [warning] = [w for w in data["warnings"] if "no document held out" in w]
    assert "7 documents" in warning and "at least 8" in warning and "measures new_train" in warning
