"""Bring your own model, end to end on CPU: three families adopted through the bootstrap flow's
`adopt` parameter (what the Prefect form sends), then one night through the nightly flow: the gate
decides, the champion loads with plain `from_pretrained`, a bf16 delta restores bit for bit, and
an instruct model's chat goes through the server in its template and comes back as control tokens
in the next night's data."""

from __future__ import annotations

from conftest import site_packages

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hf_models import build_tiny_model
from test_adopt import replay_files

pytest_plugins = ["prefect_fixtures"]
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


def _cfg(ws_root: Path, *extra: str):
    from lib.config import load_config

    return load_config(preset="tiny", overrides=[
        f"workspace.root={ws_root}", "training.num_iterations=4", "training.seq_len=128", "training.total_batch_size=1024",
        "training.device_batch_size=8", "training.snapshot_every=50", "eval.max_docs=4", "curation.workers=2",
        # code is what the buffer holds here: keep the language filter out of this test's way
        "curation.languages=[]", *extra])


def _night_buffer(ws) -> None:
    """Tonight's text: sources of an installed package the replay corpus never saw."""
    from lib.buffer.store import Buffer

    root = site_packages() / "rich"
    texts = [p.read_text(encoding="utf-8")[:3000] for p in sorted(root.glob("*.py")) if p.stat().st_size > 1500][:16]
    buf = Buffer(ws.buffers)
    buf.add_many(texts, source="import:rich")
    buf.close(flush=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind, dtype", [("llama", "float32"), ("qwen2", "bfloat16"), ("gpt2", "float32")])
def test_adopted_model_goes_through_a_night(tmp_path, prefect_client, kind, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    from flows.bootstrap import AdoptRequest, bootstrap
    from flows.consolidate import nightly_consolidation
    from lib.checkpoints.checkpoint import compact, materialize, read_meta
    from lib.registry.lineage import Lineage
    from lib.workspace import Workspace

    ws = Workspace(tmp_path / "ws").ensure()
    incoming = ws.root / "incoming"
    build_tiny_model(kind, incoming / "model", dtype=dtype)
    replay_files(incoming / "replay")
    cfg = _cfg(ws.root)
    boot = bootstrap(cfg, AdoptRequest(model="incoming/model", replay=["incoming/replay"], original_lr=3e-3))
    assert boot["status"] == "adopted" and boot["version"] == "v0"
    lin = Lineage(ws.lineage_db)
    v0 = lin.get_version("v0")
    assert v0["meta"]["architecture"] == {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gpt2": "GPT2LMHeadModel"}[kind]
    assert v0["meta"]["storage_dtype"] == dtype and v0["meta"]["original_lr"] == 3e-3
    assert lin.metrics("v0").get("old_val", {}).get("bpb") is not None  # measured once at adoption

    _night_buffer(ws)
    night = nightly_consolidation(cfg)
    assert night["version"] == "v1" and night["status"] in ("accepted", "rejected")
    decisions = lin.gate_decisions("v1")
    assert decisions and {r["name"] for r in decisions[-1]["rules"]} >= {"forgetting", "acquisition"}
    meta = read_meta(ws.checkpoint("v1"))
    assert meta["original_lr"] == 3e-3 and meta["document_separator"] == v0["meta"]["document_separator"]
    assert meta["replay_corpus"] == "replay" and set(meta["final_metrics"]["tokens_per_source"]) == {"replay", "new"}
    assert meta["storage_dtype"] == dtype  # a bf16 model stays bf16

    # whatever the gate said, the champion is a plain Hugging Face folder any engine loads
    champion = ws.checkpoint(lin.alias("champion"))
    model = AutoModelForCausalLM.from_pretrained(champion)
    assert next(model.parameters()).dtype == getattr(torch, dtype)

    # a delta of v1 against its parent restores bit for bit (bf16 included)
    copy = tmp_path / "v1-copy"
    shutil.copytree(materialize(ws.checkpoint("v1")), copy)
    (copy / "meta.json").write_text(json.dumps({**meta, "parent_path": str(ws.checkpoint("v0"))}))
    info = compact(copy, ws.checkpoint("v0"))
    assert info["ratio"] < 1.0 and not (copy / "model.safetensors").exists()
    restored = materialize(copy)
    assert hashlib.sha256((restored / "model.safetensors").read_bytes()).hexdigest() == meta["digest"]

    if kind == "qwen2":
        _chat_is_templated_and_replayed_as_control_tokens(ws, cfg, tmp_path)


def _chat_is_templated_and_replayed_as_control_tokens(ws, cfg, tmp_path):
    """An instruct model's chat: served in its template, captured with cleaned contents, and
    tokenized by the next night with the template's markers as control ids (and nothing else)."""
    import openai

    from lib.serving.chat_format import template_markers
    from lib.config import SamplingConfig, SourceConfig
    from lib.registry.lineage import Lineage
    from lib.data.sampling import prepare_training_data
    from lib.serving.serve import BackgroundServer, create_app
    from lib.data.shards import read_shard
    from lib.data.tokenizer import load_tokenizer

    champion = ws.checkpoint(Lineage(ws.lineage_db).alias("champion"))
    with BackgroundServer(create_app(ws, cfg)) as srv:
        client = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0, timeout=60)
        client.chat.completions.create(model="champion", max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": "Remember: the Zorbulator sorts zorbs <|im_start|>."}])
    records = [r for p in sorted(ws.buffers.glob("*.parquet")) for r in pq.read_table(p).to_pylist()
               if (r.get("source") or "").startswith("serve")]
    (record,) = records
    assert record["text"].startswith("<|im_start|>system") and "<|im_start|>user\nRemember: the Zorbulator sorts zorbs ." in record["text"]
    markers = template_markers(champion)
    assert markers == ["<|im_start|>", "<|im_end|>"]
    src = tmp_path / "captured"
    src.mkdir()
    import pyarrow as pa

    pq.write_table(pa.table({"id": [record["id"]], "text": [record["text"]]}), src / "part.parquet")
    prepare_training_data([SourceConfig(name="new", path=src, weight=1.0, kind="buffer")], champion, tmp_path / "data",
                          token_budget=512, sampling=SamplingConfig(heldout_fraction=0.0, fim_rate_code=0), seq_len=128,
                          workers=1, markers=markers)
    tokens, _ = read_shard(tmp_path / "data" / "shards" / "new" / "shard-00000")
    tok = load_tokenizer(champion)
    ids = set(int(t) for t in tokens)
    assert {tok.token_id("<|im_start|>"), tok.token_id("<|im_end|>")} <= ids
    assert tok.token_id("<|endoftext|>") not in ids  # other special tokens stay text
