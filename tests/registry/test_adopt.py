"""Adopting a user's model (`consolidate init`): every refusal says what to do and writes nothing;
sharded weights become one file bit for bit; the replay corpus is validated file by file and split
deterministically; the document separator follows each family's convention."""

from __future__ import annotations

import hashlib
import json
import shutil
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hf_models import build_tiny_model
from lib.registry.adopt import AdoptionError, adopt, inspect_model, original_lr
from lib.config import load_config
from lib.workspace import Workspace

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _cfg(ws: Path, *extra: str):
    return load_config(preset="tiny", overrides=[f"workspace.root={ws}", "eval.max_docs=4", *extra])


def replay_files(root: Path, n: int = 24) -> Path:
    """A replay corpus of real text: stdlib modules as JSONL, a parquet with another text column, prose."""
    root.mkdir(parents=True, exist_ok=True)
    files = sorted(STDLIB.glob("*.py"))[:n]
    with open(root / "modules.jsonl", "w", encoding="utf-8") as f:
        for p in files[: n // 2]:
            f.write(json.dumps({"id": p.name, "text": p.read_text(encoding="utf-8", errors="replace")[:4000]}) + "\n")
    docs = [p.read_text(encoding="utf-8", errors="replace")[:4000] for p in files[n // 2 :]]
    pq.write_table(pa.table({"body": docs, "id": [p.name for p in files[n // 2 :]]}), root / "more.parquet")
    (root / "notes").mkdir(exist_ok=True)
    (root / "notes" / "readme.md").write_text("# Notes\n\nPlain prose about the corpus, kept as one document.\n" * 10)
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "llama": build_tiny_model("llama", root / "llama"),
        "qwen2": build_tiny_model("qwen2", root / "qwen2", dtype="bfloat16"),
        "gpt2": build_tiny_model("gpt2", root / "gpt2"),
    }


def _nothing_written(ws: Workspace) -> None:
    assert not ws.checkpoint("v0").exists()
    assert not (ws.corpora / "replay").exists()


# -- refusals -------------------------------------------------------------------------------
def test_pickle_only_weights_are_refused_with_the_conversion(models, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(models["llama"], folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(AdoptionError) as err:
        adopt(ws, _cfg(ws.root), folder, [replay_files(tmp_path / "r")], original_lr_value=3e-4)
    msg = str(err.value)
    assert "pytorch_model.bin" in msg and "pickle" in msg and "save_pretrained" in msg and str(folder) in msg
    _nothing_written(ws)


@pytest.mark.parametrize("case, match", [
    ("not_causal", r"BertForMaskedLM.*not a causal language model"),
    ("custom_code", r"custom modelling code"),
    ("no_tokenizer", r"no tokenizer.*tokenizer.json"),
    ("no_config", r"config.json is missing"),
    ("two_files", r"2 \.safetensors files but no model.safetensors.index.json"),
    ("wrong_weights", r"do not match the architecture"),
    ("wrong_shapes", r"do not match the architecture"),
    ("vocab_too_big", r"embeds only"),
])
def test_bad_model_folders_are_refused_naming_the_problem(models, tmp_path, case, match):
    folder = tmp_path / case
    shutil.copytree(models["llama"], folder)
    config = json.loads((folder / "config.json").read_text())
    if case == "not_causal":
        config.update(architectures=["BertForMaskedLM"], model_type="bert")
    elif case == "custom_code":
        config["auto_map"] = {"AutoModelForCausalLM": "modeling_mine.MyModel"}
    elif case == "no_tokenizer":
        (folder / "tokenizer.json").unlink()
    elif case == "no_config":
        (folder / "config.json").unlink()
    elif case == "two_files":
        shutil.copy(folder / "model.safetensors", folder / "extra.safetensors")
        (folder / "model.safetensors").rename(folder / "weights.safetensors")
    elif case == "wrong_weights":
        from safetensors.torch import load_file, save_file

        tensors = load_file(folder / "model.safetensors")
        tensors.pop("model.layers.1.mlp.down_proj.weight")
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    elif case == "wrong_shapes":
        config["intermediate_size"] = 96
    elif case == "vocab_too_big":  # a tokenizer with more ids than the model embeds: not this model's
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.add_tokens([f"<extra_{i}>" for i in range(int(config["vocab_size"]) + 10 - tok.get_vocab_size())])
        tok.save(str(folder / "tokenizer.json"))
    if (folder / "config.json").exists() and case != "no_config":
        (folder / "config.json").write_text(json.dumps(config))
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(AdoptionError, match=match):
        adopt(ws, _cfg(ws.root), folder, [replay_files(tmp_path / "r")], original_lr_value=3e-4, warm=False)
    _nothing_written(ws)


def test_original_lr_is_required_never_guessed(models, tmp_path):
    folder = inspect_model(models["gpt2"])
    with pytest.raises(AdoptionError) as err:
        original_lr(folder, None)
    msg = str(err.value)
    assert "--original-lr" in msg and "typical values" in msg and "meta.json" in msg and "lr_scale" in msg
    with pytest.raises(AdoptionError, match="positive number below 1"):
        original_lr(folder, 3.0)
    # a folder whose meta.json records it (a version of this pipeline, or the user's note) needs no flag
    recorded = tmp_path / "recorded"
    shutil.copytree(models["gpt2"], recorded)
    (recorded / "meta.json").write_text(json.dumps({"original_lr": 6e-4}))
    assert original_lr(inspect_model(recorded), None) == 6e-4
    assert original_lr(inspect_model(recorded), 1e-4) == 1e-4  # the flag wins
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(AdoptionError, match="--original-lr is required"):
        adopt(ws, _cfg(ws.root), models["gpt2"], [replay_files(tmp_path / "r")], warm=False)
    _nothing_written(ws)


def test_a_workspace_adopts_once(models, tmp_path):
    ws = Workspace(tmp_path / "ws")
    cfg = _cfg(ws.root)
    adopt(ws, cfg, models["gpt2"], [replay_files(tmp_path / "r")], original_lr_value=3e-4, warm=False)
    with pytest.raises(AdoptionError, match="already has a lineage"):
        adopt(ws, cfg, models["gpt2"], [tmp_path / "r"], original_lr_value=3e-4, warm=False)


# -- what v0 is -----------------------------------------------------------------------------
def test_sharded_bf16_weights_become_one_file_bit_for_bit(tmp_path):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from lib.registry.lineage import Lineage

    src = build_tiny_model("qwen2", tmp_path / "src", dtype="bfloat16")
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    model.save_pretrained(src, max_shard_size="3MB")  # the real layout of large checkpoints
    (src / "model.safetensors").unlink(missing_ok=True)
    assert (src / "model.safetensors.index.json").is_file() and len(list(src.glob("*.safetensors"))) > 1
    ws = Workspace(tmp_path / "ws")
    out = adopt(ws, _cfg(ws.root), src, [replay_files(tmp_path / "r")], original_lr_value=3e-4, warm=False)
    v0 = Path(out["path"])
    meta = json.loads((v0 / "meta.json").read_text())
    assert meta["digest"] == hashlib.sha256((v0 / "model.safetensors").read_bytes()).hexdigest()
    assert meta["storage_dtype"] == "bfloat16" and json.loads((v0 / "config.json").read_text())["dtype"] == "bfloat16"
    assert meta["architecture"] == "Qwen2ForCausalLM" and meta["original_lr"] == 3e-4
    assert meta["document_separator"] == "<|endoftext|>"  # Qwen2 has no BOS
    shards = {}
    for f in src.glob("model-*.safetensors"):
        with safe_open(f, "pt") as fh:
            shards.update({k: fh.get_tensor(k) for k in fh.keys()})
    with safe_open(v0 / "model.safetensors", "pt") as fh:
        assert set(fh.keys()) == set(shards)
        for k in shards:
            t = fh.get_tensor(k)
            assert t.dtype == torch.bfloat16 and torch.equal(t.view(torch.int16), shards[k].view(torch.int16)), k
    loaded = AutoModelForCausalLM.from_pretrained(v0)
    assert next(loaded.parameters()).dtype == torch.bfloat16
    lin = Lineage(ws.lineage_db)
    assert lin.alias("champion") == "v0" and lin.get_version("v0")["digest"] == meta["digest"]
    assert lin.get_version("v0")["meta"]["architecture"] == "Qwen2ForCausalLM"
    assert lin.corpus("replay")["docs"] == out["corpus"]["docs"]
    assert [h["actor"] for h in lin.alias_history("champion")] == ["adopt"]


# -- the replay corpus ----------------------------------------------------------------------
def _bad_utf8_parquet(path: Path) -> None:
    import numpy as np

    values = [b"fine text", b"fine text", b"\xff\xfe\xfd text"]  # the last is not UTF-8
    offsets = pa.py_buffer(np.cumsum([0] + [len(v) for v in values]).astype(np.int32).tobytes())
    broken = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"".join(values))])
    pq.write_table(pa.table({"text": broken}), path)


def test_replay_files_are_validated_one_by_one_and_split_deterministically(tmp_path):
    from lib.data.replay import build_replay_corpus

    root = replay_files(tmp_path / "r")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (bad / "typed.jsonl").write_text('{"text": "one"}\n{"text": 2}\n')
    (bad / "nojson.jsonl").write_text('{"text": "one"}\nnot json\n')
    pq.write_table(pa.table({"content": ["no text column here"]}), bad / "nocolumn.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3]}), bad / "numbers.parquet")
    (bad / "torn.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    pq.write_table(pa.table({"text": pa.array([None, "  "], pa.string())}), bad / "blank.parquet")
    _bad_utf8_parquet(bad / "utf8.parquet")
    (bad / "image.png").write_bytes(b"\x89PNG")  # not a text type: skipped in a folder, counted
    ws = Workspace(tmp_path / "ws").ensure()
    before = {p: p.read_bytes() for p in bad.iterdir()}
    stats = build_replay_corpus(ws, "replay", [root, bad])
    reasons = {Path(r["file"]).name: r["reason"] for r in stats["rejected"]}
    assert reasons == {
        "more.parquet": "no `text` column (columns: body, id); pass --text-column",
        "latin1.txt": reasons["latin1.txt"], "typed.jsonl": "line 2: `text` is int, expected a string",
        "nojson.jsonl": reasons["nojson.jsonl"], "nocolumn.parquet": reasons["nocolumn.parquet"],
        "numbers.parquet": "column `text` has type int64, expected strings", "torn.parquet": reasons["torn.parquet"],
        "blank.parquet": "no documents (every text is empty, blank or null)", "utf8.parquet": reasons["utf8.parquet"],
    }
    assert reasons["latin1.txt"].startswith("not valid UTF-8")
    assert reasons["nojson.jsonl"].startswith("line 2: not valid JSON")
    assert reasons["torn.parquet"].startswith("not a readable parquet file")
    assert "cannot be read" in reasons["utf8.parquet"]
    assert stats["skipped"] == {"unsupported_files": 1}
    assert {p: p.read_bytes() for p in bad.iterdir()} == before  # the user's files are never moved or changed
    # the good files: 12 JSONL modules and the markdown note (one prose document)
    train = pq.read_table(ws.corpus_train("replay")).to_pylist()
    val = pq.read_table(ws.corpus_val("replay")).to_pylist()
    assert stats["docs"] == len(train) + len(val) == 13
    assert {r["kind"] for r in train + val if r["id"] == "notes/readme.md"} == {"prose"}
    assert len(val) >= 3  # a small corpus still gets an old_val (at most a quarter)
    # the same inputs give the same split and the same bytes
    again = build_replay_corpus(ws, "replay", [root, bad])
    assert again["content_hash"] == stats["content_hash"]
    # another column name for parquet (and JSONL keys)
    body = build_replay_corpus(ws, "body", [root / "more.parquet"], text_column="body")
    assert body["docs"] == 12 and not body["rejected"]


def test_replay_val_files_are_the_validation_split(tmp_path):
    from lib.data.replay import build_replay_corpus

    root = replay_files(tmp_path / "r")
    ws = Workspace(tmp_path / "ws").ensure()
    stats = build_replay_corpus(ws, "replay", [root / "modules.jsonl"], val_paths=[root / "notes"])
    val = pq.read_table(ws.corpus_val("replay")).to_pylist()
    assert [r["id"] for r in val] == ["readme.md"] and stats["val_docs"] == 1 and stats["train_docs"] == 12
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"text": ""}\n')
    with pytest.raises(ValueError, match="no usable training documents.*blank.jsonl: no documents"):
        build_replay_corpus(ws, "empty", [blank], val_paths=[root / "notes"])
    assert not (ws.corpora / "empty").exists()  # nothing half-built is left


# -- the document separator -----------------------------------------------------------------
def test_each_family_packs_with_its_own_document_separator(models, tmp_path):
    from lib.data.tokenizer import TokenizerError, load_tokenizer, train_bpe

    assert load_tokenizer(models["llama"]).separator() == (load_tokenizer(models["llama"]).bos_id, "<|begin_of_text|>")
    for kind in ("qwen2", "gpt2"):
        tok = load_tokenizer(models[kind])
        assert tok.separator()[1] == "<|endoftext|>", kind
    qwen = load_tokenizer(models["qwen2"])
    assert qwen.bos_id is None and qwen.add_bos is False and qwen.vocab_size > 65536
    demo = load_tokenizer(train_bpe([p.read_text() for p in sorted(STDLIB.glob("*.py"))[:20]], 400, tmp_path / "demo"))
    assert demo.separator()[1] == "<|bos|>"  # the demo's own BOS
    assert qwen.separator("eos")[1] == "<|im_end|>" and qwen.separator("<|im_start|>")[1] == "<|im_start|>"
    with pytest.raises(TokenizerError, match="has no BOS token"):
        qwen.separator("bos")
    with pytest.raises(TokenizerError, match="not a token"):
        qwen.separator("<|nope|>")
    # a version records its separator, and auto keeps it (a lineage never changes convention)
    recorded = tmp_path / "recorded"
    shutil.copytree(models["gpt2"], recorded)
    eos = load_tokenizer(recorded).eos_id
    (recorded / "meta.json").write_text(json.dumps({"document_separator": "<|endoftext|>"}))
    assert load_tokenizer(recorded).separator() == (eos, "<|endoftext|>")


def test_qwen2_data_is_uint32_and_rows_start_with_endoftext(models, tmp_path):
    import numpy as np

    from lib.config import SamplingConfig, SourceConfig
    from lib.data.loader import TrainLoader
    from lib.data.sampling import prepare_training_data
    from lib.data.shards import read_shard
    from lib.data.tokenizer import load_tokenizer

    root = replay_files(tmp_path / "r")
    old = tmp_path / "old"
    old.mkdir()
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(12)],
                             "text": [p.read_text()[:3000] for p in sorted(STDLIB.glob("*.py"))[:12]]}), old / "a.parquet")
    src = [SourceConfig(name="old", path=old, weight=1.0, kind="corpus")]
    data = prepare_training_data(src, models["qwen2"], tmp_path / "data", token_budget=4096, sampling=SamplingConfig(),
                                 seq_len=64, workers=1)
    tok = load_tokenizer(models["qwen2"])
    assert not tok.has_fim and data["fim"]["enabled"] is False
    assert [n for n in data["notes"] if n.startswith("FIM is off: the tokenizer")] and not data["warnings"]
    assert data["separator_token"] == "<|endoftext|>" and data["separator_id"] == tok.token_id("<|endoftext|>")
    tokens, _ = read_shard(tmp_path / "data" / "shards" / "old" / "shard-00000")
    assert tokens.dtype == np.uint32 and int(tokens.max()) > 65535  # ids above uint16 survive
    x, y, _ = TrainLoader(tmp_path / "data", 4, 64).next_batch()
    assert (x[:, 0] == data["separator_id"]).all()
    del root


# -- the trained mix --------------------------------------------------------------------------
def test_trained_token_ratio_is_the_configured_one(tmp_path):
    """Short new documents against long corpus documents: best-fit alone trains the long pieces
    first (a 0.5 mix trained as ~0.25 over a short night); the planner keeps the manifest's mix."""
    from lib.config import SamplingConfig, SourceConfig
    from lib.data.loader import TrainLoader
    from lib.data.sampling import prepare_training_data
    from lib.data.tokenizer import train_bpe

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(STDLIB.glob("*.py"))[:60]]
    tok = train_bpe(texts, 512, tmp_path / "tok")
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    pq.write_table(pa.table({"id": [f"o{i}" for i in range(40)], "text": [t[:20000] for t in texts[:40]]}), old / "a.parquet")
    short = [line for t in texts[40:] for line in t.split("\n\n") if 80 < len(line) < 400][:300]
    pq.write_table(pa.table({"id": [f"n{i}" for i in range(len(short))], "text": short}), new / "a.parquet")
    for ratio in (0.5, 0.25):
        sources = [SourceConfig(name="old", path=old, weight=1 - ratio, kind="corpus"),
                   SourceConfig(name="new", path=new, weight=ratio, kind="buffer")]
        out = tmp_path / f"data{ratio}"
        prepare_training_data(sources, tok, out, token_budget=32 * 8 * 256, sampling=SamplingConfig(heldout_fraction=0.0, fim_rate_code=0),
                              seq_len=256, workers=1)
        loader = TrainLoader(out, 8, 256)
        seen: dict[str, int] = {}
        for _ in range(32):  # a short night: 32 steps of 8 rows
            for name, n in loader.next_batch()[2].items():
                seen[name] = seen.get(name, 0) + n
        share = seen["new"] / sum(seen.values())
        assert share == pytest.approx(ratio, abs=0.02), (ratio, seen)
