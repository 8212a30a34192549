"""Run under torchrun by test_train_fsdp: shard PARENT over the ranks as the trainer does
(lib.training.distributed.prepare_model), take one AdamW step, then write OUT/expected.safetensors (the
sharded fp32 weights, each assembled from its shards) and, through lib.training.distributed.gather_for_storage
and lib.checkpoints.checkpoint.write_version, the version OUT/v1 in the parent's dtype with its master/."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from lib.checkpoints.checkpoint import storage_dtype, write_version
from lib.config import load_config
from lib.training.distributed import Dist, gather_for_storage, prepare_model
from lib.training.model import load_model

parent, out = Path(sys.argv[1]), Path(sys.argv[2])
d = Dist("cpu")
tcfg = load_config(preset="tiny", overrides=["training.parallelism=fsdp", "training.compile=false"]).training
model = load_model(parent)
model.config.use_cache = False
step_model, _ = prepare_model(model, tcfg, d)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
torch.manual_seed(d.rank)
x = torch.randint(0, model.config.vocab_size, (2, 16))
logits = step_model(input_ids=x).logits
F.cross_entropy(logits.float().view(-1, logits.size(-1)), x.view(-1)).backward()
opt.step()

expected = {name: t.full_tensor().detach().clone() for name, t in model.state_dict().items()}  # a collective
plain = gather_for_storage(model, d)
if d.is_main:
    from safetensors.torch import save_file

    save_file(expected, str(out / "expected.safetensors"))
    write_version(out / "v1", plain, tokenizer_dir=parent, meta={"test": True}, dtype=storage_dtype("auto", parent),
                  rounding="stochastic", seed=1, master=True)
d.barrier()
d.close()
