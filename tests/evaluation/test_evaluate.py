"""bits_per_byte, probes and the parent/candidate table, on the tiny random Llama of conftest."""

from __future__ import annotations

import json
import math
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import stdlib_texts
from lib.evaluation.sets import NEW_HELDOUT, NEW_TRAIN, OLD_VAL, run_eval_sets
from lib.evaluation.evaluate import EvalModel, Probe, bits_per_byte, evaluate_pair, read_probes, score_probes


def manual_bpb(model_dir, texts, window):
    """The definition written out: per window, BOS + tokens, summed NLL of every text token."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    nats = 0.0
    for text in texts:
        ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        for i in range(0, len(ids), window - 1):
            x = torch.tensor([[tok.bos_token_id] + ids[i : i + window - 1]])
            with torch.no_grad():
                logits = model(input_ids=x).logits[0, :-1]
            nats += float(torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="sum"))
    return nats / (math.log(2) * sum(len(t.encode()) for t in texts))


@pytest.fixture(scope="module")
def texts():
    return [t[:1500] for t in stdlib_texts(6)] + ["short é ü ✓ text", "x"]


def test_bpb_matches_the_definition(tiny_hf_model, texts):
    got = bits_per_byte(tiny_hf_model, texts, batch_size=3)
    assert got == pytest.approx(manual_bpb(tiny_hf_model, texts, 256), rel=1e-5)
    # A random model over ~1k tokens: about log2(1024) bits per token, several bytes per token.
    assert 0.5 < got < 10


def test_windows_cover_long_texts(tiny_hf_model, texts):
    long_text = "\n".join(stdlib_texts(3))[:8000]
    got = bits_per_byte(tiny_hf_model, [long_text], max_len=64, batch_size=4)
    assert got == pytest.approx(manual_bpb(tiny_hf_model, [long_text], 64), rel=1e-5)
    # A longer window gives more context and a different (not equal) number.
    assert got != pytest.approx(bits_per_byte(tiny_hf_model, [long_text], max_len=256), rel=1e-6)


def test_deterministic_and_independent_of_order_and_batch(tiny_hf_model, texts):
    a = bits_per_byte(tiny_hf_model, texts, batch_size=8)
    assert bits_per_byte(tiny_hf_model, texts, batch_size=8) == a
    assert bits_per_byte(tiny_hf_model, list(reversed(texts)), batch_size=8) == a
    assert bits_per_byte(tiny_hf_model, texts, batch_size=1) == pytest.approx(a, rel=1e-5)


def test_special_token_text_is_scored_as_text(tiny_hf_model):
    em = EvalModel.load(tiny_hf_model)
    ids = em.encode(["before <|eos|> after"])[0]
    assert not set(ids) & em.special_ids
    assert bits_per_byte(tiny_hf_model, ["before <|eos|> after"]) > 0


def test_special_targets_carry_no_loss(tiny_hf_model):
    em = EvalModel.load(tiny_hf_model)
    ids = em.encode(["def f(x):\n    return x\n"])[0]
    plain = em.sum_nats([[em.bos_id] + ids], batch_size=1)
    # An EOS appended as a target must not add loss.
    assert em.sum_nats([[em.bos_id] + ids + [em.tokenizer.eos_id]], batch_size=1) == pytest.approx(plain, rel=1e-6)


def test_training_on_text_lowers_its_bpb(tiny_hf_model, tmp_path, texts):
    """The metric moves the right way when a model really learns the text."""
    before = bits_per_byte(tiny_hf_model, texts[:2])
    tok = AutoTokenizer.from_pretrained(tiny_hf_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_hf_model, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.tensor([[tok.bos_token_id] + tok(texts[0], add_special_tokens=False)["input_ids"][:255]])
    torch.manual_seed(0)
    for _ in range(30):
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    out = tmp_path / "trained"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    after = bits_per_byte(out, texts[:1])
    assert after < 0.7 * bits_per_byte(tiny_hf_model, texts[:1])
    assert before > 0


def test_errors_name_the_problem(tiny_hf_model, tmp_path):
    with pytest.raises(ValueError, match="no text"):
        bits_per_byte(tiny_hf_model, ["", ""])
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        bits_per_byte(tmp_path, ["text"])


def test_probes_exact_match_and_logprob(tiny_hf_model, tmp_path):
    em = EvalModel.load(tiny_hf_model)
    prompt = "import os\nimport sys\n"
    # The model's own greedy continuation is, by construction, an exact match.
    first = score_probes(em, [Probe(prompt, "def")])
    greedy = first["items"][0]["greedy"]
    own = score_probes(em, [Probe(prompt, greedy), Probe(prompt, "\u2603\u2603 snowman")])
    assert own["items"][0]["exact_match"] is True
    assert own["items"][1]["exact_match"] is False
    assert own["exact_match"] == 0.5
    # log p(expected | prompt) written out.
    tok = AutoTokenizer.from_pretrained(tiny_hf_model)
    p, e = tok(prompt, add_special_tokens=False)["input_ids"], tok(greedy, add_special_tokens=False)["input_ids"]
    x = torch.tensor([[tok.bos_token_id] + p + e])
    with torch.no_grad():
        lp = torch.log_softmax(em.model(input_ids=x).logits[0, len(p) : -1], -1)
    assert own["items"][0]["logprob"] == pytest.approx(float(lp.gather(1, torch.tensor(e)[:, None]).sum()), rel=1e-5)
    assert own["items"][0]["logprob"] > own["items"][1]["logprob"]

    path = tmp_path / "probes.jsonl"
    path.write_text(json.dumps({"prompt": prompt, "expected": greedy}) + "\n\n")
    assert read_probes(path) == [Probe(prompt, greedy)]
    path.write_text('{"prompt": "a"}\n')
    with pytest.raises(ValueError, match=r"probes.jsonl:1"):
        read_probes(path)
    with pytest.raises(FileNotFoundError, match="eval.probes"):
        read_probes(tmp_path / "missing.jsonl")


def test_evaluate_pair_same_data_for_both(tiny_hf_model, tmp_path, texts):
    # A candidate that is a real, different model: the parent with one layer's weights scaled.
    cand = tmp_path / "cand"
    shutil.copytree(tiny_hf_model, cand)
    model = AutoModelForCausalLM.from_pretrained(cand, dtype=torch.float32)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(3.0)
    model.save_pretrained(cand)
    table = evaluate_pair(tiny_hf_model, cand, {OLD_VAL: texts[:3], NEW_HELDOUT: texts[3:5], NEW_TRAIN: []},
                          probes=[Probe("import ", "os")])
    assert set(table.candidate) == {OLD_VAL, NEW_HELDOUT, "probes"}
    assert table.parent[OLD_VAL]["bpb"] == pytest.approx(bits_per_byte(tiny_hf_model, texts[:3]), rel=1e-6)
    assert table.candidate[OLD_VAL]["bpb"] == pytest.approx(bits_per_byte(cand, texts[:3]), rel=1e-6)
    row = next(r for r in table.rows() if r["dataset"] == OLD_VAL)
    assert row["relative_change"] == pytest.approx((row["candidate"] - row["parent"]) / row["parent"])
    assert row["docs"] == 3
    assert "| old_val | bpb |" in table.to_markdown()


def test_run_eval_sets_reads_val_heldout_and_curated(workspace):
    val = workspace.corpus_val("stdlib")
    val.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["b", "a"], "text": ["old two", "old one"], "kind": ["code", "code"]}), val / "shard-00000.parquet")
    run = workspace.run("r1").ensure()
    (run.path / "heldout").mkdir()
    pq.write_table(pa.table({"id": ["n2"], "text": ["new held"]}), run.path / "heldout" / "buffer.parquet")
    pq.write_table(pa.table({"id": ["n1", "n2", "n3"], "text": ["new one", "new held", "new three"]}), run.curated / "part-00000.parquet")
    sets = run_eval_sets(workspace, "stdlib", run, max_docs=None)
    assert sets == {OLD_VAL: ["old one", "old two"], NEW_HELDOUT: ["new held"], NEW_TRAIN: ["new one", "new three"]}
    assert run_eval_sets(workspace, "stdlib", run, max_docs=1)[NEW_TRAIN] == ["new one"]
    with pytest.raises(FileNotFoundError, match="workspace.corpus='other'"):
        run_eval_sets(workspace, "other")


def test_the_evaluation_table_gives_fact_shares_and_their_change_in_points():
    from lib.evaluation.evaluate import PairEvaluation

    pair = PairEvaluation(parent={"old_val": {"bpb": 2.0}, "facts:new": {"fact_accuracy": 0.03125, "fact_chance": 0.044, "fact_n": 64}},
                          candidate={"old_val": {"bpb": 1.9}, "facts:new": {"fact_accuracy": 0.34375, "fact_chance": 0.044, "fact_n": 64}})
    md = pair.to_markdown()
    assert "| facts:new | fact_accuracy | 3.1% | 34.4% | +31.2 points |" in md   # was "+1000.00%", a relative change
    assert "| facts:new | fact_n | 64 | 64 |  |" in md and "| old_val | bpb | 2.0000 | 1.9000 | -5.00% |" in md
