"""lib.training.footprint: the estimate's parts against what torch really keeps, and the refusal's message."""

import pytest
import torch
import torch.nn.functional as F


def _saved_bytes(cfg, batch: int, seq: int, checkpointing: bool = False) -> int:
    """Bytes autograd keeps for the backward pass of one forward (parameters excluded), measured
    with saved_tensors_hooks, unique storages counted once."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).float().train()
    model.config.use_cache = False
    if checkpointing:
        from lib.training.model import enable_activation_checkpointing

        enable_activation_checkpointing(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    x = torch.randint(0, cfg.vocab_size, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=x).logits
        F.cross_entropy(logits.float().view(-1, logits.size(-1)), x.view(-1))
    return sum(seen.values())


def _configs():
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    common = dict(vocab_size=300, hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128)
    return {
        "llama": lambda n: LlamaConfig(num_hidden_layers=n, **common),
        "qwen2": lambda n: Qwen2Config(num_hidden_layers=n, **common),
        "gpt2": lambda n: GPT2Config(vocab_size=300, n_embd=64, n_layer=n, n_head=4, n_positions=128, bos_token_id=0, eos_token_id=0),
    }


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
def test_activation_estimate_matches_what_autograd_keeps_per_block(kind):
    """One transformer block's saved activations (3 blocks minus 1 block, so embeddings and
    logits cancel) equal the estimate's per-token formula: exactly for the gated decoders,
    within 5% for GPT-2 (attention dropout on, as its config ships)."""
    from lib.training.footprint import activation_elements_per_token, model_shape

    make = _configs()[kind]
    batch, seq = 2, 32
    per_block = (_saved_bytes(make(3), batch, seq) - _saved_bytes(make(1), batch, seq)) / 2
    estimate = activation_elements_per_token(model_shape(make(1)), seq) * batch * seq * 4
    assert estimate == pytest.approx(per_block, rel=0.05 if kind == "gpt2" else 1e-9), (estimate, per_block)


def test_estimate_components_parameters_and_checkpointing():
    from transformers import AutoModelForCausalLM

    from lib.config import TrainingConfig
    from lib.training.footprint import GiB, estimate_training_memory

    cfg = _configs()["llama"](2)
    tcfg = TrainingConfig(device_batch_size=4, seq_len=64)
    est = estimate_training_memory(cfg, tcfg, 1, "cpu")
    n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    assert est.parameters == n
    c = est.components
    assert c["weights (fp32)"] == c["gradients (fp32)"] == 4 * n and c["AdamW moments (fp32)"] == 8 * n
    assert "DDP gradient buckets" not in c and "autocast bf16 weights" not in c
    assert c["logits + cross-entropy"] == 4 * 64 * 300 * 12
    ac = estimate_training_memory(cfg, tcfg.model_copy(update={"activation_checkpointing": True}), 1, "cpu")
    assert ac.components["activations"] < c["activations"] and ac.total < est.total
    two = estimate_training_memory(cfg, tcfg, 2, "cuda")
    assert two.components["DDP gradient buckets"] == 4 * n and two.components["autocast bf16 weights"] == 2 * n
    assert two.components["activations"] < c["activations"], "bf16 activations under autocast"
    assert "total per rank" in est.table() and f"{est.total / GiB:8.2f} GiB" in est.table()


def test_check_fits_names_the_knobs_only_when_it_does_not_fit():
    from lib.config import TrainingConfig
    from lib.training.footprint import check_fits, estimate_training_memory

    cfg = _configs()["llama"](2)
    tcfg = TrainingConfig(device_batch_size=8, seq_len=64)
    est = estimate_training_memory(cfg, tcfg, 1, "cpu", runtime_bytes=0)
    assert check_fits(est, est.total) == []
    (problem,) = check_fits(est, est.total - 1, training=tcfg)
    assert "device_batch_size (now 8" in problem and "activation_checkpointing=true" in problem and "seq_len (now 64)" in problem
    (shared,) = check_fits(est, est.total, ranks_sharing=2, training=tcfg)
    assert "× 2 ranks on this machine" in shared
    # when weights + AdamW alone do not fit, smaller batches cannot help: only the device or sharding is offered
    (hopeless,) = check_fits(est, est.components["weights (fp32)"], training=tcfg)
    assert "device_batch_size" not in hopeless and "16 bytes per parameter" in hopeless and "fsdp" in hopeless
