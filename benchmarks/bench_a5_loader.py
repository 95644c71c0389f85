"""Benchmark: how long one loader worker takes to build an A5 pretraining micro-batch, for A/B runs of the code.

Builds the micro-batches of the first ``--batches`` steps of ``experiment=cs224n_a5_pretrain`` (batch 128, seed 0,
one rank) as a data-loader worker does (``RowBatches.micro_batch``), padded and re-packed (``data.pack``), after one
untimed batch. Then the time the training process takes to receive a micro-batch from one loader worker
(``make_loader(stream, 1)``; the worker is kept ahead by a 12 ms pause before each ``next``, so only the hand-over is
timed). Prints one JSON line per layout: the median and mean milliseconds a micro-batch, the median milliseconds to
receive one, and a SHA-256 of every batch's tensors (names, dtypes, shapes, bytes), so that two versions of the code
can be compared for speed and for the same rows.

    python benchmarks/bench_a5_loader.py [--batches 400] [--received 200] [--corpus ../shared/data/cs224n_a5/wiki.txt]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from pathlib import Path

from c4prep.training.data.batches import BatchPlan, make_loader
from c4prep.training.data.row_batches import RowBatches, RowSet
from c4prep.training.experiments.cs224n_a5.char_corruption import CharCorruptionRows

BATCH = 128
PACK_LENGTH, PACKED_ROW_MULTIPLE = 127, 8  # the recipe's data.pack_length; rows in multiples of 8 (CUDA graphs)
WORKER_AHEAD_S = 0.012  # a pause before each receive, three times a micro-batch's build: the worker is ready


def received_ms(stream: RowBatches, batches: int) -> float:
    """Median milliseconds the training process takes to receive one of ``stream``'s micro-batches from a worker."""
    received = iter(make_loader(stream, 1))
    next(received)
    seconds = []
    for _ in range(batches):
        time.sleep(WORKER_AHEAD_S)
        start = time.perf_counter()
        next(received)
        seconds.append(time.perf_counter() - start)
    return round(1000 * statistics.median(seconds), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(os.environ.get("C4PREP_SHARED_DATA", "../shared/data"))
    parser.add_argument("--corpus", type=Path, default=shared / "cs224n_a5" / "wiki.txt")
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--received", type=int, default=200, help="micro-batches received from a worker")
    args = parser.parse_args()
    rows = CharCorruptionRows.from_file(args.corpus, block_size=128, seed=0)
    plan = BatchPlan(len(rows), BATCH, 1, BATCH, seed=0, drop_last=False)
    for pack_length in (None, PACK_LENGTH):
        stream = RowBatches(RowSet(rows, len(rows), "a5"), plan, 0, pack_length=pack_length,
                            packed_row_multiple=PACKED_ROW_MULTIPLE if pack_length else 1)
        stream.micro_batch(0, 0)
        digest = hashlib.sha256()
        seconds = []
        for step in range(args.batches):
            start = time.perf_counter()
            batch = stream.micro_batch(step, 0)
            seconds.append(time.perf_counter() - start)
            for name in sorted(batch):
                tensor = batch[name]
                digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
                digest.update(tensor.numpy().tobytes())
        print(json.dumps({"layout": "packed" if pack_length else "padded", "batches": args.batches,
                          "median_ms": round(1000 * statistics.median(seconds), 3),
                          "mean_ms": round(1000 * statistics.fmean(seconds), 3),
                          "received_ms": received_ms(stream, args.received),
                          "sha256": digest.hexdigest()[:16]}))


if __name__ == "__main__":
    main()
