"""A rank of test_cuda_readiness.py's 2-process gloo runs (started by torchrun); each rank writes its JSON lines to $READINESS_OUT/rank-R.jsonl.

  python -m torch.distributed.run --standalone --nproc-per-node=2 tests/cuda_readiness_worker.py MODE ...
  pause TIMEOUT_S SLEEP_S : lib.training.distributed.Dist with timeout_s=TIMEOUT_S; rank 0 works alone for
                           SLEEP_S (as it does writing a snapshot) while rank 1 waits at the barrier
  fsdp                  : a tiny Llama sharded by lib.training.distributed.prepare_model (training.device=cpu);
                           reports the device and mesh device of every parameter
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def report(record: dict) -> None:
    """One JSON line into this rank's own file under $READINESS_OUT (the ranks share torchrun's
    stdout, where two lines can run together)."""
    with open(Path(os.environ["READINESS_OUT"]) / f"rank-{os.environ['RANK']}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def pause(timeout_s: float, sleep_s: float) -> None:
    import torch

    from lib.training.distributed import Dist

    d = Dist("cpu", timeout_s=timeout_s)
    import torch.distributed as dist

    pg_timeout = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout
    report({"rank": d.rank, "pg_timeout_s": pg_timeout.total_seconds()})
    if d.is_main:
        time.sleep(sleep_s)
    t0 = time.perf_counter()
    d.barrier()
    report({"rank": d.rank, "waited_s": round(time.perf_counter() - t0, 2), "passed": True})
    d.close()


def fsdp() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lib.config import TrainingConfig
    from lib.training.distributed import Dist, prepare_model

    d = Dist("cpu", timeout_s=60)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=32)
    model = LlamaForCausalLM(cfg).float()
    prepare_model(model, TrainingConfig(parallelism="fsdp", device="cpu", compile="off", device_batch_size=1), d)
    rows = [{"name": n, "device": p.device.type, "mesh": p.device_mesh.device_type if hasattr(p, "device_mesh") else None}
            for n, p in model.named_parameters()]
    report({"rank": d.rank, "params": rows})
    d.close()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "pause":
        pause(float(sys.argv[2]), float(sys.argv[3]))
    elif mode == "fsdp":
        fsdp()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
