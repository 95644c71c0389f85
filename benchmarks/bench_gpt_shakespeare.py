"""Benchmark: nanoGPT's CPU shakespeare_char recipe through `train experiment=shakespeare_char` (validation loss and
wall time; nanoGPT's README reports a loss of 1.88 in about 3 minutes on a MacBook).

The recipe: 4 layers, 4 heads, 128 dims, block 64, batch 12, 2000 iterations, lr 1e-3 with 100 warm-up steps and
cosine decay to 1e-4, AdamW (0.9, 0.99) with weight decay 0.1 on matrices, no dropout, no biases. Our validation loss
is over the whole held-out 10% (1,742 disjoint 64-character windows) every 250 steps, where nanoGPT averages 20
random batches.

    python benchmarks/bench_gpt_shakespeare.py [--precision fp32|bf16] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_shakespeare_"))
    run = workdir / f"shakespeare_{args.precision}"
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "c4prep.training.cli", "experiment=shakespeare_char",
                             f"trainer.precision={args.precision}", f"trainer.num_threads={args.threads}",
                             f"output_dir={run}", "resume=never"], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(result.stderr[-3000:])
    from c4prep.training.metrics_log import read_metrics

    records = read_metrics(run / "metrics.jsonl")
    validation = {r["step"]: round(r["metrics"]["loss"], 4) for r in records if r["split"] == "validation"}
    train = [r["metrics"] for r in records if r["split"] == "train"]
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
              "precision": args.precision, "wall_seconds": round(seconds, 1),
              "final_validation_loss": validation[max(validation)], "best_validation_loss": min(validation.values()),
              "validation_by_step": validation, "final_train_loss": round(train[-1]["loss"], 4),
              "median_tokens_per_second": sorted(m["tokens_per_second"] for m in train)[len(train) // 2],
              "nanogpt_reference_loss": 1.88}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
