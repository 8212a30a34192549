"""A rank of test_cuda_readiness.py's 2-process gloo runs (started by torchrun).

  python -m torch.distributed.run --standalone --nproc-per-node=2 tests/cuda_readiness_worker.py MODE ...
  pause TIMEOUT_S SLEEP_S : lib.distributed.Dist with timeout_s=TIMEOUT_S; rank 0 works alone for
                           SLEEP_S (as it does writing a snapshot) while rank 1 waits at the barrier
  fsdp                  : a tiny Llama sharded by lib.distributed.prepare_model (training.device=cpu);
                           prints the device and mesh device of every parameter
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pause(timeout_s: float, sleep_s: float) -> None:
    import torch

    from lib.distributed import Dist

    d = Dist("cpu", timeout_s=timeout_s)
    import torch.distributed as dist

    pg_timeout = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout
    print(json.dumps({"rank": d.rank, "pg_timeout_s": pg_timeout.total_seconds()}), flush=True)
    if d.is_main:
        time.sleep(sleep_s)
    t0 = time.perf_counter()
    d.barrier()
    print(json.dumps({"rank": d.rank, "waited_s": round(time.perf_counter() - t0, 2), "passed": True}), flush=True)
    d.close()


def fsdp() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lib.config import TrainingConfig
    from lib.distributed import Dist, prepare_model

    d = Dist("cpu", timeout_s=60)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=32)
    model = LlamaForCausalLM(cfg).float()
    prepare_model(model, TrainingConfig(parallelism="fsdp", device="cpu", compile="off", device_batch_size=1), d)
    rows = [{"name": n, "device": p.device.type, "mesh": p.device_mesh.device_type if hasattr(p, "device_mesh") else None}
            for n, p in model.named_parameters()]
    print(json.dumps({"rank": d.rank, "params": rows}), flush=True)
    d.close()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "pause":
        pause(float(sys.argv[2]), float(sys.argv[3]))
    elif mode == "fsdp":
        fsdp()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
