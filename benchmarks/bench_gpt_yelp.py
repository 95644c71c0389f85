"""Benchmark: GPT-1 fine-tuning on Yelp short-review sentiment with and without generative pre-training, and with
and without the auxiliary LM loss (lambda 0.5 vs 0).

Every stage is the real CLI:
1. The Yelp dev split's sentences (both labels, file order, 20 sentences per document; the last 5% of documents
   held out for validation) are written as document shards. The test split, where the classifier is scored, is
   never used for pre-training.
2. `c4prep vocab` (SentencePiece unigram, --vocab-size) and `c4prep tokenize` on those shards.
3. `train model=gpt_nano objective=lm` on the token shards: LM pre-training (4 layers x 128, block 64).
4. `train stage=finetune data=yelp_sentiment` for each (pre-trained or fresh) x (lambda 0.5 or 0) x seed: a linear
   head on the extract token, data.train_per_label labelled sentences per label from dev, accuracy on a fixed
   balanced sample of data.eval_per_label per label from test. Every arm uses the same optimizer, schedule and
   steps; the fresh model has the pre-trained one's architecture and vocabulary.

    python benchmarks/bench_gpt_yelp.py [--workdir DIR] [--pretrain-steps 1500] [--finetune-steps 300]
                                        [--train-per-label 500] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path
from typing import Any

from document_shards import write_document_shards
from harness import run_module

YELP = Path(__file__).resolve().parents[2] / "shared" / "data" / "yelp_short_shen"
SENTENCES_PER_DOCUMENT = 20
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.device=cpu", "trainer.num_threads=2",
         "resume=never"]


def yelp_documents(output: Path) -> int:
    """The dev split's sentences as documents (train: the first 95%, validation: the rest)."""
    sentences = [line.strip() for label in (0, 1)
                 for line in (YELP / f"sentiment.dev.{label}").read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = ["\n".join(sentences[i:i + SENTENCES_PER_DOCUMENT])
             for i in range(0, len(sentences), SENTENCES_PER_DOCUMENT)]
    cut = len(texts) * 95 // 100
    return write_document_shards({"train": texts[:cut], "validation": texts[cut:]}, output, 2, "yelp://dev",
                                 {"source": "yelp_short_shen sentiment.dev.0 + sentiment.dev.1"})


def finetune(workdir: Path, name: str, vocab: Path, init_from: Path | None, lm_weight: float, seed: int,
             args: argparse.Namespace) -> dict[str, Any]:
    run = workdir / name
    seconds, _ = run_module(
        "c4prep.training.cli", "stage=finetune", "data=yelp_sentiment", "model=gpt_nano", f"data.vocab={vocab}",
        f"init_from={init_from if init_from else 'null'}", f"data.lm_weight={lm_weight}",
        f"data.train_per_label={args.train_per_label}", f"seed={seed}", "optimizer=adamw",
        f"optimizer.lr={args.finetune_lr}", "schedule=linear",
        f"schedule.options.warmup_steps={args.finetune_steps // 10}", f"trainer.max_steps={args.finetune_steps}",
        "trainer.global_batch_size=32", "trainer.micro_batch_size=32",
        f"trainer.eval_every={args.finetune_steps}", "trainer.eval_batches=0", "trainer.checkpoint_every=0",
        f"trainer.log_every={args.finetune_steps}", f"output_dir={run}", *QUIET)
    from c4prep.training.metrics_log import read_metrics

    (validation,) = [r for r in read_metrics(run / "metrics.jsonl") if r["split"] == "validation"]
    return {"run": name, "pretrained": init_from is not None, "lm_weight": lm_weight, "seed": seed,
            "accuracy": validation["metrics"]["accuracy"], "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("yelp_runs"))
    parser.add_argument("--vocab-size", type=int, default=4000, help="the dev split allows at most 4,434 pieces")
    parser.add_argument("--pretrain-steps", type=int, default=1500)
    parser.add_argument("--finetune-steps", type=int, default=300)
    parser.add_argument("--finetune-lr", type=float, default=5e-4)
    parser.add_argument("--train-per-label", type=int, default=500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
                              "settings": {k: str(v) for k, v in vars(args).items()}}
    report["documents"] = yelp_documents(work / "documents")
    report["vocab_seconds"], _ = run_module("c4prep", "vocab", "--input", str(work / "documents"), "--output",
                                         str(work / "vocab"), "--vocab-size", str(args.vocab_size))
    report["tokenize_seconds"], _ = run_module("c4prep", "tokenize", "--input", str(work / "documents"), "--vocab",
                                            str(work / "vocab"), "--output", str(work / "tokens"))
    pretrained = work / "gpt_lm"
    seconds, stdout = run_module(
        "c4prep.training.cli", "model=gpt_nano", "objective=lm", "objective.targets_length=65",
        f"data.tokens={work / 'tokens'}", "optimizer=adamw_nanogpt", "optimizer.lr=3e-3", "schedule=cosine",
        f"schedule.options.warmup_steps={min(100, args.pretrain_steps // 10)}",
        "schedule.options.final_lr_fraction=0.1",
        f"trainer.max_steps={args.pretrain_steps}", "trainer.global_batch_size=32", "trainer.micro_batch_size=32",
        f"trainer.eval_every={args.pretrain_steps}", "trainer.eval_batches=0", "trainer.log_every=100",
        f"trainer.checkpoint_every={args.pretrain_steps}", f"output_dir={pretrained}", *QUIET)
    report["pretrain"] = {"seconds": round(seconds, 1), "summary": json.loads(stdout.strip().splitlines()[-1])}
    runs = [finetune(work, f"ft_{'pre' if init else 'fresh'}_lm{weight}_seed{seed}", work / "vocab", init, weight,
                     seed, args)
            for init in (pretrained, None) for weight in (0.5, 0.0) for seed in args.seeds]
    report["finetune"] = runs
    (work / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print("\n| GPT | auxiliary LM loss | accuracy per seed | mean |\n|---|---|---|---:|")
    for init in (True, False):
        for weight in (0.5, 0.0):
            accuracies = [r["accuracy"] for r in runs if r["pretrained"] == init and r["lm_weight"] == weight]
            print(f"| {'pre-trained' if init else 'no pre-training'} | lambda {weight} | "
                  f"{', '.join(f'{a:.3f}' for a in accuracies)} | {statistics.mean(accuracies):.3f} |")


if __name__ == "__main__":
    main()
