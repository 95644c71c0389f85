"""Benchmark: generation speed of a randomly initialised GPT or T5 (greedy, seeded), for A/B runs of the code.

Prints one JSON line: the model, the shapes, the seconds `generate` took (after one untimed warm-up call) and a
SHA-256 of the generated ids, so that two versions of the code can be compared for speed and for the same output.

    python benchmarks/bench_generation.py --model t5_small --batch 8 --prompt-length 128 --new-tokens 64
    python benchmarks/bench_generation.py --model gpt_a5 --batch 256 --prompt-length 60 --new-tokens 32
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time

import torch

from c4prep.training.models.gpt import GPT, GPT_SIZES, gpt_config
from c4prep.training.models.t5 import SIZES, T5, t5_config


def generator_under_test(name: str, vocab_size: int, batch: int, prompt_length: int, new_tokens: int):
    """A call that generates ``new_tokens`` ids after each of ``batch`` random prompts of ``prompt_length`` ids."""
    prompts = torch.randint(2, vocab_size, (batch, prompt_length), generator=torch.Generator().manual_seed(1))
    if name in GPT_SIZES:
        model = GPT(gpt_config(name, vocab_size)).eval()
        return lambda: torch.stack(model.generate(list(prompts), new_tokens))
    model = T5(t5_config(name, vocab_size)).eval()
    return lambda: model.generate(prompts, new_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=[*GPT_SIZES, *SIZES])
    parser.add_argument("--vocab-size", type=int, default=0, help="default: 256 for a GPT, 32,100 for T5")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab_size = args.vocab_size or (256 if args.model in GPT_SIZES else 32_100)
    generate = generator_under_test(args.model, vocab_size, args.batch, args.prompt_length, args.new_tokens)
    generate()
    started = time.perf_counter()
    ids = generate()
    seconds = time.perf_counter() - started
    print(json.dumps({"model": args.model, "batch": args.batch, "prompt_length": args.prompt_length,
                      "new_tokens": args.new_tokens, "threads": args.threads, "seconds": round(seconds, 3),
                      "generated_shape": list(ids.shape),
                      "ids_sha256": hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]}))


if __name__ == "__main__":
    main()
