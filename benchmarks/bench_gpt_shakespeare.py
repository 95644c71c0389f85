"""Benchmark: nanoGPT's CPU shakespeare_char recipe through `train experiment=shakespeare_char` (validation loss and
wall time; nanoGPT's README reports a loss of 1.88 in about 3 minutes on a MacBook).

The recipe: 4 layers, 4 heads, 128 dims, block 64, batch 12, 2000 iterations, 100 warm-up steps and cosine decay to
a tenth of the peak learning rate, AdamW (0.9, 0.99) with weight decay 0.1 on matrices, no dropout, no biases,
GPT-2's scaled init of the residual projections. nanoGPT's peak rate is 1e-3; the preset uses 3e-3, chosen with
this sweep (`--lrs`). Validation loss is over the whole held-out 10% (1,742 disjoint 64-character windows) every 250
steps, where nanoGPT averages 20 random batches.

Runs execute one after another (or ``--parallel`` at a time, each with ``--threads`` threads).

    python benchmarks/bench_gpt_shakespeare.py [--lrs 1e-3 3e-3] [--seeds 0 1 2] [--precision fp32|bf16]
                                               [--threads 2] [--parallel 1] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import run_module

NANOGPT_REFERENCE_LOSS = 1.88


def run(workdir: Path, lr: str, seed: int, precision: str, threads: int) -> dict:
    """One `train experiment=shakespeare_char` run; its losses and wall time."""
    from c4prep.training.metrics_log import read_metrics

    folder = workdir / f"shakespeare_{precision}_lr{lr}_seed{seed}"
    seconds, _ = run_module("c4prep.training.cli", "experiment=shakespeare_char", f"optimizer.lr={lr}", f"seed={seed}",
                            "trainer.device=cpu", f"trainer.precision={precision}", f"trainer.num_threads={threads}",
                            f"output_dir={folder}", "resume=never", "trainer.progress=false", threads=threads)
    records = read_metrics(folder / "metrics.jsonl")
    validation = {r["step"]: round(r["metrics"]["loss"], 4) for r in records if r["split"] == "validation"}
    train = [r["metrics"] for r in records if r["split"] == "train"]
    return {"lr": lr, "seed": seed, "wall_seconds": round(seconds, 1),
            "final_validation_loss": validation[max(validation)], "validation_by_step": validation,
            "final_train_loss": round(train[-1]["loss"], 4),
            "median_tokens_per_second": round(statistics.median(m["tokens_per_second"] for m in train))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", nargs="+", default=["3e-3"], help="peak learning rates (the preset's is 3e-3)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_shakespeare_"))
    grid = [(lr, seed) for lr in args.lrs for seed in args.seeds]
    with ThreadPoolExecutor(args.parallel) as pool:
        runs = list(pool.map(lambda job: run(workdir, *job, args.precision, args.threads), grid))
    print(json.dumps({"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
                      "precision": args.precision, "threads": args.threads, "parallel": args.parallel,
                      "runs": runs}, indent=2))
    print(f"\n| peak lr | validation loss per seed ({', '.join(map(str, args.seeds))}) | mean | wall s per run | "
          f"vs nanoGPT {NANOGPT_REFERENCE_LOSS} |\n|---|---|---:|---|---|")
    for lr in args.lrs:
        mine = [r for r in runs if r["lr"] == lr]
        losses = [r["final_validation_loss"] for r in mine]
        mean = statistics.mean(losses)
        print(f"| {lr} | {', '.join(f'{x:.3f}' for x in losses)} | {mean:.3f} | "
              f"{', '.join(str(r['wall_seconds']) for r in mine)} | "
              f"{'met' if mean <= NANOGPT_REFERENCE_LOSS else 'not met'} |")


if __name__ == "__main__":
    main()
