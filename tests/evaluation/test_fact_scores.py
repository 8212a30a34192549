"""score_facts against a hand computation on tiny real Hugging Face models (random weights)."""

from __future__ import annotations

import pytest
import torch

from lib.evaluation.evaluate import EvalModel
from lib.evaluation.facts import FactScores, normalise_answer, score_facts
from lib.knowledge.facts import FactItem, fact_id, read_facts, write_facts
from tests.hf_models import build_tiny_model


def _item(question: str, answer: str, distractors: tuple[str, ...]) -> FactItem:
    return FactItem(fact_id("S", "r", answer), "doc", "S", "r", answer, "proper", "cue", question, distractors)


def _hand_logprob(em: EvalModel, question: str, option: str) -> float:
    q = em.encode([question.rstrip()])[0]
    c = em.encode([" " + option])[0]
    ids = torch.tensor([[em.separator_id] + q + c])
    with torch.no_grad():
        logp = torch.log_softmax(em.model(input_ids=ids).logits[0].float(), -1)
    start = 1 + len(q)
    return float(sum(logp[start - 1 + k, t] for k, t in enumerate(c)))


def _hand_greedy(em: EvalModel, question: str, n: int) -> str:
    cur = [em.separator_id] + em.encode([question.rstrip()])[0]
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(em.model(input_ids=torch.tensor([cur])).logits[0, -1].argmax())
            out.append(nxt)
            cur.append(nxt)
    return em.tokenizer.decode(out, skip_special_tokens=True)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_scores_match_hand_computation(tmp_path, kind):
    folder = build_tiny_model(kind, tmp_path / kind)
    em = EvalModel.load(folder, device="cpu")
    questions = ["Question: In which city was Mara Quillon born?\nAnswer:",
                 "Where did Teo Varga work? He worked for",
                 "Q: What year did the bridge open?\nA:"]
    options = [("Lisbon", ("Oslo", "Quito", "Hanoi and Hue")), ("Orbis Labs", ("Kettle Works",)),
               ("1987", ("2004", "1911", "1650", "1999"))]
    items = [_item(q, a, d) for q, (a, d) in zip(questions, options)]
    # an item whose answer is the model's own greedy continuation: exact match by construction
    # (random weights: pick a prompt whose continuation has a letter or digit in it)
    for own_q in questions + ["def f(x):\n    return", "import os\nimport", "The answer is", "class A:\n    def"]:
        greedy = _hand_greedy(em, own_q, 3)
        own = normalise_answer(greedy)
        if own:
            break
    assert own, "no prompt gave a continuation with a letter or digit"
    items.append(_item(own_q, greedy.strip(), ("Oslo",)))

    scores = score_facts(em, items, batch_size=3)  # batches of 3 mix items and lengths
    assert isinstance(scores, FactScores) and scores.n == 4
    ranks = []
    for it, row in zip(items, scores.items):
        hand = [_hand_logprob(em, it.question, o) for o in it.options]
        rank = 1 + sum(1 for s in hand[1:] if s >= hand[0])
        assert row["rank"] == rank, (it.question, hand)
        assert row["correct"] == (rank == 1)
        ranks.append(rank)
    assert scores.accuracy == pytest.approx(sum(r == 1 for r in ranks) / 4)
    assert scores.mean_rank == pytest.approx(sum(ranks) / 4)
    assert scores.chance == pytest.approx((1 / 4 + 1 / 2 + 1 / 5 + 1 / 2) / 4)
    assert scores.items[3]["exact"] is True
    longest = max(len(em.encode([" " + x.answer.strip()])[0]) for x in items) + 1
    for it, row in zip(items, scores.items):
        hand_text = _hand_greedy(em, it.question, longest)
        assert row["greedy"] == hand_text, "batched KV-cache greedy must equal the one-row loop"
        assert row["exact"] == normalise_answer(hand_text).startswith(normalise_answer(it.answer))


def test_rank_follows_the_likelihood_not_the_position(tmp_path):
    """Swapping the answer with its best distractor moves the rank: the answer is not favoured."""
    folder = build_tiny_model("gpt2", tmp_path / "g")
    em = EvalModel.load(folder, device="cpu")
    q = "The capital of the made-up land is"
    opts = ["Varnholm", "Quistea", "Bel", "Oro Amarillo"]
    hand = {o: _hand_logprob(em, q, o) for o in opts}
    best, worst = max(opts, key=hand.get), min(opts, key=hand.get)
    good = score_facts(em, [_item(q, best, tuple(o for o in opts if o != best))])
    bad = score_facts(em, [_item(q, worst, tuple(o for o in opts if o != worst))])
    assert good.accuracy == 1.0 and good.items[0]["rank"] == 1
    assert bad.accuracy == 0.0 and bad.items[0]["rank"] == 4 and bad.mean_rank == 4.0


def test_normalise_answer():
    assert normalise_answer("  Lisbon, Portugal. ") == "lisbon, portugal"
    assert normalise_answer("“Orbis  Labs”") == "orbis labs"
    assert normalise_answer(" lisbon and more").startswith(normalise_answer("Lisbon"))


def test_fact_items_round_trip(tmp_path):
    items = [_item("Q?", "Lisbon", ("Oslo", "Quito")), _item("R?", "1987", ())]
    path = write_facts(tmp_path / "knowledge" / "facts.jsonl", items)
    assert read_facts(path) == items
    path.write_text(path.read_text() + '{"id": "x"}\n')
    with pytest.raises(ValueError, match=r"facts.jsonl:3: fact item lacks field"):
        read_facts(path)
