"""Version folders and delta storage: HF-loadable, digest-checked, deltas restored bit-exactly."""

import json
import shutil

import pytest
import torch

from lib.files import file_hash  # noqa: E402
from lib.checkpoints.checkpoint import (
    DELTA_FILE, DELTA_FORMAT, MATERIALIZED, MODEL_FILE, CheckpointError, chain_depth, compact, is_delta, is_full,
    load_optimizer_state, materialize, read_meta, restore, store_version, verify, write_version,
)
from lib.config import ModelConfig

MODEL = ModelConfig(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from conftest import stdlib_texts
    from lib.data.tokenizer import train_bpe

    return train_bpe(stdlib_texts(30), 300, tmp_path_factory.mktemp("tok") / "tokenizer")


def _model(seed=0):
    from lib.training.model import build_model

    return build_model(MODEL, 300, bos_id=0, eos_id=1, pad_id=2, seed=seed)


def _nudge(model, scale, seed):
    """What a consolidation does to weights: small relative changes to every parameter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + scale * torch.randn(p.shape, generator=g))
    return model


def _versions(root, tokenizer_dir, n):
    model = _model()
    dirs = []
    for i in range(n):
        if i:
            _nudge(model, 0.01, i)
        dirs.append(write_version(root / f"v{i}", model, tokenizer_dir=tokenizer_dir,
                                  meta={"version": f"v{i}", "parent_checkpoint": f"v{i-1}" if i else None, "original_lr": 3e-3}))
    return dirs


def test_write_version_is_hf_loadable_with_meta_and_digest(tmp_path, tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[0, 5, 6, 7]]), labels=torch.tensor([[0, 5, 6, 7]])).loss.backward()
    opt.step()
    out = write_version(tmp_path / "v0", model, tokenizer_dir=tokenizer_dir,
                        meta={"parent_checkpoint": None, "original_lr": 3e-3, "manifest_hash": "abc"},
                        optimizer_state=opt.state_dict())
    meta = read_meta(out)
    assert meta["version"] == "v0" and meta["original_lr"] == 3e-3 and meta["manifest_hash"] == "abc"
    assert meta["digest"] == file_hash(out / MODEL_FILE) and meta["has_optimizer_state"]
    loaded = AutoModelForCausalLM.from_pretrained(out)
    for (n, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), n
    assert AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("<|bos|>") == 0
    state = load_optimizer_state(out)  # weights_only=True inside
    assert torch.equal(state["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert not list(tmp_path.glob(".v0.tmp-*")), "no temporary folder left behind"
    with pytest.raises(FileExistsError, match="already exists"):
        write_version(out, model, tokenizer_dir=tokenizer_dir, meta={})


def test_delta_round_trip_is_bit_exact_over_a_chain(tmp_path, tokenizer_dir):
    from transformers import AutoModelForCausalLM

    v0, v1, v2 = _versions(tmp_path, tokenizer_dir, 3)
    originals = {v: (v / MODEL_FILE).read_bytes() for v in (v1, v2)}
    info2 = compact(v2, v1)   # v2 against a still-full v1 ...
    info1 = compact(v1, v0)   # ... then v1 against v0: v2's parent is now a delta itself
    assert is_delta(v1) and is_delta(v2) and is_full(v0)
    assert not (v2 / MODEL_FILE).exists() and (v2 / DELTA_FILE).is_file()
    assert chain_depth(v2) == 2 and chain_depth(v0) == 0
    assert info1["tensors_matched"] == info1["tensors"] and info1["ratio"] < 1
    for v in (v1, v2):
        folder = materialize(v)
        assert folder == v / MATERIALIZED
        assert (folder / MODEL_FILE).read_bytes() == originals[v], "restore must be bit-exact"
        assert verify(v) == read_meta(v)["digest"]
        AutoModelForCausalLM.from_pretrained(folder)
    assert materialize(v0) == v0, "a full folder materialises to itself"
    assert info2["digest"] == read_meta(v2)["digest"]
    # restore in place turns it back into a full folder with the same bytes
    restore(v2)
    assert is_full(v2) and (v2 / MODEL_FILE).read_bytes() == originals[v2]


def test_corrupt_delta_and_missing_or_changed_parent_are_refused(tmp_path, tokenizer_dir):
    v0, v1 = _versions(tmp_path, tokenizer_dir, 2)
    compact(v1, v0)
    raw = bytearray((v1 / DELTA_FILE).read_bytes())
    good = bytes(raw)
    raw[len(raw) // 2] ^= 0xFF
    for damaged in (bytes(raw), good[: len(good) // 2], good + b"extra"):  # flipped, truncated, trailing bytes
        (v1 / DELTA_FILE).write_bytes(damaged)
        with pytest.raises(CheckpointError, match="corrupt"):
            materialize(v1)
        assert not (v1 / MATERIALIZED).exists() and not list(v1.glob(".full.tmp-*")), "nothing half-written is left"
    (v1 / DELTA_FILE).write_bytes(good)
    moved = tmp_path / "elsewhere"
    shutil.move(v0, moved)
    with pytest.raises(CheckpointError, match="missing"):
        materialize(v1)
    shutil.move(moved, v0)
    other = _nudge(_model(), 0.5, 99)
    shutil.rmtree(v0)
    write_version(v0, other, tokenizer_dir=tokenizer_dir, meta={"version": "v0"})
    with pytest.raises(CheckpointError, match="different weights"):
        materialize(v1)


def test_full_every_bounds_the_chain(tmp_path, tokenizer_dir):
    dirs = _versions(tmp_path, tokenizer_dir, 5)
    stored = [store_version(d, p, delta=True, full_every=3)["stored"] for p, d in zip(dirs, dirs[1:])]
    # v1 depth 1, v2 depth 2, v3 would be depth 3 = full_every → full, v4 depth 1 again
    assert stored == ["delta", "delta", "full", "delta"]
    assert [chain_depth(d) for d in dirs] == [0, 1, 2, 0, 1]
    assert store_version(dirs[0], None)["stored"] == "full"


def test_storage_info_and_the_demo_lineage_column(tmp_path, tokenizer_dir):
    """storage_info says full or delta (format, sizes, ratio, chain depth); the demo's lineage
    table prints it per version, and "missing" for a folder that is gone."""
    from cli.demo import _stored
    from lib.checkpoints.checkpoint import storage_info

    v0, v1, v2 = _versions(tmp_path, tokenizer_dir, 3)
    compact(v1, v0)
    compact(v2, v1)
    assert storage_info(v0) == {"storage": "full", "chain_depth": 0}
    info = storage_info(v2)
    assert info["storage"] == "delta" and info["chain_depth"] == 2 and info["format"] == DELTA_FORMAT
    assert info["ratio"] == info["delta_bytes"] / info["full_bytes"] and 0 < info["ratio"] < 1
    assert _stored(str(v0)) == "full" and _stored(str(v2)) == f"delta, {info['ratio']:.0%} of full"
    assert _stored(str(tmp_path / "gone")) == "missing" and _stored(None) == "missing"


def test_optimizer_states_are_kept_only_where_a_night_can_inherit_them(tmp_path, tokenizer_dir):
    """prune_optimizer_states: the champion and the `keep` newest accepted versions keep
    optimizer.pt; rejected and older versions lose it, weights untouched; None keeps all; a
    second call frees nothing. store_version on a version already stored as a delta (a replayed
    night) reports it instead of failing."""
    from lib.registry.lineage import Lineage
    from lib.registry.promotion import prune_optimizer_states

    lin = Lineage(tmp_path / "lineage.duckdb")
    model, digests = _model(), {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    statuses = {"v0": "accepted", "v1": "accepted", "v2": "rejected", "v3": "accepted"}
    for i, (name, status) in enumerate(statuses.items()):
        model(input_ids=torch.tensor([[0, 5, 6, 7]]), labels=torch.tensor([[0, 5, 6, 7]])).loss.backward()
        opt.step()
        d = write_version(tmp_path / name, model, tokenizer_dir=tokenizer_dir, meta={}, optimizer_state=opt.state_dict())
        digests[name] = file_hash(d / MODEL_FILE)
        lin.record_version(name, d, parent=f"v{i - 1}" if i else None, status=status)
    lin.set_alias("champion", "v1", "person", "rolled back by hand")  # not the newest accepted one

    assert prune_optimizer_states(lin, None) == {}
    freed = prune_optimizer_states(lin, 1)
    assert set(freed) == {"v0", "v2"} and all(n > 0 for n in freed.values())
    assert [load_optimizer_state(tmp_path / v) is None for v in statuses] == [True, False, True, False]
    assert all(file_hash(tmp_path / v / MODEL_FILE) == digests[v] for v in statuses)
    assert prune_optimizer_states(lin, 1) == {}
    lin.set_alias("champion", "v3", "gate")
    assert set(prune_optimizer_states(lin, 1)) == {"v1"}

    first = store_version(tmp_path / "v3", tmp_path / "v1")
    again = store_version(tmp_path / "v3", tmp_path / "v1")
    assert first["stored"] == again["stored"] == "delta" and again["ratio"] == first["ratio"]


def test_parent_moved_together_with_child_is_found_as_sibling(tmp_path, tokenizer_dir):
    v0, v1 = _versions(tmp_path / "a", tokenizer_dir, 2)
    expected = (v1 / MODEL_FILE).read_bytes()
    compact(v1, v0)
    shutil.move(tmp_path / "a", tmp_path / "b")  # a copied workspace: absolute parent path is stale
    assert (materialize(tmp_path / "b" / "v1") / MODEL_FILE).read_bytes() == expected
    info = json.loads((tmp_path / "b" / "v1" / "delta.json").read_text())
    assert info["format"] == DELTA_FORMAT


def test_checkpoint_cli_compact_info_restore(tmp_path, tokenizer_dir):
    from typer.testing import CliRunner

    from cli.main import app

    ws = tmp_path / "ws"
    v0, v1 = _versions(ws / "checkpoints", tokenizer_dir, 2)
    expected = (v1 / MODEL_FILE).read_bytes()
    runner = CliRunner()
    res = runner.invoke(app, ["checkpoint", "compact", "v1", "-w", str(ws), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["parent_version"] == "v0" and is_delta(v1)
    res = runner.invoke(app, ["checkpoint", "info", "v1", "-w", str(ws), "--json"])
    info = json.loads(res.stdout)
    assert info["storage"] == "delta" and info["chain_depth"] == 1 and 0 < info["ratio"] < 1
    res = runner.invoke(app, ["checkpoint", "restore", "v1", "-w", str(ws)])
    assert res.exit_code == 0 and (v1 / MODEL_FILE).read_bytes() == expected
    res = runner.invoke(app, ["checkpoint", "info", "v9", "-w", str(ws)])
    assert res.exit_code != 0 and "no checkpoint version 'v9'" in str(res.exception)


def test_bf16_storage_stays_bf16_and_its_delta_is_small_and_exact(tmp_path, tokenizer_dir):
    """checkpoints.dtype: a version stored in bf16 says so in config.json and meta, loads in bf16
    with dtype="auto", a child with "auto" inherits bf16 from its parent, and a bf16 child's delta
    against its parent restores bit-exactly; with a consolidation-sized change (0.1% relative)
    most bf16 weights do not move, so the delta is a fraction of what the same change costs fp32."""
    from transformers import AutoModelForCausalLM

    from lib.checkpoints.checkpoint import storage_dtype

    model = _model()
    v0 = write_version(tmp_path / "v0", model, tokenizer_dir=tokenizer_dir, meta={}, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16  # cast in place, as documented
    assert json.loads((v0 / "config.json").read_text())["dtype"] == "bfloat16" and read_meta(v0)["storage_dtype"] == "bfloat16"
    loaded = AutoModelForCausalLM.from_pretrained(v0, dtype="auto")
    assert next(loaded.parameters()).dtype == torch.bfloat16
    assert storage_dtype("auto", v0) == "bfloat16" and storage_dtype("auto", None) == "float32"
    assert storage_dtype("float16", v0) == "float16"
    with pytest.raises(ValueError, match="checkpoints.dtype"):
        storage_dtype("int8", v0)

    child = loaded.float()  # training runs on fp32 master weights
    _nudge(child, 0.001, 7)
    v1 = write_version(tmp_path / "v1", child, tokenizer_dir=tokenizer_dir, meta={}, dtype=storage_dtype("auto", v0))
    original = (v1 / MODEL_FILE).read_bytes()
    info = compact(v1, v0)
    assert (materialize(v1) / MODEL_FILE).read_bytes() == original
    fp32 = [write_version(tmp_path / f"f{i}", m, tokenizer_dir=tokenizer_dir, meta={}, dtype="float32")
            for i, m in enumerate([_model(), _nudge(_model(), 0.001, 7)])]
    info32 = compact(fp32[1], fp32[0])
    assert info["ratio"] < 0.5 * info32["ratio"], (info["ratio"], info32["ratio"])


def _adamw_steps(model, steps, lr, seed):
    """What a consolidation does to weights: AdamW moves every weight by about `lr` per step,
    whatever its size (unlike `_nudge`'s relative noise)."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    for _ in range(steps):
        ids = torch.randint(3, 300, (4, 32), generator=g)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_older_delta_formats_still_restore_and_format_3_is_smallest(tmp_path, tokenizer_dir, dtype):
    """Deltas written by earlier releases (format 1: XOR; format 2: integer difference without
    the exponent order) still materialise bit-exactly. On a real AdamW update the current format
    (difference, elements in the parent's exponent order) is the smallest of the three."""
    from lib.checkpoints.checkpoint import DELTA_META
    from lib.checkpoints.delta import decode_delta, encode_delta

    v0 = write_version(tmp_path / "v0", _model(), tokenizer_dir=tokenizer_dir, meta={}, dtype=dtype)
    v1 = write_version(tmp_path / "v1", _adamw_steps(_model(), 20, 3e-4, 1), tokenizer_dir=tokenizer_dir, meta={}, dtype=dtype)
    target, parent = (v1 / MODEL_FILE).read_bytes(), (v0 / MODEL_FILE).read_bytes()
    sizes, payloads = {}, {}
    for method in ("xor", "diff", "grouped"):
        payloads[method], stats = encode_delta(target, parent, method=method)
        sizes[method] = len(payloads[method])
        assert stats["method"] == method and decode_delta(payloads[method], parent, method) == target
    assert sizes["grouped"] < sizes["diff"] < sizes["xor"], sizes
    info = compact(v1, v0)
    assert info["format"] == DELTA_FORMAT and info["delta_bytes"] == sizes["grouped"]
    meta = json.loads((v1 / DELTA_META).read_text())
    # rewrite v1 as a format-1 and a format-2 delta, as older releases left it
    for fmt, method in (("xor-byteplane-zstd/1", "xor"), ("diff-byteplane-zstd/2", "diff")):
        (v1 / DELTA_FILE).write_bytes(payloads[method])
        (v1 / DELTA_META).write_text(json.dumps({**meta, "format": fmt, "delta_bytes": sizes[method]}))
        shutil.rmtree(v1 / MATERIALIZED, ignore_errors=True)
        assert (materialize(v1) / MODEL_FILE).read_bytes() == target
    (v1 / DELTA_META).write_text(json.dumps({**meta, "format": "zip/9"}))
    shutil.rmtree(v1 / MATERIALIZED, ignore_errors=True)
    with pytest.raises(CheckpointError, match="unknown delta format"):
        materialize(v1)
    with pytest.raises(ValueError, match="unknown delta method"):
        encode_delta(target, parent, method="lzma")


def test_every_delta_method_round_trips_every_dtype_across_chunks(monkeypatch):
    """bf16, fp16, fp32 and fp64 tensors, an int tensor, a sign flip (the difference wraps), a
    tensor only the child has and one whose shape changed: each method restores the exact bytes,
    also when a tensor spans several exponent-ordering chunks."""
    import lib.checkpoints.delta as ck

    from safetensors.torch import save

    monkeypatch.setattr(ck, "GROUP_CHUNK", 100)
    g = torch.Generator().manual_seed(3)
    a = {"w16": torch.randn(257, generator=g).bfloat16(), "h16": torch.randn(333, generator=g).half(),
         "w32": torch.randn(64, 3, generator=g), "w64": torch.randn(150, generator=g).double(),
         "ids": torch.arange(10, dtype=torch.int64), "only_in_child": torch.ones(4), "reshaped": torch.ones(6)}
    b = {k: (v * (1 + 0.01 * torch.randn(v.shape, generator=g, dtype=v.dtype)) if v.is_floating_point() else v + 1)
         for k, v in a.items()}
    b["w32"][0, 0] = -b["w32"][0, 0]  # a sign flip: the difference wraps around
    b["reshaped"] = torch.ones(2, 3)
    pa, pb = save({k: v for k, v in a.items() if k != "only_in_child"}), save(b)
    for method in ("xor", "diff", "grouped"):
        assert ck.decode_delta(ck.encode_delta(pb, pa, method=method)[0], pa, method) == pb

    import struct

    def raw_file(values, hole: bytes, b_start: int | None = None) -> bytes:
        """Two F32 tensors with `hole` between them (bytes the codec keeps as they are)."""
        start = 8 + len(hole) if b_start is None else b_start
        header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [start, start + 8]}}).encode()
        data = struct.pack("<2f", *values[:2]) + hole + struct.pack("<2f", *values[2:])
        return struct.pack("<Q", len(header)) + header + data

    pa, pb = raw_file([1.0, 2.0, 3.0, 4.0], b"\0" * 8), raw_file([1.5, 2.0, 3.0, -4.0], b"gap-here")
    for method in ("xor", "diff", "grouped"):
        assert ck.decode_delta(ck.encode_delta(pb, pa, method=method)[0], pa, method) == pb
    with pytest.raises(CheckpointError, match="overlapping"):
        ck.encode_delta(raw_file([1.0, 2.0, 3.0, 4.0], b"\0" * 8, b_start=4), pa)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_stochastic_rounding_is_unbiased_seeded_and_lands_on_a_neighbour(dtype):
    """Each value rounds to one of its two representable neighbours, with the probability that
    makes the mean the fp32 value: an update of a fifth of a step survives on average where
    round-to-nearest loses all of it. Same seed, same bytes; infinities and NaN pass through."""
    from lib.checkpoints.precision import stochastic_round

    base = torch.tensor([1.0, -0.75, 3.0e-3], dtype=torch.float32).to(dtype).float()
    step = (torch.nextafter(base.to(dtype), torch.full_like(base, float("inf")).to(dtype)).float() - base).abs()
    x = (base + 0.2 * step).repeat(20_000, 1)  # a fifth of the way to the next value up
    g = torch.Generator().manual_seed(5)
    r = stochastic_round(x, dtype, g)
    assert r.dtype == dtype
    assert torch.equal(x.to(dtype).float(), base.expand_as(x)), "round-to-nearest loses the whole update"
    rf = r.float()
    assert bool(((rf == base) | (rf == base + step)).all()), "only the two neighbours"
    moved = (rf - base).mean(0) / step
    assert torch.allclose(moved, torch.full_like(moved, 0.2), atol=0.015), moved
    assert torch.equal(stochastic_round(x, dtype, torch.Generator().manual_seed(5)), r)
    assert not torch.equal(stochastic_round(x, dtype, torch.Generator().manual_seed(6)), r)
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0])
    out = stochastic_round(special, dtype, g).float()
    assert out[0] == float("inf") and out[1] == float("-inf") and torch.isnan(out[2]) and out[3] == 0 and out[4] == 0


def test_master_weights_are_an_hf_folder_whose_delta_against_the_bf16_export_restores_exactly(tmp_path, tokenizer_dir):
    """write_version(master=True, dtype=bfloat16): <v>/master/ holds the fp32 weights as an HF
    folder (from_pretrained loads it, equal to the model before the cast) and the serving folder
    is bf16. store_version compacts master/ against the version's own bf16 weights (format 4
    widens them exactly): about half of the fp32 file, restored bit-exactly. A format-3 delta
    (older releases) still decodes."""
    from transformers import AutoModelForCausalLM

    from lib.checkpoints.checkpoint import DELTA_META, master_dir
    from lib.checkpoints.delta import decode_delta, encode_delta

    parent = write_version(tmp_path / "v0", _model(), tokenizer_dir=tokenizer_dir, meta={}, dtype="bfloat16")
    model = _adamw_steps(AutoModelForCausalLM.from_pretrained(parent, dtype=torch.float32), 3, 1e-4, 2)
    fp32 = {k: v.clone() for k, v in model.state_dict().items()}
    v1 = write_version(tmp_path / "v1", model, tokenizer_dir=tokenizer_dir, meta={}, dtype="bfloat16",
                       rounding="stochastic", seed=3, master=True)
    assert master_dir(v1) == v1 / "master" and read_meta(v1)["master_weights"] == "master"
    assert read_meta(v1)["storage_dtype"] == "bfloat16" and read_meta(v1)["storage_rounding"] == "stochastic"
    loaded = AutoModelForCausalLM.from_pretrained(v1 / "master")
    assert next(loaded.parameters()).dtype == torch.float32
    assert all(torch.equal(fp32[k], v) for k, v in loaded.state_dict().items())
    master_bytes = (v1 / "master" / MODEL_FILE).read_bytes()
    out = store_version(v1, parent)
    assert out["stored"] == "delta" and out["master"]["stored"] == "delta" and is_delta(v1 / "master")
    assert 0.35 < out["master"]["ratio"] < 0.65, out["master"]  # the bits below bf16 are noise: ~2 of 4 bytes
    shutil.rmtree(v1 / MATERIALIZED)
    assert (materialize(v1 / "master") / MODEL_FILE).read_bytes() == master_bytes
    assert verify(v1 / "master") == file_hash(materialize(v1 / "master") / MODEL_FILE)
    # without widening (format 3) the fp32 tensors have no bf16 counterpart and are stored raw
    export = (materialize(v1) / MODEL_FILE).read_bytes()
    wide, _ = encode_delta(master_bytes, export)
    raw, _ = encode_delta(master_bytes, export, widen=False)
    assert len(wide) < 0.75 * len(raw)
    assert decode_delta(raw, export, "grouped", widen=False) == master_bytes
    info = json.loads((v1 / "master" / DELTA_META).read_text())
    assert info["parent_relative"] == ".." and info["format"] == DELTA_FORMAT
    # the workspace moved: the master's delta still finds its version through ".."
    shutil.move(tmp_path, tmp_path.with_name(tmp_path.name + "-moved"))
    moved = tmp_path.with_name(tmp_path.name + "-moved")
    shutil.rmtree(moved / "v1" / "master" / MATERIALIZED, ignore_errors=True)
    assert (materialize(moved / "v1" / "master") / MODEL_FILE).read_bytes() == master_bytes


def test_served_versions_stay_plain_hf_folders_and_a_replaced_champion_is_compacted(tmp_path, tokenizer_dir):
    """The storage policy over three nights and a rollback, as the gate task applies it:
    the champion and `latest` are always full folders that `from_pretrained` loads, also through
    <ws>/serving/champion; a rejected candidate and the champion that was replaced become deltas
    (their master weights too) that restore bit-exactly; master/ and optimizer.pt are pruned from
    versions no night starts from; a rollback to a compacted version makes it full again."""
    import os

    from transformers import AutoModelForCausalLM

    from lib.config import CheckpointConfig
    from lib.registry.lineage import Lineage
    from lib.registry.promotion import apply_storage_policy, conclude, rollback
    from lib.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    lin = Lineage(ws.lineage_db)
    cfg = CheckpointConfig(keep_master_weights=None)  # every master kept: they are compacted instead
    model, originals = _model(), {}

    def night(i, passed):
        champion = lin.alias("champion")
        _adamw_steps(model, 2, 1e-3, i)
        d = write_version(ws.checkpoint(f"v{i}"), model.float(), tokenizer_dir=tokenizer_dir, dtype="bfloat16",
                          rounding="stochastic", seed=i, master=True,
                          meta={"version": f"v{i}", "parent_checkpoint": champion, "original_lr": 3e-3})
        originals[f"v{i}"] = ((d / MODEL_FILE).read_bytes(), (d / "master" / MODEL_FILE).read_bytes())
        lin.record_version(f"v{i}", d, parent=champion, status="accepted" if i == 0 else "candidate")
        if i == 0:
            lin.set_alias("champion", "v0", "bootstrap")
            lin.set_alias("latest", "v0", "bootstrap")
        else:
            conclude(lin, f"v{i}", {"passed": passed, "rules": []})
        return apply_storage_policy(lin, cfg, ws.serving)

    def exact(v):
        for folder in (ws.checkpoint(v), ws.checkpoint(v) / "master"):
            shutil.rmtree(folder / MATERIALIZED, ignore_errors=True)
        assert (materialize(ws.checkpoint(v)) / MODEL_FILE).read_bytes() == originals[v][0], v
        assert (materialize(ws.checkpoint(v) / "master") / MODEL_FILE).read_bytes() == originals[v][1], v

    night(0, True)
    first = night(1, True)                     # accepted: v1 champion; v0 (the root) stays full, its master a delta
    assert first["stored"]["v0"]["stored"] == "full" and first["stored"]["v0"]["master"]["stored"] == "delta"
    assert "v1" not in first["stored"] and is_full(ws.checkpoint("v1")) and is_full(ws.checkpoint("v1") / "master")
    served = AutoModelForCausalLM.from_pretrained(ws.serving / "champion")
    assert os.readlink(ws.serving / "champion") == os.path.join("..", "checkpoints", "v1")
    assert next(served.parameters()).dtype == torch.bfloat16
    exact("v0")

    second = night(2, False)                   # rejected: compacted against the champion v1
    assert second["stored"]["v2"]["stored"] == "delta" and is_delta(ws.checkpoint("v2"))
    assert lin.get_version("v2")["storage"] == "delta" and is_full(ws.checkpoint("v1"))
    exact("v2")

    third = night(3, True)                     # accepted: the replaced champion v1 is compacted now
    assert third["stored"]["v1"]["stored"] == "delta" and third["stored"]["v1"]["master"]["stored"] == "delta"
    assert is_delta(ws.checkpoint("v1")) and is_full(ws.checkpoint("v3")) and lin.get_version("v1")["storage"] == "delta"
    exact("v1")
    exact("v2")                                # its parent is a delta now: a chain of two, still exact
    AutoModelForCausalLM.from_pretrained(ws.serving / "champion")
    assert os.readlink(ws.serving / "latest") == os.path.join("..", "checkpoints", "v3")
    assert apply_storage_policy(lin, cfg, ws.serving)["stored"] == {}, "idempotent: nothing left to do"

    out = rollback(lin, "v3 misbehaves in production")   # champion back to v1, a delta until now
    assert out["to"] == "v1" and out["restored"] == ["v1"] and is_full(ws.checkpoint("v1"))
    assert (ws.checkpoint("v1") / MODEL_FILE).read_bytes() == originals["v1"][0]
    after = apply_storage_policy(lin, cfg, ws.serving)
    assert os.readlink(ws.serving / "champion") == os.path.join("..", "checkpoints", "v1")
    assert is_full(ws.checkpoint("v3")), "v3 is still `latest`: it stays servable"
    assert "v3" not in after["stored"]
    AutoModelForCausalLM.from_pretrained(ws.serving / "champion")
    # the default keeps master weights for the champion and the newest accepted version only
    # (v3 is rolled back now, so v1 is both)
    pruned = apply_storage_policy(lin, CheckpointConfig(), ws.serving)["master_weights_pruned"]
    assert set(pruned) == {"v0", "v2", "v3"} and (ws.checkpoint("v1") / "master").is_dir()
